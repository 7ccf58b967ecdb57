// FP8 block-scaled weights on the GPU (route gemm_fp8: the GEMV of src/cuda/gemv.cu, src/cuda/gemv_fp8.cu) on fresh random inputs, NaN-poisoned
// outputs, against the CPU reference (fp32 dot products on fp8 x scale, base/weight.c):
//   - the FP8 GEMV for n in {1, 2, 7, 8, 9, 16} under gemm_act bf16 and bf16x2, on shapes with m not a multiple
//     of 32, partial scale blocks in both directions, fewer chunks than warps and many per warp (unequal counts);
//     counted as gemm_fp8=gemv;
//   - batch invariance, bitwise: row j of an n-row call equals the 1-row call on row j alone;
//   - the dequant route (n > 16, or selected) against the same reference, counted as gemm_fp8=dequant: within the
//     bf16 bound under gemm_act bf16 (the weight rounded to bf16), within 1e-4 under bf16x2 (an f32 copy);
//   - bf16 scales (published too) read like f32 ones.
// Thresholds as for bf16 weights (test_cuda_gemv.c): bf16 activations 2e-2, bf16x2 1e-4; the dequant route rounds
// fp8 x scale to bf16 once more: 2e-2.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0xf8f8f8f8ull)

// An fp8 block-scaled [m, k] weight quantized from random values, bound to both backends
// (cuda_rig_weight_fp8: a few large rows, so scales differ by orders of magnitude; bf16_scales rounds the scales
// to bf16, as some published checkpoints store them).
static tw mkw_fp8(int m, int k, int bn, int bk, int bf16_scales) {
    return cuda_rig_weight_fp8(&g_rig, "W", m, k, bn, bk, bf16_scales);
}
static float *gpu_mm(const float *x, const fd_weight *W, int n) { return cuda_rig_gpu_matmul(gpu(), x, W, n); }
static int64_t route_calls(const char *route, int value) { return cuda_rig_route_calls(gpu(), route, value); }

static const int k_shapes[][4] = {
    // m, k, block rows, block cols
    {256, 256, 128, 128}, {200, 512, 128, 128}, {1000, 1024, 128, 128}, {96, 4096, 128, 128},
    {160, 320, 128, 128}, {64, 192, 64, 64},    {300, 2560, 128, 128}, {130, 8320, 128, 128},
};
static const int k_ns[] = {1, 2, 7, 8, 9, 16};

static void check(const char *gemm_act, double tol, int bf16_scales) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    for (size_t s = 0; s < sizeof k_shapes / sizeof k_shapes[0]; s++) {
        const int m = k_shapes[s][0], k = k_shapes[s][1];
        tw w = mkw_fp8(m, k, k_shapes[s][2], k_shapes[s][3], bf16_scales);
        for (size_t j = 0; j < sizeof k_ns / sizeof k_ns[0]; j++) {
            const int n = k_ns[j];
            float *x = rnd((size_t)n * k, -1.f, 1.f);
            float *ref = fd_malloc((size_t)n * m * 4);
            cpu()->matmul(cpu(), ref, x, &w.c, n, 0);
            const int64_t before = route_calls("gemm_fp8", 0);
            float *got = gpu_mm(x, &w.g, n);
            const double e = test_rel_l2(got, ref, (size_t)n * m);
            EXPECT(e <= tol, "m %d k %d n %d gemm_act %s: rel-L2 %.3g > %.3g", m, k, n, gemm_act, e, tol);
            EXPECT(route_calls("gemm_fp8", 0) == before + 1, "m %d k %d n %d: not counted as gemm_fp8=gemv", m, k,
                   n);
            free(x), free(ref), free(got);
        }
        freew(&w);
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
}

TEST(cuda_fp8_gemv_vs_cpu) {
    check("bf16", TOL_BF16, 0);
    check("bf16x2", TOL_BF16X2, 0);
    check("bf16x2", TOL_BF16X2, 1);
}

