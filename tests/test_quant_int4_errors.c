// int4 (GPTQ / AWQ) bad input: every class is one clear error naming the tensor or the config key, never a model
// that loads wrong. The checkpoints are tests/int4_pack.c's packing of the qwen35_dense_tied fixture, edited: a
// config field changed, or in the safetensors header a tensor renamed / retyped / reshaped (same byte length).
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "int4_pack.h"
#include "model/model.h"
#include "test.h"

#define GPTQ_QC                                                                                                        \
    "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"sym\":true,\"desc_act\":false,"                       \
    "\"checkpoint_format\":\"gptq\""
#define AWQ_QC "{\"quant_method\":\"awq\",\"version\":\"gemm\",\"bits\":4,\"group_size\":32,\"zero_point\":true"

// Rewrites DIR/int4/config.json's quantization_config (NULL: removes it).
static void set_qc(const char *dir, const char *qc) {
    char *p = fd_sprintf("%s/int4/config.json", dir);
    json_t *root = json_load_file(p, 0, NULL);
    FD_CHECK(root, "%s", p);
    json_object_del(root, "quantization_config");
    if (qc) {
        json_error_t err;
        json_t *q = json_loads(qc, 0, &err);
        FD_CHECK(q, "qc text: %s", err.text);
        json_object_set_new(root, "quantization_config", q);
    }
    json_dump_file(root, p, JSON_INDENT(1));
    json_decref(root);
    free(p);
}

typedef struct {
    int awq;
    const char *qc;        // quantization_config text
    const char *from, *to; // header patch (NULL: none)
    const char *want;      // in the error message
} bad_case;

#define GATE "\"model.layers.0.mlp.gate_proj."
static const bad_case k_bad[] = {
    // --- config
    {0, "{\"quant_method\":\"gptq\",\"bits\":8,\"group_size\":32}", NULL, NULL, "gptq: bits 8 is not supported"},
    {0, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":48}", NULL, NULL, "group_size 48 is not supported"},
    {0, "{\"quant_method\":\"gptq\",\"bits\":4}", NULL, NULL, "gptq: missing 'group_size'"},
    {0, GPTQ_QC ",\"checkpoint_format\":\"marlin\"}", NULL, NULL, "checkpoint_format 'marlin' is not supported"},
    {0, GPTQ_QC ",\"lm_head\":true}", NULL, NULL, "quantized lm_head"},
    {0, GPTQ_QC ",\"pack_dtype\":\"int16\"}", NULL, NULL, "pack_dtype must be \"int32\""},
    {0, GPTQ_QC ",\"is_marlin_format\":true}", NULL, NULL, "is_marlin_format true is not supported"},
    {0, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"format\":\"bitblas\"}", NULL, NULL,
     "checkpoint_format 'bitblas' is not supported"},
    {0, GPTQ_QC ",\"dynamic\":{\"-:(\":{}}}", NULL, NULL, "dynamic rule '-:(' is not a valid regex"},
    {0, GPTQ_QC ",\"dynamic\":{\"+:.*down_proj\":{\"bits\":8}}}", NULL, NULL,
     "dynamic rule '+:.*down_proj': bits 8 is not supported"},
    {1, "{\"quant_method\":\"awq\",\"version\":\"gemv\",\"bits\":4,\"group_size\":32}", NULL, NULL,
     "awq version 'gemv' is not supported"},
    {1, AWQ_QC ",\"zero_point\":false}", NULL, NULL, "zero_point false is not supported"},
    {1, "{\"quant_method\":\"awq\",\"w_bit\":3,\"q_group_size\":32}", NULL, NULL, "awq: bits 3 is not supported"},
    // --- int4 tensors the config does not allow
    {0, NULL, NULL, NULL, "is int4 (GPTQ/AWQ) but config.json has no gptq or awq quantization_config"},
    {0, "{\"quant_method\":\"fp8\",\"fmt\":\"e4m3\",\"weight_block_size\":[128,128]}", NULL, NULL,
     "no gptq or awq quantization_config"},
    {0, GPTQ_QC ",\"dynamic\":{\"-:.*mlp\\\\.gate_proj\":{}}}", NULL, NULL,
     "'model.layers.0.mlp.gate_proj.qweight' is int4 but quantization_config excludes module "
     "'model.layers.0.mlp.gate_proj'"},
    {1, AWQ_QC ",\"modules_to_not_convert\":[\"mlp.up\"]}", NULL, NULL,
     "'model.layers.0.mlp.up_proj.qweight' is int4 but quantization_config excludes module"},
    // --- missing, mistyped, misshapen companions
    {0, GPTQ_QC "}", GATE "qzeros\"", GATE "qzeroX\"",
     "its qzeros 'model.layers.0.mlp.gate_proj.qzeros' is missing (expected I32 [2, 16])"},
    {0, GPTQ_QC "}", GATE "scales\"", GATE "scaleX\"",
     "its scales 'model.layers.0.mlp.gate_proj.scales' is missing (expected F16 [2, 128])"},
    {0, GPTQ_QC "}", GATE "qweight\"", GATE "qweighX\"",
     "missing tensor 'model.layers.0.mlp.gate_proj.qweight' (quantization_config (gptq) quantizes module"},
    {0, GPTQ_QC "}", GATE "qzeros\":{\"dtype\":\"I32\"", GATE "qzeros\":{\"dtype\":\"F32\"",
     "'model.layers.0.mlp.gate_proj.qzeros' has dtype F32, expected I32"},
    {0, GPTQ_QC "}", GATE "scales\":{\"dtype\":\"F16\",\"shape\":[2,128]",
     GATE "scales\":{\"dtype\":\"F16\",\"shape\":[128,2]",
     "'model.layers.0.mlp.gate_proj.scales' has the wrong shape (expected [2, 128]); the file has [128, 2]"},
    // the AWQ shape [K, N/8] under a GPTQ config: GPTQ wants [K/8, N]
    {0, GPTQ_QC "}", GATE "qweight\":{\"dtype\":\"I32\",\"shape\":[8,128]",
     GATE "qweight\":{\"dtype\":\"I32\",\"shape\":[64,16]",
     "'model.layers.0.mlp.gate_proj.qweight' has the wrong shape (expected [8, 128])"},
    {0, GPTQ_QC "}", GATE "g_idx\":{\"dtype\":\"I32\"", GATE "g_idx\":{\"dtype\":\"F32\"",
     "'model.layers.0.mlp.gate_proj.g_idx' has dtype F32, expected I32"},
    {0, "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"desc_act\":true}", GATE "g_idx\"", GATE "g_idX\"",
     "'model.layers.0.mlp.gate_proj.g_idx' is missing (desc_act true needs the group of every input)"},
};

