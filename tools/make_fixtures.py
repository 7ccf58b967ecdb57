#!/usr/bin/env python3
"""Make flashdelta's reference fixtures with HF transformers (expected values come from HF only).

Run where torch + transformers (5.17) are installed; computation is on CPU in float32:

    PYTHONUNBUFFERED=1 python3 tools/make_fixtures.py --out /tmp/fx

For each fixture it writes OUT/NAME/ with an HF model directory (config.json, weights), prompt.json and
logits.f32 (float32 LE, [n_prompt x vocab], one no-cache forward over the prompt), and OUT/manifest.json
with versions, checks and the tensor list of every fixture. The script is deterministic (seeded).

Weights saved in bf16/f16 are rounded first; the reference runs on the rounded weights upcast to fp32.
One fixture's failure does not stop the others; the manifest records it.
"""
import argparse
import copy
import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import time
import traceback

import torch

N_NEW = 48
VOCAB = 512
MARGIN_TARGET = 0.02     # accept the first weight seed whose greedy path has a top1-top2 gap >= this
MAX_ATTEMPTS = 8         # else keep the best of this many seeds

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def log(*a):
    print(*a, flush=True)


# ----------------------------------------------------------------------------------------------------------
# fixtures


def rope(theta, mrope=False):
    p = {"rope_type": "default", "rope_theta": float(theta), "partial_rotary_factor": 0.25}
    if mrope:
        # rotary dim = 32 * 0.25 = 8 -> 4 frequencies; sections sum to 4 like [11, 11, 10] sums to 32 for 64
        p["mrope_section"] = [2, 1, 1]
        p["mrope_interleaved"] = True
    return p


LIN, FULL = "linear_attention", "full_attention"

FIXTURES = [
    dict(
        name="qwen35_dense_tied",
        family="qwen3_5",
        seed=1000,
        n_prompt=200,
        dtype="bfloat16",
        save="save_pretrained",
        expert_layout="none",
        # With tied embeddings and sigma 0.08 everywhere, the residual stream stays dominated by the input
        # token's embedding and the model just predicts the current token (greedy = one token repeated).
        # Larger residual-writing projections (o_proj, out_proj, down_proj) make the layers dominate.
        out_sigma=0.25,
        cfg=dict(
            vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
            layer_types=[LIN, LIN, FULL, LIN, LIN, FULL],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, tie_word_embeddings=True, rms_norm_eps=1e-6,
            max_position_embeddings=4096, rope_parameters=rope(1e4, mrope=True),
        ),
    ),
    dict(
        name="qwen35_vl_sharded",
        family="qwen3_5_vl",
        seed=2000,
        n_prompt=197,
        dtype="float32",
        save="vl_sharded",
        expert_layout="none",
        cfg=dict(
            vocab_size=VOCAB, hidden_size=96, intermediate_size=160, num_hidden_layers=4,
            layer_types=[LIN, LIN, LIN, FULL],
            num_attention_heads=4, num_key_value_heads=1, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=24, linear_value_head_dim=24,
            linear_conv_kernel_dim=4, tie_word_embeddings=False, rms_norm_eps=1e-6,
            max_position_embeddings=4096, rope_parameters=rope(5e4, mrope=True),
        ),
        vision_cfg=dict(
            depth=1, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, patch_size=4,
            temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=96, num_position_embeddings=16,
        ),
        vl_ids=dict(image_token_id=508, video_token_id=509, vision_start_token_id=510, vision_end_token_id=511),
    ),
    dict(
        name="qwen3_next_moe",
        family="qwen3_next",
        seed=3000,
        n_prompt=201,
        dtype="float16",
        save="save_pretrained",
        expert_layout="per_expert",
        cfg=dict(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
            layer_types=[LIN, LIN, LIN, FULL],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[1], intermediate_size=96, tie_word_embeddings=False, rms_norm_eps=1e-6,
            max_position_embeddings=4096, rope_parameters=rope(1e4),
        ),
    ),
    dict(
        name="qwen35_moe",
        family="qwen3_5_moe",
        seed=4000,
        n_prompt=203,
        dtype="bfloat16",
        save="manual_single",
        expert_layout="fused",
        cfg=dict(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4,
            layer_types=[LIN, FULL, LIN, FULL],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=16, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, tie_word_embeddings=False, rms_norm_eps=1e-6,
            max_position_embeddings=4096, rope_parameters=rope(1e4, mrope=True),
        ),
    ),
    dict(
        # Traits no other fixture has (issue 14's GPU defect): one KV head, layer types from
        # full_attention_interval = 2 (no layer_types list), GDN key head dim 24 != value head dim 16.
        name="qwen35_moe_kv1",
        family="qwen3_5_moe",
        seed=5000,
        n_prompt=199,
        dtype="bfloat16",
        save="manual_single",
        expert_layout="fused",
        drop_layer_types=True,  # config.json keeps only full_attention_interval
        cfg=dict(
            vocab_size=VOCAB, hidden_size=64, num_hidden_layers=4, full_attention_interval=2,
            num_attention_heads=4, num_key_value_heads=1, head_dim=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=24, linear_value_head_dim=16,
            linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, tie_word_embeddings=False, rms_norm_eps=1e-6,
            max_position_embeddings=4096, rope_parameters=rope(1e4, mrope=True),
        ),
    ),
]


