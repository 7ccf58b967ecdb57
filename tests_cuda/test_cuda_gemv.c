// The tensor-core small-n GEMM (route gemm_small=gemv, src/cuda/gemv.cu) on fresh random inputs, NaN-poisoned
// outputs:
//   - against the CPU reference for n in {1, 2, 3, 7, 8, 9, 16} under both gemm_act values, on shapes that reach
//     every code path (m not a multiple of 16/32/64, k not a multiple of 64, one k slice and several, a last
//     slice shorter than the others);
//   - against the cuBLAS route under both gemm_act values (the same exact bf16 products, only the summation order
//     differs), which pins the k permutation far below the bf16 tolerance, also on 27B-sized shapes;
//   - the fallbacks: k % 8 != 0, an unaligned x and n > 16 run cuBLAS and are counted so;
//   - batch invariance, bitwise: row j of an n-row call equals the 1-row call on row j alone, for every n <= 16,
//     also when the other rows hold huge values, Inf or NaN;
//   - matmul_multi (fused projections): an eligible group runs as ONE gemv launch and every output is bitwise the
//     separate matmul's, for n = 1..16 and both gemm_act values; groups it cannot fuse (an fp32 weight, weights
//     of different k, n > 16, more than 4 weights) run one by one and are still right.
//   - gemm_act=auto: bitwise bf16x2 for k <= 256 and bf16 above, on both GEMM paths and for fused groups, and
//     counted under the value it ran;
//   - the k-slicing targets (fd_cuda_set_gemv_blocks_per_sm 2 / 6 / 64): against the CPU, batch invariant, fused =
//     separate at each.
// Thresholds (cuda_rig.h): TOL_BF16 (activations rounded to bf16, as the op table's matmul rows), TOL_BF16X2 (x = hi + lo keeps
// ~16 mantissa bits), TOL_REORDERED for gemv vs cuBLAS with identical products (fp32 summation order).
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x5eed0f6e77ull)

// x and the other inputs with 64 bytes of slack past them, as this file always allocated them.
static void *up_x(const float *h, size_t n) {
    return cuda_rig_up_slack(gpu(), h, n * 4, 64);
}
// A bf16 matrix [m, k] uploaded to both backends from the same host values.
static tw mkw_bf16(int m, int k) {
    return mkw("W", m, k, FD_BF16, -0.1f, 0.1f);
}
// A fused group's operands: bf16 weights W[0..count) of m[i] x k (Wg[i] their GPU sides) and a 16-row input *x
// (uniform in [-1, 1)); returns the input's device copy.
static void *fused_group(int count, int k, const int *m, tw *W, const fd_weight **Wg, float **x) {
    for (int i = 0; i < count; i++) W[i] = mkw_bf16(m[i], k), Wg[i] = &W[i].g;
    *x = rnd((size_t)16 * k, -1, 1);
    return up_x(*x, (size_t)16 * k);
}

static void set_route(const char *route, const char *value) {
    ASSERT(fd_cuda_set_route(gpu(), route, value) == 0, "%s", fd_error_msg());
}

// Calls counted under a route's value `value` so far.
static int64_t route_calls(const char *route, const char *value) {
    return cuda_rig_route_value_calls(gpu(), route, value);
}
static int64_t small_calls(const char *value) {
    return route_calls("gemm_small", value);
}

// One GPU matmul into a poisoned buffer; returns the host copy of out [n, m].
static float *gpu_matmul(const void *dx, const fd_weight *W, int n) {
    int m = (int)W->rows;
    void *dout = gpu()->alloc(gpu(), (size_t)n * m * 4 + 4);
    poison(dout, (size_t)n * m);
    gpu()->matmul(gpu(), dout, dx, W, n, 1);
    float *o = down(dout, (size_t)n * m);
    gpu()->free(gpu(), dout);
    return o;
}

