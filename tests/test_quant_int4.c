// GPTQ and AWQ int4 weights on the CPU reference. Three layers of checks:
//  - the element access on hand-made words (nibble order of each format, v1 vs v2 zeros, group boundaries, g_idx);
//  - a packing round trip: bf16 fixtures quantized and packed by tests/int4_pack.c (written from the published
//    packers, not from the loader), loaded, and compared with the same model stored as its dequantized F32 weights:
//    every linear weight and the prefill logits bitwise equal, excluded modules left dense;
//  - one clear error for every bad-input class (config and tensors), and the CUDA refusal's wording.
// The HF references of tools/make_int4_fixtures.py (logits of HF's fp32 forward on the dequantized weights) are
// checked when their directories exist; until the lead commits them the test prints that it skips.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "engine/engine.h"
#include "fixture.h"
#include "int4_pack.h"
#include "model/model.h"
#include "test.h"

static fd_weight hand(fd_wfmt fmt, int64_t N, int64_t K, const uint32_t *qw, const uint32_t *qz, const uint16_t *sc,
                      int group, int zero_add, const int32_t *gidx) {
    fd_weight w = {.name = "hand", .fmt = fmt, .dtype = FD_I32, .rows = N, .cols = K, .data = qw, .scale = sc,
                   .scale_dtype = FD_F16, .qzeros = qz, .g_idx = gidx, .group_size = group, .zero_add = zero_add};
    w.n_groups = (K + group - 1) / group;
    return w;
}

// Nibble i of GPTQ's word [k/8, n] is input k = 8 (k/8) + i; v1 stores z - 1 (0x77777777 is z = 8), v2 stores z.
TEST(quant_int4_gptq_nibbles_and_zero_convention) {
    enum { N = 8, K = 16 };
    uint32_t qw[K / 8 * N], qz[1] = {0x77777777u};
    for (int r = 0; r < K / 8; r++)
        for (int n = 0; n < N; n++) qw[r * N + n] = 0x76543210u + (uint32_t)r * 0x88888888u; // q = k (mod 16)
    uint16_t sc[N];
    for (int n = 0; n < N; n++) sc[n] = fd_f32_to_f16(0.5f * (float)(n + 1));
    fd_weight v1 = hand(FD_WFMT_GPTQ_INT4, N, K, qw, qz, sc, K, 1, NULL);
    fd_weight v2 = hand(FD_WFMT_GPTQ_INT4, N, K, qw, qz, sc, K, 0, NULL);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            const float s = 0.5f * (float)(n + 1);
            EXPECT(fd_weight_elem(&v1, n * K + k) == s * (float)(k - 8), "v1 (%d, %d)", n, k);
            EXPECT(fd_weight_elem(&v2, n * K + k) == s * (float)(k - 7), "v2 (%d, %d)", n, k);
        }
    // a zero per column: nibble j of qzeros is column j
    qz[0] = 0x01234567u; // column j stores 7 - j
    float row[K];
    for (int n = 0; n < N; n++) {
        fd_weight_f32(&v2, n * K, K, row);
        EXPECT(row[3] == 0.5f * (float)(n + 1) * (float)(3 - (7 - n)), "column %d zero", n);
    }
}

// AWQ packs along N in the order 0,2,4,6,1,3,5,7: nibble i holds column order[i].
TEST(quant_int4_awq_interleaved_order) {
    enum { N = 16, K = 8 };
    static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    uint32_t qw[K * N / 8], qz[N / 8] = {0x11111111u, 0x22222222u};
    for (int k = 0; k < K; k++)
        for (int c = 0; c < N / 8; c++) qw[k * (N / 8) + c] = 0xFEDCBA98u - (uint32_t)k * 0x11111111u;
    uint16_t sc[N];
    for (int n = 0; n < N; n++) sc[n] = fd_f32_to_f16(0.25f);
    fd_weight w = hand(FD_WFMT_AWQ_INT4, N, K, qw, qz, sc, K, 0, NULL);
    for (int k = 0; k < K; k++)
        for (int c = 0; c < N / 8; c++)
            for (int i = 0; i < 8; i++) {
                const int n = 8 * c + order[i], q = 8 + i - k, z = c + 1;
                EXPECT(fd_weight_elem(&w, n * K + k) == (float)(q - z) * 0.25f, "(%d, %d)", n, k);
            }
}