def classes(family):
    import transformers as T
    if family in ("qwen3_5", "qwen3_5_vl"):
        return T.Qwen3_5TextConfig, T.Qwen3_5ForCausalLM
    if family == "qwen3_next":
        return T.Qwen3NextConfig, T.Qwen3NextForCausalLM
    if family == "qwen3_5_moe":
        return T.Qwen3_5MoeTextConfig, T.Qwen3_5MoeForCausalLM
    raise ValueError(family)


# ----------------------------------------------------------------------------------------------------------
# model construction and init


def set_eager(model):
    """Eager attention and eager (python loop) experts everywhere; returns what the configs say afterwards."""
    try:
        model.set_attn_implementation("eager")
    except Exception as e:  # noqa: BLE001
        log("  set_attn_implementation failed:", repr(e))
    try:
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation("eager")
    except Exception as e:  # noqa: BLE001
        log("  set_experts_implementation failed:", repr(e))
    out = {}
    for cname, c in all_configs(model.config):
        for attr in ("_attn_implementation", "_experts_implementation"):
            try:
                v = getattr(c, attr, None)
                if v not in (None, "eager"):
                    try:
                        setattr(c, attr, "eager")
                    except Exception as e:  # noqa: BLE001
                        log(f"  cannot set {cname}.{attr}:", repr(e))
                out[f"{cname}.{attr}"] = getattr(c, attr, None)
            except Exception as e:  # noqa: BLE001
                out[f"{cname}.{attr}"] = f"error {e!r}"
    return out


def all_configs(cfg):
    res = [("config", cfg)]
    for sub in ("text_config", "vision_config"):
        c = getattr(cfg, sub, None)
        if c is not None and c is not cfg:
            res.append((sub, c))
    return res


def construct(cls, cfg):
    try:
        m = cls._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    except Exception as e:  # noqa: BLE001
        log("  _from_config(attn_implementation=eager) failed, plain constructor:", repr(e))
        m = cls(cfg)
    m = m.to(torch.float32).eval()
    return m


def module_kind_of_params(model):
    kinds = {}
    for mname, mod in model.named_modules():
        cn = type(mod).__name__
        for pname, _ in mod.named_parameters(recurse=False):
            kinds[f"{mname}.{pname}" if mname else pname] = cn
    return kinds


@torch.no_grad()
def init_params(model, seed, lm_sigma, skip_prefixes=(), out_sigma=None):
    """Wide init so every layer matters. Returns {param: rule} for the manifest."""
    g = torch.Generator().manual_seed(seed)
    kinds = module_kind_of_params(model)
    rules = {}
    for name, p in model.named_parameters():  # tied params appear once
        if any(name.startswith(s) for s in skip_prefixes):
            rules[name] = "hf-default"
            continue
        shape = p.shape
        kind = kinds.get(name, "")

        def normal(std, mean=0.0):
            return torch.randn(shape, generator=g) * std + mean

        if "embed_tokens" in name:
            v, r = normal(0.5), "N(0,0.5)"
        elif name.endswith("lm_head.weight"):
            v, r = normal(lm_sigma), f"N(0,{lm_sigma:.3f})"
        elif name.endswith("A_log"):
            # even heads: A ~ U(1,16) (short memory); odd heads: A ~ U(0.005,0.1) (long memory, ~10-150 tokens)
            u = torch.rand(shape, generator=g)
            even = (torch.arange(shape[0]) % 2) == 0
            A = torch.where(even, 1.0 + 15.0 * u, 0.005 + 0.095 * u)
            v, r = A.log(), "log(A): even heads A~U(1,16), odd heads A~U(0.005,0.1)"
        elif name.endswith("dt_bias"):
            v, r = 0.5 + torch.rand(shape, generator=g), "U(0.5,1.5)"
        elif name.endswith("conv1d.weight"):
            v, r = normal(0.3), "N(0,0.3)"
        elif kind.endswith("RMSNormGated"):
            v, r = normal(0.2, 1.0), "1+N(0,0.2)"
        elif kind.endswith("RMSNorm"):
            v, r = normal(0.2), "N(0,0.2) (zero-centred, used as 1+w)"
        elif name.endswith("mlp.gate.weight"):
            v, r = normal(0.3), "N(0,0.3) router"
        elif name.endswith("shared_expert_gate.weight"):
            v, r = normal(0.3), "N(0,0.3)"
        elif out_sigma and re.search(r"(o_proj|out_proj|down_proj)(\.weight)?$", name):
            v, r = normal(out_sigma), f"N(0,{out_sigma}) residual-writing projection"
        elif p.ndim >= 2:
            v, r = normal(0.08), "N(0,0.08)"
        else:
            log(f"  WARNING: no init rule for {name} {tuple(shape)} ({kind}); using N(0,0.08)")
            v, r = normal(0.08), "N(0,0.08) (fallback)"
        p.copy_(v.to(p.dtype))
        rules[name] = r
    return rules


