// GPTQ / AWQ int4 weights on the GPU (route gemm_int4, src/cuda/gemv_int4.cu) on fresh random inputs,
// NaN-poisoned outputs. The weights are packed here from random integers, scales and zeros in the published
// layouts (AutoGPTQ / GPTQModel qweight [K/8, N] along k, AWQ gemm [K, N/8] along n in the order 0,2,4,6,1,3,5,7),
// and the reference is the CPU matmul on the test's own dequantized F32 weight s * (q - z); the CPU int4 path
// (base/weight.c, checked against HF on the int4 fixtures) must agree with that bitwise first, so a packing slip
// here cannot hide a matching slip in the kernel.
//   - the int4 GEMV for n in {1, 2, 5, 8, 9, 16} under gemm_act bf16 and bf16x2, GPTQ v1 / v2 and AWQ, groups of
//     32, 64, 128 and one group, f16 / bf16 / f32 scales, shapes with m not a multiple of 32, k not a multiple of
//     128 or 32 (partial chunks), several k slices with a short last one; counted as gemm_int4=gemv;
//   - batch invariance, bitwise: row j of a 16-row call equals the 1-row call on row j alone;
//   - the dequant route (n > 16, or selected, and act-order g_idx at any n), counted as gemm_int4=dequant;
//   - matmul_multi: the int4 weights of a group in one launch, bitwise the separate calls, mixed groups too;
// Whole models (the int4 HF fixtures, DFlash with an int4 target) are in test_cuda_int4_models.c.
// Thresholds as for bf16 / FP8 weights (cuda_rig.h): TOL_BF16 under bf16 activations, TOL_BF16X2 under bf16x2.
// The GEMV's weights are exact (integer q - z in bf16, the scale applied in fp32); the dequant route under bf16 rounds s (q - z).
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x1a4b4c4d4e4full)

// A random int4 weight [m, k] in a published layout. fmt: 0 GPTQ v1 (stored zero z - 1), 1 GPTQ v2, 2 AWQ.
// group 0: one group over k. scale_dtype: F16, BF16 or F32 (values exact in f16). act_order: GPTQ g_idx of a
// random permutation's groups (desc_act).
typedef struct {
    int fmt, m, k, group, act_order;
    fd_dtype scale_dtype;
} i4_spec;
typedef struct {
    fd_weight c, g, ref; // CPU int4, GPU int4, CPU dense F32 dequantized
    uint32_t *qweight, *qzeros;
    void *scales;
    int32_t *gidx;
    float *deq;
} i4w;

static const int k_awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7}; // column j sits in nibble k_awq_nibble[j]