// Groups: input k uses row k / group of scales and zeros (GPTQ: row g_idx[k] when g_idx is given).
TEST(quant_int4_group_boundaries_and_g_idx) {
    enum { N = 8, K = 64, G = 2 };
    uint32_t qw[K / 8 * N], qz[G] = {0x77777777u, 0x33333333u};
    for (int i = 0; i < K / 8 * N; i++) qw[i] = 0xFFFFFFFFu; // q = 15
    uint16_t sc[G * N];
    for (int n = 0; n < N; n++) sc[n] = fd_f32_to_f16(1.0f), sc[N + n] = fd_f32_to_f16(2.0f);
    fd_weight w = hand(FD_WFMT_GPTQ_INT4, N, K, qw, qz, sc, 32, 1, NULL);
    EXPECT(fd_weight_elem(&w, 31) == 7.0f && fd_weight_elem(&w, 32) == 2.0f * 11.0f, "k 31 / 32: %g %g",
           fd_weight_elem(&w, 31), fd_weight_elem(&w, 32));
    int32_t gidx[K];
    for (int k = 0; k < K; k++) gidx[k] = k % 2; // act order: alternate groups
    w.g_idx = gidx;
    EXPECT(fd_weight_elem(&w, 0) == 7.0f && fd_weight_elem(&w, 1) == 22.0f && fd_weight_elem(&w, 63) == 22.0f);
    uint32_t aq[K * N / 8], az[G];
    for (int i = 0; i < K; i++) aq[i] = 0x99999999u;
    az[0] = 0x11111111u, az[1] = 0x88888888u;
    fd_weight a = hand(FD_WFMT_AWQ_INT4, N, K, aq, az, sc, 32, 0, NULL);
    EXPECT(fd_weight_elem(&a, 5 * K + 31) == 8.0f && fd_weight_elem(&a, 5 * K + 32) == 2.0f);
    EXPECT(fd_weight_bytes(&a) == (size_t)(N * K / 2 + G * N / 2 + G * N * 2));
    fd_weight v;
    EXPECT(fd_weight_view_rows(&a, 0, 4, &v) != 0 && strstr(fd_error_msg(), "row slices of awq-int4"));
}

// ---- packing round trip on the fixtures ----

static char *tmpdir(void) {
    char t[] = "/tmp/fd_int4XXXXXX";
    return mkdtemp(t) ? fd_strdup(t) : NULL;
}

static int not_attn(const char *m) { return !strstr(m, "attn") && !strstr(m, "shared_expert"); }

typedef struct {
    const char *fixture;
    int4_spec s;
    int excluded_dense; // the spec leaves some projections dense (checked on layer 0's in_qkv / in_qkvz)
} rt_case;