// m x k shapes, and whether the CPU reference runs (it is slow on the big ones, which are checked against the
// cuBLAS route only). With the H200's 132 SMs: 48 x 512 one slice, m % 32 = 16; 130 x 1096 two slices, the last
// 72 wide (k % 64 = 8); 515 x 2048 two full slices, m % 16 = 3; 4100 x 1032 two slices, the second 8 wide;
// 1000 x 5120 five slices at the 27B width; 33 x 8 the smallest k; 60000 x 2056 one slice with several loop
// iterations per warp and a last step of 8; 5120 x 17408 and 17408 x 5120 the 27B FFN. 33 x 16 is the smallest
// k of a bf16 device weight (matrices with fewer than 16 columns are uploaded fp32 and take the fp32 GEMM).
static const struct {
    int m, k, with_cpu;
} k_shapes[] = {{48, 512, 1}, {130, 1096, 1},   {515, 2048, 1},   {4100, 1032, 1}, {1000, 5120, 1},
                {33, 16, 1},  {60000, 2056, 0}, {5120, 17408, 0}, {17408, 5120, 0}};
#define N_SHAPES (int)(sizeof k_shapes / sizeof k_shapes[0])
static const int k_ns[] = {1, 2, 3, 7, 8, 9, 16};

TEST(cuda_gemv_vs_cpu_and_cublas) {
    const char *prev_act = fd_cuda_route(gpu(), "gemm_act"), *prev_small = fd_cuda_route(gpu(), "gemm_small");
    for (int s = 0; s < N_SHAPES; s++) {
        const int m = k_shapes[s].m, k = k_shapes[s].k, with_cpu = k_shapes[s].with_cpu;
        tw W = mkw_bf16(m, k);
        float *x = rnd((size_t)16 * k, -1, 1), *oc = fd_malloc((size_t)16 * m * 4);
        void *dx = up_x(x, (size_t)16 * k);
        for (size_t in = 0; in < sizeof k_ns / sizeof k_ns[0]; in++) {
            const int n = k_ns[in];
            if (with_cpu) cpu()->matmul(cpu(), oc, x, &W.c, n, 1);
            for (int act = 0; act < 2; act++) {
                const char *an = act ? "bf16x2" : "bf16";
                set_route("gemm_act", an);
                set_route("gemm_small", "gemv");
                int64_t before = small_calls("gemv");
                float *og = gpu_matmul(dx, &W.g, n);
                EXPECT(small_calls("gemv") == before + 1, "m=%d k=%d n=%d did not run the gemv kernel", m, k, n);
                if (with_cpu) {
                    double e = test_rel_l2(og, oc, (size_t)n * m), tol = act ? TOL_BF16X2 : TOL_BF16;
                    EXPECT(e <= tol, "gemv %s m=%d k=%d n=%d vs CPU: rel-L2 %.3g > %.1g", an, m, k, n, e, tol);
                    if (n == 1 || n == 9 || n == 16)
                        printf("    gemv %-6s m=%-5d k=%-5d n=%-2d vs CPU    rel-L2 %.3g\n", an, m, k, n, e);
                }
                // The cuBLAS route multiplies the same bf16 values (bf16x2: the same hi and lo terms, as two
                // GEMMs): every product is equal and exact in fp32, only the order of the sum differs.
                set_route("gemm_small", "cublas");
                int64_t cub = small_calls("cublas");
                float *ob = gpu_matmul(dx, &W.g, n);
                EXPECT(small_calls("cublas") == cub + 1, "gemm_small=cublas m=%d k=%d n=%d did not run cuBLAS", m, k,
                       n);
                double eb = test_rel_l2(og, ob, (size_t)n * m);
                EXPECT(eb <= TOL_REORDERED, "gemv %s m=%d k=%d n=%d vs cuBLAS: rel-L2 %.3g > %.1g", an, m, k, n, eb,
                       TOL_REORDERED);
                if (n == 1 || n == 16)
                    printf("    gemv %-6s m=%-5d k=%-5d n=%-2d vs cuBLAS rel-L2 %.3g\n", an, m, k, n, eb);
                free(ob), free(og);
            }
        }
        free(x), free(oc), gpu()->free(gpu(), dx), freew(&W);
    }
    set_route("gemm_act", prev_act);
    set_route("gemm_small", prev_small);
}

