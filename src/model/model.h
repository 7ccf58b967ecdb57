// A bound model: configuration, the weights bound by name, and the rank plan every shape of the forward comes
// from. Binding lives in model.c / bind.c, the forward pass in forward.h (decoder.c, layers.c); the math of each op
// lives in the backends.
#ifndef FD_MODEL_H
#define FD_MODEL_H
#include "backend.h"
#include "io/safetensors.h"
#include "model/bind.h"
#include "model/config.h"
#include "model/plan.h"

typedef struct {
    fd_layer_kind kind;
    fd_weight input_norm, post_norm; // [d] zero-centred
    // GDN (kind == FD_LAYER_GDN)
    fd_weight in_qkvz, in_ba;        // qwen3_next: [Hk(2dk+2r dv), d], [2Hv, d]
    fd_weight in_qkv, in_z, in_b, in_a; // qwen3_5: [2Hk dk + Hv dv, d], [Hv dv, d], [Hv, d], [Hv, d]
    fd_weight conv_w;                // [conv_dim, 1, K] -> rows conv_dim, cols K
    fd_weight A_log, dt_bias;        // [Hv]
    fd_weight gdn_norm;              // [dv] plain (not zero-centred)
    fd_weight out_proj;              // [d, Hv dv]
    // attention (kind == FD_LAYER_ATTN)
    fd_weight q_proj;                // [H 2hd, d] interleaved query|gate per head
    fd_weight k_proj, v_proj;        // [Hkv hd, d]
    fd_weight o_proj;                // [d, H hd]
    fd_weight q_norm, k_norm;        // [hd] zero-centred
    // FFN
    int is_moe;
    fd_weight gate_proj, up_proj, down_proj; // dense: [I, d], [I, d], [d, I]
    fd_weight router;                        // [E, d]
    fd_weight *ex_gate, *ex_up, *ex_down;    // arrays of E views: [I, d], [I, d], [d, I]
    fd_weight sh_gate, sh_up, sh_down, sh_gate_w;
    fd_moe_weights moe;
} fd_layer;

typedef struct {
    fd_config cfg;
    fd_rank_plan plan; // this rank's shapes (rank 0 of 1, or a shard's: model_shard)
    st_set st;
    fd_weight embed;   // [V, d]
    fd_weight lm_head; // [V, d] (== embed data when tied)
    fd_weight final_norm;
    fd_layer *layers;
    int64_t n_params;
    char weight_prefix[64]; // "model." or "model.language_model."
    fd_binder binder;       // checkpoint tensors, or synthetic ones (bench --random-weights)
} fd_model;

// Load options. quantize_fp8: dense linear weights (the projections of GDN, attention, FFN, experts given one by
// one and shared experts) become FP8 e4m3 with 128 x 128 block scales at load (--quantize fp8).
// quantize_int4: 0, or FD_WFMT_GPTQ_INT4 / FD_WFMT_AWQ_INT4 (--quantize gptq-int4 | awq-int4): dense linear
// weights become int4 in groups of 128 (round to nearest) in the published layout; AWQ quantizes every one,
// GPTQ keeps those Qwen's GPTQ-Int4 checkpoints keep in bf16 (every `attn` module and the shared experts).
typedef struct {
    int quantize_fp8;
    int quantize_int4;
} fd_load_opts;
int model_load_with(const char *dir, const fd_load_opts *o, fd_model *m);
int model_random_with(const char *config_path, uint64_t seed, const fd_load_opts *o, fd_model *m);
// Loads config.json and binds every tensor. Returns 0 or -1 with fd_error set (message names file/tensor).
int model_load(const char *dir, fd_model *m);
// A model of the geometry in config file `config_path` (HF config.json format) with random bf16 weights.
int model_random(const char *config_path, uint64_t seed, fd_model *m);
// Gives the backend its copy of every weight.
void model_upload(fd_model *m, fd_backend *be);
// Frees the backend's copies (before the backend is destroyed).
void model_release(fd_model *m, fd_backend *be);
void model_free(fd_model *m);
// Rank `rank` of `tp` of a bound model (model/shard.c): its plan (plan_init's refusals apply) and its slice of every
// weight, as vLLM shards these models: column-parallel in-projections by output rows, row-parallel out-projections
// by input columns, attention by query heads (KV heads split, or replicated past their count), GDN by key/value
// head groups with the conv channels following, each expert's FFN (and the shared expert's) by its width, the LM
// head by vocabulary rows; embedding, norms and router replicated. Slices are views of `full`'s tensors where the
// layout allows, copies otherwise (owned by the shard). `full` (tp 1) must outlive the shard. 0, or -1 with
// fd_error set.
int model_shard(const fd_model *full, int rank, int tp, fd_model *out);
// One-line-per-fact summary (for `flashdelta info`).
void model_print_info(const fd_model *m, FILE *f);
#endif