static i4w mkw_int4(i4_spec sp) {
    i4w w;
    memset(&w, 0, sizeof w);
    const int m = sp.m, k = sp.k, gs = sp.group ? sp.group : k, G = (k + gs - 1) / gs;
    const int awq = sp.fmt == 2, zero_add = sp.fmt == 0;
    float *u = rnd((size_t)m * k, 0.f, 16.f);
    float *uz = rnd((size_t)G * m, 0.f, 16.f);
    float *us = rnd((size_t)G * m, 0.002f, 0.02f);
    // group of each input: k / gs, or (act order) the group of k's place in a random permutation
    w.gidx = fd_malloc((size_t)k * 4);
    for (int i = 0; i < k; i++) w.gidx[i] = i / gs;
    if (sp.act_order)
        for (int i = k - 1; i > 0; i--) { // Fisher-Yates on the groups' members
            float r;
            test_fill_uniform(&r, 1, 0.f, (float)(i + 1), &g_rig.seed);
            const int j = (int)r > i ? i : (int)r, t = w.gidx[i];
            w.gidx[i] = w.gidx[j], w.gidx[j] = t;
        }
    w.qweight = fd_calloc((size_t)m * k / 8, 4);
    w.qzeros = fd_calloc((size_t)G * m / 8, 4);
    w.deq = fd_malloc((size_t)m * k * 4);
    float *s = fd_malloc((size_t)G * m * 4);
    int *z = fd_malloc((size_t)G * m * sizeof(int));
    for (int g = 0; g < G; g++)
        for (int n = 0; n < m; n++) {
            float v = us[(size_t)g * m + n] * (n % 37 == 0 ? 40.f : 1.f); // a few rows orders of magnitude larger
            v = fd_f16_to_f32(fd_f32_to_f16(v));
            if (sp.scale_dtype == FD_BF16) v = fd_bf16_to_f32(fd_f32_to_bf16(v));
            s[(size_t)g * m + n] = v;
            int zz = (int)uz[(size_t)g * m + n] & 15; // [0, 16) may round up to 16
            if (zero_add && zz == 0) zz = 16;         // v1 stores z - 1: z in 1..16 (16: stored 15)
            z[(size_t)g * m + n] = zz;
            const uint32_t stored = (uint32_t)(zz - zero_add);
            const int pos = awq ? k_awq_nibble[n % 8] : n % 8;
            w.qzeros[(size_t)g * (m / 8) + n / 8] |= stored << (4 * pos);
        }
    for (int n = 0; n < m; n++)
        for (int i = 0; i < k; i++) {
            const uint32_t q = (uint32_t)u[(size_t)n * k + i] & 15u;
            if (awq)
                w.qweight[(size_t)i * (m / 8) + n / 8] |= q << (4 * k_awq_nibble[n % 8]);
            else
                w.qweight[(size_t)(i / 8) * m + n] |= q << (4 * (i % 8));
            const int g = w.gidx[i];
            w.deq[(size_t)n * k + i] = s[(size_t)g * m + n] * (float)((int)q - z[(size_t)g * m + n]);
        }
    const size_t ns = (size_t)G * m;
    if (sp.scale_dtype == FD_F32) {
        w.scales = s;
        s = NULL;
    } else {
        uint16_t *h = fd_malloc(ns * 2);
        for (size_t i = 0; i < ns; i++) h[i] = sp.scale_dtype == FD_BF16 ? fd_f32_to_bf16(s[i]) : fd_f32_to_f16(s[i]);
        w.scales = h;
    }
    fd_weight d = {.name = awq ? "awq.qweight" : "gptq.qweight",
                   .fmt = awq ? FD_WFMT_AWQ_INT4 : FD_WFMT_GPTQ_INT4,
                   .dtype = FD_I32,
                   .rows = m,
                   .cols = k,
                   .data = w.qweight,
                   .scale = w.scales,
                   .scale_dtype = sp.scale_dtype,
                   .qzeros = w.qzeros,
                   .g_idx = awq ? NULL : w.gidx,
                   .group_size = gs,
                   .zero_add = zero_add,
                   .n_groups = G};
    w.c = w.g = d;
    w.ref = (fd_weight){.name = "deq", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = w.deq};
    cpu()->upload_weight(cpu(), &w.c);
    cpu()->upload_weight(cpu(), &w.ref);
    gpu()->upload_weight(gpu(), &w.g);
    free(u), free(uz), free(us), free(s), free(z);
    return w;
}
static void freew_int4(i4w *w) {
    gpu()->release_weight(gpu(), &w->g);
    free(w->qweight), free(w->qzeros), free(w->scales), free(w->gidx), free(w->deq);
}

static float *gpu_mm(const float *x, const fd_weight *W, int n) { return cuda_rig_gpu_matmul(gpu(), x, W, n); }
static int64_t route_calls(const char *route, int value) { return cuda_rig_route_calls(gpu(), route, value); }

// The reference for x [n, k]: the CPU matmul on the dequantized F32 weight, after checking that the CPU int4
// path reads the packed words to the same products.
static float *reference(const i4w *w, const float *x, int n) {
    const size_t no = (size_t)n * w->ref.rows;
    float *ref = fd_malloc(no * 4), *via_int4 = fd_malloc(no * 4);
    cpu()->matmul(cpu(), ref, x, &w->ref, n, 0);
    cpu()->matmul(cpu(), via_int4, x, &w->c, n, 0);
    EXPECT(!memcmp(ref, via_int4, no * 4), "%s m %lld k %lld: the CPU int4 path disagrees with the test's packing",
           w->c.name, (long long)w->ref.rows, (long long)w->ref.cols);
    free(via_int4);
    return ref;
}

