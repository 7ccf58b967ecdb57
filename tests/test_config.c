// Tests of src/model/config: real published config shapes for each architecture, HF defaults, derived
// fields, and every validation error (each must return -1 with a message naming the file and the problem).
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "test.h"

#define P "m/config.json"

#define EXPECT_ERR(rc, ...)                                                                                            \
    do {                                                                                                               \
        EXPECT((rc) == -1, "(rc=%d)", (int)(rc));                                                                      \
        const char *subs_[] = {__VA_ARGS__};                                                                           \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++)                                                 \
            EXPECT(strstr(fd_error_msg(), subs_[k_]) != NULL, "message '%s' lacks '%s'", fd_error_msg(), subs_[k_]);   \
    } while (0)

// Parses `json` and expects failure with P plus the given substrings.
#define EXPECT_CFG_ERR(json, ...)                                                                                      \
    do {                                                                                                               \
        fd_config c_;                                                                                                  \
        EXPECT_ERR(cfg_parse(json, P, &c_), P, __VA_ARGS__);                                                           \
    } while (0)

// "linear_attention" x3 + "full_attention", repeated for n layers, as a JSON list.
static char *layer_types_json(int n) {
    size_t cap = (size_t)n * 24 + 8, len = 0;
    char *s = fd_malloc(cap);
    s[len++] = '[';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s\"%s\"", i ? "," : "",
                                (i + 1) % 4 ? "linear_attention" : "full_attention");
    s[len++] = ']';
    s[len] = 0;
    return s;
}

static int count_attn(const fd_config *c) {
    int n = 0;
    for (int i = 0; i < c->num_layers; i++) n += c->layer_kind[i] == FD_LAYER_ATTN;
    return n;
}

static int count_moe(const fd_config *c) {
    int n = 0;
    for (int i = 0; i < c->num_layers; i++) n += c->layer_is_moe[i];
    return n;
}

// ---- each architecture, as published ----