// Calls the gemv kernel does not take run cuBLAS under route gemm_small=gemv, are counted as cublas, and are
// still right.
TEST(cuda_gemv_fallbacks) {
    const char *prev_small = fd_cuda_route(gpu(), "gemm_small");
    set_route("gemm_small", "gemv");
    struct {
        int n, m, k, x_offset;
        const char *why;
    } cases[] = {{3, 130, 100, 0, "k % 8 != 0"}, {5, 64, 512, 1, "x not 16-byte aligned"}, {17, 70, 264, 0, "n > 16"}};
    for (int i = 0; i < 3; i++) {
        int n = cases[i].n, m = cases[i].m, k = cases[i].k, off = cases[i].x_offset;
        tw W = mkw_bf16(m, k);
        float *x = rnd((size_t)n * k, -1, 1), *oc = fd_malloc((size_t)n * m * 4);
        float *hx = fd_calloc((size_t)n * k + (size_t)off, 4); // device x starts `off` floats into the buffer
        memcpy(hx + off, x, (size_t)n * k * 4);
        void *dx = up_x(hx, (size_t)n * k + (size_t)off);
        free(hx);
        cpu()->matmul(cpu(), oc, x, &W.c, n, 1);
        int64_t g0 = small_calls("gemv"), c0 = small_calls("cublas");
        float *og = gpu_matmul((const float *)dx + off, &W.g, n);
        EXPECT(small_calls("gemv") == g0 && small_calls("cublas") == c0 + 1, "%s: expected one cublas call",
               cases[i].why);
        double e = test_rel_l2(og, oc, (size_t)n * m);
        EXPECT(e <= TOL_BF16, "fallback (%s) n=%d m=%d k=%d: rel-L2 %.3g", cases[i].why, n, m, k, e);
        printf("    fallback %-22s n=%-2d m=%-4d k=%-4d rel-L2 %.3g\n", cases[i].why, n, m, k, e);
        free(x), free(oc), free(og), gpu()->free(gpu(), dx), freew(&W);
    }
    set_route("gemm_small", prev_small);
}

// Row j of an n-row call must be bit-identical to the 1-row call on row j alone (decode vs verify). The other
// rows are the random rows of the batch, then garbage (1e30, Inf, NaN): an MMA column must not leak into another.
TEST(cuda_gemv_batch_invariance) {
    const char *prev_act = fd_cuda_route(gpu(), "gemm_act"), *prev_small = fd_cuda_route(gpu(), "gemm_small");
    set_route("gemm_small", "gemv");
    const int shapes[][2] = {{130, 1096}, {515, 2048}, {4100, 1032}, {1024, 5120}, {5120, 1024}, {60000, 2056}};
    for (int s = 0; s < 6; s++) {
        int m = shapes[s][0], k = shapes[s][1];
        tw W = mkw_bf16(m, k);
        float *x = rnd((size_t)16 * k, -1, 1);
        void *dx = up_x(x, (size_t)16 * k);
        for (int act = 0; act < 2; act++) {
            set_route("gemm_act", act ? "bf16x2" : "bf16");
            float *single[16];
            for (int j = 0; j < 16; j++) single[j] = gpu_matmul((const float *)dx + (size_t)j * k, &W.g, 1);
            int bad = 0;
            for (int n = 2; n <= 16; n++) {
                float *og = gpu_matmul(dx, &W.g, n);
                for (int j = 0; j < n; j++)
                    if (memcmp(og + (size_t)j * m, single[j], (size_t)m * 4)) {
                        if (!bad++)
                            EXPECT(0, "m=%d k=%d %s: row %d of the n=%d call differs from its n=1 call", m, k,
                                   act ? "bf16x2" : "bf16", j, n);
                    }
                free(og);
            }
            // Garbage neighbours: row j keeps its values, every other row of a 16-row call is 1e30 / Inf / NaN.
            float *xg = fd_malloc((size_t)16 * k * 4);
            const float garbage[3] = {1e30f, INFINITY, NAN};
            for (int j = 0; j < 16; j += 5) {
                for (int r = 0; r < 16; r++)
                    for (int i = 0; i < k; i++) xg[(size_t)r * k + i] = r == j ? x[(size_t)j * k + i] : garbage[r % 3];
                void *dg = up_x(xg, (size_t)16 * k);
                float *og = gpu_matmul(dg, &W.g, 16);
                if (memcmp(og + (size_t)j * m, single[j], (size_t)m * 4))
                    EXPECT(0, "m=%d k=%d %s: row %d changes when the other rows hold 1e30/Inf/NaN", m, k,
                           act ? "bf16x2" : "bf16", j);
                free(og), gpu()->free(gpu(), dg);
            }
            free(xg);
            EXPECT(bad == 0, "m=%d k=%d: %d rows differ", m, k, bad);
            printf("    gemv %-6s m=%-5d k=%-5d n=1..16: %s\n", act ? "bf16x2" : "bf16", m, k,
                   bad ? "NOT batch invariant" : "bitwise batch invariant");
            for (int j = 0; j < 16; j++) free(single[j]);
        }
        free(x), gpu()->free(gpu(), dx), freew(&W);
    }
    set_route("gemm_act", prev_act);
    set_route("gemm_small", prev_small);
}