static const i4_spec k_specs[] = {
    // fmt, m, k, group, act_order, scale dtype
    {0, 256, 256, 128, 0, FD_F16},   {2, 256, 256, 128, 0, FD_F16},   {1, 200, 512, 64, 0, FD_F16},
    {2, 200, 512, 64, 0, FD_BF16},   {0, 1000, 1024, 128, 0, FD_F16}, {2, 96, 4096, 32, 0, FD_F16},
    {0, 136, 264, 128, 0, FD_F32},   {2, 136, 264, 32, 0, FD_F32},    {0, 64, 72, 0, 0, FD_F16},
    {2, 304, 2560, 128, 0, FD_F16},  {1, 128, 8320, 64, 0, FD_BF16},  {0, 40, 5128, 0, 0, FD_F16},
    {2, 5120, 1536, 128, 0, FD_F16},
};
static const int k_ns[] = {1, 2, 5, 8, 9, 16};

static void check_gemv(const char *gemm_act, double tol) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    for (size_t s = 0; s < sizeof k_specs / sizeof k_specs[0]; s++) {
        const i4_spec sp = k_specs[s];
        i4w w = mkw_int4(sp);
        for (size_t j = 0; j < sizeof k_ns / sizeof k_ns[0]; j++) {
            const int n = k_ns[j];
            float *x = rnd((size_t)n * sp.k, -1.f, 1.f);
            float *ref = reference(&w, x, n);
            const int64_t before = route_calls("gemm_int4", 0);
            float *got = gpu_mm(x, &w.g, n);
            const double e = test_rel_l2(got, ref, (size_t)n * sp.m);
            EXPECT(e <= tol, "fmt %d m %d k %d group %d n %d gemm_act %s: rel-L2 %.3g > %.3g", sp.fmt, sp.m, sp.k,
                   sp.group, n, gemm_act, e, tol);
            EXPECT(route_calls("gemm_int4", 0) == before + 1, "fmt %d m %d k %d n %d: not counted as gemm_int4=gemv",
                   sp.fmt, sp.m, sp.k, n);
            free(x), free(ref), free(got);
        }
        freew_int4(&w);
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
}

TEST(cuda_int4_gemv_vs_cpu) {
    check_gemv("bf16", TOL_BF16);
    check_gemv("bf16x2", TOL_BF16X2);
}

TEST(cuda_int4_gemv_batch_invariant) {
    for (int fmt = 0; fmt < 3; fmt += 2) {
        const i4_spec sp = {fmt, 1000, 4160, 128, 0, FD_F16}; // 33 chunks, two k slices: unequal warp counts
        i4w w = mkw_int4(sp);
        const int n = 16, k = sp.k;
        float *x = rnd((size_t)n * k, -1.f, 1.f);
        x[5 * k + 3] = 1e30f; // another row's huge value must not leak into the others
        float *all = gpu_mm(x, &w.g, n);
        for (int r = 0; r < n; r++) {
            if (r == 5) continue;
            float *one = gpu_mm(x + (size_t)r * k, &w.g, 1);
            EXPECT(!memcmp(one, all + (size_t)r * sp.m, (size_t)sp.m * 4),
                   "fmt %d: row %d of the 16-row call differs from the 1-row call", fmt, r);
            free(one);
        }
        for (int nn = 2; nn <= 9; nn += 7) { // n = 2 and 9 (the two token-group variants) agree with n = 16
            float *part = gpu_mm(x + (size_t)6 * k, &w.g, nn);
            EXPECT(!memcmp(part, all + (size_t)6 * sp.m, (size_t)nn * sp.m * 4),
                   "fmt %d: rows 6.. of a %d-row call differ from the 16-row call", fmt, nn);
            free(part);
        }
        free(x), free(all);
        freew_int4(&w);
    }
}

