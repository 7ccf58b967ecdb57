#!/usr/bin/env python3
"""Rebuild only the DFlash drafter of models/tiny-qwen35 (issue 7): the committed target is loaded, never changed.

    PYTHONUNBUFFERED=1 python3 tools/train_drafter.py --ref .dev/ref --out /tmp/fdd --seed 1234 [--smoke]

Differences from tools/train_tiny.py's drafter stage (whose helpers this file imports):
  * a pool 8x larger (65,536 greedy continuations of 64 tokens, generated in chunks of 8,192 with the KV/recurrent
    cache; the prefill keeps only the last logits), so training sees each anchor about twice instead of ~11 times;
  * soft labels: the target's temperature-1 distribution at position a+k-1 (from the same forward that gives the
    taps) is a second cross-entropy target, mixed with the hard greedy label: (1-soft)*CE(hard) + soft*CE(p_target);
  * fixed step counts (no wall-clock budgets), seeded generators, deterministic torch settings;
  * validation: teacher-forced tau on held-out greedy continuations AND the real DFlash loop (draft -> verify with
    the target -> accept the agreeing prefix + bonus, the engine's accounting) on held-out prompts;
  * the CPU float32 reference values test_trained.c reads, recomputed from the saved files.
Outputs under --out: tiny-qwen35-dflash/, eval/{expected.json,draft_logits.f32,logits_tail.f32}, manifest_drafter.json.
"""
import time

T0 = time.time()

import argparse
import hashlib
import json
import math
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_tiny as tt  # noqa: E402  (shared helpers: data, configs, taps, CPU reference)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(*a):
    print(f"[{time.time() - T0:6.1f}s]", *a, flush=True)


def make_pool(target, stream, n, P, G, gen, chunk):
    """n sequences: P stream tokens (random windows) + G greedy target tokens. Returns (pool, stats)."""
    torch.cuda.synchronize()
    t = time.time()
    seqs, ar = [], torch.arange(P, device=stream.device)
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        offs = torch.randint(0, stream.numel() - P, (m,), device=stream.device, generator=gen)
        seqs.append(tt.greedy_extend(target, stream[offs[:, None] + ar].long(), G, logits_to_keep=1))
    pool = torch.cat(seqs)
    torch.cuda.synchronize()
    wall = time.time() - t
    return pool, dict(sequences=n, seq_len=P + G, generated_tokens=n * G, wall_s=round(wall, 1),
                      generated_tok_per_s=round(n * G / max(wall, 1e-9)), chunk=chunk)


def block_mask(N, A, B, L, starts, dev):
    """Additive mask [N, 1, A*B, L + A*B]: block queries see context tokens < their anchor and their own block."""
    Q = A * B
    ctx_ok = torch.arange(L, device=dev)[None, None, :] < starts[:, :, None]
    ctx_ok = ctx_ok[:, :, None, :].expand(N, A, B, L).reshape(N, Q, L)
    bid = torch.arange(Q, device=dev) // B
    blk_ok = (bid[:, None] == bid[None, :]).expand(N, Q, Q)
    allowed = torch.cat([ctx_ok, blk_ok], -1)
    return torch.zeros(allowed.shape, device=dev, dtype=torch.bfloat16).masked_fill(~allowed, -1e9)[:, None]


def run_draft(target, draft, ctx, blk, starts, B):
    """Drafter logits [N, A, B, V] for blocks blk [N, A, B] anchored at starts [N, A] over context ctx [N, L, .]."""
    N, A, _ = blk.shape
    L, dev = ctx.shape[1], blk.device
    pos = torch.cat([torch.arange(L, device=dev).expand(N, L), (starts[:, :, None] + torch.arange(B, device=dev))
                     .reshape(N, -1)], 1)
    with tt.autocast():
        emb = target.model.embed_tokens(blk.view(N, A * B))
        h = draft(position_ids=pos, attention_mask=block_mask(N, A, B, L, starts, dev), noise_embedding=emb,
                  target_hidden=ctx)
        return target.lm_head(h).float().view(N, A, B, -1)