static const rt_case k_rt[] = {
    // Qwen's 27B GPTQ exclusions: attention (GDN and full) and shared experts stay bf16, the MLP is int4
    {"qwen35_dense_tied",
     {.group = 32, .sym = 1, .quantize = not_attn, .seed = 11,
      .qc_json = "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"sym\":true,\"desc_act\":false,"
                 "\"checkpoint_format\":\"gptq\",\"dynamic\":{\"-:.*attn.*\":{},\"-:.*shared_expert.*\":{},"
                 "\"-:.*mtp.*\":{}}}"},
     1},
    // v2 zeros, asymmetric, act order (g_idx a permutation's groups), experts one by one
    {"qwen3_next_moe",
     {.group = 32, .v2 = 1, .desc_act = 1, .seed = 12,
      .qc_json = "{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":32,\"sym\":false,\"desc_act\":true,"
                 "\"checkpoint_format\":\"gptq_v2\"}"},
     0},
    // AWQ gemm on every linear layer, AutoAWQ's own key names, a partial last group (K = 48, group 32)
    {"qwen3_next_moe",
     {.awq = 1, .group = 32, .seed = 13,
      .qc_json = "{\"quant_method\":\"awq\",\"version\":\"GEMM\",\"w_bit\":4,\"q_group_size\":32,"
                 "\"zero_point\":true,\"modules_to_not_convert\":null}"},
     0},
    // AWQ with modules_to_not_convert (substrings) and one group over K
    {"qwen35_dense_tied",
     {.awq = 1, .group = 0, .quantize = not_attn, .seed = 14,
      .qc_json = "{\"quant_method\":\"awq\",\"version\":\"gemm\",\"bits\":4,\"group_size\":-1,"
                 "\"zero_point\":true,\"modules_to_not_convert\":[\"attn\",\"shared_expert\"]}"},
     1},
};

static int same_weight(const fd_weight *a, const fd_weight *b) {
    if (a->rows != b->rows || a->cols != b->cols) return 0;
    const int64_t n = a->rows * a->cols;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    fd_weight_f32(a, 0, n, x);
    fd_weight_f32(b, 0, n, y);
    const int same = !memcmp(x, y, sizeof(float) * (size_t)n);
    free(x), free(y);
    return same;
}

// Every linear weight of a layer: int4 or dense as the spec says, and equal to the dequantized one.
static void check_layer(const rt_case *c, const fd_layer *Q, const fd_layer *D, int li, int64_t E, int *n_int4) {
    const fd_weight *q[] = {&Q->in_qkv, &Q->in_z,   &Q->in_qkvz, &Q->out_proj, &Q->q_proj,  &Q->k_proj,
                            &Q->v_proj, &Q->o_proj, &Q->gate_proj, &Q->up_proj, &Q->down_proj, &Q->sh_gate,
                            &Q->sh_up,  &Q->sh_down};
    const fd_weight *d[] = {&D->in_qkv, &D->in_z,   &D->in_qkvz, &D->out_proj, &D->q_proj,  &D->k_proj,
                            &D->v_proj, &D->o_proj, &D->gate_proj, &D->up_proj, &D->down_proj, &D->sh_gate,
                            &D->sh_up,  &D->sh_down};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        if (!q[i]->data) continue;
        EXPECT(same_weight(q[i], d[i]), "%s layer %d: %s differs from the dequantized weight", c->fixture, li,
               q[i]->name);
        *n_int4 += fd_wfmt_is_int4(q[i]->fmt);
    }
    for (int64_t e = 0; Q->ex_gate && e < E; e++) {
        EXPECT(same_weight(&Q->ex_gate[e], &D->ex_gate[e]) && same_weight(&Q->ex_up[e], &D->ex_up[e]) &&
                   same_weight(&Q->ex_down[e], &D->ex_down[e]),
               "%s layer %d expert %lld", c->fixture, li, (long long)e);
        *n_int4 += fd_wfmt_is_int4(Q->ex_gate[e].fmt) + fd_wfmt_is_int4(Q->ex_up[e].fmt) +
                   fd_wfmt_is_int4(Q->ex_down[e].fmt);
    }
}

static float *prefill_logits(fd_model *m, const fixture *fx) {
    fd_backend *be = fd_backend_cpu_create(0);
    model_upload(m, be);
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.capacity = fx->n_ids + 1;
    eo.max_batch = fx->n_ids;
    fd_engine e;
    float *lg = malloc(sizeof(float) * (size_t)fx->n_ids * (size_t)fx->vocab);
    if (engine_init(&e, m, be, &eo) || engine_prefill(&e, fx->ids, fx->n_ids, 0, lg, 1)) {
        free(lg);
        lg = NULL;
    } else {
        engine_free(&e);
    }
    be->destroy(be);
    return lg;
}

