#!/usr/bin/env python3
"""Make tiny random DFlash2 drafters (architectures DFlash2DraftModel) for the target fixtures, with their
expected draft logits and candidate-selector paths, using a public DFlash2 reference implementation:
NVIDIA-NeMo/Automodel `nemo_automodel/components/speculative/dflash/draft_qwen3_dflash2.py` (and the
`draft_qwen3.py` it builds on). Expected values come only from that reference code.

The reference is not part of this repository. On the machine that runs this script, put those two files at
REF/nemo_automodel/components/speculative/dflash/ with empty __init__.py files on the way and a `target.py`
stub that defines `resolve_text_config(config)` (return `config.text_config` or `config`), then:

    PYTHONUNBUFFERED=1 python3 tools/make_dflash2_fixtures.py --ref .dev/ref2 --out /tmp/d2

A freshly built DFlash2 drafter equals a DFlash one (zero dynamic-conv projection, zero successor codebook),
which would test nothing, so every parameter is re-drawn ("widened"): nonzero conv corrections around a base
kernel near the identity, both codebooks and the selector's hidden projection random.

For each drafter it writes OUT/NAME/: config.json + model.safetensors (the HF drafter dir, architectures
["DFlash2DraftModel"], DFlash2 fields in dflash_config as the published drafters have them) and
  draft_logits.f32   [(B-1) x vocab] f32, round 1: target prefilled on the prompt, anchor = its argmax, one
                     draft forward on [anchor, MASK x (B-1)] with every prompt position as context
  draft_logits2.f32  round 2: draft cache cropped to the prompt, context extended by the target's taps of HF's
                     greedy tokens g0..g{k-1} (k = commit), anchor g{k}
  selector_scores.f32 [(B-1) x top_k] f32: round 1 selector scores S_t(pred, cand) along the greedy path
                     (pred = anchor, then the path), candidates in torch.topk order
  draft.json         parameters, the greedy selector path of both rounds (`walk`, temperature 0), the per-position
                     argmax of both, the candidate ids of round 1, the tensor list
Everything runs on CPU in float32 (eager attention). The drafter's own KV cache is a plain DynamicCache that
keeps every position, so the sliding-window layers see the reference's band mask over the full key axis.
"""
import argparse
import json
import os
import sys
import traceback

import torch

DRAFTERS = [
    # full-attention layers, conv group 16, top-k 16
    dict(name="qwen35_dense_tied_d2_b8", target="qwen35_dense_tied", block=8, layers=2, taps=[1, 3],
         heads=4, kv_heads=2, head_dim=16, inter=96, dtype="bfloat16", theta=1e4, seed=21, commit=3,
         group=16, rank=16, top_k=16, layer_types=["full_attention", "full_attention"], window=None),
    # a sliding-window layer (window 64 < the 200-token prompt) and a full one, conv group 8, top-k 8
    dict(name="qwen35_moe_d2_b16", target="qwen35_moe", block=16, layers=2, taps=[0, 2],
         heads=4, kv_heads=2, head_dim=16, inter=96, dtype="bfloat16", theta=1e4, seed=22, commit=5,
         group=8, rank=24, top_k=8, layer_types=["sliding_attention", "full_attention"], window=64),
]
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def widen(model, seed):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda p, s: torch.randn(p.shape, generator=g) * s  # noqa: E731
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):  # standard Qwen3 RMSNorm: w * x, w around 1
                p.copy_(1.0 + rnd(p, 0.2))
            elif name == "fc.weight":
                p.copy_(rnd(p, 1.0 / p.shape[1] ** 0.5))
            elif name.endswith("base_kernel"):  # [2 (pre/post), K, H]: self tap near 1, previous tap ~0.3
                k = rnd(p, 0.3)
                k[:, 0, :] += 1.0
                p.copy_(k)
            elif name.endswith("kernel_projection.weight"):  # dynamic corrections of order 0.3
                p.copy_(rnd(p, 0.3 / p.shape[1] ** 0.5))
            elif name.endswith("_codebook"):
                p.copy_(rnd(p, 0.7))
            elif name.endswith("hidden_projection.weight"):
                p.copy_(rnd(p, 1.0 / p.shape[1] ** 0.5))
            else:
                p.copy_(rnd(p, 0.08))