// ---- matmul_multi: fused projections ----

// One GPU matmul_multi into poisoned buffers; returns the host copies of each out [n, Ws[i]->rows] (caller frees).
static void gpu_multi(float **res, const void *dx, const fd_weight *const Ws[], int count, int n) {
    void *outs[8] = {0};
    for (int i = 0; i < count; i++) {
        size_t len = (size_t)n * (size_t)Ws[i]->rows;
        outs[i] = gpu()->alloc(gpu(), len * 4 + 4);
        poison(outs[i], len);
    }
    gpu()->matmul_multi(gpu(), outs, Ws, count, dx, n);
    for (int i = 0; i < count; i++) {
        res[i] = down(outs[i], (size_t)n * (size_t)Ws[i]->rows);
        gpu()->free(gpu(), outs[i]);
    }
}

// Groups shaped like the decode projections (the 27B sizes without the CPU reference). The weights are separate
// cudaMallocs, so nothing about their placement is assumed. Checked for n = 1..16 under both gemm_act values:
// one gemv launch per call, `count` gemv calls counted, each output bitwise equal to its separate matmul, and
// (for the small groups) within the bf16 tolerance of the CPU.
TEST(cuda_gemv_multi_fused_equals_separate) {
    const char *prev_act = fd_cuda_route(gpu(), "gemm_act"), *prev_small = fd_cuda_route(gpu(), "gemm_small");
    set_route("gemm_small", "gemv");
    static const struct {
        int count, k, with_cpu, m[4];
        const char *what;
    } groups[] = {
        {4, 1096, 1, {520, 300, 48, 48}, "qkv|z|b|a small (2 slices, k % 64 = 8)"},
        {3, 2048, 1, {700, 130, 130}, "q|k|v small"},
        {2, 512, 1, {33, 70}, "gate|up one slice"},
        {4, 5120, 0, {10240, 6144, 48, 48}, "27B GDN qkv|z|b|a"},
        {3, 5120, 0, {12288, 1024, 1024}, "27B attn q|k|v"},
        {2, 5120, 0, {17408, 17408}, "27B FFN gate|up"},
    };
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        const int count = groups[gi].count, k = groups[gi].k;
        tw W[4];
        const fd_weight *Wg[4];
        float *x;
        void *dx = fused_group(count, k, groups[gi].m, W, Wg, &x);
        for (int act = 0; act < 2; act++) {
            const char *an = act ? "bf16x2" : "bf16";
            set_route("gemm_act", an);
            int bad = 0;
            double worst_cpu = 0;
            for (int n = 1; n <= 16; n++) {
                float *fused[4];
                const int64_t l0 = fd_cuda_gemv_launches(gpu()), c0 = small_calls("gemv");
                gpu_multi(fused, dx, Wg, count, n);
                EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 1, "%s n=%d: %lld gemv launches, expected 1",
                       groups[gi].what, n, (long long)(fd_cuda_gemv_launches(gpu()) - l0));
                EXPECT(small_calls("gemv") == c0 + count, "%s n=%d: gemv calls not counted per weight", groups[gi].what,
                       n);
                for (int i = 0; i < count; i++) {
                    const int m = groups[gi].m[i];
                    float *sep = gpu_matmul(dx, Wg[i], n);
                    if (memcmp(fused[i], sep, (size_t)n * m * 4) && !bad++)
                        EXPECT(0, "%s %s n=%d: weight %d fused differs from its separate matmul", groups[gi].what, an,
                               n, i);
                    if (groups[gi].with_cpu && (n == 1 || n == 9 || n == 16)) {
                        float *oc = fd_malloc((size_t)n * m * 4);
                        cpu()->matmul(cpu(), oc, x, &W[i].c, n, 1);
                        double e = test_rel_l2(fused[i], oc, (size_t)n * m);
                        worst_cpu = e > worst_cpu ? e : worst_cpu;
                        EXPECT(e <= (act ? TOL_BF16X2 : TOL_BF16), "%s %s n=%d weight %d vs CPU: rel-L2 %.3g",
                               groups[gi].what, an, n, i, e);
                        free(oc);
                    }
                    free(sep), free(fused[i]);
                }
            }
            EXPECT(bad == 0, "%s %s: %d fused outputs differ from separate calls", groups[gi].what, an, bad);
            printf("    multi %-6s %-40s n=1..16: %s", an, groups[gi].what,
                   bad ? "NOT equal to separate" : "one launch, bitwise = separate");
            if (groups[gi].with_cpu) printf(", worst vs CPU %.3g", worst_cpu);
            printf("\n");
        }
        free(x), gpu()->free(gpu(), dx);
        for (int i = 0; i < count; i++) freew(&W[i]);
    }
    set_route("gemm_act", prev_act);
    set_route("gemm_small", prev_small);
}