TEST(quant_int4_packing_round_trip) {
    for (size_t ci = 0; ci < sizeof k_rt / sizeof k_rt[0]; ci++) {
        const rt_case *c = &k_rt[ci];
        char *dir = tmpdir();
        ASSERT(dir);
        const int nq = int4_make(c->fixture, &c->s, dir);
        ASSERT(nq > 0, "case %zu: %s", ci, fd_error_msg());
        char *qd = fd_sprintf("%s/int4", dir), *dd = fd_sprintf("%s/deq", dir);
        fd_model mq, md;
        ASSERT(model_load(qd, &mq) == 0, "case %zu: %s", ci, fd_error_msg());
        ASSERT(model_load(dd, &md) == 0, "case %zu: %s", ci, fd_error_msg());
        EXPECT(mq.cfg.quant.method == (c->s.awq ? FD_QUANT_AWQ : FD_QUANT_GPTQ));
        int n_int4 = 0;
        for (int i = 0; i < mq.cfg.num_layers; i++)
            check_layer(c, &mq.layers[i], &md.layers[i], i, mq.cfg.num_experts, &n_int4);
        EXPECT(n_int4 == nq, "case %zu: %d int4 weights bound, %d packed", ci, n_int4, nq);
        const fd_layer *L0 = &mq.layers[0];
        const fd_weight *gdn_in = L0->in_qkv.data ? &L0->in_qkv : &L0->in_qkvz;
        EXPECT(gdn_in->fmt == (c->excluded_dense ? FD_WFMT_DENSE : c->s.awq ? FD_WFMT_AWQ_INT4 : FD_WFMT_GPTQ_INT4),
               "case %zu: GDN input projection is %s", ci, fd_wfmt_name(gdn_in->fmt));
        EXPECT(mq.lm_head.fmt == FD_WFMT_DENSE && mq.embed.fmt == FD_WFMT_DENSE);
        fixture fx;
        ASSERT(fixture_load(c->fixture, &fx) == 0, "%s", fd_error_msg());
        float *a = prefill_logits(&mq, &fx), *b = prefill_logits(&md, &fx);
        ASSERT(a && b, "%s", fd_error_msg());
        const size_t n = (size_t)fx.n_ids * (size_t)fx.vocab;
        EXPECT(!memcmp(a, b, n * sizeof(float)), "case %zu: int4 logits differ from the dequantized model's", ci);
        printf("    %-18s %s g%-3d %2d int4 weights: logits == dequantized F32 model; rel-L2 vs HF bf16 %.2e\n",
               c->fixture, c->s.awq ? "awq " : c->s.v2 ? "gptq2" : "gptq1", c->s.group, nq,
               test_rel_l2(a, fx.logits, n));
        free(a), free(b);
        fixture_free(&fx);
        model_free(&mq);
        model_free(&md);
        free(qd), free(dd);
        int4_rm(dir);
        free(dir);
    }
}


