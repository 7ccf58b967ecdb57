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
import importlib.util
import json
import math
import os
import shutil
import sys
import time
import traceback

import torch

# moved to fixture_models.py / fixture_files.py; imported back, and re-exported for the tools that import this one
from fixture_models import (DTYPES, FIXTURES, FULL, LIN, MARGIN_TARGET, MAX_ATTEMPTS, N_NEW, VOCAB,  # noqa: F401
                            all_configs, classes, construct, evaluate, forward_logits, hf_generate, init_params, log,
                            manual_greedy, module_kind_of_params, probe_kernels, rope, round_to, set_eager)
from fixture_files import (compare_state, expert_layout_of, list_tensors, load_pretrained, read_state,  # noqa: F401
                           save_file_pt, sha256, to_fused, to_per_expert, weight_files, write_sharded)


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