def draft_batch(target, draft, taps, seqs, P, B, n_anchor, mask_id, gen, weights, soft):
    """One training/validation batch. Returns (loss, accepted-length tensor [N, A])."""
    N, L = seqs.shape
    dev = seqs.device
    with torch.no_grad(), tt.autocast():
        tlogits = target(input_ids=seqs, use_cache=False).logits
        ctx = taps.cat()
    span = L - B - P + 1
    a = torch.rand(N, span, device=dev, generator=gen).argsort(-1)[:, :n_anchor] + P  # anchors in the generated part
    k = torch.arange(B, device=dev)
    src = (a[:, :, None] + (k - 1).clamp(min=0)).reshape(N, -1)  # position whose target output labels slot k
    blk = torch.full((N, n_anchor, B), mask_id, dtype=torch.long, device=dev)
    blk[:, :, 0] = seqs.gather(1, a)
    V = tlogits.shape[-1]
    tl = tlogits.gather(1, src[:, :, None].expand(-1, -1, V)).float().view(N, n_anchor, B, V)
    lab = tl.argmax(-1)
    dl = run_draft(target, draft, ctx, blk, a, B)
    logq = F.log_softmax(dl, -1)
    ce = -logq.gather(-1, lab[..., None])[..., 0]
    if soft > 0:
        ce = (1 - soft) * ce + soft * -(F.softmax(tl, -1) * logq).sum(-1)
    loss = (ce * weights).sum() / (weights.sum() * N * n_anchor)
    with torch.no_grad():
        ok = (dl.argmax(-1)[:, :, 1:] == lab[:, :, 1:]).long()
        acc_len = ok.cumprod(-1).sum(-1)
    return loss, acc_len


@torch.no_grad()
def dflash_loop(target, draft, taps, prompts, n_new, B, mask_id):
    """The real greedy DFlash loop, batched over prompts [N, P] (right-padded: the target is causal, so tokens after
    a row's block change nothing before it). Each round: draft B-1 tokens after the anchor from the taps of the
    committed tokens, verify [anchor, drafts] with a target forward (no cache: exact for GDN layers too), accept the
    agreeing prefix + the target's next token. Same accounting as the engine's dflash_generate: the prefill gives
    token 1, a round verifies min(B, n_new - produced) tokens. Returns (per-prompt emitted/round, total rounds)."""
    N, P = prompts.shape
    dev = prompts.device
    buf = torch.zeros(N, P + n_new + B, dtype=torch.long, device=dev)
    buf[:, :P] = prompts
    with tt.autocast():
        lg = target(input_ids=prompts, use_cache=False).logits
    ctx = taps.cat()
    buf[:, P] = lg[:, -1].argmax(-1)
    start = [P] * N  # position of each row's anchor (first token the drafter does not see)
    produced, rounds, emitted = [1] * N, [0] * N, [0] * N
    while True:
        live = [i for i in range(N) if produced[i] < n_new]
        if not live:
            break
        st = torch.tensor(start, device=dev)[:, None]
        blk = torch.full((N, 1, B), mask_id, dtype=torch.long, device=dev)
        blk[:, 0, 0] = buf.gather(1, st)[:, 0]
        drafts = run_draft(target, draft, ctx, blk, st, B).argmax(-1)[:, 0, 1:]  # [N, B-1]
        cand = buf.clone()
        idx = st + torch.arange(1, B, device=dev)
        cand.scatter_(1, idx, drafts)
        end = max(start) + B
        with tt.autocast():
            pred = target(input_ids=cand[:, :end], use_cache=False).logits.argmax(-1)
        ctx = taps.cat()
        pred, cand_c = pred.cpu(), cand.cpu()
        for i in live:
            s, Lv = start[i], min(B, n_new - produced[i])
            acc = 0
            while acc < Lv - 1 and int(cand_c[i, s + 1 + acc]) == int(pred[i, s + acc]):
                acc += 1
            nxt = int(pred[i, s + acc])
            buf[i, s + 1:s + 1 + acc] = cand[i, s + 1:s + 1 + acc]
            buf[i, s + acc + 1] = nxt
            start[i] = s + acc + 1
            produced[i] += acc + 1
            rounds[i] += 1
            emitted[i] += acc + 1
        # rows already done keep a stale start; their anchor stays valid and their results are ignored
    return [emitted[i] / max(1, rounds[i]) for i in range(N)], sum(rounds), sum(emitted)


