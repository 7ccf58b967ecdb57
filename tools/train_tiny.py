#!/usr/bin/env python3
"""Train flashdelta's small real models from scratch on one GPU: a byte-level BPE tokenizer, a qwen3_5 target
(Qwen3_5ForCausalLM: Gated DeltaNet + gated attention layers) and a DFlash drafter (DFlashDraftModel) for it.

Run on the GPU machine (torch + transformers 5.17 + tokenizers; the z-lab reference `dflash/model.py` under
--ref provides the drafter's nn.Module only; the training loops are this file's):

    PYTHONUNBUFFERED=1 python3 tools/train_tiny.py --ref .dev/ref --out /tmp/fd --seed 1234

Data: the Python source of the packages installed next to torch (site-packages), split by file into train and
validation (crc32 of the relative path). Stages, each writing its outputs as soon as it is done, so that a later
failure or a wall-clock stop keeps what came before:
  1. tokenizer: byte-level BPE (Qwen-style split regex, NFC, ChatML specials + <|mask|>) -> OUT/tokenizer.json
  2. target: Qwen3_5ForCausalLM, bf16 autocast, AdamW, cosine schedule -> OUT/tiny-qwen35/ (bf16)
  3. drafter: DFlash recipe. The frozen target extends training prompts greedily; the drafter learns to predict the
     target's own greedy tokens: per anchor a, the block [x_a, MASK x (B-1)] at positions a..a+B-1 attends
     (non-causally) to itself and to the target's tapped hidden states of tokens 0..a-1; labels are the target's
     argmax at a..a+B-2, position k weighted exp(-(k-1)/gamma) -> OUT/tiny-qwen35-dflash/ (bf16)
  4. eval: validation loss, the drafter's acceptance estimate on held-out greedy continuations, and reference values
     computed on CPU in float32 from the saved files (logits, greedy ids, draft logits) -> OUT/eval/
Determinism: every random choice is seeded from --seed, and the step counts default to the shipped run's (988 target
steps, 1381 drafter steps), so a replay runs the same schedule on any machine. --target-steps 0 / --draft-steps 0
instead fit as many steps as the wall-clock budgets (--target-end, --draft-end) allow, after a short timing run.
(The shipped drafter was then rebuilt by tools/train_drafter.py, also with fixed step counts.)
"""
import time

T0 = time.time()  # budgets are measured from process start, imports included

import argparse
import hashlib
import itertools
import json
import math
import os
import sys
import traceback

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (set before torch loads it)

import torch
import torch.nn.functional as F

from tiny_data import QWEN_SPLIT, SPECIALS, collect_sources, pick_prompts, train_tokenizer  # noqa: E402,F401
from tiny_models import (FULL, LIN, Taps, autocast, cosine_lr, dir_bytes, draft_batch, draft_config,  # noqa: E402,F401
                         eval_loss, greedy_extend, n_params, param_groups, seeded_torch, stage_runner, target_config)


def now():
    return time.time() - T0


def log(*a):
    print(f"[{now():6.1f}s]", *a, flush=True)


# ------------------------------------------------------------------------------------------------------------------
# data


def encode_stream(tok, texts, sep_id, deadline, batch=512):
    """Token ids of the texts joined by <|endoftext|>, as one int32 tensor; stops early at the deadline."""
    enc = getattr(tok, "encode_batch_fast", None) or tok.encode_batch
    chunks, used = [], 0
    for i in range(0, len(texts), batch):
        if now() > deadline and i >= 8 * batch:
            break
        for e in enc(texts[i:i + batch], add_special_tokens=False):
            chunks.append(torch.tensor(e.ids + [sep_id], dtype=torch.int32))
        used = min(i + batch, len(texts))
    return (torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int32)), used


# ------------------------------------------------------------------------------------------------------------------
# models


def make_target(cfg):
    from transformers import Qwen3_5ForCausalLM
    # eager attention: SDPA's cuDNN backward (and flash / mem-efficient backwards) accumulate with atomics, so two
    # runs with the same seed gave different weights (tools/check_rebuild_determinism.sh found it)
    try:
        return Qwen3_5ForCausalLM._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        log("_from_config failed, plain constructor:", repr(e))
        return Qwen3_5ForCausalLM(cfg)


