// The W8A8 GEMV on FP8 block-scaled weights (route gemm_fp8=w8a8, src/cuda/gemv_w8a8.cu) on fresh random inputs,
// NaN-poisoned outputs:
//   - against a plain-C reference of the same semantics, written here independently of the kernel: x quantized
//     per token and 128-group of k (amax clamped below at 1e-10, r = 448 / amax, e4m3 by a nearest-even search
//     over every finite code, saturating), exact e4m3 products in double, each block's sum times
//     w_scale * amax / 448: within TOL_W8A8; and against the weight-only fp32 result (CPU matmul on fp8 x scale)
//     within TOL_W8A8_WONLY (the contract change: x rounded to e4m3);
//   - n = 1..16, m not a multiple of 32, k not a multiple of 128 (a short last group), block_rows 32 and 128, an
//     all-zero group and an outlier; counted as gemm_fp8=w8a8;
//   - batch invariance, bitwise: row j of a 16-row call equals the 1-row call of row j alone;
//   - fused groups (matmul_multi): one launch, every output bitwise the separate call's, counted per weight;
//   - by shape: block_cols 64 runs the weight-only GEMV (counted gemv, bitwise that route's result), n > 16 dequant.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0xa8a8f8f8ull)

enum { V_GEMV = 0, V_DEQUANT = 1, V_W8A8 = 2 }; // gemm_fp8's values, in the backend's order

static tw mkw_fp8(int m, int k, int bn, int bk) {
    return cuda_rig_weight_fp8(&g_rig, "W", m, k, bn, bk, 0);
}
static float *gpu_mm(const float *x, const fd_weight *W, int n) {
    return cuda_rig_gpu_matmul(gpu(), x, W, n);
}
static int64_t fp8_calls(int value) {
    return cuda_rig_route_calls(gpu(), "gemm_fp8", value);
}
static void set_fp8_route(const char *v) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_fp8", v) == 0, "%s", fd_error_msg());
}

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits, exponent 0 subnormal (0x7f / 0xff are NaN)
static double e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, mant = b & 7;
    if (e == 15 && mant == 7) return NAN;
    const double v = e ? ldexp(1.0 + mant / 8.0, e - 7) : ldexp(mant / 8.0, -6);
    return (b & 0x80) ? -v : v;
}
// the nearest finite e4m3 value, ties to the even code, saturating at +-448
static double e4m3_round(float v) {
    const double a = fabs((double)v);
    int best = 0;
    for (int c = 1; c < 0x7f; c++) {
        const double d = fabs(e4m3_value((uint8_t)c) - a), db = fabs(e4m3_value((uint8_t)best) - a);
        if (d < db || (d == db && !(c & 1))) best = c;
    }
    return v < 0 ? -e4m3_value((uint8_t)best) : e4m3_value((uint8_t)best);
}