TEST(quant_int4_bad_inputs_refused) {
    for (int awq = 0; awq < 2; awq++) {
        int4_spec s = {.awq = awq, .group = 32, .sym = 1, .seed = 5, .qc_json = awq ? AWQ_QC "}" : GPTQ_QC "}"};
        for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
            const bad_case *c = &k_bad[i];
            if (c->awq != awq) continue;
            char t[] = "/tmp/fd_int4eXXXXXX";
            ASSERT(mkdtemp(t));
            ASSERT(int4_make("qwen35_dense_tied", &s, t) > 0, "%s", fd_error_msg());
            set_qc(t, c->qc);
            if (c->from) ASSERT(int4_patch_header(t, c->from, c->to) == 0, "case %zu: %s", i, fd_error_msg());
            char *d = fd_sprintf("%s/int4", t);
            fd_model m;
            const int rc = model_load(d, &m);
            EXPECT(rc != 0, "case %zu loaded", i);
            if (rc == 0) model_free(&m);
            EXPECT(rc != 0 && strstr(fd_error_msg(), c->want), "case %zu: '%s' does not say '%s'", i, fd_error_msg(),
                   c->want);
            free(d);
            int4_rm(t);
        }
    }
}

// Bad data rather than bad metadata: a g_idx value outside the groups, and a module stored both dense and int4.
TEST(quant_int4_bad_g_idx_and_duplicate_module) {
    int4_spec s = {.group = 32, .sym = 1, .seed = 7, .qc_json = GPTQ_QC "}"};
    char t[] = "/tmp/fd_int4dXXXXXX";
    ASSERT(mkdtemp(t));
    ASSERT(int4_make("qwen35_dense_tied", &s, t) > 0, "%s", fd_error_msg());
    ASSERT(int4_patch_i32(t, "model.layers.0.mlp.down_proj.g_idx", 127, 4) == 0, "%s", fd_error_msg());
    char *d = fd_sprintf("%s/int4", t);
    fd_model m;
    int rc = model_load(d, &m);
    if (rc == 0) model_free(&m);
    EXPECT(rc != 0 && strstr(fd_error_msg(), "'model.layers.0.mlp.down_proj.g_idx': g_idx[127] = 4 is outside the 4 "
                                             "groups"),
           "%s", fd_error_msg());
    int4_rm(t);
    free(d);
    strcpy(t, "/tmp/fd_int4dXXXXXX");
    ASSERT(mkdtemp(t));
    d = fd_sprintf("%s/int4", t);
    s.also_dense = "model.layers.1.linear_attn.out_proj";
    ASSERT(int4_make("qwen35_dense_tied", &s, t) > 0, "%s", fd_error_msg());
    rc = model_load(d, &m);
    if (rc == 0) model_free(&m);
    EXPECT(rc != 0 && strstr(fd_error_msg(), "module 'model.layers.1.linear_attn.out_proj' has both "
                                             "'model.layers.1.linear_attn.out_proj.weight' and "
                                             "'model.layers.1.linear_attn.out_proj.qweight'"),
           "%s", fd_error_msg());
    free(d);
    int4_rm(t);
}