TEST(cuda_int4_dequant_route) {
    const i4_spec specs[] = {
        {0, 320, 512, 128, 0, FD_F16}, {2, 320, 512, 64, 0, FD_F16}, {1, 136, 264, 32, 0, FD_BF16}};
    for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
        i4w w = mkw_int4(specs[si]);
        const int k = specs[si].k, m = specs[si].m;
        for (int act = 0; act < 2; act++) {
            ASSERT(fd_cuda_set_route(gpu(), "gemm_act", act ? "bf16x2" : "bf16") == 0, "%s", fd_error_msg());
            for (int sel = 0; sel < 3; sel++) {
                // dequant by shape (n > 16: a prefill chunk, then a longer one), then by selection at n = 5
                ASSERT(fd_cuda_set_route(gpu(), "gemm_int4", sel == 2 ? "dequant" : "gemv") == 0, "%s", fd_error_msg());
                const int n = sel == 0 ? 40 : sel == 1 ? 300 : 5;
                float *x = rnd((size_t)n * k, -1.f, 1.f);
                float *ref = reference(&w, x, n);
                const int64_t before = route_calls("gemm_int4", 1);
                float *got = gpu_mm(x, &w.g, n);
                const double e = test_rel_l2(got, ref, (size_t)n * m), tol = act ? TOL_BF16X2 : TOL_BF16;
                EXPECT(e <= tol, "fmt %d n %d dequant gemm_act %s: rel-L2 %.3g > %.3g", specs[si].fmt, n,
                       act ? "bf16x2" : "bf16", e, tol);
                EXPECT(route_calls("gemm_int4", 1) == before + 1, "n %d: not counted as gemm_int4=dequant", n);
                free(x), free(ref), free(got);
            }
        }
        freew_int4(&w);
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_int4", "gemv") == 0, "%s", fd_error_msg());
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
}

// desc_act: a g_idx that is not k / group_size runs the dequant route at every n (by shape), correctly; a plain
// g_idx (GPTQ writes one always) takes the GEMV.
TEST(cuda_int4_act_order) {
    const i4_spec sp = {0, 264, 1024, 128, 1, FD_F16};
    i4w w = mkw_int4(sp);
    const int ns[] = {1, 16, 40};
    for (int act = 0; act < 2; act++) {
        ASSERT(fd_cuda_set_route(gpu(), "gemm_act", act ? "bf16x2" : "bf16") == 0, "%s", fd_error_msg());
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            float *x = rnd((size_t)ns[j] * sp.k, -1.f, 1.f);
            float *ref = reference(&w, x, ns[j]);
            const int64_t before = route_calls("gemm_int4", 1);
            float *got = gpu_mm(x, &w.g, ns[j]);
            const double e = test_rel_l2(got, ref, (size_t)ns[j] * sp.m), tol = act ? TOL_BF16X2 : TOL_BF16;
            EXPECT(e <= tol, "act order n %d: rel-L2 %.3g > %.3g", ns[j], e, tol);
            EXPECT(route_calls("gemm_int4", 1) == before + 1, "act order n %d: not counted as gemm_int4=dequant",
                   ns[j]);
            free(x), free(ref), free(got);
        }
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
    EXPECT(w.g.g_idx != NULL, "an act-order g_idx must be kept at upload");
    freew_int4(&w);
    i4w plain = mkw_int4((i4_spec){0, 64, 256, 128, 0, FD_F16});
    EXPECT(plain.c.g_idx && !plain.g.g_idx, "a g_idx of k / group_size is dropped at upload (the GEMV takes it)");
    freew_int4(&plain);
}