// out [n, m] (double) of the W8A8 semantics on the CPU view of W (codes and block scales as bound)
static double *ref_w8a8(const fd_weight *W, const float *x, int n) {
    const int m = (int)W->rows, k = (int)W->cols, groups = (k + 127) / 128;
    const uint8_t *q = W->data;
    double *out = fd_malloc((size_t)n * m * sizeof(double)), *xq = fd_malloc((size_t)k * sizeof(double)),
           *xs = fd_malloc((size_t)groups * sizeof(double));
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * k;
        for (int gi = 0; gi < groups; gi++) {
            const int a = 128 * gi, b = a + 128 < k ? a + 128 : k;
            float amax = 0.f;
            for (int c = a; c < b; c++) amax = fmaxf(amax, fabsf(xi[c]));
            amax = fmaxf(amax, 1e-10f);
            const float r = 448.f / amax;
            xs[gi] = amax / 448.f;
            for (int c = a; c < b; c++) xq[c] = e4m3_round(xi[c] * r);
        }
        for (int row = 0; row < m; row++) {
            double acc = 0;
            for (int gi = 0; gi < groups; gi++) {
                double part = 0;
                for (int c = 128 * gi; c < 128 * gi + 128 && c < k; c++)
                    part += e4m3_value(q[(size_t)row * k + c]) * xq[c];
                acc += part * fd_weight_block_scale(W, row, 128 * gi) * xs[gi];
            }
            out[(size_t)i * m + row] = acc;
        }
    }
    free(xq), free(xs);
    return out;
}
static double rel_l2_d(const float *got, const double *ref, size_t count) {
    double num = 0, den = 0;
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

TEST(cuda_fp8_w8a8_vs_references) {
    static const int shapes[][3] = {
        // m, k, block rows (block cols 128)
        {256, 256, 128},  {200, 512, 128},  {1000, 1024, 128}, {96, 4096, 128}, {160, 320, 128},
        {300, 2560, 128}, {130, 8320, 128}, {64, 4160, 32},    {90, 2064, 128},
    };
    set_fp8_route("w8a8");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s][0], k = shapes[s][1];
        tw w = mkw_fp8(m, k, shapes[s][2], 128);
        for (int n = 1; n <= 16; n += s < 2 ? 1 : 5) { // every n on the first two shapes; 1, 6, 11, 16 on the rest
            float *x = rnd((size_t)n * k, -1.f, 1.f);
            for (int c = 0; c < 128 && c < k; c++) x[c] = 0.f; // token 0: an all-zero group
            x[(size_t)(n - 1) * k + k / 2] = 40.f;             // the last token: an outlier in one group
            double *ref = ref_w8a8(&w.c, x, n);
            float *wonly = fd_malloc((size_t)n * m * 4);
            cpu()->matmul(cpu(), wonly, x, &w.c, n, 0);
            const int64_t before = fp8_calls(V_W8A8);
            float *got = gpu_mm(x, &w.g, n);
            const double e = rel_l2_d(got, ref, (size_t)n * m), ew = test_rel_l2(got, wonly, (size_t)n * m);
            EXPECT(e <= TOL_W8A8, "m %d k %d n %d: vs the W8A8 reference rel-L2 %.3g > %.3g", m, k, n, e, TOL_W8A8);
            EXPECT(ew <= TOL_W8A8_WONLY, "m %d k %d n %d: vs weight-only rel-L2 %.3g > %.3g", m, k, n, ew,
                   TOL_W8A8_WONLY);
            EXPECT(fp8_calls(V_W8A8) == before + 1, "m %d k %d n %d: not counted as gemm_fp8=w8a8", m, k, n);
            if (n == 1 || n == 16)
                printf("  w8a8 m %4d k %5d n %2d: vs W8A8 ref %.2e, vs weight-only %.2e\n", m, k, n, e, ew);
            free(x), free(ref), free(wonly), free(got);
        }
        freew(&w);
    }
    set_fp8_route("gemv");
}

TEST(cuda_fp8_w8a8_batch_invariant) {
    const int m = 1000, k = 4160, n = 16; // 33 groups: a short last one; warp 0 takes one more step
    tw w = mkw_fp8(m, k, 128, 128);
    float *x = rnd((size_t)n * k, -1.f, 1.f);
    x[5 * k + 3] = 1e30f; // another row's huge value must not leak into row 0
    set_fp8_route("w8a8");
    float *all = gpu_mm(x, &w.g, n);
    for (int r = 0; r < n; r++) {
        if (r == 5) continue;
        float *one = gpu_mm(x + (size_t)r * k, &w.g, 1);
        EXPECT(!memcmp(one, all + (size_t)r * m, (size_t)m * 4),
               "row %d of the 16-row call differs from the 1-row call", r);
        free(one);
    }
    set_fp8_route("gemv");
    free(x), free(all);
    freew(&w);
}

