// Quantized weights on the CPU reference: FP8 block-scaled checkpoints in the published layout (the fixtures of
// tools/make_quant_fixtures.py, whose logits are HF's on the dequantized weights, are checked in test_models.c
// with the others), the matmul on the stored format against the dequantized fp32 weights, --quantize fp8 at load,
// and one clear error for every bad-input class: a missing scale, a scale of the wrong shape or dtype, FP8 tensors
// without an FP8 quantization_config, an unsupported method / format / activation scheme / block size, a module
// that modules_to_not_convert excludes but the file quantizes, a scale on an unquantized weight.
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "engine/engine.h"
#include "fixture.h"
#include "model/model.h"
#include "test.h"

#define FX "tests/data/fixtures/fp8_qwen35_dense"

// A copy of the FP8 fixture in a temp dir: config.json edited by `edit` (may be NULL), and in the safetensors
// header the first occurrence of `from` replaced by `to` (same length, so every offset stays valid; NULL: none).
static char *bad_copy(void (*edit)(json_t *root), const char *from, const char *to) {
    char tmpl[] = "/tmp/fd_quantXXXXXX";
    if (!mkdtemp(tmpl)) return NULL;
    char *dir = fd_strdup(tmpl);
    char *cfg_out = fd_sprintf("%s/config.json", dir), *st_out = fd_sprintf("%s/model.safetensors", dir);
    json_t *root = json_load_file(FX "/config.json", 0, NULL);
    if (edit) edit(root);
    json_dump_file(root, cfg_out, JSON_INDENT(1));
    json_decref(root);
    size_t len;
    char *st = fd_read_file(FX "/model.safetensors", &len);
    if (from) {
        uint64_t hlen;
        memcpy(&hlen, st, 8);
        char *h = memmem(st + 8, hlen, from, strlen(from));
        FD_CHECK(h && strlen(from) == strlen(to), "bad_copy: '%s' not in the header", from);
        memcpy(h, to, strlen(to));
    }
    FILE *f = fopen(st_out, "wb");
    FD_CHECK(f && fwrite(st, 1, len, f) == len);
    fclose(f);
    free(st);
    free(cfg_out);
    free(st_out);
    return dir;
}

static void rm_copy(char *dir) {
    char *a = fd_sprintf("%s/config.json", dir), *b = fd_sprintf("%s/model.safetensors", dir);
    unlink(a);
    unlink(b);
    rmdir(dir);
    free(a);
    free(b);
    free(dir);
}

static json_t *qc(json_t *r) { return json_object_get(r, "quantization_config"); }
static void e_no_qc(json_t *r) { json_object_del(r, "quantization_config"); }
static void e_gptq(json_t *r) { json_object_set_new(qc(r), "quant_method", json_string("gptq")); }
static void e_awq(json_t *r) { json_object_set_new(qc(r), "quant_method", json_string("awq")); }
static void e_bnb(json_t *r) { json_object_set_new(qc(r), "quant_method", json_string("bitsandbytes")); }
static void e_e5m2(json_t *r) { json_object_set_new(qc(r), "fmt", json_string("e5m2")); }
static void e_static(json_t *r) { json_object_set_new(qc(r), "activation_scheme", json_string("static")); }
static void e_no_block(json_t *r) { json_object_del(qc(r), "weight_block_size"); }
static void e_block(json_t *r) {
    json_t *b = json_array();
    json_array_append_new(b, json_integer(128));
    json_array_append_new(b, json_integer(100));
    json_object_set_new(qc(r), "weight_block_size", b);
}
static void e_excluded(json_t *r) {
    json_array_append_new(json_object_get(qc(r), "modules_to_not_convert"),
                          json_string("model.layers.0.mlp.gate_proj"));
}
static void e_excluded_prefix(json_t *r) { // a dot-aligned part matches; "mlp.gate" must not match gate_proj
    json_array_append_new(json_object_get(qc(r), "modules_to_not_convert"), json_string("mlp.gate"));
}