// A group size the GEMV's power-of-two group index cannot take (384: a multiple of 128) runs the dequant route at
// n = 1, correctly; bf16 and f16 scales of one weight each (the GEMV's meta word reads the tensor's one dtype).
TEST(cuda_int4_odd_group_dequant) {
    const i4_spec specs[] = {{2, 96, 1536, 384, 0, FD_F16}, {0, 96, 1536, 384, 0, FD_BF16}};
    for (size_t si = 0; si < 2; si++) {
        i4w w = mkw_int4(specs[si]);
        float *x = rnd((size_t)specs[si].k, -1.f, 1.f);
        float *ref = reference(&w, x, 1);
        const int64_t before = route_calls("gemm_int4", 1);
        float *got = gpu_mm(x, &w.g, 1);
        const double e = test_rel_l2(got, ref, (size_t)specs[si].m);
        EXPECT(e <= TOL_BF16, "group 384 fmt %d: rel-L2 %.3g", specs[si].fmt, e);
        EXPECT(route_calls("gemm_int4", 1) == before + 1, "group 384: not counted as gemm_int4=dequant");
        free(x), free(ref), free(got);
        freew_int4(&w);
    }
}

// matmul_multi over int4 weights of one k and grouping (FFN gate|up, attention q|k|v under AWQ): one fused launch,
// each result bitwise the separate call's, each weight counted under gemm_int4=gemv; a group mixing int4 and bf16
// weights (GDN qkv|z int4 with in_proj_b|a dense) runs the int4 ones fused and the dense ones on their own path.
TEST(cuda_int4_matmul_multi_fused) {
    const int k = 1024;
    i4w a = mkw_int4((i4_spec){2, 1000, k, 128, 0, FD_F16}), b = mkw_int4((i4_spec){2, 520, k, 128, 0, FD_F16}),
        c = mkw_int4((i4_spec){0, 264, k, 128, 0, FD_F16});
    float *wd = rnd((size_t)48 * k, -0.05f, 0.05f);
    uint16_t *wb = fd_malloc((size_t)48 * k * 2);
    for (size_t i = 0; i < (size_t)48 * k; i++) wb[i] = fd_f32_to_bf16(wd[i]);
    fd_weight dense = {.name = "dense", .fmt = FD_WFMT_DENSE, .dtype = FD_BF16, .rows = 48, .cols = k, .data = wb};
    gpu()->upload_weight(gpu(), &dense);
    const fd_weight *groups[2][4] = {{&a.g, &b.g, &c.g, NULL}, {&a.g, &dense, &b.g, NULL}};
    const int counts[2] = {3, 3}, launches_want[2] = {1, 2};
    for (int gi = 0; gi < 2; gi++)
        for (int n = 1; n <= 9; n += 8) {
            float *x = rnd((size_t)n * k, -1.f, 1.f);
            void *dx = gpu()->alloc(gpu(), (size_t)n * k * 4);
            gpu()->to_device(gpu(), dx, x, (size_t)n * k * 4);
            void *outs[4];
            for (int i = 0; i < counts[gi]; i++) {
                const size_t no = (size_t)n * groups[gi][i]->rows;
                float *h = fd_malloc(no * 4);
                for (size_t e = 0; e < no; e++) h[e] = NAN;
                outs[i] = gpu()->alloc(gpu(), no * 4);
                gpu()->to_device(gpu(), outs[i], h, no * 4);
                free(h);
            }
            const int64_t launches = fd_cuda_gemv_launches(gpu()), calls = route_calls("gemm_int4", 0);
            gpu()->matmul_multi(gpu(), outs, groups[gi], counts[gi], dx, n);
            gpu()->sync(gpu());
            EXPECT(fd_cuda_gemv_launches(gpu()) - launches == launches_want[gi], "group %d n %d: %lld launches", gi, n,
                   (long long)(fd_cuda_gemv_launches(gpu()) - launches));
            EXPECT(route_calls("gemm_int4", 0) - calls == (gi ? 2 : 3), "group %d n %d: int4 calls not counted", gi, n);
            for (int i = 0; i < counts[gi]; i++) {
                const size_t no = (size_t)n * groups[gi][i]->rows;
                float *fused = fd_malloc(no * 4), *alone = gpu_mm(x, groups[gi][i], n);
                gpu()->to_host(gpu(), fused, outs[i], no * 4);
                EXPECT(!memcmp(fused, alone, no * 4), "group %d n %d weight %d: fused differs from the single call", gi,
                       n, i);
                free(fused), free(alone);
                gpu()->free(gpu(), outs[i]);
            }
            gpu()->free(gpu(), dx);
            free(x);
        }
    gpu()->release_weight(gpu(), &dense);
    free(wd), free(wb);
    freew_int4(&a), freew_int4(&b), freew_int4(&c);
}

