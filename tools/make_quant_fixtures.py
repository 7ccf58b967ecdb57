#!/usr/bin/env python3
"""Quantized reference fixtures in the published FP8 block-scaled layout (Qwen's *-FP8 checkpoints).

Run on a machine with torch and transformers 5.17 (CPU is enough):

    PYTHONUNBUFFERED=1 python3 tools/make_quant_fixtures.py --out /tmp/qfx

For each architecture it builds a small random model (make_fixtures.py's init rules; hidden 128 and widths up to
384, all multiples of 128 as in the published geometries, where HF's loader requires it, so weights span one to
three 128 x 128 blocks per side; the k = 384 GEMMs run bf16 under the GPU's default gemm_act=auto, see
tests_cuda/test_cuda_models.c; odd shapes and partial blocks are the op tests' job), rounds it to bf16 and writes the checkpoint as published:
each projection `X.weight` as float8_e4m3fn [N, K] plus `X.weight_scale_inv` [ceil(N/128), ceil(K/128)] (f32, or
bf16 for one fixture: both are published), experts per expert as Qwen3-Next-80B-A3B-FP8 stores them, the rest
bf16, and config.json's `quantization_config` (quant_method fp8, fmt e4m3,
activation_scheme dynamic, weight_block_size [128, 128], modules_to_not_convert). The expected logits are HF's
fp32 forward with every quantized weight replaced by fp8 value x its block's scale. HF's own FP8 loader
(`FineGrainedFP8Config(dequantize=True)`) reads the same checkpoint; its logits against the reference go to
manifest.json, so the layout is checked against HF's reading of it. (HF 5.17's quantize-on-load wrote MLP scales
it had left uninitialised and its FP8 GPU kernels need the `kernels` package, which the GPU machine lacks; neither
is used.)
"""
import argparse
import copy
import json
import math
import os
import shutil
import sys
import time
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

LIN, FULL = mf.LIN, mf.FULL
VOCAB = 512
N_NEW = 32
# Qwen's FP8 checkpoints keep these linear modules in bf16 (../shared/notes/quant_formats.md), named by the last
# part of the module name; config.json lists them by full module name as Qwen's files do.
KEEP_BF16 = {"lm_head", "embed_tokens", "in_proj_a", "in_proj_b", "in_proj_ba", "gate", "shared_expert_gate"}

SPECS = [
    dict(name="fp8_qwen35_dense", family="qwen3_5", seed=7100, n_prompt=96, cfg=dict(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
        layer_types=[LIN, LIN, LIN, FULL], num_attention_heads=2, num_key_value_heads=1, head_dim=64,
        linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=64, linear_value_head_dim=64,
        linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters=mf.rope(1e4, mrope=True))),
    dict(name="fp8_qwen3_next_moe", family="qwen3_next", seed=7200, n_prompt=96, cfg=dict(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=4, layer_types=[LIN, LIN, LIN, FULL],
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, linear_num_key_heads=1,
        linear_num_value_heads=2, linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=256,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], intermediate_size=384,
        tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=4096, rope_parameters=mf.rope(1e4))),
    dict(name="fp8_qwen35_moe", family="qwen3_5_moe", seed=7300, n_prompt=96, bf16_scales=True, cfg=dict(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=4, layer_types=[LIN, FULL, LIN, FULL],
        num_attention_heads=2, num_key_value_heads=1, head_dim=64, linear_num_key_heads=1,
        linear_num_value_heads=2, linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
        tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=4096,
        rope_parameters=mf.rope(1e4, mrope=True))),
]


def log(*a):
    print(*a, flush=True)


def read_st(d):
    from safetensors.torch import load_file
    sd = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            sd.update(load_file(os.path.join(d, f)))
    return sd


def scale_name(name):
    return name + "_scale_inv"


def dequant(q, s, block):
    """fp8 [..., N, K] x scale [..., ceil(N/bn), ceil(K/bk)] -> fp32, the published block dequantization."""
    bn, bk = block
    N, K = q.shape[-2], q.shape[-1]
    full = s.float().repeat_interleave(bn, dim=-2).repeat_interleave(bk, dim=-1)[..., :N, :K]
    return q.float() * full


def rel_l2(a, b):
    return float((a - b).norm() / b.norm())


# Quantized as Qwen's FP8 checkpoints are: the projection matrices of GDN, attention, dense FFN, experts and shared
# experts; lm_head, embeddings, norms, conv, A_log/dt_bias, in_proj_a/b/ba, the router and shared_expert_gate stay.
QUANTIZED = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "in_proj_qkv", "in_proj_z",
             "in_proj_qkvz", "out_proj"}


def quantizable(name, t):
    if t.ndim < 2:
        return False
    if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
        return True
    return name.endswith(".weight") and name[: -len(".weight")].split(".")[-1] in QUANTIZED


def kept_modules(sd):
    return sorted({k[: -len(".weight")] for k, v in sd.items()
                   if k.endswith(".weight") and v.ndim == 2 and k[: -len(".weight")].split(".")[-1] in KEEP_BF16})