@torch.no_grad()
def round_to(model, dtype):
    if dtype == torch.float32:
        return
    for _, p in model.named_parameters():
        p.copy_(p.to(dtype).to(torch.float32))


# ----------------------------------------------------------------------------------------------------------
# evaluation


@torch.no_grad()
def forward_logits(model, ids):
    out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False)
    return out.logits[0].float()


@torch.no_grad()
def manual_greedy(model, ids, n_new):
    inp = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=inp, use_cache=True)
    past = out.past_key_values
    toks, logits = [], []
    last = out.logits[0, -1].float()
    for _ in range(n_new):
        t = int(last.argmax())
        toks.append(t)
        logits.append(last)
        out = model(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
        past = out.past_key_values
        last = out.logits[0, -1].float()
    return toks, torch.stack(logits)


@torch.no_grad()
def hf_generate(model, ids, n_new):
    inp = torch.tensor([ids], dtype=torch.long)
    gen = model.generate(
        inp, attention_mask=torch.ones_like(inp), max_new_tokens=n_new, do_sample=False, use_cache=True,
        return_dict_in_generate=True, output_logits=True,
    )
    seq = gen.sequences[0].tolist()
    assert seq[: len(ids)] == list(ids), "generate changed the prompt"
    toks = seq[len(ids):]
    lg = torch.stack([x[0].float() for x in gen.logits]) if gen.logits is not None else None
    return toks, lg


@torch.no_grad()
def evaluate(model, ids, n_new, gen_with="generate"):
    res = {}
    prompt_logits = forward_logits(model, ids)
    if gen_with == "generate":
        try:
            greedy, cached = hf_generate(model, ids, n_new)
            res["greedy_source"] = "model.generate(do_sample=False, use_cache=True)"
        except Exception as e:  # noqa: BLE001
            log("  generate FAILED, falling back to a manual cached greedy loop:", repr(e))
            traceback.print_exc()
            greedy, cached = manual_greedy(model, ids, n_new)
            res["greedy_source"] = f"manual cached loop (generate failed: {e!r})"
    else:
        greedy, cached = manual_greedy(model, ids, n_new)
        res["greedy_source"] = "manual cached loop"
    res["n_generated"] = len(greedy)
    full = forward_logits(model, list(ids) + list(greedy))
    n = len(ids)
    path = full[n - 1 : n - 1 + len(greedy)]
    argmax_nc = path.argmax(-1).tolist()
    top2 = path.topk(2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1])
    res["greedy"] = greedy
    res["greedy_equals_nocache_argmax"] = argmax_nc == greedy
    res["nocache_argmax"] = argmax_nc
    res["min_margin"] = float(margins.min()) if len(greedy) else 0.0
    res["min_margin_step"] = int(margins.argmin()) if len(greedy) else -1
    res["prompt_logits_vs_fullseq_forward_maxabs"] = float((full[:n] - prompt_logits).abs().max())
    if cached is not None and cached.shape == path.shape:
        res["cached_vs_nocache_logits_maxabs"] = float((cached - path).abs().max())
        t2c = cached.topk(2, dim=-1).values
        res["min_margin_cached"] = float((t2c[:, 0] - t2c[:, 1]).min())
    res["logits_absmax"] = float(prompt_logits.abs().max())
    res["logits_std"] = float(prompt_logits.std())
    res["logits_finite"] = bool(torch.isfinite(prompt_logits).all())
    res["greedy_distinct_tokens"] = len(set(greedy))
    res["prompt_argmax_distinct"] = len(set(prompt_logits.argmax(-1).tolist()))
    res["prompt_argmax_is_current_token"] = float(
        (prompt_logits.argmax(-1) == torch.tensor(list(ids))).float().mean())
    res["prompt_row_std_min"] = float(prompt_logits.std(dim=-1).min())
    return prompt_logits, res


