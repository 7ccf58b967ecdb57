// Route gemm_fp8 = wgmma on the CPU reference (src/cpu/cpu_w8a8.c): the W8A8 semantics of FP8 block-scaled weights
// with dynamic activation quantization, the values the CUDA wgmma kernel (src/cuda/gemv_fp8wg.cu) is tested against.
//   - against a plain reference written here independently: x quantized per token and 128-group of k (amax clamped
//     at 1e-10, r = 448 / amax, e4m3 by a nearest-even search over every finite code, saturating), products and
//     sums in double, each block's sum times w_scale * amax / 448; n = 1..16, k with a short last group, block_rows
//     32 and 128, an all-zero group and an outlier; counted as gemm_fp8=wgmma;
//   - batch invariance, bitwise: row j of a 16-row call equals the 1-row call of row j;
//   - by shape: block_cols 64 and n = 17 run the fp32 matmul (bitwise the gemv value's result), counted as gemv;
//   - gemv (the default) and dequant are the fp32 matmul on the dequantized weights, bitwise each other.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test.h"

enum { V_GEMV = 0, V_DEQUANT = 1, V_WGMMA = 2 }; // the values of gemm_fp8 (the CUDA route's names)

static fd_route *fp8_route(fd_backend *be) {
    for (int i = 0; i < be->n_routes; i++)
        if (!strcmp(be->routes[i].name, "gemm_fp8")) return &be->routes[i];
    return NULL;
}

// e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits, exponent 0 subnormal (0x7f / 0xff are NaN)
static double e4m3_value(int b) {
    const int e = (b >> 3) & 15, mant = b & 7;
    const double v = e ? ldexp(1.0 + mant / 8.0, e - 7) : ldexp(mant / 8.0, -6);
    return (b & 0x80) ? -v : v;
}
// the nearest finite e4m3 value, ties to the even code, saturating at +-448
static double e4m3_round(float v) {
    const double a = fabs((double)v);
    int best = 0;
    for (int c = 1; c < 0x7f; c++) {
        const double d = fabs(e4m3_value(c) - a), db = fabs(e4m3_value(best) - a);
        if (d < db || (d == db && !(c & 1))) best = c;
    }
    return v < 0 ? -e4m3_value(best) : e4m3_value(best);
}

// out [n, m] of the W8A8 semantics, from the raw codes and fp32 block scales
static double *ref_w8a8(const uint8_t *q, const float *scale, int br, int m, int k, const float *x, int n) {
    const int groups = (k + 127) / 128;
    double *out = malloc(sizeof(double) * n * m), *xq = malloc(sizeof(double) * k),
           *xs = malloc(sizeof(double) * groups);
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * k;
        for (int g = 0; g < groups; g++) {
            const int a = 128 * g, b = a + 128 < k ? a + 128 : k;
            float amax = 0.f;
            for (int c = a; c < b; c++) amax = fmaxf(amax, fabsf(xi[c]));
            amax = fmaxf(amax, 1e-10f);
            const float r = 448.f / amax;
            xs[g] = amax / 448.f;
            for (int c = a; c < b; c++) xq[c] = e4m3_round(xi[c] * r);
        }
        for (int row = 0; row < m; row++) {
            double acc = 0;
            for (int g = 0; g < groups; g++) {
                double part = 0;
                for (int c = 128 * g; c < 128 * g + 128 && c < k; c++)
                    part += e4m3_value(q[(size_t)row * k + c]) * xq[c];
                acc += part * (double)scale[(row / br) * groups + g] * xs[g];
            }
            out[(size_t)i * m + row] = acc;
        }
    }
    free(xq), free(xs);
    return out;
}

static float *random_x(int n, int k, uint64_t *seed) {
    float *x = malloc(sizeof(float) * n * k);
    test_fill_uniform(x, (size_t)n * k, -1.f, 1.f, seed);
    return x;
}