# ------------------------------------------------------------------------------------------------------------------
# stage 2: target


def train_target(model, train, val, a, gen, man):
    dev = train.device
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    model.train()
    V = model.config.vocab_size
    total = a.target_steps or 10 ** 9
    ar = torch.arange(a.seq + 1, device=dev)
    t_start, t_cal, losses, step = now(), None, [], 0
    while step < total:
        if not a.target_steps and now() > a.target_end:  # fixed step counts never stop on the clock
            log(f"target: wall-clock budget reached at step {step}")
            break
        lr = cosine_lr(step, total if total < 10 ** 9 else 10 ** 6, a.lr, a.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        offs = torch.randint(0, train.numel() - a.seq - 1, (a.batch,), device=dev, generator=gen)
        b = train[offs[:, None] + ar].long()
        with autocast():
            logits = model(input_ids=b[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, V), b[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 5:
            torch.cuda.synchronize()
            t_cal = now()
        if step == 25 and not a.target_steps:
            torch.cuda.synchronize()
            per = (now() - t_cal) / 20
            total = 25 + int((a.target_end - now()) / per)
            log(f"target: {per * 1000:.1f} ms/step, {a.batch * a.seq / per / 1e3:.0f}K tok/s -> {total} steps")
        if step % 50 == 0:
            losses.append((step, loss.item()))
        if step % 200 == 0:
            log(f"target step {step}/{total} loss {losses[-1][1]:.3f} lr {lr:.2e}")
    torch.cuda.synchronize()
    wall = now() - t_start
    tail = [l for s, l in losses[-4:]]
    man["target"].update(steps=step, tokens=step * a.batch * a.seq, wall_s=round(wall, 1),
                         tok_per_s=round(step * a.batch * a.seq / max(wall, 1e-9)),
                         final_train_loss=round(sum(tail) / max(1, len(tail)), 4), loss_curve=losses[::4])
    log(f"target: {step} steps in {wall:.1f}s; train loss {man['target']['final_train_loss']}")


# ------------------------------------------------------------------------------------------------------------------
# stage 3: drafter


def make_pool(target, stream, n, P, G, gen, deadline, chunk):
    """Sequences of P stream tokens + G greedy target tokens; stops early at the deadline."""
    seqs, ar = [], torch.arange(P, device=stream.device)
    while not seqs or (sum(s.shape[0] for s in seqs) < n and now() < deadline):
        offs = torch.randint(0, stream.numel() - P, (chunk,), device=stream.device, generator=gen)
        seqs.append(greedy_extend(target, stream[offs[:, None] + ar].long(), G))
    return torch.cat(seqs)


def train_draft(target, draft, pool, val_pool, a, gen, mask_id, man):
    B = a.block
    weights = torch.tensor([0.0] + [math.exp(-(k - 1) / a.gamma) for k in range(1, B)], device=pool.device)
    taps = Taps(target, a.taps)
    opt = torch.optim.AdamW(draft.parameters(), lr=a.draft_lr, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
    draft.train()
    total = a.draft_steps or 10 ** 9
    t_start, t_cal, hist, step = now(), None, [], 0
    while step < total:
        if not a.draft_steps and now() > a.draft_end:
            log(f"drafter: wall-clock budget reached at step {step}")
            break
        lr = cosine_lr(step, total if total < 10 ** 9 else 10 ** 6, a.draft_lr, 30)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, pool.shape[0], (a.draft_batch,), device=pool.device, generator=gen)
        loss, acc = draft_batch(target, draft, taps, pool[idx], a.prompt_len, B, a.anchors, mask_id, gen, weights)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        step += 1
        if step == 5:
            torch.cuda.synchronize()
            t_cal = now()
        if step == 25 and not a.draft_steps:
            torch.cuda.synchronize()
            per = (now() - t_cal) / 20
            total = 25 + int((a.draft_end - now()) / per)
            log(f"drafter: {per * 1000:.1f} ms/step -> {total} steps")
        if step % 25 == 0:
            hist.append((step, round(loss.item(), 4), round(1 + acc.float().mean().item(), 3)))
        if step % 100 == 0:
            log(f"drafter step {step}/{total} loss {hist[-1][1]:.3f} tau(train) {hist[-1][2]:.2f}")
    wall = now() - t_start
    # held-out estimate: greedy continuations of validation prompts, every anchor position once per pass
    draft.eval()
    accs, vloss = [], []
    with torch.no_grad():
        for i in range(0, val_pool.shape[0], a.draft_batch):
            l, acc = draft_batch(target, draft, taps, val_pool[i:i + a.draft_batch], a.prompt_len, B, a.anchors,
                                 mask_id, gen, weights)
            accs.append(acc.flatten())
            vloss.append(l.item())
    taps.remove()
    acc = torch.cat(accs).float()
    per_pos = [round((acc >= j).float().mean().item(), 4) for j in range(1, B)]
    tail = hist[-4:]
    man["drafter"].update(
        steps=step, sequences=step * a.draft_batch, blocks=step * a.draft_batch * a.anchors, wall_s=round(wall, 1),
        final_train_loss=round(sum(h[1] for h in tail) / max(1, len(tail)), 4),
        final_train_tau=round(sum(h[2] for h in tail) / max(1, len(tail)), 3), history=hist[::2],
        val_loss=round(sum(vloss) / max(1, len(vloss)), 4), val_blocks=int(acc.numel()),
        val_tau_teacher_forced=round(1 + acc.mean().item(), 3), val_accept_rate_by_position=per_pos)
    log(f"drafter: {step} steps in {wall:.1f}s; val tau (teacher-forced greedy blocks) "
        f"{man['drafter']['val_tau_teacher_forced']}, per position {per_pos}")


# ------------------------------------------------------------------------------------------------------------------
# stage 4: CPU float32 reference values from the saved files


def cpu_reference(out, tdir, ddir, prompts, DFlashDraftModel, man, n_greedy, n_rows):
    from transformers import AutoModelForCausalLM, DynamicCache
    torch.set_grad_enabled(False)
    edir = os.path.join(out, "eval")
    os.makedirs(edir, exist_ok=True)
    target = AutoModelForCausalLM.from_pretrained(tdir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = prompts[0]["ids"]
    n = len(ids)
    logits = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    logits[-n_rows:].numpy().astype("<f4").tofile(os.path.join(edir, "logits_tail.f32"))
    greedy, seq = [], list(ids)
    for _ in range(n_greedy):  # no-cache greedy: each step one full forward
        nxt = int(target(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
        greedy.append(nxt)
        seq.append(nxt)
    ref = dict(prompt_index=0, n_prompt=n, vocab_size=logits.shape[-1], logits_tail_rows=n_rows,
               logits_tail_first_position=n - n_rows, argmax=[int(x) for x in logits.argmax(-1)],
               greedy=greedy, greedy_source="no-cache argmax loop, CPU float32, eager attention")
    if ddir and os.path.isdir(ddir):
        draft = DFlashDraftModel.from_pretrained(ddir, dtype=torch.float32).eval()
        draft.config._attn_implementation = "eager"
        B, mask_id, tl = draft.block_size, draft.mask_token_id, draft.target_layer_ids
        taps = Taps(target, tl)
        lg = target(input_ids=torch.tensor([ids]), use_cache=False).logits
        ctx = taps.cat()
        taps.remove()
        anchor = int(lg[0, -1].argmax())
        block = torch.full((1, B), mask_id, dtype=torch.long)
        block[0, 0] = anchor
        h = draft(target_hidden=ctx, noise_embedding=target.model.embed_tokens(block),
                  position_ids=torch.arange(0, n + B).unsqueeze(0), past_key_values=DynamicCache(), use_cache=True,
                  is_causal=False)
        d1 = target.lm_head(h[:, 1 - B:, :])[0].float()
        d1.numpy().astype("<f4").tofile(os.path.join(edir, "draft_logits.f32"))
        ref.update(draft_anchor=anchor, draft_block_size=B, draft_argmax=[int(x) for x in d1.argmax(-1)],
                   draft_greedy_prefix_match=sum(1 for _ in itertools.takewhile(
                       lambda p: p[0] == p[1], zip(d1.argmax(-1).tolist(), greedy[1:]))))
    json.dump(ref, open(os.path.join(edir, "expected.json"), "w"), indent=1)
    man["reference"] = {k: v for k, v in ref.items() if k not in ("argmax",)}
    log("cpu reference:", json.dumps({k: ref[k] for k in ref if k not in ("argmax", "greedy")}))


# ------------------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ref", required=True, help="folder holding dflash/model.py (z-lab reference)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-root", default=None, help="default: the site-packages folder that holds torch")
    ap.add_argument("--train-mb", type=float, default=150.0, help="characters of train text to read (millions)")
    ap.add_argument("--val-per-mille", type=int, default=20)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--tok-train-mb", type=float, default=12.0)
    ap.add_argument("--encode-until", type=float, default=1e9,
                    help="stop tokenizing train text at this time (s); default none (the shipped run tokenized all)")
    # target
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--inter", type=int, default=576)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--gdn-k-heads", type=int, default=3)
    ap.add_argument("--gdn-v-heads", type=int, default=6)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--target-steps", type=int, default=988,
                    help="optimizer steps (default: the shipped run's); 0: as many as fit before --target-end")
    ap.add_argument("--target-end", type=float, default=195.0, help="stop target training at this time (s)")
    # drafter
    ap.add_argument("--draft-layers", type=int, default=2)
    ap.add_argument("--draft-inter", type=int, default=384)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--taps", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 5])
    ap.add_argument("--gamma", type=float, default=4.0, help="loss weight of block position k: exp(-(k-1)/gamma)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--pool", type=int, default=8192)
    ap.add_argument("--pool-chunk", type=int, default=1024)
    ap.add_argument("--pool-until", type=float, default=1e9, help="pool deadline (s); default none")
    ap.add_argument("--anchors", type=int, default=24)
    ap.add_argument("--draft-batch", type=int, default=64)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--draft-steps", type=int, default=1381, help="0: as many as fit before --draft-end")
    ap.add_argument("--draft-end", type=float, default=268.0)
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    tdir, ddir = os.path.join(a.out, "tiny-qwen35"), os.path.join(a.out, "tiny-qwen35-dflash")
    import tokenizers
    import transformers
    me = os.path.abspath(__file__)
    man = dict(script="tools/train_tiny.py", script_sha256=hashlib.sha256(open(me, "rb").read()).hexdigest(),
               argv=sys.argv[1:], seed=a.seed, args=vars(a),
               versions=dict(python=sys.version.split()[0], torch=torch.__version__,
                             transformers=transformers.__version__, tokenizers=tokenizers.__version__),
               device=torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
               target={}, drafter={}, stages={})

    def save_manifest():
        man["total_wall_s"] = round(now(), 1)
        json.dump(man, open(os.path.join(a.out, "manifest.json"), "w"), indent=1)

    stage = stage_runner(man, save_manifest)
    dev = seeded_torch(a.seed)
    st = {}

    # ---- 1. data + tokenizer
    def s_data():
        root = a.data_root or os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__)))
        train_t, val_t, stats = collect_sources(root, a.seed, int(a.train_mb * 1e6), a.val_per_mille)
        log("data:", json.dumps(stats))
        tok, tstats = train_tokenizer(train_t, a.vocab, int(a.tok_train_mb * 1e6))
        tok.save(os.path.join(a.out, "tokenizer.json"))
        V = tok.get_vocab_size()
        ids = {s: tok.token_to_id(s) for s in SPECIALS}
        log(f"tokenizer: {V} tokens, specials {ids}")
        train_ids, used = encode_stream(tok, train_t, ids["<|endoftext|>"], a.encode_until)
        val_ids, _ = encode_stream(tok, val_t, ids["<|endoftext|>"], 1e9)
        stats.update(tstats, train_files_tokenized=used, train_tokens=int(train_ids.numel()),
                     val_tokens=int(val_ids.numel()),
                     chars_per_token=round(sum(len(t) for t in train_t[:used]) / max(1, train_ids.numel()), 3))
        man["data"], man["tokenizer"] = stats, dict(vocab_size=V, special_ids=ids, split_regex=QWEN_SPLIT,
                                                    normalizer="NFC")
        log(f"tokens: train {train_ids.numel()} ({used} files), val {val_ids.numel()}")
        st.update(tok=tok, V=V, ids=ids, train=train_ids.to(dev), val=val_ids.to(dev), val_texts=val_t)
        st["prompts"] = pick_prompts(tok, val_t, 8, a.prompt_len, a.seed)
        json.dump(st["prompts"], open(os.path.join(a.out, "val_prompts.json"), "w"))

    if not stage("data_tokenizer", s_data):
        return 1

    # ---- 2. target
    def s_target():
        V = st["V"]
        V_model = (V + 63) // 64 * 64
        cfg = target_config(V_model, a)
        torch.manual_seed(a.seed)
        model = make_target(cfg).to(dev)
        man["target"].update(params=n_params(model), vocab_size=V_model, config_layer_types=cfg.layer_types)
        log(f"target: {n_params(model) / 1e6:.2f}M params, layers {cfg.layer_types}")
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed)
        train_target(model, st["train"], st["val"], a, gen, man)
        man["target"]["val_loss"] = round(eval_loss(model, st["val"], a.seq, 128), 4)
        log(f"target: val loss {man['target']['val_loss']} nats/token")
        model.to(torch.bfloat16).save_pretrained(tdir)
        st["tok"].save(os.path.join(tdir, "tokenizer.json"))
        man["target"]["bytes"] = dir_bytes(tdir)
        # the shipped (bf16) weights' validation loss
        man["target"]["val_loss_bf16_weights"] = round(eval_loss(model, st["val"], a.seq, 128), 4)
        model.eval().requires_grad_(False)
        st["target"] = model

    ok_target = stage("target", s_target)

    # ---- 3. drafter
    def s_draft():
        sys.path.insert(0, a.ref)
        from dflash.model import DFlashDraftModel
        st["DFlash"] = DFlashDraftModel
        target = st["target"]
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed + 1)
        t = now()
        try:
            pool = make_pool(target, st["train"], a.pool, a.prompt_len, a.gen_len, gen, a.pool_until, a.pool_chunk)
            vpool = make_pool(target, st["val"], 256, a.prompt_len, a.gen_len, gen, 1e9, 256)
            man["drafter"]["labels"] = "target greedy continuations (prompt from data, then greedy tokens)"
        except Exception as e:  # noqa: BLE001  (fallback: teacher-forced target argmax on data windows)
            traceback.print_exc()
            L = a.prompt_len + a.gen_len
            ar = torch.arange(L, device=dev)
            pool = st["train"][torch.randint(0, st["train"].numel() - L, (a.pool,), device=dev,
                                             generator=gen)[:, None] + ar].long()
            vpool = st["val"][torch.randint(0, st["val"].numel() - L, (256,), device=dev,
                                            generator=gen)[:, None] + ar].long()
            man["drafter"]["labels"] = f"target argmax on data windows (greedy generation failed: {e!r})"[:300]
        man["drafter"].update(pool_sequences=int(pool.shape[0]), pool_seq_len=int(pool.shape[1]),
                              pool_wall_s=round(now() - t, 1), val_pool_sequences=int(vpool.shape[0]))
        log(f"drafter pool: {pool.shape} + val {vpool.shape} in {now() - t:.1f}s")
        cfg = draft_config(target.config.vocab_size, target.config, a, st["ids"]["<|mask|>"])
        torch.manual_seed(a.seed + 2)
        draft = DFlashDraftModel(cfg).to(dev)
        draft.config._attn_implementation = "eager"
        man["drafter"].update(params=n_params(draft), block_size=a.block, target_layer_ids=a.taps,
                              mask_token_id=st["ids"]["<|mask|>"], gamma=a.gamma, anchors_per_seq=a.anchors)
        log(f"drafter: {n_params(draft) / 1e6:.2f}M params, taps {a.taps}")
        train_draft(target, draft, pool, vpool, a, gen, st["ids"]["<|mask|>"], man)
        draft.to(torch.bfloat16).save_pretrained(ddir)
        man["drafter"]["bytes"] = dir_bytes(ddir)

    if ok_target:
        stage("drafter", s_draft)

    # ---- 4. CPU float32 reference values
    def s_ref():
        DF = st.get("DFlash")
        if DF is None:
            sys.path.insert(0, a.ref)
            from dflash.model import DFlashDraftModel as DF
        cpu_reference(a.out, tdir, ddir, st["prompts"], DF, man, 32, 8)

    if ok_target:
        stage("cpu_reference", s_ref)
    save_manifest()
    log("done; manifest:", json.dumps({k: man[k] for k in ("target", "drafter", "stages")})[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
