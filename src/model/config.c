// HF config.json → fd_config. Defaults mirror transformers 5.17's configuration classes
// (Qwen3_5TextConfig, Qwen3_5MoeTextConfig, Qwen3NextConfig), because a field missing from config.json means
// "the class default" to HF, and our numbers must match what HF would build from the same file.
#include "model/config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/json_util.h"
#include "model/quant_config.h"

// Per-architecture defaults (the dataclass field defaults in the HF configuration files).
typedef struct {
    const char *text_model_type;
    int vocab_size, hidden_size, intermediate_size, num_layers, num_kv_heads;
    int num_experts, top_k;
} arch_defaults;

static const arch_defaults k_defaults[FD_ARCH_COUNT] = {
    [FD_ARCH_QWEN3_5] = {"qwen3_5_text", 248320, 4096, 12288, 32, 4, 0, 0},
    [FD_ARCH_QWEN3_5_MOE] = {"qwen3_5_moe_text", 248320, 2048, 0, 40, 2, 256, 8},
    [FD_ARCH_QWEN3_NEXT] = {"qwen3_next", 151936, 2048, 5632, 48, 2, 512, 10},
};

const char *cfg_arch_name(fd_arch a) {
    switch (a) {
    case FD_ARCH_QWEN3_5:
        return "qwen3_5";
    case FD_ARCH_QWEN3_5_MOE:
        return "qwen3_5_moe";
    case FD_ARCH_QWEN3_NEXT:
        return "qwen3_next";
    default:
        return "?";
    }
}

// A parsing context: the file path for messages and the object the text fields live in.
typedef struct {
    const char *path;
    const json_t *obj;  // text_config (VL) or the root
    const char *prefix; // "text_config." or "" for messages
} ctx;