// The CUDA backend sends int4 weights to their own upload (repacked nibbles, src/cuda/gemv_int4.cu) before the
// dense path could copy the packed words as if they were elements, and its GEMM dispatch sends them to route
// gemm_int4 before the dense branches (a CPU build cannot run it: read the source, as test_cuda_sources.c does for
// other CUDA invariants). tests_cuda/test_cuda_int4.c checks the results on the GPU.
TEST(quant_int4_cuda_dispatch) {
    size_t len;
    char *src = fd_read_file(FD_SOURCE_DIR "/src/cuda/cuda_backend.cu", &len);
    ASSERT(src, "%s", fd_error_msg());
    const char *up = strstr(src, "static void cu_upload_weight(");
    ASSERT(up);
    const char *branch = strstr(up, "if (fd_wfmt_is_int4(w->fmt))"), *call = strstr(up, "cu_upload_int4(be, w);");
    const char *first_copy = strstr(up, "cudaMalloc(&dst");
    EXPECT(branch && call && first_copy && branch < call && call < first_copy,
           "cu_upload_weight must hand int4 to cu_upload_int4 before it copies anything");
    free(src);
    src = fd_read_file(FD_SOURCE_DIR "/src/cuda/gemm.cu", &len);
    ASSERT(src, "%s", fd_error_msg());
    const char *mm = strstr(src, "void cu_gemm_f32out(");
    ASSERT(mm);
    const char *i4 = strstr(mm, "cu_gemm_int4(be, out, x, W, n);"), *dense = strstr(mm, "W->dev_dtype == FD_BF16");
    EXPECT(i4 && dense && i4 < dense, "cu_gemm_f32out must send int4 weights to cu_gemm_int4 before the dense path");
    free(src);
}

// The same checkpoints load when the config and the tensors agree: the unedited ones, a positive dynamic rule,
// a `-:` rule for modules the file keeps dense, and a g_idx under desc_act false (honoured, as HF reads it).
TEST(quant_int4_good_configs_load) {
    static const char *const ok[] = {
        GPTQ_QC "}",
        GPTQ_QC ",\"dynamic\":{\"+:.*mlp.*\":{\"bits\":4,\"group_size\":32},\"-:.*lm_head.*\":{}}}",
        GPTQ_QC ",\"checkpoint_format\":\"gptq_v2\",\"desc_act\":true}",
        // what tools/make_int4_fixtures.py writes (and GPTQModel's extra keys)
        "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"sym\":true,\"desc_act\":false,"
        "\"checkpoint_format\":\"gptq\",\"lm_head\":false,\"dynamic\":{\"-:.*visual.*\":{},\"-:.*mtp.*\":{}},"
        "\"pack_dtype\":\"int32\",\"meta\":{\"quantizer\":[\"x\"]},\"damp_percent\":0.01,\"true_sequential\":true}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0] + 1; i++) {
        int4_spec s = {.group = 32, .sym = 1, .seed = 6, .qc_json = i < sizeof ok / sizeof ok[0] ? ok[i] : NULL};
        if (!s.qc_json) { // the AWQ config of tools/make_int4_fixtures.py
            s.awq = 1;
            s.qc_json = AWQ_QC ",\"modules_to_not_convert\":[\"in_proj_a\",\"in_proj_b\",\"shared_expert_gate\","
                               "\"visual\",\"mtp\"]}";
        }
        char t[] = "/tmp/fd_int4gXXXXXX";
        ASSERT(mkdtemp(t));
        ASSERT(int4_make("qwen35_dense_tied", &s, t) > 0, "%s", fd_error_msg());
        char *d = fd_sprintf("%s/int4", t);
        fd_model m;
        const int rc = model_load(d, &m);
        EXPECT(rc == 0, "config %zu: %s", i, fd_error_msg());
        if (rc == 0) model_free(&m);
        free(d);
        int4_rm(t);
    }
}

// The CLI on an int4 checkpoint: `info` names the format, `generate` on the CPU backend runs it (the CUDA backend
// runs it too: tests_cuda/test_cuda_int4.c).
TEST(quant_int4_cli_info_and_generate) {
    int4_spec s = {.awq = 1, .group = 32, .seed = 8, .qc_json = AWQ_QC "}"};
    char t[] = "/tmp/fd_int4cXXXXXX";
    ASSERT(mkdtemp(t));
    ASSERT(int4_make("qwen35_dense_tied", &s, t) > 0, "%s", fd_error_msg());
    char *cmd = fd_sprintf("%s info %s/int4 2>&1", test_bin(), t), *out = NULL;
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "weights: AWQ gemm int4, groups of 32"), "%s",
           out ? out : "(no output)");
    free(cmd), free(out), out = NULL;
    cmd = fd_sprintf("%s generate %s/int4 --ids 1,2,3 -n 4 2>/dev/null", test_bin(), t);
    EXPECT(test_run(cmd, &out) == 0 && out && out[0], "generate on the cpu backend");
    free(cmd), free(out);
    int4_rm(t);
}