// Groups the fused launch does not take run weight by weight (no gemv launch for the group as a whole) and
// match the CPU: an fp32 weight (a single-row matrix is uploaded fp32), weights of different k (each reads x as
// [n, its k]), n > 16 (cuBLAS), five weights (more than one launch holds), and route gemm_small=cublas.
TEST(cuda_gemv_multi_unfused_groups) {
    const char *prev_small = fd_cuda_route(gpu(), "gemm_small");
    static const struct {
        int count, n, m[5], k[5], launches; // gemv launches expected
        const char *small, *why;
    } cases[] = {
        {2, 4, {300, 1}, {512, 512}, 1, "gemv", "one fp32 weight"},
        {2, 4, {300, 200}, {512, 1024}, 2, "gemv", "different k"},
        {3, 17, {130, 64, 64}, {264, 264, 264}, 0, "gemv", "n > 16"},
        {5, 3, {64, 64, 64, 64, 40}, {256, 256, 256, 256, 256}, 5, "gemv", "five weights"},
        {2, 8, {300, 200}, {512, 512}, 0, "cublas", "route gemm_small=cublas"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int count = cases[ci].count, n = cases[ci].n;
        set_route("gemm_small", cases[ci].small);
        tw W[5];
        const fd_weight *Wg[5];
        int kmax = 0;
        for (int i = 0; i < count; i++) {
            W[i] = mkw_bf16(cases[ci].m[i], cases[ci].k[i]), Wg[i] = &W[i].g;
            kmax = cases[ci].k[i] > kmax ? cases[ci].k[i] : kmax;
        }
        float *x = rnd((size_t)n * kmax, -1, 1);
        void *dx = up_x(x, (size_t)n * kmax);
        float *res[5];
        const int64_t l0 = fd_cuda_gemv_launches(gpu());
        gpu_multi(res, dx, Wg, count, n);
        EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + cases[ci].launches, "%s: %lld gemv launches, expected %d",
               cases[ci].why, (long long)(fd_cuda_gemv_launches(gpu()) - l0), cases[ci].launches);
        double worst = 0;
        for (int i = 0; i < count; i++) {
            const int m = cases[ci].m[i];
            float *oc = fd_malloc((size_t)n * m * 4);
            cpu()->matmul(cpu(), oc, x, &W[i].c, n, 1);
            double e = test_rel_l2(res[i], oc, (size_t)n * m);
            worst = e > worst ? e : worst;
            EXPECT(e <= TOL_BF16, "%s: weight %d vs CPU rel-L2 %.3g", cases[ci].why, i, e);
            free(oc), free(res[i]);
        }
        printf("    multi unfused %-24s n=%-2d count=%d: worst vs CPU %.3g\n", cases[ci].why, n, count, worst);
        free(x), gpu()->free(gpu(), dx);
        for (int i = 0; i < count; i++) freew(&W[i]);
    }
    set_route("gemm_small", prev_small);
}