TEST(cuda_fp8_gemv_batch_invariant) {
    const int m = 1000, k = 4160, n = 16; // 65 chunks: warp 0 takes one more than the others
    tw w = mkw_fp8(m, k, 128, 128, 0);
    float *x = rnd((size_t)n * k, -1.f, 1.f);
    x[5 * k + 3] = 1e30f; // another row's huge value must not leak into row 0
    float *all = gpu_mm(x, &w.g, n);
    for (int r = 0; r < n; r++) {
        if (r == 5) continue;
        float *one = gpu_mm(x + (size_t)r * k, &w.g, 1);
        EXPECT(!memcmp(one, all + (size_t)r * m, (size_t)m * 4), "row %d of the 16-row call differs from the 1-row call",
               r);
        free(one);
    }
    free(x), free(all);
    freew(&w);
}

// Every finite e4m3 code through the GEMV (its bit-level e4m3 -> bf16 conversion): row r of W holds code r
// everywhere (the NaN codes 0x7f / 0xff hold 0), block scales 1, x = e_j; out[r] must be exactly the code's value
// as base.c's fd_e4m3_to_f32 decodes it (the same decoder the CPU reference and the FP8 fixtures' HF checks use),
// for the normal, subnormal, zero and negative codes alike.
TEST(cuda_fp8_gemv_every_e4m3_code) {
    const int m = 256, k = 128;
    float *zero = fd_malloc((size_t)m * k * 4);
    memset(zero, 0, (size_t)m * k * 4);
    fd_weight src = {.name = "W", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = zero};
    tw w;
    memset(&w, 0, sizeof w);
    uint8_t *q;
    float *scale;
    fd_weight_quantize_fp8(&src, 128, 128, &q, &scale, &w.c);
    for (int r = 0; r < m; r++)
        for (int i = 0; i < k; i++) q[(size_t)r * k + i] = (r & 0x7f) == 0x7f ? 0 : (uint8_t)r;
    for (int i = 0; i < 2; i++) scale[i] = 1.f;
    w.owned[0] = q, w.owned[1] = scale;
    cuda_rig_weight_bind(&g_rig, &w);
    for (int j = 0; j < k; j += 37) {
        float *x = fd_malloc((size_t)k * 4);
        memset(x, 0, (size_t)k * 4);
        x[j] = 1.f;
        float *got = gpu_mm(x, &w.g, 1);
        int bad = 0;
        for (int r = 0; r < m; r++) {
            const float want = (r & 0x7f) == 0x7f ? 0.f : fd_e4m3_to_f32((uint8_t)r);
            if (got[r] != want && bad++ < 4) EXPECT(0, "code 0x%02x at k %d: GPU %g, want %g", r, j, got[r], want);
        }
        free(x), free(got);
    }
    free(zero);
    freew(&w);
}

// matmul_multi of FP8 weights (the fused GDN qkv|z|b|a, attention q|k|v, FFN gate|up of an FP8 checkpoint): one
// gemv launch, every output bitwise the separate matmul's, each weight counted as gemm_fp8=gemv, and a group
// mixing FP8 and bf16 weights runs one call per weight with the same results.
static void gpu_multi(float *outs[], const float *x, const fd_weight *const Ws[], int count, int n) {
    const size_t nx = (size_t)n * Ws[0]->cols;
    void *dx = gpu()->alloc(gpu(), nx * 4 + 64), *dout[4];
    gpu()->to_device(gpu(), dx, x, nx * 4);
    for (int i = 0; i < count; i++) {
        const size_t no = (size_t)n * Ws[i]->rows;
        dout[i] = gpu()->alloc(gpu(), no * 4 + 64);
        outs[i] = fd_malloc(no * 4 + 4);
        for (size_t e = 0; e < no; e++) outs[i][e] = NAN;
        gpu()->to_device(gpu(), dout[i], outs[i], no * 4);
    }
    gpu()->matmul_multi(gpu(), dout, Ws, count, dx, n);
    for (int i = 0; i < count; i++) {
        gpu()->to_host(gpu(), outs[i], dout[i], (size_t)n * Ws[i]->rows * 4);
        gpu()->free(gpu(), dout[i]);
    }
    gpu()->free(gpu(), dx);
}