// JSON null counts as absent. HF treats null as "not set" for its optional fields (layer_types, rope_parameters,
// mlp_only_layers, eos_token_id); for the others a null would break HF itself, so the default is the useful reading.
static const json_t *field(const ctx *c, const char *key) {
    const json_t *v = json_object_get(c->obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

static int type_error(const ctx *c, const char *key, const char *want, const json_t *got) {
    return fd_error_set("%s: field '%s%s' must be %s, got %s", c->path, c->prefix, key, want, fd_json_kind(got));
}

static int int_value(const ctx *c, const char *key, const json_t *v, int *out) {
    if (!json_is_integer(v)) return type_error(c, key, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < INT_MIN || x > INT_MAX)
        return fd_error_set("%s: field '%s%s' = %lld is out of range", c->path, c->prefix, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_int(const ctx *c, const char *key, int def, int *out) {
    const json_t *v = field(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    return int_value(c, key, v, out);
}

static int num_value(const ctx *c, const char *key, const json_t *v, double *out) {
    if (!json_is_number(v)) return type_error(c, key, "a number", v);
    *out = json_number_value(v);
    return 0;
}

static int get_num(const ctx *c, const char *key, double def, double *out) {
    const json_t *v = field(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    return num_value(c, key, v, out);
}

static int get_bool(const ctx *c, const char *key, int def, int *out) {
    const json_t *v = field(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return type_error(c, key, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

static int require_positive(const ctx *c, const char *key, int v) {
    if (v <= 0) return fd_error_set("%s: field '%s%s' must be positive, got %d", c->path, c->prefix, key, v);
    return 0;
}

// eos_token_id: int, or a list whose first entry is used; absent/null/empty → -1.
static int parse_eos(const ctx *c, const json_t *v, int *out) {
    *out = -1;
    if (!v || json_is_null(v)) return 0;
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) return 0;
        return int_value(c, "eos_token_id[0]", json_array_get(v, 0), out);
    }
    if (!json_is_integer(v)) return type_error(c, "eos_token_id", "an integer or a list of integers", v);
    return int_value(c, "eos_token_id", v, out);
}

// layer_types given, or built from full_attention_interval as HF's __post_init__ does.
static int parse_layer_types(const ctx *c, fd_config *cfg) {
    const json_t *lt = field(c, "layer_types");
    if (!lt) {
        int interval;
        FD_TRY(get_int(c, "full_attention_interval", 4, &interval));
        FD_TRY(require_positive(c, "full_attention_interval", interval));
        for (int i = 0; i < cfg->num_layers; i++)
            cfg->layer_kind[i] = ((i + 1) % interval == 0) ? FD_LAYER_ATTN : FD_LAYER_GDN;
        return 0;
    }
    if (!json_is_array(lt)) return type_error(c, "layer_types", "a list of strings", lt);
    if ((int64_t)json_array_size(lt) != cfg->num_layers)
        return fd_error_set("%s: field '%slayer_types' has %zu entries, expected num_hidden_layers = %d", c->path,
                            c->prefix, json_array_size(lt), cfg->num_layers);
    for (int i = 0; i < cfg->num_layers; i++) {
        const json_t *e = json_array_get(lt, (size_t)i);
        if (!json_is_string(e))
            return fd_error_set("%s: field '%slayer_types[%d]' must be a string, got %s", c->path, c->prefix, i,
                                fd_json_kind(e));
        const char *s = json_string_value(e);
        // "mamba"/"attention" are the legacy names HF's remap_legacy_layer_types still accepts.
        if (!strcmp(s, "linear_attention") || !strcmp(s, "mamba"))
            cfg->layer_kind[i] = FD_LAYER_GDN;
        else if (!strcmp(s, "full_attention") || !strcmp(s, "attention"))
            cfg->layer_kind[i] = FD_LAYER_ATTN;
        else
            return fd_error_set("%s: field '%slayer_types[%d]' = '%s' is not supported (expected "
                                "'linear_attention' or 'full_attention')",
                                c->path, c->prefix, i, FD_SAFE(s));
    }
    return 0;
}

// RoPE: HF's convert_rope_params_to_dict takes rope_parameters (or the legacy rope_scaling, which wins when
// both are given), then fills rope_theta / partial_rotary_factor from top-level keys only where absent.
static int parse_rope(const ctx *c, fd_config *cfg, double *prf_out) {
    const json_t *rp = field(c, "rope_scaling");
    const char *rp_name = "rope_scaling";
    if (json_is_object(rp) && json_object_size(rp) == 0) rp = NULL; // Python: `{} or x` is x
    if (!rp) {
        rp = field(c, "rope_parameters");
        rp_name = "rope_parameters";
    }
    if (rp && !json_is_object(rp)) return type_error(c, rp_name, "an object", rp);
    double theta, prf;
    FD_TRY(get_num(c, "rope_theta", 10000.0, &theta));
    FD_TRY(get_num(c, "partial_rotary_factor", 0.25, &prf));
    if (rp) {
        ctx sub = *c;
        char pre[96];
        snprintf(pre, sizeof pre, "%s%s.", c->prefix, rp_name);
        sub.obj = rp;
        sub.prefix = pre;
        FD_TRY(get_num(&sub, "rope_theta", theta, &theta));
        FD_TRY(get_num(&sub, "partial_rotary_factor", prf, &prf));
        // Scaled RoPE variants change the frequencies; we implement only the default one, so refuse the rest
        // rather than silently computing different positions.
        const json_t *ty = field(&sub, "rope_type");
        if (!ty) ty = field(&sub, "type");
        if (ty && !json_is_string(ty)) return type_error(&sub, "rope_type", "a string", ty);
        if (ty && strcmp(json_string_value(ty), "default"))
            return fd_error_set("%s: field '%srope_type' = '%s' is not supported (only 'default' RoPE)", c->path, pre,
                                FD_SAFE(json_string_value(ty)));
    }
    if (!(theta > 0) || !isfinite(theta) || theta > 3e38)
        return fd_error_set("%s: rope_theta must be a positive finite number, got %g", c->path, theta);
    if (!(prf > 0) || prf > 1) return fd_error_set("%s: partial_rotary_factor must be in (0, 1], got %g", c->path, prf);
    cfg->rope_theta = (float)theta;
    cfg->partial_rotary_factor = (float)prf;
    *prf_out = prf;
    return 0;
}

static int parse_moe(const ctx *c, fd_config *cfg) {
    const arch_defaults *d = &k_defaults[cfg->arch];
    if (cfg->arch == FD_ARCH_QWEN3_5) return 0; // dense: any MoE keys are not read by HF either
    FD_TRY(get_int(c, "num_experts", d->num_experts, &cfg->num_experts));
    FD_TRY(get_int(c, "num_experts_per_tok", d->top_k, &cfg->num_experts_per_tok));
    FD_TRY(get_int(c, "moe_intermediate_size", 512, &cfg->moe_intermediate_size));
    FD_TRY(get_int(c, "shared_expert_intermediate_size", 512, &cfg->shared_expert_intermediate_size));
    cfg->decoder_sparse_step = 1;
    cfg->norm_topk_prob = 1; // Qwen3_5Moe's router always renormalises the top-k weights
    if (cfg->arch == FD_ARCH_QWEN3_NEXT) {
        FD_TRY(get_bool(c, "norm_topk_prob", 1, &cfg->norm_topk_prob));
        FD_TRY(get_int(c, "decoder_sparse_step", 1, &cfg->decoder_sparse_step));
        FD_TRY(require_positive(c, "decoder_sparse_step", cfg->decoder_sparse_step));
        const json_t *ml = field(c, "mlp_only_layers");
        if (ml && !json_is_array(ml)) return type_error(c, "mlp_only_layers", "a list of integers", ml);
        size_t n = ml ? json_array_size(ml) : 0;
        if (n > FD_MAX_LAYERS)
            return fd_error_set("%s: field '%smlp_only_layers' has %zu entries, at most %d", c->path, c->prefix, n,
                                FD_MAX_LAYERS);
        for (size_t i = 0; i < n; i++) {
            int li;
            FD_TRY(int_value(c, "mlp_only_layers[]", json_array_get(ml, i), &li));
            if (li < 0 || li >= cfg->num_layers)
                return fd_error_set("%s: field '%smlp_only_layers' contains %d, expected a layer index in [0, %d)",
                                    c->path, c->prefix, li, cfg->num_layers);
            cfg->mlp_only_layers[cfg->n_mlp_only_layers++] = li;
        }
    }
    if (cfg->arch == FD_ARCH_QWEN3_5_MOE && cfg->num_experts <= 0)
        return fd_error_set("%s: field '%snum_experts' must be positive for qwen3_5_moe, got %d", c->path, c->prefix,
                            cfg->num_experts);
    if (cfg->num_experts < 0)
        return fd_error_set("%s: field '%snum_experts' must be >= 0, got %d", c->path, c->prefix, cfg->num_experts);
    if (cfg->num_experts > 0) {
        if (cfg->num_experts_per_tok <= 0 || cfg->num_experts_per_tok > cfg->num_experts)
            return fd_error_set("%s: field '%snum_experts_per_tok' = %d must be in [1, num_experts = %d]", c->path,
                                c->prefix, cfg->num_experts_per_tok, cfg->num_experts);
        FD_TRY(require_positive(c, "moe_intermediate_size", cfg->moe_intermediate_size));
        FD_TRY(require_positive(c, "shared_expert_intermediate_size", cfg->shared_expert_intermediate_size));
    }
    return 0;
}

// Which layers get the sparse MoE block: qwen3_next's decoder-layer rule (Qwen3NextDecoderLayer); qwen3_5_moe
// builds Qwen3_5MoeSparseMoeBlock in every layer; qwen3_5 has none.
static void derive_moe_layers(fd_config *cfg) {
    for (int i = 0; i < cfg->num_layers; i++) {
        int moe = 0;
        if (cfg->arch == FD_ARCH_QWEN3_5_MOE) {
            moe = 1;
        } else if (cfg->arch == FD_ARCH_QWEN3_NEXT && cfg->num_experts > 0) {
            moe = (i + 1) % cfg->decoder_sparse_step == 0;
            for (int k = 0; k < cfg->n_mlp_only_layers; k++)
                if (cfg->mlp_only_layers[k] == i) moe = 0;
        }
        cfg->layer_is_moe[i] = moe;
    }
}

static int parse_text(const ctx *c, fd_config *cfg) {
    const arch_defaults *d = &k_defaults[cfg->arch];
    FD_TRY(get_int(c, "vocab_size", d->vocab_size, &cfg->vocab_size));
    FD_TRY(get_int(c, "hidden_size", d->hidden_size, &cfg->hidden_size));
    FD_TRY(get_int(c, "num_hidden_layers", d->num_layers, &cfg->num_layers));
    FD_TRY(get_int(c, "intermediate_size", d->intermediate_size, &cfg->intermediate_size));
    FD_TRY(get_int(c, "num_attention_heads", 16, &cfg->num_heads));
    FD_TRY(get_int(c, "num_key_value_heads", d->num_kv_heads, &cfg->num_kv_heads));
    FD_TRY(get_int(c, "head_dim", 256, &cfg->head_dim));
    FD_TRY(get_int(c, "max_position_embeddings", 32768, &cfg->max_position_embeddings));
    FD_TRY(get_int(c, "linear_num_key_heads", 16, &cfg->gdn_num_k_heads));
    FD_TRY(get_int(c, "linear_num_value_heads", 32, &cfg->gdn_num_v_heads));
    FD_TRY(get_int(c, "linear_key_head_dim", 128, &cfg->gdn_k_dim));
    FD_TRY(get_int(c, "linear_value_head_dim", 128, &cfg->gdn_v_dim));
    FD_TRY(get_int(c, "linear_conv_kernel_dim", 4, &cfg->gdn_conv_kernel));
    double eps;
    FD_TRY(get_num(c, "rms_norm_eps", 1e-6, &eps));
    if (!(eps > 0) || eps > 1)
        return fd_error_set("%s: field '%srms_norm_eps' must be in (0, 1], got %g", c->path, c->prefix, eps);
    cfg->rms_norm_eps = (float)eps;

    static const char *const positive[] = {"vocab_size",
                                           "hidden_size",
                                           "num_hidden_layers",
                                           "num_attention_heads",
                                           "num_key_value_heads",
                                           "head_dim",
                                           "max_position_embeddings",
                                           "linear_num_key_heads",
                                           "linear_num_value_heads",
                                           "linear_key_head_dim",
                                           "linear_value_head_dim",
                                           "linear_conv_kernel_dim"};
    const int values[] = {cfg->vocab_size,
                          cfg->hidden_size,
                          cfg->num_layers,
                          cfg->num_heads,
                          cfg->num_kv_heads,
                          cfg->head_dim,
                          cfg->max_position_embeddings,
                          cfg->gdn_num_k_heads,
                          cfg->gdn_num_v_heads,
                          cfg->gdn_k_dim,
                          cfg->gdn_v_dim,
                          cfg->gdn_conv_kernel};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) FD_TRY(require_positive(c, positive[i], values[i]));
    if (cfg->num_layers > FD_MAX_LAYERS)
        return fd_error_set("%s: field '%snum_hidden_layers' = %d exceeds the supported maximum %d", c->path, c->prefix,
                            cfg->num_layers, FD_MAX_LAYERS);
    if (cfg->num_heads % cfg->num_kv_heads)
        return fd_error_set("%s: num_attention_heads = %d is not a multiple of num_key_value_heads = %d", c->path,
                            cfg->num_heads, cfg->num_kv_heads);
    if (cfg->gdn_num_v_heads % cfg->gdn_num_k_heads)
        return fd_error_set("%s: linear_num_value_heads = %d is not a multiple of linear_num_key_heads = %d", c->path,
                            cfg->gdn_num_v_heads, cfg->gdn_num_k_heads);

    double prf = 0;
    FD_TRY(parse_rope(c, cfg, &prf));
    // HF: int(head_dim * partial_rotary_factor), computed in float64 like Python.
    cfg->rotary_dim = (int)((double)cfg->head_dim * prf);
    if (cfg->rotary_dim <= 0 || cfg->rotary_dim % 2 || cfg->rotary_dim > cfg->head_dim)
        return fd_error_set("%s: rotary dim = head_dim %d x partial_rotary_factor %g = %d must be even and in "
                            "[2, head_dim]",
                            c->path, cfg->head_dim, (double)cfg->partial_rotary_factor, cfg->rotary_dim);
    FD_TRY(parse_layer_types(c, cfg));
    FD_TRY(parse_moe(c, cfg));
    derive_moe_layers(cfg);
    for (int i = 0; i < cfg->num_layers; i++) {
        if (!cfg->layer_is_moe[i] && cfg->intermediate_size <= 0)
            return fd_error_set("%s: field '%sintermediate_size' must be positive (layer %d has a dense MLP), got %d",
                                c->path, c->prefix, i, cfg->intermediate_size);
    }
    // HF's qwen3_5 / qwen3_next attention always gates with sigmoid and never reads this key (DESIGN.md §3).
    const json_t *og = field(c, "output_gate_type");
    if (og && !(json_is_string(og) && !strcmp(json_string_value(og), "sigmoid")))
        FD_WARN("%s: output_gate_type = %s is ignored: HF's %s code always applies a sigmoid gate, and so do we",
                c->path, json_is_string(og) ? FD_SAFE(json_string_value(og)) : fd_json_kind(og),
                cfg_arch_name(cfg->arch));
    return 0;
}

static int copy_str(const char *path, const char *key, const char *s, char *dst, size_t cap) {
    size_t n = strlen(s);
    if (n >= cap) return fd_error_set("%s: field '%s' is too long (%zu characters)", path, key, n);
    memcpy(dst, s, n + 1);
    return 0;
}

static int parse_root(const json_t *root, const char *path, fd_config *cfg) {
    if (!json_is_object(root)) return fd_error_set("%s: expected a JSON object, got %s", path, fd_json_kind(root));
    ctx rc = {path, root, ""};
    const json_t *mt = field(&rc, "model_type");
    if (!mt)
        return fd_error_set("%s: missing 'model_type' (supported: qwen3_5, qwen3_5_text, qwen3_5_moe, "
                            "qwen3_5_moe_text, qwen3_next)",
                            path);
    if (!json_is_string(mt)) return type_error(&rc, "model_type", "a string", mt);
    const char *m = json_string_value(mt);
    int vl = 0;
    if (!strcmp(m, "qwen3_5") || !strcmp(m, "qwen3_5_text"))
        cfg->arch = FD_ARCH_QWEN3_5;
    else if (!strcmp(m, "qwen3_5_moe") || !strcmp(m, "qwen3_5_moe_text"))
        cfg->arch = FD_ARCH_QWEN3_5_MOE;
    else if (!strcmp(m, "qwen3_next"))
        cfg->arch = FD_ARCH_QWEN3_NEXT;
    else
        return fd_error_set("%s: unknown architecture '%s' (supported: qwen3_5, qwen3_5_text, qwen3_5_moe, "
                            "qwen3_5_moe_text, qwen3_next)",
                            path, FD_SAFE(m));
    vl = !strcmp(m, "qwen3_5") || !strcmp(m, "qwen3_5_moe");

    const json_t *archs = field(&rc, "architectures");
    if (archs) {
        if (!json_is_array(archs)) return type_error(&rc, "architectures", "a list of strings", archs);
        if (json_array_size(archs) > 0) {
            const json_t *a0 = json_array_get(archs, 0);
            if (!json_is_string(a0)) return type_error(&rc, "architectures[0]", "a string", a0);
            FD_TRY(
                copy_str(path, "architectures[0]", json_string_value(a0), cfg->architecture, sizeof cfg->architecture));
        }
    }

    ctx tc = rc;
    const char *text_type = m;
    if (vl) {
        // The multimodal wrapper: HF reads the language model's fields only from text_config.
        const json_t *t = field(&rc, "text_config");
        if (!t)
            return fd_error_set("%s: model_type '%s' needs a 'text_config' object with the language model's "
                                "fields",
                                path, m);
        if (!json_is_object(t)) return type_error(&rc, "text_config", "an object", t);
        tc.obj = t;
        tc.prefix = "text_config.";
        cfg->nested_text = 1;
        text_type = k_defaults[cfg->arch].text_model_type;
        const json_t *tmt = field(&tc, "model_type");
        if (tmt && !json_is_string(tmt)) return type_error(&tc, "model_type", "a string", tmt);
        if (tmt && strcmp(json_string_value(tmt), text_type))
            FD_WARN("%s: text_config.model_type '%s' differs from '%s'; HF builds a %s text config regardless", path,
                    FD_SAFE(json_string_value(tmt)), text_type, text_type);
    }
    FD_TRY(copy_str(path, "model_type", text_type, cfg->model_type, sizeof cfg->model_type));
    FD_TRY(parse_text(&tc, cfg));

    // tie_word_embeddings: the text config's value when it has one, else the top level, else HF's False.
    // transformers 5.17 is itself split here (tools/hf_config_probe.py): Qwen3_5ForConditionalGeneration ties by
    // the top-level flag, AutoModelForCausalLM (-> Qwen3_5ForCausalLM) by text_config's. Saved checkpoints carry
    // both, equal; when they differ we say so.
    int top_tie;
    FD_TRY(get_bool(&rc, "tie_word_embeddings", 0, &top_tie));
    cfg->tie_word_embeddings = top_tie;
    if (vl && field(&tc, "tie_word_embeddings")) {
        FD_TRY(get_bool(&tc, "tie_word_embeddings", 0, &cfg->tie_word_embeddings));
        if (field(&rc, "tie_word_embeddings") && top_tie != cfg->tie_word_embeddings)
            FD_WARN("%s: tie_word_embeddings is %s at the top level but %s in text_config; using text_config's "
                    "(as HF's Qwen3_5ForCausalLM does; Qwen3_5ForConditionalGeneration would use the top level)",
                    path, top_tie ? "true" : "false", cfg->tie_word_embeddings ? "true" : "false");
    }
    // Published VL checkpoints put quantization_config at the top level; accept it in text_config too.
    FD_TRY(cfg_parse_quant(field(&rc, "quantization_config") || !vl ? root : tc.obj, path, &cfg->quant));
    const json_t *eos = field(&tc, "eos_token_id");
    if (eos)
        FD_TRY(parse_eos(&tc, eos, &cfg->eos_token_id));
    else
        FD_TRY(parse_eos(&rc, field(&rc, "eos_token_id"), &cfg->eos_token_id));
    return 0;
}

int cfg_parse(const char *json_text, const char *path, fd_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->eos_token_id = -1;
    json_error_t jerr;
    json_t *root = json_loads(json_text, 0, &jerr);
    if (!root)
        return fd_error_set("%s: invalid JSON at line %d column %d: %s", path, jerr.line, jerr.column,
                            FD_SAFE(jerr.text));
    int rc = parse_root(root, path, cfg);
    json_decref(root);
    return rc;
}

// generation_config.json, when present, must be a JSON object whose eos_token_id (if any, and not null: HF writes
// null for "none") is a token id or a list of them. Checked with config.json, which every command loads, so `info`,
// `generate` and `serve` accept and refuse the same directories (serve reads the ids; it checks their range against
// the tokenizer).
static int check_generation_config(const char *dir) {
    char *path = fd_path_join(dir, "generation_config.json");
    int rc = 0;
    if (fd_file_exists(path)) {
        json_error_t e;
        json_t *j = json_load_file(path, 0, &e);
        const json_t *eos = json_object_get(j, "eos_token_id");
        int bad_eos = 0;
        for (size_t i = 0, k = json_is_array(eos) ? json_array_size(eos) : eos && !json_is_null(eos); i < k; i++) {
            const json_t *v = json_is_array(eos) ? json_array_get(eos, i) : eos;
            bad_eos |= !json_is_integer(v) || json_integer_value(v) < 0;
        }
        if (!j) rc = fd_error_set("%s: invalid JSON at line %d column %d: %s", path, e.line, e.column, e.text);
        else if (!json_is_object(j)) rc = fd_error_set("%s: not a JSON object", path);
        else if (bad_eos) rc = fd_error_set("%s: eos_token_id must be a token id or a list of token ids", path);
        json_decref(j);
    }
    free(path);
    return rc;
}

int cfg_load_dir(const char *dir, fd_config *cfg) {
    char *path = fd_path_join(dir, "config.json");
    size_t len;
    char *text = fd_read_file(path, &len);
    int rc;
    if (!text) {
        rc = -1; // fd_read_file's message names the path and the OS error
    } else if (strlen(text) != len) {
        rc = fd_error_set("%s: contains a NUL byte; not a JSON text file", path);
    } else {
        rc = cfg_parse(text, path, cfg);
    }
    free(text);
    free(path);
    if (!rc) rc = check_generation_config(dir);
    return rc;
}
