// The W8A8 GEMV on wgmma (route gemm_fp8=wgmma, src/cuda/gemv_fp8wg.cu) on fresh random inputs, NaN-poisoned
// outputs:
//   - against the CPU backend under the same route value (src/cpu/cpu_w8a8.c: the same activation quantization,
//     double sums): within TOL_W8A8 (the GPU sums each 128-k block in fp32 inside wgmma, with fewer bits kept);
//     n = 1..16 spread, m not a multiple of 128, block_rows 128 and 64; counted as gemm_fp8=wgmma;
//   - batch invariance, bitwise: row j of an n-row call equals the same row of the 16-row call, n = 1..16;
//   - fused groups (matmul_multi): one launch (the weights' tiles stacked into one cut), every output against the
//     CPU W8A8, batch invariant (rows of an n-row call bitwise the 16-row call's), counted per weight;
//   - by shape: block_cols 64 runs the weight-only GEMV (counted gemv, bitwise that route's result).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0xf8a8f8a8ull)

#define TOL_W8A8 1e-3 // the same quantized operands, block sums in fp32 (wgmma keeps ~14 bits inside one block)
enum { V_GEMV = 0, V_DEQUANT = 1, V_WGMMA = 2 }; // gemm_fp8's values on the GPU, in the backend's order

static tw mkw_fp8(int m, int k, int br, int bc) {
    return cuda_rig_weight_fp8(&g_rig, "W", m, k, br, bc, 0);
}
static float *gpu_mm(const float *x, const fd_weight *W, int n) {
    return cuda_rig_gpu_matmul(gpu(), x, W, n);
}
static int64_t fp8_calls(int value) {
    return cuda_rig_route_calls(gpu(), "gemm_fp8", value);
}
// both backends on one value of gemm_fp8 (the CPU's of the same name: gemv keeps fp32 activations, wgmma is W8A8)
static void set_routes(const char *gpu_value, int cpu_wgmma) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_fp8", gpu_value) == 0, "%s", fd_error_msg());
    fd_backend *c = cpu();
    for (int i = 0; i < c->n_routes; i++)
        if (!strcmp(c->routes[i].name, "gemm_fp8")) *c->routes[i].sel = cpu_wgmma ? V_WGMMA : V_GEMV;
}

TEST(cuda_fp8_wgmma_vs_cpu_w8a8) {
    set_routes("wgmma", 1);
    static const int shapes[][3] = {{256, 256, 128}, {200, 1024, 128}, {130, 8320, 128},  {1000, 5120, 128},
                                    {96, 640, 64},   {48, 384, 64},    {5120, 17408, 128}};
    static const int ns[] = {1, 2, 7, 8, 9, 16};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s][0], k = shapes[s][1];
        tw w = mkw_fp8(m, k, shapes[s][2], 128);
        for (size_t j = 0; j < sizeof ns / sizeof ns[0]; j++) {
            const int n = ns[j];
            float *x = rnd((size_t)n * k, -1.f, 1.f);
            for (int c = 0; c < 128 && n > 1; c++) x[(size_t)k + c] = 0.f; // row 1: an all-zero group
            x[3] = 40.f;                                                   // row 0: an outlier
            float *ref = fd_malloc((size_t)n * m * 4);
            cpu()->matmul(cpu(), ref, x, &w.c, n, 0);
            const int64_t before = fp8_calls(V_WGMMA);
            float *got = gpu_mm(x, &w.g, n);
            EXPECT(cuda_rig_all_finite(got, (size_t)n * m), "m %d k %d n %d: non-finite output", m, k, n);
            const double e = test_rel_l2(got, ref, (size_t)n * m);
            EXPECT(e <= TOL_W8A8, "m %d k %d n %d: rel-L2 %.3g > %.3g vs the CPU W8A8", m, k, n, e, TOL_W8A8);
            EXPECT(fp8_calls(V_WGMMA) == before + 1, "m %d k %d n %d: not counted as gemm_fp8=wgmma", m, k, n);
            free(x), free(ref), free(got);
        }
        freew(&w);
    }
    set_routes("gemv", 0);
}

TEST(cuda_fp8_wgmma_batch_invariant) {
    set_routes("wgmma", 1);
    const int m = 1000, k = 4224;
    tw w = mkw_fp8(m, k, 128, 128);
    float *x = rnd((size_t)16 * k, -1.f, 1.f);
    x[(size_t)5 * k + 3] = 1e30f; // another row's huge value must not leak into the others
    float *all = gpu_mm(x, &w.g, 16);
    for (int n = 1; n <= 16; n++) {
        float *part = gpu_mm(x, &w.g, n);
        for (int r = 0; r < n; r++)
            if (r != 5)
                EXPECT(!memcmp(part + (size_t)r * m, all + (size_t)r * m, (size_t)m * 4),
                       "row %d of the %d-row call differs from the 16-row call", r, n);
        free(part);
    }
    free(x), free(all);
    freew(&w);
    set_routes("gemv", 0);
}

