"""make_fixtures.py's fixture list and model code: the fixture specs, HF model construction and init,
rounding, and the greedy / no-cache evaluation and kernel probes (split out of tools/make_fixtures.py; that
tool imports these back)."""
import re
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