@torch.no_grad()
def probe_kernels(model, ids):
    """Count torch fallback ops used by a prefill (>64 tokens) and by one cached decode step."""
    import torch.nn.functional as F
    counts = {"prefill.solve_triangular": 0, "prefill.conv1d": 0, "decode.solve_triangular": 0, "decode.conv1d": 0}
    phase = ["prefill"]
    orig_st, orig_conv = torch.linalg.solve_triangular, F.conv1d

    def st(*a, **k):
        counts[phase[0] + ".solve_triangular"] += 1
        return orig_st(*a, **k)

    def cv(*a, **k):
        counts[phase[0] + ".conv1d"] += 1
        return orig_conv(*a, **k)

    torch.linalg.solve_triangular, F.conv1d = st, cv
    try:
        out = model(input_ids=torch.tensor([ids[:80]]), use_cache=True)
        phase[0] = "decode"
        model(input_ids=torch.tensor([[ids[80]]]), past_key_values=out.past_key_values, use_cache=True)
    except Exception as e:  # noqa: BLE001
        counts["error"] = repr(e)
    finally:
        torch.linalg.solve_triangular, F.conv1d = orig_st, orig_conv
    # what the GDN modules point at (older transformers keep the chosen kernels as attributes)
    for mname, mod in model.named_modules():
        if type(mod).__name__.endswith("GatedDeltaNet"):
            for attr in ("chunk_gated_delta_rule", "recurrent_gated_delta_rule", "causal_conv1d_fn",
                         "causal_conv1d_update"):
                f = getattr(mod, attr, "absent")
                counts[f"gdn_attr.{attr}"] = "absent" if isinstance(f, str) else (
                    None if f is None else f"{getattr(f, '__module__', '?')}.{getattr(f, '__name__', type(f).__name__)}")
            counts["gdn_class"] = type(mod).__module__ + "." + type(mod).__name__
            break
    return counts


# ----------------------------------------------------------------------------------------------------------
# files


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def weight_files(d):
    return sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))


def list_tensors(d):
    from safetensors import safe_open
    rows = []
    for f in weight_files(d):
        with safe_open(os.path.join(d, f), framework="pt") as sf:
            for k in sf.keys():
                try:
                    sl = sf.get_slice(k)
                    dt, shape = str(sl.get_dtype()), list(sl.get_shape())
                except Exception:  # noqa: BLE001
                    t = sf.get_tensor(k)
                    dt, shape = str(t.dtype).replace("torch.", ""), list(t.shape)
                rows.append({"name": k, "dtype": dt, "shape": shape, "file": f})
    rows.sort(key=lambda r: r["name"])
    return rows


def read_state(d):
    from safetensors.torch import load_file
    sd = {}
    for f in weight_files(d):
        sd.update(load_file(os.path.join(d, f)))
    return sd


def expert_layout_of(keys):
    per = any(re.search(r"mlp\.experts\.\d+\.", k) for k in keys)
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in keys)
    return "per_expert" if per and not fused else "fused" if fused and not per else "mixed" if per else "none"


def to_per_expert(sd):
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            E, twoI, _ = v.shape
            I = twoI // 2
            for e in range(E):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :I].clone().contiguous()
                out[f"{pre}{e}.up_proj.weight"] = v[e, I:].clone().contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].clone().contiguous()
        else:
            out[k] = v
    return out


def to_fused(sd):
    out, groups = {}, {}
    for k, v in sd.items():
        m = re.match(r"(.*mlp\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj)\.weight$", k)
        if m:
            groups.setdefault(m.group(1), {}).setdefault(m.group(3), {})[int(m.group(2))] = v
        else:
            out[k] = v
    for pre, parts in groups.items():
        E = len(parts["gate_proj"])
        gate = torch.stack([parts["gate_proj"][e] for e in range(E)])
        up = torch.stack([parts["up_proj"][e] for e in range(E)])
        out[pre + "gate_up_proj"] = torch.cat([gate, up], dim=1).contiguous()
        out[pre + "down_proj"] = torch.stack([parts["down_proj"][e] for e in range(E)]).contiguous()
    return out