static void gpu_multi(float *outs[], const float *x, const fd_weight *const Ws[], int count, int n) {
    const size_t nx = (size_t)n * Ws[0]->cols;
    void *dx = gpu()->alloc(gpu(), nx * 4 + 64), *dout[4];
    gpu()->to_device(gpu(), dx, x, nx * 4);
    for (int i = 0; i < count; i++) {
        const size_t no = (size_t)n * Ws[i]->rows;
        dout[i] = cuda_rig_poisoned(gpu(), no);
    }
    gpu()->matmul_multi(gpu(), dout, Ws, count, dx, n);
    for (int i = 0; i < count; i++) {
        outs[i] = cuda_rig_down(gpu(), dout[i], (size_t)n * Ws[i]->rows);
        gpu()->free(gpu(), dout[i]);
    }
    gpu()->free(gpu(), dx);
}

TEST(cuda_fp8_wgmma_fused_groups) {
    set_routes("wgmma", 1);
    static const int groups[][4] = {{3, 1024, 512, 48}, {2, 2048, 2048, 0}, {4, 640, 256, 128}}; // count, m0, m1, m2|3
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        const int count = groups[gi][0], k = 1280;
        tw w[4];
        const fd_weight *Ws[4];
        for (int i = 0; i < count; i++) {
            const int m = i < 3 ? (groups[gi][1 + i] ? groups[gi][1 + i] : 64) : 128;
            w[i] = mkw_fp8(m, k, i == 1 ? 64 : 128, 128), Ws[i] = &w[i].g;
        }
        // one x of 16 rows: the n-row calls take its first n, so their rows must be the 16-row call's bitwise
        float *x = rnd((size_t)16 * k, -1.f, 1.f), *all[4];
        gpu_multi(all, x, Ws, count, 16);
        for (int n = 1; n <= 16; n += 5) {
            float *outs[4];
            const int64_t l0 = fd_cuda_gemv_launches(gpu()), c0 = fp8_calls(V_WGMMA);
            gpu_multi(outs, x, Ws, count, n);
            EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 1, "group %zu n %d: not one launch", gi, n);
            EXPECT(fp8_calls(V_WGMMA) == c0 + count, "group %zu n %d: not counted per weight", gi, n);
            for (int i = 0; i < count; i++) {
                const size_t no = (size_t)n * Ws[i]->rows;
                float *ref = fd_malloc(no * 4);
                cpu()->matmul(cpu(), ref, x, &w[i].c, n, 0);
                EXPECT(cuda_rig_all_finite(outs[i], no), "group %zu n %d: weight %d not finite", gi, n, i);
                const double e = test_rel_l2(outs[i], ref, no);
                EXPECT(e <= TOL_W8A8, "group %zu n %d: weight %d rel-L2 %.3g > %.3g vs the CPU W8A8", gi, n, i, e,
                       TOL_W8A8);
                EXPECT(!memcmp(outs[i], all[i], no * 4), "group %zu n %d: weight %d differs from the 16-row call", gi,
                       n, i);
                free(ref), free(outs[i]);
            }
        }
        for (int i = 0; i < count; i++) free(all[i]);
        free(x);
        for (int i = 0; i < count; i++) freew(&w[i]);
    }
    set_routes("gemv", 0);
}

TEST(cuda_fp8_wgmma_by_shape_runs_gemv) {
    const int m = 192, k = 1024, n = 5;
    tw w = mkw_fp8(m, k, 128, 64); // block_cols 64: not the W8A8 kernel's
    float *x = rnd((size_t)n * k, -1.f, 1.f);
    set_routes("gemv", 0);
    float *want = gpu_mm(x, &w.g, n);
    set_routes("wgmma", 1);
    const int64_t g0 = fp8_calls(V_GEMV), w0 = fp8_calls(V_WGMMA);
    float *got = gpu_mm(x, &w.g, n);
    EXPECT(fp8_calls(V_GEMV) == g0 + 1 && fp8_calls(V_WGMMA) == w0, "block_cols 64 not counted as gemv");
    EXPECT(!memcmp(got, want, (size_t)n * m * 4), "block_cols 64 under wgmma differs from the gemv route");
    free(x), free(want), free(got);
    freew(&w);
    set_routes("gemv", 0);
}