TEST(cfg_qwen3_next_published) {
    const char *j =
        "{\"architectures\":[\"Qwen3NextForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
        "\"bos_token_id\":151643,\"decoder_sparse_step\":1,\"eos_token_id\":151645,\"full_attention_interval\":4,"
        "\"head_dim\":256,\"hidden_act\":\"silu\",\"hidden_size\":2048,\"initializer_range\":0.02,"
        "\"intermediate_size\":5120,\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":128,"
        "\"linear_num_key_heads\":16,\"linear_num_value_heads\":32,\"linear_value_head_dim\":128,"
        "\"max_position_embeddings\":262144,\"mlp_only_layers\":[],\"model_type\":\"qwen3_next\","
        "\"moe_intermediate_size\":512,\"norm_topk_prob\":true,\"num_attention_heads\":16,\"num_experts\":512,"
        "\"num_experts_per_tok\":10,\"num_hidden_layers\":48,\"num_key_value_heads\":2,"
        "\"output_router_logits\":false,\"partial_rotary_factor\":0.25,\"rms_norm_eps\":1e-06,"
        "\"rope_scaling\":null,\"rope_theta\":10000000,\"router_aux_loss_coef\":0.001,"
        "\"shared_expert_intermediate_size\":512,\"tie_word_embeddings\":false,\"torch_dtype\":\"bfloat16\","
        "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";
    fd_config c;
    ASSERT(cfg_parse(j, P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_NEXT && !strcmp(cfg_arch_name(c.arch), "qwen3_next"));
    EXPECT(!strcmp(c.model_type, "qwen3_next") && !strcmp(c.architecture, "Qwen3NextForCausalLM"));
    EXPECT(c.nested_text == 0 && c.vocab_size == 151936 && c.hidden_size == 2048 && c.num_layers == 48);
    EXPECT(c.intermediate_size == 5120 && c.num_heads == 16 && c.num_kv_heads == 2 && c.head_dim == 256);
    EXPECT(c.rope_theta == 1e7f && c.partial_rotary_factor == 0.25f && c.rotary_dim == 64);
    EXPECT(c.gdn_num_k_heads == 16 && c.gdn_num_v_heads == 32 && c.gdn_k_dim == 128 && c.gdn_v_dim == 128);
    EXPECT(c.gdn_conv_kernel == 4 && c.rms_norm_eps == 1e-6f && c.max_position_embeddings == 262144);
    EXPECT(c.num_experts == 512 && c.num_experts_per_tok == 10 && c.moe_intermediate_size == 512);
    EXPECT(c.shared_expert_intermediate_size == 512 && c.norm_topk_prob == 1 && c.decoder_sparse_step == 1);
    EXPECT(c.tie_word_embeddings == 0 && c.eos_token_id == 151645 && c.n_mlp_only_layers == 0);
    EXPECT(count_attn(&c) == 12 && c.layer_kind[3] == FD_LAYER_ATTN && c.layer_kind[4] == FD_LAYER_GDN);
    EXPECT(count_moe(&c) == 48);
}

TEST(cfg_qwen3_5_vl_nested) {
    char *lt = layer_types_json(64);
    char *j = fd_sprintf(
        "{\"architectures\":[\"Qwen3_5ForConditionalGeneration\"],\"image_token_id\":248056,"
        "\"model_type\":\"qwen3_5\",\"text_config\":{\"attention_bias\":false,\"attn_output_gate\":true,"
        "\"dtype\":\"bfloat16\",\"eos_token_id\":248044,\"full_attention_interval\":4,\"head_dim\":256,"
        "\"hidden_act\":\"silu\",\"hidden_size\":5120,\"intermediate_size\":17408,\"layer_types\":%s,"
        "\"linear_conv_kernel_dim\":4,\"linear_key_head_dim\":128,\"linear_num_key_heads\":16,"
        "\"linear_num_value_heads\":48,\"linear_value_head_dim\":128,\"max_position_embeddings\":262144,"
        "\"mlp_only_layers\":[],\"model_type\":\"qwen3_5_text\",\"mtp_num_hidden_layers\":1,"
        "\"num_attention_heads\":24,\"num_hidden_layers\":64,\"num_key_value_heads\":4,\"rms_norm_eps\":1e-06,"
        "\"vocab_size\":248320,\"rope_parameters\":{\"mrope_interleaved\":true,\"mrope_section\":[11,11,10],"
        "\"rope_type\":\"default\",\"rope_theta\":10000000,\"partial_rotary_factor\":0.25}},"
        "\"tie_word_embeddings\":false,\"video_token_id\":248057,\"vision_config\":{\"depth\":27,"
        "\"hidden_size\":1152,\"model_type\":\"qwen3_5\"},\"vision_end_token_id\":248054}",
        lt);
    fd_config c;
    ASSERT(cfg_parse(j, P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_5 && c.nested_text == 1 && !strcmp(c.model_type, "qwen3_5_text"));
    EXPECT(!strcmp(c.architecture, "Qwen3_5ForConditionalGeneration"));
    EXPECT(c.hidden_size == 5120 && c.intermediate_size == 17408 && c.num_layers == 64 && c.num_heads == 24);
    EXPECT(c.num_kv_heads == 4 && c.gdn_num_v_heads == 48 && c.gdn_num_k_heads == 16);
    EXPECT(c.rope_theta == 1e7f && c.rotary_dim == 64 && c.eos_token_id == 248044 && c.tie_word_embeddings == 0);
    EXPECT(count_attn(&c) == 16 && count_moe(&c) == 0 && c.num_experts == 0);
    free(j), free(lt);
}

TEST(cfg_qwen3_5_moe_vl_nested) {
    const char *j = "{\"architectures\":[\"Qwen3_5MoeForConditionalGeneration\"],\"model_type\":\"qwen3_5_moe\","
                    "\"text_config\":{\"model_type\":\"qwen3_5_moe_text\",\"hidden_size\":2048,"
                    "\"num_hidden_layers\":40,\"num_experts\":256,\"num_experts_per_tok\":8,"
                    "\"moe_intermediate_size\":512,\"shared_expert_intermediate_size\":512,"
                    "\"norm_topk_prob\":false,\"mlp_only_layers\":[0],\"decoder_sparse_step\":2,"
                    "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000000,"
                    "\"partial_rotary_factor\":0.25},\"eos_token_id\":[248046,248044],"
                    "\"tie_word_embeddings\":true},\"tie_word_embeddings\":false}";
    fd_config c;
    fd_log_set_level(FD_LOG_QUIET); // the tie-flag disagreement warning is expected
    int rc = cfg_parse(j, P, &c);
    fd_log_set_level(FD_LOG_INFO);
    ASSERT(rc == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_5_MOE && c.nested_text == 1 && !strcmp(c.model_type, "qwen3_5_moe_text"));
    // Qwen3_5Moe: every layer is sparse MoE and top-k is always renormalised, whatever the extra keys say.
    EXPECT(count_moe(&c) == 40 && c.norm_topk_prob == 1 && c.num_experts == 256 && c.num_experts_per_tok == 8);
    EXPECT(c.intermediate_size == 0 && c.num_kv_heads == 2 && c.vocab_size == 248320);
    EXPECT(c.eos_token_id == 248046 && c.tie_word_embeddings == 1 && count_attn(&c) == 10);
}

// ---- HF defaults ----

TEST(cfg_defaults_qwen3_5_text) {
    fd_config c;
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_text\"}", P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_5 && c.nested_text == 0 && c.architecture[0] == 0);
    EXPECT(c.vocab_size == 248320 && c.hidden_size == 4096 && c.intermediate_size == 12288 && c.num_layers == 32);
    EXPECT(c.num_heads == 16 && c.num_kv_heads == 4 && c.head_dim == 256 && c.max_position_embeddings == 32768);
    EXPECT(c.rms_norm_eps == 1e-6f && c.rope_theta == 10000.f && c.partial_rotary_factor == 0.25f);
    EXPECT(c.rotary_dim == 64 && c.gdn_num_k_heads == 16 && c.gdn_num_v_heads == 32 && c.gdn_k_dim == 128);
    EXPECT(c.gdn_v_dim == 128 && c.gdn_conv_kernel == 4 && c.tie_word_embeddings == 0 && c.eos_token_id == -1);
    EXPECT(c.num_experts == 0 && count_moe(&c) == 0 && count_attn(&c) == 8);
    for (int i = 0; i < 32; i++) {
        fd_layer_kind want = (i + 1) % 4 == 0 ? FD_LAYER_ATTN : FD_LAYER_GDN;
        EXPECT(c.layer_kind[i] == want, "layer %d", i);
    }
}

TEST(cfg_defaults_moe_and_next) {
    fd_config c;
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_moe_text\"}", P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_5_MOE && c.hidden_size == 2048 && c.num_layers == 40 && c.num_kv_heads == 2);
    EXPECT(c.num_experts == 256 && c.num_experts_per_tok == 8 && c.moe_intermediate_size == 512);
    EXPECT(c.shared_expert_intermediate_size == 512 && count_moe(&c) == 40 && c.norm_topk_prob == 1);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\"}", P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.arch == FD_ARCH_QWEN3_NEXT && c.vocab_size == 151936 && c.hidden_size == 2048);
    EXPECT(c.intermediate_size == 5632 && c.num_layers == 48 && c.num_kv_heads == 2);
    EXPECT(c.num_experts == 512 && c.num_experts_per_tok == 10 && c.norm_topk_prob == 1 && count_moe(&c) == 48);
    EXPECT(c.decoder_sparse_step == 1 && c.rope_theta == 10000.f && c.rotary_dim == 64);
}

