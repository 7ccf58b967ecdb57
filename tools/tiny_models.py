"""train_tiny.py's model and training helpers: target/drafter configs, sizes, the LR schedule, optimizer
groups, seeding, the stage runner, autocast, validation loss, greedy extension, layer taps and the drafter
batch (split out of tools/train_tiny.py; that tool and tools/train_drafter.py use them through it)."""
import math
import os
import random
import time
import traceback

import torch
import torch.nn.functional as F

LIN, FULL = "linear_attention", "full_attention"


def target_config(V, a):
    from transformers import Qwen3_5TextConfig
    layer_types = [FULL if (i + 1) % 4 == 0 else LIN for i in range(a.layers)]
    return Qwen3_5TextConfig(
        vocab_size=V, hidden_size=a.hidden, intermediate_size=a.inter, num_hidden_layers=a.layers,
        layer_types=layer_types, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=64,
        linear_num_key_heads=a.gdn_k_heads, linear_num_value_heads=a.gdn_v_heads, linear_key_head_dim=64,
        linear_value_head_dim=64, linear_conv_kernel_dim=4, tie_word_embeddings=True, rms_norm_eps=1e-6,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [3, 3, 2], "mrope_interleaved": True},
    )


def draft_config(V, tcfg, a, mask_id):
    from transformers import Qwen3Config
    cfg = Qwen3Config(
        vocab_size=V, hidden_size=tcfg.hidden_size, intermediate_size=a.draft_inter,
        num_hidden_layers=a.draft_layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, head_dim=64,
        rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, tie_word_embeddings=False,
        attention_bias=False,
    )
    cfg.architectures = ["DFlashDraftModel"]
    cfg.block_size = a.block
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.dflash_config = {"target_layer_ids": a.taps, "mask_token_id": mask_id}
    cfg._attn_implementation = "eager"  # the training mask is an additive [Q, ctx + Q] tensor
    return cfg


