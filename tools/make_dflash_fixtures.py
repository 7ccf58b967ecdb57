#!/usr/bin/env python3
"""Make tiny random DFlash drafters for the target fixtures and their expected draft logits, using the
z-lab `dflash` reference implementation (dflash/model.py) with HF transformers. Expected values come only
from that reference code.

The reference is not part of this repository. On the machine that runs this script, put the z-lab file
at REF/dflash/model.py (plus an empty __init__.py) and pass --ref REF:

    PYTHONUNBUFFERED=1 python3 tools/make_dflash_fixtures.py --ref .dev/ref --out /tmp/dfx

For each (target fixture, drafter) it writes OUT/NAME/ with the drafter's HF dir (config.json,
model.safetensors) and:
  draft.json        block size, taps, mask id, prompt length, anchor, the second-round commit
  draft_logits.f32  [(B-1) x vocab] f32: round 1 — target prefilled on the prompt, anchor = its argmax,
                    one draft forward on [anchor, MASK x (B-1)] with every prompt position as context
  draft_logits2.f32 [(B-1) x vocab] f32: round 2 — the draft cache cropped to the prompt, context extended
                    by the target taps of HF's greedy tokens g0..g{k-1} (k = commit), anchor g{k}
Everything runs on CPU in float32 (eager attention).
"""
import argparse
import json
import os
import sys
import traceback

import torch

DRAFTERS = [
    dict(name="qwen35_dense_tied_b8", target="qwen35_dense_tied", block=8, layers=2, taps=[1, 3],
         heads=4, kv_heads=2, head_dim=16, inter=96, dtype="bfloat16", theta=1e4, seed=11, commit=3),
    dict(name="qwen3_next_moe_b4", target="qwen3_next_moe", block=4, layers=1, taps=[0, 2],
         heads=2, kv_heads=1, head_dim=32, inter=64, dtype="float32", theta=1e6, seed=12, commit=2),
    dict(name="qwen35_moe_b16", target="qwen35_moe", block=16, layers=2, taps=[1, 2],
         heads=4, kv_heads=2, head_dim=16, inter=96, dtype="bfloat16", theta=1e4, seed=13, commit=5),
]
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def widen(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # standard Qwen3 RMSNorm: w * x, w around 1
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name == "fc.weight":
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


def taps_via_hooks(target, ids, layer_ids):
    """Returns (logits, taps) with taps captured as the outputs of the tapped decoder layers."""
    caught = {}
    layers = target.model.layers
    hooks = [layers[i].register_forward_hook(lambda m, a, out, i=i: caught.__setitem__(i, out[0] if isinstance(out, tuple) else out))
             for i in layer_ids]
    out = target(ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    taps = torch.cat([caught[i] for i in layer_ids], dim=-1)
    alt = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    return out.logits, taps, (taps - alt).abs().max().item()


def make(spec, fixtures, out_root, DFlashDraftModel):
    from transformers import AutoModelForCausalLM, DynamicCache, Qwen3Config
    tdir = os.path.join(fixtures, spec["target"])
    target = AutoModelForCausalLM.from_pretrained(tdir, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = json.load(open(os.path.join(tdir, "prompt.json")))
    V = target.config.vocab_size if hasattr(target.config, "vocab_size") else target.config.text_config.vocab_size
    tcfg = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    B, mask = spec["block"], V - 1
    cfg = Qwen3Config(
        vocab_size=V, hidden_size=tcfg.hidden_size, intermediate_size=spec["inter"],
        num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"],
        head_dim=spec["head_dim"], rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": spec["theta"]}, tie_word_embeddings=False,
        attention_bias=False,
    )
    cfg.architectures = ["DFlashDraftModel"]
    cfg.block_size = B
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.dflash_config = {"target_layer_ids": spec["taps"], "mask_token_id": mask}
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    draft = DFlashDraftModel(cfg).eval()
    widen(draft, spec["seed"])
    dt = DTYPES[spec["dtype"]]
    draft = draft.to(dt).to(torch.float32)  # round to the saved dtype, compute in fp32
    odir = os.path.join(out_root, spec["name"])
    os.makedirs(odir, exist_ok=True)
    draft.to(dt).save_pretrained(odir)
    draft = draft.to(torch.float32)
    # reload from disk to be sure the saved file is what we test
    reloaded = DFlashDraftModel.from_pretrained(odir, dtype=torch.float32).eval()
    reloaded.config._attn_implementation = "eager"

    ids = torch.tensor([prompt["ids"]])
    n = ids.shape[1]
    with torch.no_grad():
        logits, taps, tap_diff = taps_via_hooks(target, ids, spec["taps"])
        anchor = int(logits[0, -1].argmax())
        assert anchor == prompt["greedy"][0], "anchor differs from HF greedy"
        block = torch.full((1, B), mask, dtype=torch.long)
        block[0, 0] = anchor
        pos = torch.arange(0, n + B).unsqueeze(0)
        cache = DynamicCache()
        h = reloaded(target_hidden=taps, noise_embedding=target.model.embed_tokens(block), position_ids=pos,
                     past_key_values=cache, use_cache=True, is_causal=False)
        d1 = target.lm_head(h[:, 1 - B:, :])[0].float()
        cache.crop(n)
        # round 2: commit HF greedy g0..g{k-1}; their taps come from the target over prompt + those tokens
        k = spec["commit"]
        seq = torch.tensor([prompt["ids"] + prompt["greedy"][:k]])
        _, taps2, _ = taps_via_hooks(target, seq, spec["taps"])
        new_ctx = taps2[:, n:n + k, :]
        block2 = torch.full((1, B), mask, dtype=torch.long)
        block2[0, 0] = prompt["greedy"][k]
        pos2 = torch.arange(n, n + k + B).unsqueeze(0)
        h2 = reloaded(target_hidden=new_ctx, noise_embedding=target.model.embed_tokens(block2), position_ids=pos2,
                      past_key_values=cache, use_cache=True, is_causal=False)
        d2 = target.lm_head(h2[:, 1 - B:, :])[0].float()
    d1.numpy().astype("<f4").tofile(os.path.join(odir, "draft_logits.f32"))
    d2.numpy().astype("<f4").tofile(os.path.join(odir, "draft_logits2.f32"))
    meta = dict(target=spec["target"], block_size=B, target_layer_ids=spec["taps"], mask_token_id=mask,
                prompt_len=n, anchor=anchor, commit=k, anchor2=prompt["greedy"][k], vocab_size=V,
                weights_dtype=spec["dtype"], tap_hook_vs_hidden_states_maxdiff=tap_diff,
                draft_argmax=[int(x) for x in d1.argmax(-1)], draft_argmax2=[int(x) for x in d2.argmax(-1)],
                tensors={k2: list(v.shape) for k2, v in reloaded.state_dict().items()})
    json.dump(meta, open(os.path.join(odir, "draft.json"), "w"), indent=1)
    print(spec["name"], "ok; taps hook vs hidden_states max diff", tap_diff, "logits", tuple(d1.shape),
          "finite", bool(torch.isfinite(d1).all()), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixtures", default="tests/data/fixtures")
    a = ap.parse_args()
    sys.path.insert(0, a.ref)
    from dflash.model import DFlashDraftModel
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    torch.set_grad_enabled(False)
    failed = 0
    for spec in DRAFTERS:
        try:
            make(spec, a.fixtures, a.out, DFlashDraftModel)
        except Exception:
            failed += 1
            traceback.print_exc()
    print("failed:", failed, flush=True)


if __name__ == "__main__":
    main()