TEST(cpu_gemm_fp8_wgmma_matches_plain_w8a8) {
    fd_backend *be = fd_backend_cpu_create(2);
    fd_route *r = fp8_route(be);
    ASSERT(r && !strcmp(r->values[V_WGMMA], "wgmma"), "cpu backend has no gemm_fp8=wgmma route");
    *r->sel = V_WGMMA;
    uint64_t seed = 0x8a8a;
    const int shapes[][3] = {{200, 320, 128}, {96, 256, 32}, {40, 384, 128}}; // m, k, block_rows
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int m = shapes[si][0], k = shapes[si][1], br = shapes[si][2];
        float *w = malloc(sizeof(float) * m * k);
        test_fill_uniform(w, (size_t)m * k, -2.f, 2.f, &seed);
        for (int c = 0; c < k; c++) w[(size_t)(m / 2) * k + c] *= 30.f; // a block row of another magnitude
        fd_weight src = {.name = "W", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = w};
        uint8_t *q;
        float *s;
        fd_weight w8;
        fd_weight_quantize_fp8(&src, br, 128, &q, &s, &w8);
        be->upload_weight(be, &w8);
        const int ns[] = {1, 2, 5, 8, 16};
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni];
            float *x = random_x(n, k, &seed);
            for (int c = 128; c < 256 && c < k; c++) x[c] = 0.f; // an all-zero group (row 0)
            x[(size_t)(n - 1) * k + 3] = 50.f;                   // an outlier
            float *out = malloc(sizeof(float) * n * m);
            const int64_t before = r->calls[V_WGMMA];
            be->matmul(be, out, x, &w8, n, 0);
            EXPECT(r->calls[V_WGMMA] == before + 1, "m %d k %d n %d: not counted as wgmma", m, k, n);
            double *ref = ref_w8a8(q, s, br, m, k, x, n);
            int bad = 0;
            for (int i = 0; i < n * m; i++)
                if (!(fabs(out[i] - ref[i]) <= 1e-6 * fabs(ref[i]) + 1e-30)) bad++;
            EXPECT(bad == 0, "m %d k %d br %d n %d: %d of %d outputs off the plain W8A8 reference", m, k, br, n, bad,
                   n * m);
            // and it is not the weight-only result: the activation rounding shows
            float *wonly = malloc(sizeof(float) * n * m);
            *r->sel = V_GEMV;
            be->matmul(be, wonly, x, &w8, n, 0);
            *r->sel = V_WGMMA;
            EXPECT(memcmp(wonly, out, sizeof(float) * n * m) != 0, "n %d: W8A8 equals the fp32-activation result", n);
            EXPECT(test_rel_l2(out, wonly, (size_t)n * m) < 0.05, "n %d: W8A8 far from the fp32-activation result", n);
            free(x), free(out), free(ref), free(wonly);
        }
        free(w), free(q), free(s);
    }
    be->destroy(be);
}

TEST(cpu_gemm_fp8_wgmma_batch_invariant_and_by_shape) {
    fd_backend *be = fd_backend_cpu_create(2);
    fd_route *r = fp8_route(be);
    ASSERT(r, "cpu backend has no gemm_fp8 route");
    uint64_t seed = 0x1616;
    const int m = 72, k = 448;
    float *w = malloc(sizeof(float) * m * k);
    test_fill_uniform(w, (size_t)m * k, -1.f, 1.f, &seed);
    fd_weight src = {.name = "W", .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = m, .cols = k, .data = w};
    uint8_t *q, *q64;
    float *s, *s64;
    fd_weight w8, w64;
    fd_weight_quantize_fp8(&src, 128, 128, &q, &s, &w8);
    fd_weight_quantize_fp8(&src, 128, 64, &q64, &s64, &w64);
    be->upload_weight(be, &w8);
    be->upload_weight(be, &w64);
    float *x = random_x(17, k, &seed), *all = malloc(sizeof(float) * 17 * m), *one = malloc(sizeof(float) * m),
          *f32 = malloc(sizeof(float) * 17 * m);
    *r->sel = V_WGMMA;
    be->matmul(be, all, x, &w8, 16, 0);
    for (int j = 0; j < 16; j++) {
        be->matmul(be, one, x + (size_t)j * k, &w8, 1, 0);
        EXPECT(!memcmp(one, all + (size_t)j * m, sizeof(float) * m), "row %d of 16 differs from its 1-row call", j);
    }
    // by shape: 17 rows and block_cols 64 take the fp32 matmul, counted as gemv
    const int64_t f0 = r->calls[V_GEMV], w0 = r->calls[V_WGMMA];
    be->matmul(be, all, x, &w8, 17, 0);
    be->matmul(be, one, x, &w64, 1, 0);
    EXPECT(r->calls[V_GEMV] == f0 + 2 && r->calls[V_WGMMA] == w0, "by-shape calls not counted as gemv");
    *r->sel = V_GEMV;
    be->matmul(be, f32, x, &w8, 17, 0);
    EXPECT(!memcmp(all, f32, sizeof(float) * 17 * m), "17 rows under wgmma differ from the gemv value");
    be->matmul(be, f32, x, &w64, 1, 0);
    EXPECT(!memcmp(one, f32, sizeof(float) * m), "block_cols 64 under wgmma differs from the gemv value");
    *r->sel = V_DEQUANT; // the reference of the CUDA dequant value: the same fp32 matmul, counted as dequant
    const int64_t d0 = r->calls[V_DEQUANT];
    be->matmul(be, all, x, &w8, 17, 0);
    EXPECT(r->calls[V_DEQUANT] == d0 + 1, "dequant not counted");
    *r->sel = V_GEMV;
    be->matmul(be, f32, x, &w8, 17, 0);
    EXPECT(!memcmp(all, f32, sizeof(float) * 17 * m), "dequant differs from gemv");
    free(w), free(q), free(s), free(q64), free(s64), free(x), free(all), free(one), free(f32);
    be->destroy(be);
}