def n_params(m):
    return sum(p.numel() for p in m.parameters())


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def cosine_lr(step, total, peak, warmup, floor=0.1):
    if step < warmup:
        return peak * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def param_groups(model, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim == 2 and "embed" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def seeded_torch(seed):
    """The seeds and torch settings both training scripts run under; returns the CUDA device. Bitwise replays:
    deterministic kernels where torch has a choice (e.g. the embedding backward sorts instead of adding atomically);
    warn_only so an op without a deterministic form still runs and names itself in the log
    (tools/check_rebuild_determinism.sh compares two runs)."""
    torch.manual_seed(seed)
    random.seed(seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    return torch.device("cuda")


def stage_runner(man, save_manifest):
    """stage(name, fn): runs fn, records its status and wall time in man["stages"], saves the manifest either way
    (a later failure keeps what came before); returns whether fn succeeded."""
    def stage(name, fn):
        t = time.time()
        try:
            fn()
            man["stages"][name] = dict(status="ok", wall_s=round(time.time() - t, 1))
            return True
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            man["stages"][name] = dict(status="failed", error=repr(e)[:500], wall_s=round(time.time() - t, 1))
            return False
        finally:
            save_manifest()
    return stage


def autocast():
    return torch.autocast("cuda", dtype=torch.bfloat16)


@torch.no_grad()
def eval_loss(model, val, seq, n_seq):
    """Mean next-token loss (nats) over n_seq consecutive windows of the validation stream."""
    model.eval()
    n = min(n_seq, (val.numel() - 1) // (seq + 1))
    tot, cnt = 0.0, 0
    for i in range(0, n, 32):
        idx = torch.arange(i, min(n, i + 32), device=val.device)[:, None] * (seq + 1) + torch.arange(seq + 1,
                                                                                                  device=val.device)
        b = val[idx].long()
        with autocast():
            logits = model(input_ids=b[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), b[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += b[:, 1:].numel()
    model.train()
    return tot / max(1, cnt)


@torch.no_grad()
def greedy_extend(target, prompts, n_new, logits_to_keep=0):
    """prompts [N, P] -> [N, P + n_new]: the target's greedy continuation (KV/recurrent cache). logits_to_keep as
    HF's (0: every position; train_drafter.py passes 1, train_tiny.py made its data with 0)."""
    with autocast():
        out = target(input_ids=prompts, use_cache=True, logits_to_keep=logits_to_keep)
        past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
        toks = [nxt]
        for _ in range(n_new - 1):
            out = target(input_ids=nxt[:, None], past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1].argmax(-1)
            toks.append(nxt)
    return torch.cat([prompts, torch.stack(toks, 1)], 1)


class Taps:
    """Forward hooks that keep the outputs of the tapped target layers (= HF hidden_states[i + 1])."""

    def __init__(self, target, ids):
        self.ids, self.out = ids, {}
        self.h = [target.model.layers[i].register_forward_hook(self._hook(i)) for i in ids]

    def _hook(self, i):
        def f(_m, _a, out):
            self.out[i] = out[0] if isinstance(out, tuple) else out
        return f

    def cat(self):
        return torch.cat([self.out[i] for i in self.ids], dim=-1)

    def remove(self):
        for h in self.h:
            h.remove()


def draft_batch(target, draft, taps, seqs, P, B, n_anchor, mask_id, gen, weights):
    """One DFlash training batch. Returns (weighted loss, accepted-length tensor [N, n_anchor])."""
    N, L = seqs.shape
    dev = seqs.device
    with torch.no_grad(), autocast():
        logits = target(input_ids=seqs, use_cache=False).logits
        greedy = logits.argmax(-1)  # greedy[t] = the target's prediction for token t + 1
        ctx = taps.cat()
    # anchors: n_anchor distinct positions in [P, L - B] per sequence
    span = L - B - P + 1
    a = torch.rand(N, span, device=dev, generator=gen).argsort(-1)[:, :n_anchor] + P  # [N, A]
    k = torch.arange(B, device=dev)
    pos_blk = (a[:, :, None] + k).reshape(N, -1)  # [N, Q]
    blk = torch.full((N, n_anchor, B), mask_id, dtype=torch.long, device=dev)
    blk[:, :, 0] = seqs.gather(1, a)
    # label of block position k >= 1: greedy[a + k - 1], the target's choice for token a + k (k = 0 has weight 0)
    lab = greedy.gather(1, (a[:, :, None] + (k - 1).clamp(min=0)).reshape(N, -1)).view(N, n_anchor, B)
    Q = n_anchor * B
    ctx_ok = (torch.arange(L, device=dev)[None, None, :] < a[:, :, None])  # context = tokens before the anchor
    ctx_ok = ctx_ok[:, :, None, :].expand(N, n_anchor, B, L).reshape(N, Q, L)
    bid = torch.arange(Q, device=dev) // B
    blk_ok = (bid[:, None] == bid[None, :]).expand(N, Q, Q)  # non-causal within the block
    allowed = torch.cat([ctx_ok, blk_ok], -1)
    mask = torch.zeros(allowed.shape, device=dev, dtype=torch.bfloat16).masked_fill(~allowed, -1e9)[:, None]
    pos = torch.cat([torch.arange(L, device=dev).expand(N, L), pos_blk], 1)
    with autocast():
        emb = target.model.embed_tokens(blk.view(N, Q))
        h = draft(position_ids=pos, attention_mask=mask, noise_embedding=emb, target_hidden=ctx)
        dl = target.lm_head(h).float()
    ce = F.cross_entropy(dl.reshape(-1, dl.shape[-1]), lab.reshape(-1), reduction="none").view(N, n_anchor, B)
    loss = (ce * weights).sum() / (weights.sum() * N * n_anchor)
    with torch.no_grad():
        ok = (dl.argmax(-1).view(N, n_anchor, B)[:, :, 1:] == lab[:, :, 1:]).long()
        acc_len = ok.cumprod(-1).sum(-1)
    return loss, acc_len
