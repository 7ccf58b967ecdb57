// GEMV benches (FD_CUDA_BENCH=1): the small-n GEMV vs cuBLAS per shape, the fused groups of a 27B decode step, and
// the sweep of load schedules x k-slicing targets that set the defaults (docs/perf-notes.md).
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/kv_pool.h"
#include "engine/routes.h"

// ---- small-n GEMM (route gemm_small): every bf16 GEMM shape of a 27B decode step at n = 1, 8, 16 ----
// Each timing cycles through enough copies of the weight (>= 384 MB together) that no call finds its weights in
// the 50 MB L2, and runs back-to-back calls between two syncs (a decode step issues them that way), so launch
// gaps count: the small shapes (k/v 1024 x 5120 = 10 MB, b/a 48 x 5120) are launch-bound by design.
TEST(bench_cuda_gemv) {
    if (cuda_rig_bench_skipped()) return;
    // m, k, and how many such GEMMs one Qwen3.5-27B decode token runs (48 GDN + 16 attention layers, 64 FFNs).
    static const struct {
        int m, k, per_token;
        const char *what;
    } shapes[] = {{10240, 5120, 48, "GDN qkv"},        {6144, 5120, 48, "GDN z"},        {48, 5120, 96, "GDN b, a"},
                  {5120, 6144, 64, "GDN out, attn o"}, {12288, 5120, 16, "attn q|gate"}, {1024, 5120, 32, "attn k, v"},
                  {17408, 5120, 128, "FFN gate, up"},  {5120, 17408, 64, "FFN down"},    {248320, 5120, 1, "lm_head"}};
    const int ns[] = {1, 8, 16};
    const char *routes[] = {"gemv", "cublas"};
    double per_token_ms[3][2] = {{0}};
    const char *prev = fd_cuda_route(B(), "gemm_small");
    // One 32 MB block of random bf16 values, tiled on the device into each weight pool.
    const size_t seed_elems = (size_t)16 << 20;
    fd_weight seed = wrand((int64_t)(seed_elems / 4096), 4096, -0.05f, 0.05f);
    bench_mm_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    c.out = B()->alloc(B(), (size_t)16 * 248320 * 4);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s].m, k = shapes[s].k;
        const size_t wbytes = (size_t)m * k * 2;
        bench_pool pool = bench_pool_make(&seed, shapes[s].what, &m, 1, k);
        c.Ws = pool.Ws, c.copies = pool.copies;
        for (int in = 0; in < 3; in++)
            for (int r = 0; r < 2; r++) {
                fd_cuda_set_route(B(), "gemm_small", routes[r]);
                c.n = ns[in];
                const double bytes = (double)wbytes + (double)c.n * k * 4 + (double)c.n * m * 4;
                c.reps = (int)(2e9 / bytes);
                c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
                double ms = time_ms(bench_mm_cycle, &c) / c.reps;
                char what[96];
                snprintf(what, sizeof what, "%-6s n=%-2d %6d x %-5d (%s)", routes[r], c.n, m, k, shapes[s].what);
                row(what, ms, 0, bytes);
                per_token_ms[in][r] += ms * shapes[s].per_token;
            }
        bench_pool_free(&pool);
    }
    // All bf16 GEMMs of one 27B decode step (n = 1) or verify/batched step (n = 8, 16), from the timings above.
    double wsum = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        wsum += (double)shapes[s].m * shapes[s].k * 2 * shapes[s].per_token;
    for (int in = 0; in < 3; in++)
        for (int r = 0; r < 2; r++) {
            char what[96];
            snprintf(what, sizeof what, "%-6s n=%-2d all GEMMs of a 27B step (%.1f GB)", routes[r], ns[in], wsum / 1e9);
            row(what, per_token_ms[in][r], 0, wsum);
        }
    fd_cuda_set_route(B(), "gemm_small", prev);
    B()->free(B(), c.x), B()->free(B(), c.out), B()->free(B(), seed.dev);
}

// ---- fused projections (matmul_multi): a 27B decode/verify step's GEMMs as the engine issues them ----
// Each group is timed three ways at n = 1, 8, 16: fused (one matmul_multi), separate (one gemv matmul per weight:
// the engine before fusion) and cuBLAS (route gemm_small=cublas). Same pools as bench_cuda_gemv: >= 384 MB of
// copies per group, so the weights come from HBM, back-to-back calls between two syncs.
// FD_BENCH_GEMV_BPS=2,3,4,6,8 repeats it for each k-slicing target (fd_cuda_set_gemv_blocks_per_sm; default:
// the backend's), the step totals labelled "bps=N", to tune CU_GEMV_BLOCKS_PER_SM.
typedef struct {
    fd_weight *Ws; // copies x count
    void *outs[4];
    int copies, count, reps, n, fused;
    void *x;
} gfuse_ctx;