// ---- bench (FD_CUDA_BENCH=1): the int4 GEMV on every linear shape of a 27B decode step, n = 1, 8, 16, beside
// the bf16 GEMV of the same shape ----
// As bench_cuda_gemv_fp8: each timing cycles through enough copies of the weight (>= 384 MB, nibbles and meta
// both copied) that no call finds its weights in L2. Bytes: what the kernel reads, 0.5 per weight + 4 per
// (group of 128, row); for bf16, 2 per weight.
typedef struct {
    fd_weight *Ws;
    int copies, reps, n;
    void *x, *out;
} i4_ctx;
static void f_i4(void *p) {
    i4_ctx *c = p;
    for (int r = 0; r < c->reps; r++) B()->matmul(B(), c->out, c->x, &c->Ws[r % c->copies], c->n, 0);
}

// Copies of w (device buffers duplicated) until they span 384 MB; returns the count.
static int bench_copies(const fd_weight *w, size_t dev_bytes, size_t scale_bytes, fd_weight **out) {
    const int copies = (int)(((size_t)384 << 20) / (dev_bytes + scale_bytes)) + 1;
    fd_weight *Ws = fd_malloc(sizeof(fd_weight) * (size_t)copies);
    for (int i = 0; i < copies; i++) {
        Ws[i] = *w;
        if (!i) continue;
        Ws[i].dev = B()->alloc(B(), dev_bytes);
        B()->copy(B(), Ws[i].dev, w->dev, dev_bytes);
        if (scale_bytes) {
            Ws[i].dev_scale = B()->alloc(B(), scale_bytes);
            B()->copy(B(), Ws[i].dev_scale, w->dev_scale, scale_bytes);
        }
    }
    *out = Ws;
    return copies;
}
static void bench_free_copies(fd_weight *Ws, int copies) {
    for (int i = 1; i < copies; i++) {
        B()->free(B(), Ws[i].dev);
        if (Ws[i].dev_scale) B()->free(B(), Ws[i].dev_scale);
    }
    free(Ws);
}