TEST(cfg_layer_types_interval_and_legacy_names) {
    fd_config c;
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":7,\"full_attention_interval\":3}", P, &c) ==
               0,
           "%s", fd_error_msg());
    for (int i = 0; i < 7; i++) EXPECT(c.layer_kind[i] == (i == 2 || i == 5 ? FD_LAYER_ATTN : FD_LAYER_GDN));
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"num_hidden_layers\":4,\"full_attention_interval\":4,"
                     "\"layer_types\":[\"full_attention\",\"mamba\",\"attention\",\"linear_attention\"]}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.layer_kind[0] == FD_LAYER_ATTN && c.layer_kind[1] == FD_LAYER_GDN);
    EXPECT(c.layer_kind[2] == FD_LAYER_ATTN && c.layer_kind[3] == FD_LAYER_GDN);
    // null means "absent": HF builds the list from the interval.
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"num_hidden_layers\":2,\"full_attention_interval\":1,"
                     "\"layer_types\":null}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(count_attn(&c) == 2);
}

TEST(cfg_rope_precedence) {
    fd_config c;
    // rope_parameters values win over legacy top-level keys, which only fill what is absent.
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"rope_theta\":5,\"partial_rotary_factor\":0.5,"
                     "\"rope_parameters\":{\"rope_theta\":1000000,\"rope_type\":\"default\"}}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.rope_theta == 1e6f && c.partial_rotary_factor == 0.5f && c.rotary_dim == 128);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"rope_theta\":5,"
                     "\"rope_parameters\":{\"partial_rotary_factor\":0.125}}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.rope_theta == 5.f && c.partial_rotary_factor == 0.125f && c.rotary_dim == 32);
    // Legacy rope_scaling replaces rope_parameters when both are given (HF: rope_scaling or rope_parameters).
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"rope_scaling\":{\"rope_theta\":7,\"type\":\"default\"},"
                     "\"rope_parameters\":{\"rope_theta\":9}}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.rope_theta == 7.f);
    // ...but an empty rope_scaling is falsy in Python, so rope_parameters applies.
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"rope_scaling\":{},\"rope_parameters\":{\"rope_theta\":9}}", P,
                     &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.rope_theta == 9.f);
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4}}",
                   "rope_parameters.rope_type", "'yarn'", "not supported");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}}",
                   "rope_scaling.rope_type", "'linear'");
}