// tools/make_int4_fixtures.py's checkpoints (HF-made, published layouts): logits within 1e-4 of HF's fp32 forward
// on the dequantized weights and greedy ids identical. Skipped, with a line saying so, until they are committed.
TEST(quant_int4_hf_fixtures) {
    static const char *const names[] = {"int4_gptq_qwen35_dense", "int4_awq_qwen35_dense", "int4_gptq_qwen3_next_moe",
                                        "int4_awq_qwen3_next_moe", "int4_gptq_qwen35_moe", "int4_awq_qwen35_moe"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = fd_sprintf("tests/data/fixtures/%s/prompt.json", names[i]);
        const int have = access(p, R_OK) == 0;
        free(p);
        if (!have) {
            printf("    skip: tests/data/fixtures/%s is absent (make it with tools/make_int4_fixtures.py)\n", names[i]);
            continue;
        }
        fixture fx;
        ASSERT(fixture_load(names[i], &fx) == 0, "%s", fd_error_msg());
        fd_model m;
        ASSERT(model_load(fx.dir, &m) == 0, "%s: %s", names[i], fd_error_msg());
        float *lg = prefill_logits(&m, &fx);
        ASSERT(lg, "%s", fd_error_msg());
        const double err = test_rel_l2(lg, fx.logits, (size_t)fx.n_ids * (size_t)fx.vocab);
        fd_backend *be = fd_backend_cpu_create(0);
        model_upload(&m, be);
        fd_engine_opts eo;
        engine_default_opts(&eo);
        eo.capacity = fx.n_ids + fx.n_greedy + 1;
        fd_engine e;
        ASSERT(engine_init(&e, &m, be, &eo) == 0, "%s", fd_error_msg());
        int32_t *out = calloc((size_t)fx.n_greedy + 1, sizeof *out);
        ASSERT(engine_generate_greedy(&e, fx.ids, fx.n_ids, 64, fx.n_greedy, out) == 0, "%s", fd_error_msg());
        int same = 0;
        while (same < fx.n_greedy && out[same] == fx.greedy[same]) same++;
        printf("    %-26s logits rel-L2 vs HF (dequantized) %.2e, greedy %d/%d identical\n", names[i], err, same,
               fx.n_greedy);
        EXPECT(err <= 1e-4, "%s: rel-L2 %.3g", names[i], err);
        EXPECT(same == fx.n_greedy, "%s: greedy differs from HF at new token %d", names[i], same);
        free(out);
        engine_free(&e);
        be->destroy(be);
        free(lg);
        model_free(&m);
        fixture_free(&fx);
    }
}

// Every element of a weight quantized at load is within half a step (its group's scale / 2) of the bf16 value it
// came from: round to nearest, and AWQ's zero rounding clips at most half a step at the top of the range.
static void expect_rtn_bound(const fd_weight *q, const fd_weight *orig, const char *what) {
    ASSERT(fd_wfmt_is_int4(q->fmt) && q->rows == orig->rows && q->cols == orig->cols, "%s: not int4", what);
    const int64_t K = q->cols;
    float *a = malloc(sizeof(float) * (size_t)K), *b = malloc(sizeof(float) * (size_t)K);
    int bad = 0;
    for (int64_t n = 0; n < q->rows && !bad; n++) {
        fd_weight_f32(q, n * K, K, a);
        fd_weight_f32(orig, n * K, K, b);
        for (int64_t k = 0; k < K && !bad; k++) {
            const float s = fd_f16_to_f32(((const uint16_t *)q->scale)[(k / q->group_size) * q->rows + n]);
            if (fabsf(a[k] - b[k]) > 0.5f * s * 1.001f + 1e-7f) {
                EXPECT(0, "%s [%lld, %lld]: %g quantized to %g (scale %g)", what, (long long)n, (long long)k, b[k],
                       a[k], s);
                bad = 1;
            }
        }
    }
    free(a), free(b);
}