// ---- k-slicing targets (fd_cuda_set_gemv_blocks_per_sm) ----

// The k partition depends on the slicing target: bps 2 (long slices, the default), 6 and 64 (as many 1024-wide
// slices as k allows). At each one: against the CPU on the small shapes (4100 x 4104 has a last slice 8 wide: only
// warp 0 has a step in it), batch invariance (a 1-row call = its row of the 16-row call; 1e30/Inf/NaN in the
// other rows change nothing), and fused groups = separate calls, one launch. (Session 6 removed the six other
// load schedules this test compared bitwise with the default: they lost the sweep.)
TEST(cuda_gemv_slicing_targets) {
    const char *prev_act = fd_cuda_route(gpu(), "gemm_act"), *prev_small = fd_cuda_route(gpu(), "gemm_small");
    const int prev_bps = fd_cuda_set_gemv_blocks_per_sm(gpu(), 6);
    ASSERT(prev_bps >= 1, "gemv knob refused");
    set_route("gemm_small", "gemv");
    static const struct {
        int m, k, with_cpu;
    } shapes[] = {{130, 1096, 1}, {515, 2048, 1}, {4100, 4104, 1}, {33, 16, 1}, {17408, 5120, 0}, {5120, 17408, 0}};
    static const int ns[] = {1, 3, 8, 9, 16}, bpss[] = {2, 6, 64};
    enum { NNS = 5 };
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int m = shapes[si].m, k = shapes[si].k;
        tw W = mkw_bf16(m, k);
        float *x = rnd((size_t)16 * k, -1, 1);
        void *dx = up_x(x, (size_t)16 * k);
        float *oc[NNS] = {0};
        if (shapes[si].with_cpu)
            for (int in = 0; in < NNS; in++) {
                oc[in] = fd_malloc((size_t)ns[in] * m * 4);
                cpu()->matmul(cpu(), oc[in], x, &W.c, ns[in], 1);
            }
        float *xg = fd_malloc((size_t)16 * k * 4);
        const float garbage[3] = {1e30f, INFINITY, NAN};
        for (int r = 0; r < 16; r++)
            for (int i = 0; i < k; i++) xg[(size_t)r * k + i] = r == 3 ? x[(size_t)3 * k + i] : garbage[r % 3];
        void *dg = up_x(xg, (size_t)16 * k);
        free(xg);
        for (int act = 0; act < 2; act++) {
            const char *an = act ? "bf16x2" : "bf16";
            set_route("gemm_act", an);
            for (size_t bi = 0; bi < sizeof bpss / sizeof bpss[0]; bi++) {
                fd_cuda_set_gemv_blocks_per_sm(gpu(), bpss[bi]);
                float *o16 = gpu_matmul(dx, &W.g, 16);
                int bad = 0;
                double worst_cpu = 0;
                for (int in = 0; in < NNS; in++) {
                    const int n = ns[in];
                    float *og = gpu_matmul(dx, &W.g, n);
                    if (oc[in]) {
                        double e = test_rel_l2(og, oc[in], (size_t)n * m), tol = act ? TOL_BF16X2 : TOL_BF16;
                        worst_cpu = e > worst_cpu ? e : worst_cpu;
                        EXPECT(e <= tol, "%s bps=%d m=%d k=%d n=%d vs CPU: rel-L2 %.3g", an, bpss[bi], m, k, n, e);
                    }
                    if (memcmp(og, o16, (size_t)n * m * 4) && !bad++)
                        EXPECT(0, "%s bps=%d m=%d k=%d: the %d-row call differs from those rows of n=16", an, bpss[bi],
                               m, k, n);
                    free(og);
                }
                float *o15 = gpu_matmul((const float *)dx + (size_t)15 * k, &W.g, 1);
                if (memcmp(o15, o16 + (size_t)15 * m, (size_t)m * 4) && !bad++)
                    EXPECT(0, "%s bps=%d m=%d k=%d: row 15 alone differs from its row of n=16", an, bpss[bi], m, k);
                float *og = gpu_matmul(dg, &W.g, 16);
                if (memcmp(og + (size_t)3 * m, o16 + (size_t)3 * m, (size_t)m * 4) && !bad++)
                    EXPECT(0, "%s bps=%d m=%d k=%d: row 3 changes when the other rows hold 1e30/Inf/NaN", an, bpss[bi],
                           m, k);
                printf("    gemv %-6s m=%-5d k=%-5d bps=%-2d n=1..16: %s", an, m, k, bpss[bi],
                       bad ? "NOT batch invariant" : "batch invariant");
                if (oc[0]) printf(", worst vs CPU %.3g", worst_cpu);
                printf("\n");
                free(o15), free(og), free(o16);
            }
        }
        for (int in = 0; in < NNS; in++) free(oc[in]);
        free(x), gpu()->free(gpu(), dx), gpu()->free(gpu(), dg), freew(&W);
    }
    // Fused groups at every slicing target: matmul_multi = the separate matmuls, in one launch.
    static const struct {
        int count, k, m[4];
    } groups[] = {{4, 4104, {520, 300, 48, 48}}, {4, 5120, {10240, 6144, 48, 48}}, {2, 5120, {17408, 17408}}};
    set_route("gemm_act", "bf16");
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++) {
        const int count = groups[gi].count, k = groups[gi].k;
        tw W[4];
        const fd_weight *Wg[4];
        float *x;
        void *dx = fused_group(count, k, groups[gi].m, W, Wg, &x);
        int bad = 0;
        for (size_t bi = 0; bi < sizeof bpss / sizeof bpss[0]; bi++) {
            fd_cuda_set_gemv_blocks_per_sm(gpu(), bpss[bi]);
            for (int n = 1; n <= 16; n += 7) { // 1, 8, 15
                float *sep[4], *fused[4];
                for (int i = 0; i < count; i++) sep[i] = gpu_matmul(dx, Wg[i], n);
                const int64_t l0 = fd_cuda_gemv_launches(gpu());
                gpu_multi(fused, dx, Wg, count, n);
                EXPECT(fd_cuda_gemv_launches(gpu()) == l0 + 1, "bps=%d: fused group not one launch", bpss[bi]);
                for (int i = 0; i < count; i++) {
                    if (memcmp(fused[i], sep[i], (size_t)n * groups[gi].m[i] * 4) && !bad++)
                        EXPECT(0, "bps=%d k=%d n=%d: fused weight %d differs from its separate call", bpss[bi], k, n,
                               i);
                    free(fused[i]), free(sep[i]);
                }
            }
        }
        printf("    multi bf16 group %zu (k=%d, %d weights) bps 2/6/64, n=1,8,15: %s\n", gi, k, count,
               bad ? "NOT equal" : "bitwise = separate");
        free(x), gpu()->free(gpu(), dx);
        for (int i = 0; i < count; i++) freew(&W[i]);
    }
    fd_cuda_set_gemv_blocks_per_sm(gpu(), prev_bps);
    set_route("gemm_act", prev_act);
    set_route("gemm_small", prev_small);
}