TEST(cfg_tie_and_eos) {
    fd_config c;
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,\"eos_token_id\":[7,8],"
                     "\"text_config\":{\"num_hidden_layers\":4}}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    EXPECT(c.tie_word_embeddings == 1 && c.eos_token_id == 7 && c.num_layers == 4);
    fd_log_set_level(FD_LOG_QUIET); // the disagreement warning is expected
    int rc = cfg_parse("{\"model_type\":\"qwen3_5\",\"tie_word_embeddings\":true,"
                       "\"text_config\":{\"tie_word_embeddings\":false,\"eos_token_id\":[]}}",
                       P, &c);
    fd_log_set_level(FD_LOG_INFO);
    ASSERT(rc == 0, "%s", fd_error_msg());
    EXPECT(c.tie_word_embeddings == 0 && c.eos_token_id == -1);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5\",\"text_config\":{\"tie_word_embeddings\":true}}", P, &c) == 0, "%s",
           fd_error_msg());
    EXPECT(c.tie_word_embeddings == 1);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5\",\"text_config\":{}}", P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.tie_word_embeddings == 0);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"tie_word_embeddings\":true,\"eos_token_id\":null}", P, &c) ==
               0,
           "%s", fd_error_msg());
    EXPECT(c.tie_word_embeddings == 1 && c.eos_token_id == -1);
}

TEST(cfg_qwen3_next_moe_layer_rule) {
    fd_config c;
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":8,\"decoder_sparse_step\":2,"
                     "\"mlp_only_layers\":[3,4]}",
                     P, &c) == 0,
           "%s", fd_error_msg());
    // MoE iff not in mlp_only_layers and (i+1) % step == 0: layers 1, 5, 7.
    const int want[8] = {0, 1, 0, 0, 0, 1, 0, 1};
    for (int i = 0; i < 8; i++) EXPECT(c.layer_is_moe[i] == want[i], "layer %d", i);
    EXPECT(c.n_mlp_only_layers == 2 && c.mlp_only_layers[1] == 4);
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_next\",\"num_experts\":0,\"norm_topk_prob\":false}", P, &c) == 0, "%s",
           fd_error_msg());
    EXPECT(count_moe(&c) == 0 && c.norm_topk_prob == 0);
    // Dense qwen3_5 ignores MoE keys, as HF's dense model does.
    ASSERT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"num_experts\":8}", P, &c) == 0, "%s", fd_error_msg());
    EXPECT(c.num_experts == 0 && count_moe(&c) == 0);
}