// --quantize gptq-int4 / awq-int4 on a bf16 checkpoint: the linear weights become int4 in groups of 128 in the
// published layouts (GPTQ leaving attention and the shared expert dense, as Qwen's GPTQ-Int4 do; fused experts,
// routers, in_proj_a/b and the LM head always stay), each element within half a step of its bf16 value, and the
// model runs with logits near HF's bf16 ones.
TEST(quant_int4_quantize_at_load) {
    fixture fx;
    ASSERT(fixture_load("qwen35_moe", &fx) == 0, "%s", fd_error_msg());
    fd_model ref;
    ASSERT(model_load(fx.dir, &ref) == 0, "%s", fd_error_msg());
    for (int awq = 0; awq < 2; awq++) {
        const fd_wfmt f = awq ? FD_WFMT_AWQ_INT4 : FD_WFMT_GPTQ_INT4;
        fd_model m;
        fd_load_opts o = {.quantize_int4 = f};
        ASSERT(model_load_with(fx.dir, &o, &m) == 0, "%s", fd_error_msg());
        const fd_layer *L0 = &m.layers[0], *L1 = &m.layers[1]; // GDN + MoE, attention + MoE
        EXPECT(L1->ex_gate[0].fmt == FD_WFMT_DENSE && L1->router.fmt == FD_WFMT_DENSE &&
                   m.lm_head.fmt == FD_WFMT_DENSE && L0->in_a.fmt == FD_WFMT_DENSE,
               "fused experts, router, in_proj_a and lm_head stay dense");
        EXPECT((L1->q_proj.fmt == f) == awq && (L0->in_qkv.fmt == f) == awq && (L1->sh_gate.fmt == f) == awq,
               "%s: attention / GDN / shared expert quantized only under AWQ", fd_wfmt_name(f));
        if (awq) {
            expect_rtn_bound(&L1->q_proj, &ref.layers[1].q_proj, "q_proj");
            expect_rtn_bound(&L0->in_qkv, &ref.layers[0].in_qkv, "in_proj_qkv");
            expect_rtn_bound(&L1->sh_down, &ref.layers[1].sh_down, "shared_expert.down_proj");
        } else {
            EXPECT(L1->q_proj.fmt == FD_WFMT_DENSE && L1->sh_gate.fmt == FD_WFMT_DENSE, "GPTQ exclusions");
        }
        fd_backend *be = fd_backend_cpu_create(0);
        double err = INFINITY;
        ASSERT(fixture_prefill_rel_l2(&fx, &m, be, &err) == 0, "%s", fd_error_msg());
        printf("    qwen35_moe --quantize %s: logits rel-L2 vs HF bf16 %.2e\n", awq ? "awq-int4" : "gptq-int4", err);
        // GPTQ leaves nothing of this model in int4 (its experts are fused, everything else is excluded)
        EXPECT(awq ? err < 0.5 && err > 1e-4 : err < 1e-5, "%s: rel-L2 %.3g", fd_wfmt_name(f), err);
        model_free(&m);
        be->destroy(be);
    }
    model_free(&ref);
    fixture_free(&fx);
}

// A dense GPTQ-quantized MLP (the dense fixture) passes the same bound; the CLI runs it and refuses other names.
TEST(quant_int4_quantize_at_load_dense_and_info) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_model ref, m;
    ASSERT(model_load(fx.dir, &ref) == 0, "%s", fd_error_msg());
    fd_load_opts o = {.quantize_int4 = FD_WFMT_GPTQ_INT4};
    ASSERT(model_load_with(fx.dir, &o, &m) == 0, "%s", fd_error_msg());
    expect_rtn_bound(&m.layers[0].gate_proj, &ref.layers[0].gate_proj, "gate_proj");
    expect_rtn_bound(&m.layers[0].down_proj, &ref.layers[0].down_proj, "down_proj");
    EXPECT(m.layers[0].out_proj.fmt == FD_WFMT_DENSE, "GPTQ: linear_attn.out_proj stays dense");
    model_free(&m);
    model_free(&ref);
    char *cmd = fd_sprintf("%s generate %s --quantize gptq-int4 --ids 1,2,3 -n 2 2>/dev/null", test_bin(), fx.dir);
    char *out = NULL;
    EXPECT(test_run(cmd, &out) == 0 && out && out[0], "generate --quantize gptq-int4: %s", out ? out : "(no output)");
    free(cmd), free(out), out = NULL;
    cmd = fd_sprintf("%s generate %s --quantize int8 --ids 1 -n 1 2>&1", test_bin(), fx.dir);
    EXPECT(test_run(cmd, &out) != 0 && out && strstr(out, "fp8, gptq-int4 or awq-int4"), "%s",
           out ? out : "(no output)");
    free(cmd), free(out);
    fixture_free(&fx);
}