static void gpu_multi(float *outs[], const float *x, const fd_weight *const Ws[], int count, int n) {
    const size_t nx = (size_t)n * Ws[0]->cols;
    void *dx = cuda_rig_up_slack(gpu(), x, nx * 4, 64), *dout[4];
    for (int i = 0; i < count; i++) dout[i] = poisoned((size_t)n * Ws[i]->rows);
    gpu()->matmul_multi(gpu(), dout, Ws, count, dx, n);
    for (int i = 0; i < count; i++) outs[i] = down(dout[i], (size_t)n * Ws[i]->rows), dfree(dout[i]);
    dfree(dx);
}

TEST(cuda_fp8_w8a8_fused_equals_separate) {
    static const struct {
        int count, k, m[4];
    } groups[] = {{4, 1280, {520, 300, 64, 64}}, {3, 2048, {700, 128, 128}}, {2, 5120, {17408, 17408}}};
    set_fp8_route("w8a8");
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        const int count = groups[gi].count, k = groups[gi].k;
        tw w[4];
        const fd_weight *Wg[4];
        for (int i = 0; i < count; i++) w[i] = mkw_fp8(groups[gi].m[i], k, 128, 128), Wg[i] = &w[i].g;
        for (int n = 1; n <= 16; n += 7) { // 1, 8, 15
            float *x = rnd((size_t)n * k, -1.f, 1.f), *fused[4];
            const int64_t l0 = fd_cuda_gemv_launches(gpu()), c0 = fp8_calls(V_W8A8);
            gpu_multi(fused, x, Wg, count, n);
            EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 1, "group %zu n %d: %lld gemv launches, expected 1", gi, n,
                   (long long)(fd_cuda_gemv_launches(gpu()) - l0));
            EXPECT(fp8_calls(V_W8A8) == c0 + count, "group %zu n %d: not counted per weight as w8a8", gi, n);
            for (int i = 0; i < count; i++) {
                float *sep = gpu_mm(x, Wg[i], n);
                EXPECT(!memcmp(fused[i], sep, (size_t)n * groups[gi].m[i] * 4),
                       "group %zu n %d: weight %d fused differs from its separate matmul", gi, n, i);
                free(sep), free(fused[i]);
            }
            free(x);
        }
        for (int i = 0; i < count; i++) freew(&w[i]);
    }
    set_fp8_route("gemv");
}

TEST(cuda_fp8_w8a8_by_shape) {
    // block_cols 64: the activation group would not match the weight's scale column; the weight-only GEMV runs
    tw w = mkw_fp8(192, 512, 64, 64);
    float *x = rnd((size_t)4 * 512, -1.f, 1.f);
    set_fp8_route("gemv");
    float *want = gpu_mm(x, &w.g, 4);
    set_fp8_route("w8a8");
    const int64_t g0 = fp8_calls(V_GEMV), w0 = fp8_calls(V_W8A8);
    float *got = gpu_mm(x, &w.g, 4);
    EXPECT(fp8_calls(V_GEMV) == g0 + 1 && fp8_calls(V_W8A8) == w0, "block_cols 64 under w8a8: not run as gemv");
    EXPECT(!memcmp(got, want, (size_t)4 * 192 * 4), "block_cols 64 under w8a8: differs from the gemv route");
    free(x), free(want), free(got);
    freew(&w);
    // n > 16: dequant, as under gemv
    tw w2 = mkw_fp8(256, 512, 128, 128);
    float *x2 = rnd((size_t)20 * 512, -1.f, 1.f);
    const int64_t d0 = fp8_calls(V_DEQUANT);
    float *got2 = gpu_mm(x2, &w2.g, 20);
    EXPECT(fp8_calls(V_DEQUANT) == d0 + 1, "n 20 under w8a8: not run as dequant");
    EXPECT(cuda_rig_all_finite(got2, (size_t)20 * 256), "n 20 under w8a8: non-finite output");
    free(x2), free(got2);
    freew(&w2);
    set_fp8_route("gemv");
}