TEST(cfg_output_gate_type_is_ignored) {
    fd_config c;
    int lvl_quiet = FD_LOG_QUIET;
    fd_log_set_level(lvl_quiet); // the warning is expected; keep the test output clean
    EXPECT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"output_gate_type\":\"swish\"}", P, &c) == 0);
    EXPECT(cfg_parse("{\"model_type\":\"qwen3_5_text\",\"output_gate_type\":\"sigmoid\"}", P, &c) == 0);
    fd_log_set_level(FD_LOG_INFO);
}

// ---- errors ----

TEST(cfg_unknown_arch_and_bad_json) {
    EXPECT_CFG_ERR("{\"model_type\":\"llama\"}", "unknown architecture 'llama'", "supported:", "qwen3_next");
    EXPECT_CFG_ERR("{\"architectures\":[\"X\"]}", "missing 'model_type'");
    EXPECT_CFG_ERR("{\"model_type\":\"llama\\nfake: line\"}", "unknown architecture 'llama?fake: line'");
    EXPECT_CFG_ERR("{\"model_type\":3}", "field 'model_type' must be a string, got an integer");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\n\"hidden_size\": 12,,}", "invalid JSON", "line 2", "column");
    EXPECT_CFG_ERR("", "invalid JSON");
    EXPECT_CFG_ERR("[1]", "expected a JSON object, got an array");
}

TEST(cfg_wrong_types) {
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"hidden_size\":\"big\"}",
                   "field 'hidden_size' must be an integer, got a string");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5\",\"text_config\":{\"hidden_size\":1.5}}",
                   "field 'text_config.hidden_size' must be an integer, got a real number");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"tie_word_embeddings\":1}",
                   "field 'tie_word_embeddings' must be a boolean");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"norm_topk_prob\":\"yes\"}", "'norm_topk_prob' must be a boolean");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rms_norm_eps\":\"1e-6\"}", "'rms_norm_eps' must be a number");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"layer_types\":\"all\"}", "'layer_types' must be a list");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\",3]}",
                   "'layer_types[1]' must be a string, got an integer");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rope_parameters\":\"default\"}",
                   "'rope_parameters' must be an object");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rope_parameters\":{\"rope_theta\":\"1e6\"}}",
                   "'rope_parameters.rope_theta' must be a number");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"eos_token_id\":\"</s>\"}",
                   "'eos_token_id' must be an integer or a list");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"eos_token_id\":[\"x\"]}", "'eos_token_id[0]' must be an integer");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"mlp_only_layers\":3}", "'mlp_only_layers' must be a list");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"mlp_only_layers\":[true]}",
                   "'mlp_only_layers[]' must be an integer");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5\",\"text_config\":[]}", "'text_config' must be an object");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5_moe\"}", "'qwen3_5_moe' needs a 'text_config' object");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"architectures\":\"Qwen3NextForCausalLM\"}",
                   "'architectures' must be a list");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"hidden_size\":10000000000}", "'hidden_size'", "out of range");
}

TEST(cfg_validation_errors) {
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"hidden_size\":0}", "'hidden_size' must be positive, got 0");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5\",\"text_config\":{\"head_dim\":-4}}",
                   "'text_config.head_dim' must be positive");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_attention_heads\":6,\"num_key_value_heads\":4}",
                   "num_attention_heads = 6 is not a multiple of num_key_value_heads = 4");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"linear_num_key_heads\":16,\"linear_num_value_heads\":24}",
                   "linear_num_value_heads = 24 is not a multiple of linear_num_key_heads = 16");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":513}", "513 exceeds", "512");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":3,"
                   "\"layer_types\":[\"full_attention\",\"linear_attention\"]}",
                   "'layer_types' has 2 entries, expected num_hidden_layers = 3");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":2,"
                   "\"layer_types\":[\"full_attention\",\"sliding_attention\"]}",
                   "'layer_types[1]' = 'sliding_attention' is not supported");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_experts\":8,\"num_experts_per_tok\":9}",
                   "'num_experts_per_tok' = 9 must be in [1, num_experts = 8]");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_experts_per_tok\":0}", "'num_experts_per_tok' = 0");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_experts\":-1}", "'num_experts' must be >= 0");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5_moe_text\",\"num_experts\":0}", "'num_experts' must be positive");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"moe_intermediate_size\":0}", "'moe_intermediate_size' must be");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"head_dim\":10,\"partial_rotary_factor\":0.5}", "rotary dim",
                   "= 5 must be even");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"partial_rotary_factor\":1.5}", "partial_rotary_factor", "(0, 1]");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rope_theta\":-1}", "rope_theta must be a positive");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"rms_norm_eps\":0}", "'rms_norm_eps' must be in (0, 1]");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"full_attention_interval\":0}",
                   "'full_attention_interval' must be positive");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"decoder_sparse_step\":0}",
                   "'decoder_sparse_step' must be positive");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":4,\"mlp_only_layers\":[4]}",
                   "'mlp_only_layers' contains 4, expected a layer index in [0, 4)");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_next\",\"num_experts\":0,\"intermediate_size\":0}",
                   "'intermediate_size' must be positive (layer 0 has a dense MLP)");
    EXPECT_CFG_ERR("{\"model_type\":\"qwen3_5\",\"text_config\":{\"intermediate_size\":0}}",
                   "'text_config.intermediate_size' must be positive");
}