TEST(bench_cuda_gemv_int4) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    // per_token: uses per 27B decode step; ffn: int4 under Qwen's GPTQ exclusions (.*attn.* and shared experts
    // stay bf16, so only the MLP is int4)
    static const struct {
        int m, k, per_token, ffn;
        const char *what;
    } shapes[] = {{10240, 5120, 48, 0, "GDN qkv"},        {6144, 5120, 48, 0, "GDN z"},
                  {5120, 6144, 64, 0, "GDN out, attn o"}, {12288, 5120, 16, 0, "attn q|gate"},
                  {1024, 5120, 32, 0, "attn k, v"},       {17408, 5120, 128, 1, "FFN gate, up"},
                  {5120, 17408, 64, 1, "FFN down"}};
    const int ns[] = {1, 8, 16}, bps = bench_gemv_bps();
    double int4_ms[3] = {0}, bf16_ms[3] = {0}, gptq_ms[3] = {0};
    double int4_bytes = 0, bf16_bytes = 0, gptq_bytes = 0;
    i4_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    c.out = B()->alloc(B(), (size_t)16 * 17408 * 4);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (!bench_shape_wanted(shapes[s].what)) continue;
        const int m = shapes[s].m, k = shapes[s].k, G = k / 128;
        // an AWQ weight from random words: every nibble pattern, zeros and f16 scales of a real range
        uint32_t *qw = fd_malloc((size_t)m * k / 2), *qz = fd_malloc((size_t)G * m / 2);
        uint16_t *sc = fd_malloc((size_t)G * m * 2);
        for (size_t i = 0; i < (size_t)m * k / 8; i++) qw[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)(i >> 7);
        for (size_t i = 0; i < (size_t)G * m / 8; i++) qz[i] = 0x88888888u ^ (uint32_t)(i * 40503u);
        for (size_t i = 0; i < (size_t)G * m; i++) sc[i] = fd_f32_to_f16(0.002f + 1e-6f * (float)(i % 1000));
        fd_weight w = {.name = "bench.qweight",
                       .fmt = FD_WFMT_AWQ_INT4,
                       .dtype = FD_I32,
                       .rows = m,
                       .cols = k,
                       .data = qw,
                       .scale = sc,
                       .scale_dtype = FD_F16,
                       .qzeros = qz,
                       .group_size = 128,
                       .n_groups = G};
        B()->upload_weight(B(), &w);
        free(qw), free(qz), free(sc);
        const size_t nib_bytes = (size_t)m * k / 2, meta_bytes = (size_t)G * m * 4;
        const double wbytes = (double)(nib_bytes + meta_bytes);
        fd_weight bw = wrand(m, k, -0.05f, 0.05f);
        const double bbytes = 2.0 * m * k;
        fd_weight *Wi, *Wb;
        const int ci = bench_copies(&w, nib_bytes, meta_bytes, &Wi);
        const int cb = bench_copies(&bw, (size_t)bbytes, 0, &Wb);
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            c.n = ns[j];
            char what[96];
            c.Ws = Wi, c.copies = ci, c.reps = ci > 8 ? ci : 8;
            const double ms = time_ms(f_i4, &c) / c.reps;
            snprintf(what, sizeof what, "int4 gemv %-15s %5d x %5d n=%2d", shapes[s].what, m, k, c.n);
            row(what, ms, 2.0 * c.n * m * k, wbytes);
            c.Ws = Wb, c.copies = cb, c.reps = cb > 8 ? cb : 8;
            const double bms = time_ms(f_i4, &c) / c.reps;
            snprintf(what, sizeof what, "bf16 gemv %-15s %5d x %5d n=%2d", shapes[s].what, m, k, c.n);
            row(what, bms, 2.0 * c.n * m * k, bbytes);
            int4_ms[j] += ms * shapes[s].per_token;
            bf16_ms[j] += bms * shapes[s].per_token;
            gptq_ms[j] += (shapes[s].ffn ? ms : bms) * shapes[s].per_token;
            if (!j) {
                int4_bytes += wbytes * shapes[s].per_token;
                bf16_bytes += bbytes * shapes[s].per_token;
                gptq_bytes += (shapes[s].ffn ? wbytes : bbytes) * shapes[s].per_token;
            }
        }
        bench_free_copies(Wi, ci);
        bench_free_copies(Wb, cb);
        B()->release_weight(B(), &w);
        B()->release_weight(B(), &bw);
    }
    for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
        printf("BENCH | linear layers of one 27B step at n=%2d bps=%d: int4 (AWQ, all) %.2f ms for %.1f GB = %.0f GB/s "
               "(%.1f%% of 4250) | GPTQ (Qwen's exclusions: MLP int4) %.2f ms for %.1f GB (%.1f%%) | bf16 %.2f ms "
               "for %.1f GB (%.1f%%)\n",
               ns[j], bps, int4_ms[j], int4_bytes / 1e9, int4_bytes / int4_ms[j] / 1e6,
               100.0 * int4_bytes / int4_ms[j] / 1e6 / 4250.0, gptq_ms[j], gptq_bytes / 1e9,
               100.0 * gptq_bytes / gptq_ms[j] / 1e6 / 4250.0, bf16_ms[j], bf16_bytes / 1e9,
               100.0 * bf16_bytes / bf16_ms[j] / 1e6 / 4250.0);
    }
    B()->free(B(), c.x);
    B()->free(B(), c.out);
}