TEST(cuda_fp8_gemv_multi_fused_equals_separate) {
    static const struct {
        int count, k, m[4];
    } groups[] = {{4, 1280, {520, 300, 64, 64}}, {3, 2048, {700, 128, 128}}, {2, 5120, {17408, 17408}}};
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        const int count = groups[gi].count, k = groups[gi].k;
        tw w[4];
        const fd_weight *Wg[4];
        for (int i = 0; i < count; i++) w[i] = mkw_fp8(groups[gi].m[i], k, 128, 128, 0), Wg[i] = &w[i].g;
        for (int act = 0; act < 2; act++) {
            ASSERT(fd_cuda_set_route(gpu(), "gemm_act", act ? "bf16x2" : "bf16") == 0, "%s", fd_error_msg());
            for (int n = 1; n <= 16; n += 7) { // 1, 8, 15
                float *x = rnd((size_t)n * k, -1.f, 1.f), *fused[4];
                const int64_t l0 = fd_cuda_gemv_launches(gpu()), c0 = route_calls("gemm_fp8", 0);
                gpu_multi(fused, x, Wg, count, n);
                EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 1, "group %zu n %d: %lld gemv launches, expected 1", gi, n,
                       (long long)(fd_cuda_gemv_launches(gpu()) - l0));
                EXPECT(route_calls("gemm_fp8", 0) == c0 + count, "group %zu n %d: not counted per weight", gi, n);
                for (int i = 0; i < count; i++) {
                    float *sep = gpu_mm(x, Wg[i], n);
                    EXPECT(!memcmp(fused[i], sep, (size_t)n * groups[gi].m[i] * 4),
                           "group %zu n %d act %d: weight %d fused differs from its separate matmul", gi, n, act, i);
                    free(sep), free(fused[i]);
                }
                free(x);
            }
        }
        for (int i = 0; i < count; i++) freew(&w[i]);
    }
    // a group with one bf16 weight among FP8 ones: one call each, same results as separate calls
    tw a = mkw_fp8(256, 1024, 128, 128, 0);
    float *bf = rnd((size_t)192 * 1024, -0.1f, 0.1f);
    uint16_t *bf16 = fd_malloc((size_t)192 * 1024 * 2);
    for (size_t i = 0; i < (size_t)192 * 1024; i++) bf16[i] = fd_f32_to_bf16(bf[i]);
    fd_weight b = {.name = "Wb", .fmt = FD_WFMT_DENSE, .dtype = FD_BF16, .rows = 192, .cols = 1024, .data = bf16};
    gpu()->upload_weight(gpu(), &b);
    const fd_weight *mix[2] = {&a.g, &b};
    float *x = rnd((size_t)4 * 1024, -1.f, 1.f), *outs[2];
    const int64_t l0 = fd_cuda_gemv_launches(gpu());
    gpu_multi(outs, x, mix, 2, 4);
    EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 2, "mixed group: %lld gemv launches, expected 2",
           (long long)(fd_cuda_gemv_launches(gpu()) - l0));
    for (int i = 0; i < 2; i++) {
        float *sep = gpu_mm(x, mix[i], 4);
        EXPECT(!memcmp(outs[i], sep, (size_t)4 * mix[i]->rows * 4), "mixed group: weight %d differs", i);
        free(sep), free(outs[i]);
    }
    gpu()->release_weight(gpu(), &b);
    free(x), free(bf), free(bf16);
    freew(&a);
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
}

TEST(cuda_fp8_dequant_route) {
    const int m = 320, k = 512;
    tw w = mkw_fp8(m, k, 128, 128, 0);
    for (int act = 0; act < 2; act++) {
        ASSERT(fd_cuda_set_route(gpu(), "gemm_act", act ? "bf16x2" : "bf16") == 0, "%s", fd_error_msg());
        for (int sel = 0; sel < 2; sel++) {
            ASSERT(fd_cuda_set_route(gpu(), "gemm_fp8", sel ? "dequant" : "gemv") == 0, "%s", fd_error_msg());
            const int n = sel ? 5 : 40; // dequant by shape (n > 16), then by selection
            float *x = rnd((size_t)n * k, -1.f, 1.f);
            float *ref = fd_malloc((size_t)n * m * 4);
            cpu()->matmul(cpu(), ref, x, &w.c, n, 0);
            const int64_t before = route_calls("gemm_fp8", 1);
            float *got = gpu_mm(x, &w.g, n);
            const double e = test_rel_l2(got, ref, (size_t)n * m), tol = act ? TOL_BF16X2 : TOL_BF16;
            EXPECT(e <= tol, "n %d dequant gemm_act %s: rel-L2 %.3g > %.3g", n, act ? "bf16x2" : "bf16", e, tol);
            EXPECT(route_calls("gemm_fp8", 1) == before + 1, "n %d: not counted as gemm_fp8=dequant", n);
            free(x), free(ref), free(got);
        }
    }
    ASSERT(fd_cuda_set_route(gpu(), "gemm_fp8", "gemv") == 0, "%s", fd_error_msg());
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
    freew(&w);
}