def save_file_pt(sd, path):
    from safetensors.torch import save_file
    save_file({k: v.detach().contiguous().clone() for k, v in sd.items()}, path, metadata={"format": "pt"})


def write_sharded(sd, d, n_shards):
    keys = sorted(sd)
    total = sum(sd[k].numel() * sd[k].element_size() for k in keys)
    budget = total / n_shards
    shards, cur, cur_b = [], [], 0
    for k in keys:
        b = sd[k].numel() * sd[k].element_size()
        if cur and cur_b + b > budget * 1.02 and len(shards) < n_shards - 1:
            shards.append(cur)
            cur, cur_b = [], 0
        cur.append(k)
        cur_b += b
    shards.append(cur)
    assert len(shards) == n_shards, f"got {len(shards)} shards"
    wmap = {}
    for i, ks in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        save_file_pt({k: sd[k] for k in ks}, os.path.join(d, fn))
        for k in ks:
            wmap[k] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}, f, indent=2)
        f.write("\n")


def load_pretrained(cls, d):
    kw = dict(attn_implementation="eager", output_loading_info=True)
    try:
        m, info = cls.from_pretrained(d, dtype=torch.float32, **kw)
    except TypeError:
        m, info = cls.from_pretrained(d, torch_dtype=torch.float32, **kw)
    m = m.to(torch.float32).eval()
    info = {k: sorted(map(str, v)) if isinstance(v, (list, set, tuple)) else str(v) for k, v in info.items()}
    return m, info


def compare_state(ref_model, other_model, prefix_map=None):
    a = ref_model.state_dict()
    b = other_model.state_dict()
    if prefix_map:
        b = {prefix_map(k): v for k, v in b.items()}
    missing = sorted(k for k in a if k not in b)
    extra = sorted(k for k in b if k not in a)
    maxdiff = 0.0
    for k in a:
        if k in b and a[k].shape == b[k].shape:
            maxdiff = max(maxdiff, float((a[k].float() - b[k].float()).abs().max()) if a[k].numel() else 0.0)
        elif k in b:
            missing.append(k + f" (shape {tuple(a[k].shape)} vs {tuple(b[k].shape)})")
    return {"params_missing_in_loaded": missing[:50], "params_extra_in_loaded": extra[:50],
            "param_maxabs_diff": maxdiff}


# ----------------------------------------------------------------------------------------------------------
# one fixture