def quantize(w, block):
    """w [..., N, K] fp32 -> (e4m3 [..., N, K], scale f32 [..., ceil(N/bn), ceil(K/bk)]): scale = block amax / 448."""
    bn, bk = block
    N, K = w.shape[-2], w.shape[-1]
    sn, sk = -(-N // bn), -(-K // bk)
    pad = torch.zeros(*w.shape[:-2], sn * bn, sk * bk)
    pad[..., :N, :K] = w
    blocks = pad.reshape(*w.shape[:-2], sn, bn, sk, bk)
    amax = blocks.abs().amax(dim=(-3, -1))
    scale = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
    q = (w / scale.repeat_interleave(bn, -2).repeat_interleave(bk, -1)[..., :N, :K]).to(torch.float8_e4m3fn)
    return q, scale.float()


def build(spec, seed, block):
    """The model of `spec` with weight seed `seed`: (HF model in fp32, published state dict, dequantized state)."""
    cfg_cls, cls = mf.classes(spec["family"])
    torch.manual_seed(seed)
    cfg = cfg_cls(**copy.deepcopy(spec["cfg"]))
    model = mf.construct(cls, cfg)
    mf.set_eager(model)
    mf.init_params(model, seed, 3.2 / math.sqrt(spec["cfg"]["hidden_size"]))
    mf.round_to(model, torch.bfloat16)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    sd = mf.to_per_expert(sd)  # the published FP8 layout stores experts one by one
    outsd, deq = {}, {}
    for k, v in sd.items():
        if quantizable(k, v):
            q, s = quantize(v, block)
            outsd[k] = q
            outsd[scale_name(k)] = s.to(torch.bfloat16) if spec.get("bf16_scales") else s
            deq[k] = dequant(q, outsd[scale_name(k)], block)
        else:
            outsd[k] = v.to(torch.bfloat16)
            deq[k] = outsd[k].float()
    if any(k.endswith("experts.gate_up_proj") for k in model.state_dict()):
        deq = mf.to_fused(deq)  # back to the model's in-memory layout
    ref = mf.construct(cls, cfg)
    mf.set_eager(ref)
    missing, unexpected = ref.load_state_dict(deq, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"dequantized state does not fit the model: missing {missing} unexpected {unexpected}")
    return model, ref, sd, outsd, kept_modules(sd)


def make(spec, out, report):
    import transformers as T
    from safetensors.torch import save_file
    name = spec["name"]
    rep = report.setdefault("fixtures", {}).setdefault(name, {})
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    block = (128, 128)
    g = torch.Generator().manual_seed(spec["seed"] + 7)
    ids = torch.randint(2, 500, (spec["n_prompt"],), generator=g).tolist()
    # --- the first weight seed whose greedy path (on the dequantized model) keeps a top-1 margin of 0.02
    best = None
    rep["seed_attempts"] = []
    for a in range(mf.MAX_ATTEMPTS):
        seed = spec["seed"] + a
        model, ref, sd, outsd, kept = build(spec, seed, block)
        logits, ev = mf.evaluate(ref, ids, N_NEW, gen_with="manual")
        rep["seed_attempts"].append({"seed": seed, "min_margin": ev["min_margin"]})
        log(f"  [{name}] seed {seed}: min_margin {ev['min_margin']:.4g} distinct {ev['greedy_distinct_tokens']}")
        ok = ev["greedy_equals_nocache_argmax"] and ev["greedy_distinct_tokens"] >= N_NEW // 2
        score = ev["min_margin"] if ok else -1.0
        if best is None or score > best[0]:
            best = (score, seed, model, ref, outsd, kept, logits, ev)
        if ok and ev["min_margin"] >= mf.MARGIN_TARGET:
            break
    _, seed, model, ref, outsd, kept, logits, ev = best
    rep["seed"], rep["min_margin"] = seed, ev["min_margin"]
    model.to(torch.bfloat16).save_pretrained(d)
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(os.path.join(d, f))
    save_file({k: v.contiguous() for k, v in outsd.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    cj["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                 "weight_block_size": list(block), "modules_to_not_convert": kept}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
        f.write("\n")
    rep["tensors"] = {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in sorted(outsd.items())}
    greedy = ev["greedy"]
    logits.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    with open(os.path.join(d, "prompt.json"), "w") as f:
        json.dump({"ids": ids, "n_new": N_NEW, "greedy": greedy, "vocab_size": VOCAB,
                   "logits_file": "logits.f32", "logits_shape": [len(ids), VOCAB], "min_margin": ev["min_margin"],
                   "seed": seed, "reference": "HF fp32 forward on the dequantized weights (fp8 x block scale)",
                   "model_type": cj.get("model_type")}, f, indent=1)
        f.write("\n")

    # --- HF's own reading of the checkpoint (its FP8 loader, dequantize=True), against the reference
    try:
        m2 = T.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32,
            quantization_config=T.FineGrainedFP8Config(weight_block_size=block, dequantize=True))
        mf.set_eager(m2)
        l2 = mf.forward_logits(m2, ids)
        rep["hf_fp8_loader_dequantize"] = {"logits_rel_l2_vs_reference": rel_l2(l2, logits),
                                           "argmax_agree": float((l2.argmax(-1) == logits.argmax(-1)).float().mean())}
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        rep["hf_fp8_loader_dequantize"] = {"error": repr(e)}
    log(f"  [{name}] HF FP8 loader (dequantize=True) vs reference: {rep['hf_fp8_loader_dequantize']}")
    rep["status"] = "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    report = {"generator": "tools/make_quant_fixtures.py", "environment": mf.environment()}
    for spec in SPECS:
        t0 = time.time()
        log(f"=== {spec['name']}")
        try:
            make(spec, args.out, report)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report.setdefault("fixtures", {}).setdefault(spec["name"], {})["status"] = f"FAILED: {e!r}"
        report["fixtures"][spec["name"]]["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    bad = [n for n, r in report["fixtures"].items() if r.get("status") != "ok"]
    log("summary:", {n: r.get("status") for n, r in report["fixtures"].items()})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