TEST(quant_fp8_bad_inputs_refused) {
    static const struct {
        void (*edit)(json_t *);
        const char *from, *to, *want;
    } cases[] = {
        {e_no_qc, NULL, NULL, "no FP8 quantization_config"},
        {e_gptq, NULL, NULL, "gptq: missing 'group_size'"},
        {e_awq, NULL, NULL, "awq: missing 'group_size'"},
        {e_bnb, NULL, NULL, "'bitsandbytes' is not supported"},
        {e_e5m2, NULL, NULL, "fmt must be \"e4m3\""},
        {e_static, NULL, NULL, "activation_scheme must be \"dynamic\""},
        {e_no_block, NULL, NULL, "missing 'weight_block_size'"},
        {e_block, NULL, NULL, "weight_block_size [128, 100] is not supported"},
        {e_excluded, NULL, NULL, "modules_to_not_convert lists its module"},
        // the scale of layer 0's gate_proj renamed away: missing
        {NULL, "layers.0.mlp.gate_proj.weight_scale_inv", "layers.0.mlp.gate_proj.weight_scale_inX",
         "its scale 'model.layers.0.mlp.gate_proj.weight_scale_inv' is missing"},
        // a scale transposed: [2, 1] -> [1, 2] (in_proj_qkv's, 256 x 128 weights)
        {NULL, "\"shape\":[2,1],\"data_offsets\"", "\"shape\":[1,2],\"data_offsets\"", "has the wrong shape"},
        // a scale in an integer dtype
        {NULL, "\"dtype\":\"F32\",\"shape\":[1,1]", "\"dtype\":\"I32\",\"shape\":[1,1]", "expected F32, BF16 or F16"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = bad_copy(cases[i].edit, cases[i].from, cases[i].to);
        ASSERT(dir, "temp dir");
        fd_model m;
        const int rc = model_load(dir, &m);
        EXPECT(rc != 0, "case %zu: loaded", i);
        if (rc == 0) model_free(&m);
        EXPECT(rc != 0 && strstr(fd_error_msg(), cases[i].want), "case %zu: '%s' does not say '%s'", i, fd_error_msg(),
               cases[i].want);
        rm_copy(dir);
    }
    // "mlp.gate" (the router, kept in bf16) matches no gate_proj: the checkpoint still loads
    char *dir = bad_copy(e_excluded_prefix, NULL, NULL);
    fd_model m;
    EXPECT(model_load(dir, &m) == 0, "%s", fd_error_msg());
    model_free(&m);
    rm_copy(dir);
}

// The layout as published: which weights are FP8 (with their block scales), which stay bf16.
TEST(quant_fp8_binds_the_published_layout) {
    fd_model m;
    ASSERT(model_load(FX, &m) == 0, "%s", fd_error_msg());
    EXPECT(m.cfg.quant.method == FD_QUANT_FP8 && m.cfg.quant.block_rows == 128 && m.cfg.quant.block_cols == 128);
    const fd_layer *L = &m.layers[0];
    const int64_t I = m.cfg.intermediate_size, d = m.cfg.hidden_size;
    EXPECT(L->gate_proj.fmt == FD_WFMT_FP8_BLOCK && L->gate_proj.scale_cols == (d + 127) / 128 &&
           fd_weight_scale_rows(&L->gate_proj) == (I + 127) / 128);
    EXPECT(L->down_proj.fmt == FD_WFMT_FP8_BLOCK && L->down_proj.scale_cols == (I + 127) / 128);
    EXPECT(L->out_proj.fmt == FD_WFMT_FP8_BLOCK && L->in_qkv.fmt == FD_WFMT_FP8_BLOCK && L->in_z.fmt == FD_WFMT_FP8_BLOCK);
    EXPECT(m.layers[3].q_proj.fmt == FD_WFMT_FP8_BLOCK && m.layers[3].k_proj.fmt == FD_WFMT_FP8_BLOCK);
    EXPECT(L->in_a.fmt == FD_WFMT_DENSE && L->in_b.fmt == FD_WFMT_DENSE, "in_proj_a/b stay bf16");
    EXPECT(m.lm_head.fmt == FD_WFMT_DENSE && m.embed.fmt == FD_WFMT_DENSE);
    // the element access is fp8 value x its block's scale
    const uint8_t *q = L->down_proj.data;
    const int64_t k = L->down_proj.cols, r = 5, c = k - 3;
    const float want = fd_e4m3_to_f32(q[r * k + c]) * fd_weight_block_scale(&L->down_proj, r, c);
    EXPECT(fd_weight_elem(&L->down_proj, r * k + c) == want);
    model_free(&m);
}

// The CPU matmul on an FP8 weight equals the matmul on its dequantized fp32 copy (same products, same order).
TEST(quant_fp8_matmul_equals_dequantized) {
    fd_backend *be = fd_backend_cpu_create(1);
    uint64_t seed = 77;
    const int m = 200, k = 320, n = 5;
    float *w = malloc(sizeof(float) * m * k), *x = malloc(sizeof(float) * n * k);
    test_fill_uniform(w, (size_t)m * k, -2.f, 2.f, &seed);
    test_fill_uniform(x, (size_t)n * k, -1.f, 1.f, &seed);
    fd_weight src = {.name = "W", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = w};
    uint8_t *q;
    float *s;
    fd_weight w8;
    fd_weight_quantize_fp8(&src, 128, 128, &q, &s, &w8);
    float *deq = malloc(sizeof(float) * m * k);
    fd_weight_f32(&w8, 0, (int64_t)m * k, deq);
    double err = 0;
    for (int64_t i = 0; i < (int64_t)m * k; i++) err = fmax(err, fabs(deq[i] - w[i]) / (fabs(w[i]) + 1e-3));
    EXPECT(err < 0.07, "quantization relative error %.3g (e4m3: <= 1/16 of the value)", err); // 3 mantissa bits
    fd_weight wd = {.name = "Wd", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = deq};
    be->upload_weight(be, &w8);
    be->upload_weight(be, &wd);
    float *a = malloc(sizeof(float) * n * m), *b = malloc(sizeof(float) * n * m);
    be->matmul(be, a, x, &w8, n, 0);
    be->matmul(be, b, x, &wd, n, 0);
    EXPECT(!memcmp(a, b, sizeof(float) * n * m), "fp8 matmul differs from the dequantized one");
    free(w), free(x), free(q), free(s), free(deq), free(a), free(b);
    be->destroy(be);
}

// --quantize fp8 on a bf16 checkpoint: the linear weights become FP8 blocks, the rest stays; logits stay within
// the e4m3 rounding of the weights (~3 %) of HF's bf16 reference and the model still runs everywhere.
TEST(quant_fp8_quantize_at_load) {
    fixture fx;
    ASSERT(fixture_load("qwen35_moe", &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    fd_load_opts o = {.quantize_fp8 = 1};
    ASSERT(model_load_with(fx.dir, &o, &m) == 0, "%s", fd_error_msg());
    const fd_layer *L1 = &m.layers[1]; // attention + MoE
    EXPECT(L1->q_proj.fmt == FD_WFMT_FP8_BLOCK && L1->ex_gate[0].fmt == FD_WFMT_DENSE,
           "q_proj quantized; fused experts stay bf16");
    EXPECT(m.layers[0].in_qkv.fmt == FD_WFMT_FP8_BLOCK && m.layers[0].in_a.fmt == FD_WFMT_DENSE);
    EXPECT(L1->router.fmt == FD_WFMT_DENSE && m.lm_head.fmt == FD_WFMT_DENSE);
    fd_backend *be = fd_backend_cpu_create(0);
    double err = INFINITY;
    ASSERT(fixture_prefill_rel_l2(&fx, &m, be, &err) == 0, "%s", fd_error_msg());
    printf("    qwen35_moe --quantize fp8: logits rel-L2 vs HF bf16 %.2e\n", err);
    EXPECT(err < 0.1 && err > 1e-4, "rel-L2 %.3g", err);
    model_free(&m);
    be->destroy(be);
    fixture_free(&fx);
}