def make_fixture(spec, out_root, report):
    import transformers as T
    name = spec["name"]
    d = os.path.join(out_root, name)
    obs = os.path.join(out_root, "_observed", name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(obs, ignore_errors=True)
    os.makedirs(d)
    os.makedirs(obs)
    rep = report.setdefault("fixtures", {}).setdefault(name, {})
    rep["status"] = "started"
    dtype = DTYPES[spec["dtype"]]
    cfg_cls, cls = classes(spec["family"])
    H = spec["cfg"]["hidden_size"]
    lm_sigma = 3.2 / math.sqrt(H)

    g = torch.Generator().manual_seed(spec["seed"] + 7)
    ids = torch.randint(2, 500, (spec["n_prompt"],), generator=g).tolist()

    # --- choose a weight seed with a healthy greedy margin
    best = None
    attempts = []
    for a in range(MAX_ATTEMPTS):
        seed = spec["seed"] + a
        torch.manual_seed(seed)
        cfg = cfg_cls(**copy.deepcopy(spec["cfg"]))
        model = construct(cls, cfg)
        impl = set_eager(model)
        osig = spec.get("out_sigma")
        if osig and a >= MAX_ATTEMPTS // 2:  # still degenerate after half the seeds: push harder
            osig *= 1.6
        rules = init_params(model, seed, lm_sigma, out_sigma=osig)
        round_to(model, dtype)
        t0 = time.time()
        logits, ev = evaluate(model, ids, N_NEW)
        attempts.append({"seed": seed, "min_margin": ev["min_margin"], "match": ev["greedy_equals_nocache_argmax"],
                         "secs": round(time.time() - t0, 2)})
        log(f"  [{name}] seed {seed}: min_margin {ev['min_margin']:.4g} match {ev['greedy_equals_nocache_argmax']}"
            f" distinct {ev['greedy_distinct_tokens']} argmax==current {ev['prompt_argmax_is_current_token']:.3f}"
            f" cached-vs-nocache {ev.get('cached_vs_nocache_logits_maxabs')} ({time.time() - t0:.1f}s)")
        ok = (ev["greedy_equals_nocache_argmax"] and ev["n_generated"] == N_NEW
              and ev["greedy_distinct_tokens"] >= N_NEW // 2 and ev["prompt_argmax_is_current_token"] <= 0.1)
        score = ev["min_margin"] if ok else -1.0
        if best is None or score > best[0]:
            best = (score, seed, model, logits, ev, impl, rules, cfg)
        if ok and ev["min_margin"] >= MARGIN_TARGET:
            break
    score, seed, model, logits, ev, impl, rules, cfg = best
    rep["seed_attempts"] = attempts
    rep["seed"] = seed
    rep["impl_after_set_eager"] = impl
    rep["init_rules"] = sorted(set(rules.values()))
    rep["config_attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    rep["model_class"] = type(model).__name__
    rep["tied_lm_head_shares_embedding"] = (
        model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr())
    rep["in_memory_param_names"] = sorted(model.state_dict().keys())
    rep["kernel_probe"] = probe_kernels(model, ids)
    log(f"  [{name}] chosen seed {seed}; kernel probe {rep['kernel_probe']}")

    arch = type(model).__name__
    # --- write the checkpoint
    if spec["save"] == "save_pretrained":
        model.to(dtype)
        model.save_pretrained(obs)
        model.to(torch.float32)
        saved_keys = [r["name"] for r in list_tensors(obs)]
        rep["save_pretrained_files"] = sorted(os.listdir(obs))
        rep["save_pretrained_tensor_names"] = saved_keys
        rep["save_pretrained_expert_layout"] = expert_layout_of(saved_keys)
        for f in os.listdir(obs):
            shutil.copy(os.path.join(obs, f), os.path.join(d, f))
        want = spec["expert_layout"]
        have = expert_layout_of(saved_keys)
        if want != "none" and have != want:
            log(f"  [{name}] save_pretrained wrote expert layout {have}; rewriting as {want}")
            sd = read_state(obs)
            sd = to_per_expert(sd) if want == "per_expert" else to_fused(sd)
            for f in weight_files(d):
                os.remove(os.path.join(d, f))
            if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
                os.remove(os.path.join(d, "model.safetensors.index.json"))
            save_file_pt(sd, os.path.join(d, "model.safetensors"))
            rep["rewritten_by_script"] = f"expert layout {have} -> {want}"
    elif spec["save"] == "manual_single":
        model.to(dtype)
        model.save_pretrained(obs)
        model.to(torch.float32)
        saved_keys = [r["name"] for r in list_tensors(obs)]
        rep["save_pretrained_files"] = sorted(os.listdir(obs))
        rep["save_pretrained_tensor_names"] = saved_keys
        rep["save_pretrained_expert_layout"] = expert_layout_of(saved_keys)
        for f in ("config.json", "generation_config.json"):
            if os.path.exists(os.path.join(obs, f)):
                shutil.copy(os.path.join(obs, f), os.path.join(d, f))
        sd = {k: v.to(dtype) for k, v in model.state_dict().items()}
        want = spec["expert_layout"]
        sd = to_fused(sd) if want == "fused" else to_per_expert(sd)
        save_file_pt(sd, os.path.join(d, "model.safetensors"))
        rep["rewritten_by_script"] = f"weights written with safetensors.save_file from the in-memory state dict ({want})"
    elif spec["save"] == "vl_sharded":
        arch = "Qwen3_5ForConditionalGeneration"
        torch.manual_seed(seed + 100)
        full_cfg = T.Qwen3_5Config(text_config=copy.deepcopy(spec["cfg"]), vision_config=dict(spec["vision_cfg"]),
                                   tie_word_embeddings=False, **spec["vl_ids"])
        cg = construct(T.Qwen3_5ForConditionalGeneration, full_cfg)
        set_eager(cg)
        with torch.no_grad():
            r = cg.model.language_model.load_state_dict(model.model.state_dict(), strict=True)
            cg.lm_head.weight.copy_(model.lm_head.weight)
        rep["cg_in_memory_param_names"] = sorted(cg.state_dict().keys())
        rep["cg_lm_head_tied"] = cg.lm_head.weight.data_ptr() == cg.get_input_embeddings().weight.data_ptr()
        try:
            cg_logits = forward_logits(cg, ids)
            rep["cg_in_memory_logits_maxabs_vs_text"] = float((cg_logits - logits).abs().max())
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rep["cg_in_memory_logits_error"] = repr(e)
        cg.config.architectures = ["Qwen3_5ForConditionalGeneration"]
        cg.save_pretrained(obs)
        saved_keys = [r["name"] for r in list_tensors(obs)]
        rep["save_pretrained_files"] = sorted(os.listdir(obs))
        rep["save_pretrained_tensor_names"] = saved_keys
        for f in ("config.json", "generation_config.json"):
            if os.path.exists(os.path.join(obs, f)):
                shutil.copy(os.path.join(obs, f), os.path.join(d, f))
        sd = {k: v.detach().clone() for k, v in cg.state_dict().items()}
        rep["vl_names_in_memory_vs_save_pretrained"] = {
            "only_in_memory": sorted(set(sd) - set(saved_keys)),
            "only_saved": sorted(set(saved_keys) - set(sd)),
        }
        # dummy MTP head tensors (published Qwen3.5 checkpoints carry mtp.*; an engine must ignore them)
        gm = torch.Generator().manual_seed(seed + 200)
        tc = spec["cfg"]
        nh, nkv, hd = tc["num_attention_heads"], tc["num_key_value_heads"], tc["head_dim"]

        def rn(*shape):
            return torch.randn(shape, generator=gm) * 0.08

        sd.update({
            "mtp.fc.weight": rn(H, 2 * H),
            "mtp.pre_fc_norm_embedding.weight": rn(H),
            "mtp.pre_fc_norm_hidden.weight": rn(H),
            "mtp.norm.weight": rn(H),
            "mtp.layers.0.input_layernorm.weight": rn(H),
            "mtp.layers.0.post_attention_layernorm.weight": rn(H),
            "mtp.layers.0.self_attn.k_proj.weight": rn(nkv * hd, H),
            "mtp.layers.0.self_attn.v_proj.weight": rn(nkv * hd, H),
            "mtp.layers.0.self_attn.q_norm.weight": rn(hd),
            "mtp.layers.0.self_attn.k_norm.weight": rn(hd),
        })
        sd = {k: v.to(dtype) for k, v in sd.items()}
        write_sharded(sd, d, 3)
        rep["rewritten_by_script"] = "3 shards + index written with safetensors.save_file (text, visual, mtp)"
    else:
        raise ValueError(spec["save"])

    if spec.get("drop_layer_types"):
        with open(os.path.join(d, "config.json")) as f:
            cj = json.load(f)
        for c in (cj, cj.get("text_config") or {}):
            c.pop("layer_types", None)
        # HF does not save full_attention_interval once layer_types is set; without either a reader (HF too)
        # falls back to the default interval 4.
        cj["full_attention_interval"] = spec["cfg"]["full_attention_interval"]
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cj, f, indent=2)
            f.write("\n")
        rep["rewritten_by_script"] = rep.get("rewritten_by_script", "") + "; layer_types dropped from config.json"

    tensors = list_tensors(d)
    rep["tensors"] = tensors
    rep["expert_layout"] = expert_layout_of([t["name"] for t in tensors])
    log(f"  [{name}] saved tensors ({len(tensors)}):")
    for t in tensors:
        log(f"     {t['name']:70s} {t['dtype']:5s} {t['shape']} {t['file']}")

    # --- reference outputs
    logits_path = os.path.join(d, "logits.f32")
    logits.contiguous().numpy().astype("<f4").tofile(logits_path)
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    text_cj = cj.get("text_config", cj)
    prompt = {
        "ids": ids,
        "n_new": N_NEW,
        "greedy": ev["greedy"],
        "vocab_size": VOCAB,
        "min_margin": ev["min_margin"],
        "arch": arch,
        "model_type": cj.get("model_type"),
        "reference_class": type(model).__name__,
        "weights_dtype": spec["dtype"],
        "layer_types": list(text_cj.get("layer_types") or model.config.layer_types),
        "expert_layout": rep["expert_layout"],
        "tie_word_embeddings": bool(spec["cfg"]["tie_word_embeddings"]),
        "n_prompt": len(ids),
        "logits_file": "logits.f32",
        "logits_shape": [len(ids), VOCAB],
        "greedy_equals_nocache_argmax": ev["greedy_equals_nocache_argmax"],
        "seed": seed,
    }
    with open(os.path.join(d, "prompt.json"), "w") as f:
        json.dump(prompt, f, indent=1)
        f.write("\n")
    rep["eval"] = {k: v for k, v in ev.items() if k not in ("greedy", "nocache_argmax")}
    rep["eval"]["nocache_argmax_mismatch_steps"] = [
        i for i, (a, b) in enumerate(zip(ev["nocache_argmax"], ev["greedy"])) if a != b]

    # --- reload what was written, the way a user would, and check it gives the same model
    checks = {}
    loaders = [("reload_" + cls.__name__, cls)]
    if spec["save"] == "vl_sharded":
        loaders = [("reload_Qwen3_5ForConditionalGeneration", T.Qwen3_5ForConditionalGeneration),
                   ("reload_AutoModelForCausalLM", T.AutoModelForCausalLM),
                   ("reload_Qwen3_5ForCausalLM", T.Qwen3_5ForCausalLM)]
    for lname, lcls in loaders:
        c = {}
        try:
            m2, info = load_pretrained(lcls, d)
            c["class"] = type(m2).__name__
            c["loading_info"] = info
            c["impl"] = set_eager(m2)
            if type(m2).__name__ == "Qwen3_5ForConditionalGeneration":
                def pm(k):
                    if k.startswith("model.language_model."):
                        return "model." + k[len("model.language_model."):]
                    return k
                c["state"] = compare_state(model, m2, pm)
            else:
                c["state"] = compare_state(model, m2)
            l2 = forward_logits(m2, ids)
            c["logits_maxabs_vs_reference"] = float((l2 - logits).abs().max())
            try:
                g2, _ = hf_generate(m2, ids, N_NEW)
                c["greedy_equal"] = g2 == ev["greedy"]
            except Exception as e:  # noqa: BLE001
                c["generate_error"] = repr(e)
            del m2
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            c["error"] = repr(e)
        checks[lname] = c
        log(f"  [{name}] {lname}: " + json.dumps({k: v for k, v in c.items() if k != 'impl'})[:1500])
    rep["reload_checks"] = checks

    files = {}
    for f in sorted(os.listdir(d)):
        p = os.path.join(d, f)
        files[f] = {"bytes": os.path.getsize(p), "sha256": sha256(p)}
    rep["files"] = files
    rep["status"] = "ok"
    log(f"  [{name}] done: files {json.dumps({k: v['bytes'] for k, v in files.items()})}")


# ----------------------------------------------------------------------------------------------------------


def environment():
    import transformers
    env = {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import safetensors
        env["safetensors"] = safetensors.__version__
    except Exception as e:  # noqa: BLE001
        env["safetensors"] = repr(e)
    import transformers.utils as tu
    for fn in ("is_flash_linear_attention_available", "is_causal_conv1d_available", "is_kernels_available",
               "is_mamba_ssm_available"):
        f = getattr(tu, fn, None)
        if f is None:
            try:
                import transformers.utils.import_utils as iu
                f = getattr(iu, fn, None)
            except Exception:  # noqa: BLE001
                f = None
        try:
            env[fn] = None if f is None else bool(f())
        except Exception as e:  # noqa: BLE001
            env[fn] = repr(e)
    for mod in ("fla", "causal_conv1d", "kernels", "flash_attn"):
        env[f"module_{mod}_installed"] = importlib.util.find_spec(mod) is not None
    env["torch_num_threads"] = torch.get_num_threads()
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=None, help="fixture names")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    os.makedirs(args.out, exist_ok=True)
    report = {"generator": "tools/make_fixtures.py", "n_new": N_NEW, "vocab_size": VOCAB}
    t_start = time.time()
    try:
        report["environment"] = environment()
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        report["environment"] = {"error": repr(e)}
    log("environment:", json.dumps(report["environment"]))
    for spec in FIXTURES:
        if args.only and spec["name"] not in args.only:
            continue
        log(f"=== {spec['name']}")
        t0 = time.time()
        try:
            make_fixture(spec, args.out, report)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report.setdefault("fixtures", {}).setdefault(spec["name"], {})["status"] = f"FAILED: {e!r}"
            report["fixtures"][spec["name"]]["traceback"] = traceback.format_exc()
        report["fixtures"][spec["name"]]["seconds"] = round(time.time() - t0, 1)
        with open(os.path.join(args.out, "manifest.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
    report["seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
        f.write("\n")
    log("summary:")
    for n, r in report.get("fixtures", {}).items():
        log(f"  {n}: {r.get('status')}  min_margin={r.get('eval', {}).get('min_margin')}"
            f"  match={r.get('eval', {}).get('greedy_equals_nocache_argmax')}")
    bad = [n for n, r in report.get("fixtures", {}).items() if r.get("status") != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
