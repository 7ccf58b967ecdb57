#!/usr/bin/env python3
"""Quantized reference fixtures in the published GPTQ int4 and AWQ int4 (gemm) layouts.

Run on a machine with torch and transformers 5.17 (the GPU machine; CPU is enough):

    PYTHONUNBUFFERED=1 python3 tools/make_int4_fixtures.py --out /tmp/i4fx

and copy /tmp/i4fx/int4_* into tests/data/fixtures/ (manifest.json -> tests/data/fixtures/manifest_int4.json).

For each architecture of make_quant_fixtures.py (qwen3_5 dense, qwen3_next MoE, qwen3_5_moe; hidden 128, widths
multiples of 128, experts one by one) it builds the same kind of small random model (make_fixtures.py's init,
rounded to bf16) and writes two checkpoints:

  int4_gptq_<arch>: GPTQ v1 as AutoGPTQ / GPTQModel save it (checkpoint_format "gptq", sym, desc_act false,
      group 128): per quantized module X, X.qweight int32 [K/8, N] (nibble j of word [r, n] = q of input 8r + j),
      X.qzeros int32 [K/128, N/8] (nibble j = column 8c + j, stored as z - 1: 0x77777777 for z = 8),
      X.scales fp16 [K/128, N], X.g_idx int32 [K] (k // 128). Qwen's exclusions for the 27B via `dynamic`:
      attention (GDN and full) and shared experts stay bf16, so the MLP / experts are int4.
  int4_awq_<arch>: AWQ gemm as AutoAWQ saves it (zero_point, group 64 so K spans several groups): X.qweight
      int32 [K, N/8] packed along N in the order 0,2,4,6,1,3,5,7, X.qzeros int32 [K/64, N/8] packed the same way,
      X.scales fp16 [K/64, N]; every projection (GDN, attention, MLP, experts, shared experts) is int4.

The weights are rounded to nearest (no calibration: the layout is what is under test). The expected logits
(logits.f32) and greedy ids are HF's fp32 forward with every quantized weight replaced by its dequantized value
(GPTQ: s * (q - z); AWQ: (q - z) * s, both in fp32 from the fp16 scale). Before writing, every packed tensor is
unpacked again here by a second, independent routine and compared with the dequantized weights (manifest:
"unpack_check").
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
import make_quant_fixtures as mq  # noqa: E402

N_NEW = mq.N_NEW
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]   # nibble i of an AWQ word holds column 8c + AWQ_ORDER[i]
GPTQ_GROUP, AWQ_GROUP = 128, 64
GPTQ_DYNAMIC = {"-:.*attn.*": {}, "-:.*shared_expert.*": {}, "-:.*mtp.*": {}, "-:.*visual.*": {}}
# AWQ: substrings of modules kept in bf16 (widths not multiples of 8, and the gates that are not projections)
AWQ_NOT_CONVERT = ["in_proj_a", "in_proj_b", "shared_expert_gate", "visual", "mtp"]

ARCHS = {"qwen35_dense": "fp8_qwen35_dense", "qwen3_next_moe": "fp8_qwen3_next_moe", "qwen35_moe": "fp8_qwen35_moe"}


def log(*a):
    print(*a, flush=True)


def to_i32(x):
    """int64 words in [0, 2^32) -> int32 with the same bits."""
    return torch.where(x >= 2 ** 31, x - 2 ** 32, x).to(torch.int32)


def from_i32(x):
    return x.to(torch.int64) & 0xFFFFFFFF


def gptq_excluded(module):
    import re
    for pat in GPTQ_DYNAMIC:
        if pat.startswith("-:") and re.match(pat[2:], module):
            return True
    return False


def quantized(method, name, t):
    if t.ndim != 2 or not name.endswith(".weight"):
        return False
    module = name[: -len(".weight")]
    if module.split(".")[-1] not in mq.QUANTIZED:
        return False
    if method == "gptq":
        return not gptq_excluded(module)
    return not any(s in module for s in AWQ_NOT_CONVERT)


def quantize(method, w):
    """w [N, K] fp32 -> (q int64 [N, K] in 0..15, z int64 [G, N], s fp16 [G, N], dequantized fp32 [N, K])."""
    N, K = w.shape
    gs = GPTQ_GROUP if method == "gptq" else AWQ_GROUP
    assert K % gs == 0 and N % 8 == 0, (N, K)
    G = K // gs
    wg = w.reshape(N, G, gs)
    if method == "gptq":  # GPTQ's symmetric grid: scale = 2 amax / 15, zero = 8
        amax = wg.abs().amax(-1)
        s = torch.where(amax > 0, 2 * amax / 15, torch.ones_like(amax)).to(torch.float16)
        z = torch.full((N, G), 8, dtype=torch.int64)
    else:  # AWQ's asymmetric grid: scale = (max - min) / 15, zero = round(-min / scale)
        hi, lo = wg.amax(-1), wg.amin(-1)
        s = ((hi - lo).clamp(min=1e-5) / 15).to(torch.float16)
        z = torch.round(-lo / s.float()).clamp(0, 15).to(torch.int64)
    sf = s.float()
    q = (torch.round(wg / sf[..., None]) + z[..., None]).clamp(0, 15).to(torch.int64)
    if method == "gptq":
        deq = sf[..., None] * (q - z[..., None]).float()
    else:
        deq = (q - z[..., None]).float() * sf[..., None]
    return q.reshape(N, K), z.t().contiguous(), s.t().contiguous(), deq.reshape(N, K)


def pack(method, q, z, s):
    """The published tensors of one module from q [N, K], z [G, N], s [G, N]."""
    N, K = q.shape
    G = z.shape[0]
    shifts = torch.arange(8, dtype=torch.int64) * 4
    qt = q.t().contiguous()  # [K, N]
    if method == "gptq":
        qweight = (qt.reshape(K // 8, 8, N) << shifts[None, :, None]).sum(1)  # nibble j: input 8r + j
        qzeros = ((z - 1).reshape(G, N // 8, 8) << shifts).sum(-1)           # v1 stores z - 1
        g_idx = torch.arange(K, dtype=torch.int32) // GPTQ_GROUP
        return {"qweight": to_i32(qweight), "qzeros": to_i32(qzeros), "scales": s, "g_idx": g_idx}
    order = torch.tensor(AWQ_ORDER)
    qweight = (qt.reshape(K, N // 8, 8)[..., order] << shifts).sum(-1)
    qzeros = (z.reshape(G, N // 8, 8)[..., order] << shifts).sum(-1)
    return {"qweight": to_i32(qweight), "qzeros": to_i32(qzeros), "scales": s}


def unpack(method, t, N, K):
    """Independent reading of the published tensors back to fp32 [N, K] (bit extraction, no reuse of pack)."""
    qw, qz, s = from_i32(t["qweight"]), from_i32(t["qzeros"]), t["scales"].float()
    G = s.shape[0]
    gs = K // G
    q = torch.empty(N, K, dtype=torch.int64)
    z = torch.empty(G, N, dtype=torch.int64)
    for j in range(8):
        if method == "gptq":
            q[:, j::8] = ((qw >> (4 * j)) & 15).t()  # inputs k = 8r + j
            z[:, j::8] = ((qz >> (4 * j)) & 15) + 1
        else:
            q[AWQ_ORDER[j]::8, :] = ((qw >> (4 * j)) & 15).t()  # rows n = 8c + order[j]
            z[:, AWQ_ORDER[j]::8] = (qz >> (4 * j)) & 15
    g = (t["g_idx"].long() if "g_idx" in t else torch.arange(K) // gs)
    zk, sk = z[g].t(), s[g].t()  # [N, K]
    return sk * (q - zk).float() if method == "gptq" else (q - zk).float() * sk


def build(spec, seed, method):
    cfg_cls, cls = mf.classes(spec["family"])
    torch.manual_seed(seed)
    cfg = cfg_cls(**copy.deepcopy(spec["cfg"]))
    model = mf.construct(cls, cfg)
    mf.set_eager(model)
    mf.init_params(model, seed, 3.2 / math.sqrt(spec["cfg"]["hidden_size"]))
    mf.round_to(model, torch.bfloat16)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    sd = mf.to_per_expert(sd)  # published int4 checkpoints store experts one by one
    outsd, deq, worst, n_q = {}, {}, 0.0, 0
    for k, v in sd.items():
        if quantized(method, k, v):
            module = k[: -len(".weight")]
            q, z, s, d = quantize(method, v)
            parts = pack(method, q, z, s)
            back = unpack(method, parts, *v.shape)
            worst = max(worst, float((back - d).abs().max()))
            for p, t in parts.items():
                outsd[f"{module}.{p}"] = t
            deq[k] = d
            n_q += 1
        else:
            outsd[k] = v.to(torch.bfloat16)
            deq[k] = outsd[k].float()
    if worst != 0.0:
        raise RuntimeError(f"unpack check failed: max |unpacked - dequantized| = {worst}")
    if any(k.endswith("experts.gate_up_proj") for k in model.state_dict()):
        deq = mf.to_fused(deq)
    ref = mf.construct(cls, cfg)
    mf.set_eager(ref)
    missing, unexpected = ref.load_state_dict(deq, strict=False)
    if missing or unexpected:
        raise RuntimeError(f"dequantized state does not fit the model: missing {missing} unexpected {unexpected}")
    return model, ref, outsd, n_q


def quant_config(method):
    if method == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": GPTQ_GROUP, "sym": True, "desc_act": False,
                "checkpoint_format": "gptq", "lm_head": False, "dynamic": GPTQ_DYNAMIC,
                "pack_dtype": "int32",
                "meta": {"quantizer": ["flashdelta tools/make_int4_fixtures.py (round to nearest)"]}}
    return {"quant_method": "awq", "version": "gemm", "bits": 4, "group_size": AWQ_GROUP, "zero_point": True,
            "modules_to_not_convert": AWQ_NOT_CONVERT}


def make(base, method, name, out, report):
    from safetensors.torch import save_file
    rep = report.setdefault("fixtures", {}).setdefault(name, {})
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    g = torch.Generator().manual_seed(base["seed"] + 7)
    ids = torch.randint(2, 500, (base["n_prompt"],), generator=g).tolist()
    best = None
    rep["seed_attempts"] = []
    for a in range(mf.MAX_ATTEMPTS):
        seed = base["seed"] + 50 + a
        model, ref, outsd, n_q = build(base, seed, method)
        logits, ev = mf.evaluate(ref, ids, N_NEW, gen_with="manual")
        rep["seed_attempts"].append({"seed": seed, "min_margin": ev["min_margin"]})
        log(f"  [{name}] seed {seed}: min_margin {ev['min_margin']:.4g} distinct {ev['greedy_distinct_tokens']}")
        ok = ev["greedy_equals_nocache_argmax"] and ev["greedy_distinct_tokens"] >= N_NEW // 2
        score = ev["min_margin"] if ok else -1.0
        if best is None or score > best[0]:
            best = (score, seed, model, outsd, n_q, logits, ev)
        if ok and ev["min_margin"] >= mf.MARGIN_TARGET:
            break
    _, seed, model, outsd, n_q, logits, ev = best
    rep.update(seed=seed, min_margin=ev["min_margin"], modules_int4=n_q, unpack_check="exact")
    model.to(torch.bfloat16).save_pretrained(d)
    for f in os.listdir(d):
        if f.endswith(".safetensors") or f.endswith(".index.json"):
            os.remove(os.path.join(d, f))
    save_file({k: v.contiguous() for k, v in outsd.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    cj["quantization_config"] = quant_config(method)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
        f.write("\n")
    rep["tensors"] = {k: [str(v.dtype).replace("torch.", ""), list(v.shape)] for k, v in sorted(outsd.items())}
    logits.contiguous().numpy().astype("<f4").tofile(os.path.join(d, "logits.f32"))
    ref_txt = ("HF fp32 forward on the dequantized weights (" +
               ("GPTQ v1: s * (q - (stored zero + 1))" if method == "gptq" else "AWQ gemm: (q - z) * s") + ")")
    with open(os.path.join(d, "prompt.json"), "w") as f:
        json.dump({"ids": ids, "n_new": N_NEW, "greedy": ev["greedy"], "vocab_size": mq.VOCAB,
                   "logits_file": "logits.f32", "logits_shape": [len(ids), mq.VOCAB], "min_margin": ev["min_margin"],
                   "seed": seed, "reference": ref_txt, "model_type": cj.get("model_type")}, f, indent=1)
        f.write("\n")
    rep["status"] = "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated fixture names (default: all six)")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    report = {"generator": "tools/make_int4_fixtures.py", "environment": mf.environment()}
    specs = {s["name"]: s for s in mq.SPECS}
    only = {s for s in args.only.split(",") if s}
    for arch, base_name in ARCHS.items():
        for method in ("gptq", "awq"):
            name = f"int4_{method}_{arch}"
            if only and name not in only:
                continue
            t0 = time.time()
            log(f"=== {name}")
            try:
                make(specs[base_name], method, name, args.out, report)
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                report.setdefault("fixtures", {}).setdefault(name, {})["status"] = f"FAILED: {e!r}"
            report["fixtures"][name]["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    bad = [n for n, r in report["fixtures"].items() if r.get("status") != "ok"]
    log("summary:", {n: r.get("status") for n, r in report["fixtures"].items()})
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
