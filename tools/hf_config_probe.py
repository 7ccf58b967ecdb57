"""Probe how HF transformers interprets config.json fields that src/model/config.c must mirror.

Run on the GPU machine (torch + transformers): python3 tools/hf_config_probe.py
Prints, for small configs, the values HF derives (defaults, rope, layer types, MoE layers, tied embeddings)."""
import json

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

print("transformers", transformers.__version__)


def cfg_from(d):
    return AutoConfig.for_model(**d)


def text_of(c):
    return c.get_text_config(decoder=True) if hasattr(c, "get_text_config") else c


def show(d):
    c = cfg_from(json.loads(json.dumps(d)))
    t = text_of(c)
    rp = getattr(t, "rope_parameters", None)
    print(json.dumps(d)[:120])
    print("   ->", type(c).__name__, "text", type(t).__name__, "rope_parameters", rp,
          "head_dim", getattr(t, "head_dim", None), "layer_types", getattr(t, "layer_types", None)[:8],
          "tie(top)", getattr(c, "tie_word_embeddings", None), "tie(text)", getattr(t, "tie_word_embeddings", None),
          "eos", getattr(t, "eos_token_id", None), "eos(top)", getattr(c, "eos_token_id", None))
    return c


show({"model_type": "qwen3_5_text"})
show({"model_type": "qwen3_next"})
show({"model_type": "qwen3_5_moe_text"})
show({"model_type": "qwen3_next", "rope_theta": 5, "partial_rotary_factor": 0.5,
      "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}})
show({"model_type": "qwen3_next", "rope_theta": 5, "rope_parameters": {"partial_rotary_factor": 0.125}})
show({"model_type": "qwen3_next", "rope_scaling": {"rope_theta": 7, "type": "default"}, "rope_parameters": {"rope_theta": 9}})
show({"model_type": "qwen3_next", "num_hidden_layers": 7, "full_attention_interval": 3})
show({"model_type": "qwen3_5_text", "num_hidden_layers": 4, "layer_types": ["full_attention", "mamba", "attention", "linear_attention"]})

small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
             head_dim=16, linear_num_key_heads=1, linear_num_value_heads=2, linear_key_head_dim=8,
             linear_value_head_dim=8, vocab_size=64)
for top, txt in [(True, None), (True, False), (False, True), (None, True), (None, None)]:
    tc = dict(small, model_type="qwen3_5_text")
    if txt is not None:
        tc["tie_word_embeddings"] = txt
    d = {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": tc,
         "vision_config": {"depth": 1, "hidden_size": 16, "intermediate_size": 16, "num_heads": 1, "out_hidden_size": 32}}
    if top is not None:
        d["tie_word_embeddings"] = top
    c = show(d)
    for cls_name in ["Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM"]:
        cls = getattr(transformers, cls_name)
        try:
            m = cls(c if cls_name.endswith("Generation") else text_of(c))
            tied = m.lm_head.weight.data_ptr() == m.get_input_embeddings().weight.data_ptr()
            print(f"   top={top} text={txt}: {cls_name} tied={tied}")
        except Exception as e:  # noqa: BLE001
            print(f"   top={top} text={txt}: {cls_name} error {e!r}"[:200])
    try:
        m = AutoModelForCausalLM.from_config(c)
        tied = m.lm_head.weight.data_ptr() == m.get_input_embeddings().weight.data_ptr()
        print(f"   AutoModelForCausalLM -> {type(m).__name__} tied={tied}")
    except Exception as e:  # noqa: BLE001
        print("   AutoModelForCausalLM error", repr(e)[:200])

# MoE layer rule
c = cfg_from({"model_type": "qwen3_next", **small, "num_hidden_layers": 8, "decoder_sparse_step": 2,
              "mlp_only_layers": [3, 4], "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
              "shared_expert_intermediate_size": 16})
m = transformers.Qwen3NextForCausalLM(c)
print("qwen3_next moe layers", [type(l.mlp).__name__ for l in m.model.layers])
c = cfg_from({"model_type": "qwen3_5_moe_text", **small, "num_experts": 4, "num_experts_per_tok": 2,
              "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16, "mlp_only_layers": [0],
              "decoder_sparse_step": 2, "norm_topk_prob": False})
m = transformers.Qwen3_5MoeForCausalLM(c)
print("qwen3_5_moe moe layers", [type(l.mlp).__name__ for l in m.model.layers])
print("qwen3_5_moe norm_topk_prob attr", getattr(c, "norm_topk_prob", "absent"))