TEST(cfg_load_dir_files) {
    char dir[256];
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fd_cfg_XXXXXX", base ? base : "/tmp");
    ASSERT(mkdtemp(dir) != NULL);
    fd_config c;
    char *path = fd_path_join(dir, "config.json");
    EXPECT_ERR(cfg_load_dir(dir, &c), path, "No such file");
    FILE *f = fopen(path, "wb");
    ASSERT(f != NULL);
    fputs("{\"model_type\":\"qwen3_next\",\"num_hidden_layers\":4}", f);
    fclose(f);
    EXPECT(cfg_load_dir(dir, &c) == 0 && c.num_layers == 4 && c.arch == FD_ARCH_QWEN3_NEXT, "%s", fd_error_msg());
    f = fopen(path, "wb");
    ASSERT(f != NULL);
    fputs("{\"model_type\":\n\"qwen3_next\",", f);
    fclose(f);
    EXPECT_ERR(cfg_load_dir(dir, &c), path, "invalid JSON", "line 2");
    f = fopen(path, "wb");
    ASSERT(f != NULL);
    fwrite("{\"model_type\":\"qwen3_next\"}\0x", 1, 29, f);
    fclose(f);
    EXPECT_ERR(cfg_load_dir(dir, &c), path, "NUL byte");
    unlink(path);
    rmdir(dir);
    free(path);
}

// The configs and checkpoints HF itself saved (tests/data/fixtures, made by tools/make_fixtures.py) must load.
TEST(cfg_st_hf_saved_fixtures) {
    static const struct {
        const char *dir;
        fd_arch arch;
        int nested, n_files;
    } fx[] = {{"qwen35_dense_tied", FD_ARCH_QWEN3_5, 0, 1},
              {"qwen35_moe", FD_ARCH_QWEN3_5_MOE, 0, 1},
              {"qwen35_vl_sharded", FD_ARCH_QWEN3_5, 1, 3},
              {"qwen3_next_moe", FD_ARCH_QWEN3_NEXT, 0, 1}};
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        char *dir = fd_sprintf("tests/data/fixtures/%s", fx[i].dir);
        char *cj = fd_path_join(dir, "config.json");
        if (!fd_file_exists(cj)) { // run from outside the source tree
            free(dir), free(cj);
            continue;
        }
        fd_config c;
        EXPECT(cfg_load_dir(dir, &c) == 0, "%s", fd_error_msg());
        EXPECT(c.arch == fx[i].arch && c.nested_text == fx[i].nested, "%s", fx[i].dir);
        st_set s;
        ASSERT(st_open_dir(dir, &s) == 0, "%s", fd_error_msg());
        EXPECT(s.n_files == fx[i].n_files, "%s: %d files", fx[i].dir, s.n_files);
        const char *embed = fx[i].nested ? "model.language_model.embed_tokens.weight" : "model.embed_tokens.weight";
        const st_tensor *e = st_find(&s, embed);
        EXPECT(e && e->ndim == 2 && e->shape[0] == c.vocab_size && e->shape[1] == c.hidden_size, "%s", fx[i].dir);
        EXPECT((st_find(&s, "lm_head.weight") == NULL) == (c.tie_word_embeddings != 0), "%s", fx[i].dir);
        st_close(&s);
        free(dir), free(cj);
    }
}