static void f_gfuse(void *p) {
    gfuse_ctx *c = p;
    for (int r = 0; r < c->reps; r++) {
        const fd_weight *W[4];
        for (int i = 0; i < c->count; i++) W[i] = &c->Ws[(r % c->copies) * c->count + i];
        if (c->fused)
            B()->matmul_multi(B(), c->outs, W, c->count, c->x, c->n);
        else
            for (int i = 0; i < c->count; i++) B()->matmul(B(), c->outs[i], c->x, W[i], c->n, 0);
    }
}

// The bf16 GEMM groups of one Qwen3.5-27B token as the engine issues them: 48 GDN layers, 16 attention layers, 64
// dense FFNs, the LM head.
static const struct {
    int count, k, per_token, m[4];
    const char *what;
} k_step_groups[] = {{4, 5120, 48, {10240, 6144, 48, 48}, "GDN qkv|z|b|a"},
              {3, 5120, 16, {12288, 1024, 1024}, "attn q|k|v"},
              {2, 5120, 64, {17408, 17408}, "FFN gate|up"},
              {1, 6144, 64, {5120}, "GDN out, attn o"},
              {1, 17408, 64, {5120}, "FFN down"},
              {1, 5120, 1, {248320}, "lm_head"}};

static int parse_list(const char *env, const char *dflt, int *out, int max, int lo, int hi) {
    const char *p = getenv(env);
    if (!p || !*p) p = dflt;
    int n = 0;
    while (*p && n < max) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v >= lo && v <= hi) out[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

TEST(bench_cuda_gemv_fused) {
    if (cuda_rig_bench_skipped()) return;
    const int ns[] = {1, 8, 16};
    const char *modes[] = {"fused", "separate", "cublas"};
    const char *prev = fd_cuda_route(B(), "gemm_small");
    const size_t seed_elems = (size_t)16 << 20;
    fd_weight seed = wrand((int64_t)(seed_elems / 4096), 4096, -0.05f, 0.05f);
    gfuse_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    int bps_list[16], n_bps = 0;
    const int bps_default = fd_cuda_set_gemv_blocks_per_sm(B(), 6); // read the current value, then restore it
    fd_cuda_set_gemv_blocks_per_sm(B(), bps_default);
    n_bps = parse_list("FD_BENCH_GEMV_BPS", "", bps_list, 16, 1, 64);
    if (!n_bps) bps_list[n_bps++] = bps_default;
    for (int bi = 0; bi < n_bps; bi++) {
        fd_cuda_set_gemv_blocks_per_sm(B(), bps_list[bi]);
        double step_ms[3][3] = {{0}}; // [n][mode]
        for (size_t g = 0; g < sizeof k_step_groups / sizeof k_step_groups[0]; g++) {
            const int count = k_step_groups[g].count, k = k_step_groups[g].k;
            bench_pool pool = bench_pool_make(&seed, k_step_groups[g].what, k_step_groups[g].m, count, k);
            const size_t gbytes = pool.group_bytes;
            for (int i = 0; i < count; i++) c.outs[i] = B()->alloc(B(), (size_t)16 * k_step_groups[g].m[i] * 4);
            c.Ws = pool.Ws, c.copies = pool.copies, c.count = count;
            for (int in = 0; in < 3; in++)
                for (int md = 0; md < 3; md++) {
                    fd_cuda_set_route(B(), "gemm_small", md == 2 ? "cublas" : "gemv");
                    c.fused = md == 0, c.n = ns[in];
                    const double bytes = (double)gbytes + (double)c.n * k * 4;
                    c.reps = (int)(2e9 / bytes);
                    c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
                    double ms = time_ms(f_gfuse, &c) / c.reps;
                    char what[96];
                    snprintf(what, sizeof what, "%-8s n=%-2d %s (%.0f MB)", modes[md], c.n, k_step_groups[g].what,
                             gbytes / 1e6);
                    row(what, ms, 0, bytes);
                    step_ms[in][md] += ms * k_step_groups[g].per_token;
                }
            for (int i = 0; i < count; i++) B()->free(B(), c.outs[i]);
            bench_pool_free(&pool);
        }
        double wsum = 0;
        for (size_t g = 0; g < sizeof k_step_groups / sizeof k_step_groups[0]; g++)
            for (int i = 0; i < k_step_groups[g].count; i++)
                wsum += (double)k_step_groups[g].m[i] * k_step_groups[g].k * 2 * k_step_groups[g].per_token;
        for (int in = 0; in < 3; in++)
            for (int md = 0; md < 3; md++) {
                char what[96];
                snprintf(what, sizeof what, "%-8s n=%-2d bps=%d 27B step GEMMs (%.1f GB)", modes[md], ns[in],
                         bps_list[bi], wsum / 1e9);
                row(what, step_ms[in][md], 0, wsum);
            }
    }
    fd_cuda_set_gemv_blocks_per_sm(B(), bps_default);
    fd_cuda_set_route(B(), "gemm_small", prev);
    B()->free(B(), c.x), B()->free(B(), seed.dev);
}

// ---- gemv k-slicing sweep (bps), a 27B step's fused GEMMs ----
// The k_step_groups of bench_cuda_gemv_fused, issued as the engine does (matmul_multi), at n = 1, 8, 16, for every
// k-slicing target (FD_BENCH_GEMV_BPS, default 1,2,3,4,6,8,12,16; from 12 up the k = 5120 weights get 1024-wide
// slices). bps changes the summation order, so it is a tuning choice. One line per (n, bps): the step total (all
// 257 GEMM launches of a token) in ms and % of copy bandwidth, then cuBLAS, the best bps per n and its time per
// group.
TEST(bench_cuda_gemv_sweep) {
    if (cuda_rig_bench_skipped()) return;
    enum { NG = sizeof k_step_groups / sizeof k_step_groups[0], NN = 3, MAXB = 8 };
    const int ns[NN] = {1, 8, 16};
    int bpss[MAXB];
    const int nb = parse_list("FD_BENCH_GEMV_BPS", "1,2,3,4,6,8,12,16", bpss, MAXB, 1, 64);
    const char *prev = fd_cuda_route(B(), "gemm_small");
    const int prev_bps = fd_cuda_set_gemv_blocks_per_sm(B(), 6);
    const size_t seed_elems = (size_t)16 << 20;
    fd_weight seed = wrand((int64_t)(seed_elems / 4096), 4096, -0.05f, 0.05f);
    gfuse_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    static double step_ms[NN][MAXB], group_ms[NG][NN][MAXB], cublas_ms[NN];
    memset(step_ms, 0, sizeof step_ms), memset(cublas_ms, 0, sizeof cublas_ms);
    double wsum = 0;
    for (int g = 0; g < NG; g++) {
        const int count = k_step_groups[g].count, k = k_step_groups[g].k;
        for (int i = 0; i < count; i++) wsum += (double)k_step_groups[g].m[i] * k * 2 * k_step_groups[g].per_token;
        bench_pool pool = bench_pool_make(&seed, k_step_groups[g].what, k_step_groups[g].m, count, k);
        const size_t gbytes = pool.group_bytes;
        for (int i = 0; i < count; i++) c.outs[i] = B()->alloc(B(), (size_t)16 * k_step_groups[g].m[i] * 4);
        c.Ws = pool.Ws, c.copies = pool.copies, c.count = count, c.fused = 1;
        for (int in = 0; in < NN; in++) {
            c.n = ns[in];
            const double bytes = (double)gbytes + (double)c.n * k * 4;
            c.reps = (int)(2e9 / bytes);
            c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
            fd_cuda_set_route(B(), "gemm_small", "cublas");
            cublas_ms[in] += time_ms(f_gfuse, &c) / c.reps * k_step_groups[g].per_token;
            fd_cuda_set_route(B(), "gemm_small", "gemv");
            for (int bi = 0; bi < nb; bi++) {
                fd_cuda_set_gemv_blocks_per_sm(B(), bpss[bi]);
                const double ms = time_ms(f_gfuse, &c) / c.reps;
                group_ms[g][in][bi] = ms;
                step_ms[in][bi] += ms * k_step_groups[g].per_token;
            }
        }
        for (int i = 0; i < count; i++) B()->free(B(), c.outs[i]);
        bench_pool_free(&pool);
    }
    for (int in = 0; in < NN; in++) {
        int bb = 0;
        for (int bi = 0; bi < nb; bi++) {
            char what[96];
            snprintf(what, sizeof what, "sweep n=%-2d bps=%-2d 27B step GEMMs", ns[in], bpss[bi]);
            row(what, step_ms[in][bi], 0, wsum);
            if (step_ms[in][bi] < step_ms[in][bb]) bb = bi;
        }
        char what[96];
        snprintf(what, sizeof what, "sweep n=%-2d cublas 27B step GEMMs", ns[in]);
        row(what, cublas_ms[in], 0, wsum);
        if (nb) {
            snprintf(what, sizeof what, "sweep n=%-2d BEST bps=%d", ns[in], bpss[bb]);
            row(what, step_ms[in][bb], 0, wsum);
            // Where the best pair's time goes, group by group (per call).
            for (int g = 0; g < NG; g++) {
                double gb = 0;
                for (int i = 0; i < k_step_groups[g].count; i++)
                    gb += (double)k_step_groups[g].m[i] * k_step_groups[g].k * 2;
                snprintf(what, sizeof what, "  best n=%-2d %s (x%d)", ns[in], k_step_groups[g].what,
                         k_step_groups[g].per_token);
                row(what, group_ms[g][in][bb], 0, gb);
            }
        }
    }
    fd_cuda_set_gemv_blocks_per_sm(B(), prev_bps);
    fd_cuda_set_route(B(), "gemm_small", prev);
    B()->free(B(), c.x), B()->free(B(), seed.dev);
}