// ---- bench (FD_CUDA_BENCH=1): the FP8 GEMV on every quantized shape of a 27B decode step, n = 1, 8, 16 ----
// As bench_cuda_gemv: each timing cycles through enough copies of the weight (>= 384 MB) that no call finds its
// weights in L2, back-to-back calls between two syncs. Bytes: the e4m3 weights plus their f32 scales.
TEST(bench_cuda_gemv_fp8) {
    if (cuda_rig_bench_skipped()) return;
    static const struct {
        int m, k, per_token;
        const char *what;
    } shapes[] = {{10240, 5120, 48, "GDN qkv"}, {6144, 5120, 48, "GDN z"},         {5120, 6144, 64, "GDN out, attn o"},
                  {12288, 5120, 16, "attn q|gate"}, {1024, 5120, 32, "attn k, v"}, {17408, 5120, 128, "FFN gate, up"},
                  {5120, 17408, 64, "FFN down"}};
    const int ns[] = {1, 8, 16}, bps = bench_gemv_bps();
    // the weight-only GEMV (route gemm_fp8=gemv) and the W8A8 one on wgmma (gemm_fp8=wgmma) on the same weights
    const char *values[] = {"gemv", "wgmma"};
    double per_token_ms[2][3] = {{0}};
    bench_mm_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    c.out = B()->alloc(B(), (size_t)16 * 17408 * 4);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (!bench_shape_wanted(shapes[s].what)) continue;
        const int m = shapes[s].m, k = shapes[s].k;
        fd_weight src = {.name = "W", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k};
        float *f = rnd((size_t)m * k, -0.05f, 0.05f);
        src.data = f;
        uint8_t *q;
        float *sc;
        fd_weight w;
        fd_weight_quantize_fp8(&src, 128, 128, &q, &sc, &w);
        free(f);
        B()->upload_weight(B(), &w);
        const size_t wbytes = fd_weight_bytes(&w);
        int copies = (int)(((size_t)384 << 20) / wbytes) + 1;
        c.Ws = fd_malloc(sizeof(fd_weight) * (size_t)copies);
        c.copies = copies;
        for (int i = 0; i < copies; i++) {
            c.Ws[i] = w;
            if (i) {
                c.Ws[i].dev = B()->alloc(B(), (size_t)m * k);
                B()->copy(B(), c.Ws[i].dev, w.dev, (size_t)m * k);
            }
        }
        for (int v = 0; v < 2; v++) {
            ASSERT(fd_cuda_set_route(B(), "gemm_fp8", values[v]) == 0, "%s", fd_error_msg());
            for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
                c.n = ns[j];
                c.reps = copies > 8 ? copies : 8;
                const double ms = time_ms(bench_mm_cycle, &c) / c.reps;
                char what[96];
                snprintf(what, sizeof what, "fp8 %-5s %-15s %5d x %5d n=%2d", values[v], shapes[s].what, m, k, c.n);
                row(what, ms, 2.0 * c.n * m * k, (double)wbytes);
                per_token_ms[v][j] += ms * shapes[s].per_token;
            }
        }
        ASSERT(fd_cuda_set_route(B(), "gemm_fp8", "gemv") == 0, "%s", fd_error_msg());
        for (int i = 1; i < copies; i++) B()->free(B(), c.Ws[i].dev);
        B()->release_weight(B(), &w);
        free(c.Ws);
        free(q);
        free(sc);
    }
    for (int v = 0; v < 2; v++)
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++)
            printf("BENCH | fp8 %s: all quantized GEMMs of one 27B step (25.6 GB) at n=%2d bps=%d: %.2f ms\n",
                   values[v], ns[j], bps, per_token_ms[v][j]);
    B()->free(B(), c.x);
    B()->free(B(), c.out);
}