def taps_via_hooks(target, ids, layer_ids):
    caught = {}
    layers = target.model.layers
    hooks = [layers[i].register_forward_hook(
        lambda m, a, out, i=i: caught.__setitem__(i, out[0] if isinstance(out, tuple) else out)) for i in layer_ids]
    out = target(ids, output_hidden_states=True, use_cache=False)
    for h in hooks:
        h.remove()
    taps = torch.cat([caught[i] for i in layer_ids], dim=-1)
    alt = torch.cat([out.hidden_states[i + 1] for i in layer_ids], dim=-1)
    return out.logits, taps, (taps - alt).abs().max().item()


def make(spec, fixtures, out_root, Draft2):
    from safetensors.torch import load_file, save_file
    from transformers import AutoModelForCausalLM, DynamicCache, Qwen3Config
    tdir = os.path.join(fixtures, spec["target"])
    target = AutoModelForCausalLM.from_pretrained(tdir, dtype=torch.float32, attn_implementation="eager").eval()
    prompt = json.load(open(os.path.join(tdir, "prompt.json")))
    tcfg = target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    V = tcfg.vocab_size
    B, mask, L = spec["block"], V - 1, spec["layers"]
    dflash_config = {"block_size": B, "target_layer_ids": spec["taps"], "mask_token_id": mask,
                     "conv_kernel_size": 2, "conv_group_size": spec["group"],
                     "selector_rank": spec["rank"], "selector_top_k": spec["top_k"]}
    kw = dict(vocab_size=V, hidden_size=tcfg.hidden_size, intermediate_size=spec["inter"], num_hidden_layers=L,
              num_attention_heads=spec["heads"], num_key_value_heads=spec["kv_heads"], head_dim=spec["head_dim"],
              rms_norm_eps=1e-6, max_position_embeddings=4096,
              rope_parameters={"rope_type": "default", "rope_theta": spec["theta"]}, tie_word_embeddings=False,
              attention_bias=False, layer_types=spec["layer_types"], max_window_layers=L)
    if spec["window"]:
        kw.update(use_sliding_window=True, sliding_window=spec["window"])
    cfg = Qwen3Config(**kw)
    cfg.layer_types = spec["layer_types"]
    cfg.sliding_window = spec["window"]
    cfg.is_causal = False
    cfg.num_target_layers = tcfg.num_hidden_layers
    cfg.dflash_config = dflash_config
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    draft = Draft2(cfg).eval()
    widen(draft, spec["seed"])
    dt = DTYPES[spec["dtype"]]
    odir = os.path.join(out_root, spec["name"])
    os.makedirs(odir, exist_ok=True)
    # Saved by hand: save_pretrained would name the architecture after the Python class
    # (Qwen3DFlash2DraftModel); the published drafters say DFlash2DraftModel.
    sd = {k: v.detach().to(dt).contiguous() for k, v in draft.state_dict().items()}
    save_file(sd, os.path.join(odir, "model.safetensors"), metadata={"format": "pt"})
    cj = json.loads(cfg.to_json_string(use_diff=False))
    cj["architectures"] = ["DFlash2DraftModel"]
    cj["dtype"] = spec["dtype"]
    cj.pop("_attn_implementation", None)
    cj.pop("_attn_implementation_autoset", None)
    json.dump(cj, open(os.path.join(odir, "config.json"), "w"), indent=2, sort_keys=True)
    # Rebuild from the written files so what is tested is what was saved.
    cfg2 = Qwen3Config.from_dict(json.load(open(os.path.join(odir, "config.json"))))
    cfg2._attn_implementation = "eager"
    ref = Draft2(cfg2).eval()
    loaded = load_file(os.path.join(odir, "model.safetensors"))
    missing, unexpected = ref.load_state_dict({k: v.float() for k, v in loaded.items()}, strict=False)
    assert not unexpected and all("inv_freq" in k for k in missing), (missing, unexpected)
    ref = ref.float().eval()
    windows = [a.self_attn.sliding_window for a in ref.layers]
    assert windows == [spec["window"] if t == "sliding_attention" else None for t in spec["layer_types"]], windows
    sel = ref.candidate_selector

    ids = torch.tensor([prompt["ids"]])
    n = ids.shape[1]
    with torch.no_grad():
        logits, taps, tap_diff = taps_via_hooks(target, ids, spec["taps"])
        anchor = int(logits[0, -1].argmax())
        assert anchor == prompt["greedy"][0], "anchor differs from HF greedy"
        cache = DynamicCache()

        def draft_round(ctx, anchor_id, pos0, ctx_end):
            # positions of the new context rows (pos0..ctx_end-1) and of the block (ctx_end..ctx_end+B-1)
            block = torch.full((1, B), mask, dtype=torch.long)
            block[0, 0] = anchor_id
            pos = torch.arange(pos0, ctx_end + B).unsqueeze(0)
            h = ref(target_hidden=ctx, noise_embedding=target.model.embed_tokens(block), position_ids=pos,
                    past_key_values=cache, use_cache=True, conv_block_size=B)[:, 1 - B:, :]
            lg = target.lm_head(h)
            path, cand, probs = sel.walk(h, lg, torch.tensor([anchor_id]), 0.0)
            assert probs is None
            return h, lg[0].float(), path[0].tolist(), cand[0]

        h1, d1, path1, cand1 = draft_round(taps, anchor, 0, n)
        cache.crop(n)
        # selector scores along the greedy path (pred = anchor, then the path's own tokens)
        unary, cids = torch.topk(target.lm_head(h1), sel.top_k, dim=-1)
        preds = torch.tensor([[anchor] + path1[:-1]])
        scores1 = sel.pair_scores(h1, unary, cids, preds)[0].float()
        assert torch.equal(cids[0], cand1)
        k = spec["commit"]
        seq = torch.tensor([prompt["ids"] + prompt["greedy"][:k]])
        _, taps2, _ = taps_via_hooks(target, seq, spec["taps"])
        h2, d2, path2, _ = draft_round(taps2[:, n:n + k, :], prompt["greedy"][k], n, n + k)
    d1.numpy().astype("<f4").tofile(os.path.join(odir, "draft_logits.f32"))
    d2.numpy().astype("<f4").tofile(os.path.join(odir, "draft_logits2.f32"))
    scores1.numpy().astype("<f4").tofile(os.path.join(odir, "selector_scores.f32"))
    am1, am2 = [int(x) for x in d1.argmax(-1)], [int(x) for x in d2.argmax(-1)]
    meta = dict(target=spec["target"], block_size=B, target_layer_ids=spec["taps"], mask_token_id=mask,
                prompt_len=n, anchor=anchor, commit=k, anchor2=prompt["greedy"][k], vocab_size=V,
                weights_dtype=spec["dtype"], conv_group_size=spec["group"], selector_rank=spec["rank"],
                selector_top_k=spec["top_k"], layer_types=spec["layer_types"], sliding_window=spec["window"],
                tap_hook_vs_hidden_states_maxdiff=tap_diff,
                selector_path=path1, selector_path2=path2, draft_argmax=am1, draft_argmax2=am2,
                path_differs_from_argmax=[sum(a != b for a, b in zip(path1, am1)),
                                          sum(a != b for a, b in zip(path2, am2))],
                candidate_ids=cand1.tolist(),
                tensors={k2: list(v.shape) for k2, v in loaded.items()})
    json.dump(meta, open(os.path.join(odir, "draft.json"), "w"), indent=1)
    print(spec["name"], "ok; taps diff", tap_diff, "logits", tuple(d1.shape), "finite", bool(torch.isfinite(d1).all()),
          "path1", path1, "argmax1", am1, "path2", path2, "argmax2", am2, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fixtures", default="tests/data/fixtures")
    a = ap.parse_args()
    sys.path.insert(0, a.ref)
    from nemo_automodel.components.speculative.dflash.draft_qwen3_dflash2 import Qwen3DFlash2DraftModel
    import transformers
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    torch.set_grad_enabled(False)
    failed = 0
    for spec in DRAFTERS:
        try:
            make(spec, a.fixtures, a.out, Qwen3DFlash2DraftModel)
        except Exception:
            failed += 1
            traceback.print_exc()
    print("failed:", failed, flush=True)


if __name__ == "__main__":
    main()