def evaluate(target, draft, taps, vpool, prompt_sets, a, mask_id, weights, gen):
    draft.eval()
    res = {}
    accs, vloss = [], []
    with torch.no_grad():
        for i in range(0, vpool.shape[0], a.draft_batch):
            l, acc = draft_batch(target, draft, taps, vpool[i:i + a.draft_batch], a.prompt_len, a.block,
                                 a.anchors, mask_id, gen, weights, a.soft)
            accs.append(acc.flatten())
            vloss.append(l.item())
    acc = torch.cat(accs).float()
    res["val_loss"] = round(sum(vloss) / max(1, len(vloss)), 4)
    res["val_blocks"] = int(acc.numel())
    res["val_tau_teacher_forced"] = round(1 + acc.mean().item(), 3)
    res["val_accept_rate_by_position"] = [round((acc >= j).float().mean().item(), 4) for j in range(1, a.block)]
    for name, pr in prompt_sets.items():
        per, r, e = dflash_loop(target, draft, taps, pr, a.e2e_new, a.block, mask_id)
        res[f"e2e_{name}"] = dict(prompts=int(pr.shape[0]), n_new=a.e2e_new, rounds=r,
                                  emitted_per_round_overall=round(e / max(1, r), 3),
                                  emitted_per_round_per_prompt=[round(x, 3) for x in per])
    draft.train()
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref", required=True, help="folder holding dflash/model.py (z-lab reference)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--target-dir", default=os.path.join(REPO, "models", "tiny-qwen35"))
    ap.add_argument("--val-prompts", default=os.path.join(REPO, "tests", "data", "trained", "val_prompts.json"))
    ap.add_argument("--data-root", default=None, help="default: the site-packages folder that holds torch")
    ap.add_argument("--train-mb", type=float, default=150.0, help="characters of train text to tokenize (millions)")
    ap.add_argument("--val-per-mille", type=int, default=20, help="same split as train_tiny.py")
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--draft-inter", type=int, default=512)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--taps", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 5])
    ap.add_argument("--gamma", type=float, default=4.0, help="loss weight of block position k: exp(-(k-1)/gamma)")
    ap.add_argument("--soft", type=float, default=0.5, help="weight of the soft-label CE (0: hard labels only)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--pool", type=int, default=131072)
    ap.add_argument("--pool-chunk", type=int, default=8192)
    ap.add_argument("--val-pool", type=int, default=512)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--draft-batch", type=int, default=128)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--draft-steps", type=int, default=4000)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--e2e-prompts", type=int, default=64, help="extra held-out prompts for the DFlash loop")
    ap.add_argument("--e2e-new", type=int, default=64)
    ap.add_argument("--smoke", action="store_true", help="every stage with tiny counts (< 60 s)")
    a = ap.parse_args()
    if a.smoke:
        a.train_mb, a.pool, a.pool_chunk, a.val_pool, a.draft_steps, a.eval_every = 3.0, 512, 256, 64, 12, 6
        a.e2e_prompts, a.e2e_new, a.draft_batch, a.warmup = 4, 24, 32, 4

    os.makedirs(a.out, exist_ok=True)
    ddir = os.path.join(a.out, "tiny-qwen35-dflash")
    import tokenizers
    import transformers
    man = dict(script="tools/train_drafter.py",
               script_sha256=hashlib.sha256(open(os.path.abspath(__file__), "rb").read()).hexdigest(),
               shared_helpers_sha256=hashlib.sha256(open(tt.__file__, "rb").read()).hexdigest(),
               argv=sys.argv[1:], seed=a.seed, args=vars(a),
               versions=dict(python=sys.version.split()[0], torch=torch.__version__,
                             transformers=transformers.__version__, tokenizers=tokenizers.__version__),
               device=torch.cuda.get_device_name(0), drafter={}, stages={})

    def save_manifest():
        man["total_wall_s"] = round(time.time() - T0, 1)
        json.dump(man, open(os.path.join(a.out, "manifest_drafter.json"), "w"), indent=1)

    stage = tt.stage_runner(man, save_manifest)
    dev = tt.seeded_torch(a.seed)
    sys.path.insert(0, a.ref)
    from dflash.model import DFlashDraftModel
    st = {}

    def s_load():
        from tokenizers import Tokenizer
        from transformers import AutoModelForCausalLM
        tok = Tokenizer.from_file(os.path.join(a.target_dir, "tokenizer.json"))
        ids = {s: tok.token_to_id(s) for s in tt.SPECIALS}
        root = a.data_root or os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
        train_t, val_t, stats = tt.collect_sources(root, a.seed, int(a.train_mb * 1e6), a.val_per_mille)
        train_ids, used = tt.encode_stream(tok, train_t, ids["<|endoftext|>"], 1e9)
        val_ids, _ = tt.encode_stream(tok, val_t, ids["<|endoftext|>"], 1e9)
        stats.update(train_tokens=int(train_ids.numel()), val_tokens=int(val_ids.numel()))
        man["data"] = stats
        log("data:", json.dumps(stats))
        # eager attention, as train_tiny.py's drafter stage (bitwise repeatable there): with SDPA two same-seed runs
        # of this script trained different drafters (tools/check_rebuild_determinism.sh)
        target = AutoModelForCausalLM.from_pretrained(a.target_dir, dtype=torch.float32,
                                                      attn_implementation="eager").to(dev).eval()
        target.requires_grad_(False)
        man["target"] = dict(dir=a.target_dir, safetensors_sha256=hashlib.sha256(
            open(os.path.join(a.target_dir, "model.safetensors"), "rb").read()).hexdigest(), params=tt.n_params(target))
        prompts = json.load(open(a.val_prompts))
        st.update(tok=tok, ids=ids, train=train_ids.to(dev), val=val_ids.to(dev), target=target, prompts=prompts)

    if not stage("load", s_load):
        return 1

    def s_pool():
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed + 1)
        pool, ps = make_pool(st["target"], st["train"], a.pool, a.prompt_len, a.gen_len, gen, a.pool_chunk)
        log("pool:", json.dumps(ps))
        vpool, vs = make_pool(st["target"], st["val"], a.val_pool, a.prompt_len, a.gen_len, gen,
                              min(a.pool_chunk, a.val_pool))
        # held-out prompts for the DFlash loop: the engine's 8 (val_prompts.json) and more validation windows
        L = a.prompt_len
        ar = torch.arange(L, device=dev)
        offs = torch.randint(0, st["val"].numel() - L, (a.e2e_prompts,), device=dev, generator=gen)
        st["prompt_sets"] = {
            "val_prompts_json": torch.tensor([p["ids"][:L] for p in st["prompts"]], dtype=torch.long, device=dev),
            "val_windows": st["val"][offs[:, None] + ar].long()}
        man["pool"], man["val_pool"] = ps, vs
        st.update(pool=pool, vpool=vpool, gen=gen)

    if not stage("pool", s_pool):
        return 1

    def s_train():
        target, pool, gen = st["target"], st["pool"], st["gen"]
        mask_id = st["ids"]["<|mask|>"]
        cfg = tt.draft_config(target.config.vocab_size, target.config, a, mask_id)
        torch.manual_seed(a.seed + 2)
        draft = DFlashDraftModel(cfg).to(dev)
        draft.config._attn_implementation = "eager"
        B = a.block
        weights = torch.tensor([0.0] + [math.exp(-(k - 1) / a.gamma) for k in range(1, B)], device=dev)
        taps = tt.Taps(target, a.taps)
        man["drafter"].update(params=tt.n_params(draft), layers=a.draft_layers, intermediate=a.draft_inter,
                              block_size=B, target_layer_ids=a.taps, mask_token_id=mask_id, gamma=a.gamma,
                              soft=a.soft, anchors_per_seq=a.anchors, batch=a.draft_batch)
        log(f"drafter: {tt.n_params(draft) / 1e6:.3f}M params")
        opt = torch.optim.AdamW(draft.parameters(), lr=a.draft_lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
        draft.train()
        hist, evals = [], []
        torch.cuda.synchronize()
        t0 = time.time()
        for step in range(a.draft_steps):
            lr = tt.cosine_lr(step, a.draft_steps, a.draft_lr, a.warmup)
            for g in opt.param_groups:
                g["lr"] = lr
            idx = torch.randint(0, pool.shape[0], (a.draft_batch,), device=dev, generator=gen)
            loss, acc = draft_batch(target, draft, taps, pool[idx], a.prompt_len, B, a.anchors, mask_id, gen,
                                    weights, a.soft)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
            opt.step()
            if (step + 1) % 25 == 0:
                hist.append((step + 1, round(loss.item(), 4), round(1 + acc.float().mean().item(), 3)))
            if (step + 1) % 100 == 0:
                log(f"drafter step {step + 1}/{a.draft_steps} loss {hist[-1][1]:.3f} tau(train) {hist[-1][2]:.2f} "
                    f"{(time.time() - t0) / (step + 1) * 1000:.1f} ms/step")
            if (step + 1) % a.eval_every == 0 and step + 1 < a.draft_steps:
                egen = torch.Generator(device=dev)
                egen.manual_seed(a.seed + 3)
                r = evaluate(target, draft, taps, st["vpool"], st["prompt_sets"], a, mask_id, weights, egen)
                evals.append(dict(step=step + 1, **r))
                log(f"eval @ {step + 1}: {json.dumps(r)[:600]}")
        torch.cuda.synchronize()
        wall = time.time() - t0
        egen = torch.Generator(device=dev)
        egen.manual_seed(a.seed + 3)
        r = evaluate(target, draft, taps, st["vpool"], st["prompt_sets"], a, mask_id, weights, egen)
        taps.remove()
        tail = hist[-4:]
        seen = a.draft_steps * a.draft_batch
        man["drafter"].update(
            steps=a.draft_steps, sequences=seen, blocks=seen * a.anchors, wall_s=round(wall, 1),
            ms_per_step=round(wall / max(1, a.draft_steps) * 1000, 1),
            pool_passes=round(seen / pool.shape[0], 2),
            visits_per_anchor_position=round(seen * a.anchors / (pool.shape[0] * (a.gen_len - B + 1)), 2),
            final_train_loss=round(sum(h[1] for h in tail) / max(1, len(tail)), 4),
            final_train_tau=round(sum(h[2] for h in tail) / max(1, len(tail)), 3), history=hist[::2],
            evals=evals, **r)
        log(f"drafter: {a.draft_steps} steps in {wall:.1f}s; final eval {json.dumps(r)}")
        draft.to(torch.bfloat16).save_pretrained(ddir)
        man["drafter"]["bytes"] = tt.dir_bytes(ddir)
        st["target"] = None  # the CPU reference reloads both from the files
        torch.cuda.empty_cache()

    if not stage("drafter", s_train):
        return 1

    def s_ref():
        tt.cpu_reference(a.out, a.target_dir, ddir, st["prompts"], DFlashDraftModel, man, 32, 8)
        # the target's reference values must not change: compare with the committed ones
        cdir = os.path.join(REPO, "tests", "data", "trained")
        edir = os.path.join(a.out, "eval")
        same = {}
        if os.path.isdir(cdir):
            same["logits_tail.f32"] = open(os.path.join(cdir, "logits_tail.f32"), "rb").read() == open(
                os.path.join(edir, "logits_tail.f32"), "rb").read()
            old, new = json.load(open(os.path.join(cdir, "expected.json"))), json.load(open(
                os.path.join(edir, "expected.json")))
            for k in ("argmax", "greedy", "n_prompt", "logits_tail_first_position"):
                same[f"expected.{k}"] = old.get(k) == new.get(k)
        man["reference_target_unchanged"] = same
        log("target reference values identical to the committed ones:", json.dumps(same))

    stage("cpu_reference", s_ref)
    save_manifest()
    d = {k: v for k, v in man["drafter"].items() if k not in ("history", "evals")}
    log("done:", json.dumps(d)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