// gemm_act=auto (the default) picks bf16x2 for k <= 256 and bf16 above (src/cuda/gemm.cu): each result must be
// bitwise the explicitly selected route's, on the gemv (n <= 16) and cuBLAS (n > 16) paths and for a fused group,
// and every call must be counted under the value that ran. A bad value is refused with the list of values.
TEST(cuda_gemm_act_auto_by_k) {
    const char *prev_act = fd_cuda_route(gpu(), "gemm_act"), *prev_small = fd_cuda_route(gpu(), "gemm_small");
    set_route("gemm_small", "gemv");
    EXPECT(fd_cuda_set_route(gpu(), "gemm_act", "fp8") != 0 && strstr(fd_error_msg(), "bf16x2") &&
               strstr(fd_error_msg(), "auto"),
           "gemm_act=fp8 accepted or an unhelpful error: %s", fd_error_msg());
    static const int ks[] = {256, 264}, ns[] = {1, 9, 16, 40};
    for (int ki = 0; ki < 2; ki++) {
        const int k = ks[ki], m = 300;
        const char *expect = k <= 256 ? "bf16x2" : "bf16";
        tw W[2] = {mkw_bf16(m, k), mkw_bf16(48, k)};
        const fd_weight *Wg[2] = {&W[0].g, &W[1].g};
        float *x = rnd((size_t)40 * k, -1, 1);
        void *dx = up_x(x, (size_t)40 * k);
        for (int ni = 0; ni < 4; ni++) {
            const int n = ns[ni];
            set_route("gemm_act", expect);
            float *ref = gpu_matmul(dx, Wg[0], n), *ref_multi[2];
            gpu_multi(ref_multi, dx, Wg, 2, n);
            set_route("gemm_act", "auto");
            const int64_t c_split = route_calls("gemm_act", "bf16x2"), c_plain = route_calls("gemm_act", "bf16");
            float *got = gpu_matmul(dx, Wg[0], n), *got_multi[2];
            gpu_multi(got_multi, dx, Wg, 2, n);
            const int64_t d_split = route_calls("gemm_act", "bf16x2") - c_split;
            const int64_t d_plain = route_calls("gemm_act", "bf16") - c_plain;
            EXPECT(!memcmp(got, ref, (size_t)n * m * 4), "auto k=%d n=%d: not bitwise gemm_act=%s", k, n, expect);
            for (int i = 0; i < 2; i++)
                EXPECT(!memcmp(got_multi[i], ref_multi[i], (size_t)n * Wg[i]->rows * 4),
                       "auto k=%d n=%d: fused weight %d not bitwise gemm_act=%s", k, n, i, expect);
            EXPECT((k <= 256 ? d_split : d_plain) == 3 && (k <= 256 ? d_plain : d_split) == 0,
                   "auto k=%d n=%d: counted %lld bf16x2 / %lld bf16 calls, expected 3 under %s", k, n,
                   (long long)d_split, (long long)d_plain, expect);
            printf("    auto k=%d n=%-2d: bitwise gemm_act=%s (single and fused), counted as %s\n", k, n, expect,
                   expect);
            free(ref), free(got);
            for (int i = 0; i < 2; i++) free(ref_multi[i]), free(got_multi[i]);
        }
        free(x), gpu()->free(gpu(), dx);
        freew(&W[0]), freew(&W[1]);
    }
    set_route("gemm_act", prev_act);
    set_route("gemm_small", prev_small);
}
