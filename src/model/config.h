// Model configuration as read from a Hugging Face config.json (qwen3_5, qwen3_5_text, qwen3_5_moe,
// qwen3_5_moe_text, qwen3_next). Field names follow HF; derived fields are computed by cfg_finalize().
#ifndef FD_CONFIG_H
#define FD_CONFIG_H
#include <stdint.h>

typedef enum { FD_ARCH_QWEN3_5 = 0, FD_ARCH_QWEN3_5_MOE, FD_ARCH_QWEN3_NEXT, FD_ARCH_COUNT } fd_arch;
typedef enum { FD_LAYER_GDN = 0, FD_LAYER_ATTN = 1 } fd_layer_kind;

#define FD_MAX_LAYERS 512

// config.json's quantization_config (HF): how the checkpoint's linear weights are stored.
typedef enum { FD_QUANT_NONE = 0, FD_QUANT_FP8 = 1, FD_QUANT_GPTQ = 2, FD_QUANT_AWQ = 3 } fd_quant_method;
#define FD_QUANT_SKIP_BYTES 65536
#define FD_QUANT_DYN_BYTES 16384
#define FD_QUANT_MAX_DYN 256
typedef struct {
    fd_quant_method method;
    int block_rows, block_cols; // weight_block_size (fp8)
    // modules_to_not_convert, NUL-separated (n_skip names): modules the checkpoint keeps unquantized. FP8: whole
    // names or dot-aligned parts; AWQ: substrings of the module name (as vLLM matches them).
    char skip[FD_QUANT_SKIP_BYTES];
    int n_skip;
    // int4 (gptq / awq): bits (4), group_size (-1 in the file: one group over K, stored here as 0), GPTQ's
    // checkpoint_format as the zero offset (1: "gptq" v1 stores z - 1; 0: "gptq_v2"), desc_act, sym.
    int bits, group_size, zero_add, desc_act, sym;
    // GPTQModel's `dynamic` map, in file order: regexes (re.match: anchored at the start) NUL-separated;
    // dyn_neg[i] for "-:" (module not quantized), else a positive rule whose group size (0: the global one) the
    // module takes. The first matching rule decides, as in GPTQModel and vLLM.
    char dyn[FD_QUANT_DYN_BYTES];
    int n_dyn;
    unsigned char dyn_neg[FD_QUANT_MAX_DYN];
    int dyn_group[FD_QUANT_MAX_DYN];
} fd_quant_config;

typedef struct {
    fd_arch arch;
    char model_type[64];   // e.g. "qwen3_5_text" (the text config's model_type)
    char architecture[96]; // architectures[0], e.g. "Qwen3_5ForConditionalGeneration"
    int nested_text;       // 1 when the fields came from "text_config" (VL checkpoints)

    int vocab_size;
    int hidden_size;
    int num_layers;
    int intermediate_size; // dense SwiGLU width (qwen3_5; qwen3_next mlp_only_layers)
    float rms_norm_eps;
    int tie_word_embeddings;

    // gated attention
    int num_heads, num_kv_heads, head_dim;
    float rope_theta;
    float partial_rotary_factor;
    int rotary_dim; // derived: (int)(head_dim * partial_rotary_factor), even

    // Gated DeltaNet
    int gdn_num_k_heads, gdn_num_v_heads; // Hk, Hv
    int gdn_k_dim, gdn_v_dim;             // dk, dv
    int gdn_conv_kernel;                  // 4

    // MoE (0 experts = dense)
    int num_experts, num_experts_per_tok;
    int moe_intermediate_size, shared_expert_intermediate_size;
    int norm_topk_prob;      // qwen3_5_moe: always 1
    int decoder_sparse_step; // qwen3_next
    int mlp_only_layers[FD_MAX_LAYERS];
    int n_mlp_only_layers;

    fd_layer_kind layer_kind[FD_MAX_LAYERS];
    int layer_is_moe[FD_MAX_LAYERS]; // derived

    int max_position_embeddings;
    int eos_token_id; // first EOS from config, -1 if none
    fd_quant_config quant;
} fd_config;

// Parses config.json text (path is used in messages). Returns 0 or -1 with fd_error set.
int cfg_parse(const char *json_text, const char *path, fd_config *cfg);
// Loads DIR/config.json.
int cfg_load_dir(const char *dir, fd_config *cfg);
const char *cfg_arch_name(fd_arch a);
// Whether the module of tensor `name` ("X.weight" -> "X") is listed in modules_to_not_convert: an entry matches
// the whole module name or a dot-aligned part of it ("mlp.gate" matches "model.layers.0.mlp.gate", never
// "model.layers.0.mlp.gate_proj").
int cfg_quant_skips(const fd_quant_config *q, const char *name);
// int4 (gptq / awq): whether `module` (a tensor name without .qweight / .weight) is quantized by the config:
// 1 with *group_size set (0: one group over K), 0 when the config keeps it unquantized (a `-:` dynamic rule, or
// modules_to_not_convert), -1 with fd_error set for a dynamic regex that does not compile.
int cfg_quant_int4_module(const fd_quant_config *q, const char *module, int *group_size);
#endif
