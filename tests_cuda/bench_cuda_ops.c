// Op timings at the Qwen3.5-27B geometry (d 5120, GDN 16k/48v x 128, attention 24q/4kv x 256, FFN 17408).
// Runs only with FD_CUDA_BENCH=1 (it is a measurement, not a check). Wall clock around be->sync, one warm-up,
// median of 5; random inputs (never zeros). Prints one table line per op with the roofline ratio:
//   GEMM: achieved TFLOP/s / 709 (bf16 ceiling measured on this H200 kind, DESIGN.md §8)
//   memory-bound ops: achieved GB/s / 4250 (copy bandwidth, read + write)
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
typedef struct {
    void *out, *x, *a, *b, *st;
    fd_weight *W, *w2;
    int n, route, H, Hkv, hd;
    int64_t pos0, cap;
} ctx_t;

static void f_matmul(void *p) {
    ctx_t *c = p;
    B()->matmul(B(), c->out, c->x, c->W, c->n, 0);
}
static void f_gdn(void *p) {
    ctx_t *c = p;
    B()->gdn_core(B(), (fd_gdn_route)c->route, c->out, c->x, c->a, c->b, c->W, c->w2, c->st, c->n, 16, 48, 128, 128,
                  NULL);
}
static void f_attn(void *p) {
    ctx_t *c = p;
    B()->attention(B(), c->out, c->x, FD_KV_FLAT(c->st, c->cap), c->pos0, NULL, c->n, c->H, c->Hkv, c->hd, 0.0625f, 1);
}
static void f_conv(void *p) {
    ctx_t *c = p;
    B()->conv1d_silu(B(), c->out, c->x, c->W, c->st, c->n, 10240, 4, NULL);
}
static void f_rms(void *p) {
    ctx_t *c = p;
    B()->rmsnorm(B(), c->out, c->x, c->W, c->n, 5120, 1e-6f, 1);
}

TEST(bench_cuda_27b_ops) {
    if (cuda_rig_bench_skipped()) return;
    const int d = 5120, I = 17408, N = 4096;
    ctx_t c;
    memset(&c, 0, sizeof c);
    // ---- GEMM: FFN up projection, prefill and decode ----
    fd_weight W = wrand(I, d, -0.05f, 0.05f);
    c.W = &W;
    c.x = dev_rand((size_t)N * d, -1, 1);
    c.out = B()->alloc(B(), (size_t)N * I * 4);
    for (int n = N; n >= 1; n = n == N ? 16 : n == 16 ? 1 : 0) {
        c.n = n;
        char what[80];
        snprintf(what, sizeof what, "matmul n=%d k=%d m=%d (bf16 W)", n, d, I);
        double ms = time_ms(f_matmul, &c);
        row(what, ms, 2.0 * n * d * I, (double)I * d * 2 + (double)n * d * 6 + (double)n * I * 4);
    }
    B()->free(B(), c.x), B()->free(B(), c.out), B()->free(B(), W.dev);
    // ---- rmsnorm ----
    fd_weight nw = wrand(d, 1, -0.2f, 0.2f);
    c.W = &nw;
    c.n = N;
    c.x = dev_rand((size_t)N * d, -1, 1);
    c.out = B()->alloc(B(), (size_t)N * d * 4);
    row("rmsnorm n=4096 d=5120", time_ms(f_rms, &c), 0, (double)N * d * 8);
    B()->free(B(), c.x), B()->free(B(), c.out);
    // ---- conv1d + SiLU over the GDN channels ----
    fd_weight cw = wrand(10240, 4, -0.5f, 0.5f);
    c.W = &cw;
    c.x = dev_rand((size_t)N * 10240, -1, 1);
    c.out = B()->alloc(B(), (size_t)N * 10240 * 4);
    c.st = dev_rand(10240 * 3, -1, 1);
    row("conv1d_silu n=4096 C=10240 K=4", time_ms(f_conv, &c), 0, (double)N * 10240 * 8);
    B()->free(B(), c.x), B()->free(B(), c.out), B()->free(B(), c.st);
    // ---- GDN core: 27B layer (Hk 16, Hv 48, 128/128) ----
    fd_weight Al = wrand(48, 1, -1, 1.5f), dtb = wrand(48, 1, -1, 1);
    c.W = &Al, c.w2 = &dtb;
    int cq = 2 * 16 * 128 + 48 * 128;
    c.x = dev_rand((size_t)N * cq, -1, 1);
    c.a = dev_rand((size_t)N * 48, -3, 3);
    c.b = dev_rand((size_t)N * 48, -3, 3);
    c.out = B()->alloc(B(), (size_t)N * 48 * 128 * 4);
    c.st = dev_rand((size_t)48 * 128 * 128, -0.1f, 0.1f);
    int gn[] = {4096, 1, 16};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 3; i++) {
            c.route = r, c.n = gn[i];
            char what[80];
            snprintf(what, sizeof what, "gdn_core %s n=%d (Hk16 Hv48 128/128)", r ? "serial" : "chunked", c.n);
            // bytes: read qkv + write o + read/write state. FLOP (chunked form, per 64-token chunk and value head,
            // MACs): K K^T, Q K^T 2*64*64*dk; T V, T K 64*64*(dv+dk); W S, K^T Vnew, Q S 3*64*dk*dv; P Vnew
            // 64*64*dv (the 3xTF32 tensor-core work is 3x this; docs/perf-notes.md)
            double mac = 64.0 * 64 * (3 * 128 + 2 * 128) + 3.0 * 64 * 128 * 128;
            double flop = r ? 0 : 2.0 * mac * 48 * ((c.n + 63) / 64);
            row(what, time_ms(f_gdn, &c), flop, (double)c.n * (cq + 48 * 128) * 4 + 2.0 * 48 * 128 * 128 * 4);
        }
    B()->free(B(), c.x), B()->free(B(), c.a), B()->free(B(), c.b), B()->free(B(), c.out), B()->free(B(), c.st);
    // ---- attention: prefill over its own 4096 tokens, decode at 32K context ----
    c.H = 24, c.Hkv = 4, c.hd = 256;
    c.cap = 32768 + 16;
    size_t kvb = B()->kv_bytes_per_token(B(), 4, 256);
    c.st = B()->alloc(B(), kvb * (size_t)c.cap);
    {
        void *k = dev_rand((size_t)4096 * 4 * 256, -1, 1), *v = dev_rand((size_t)4096 * 4 * 256, -1, 1);
        for (int64_t p = 0; p < 32768; p += 4096)
            B()->kv_store(B(), FD_KV_FLAT(c.st, c.cap), k, v, p, NULL, 4096, 4, 256);
        B()->free(B(), k), B()->free(B(), v);
    }
    c.x = dev_rand((size_t)N * 24 * 256, -1, 1);
    c.out = B()->alloc(B(), (size_t)N * 24 * 256 * 4);
    c.pos0 = 0, c.n = N;
    fd_cuda_set_route(B(), "attn_kernel", "simt");
    double ms = time_ms(f_attn, &c);
    row("attention prefill n=4096 (24q/4kv x 256) simt", ms, 4.0 * 24 * 256 * ((double)N * N / 2), 0);
    fd_cuda_set_route(B(), "attn_kernel", "mma");
    ms = time_ms(f_attn, &c);
    row("attention prefill n=4096 (24q/4kv x 256) mma", ms, 4.0 * 24 * 256 * ((double)N * N / 2), 0);
    c.pos0 = 32768 - 4096;
    ms = time_ms(f_attn, &c);
    row("attention prefill n=4096 at 28K..32K mma", ms, 4.0 * 24 * 256 * ((double)N * (32768 - 2048)), 0);
    B()->free(B(), c.x), B()->free(B(), c.out), B()->free(B(), c.st);
}

// ---- decode / verify attention (<= 16 tokens: the split-K kernel of attention_decode.cu) ----
typedef struct {
    fd_backend *be;
    void *out, *q, *cache;
    const int64_t *pos_dev;
    int64_t pos0, cap;
    int n;
    const fd_kv_view *paged; // not NULL: read the cache through this page table instead
} dattn_t;
static void f_dattn(void *p) {
    dattn_t *d = p;
    const fd_kv_view *kv = d->paged ? d->paged : FD_KV_FLAT(d->cache, d->cap);
    d->be->attention(d->be, d->out, d->q, kv, d->pos0, d->pos_dev, d->n, 24, 4, 256, 0.0625f, 1);
}

// A paged view of a contiguous cache buffer of `slots` token slots: FD_KV_PAGE_TOKENS-token pages in a seeded
// random order (the lookups and the scattered reads a long-running server's pool gives), over `cap` positions.
static fd_kv_view shuffled_view(fd_backend *be, void *cache, int64_t slots, int64_t cap, void **table_dev) {
    const int P = FD_KV_PAGE_TOKENS, n = (int)(cap / P);
    int32_t *t = fd_malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) t[i] = i;
    uint64_t st = 12345;
    for (int i = n - 1; i > 0; i--) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        const int j = (int)((st >> 33) % (uint64_t)(i + 1)), x = t[i];
        t[i] = t[j], t[j] = x;
    }
    *table_dev = be->alloc(be, sizeof(int32_t) * (size_t)n);
    be->to_device(be, *table_dev, t, sizeof(int32_t) * (size_t)n);
    free(t);
    fd_kv_view v = {cache, (const int32_t *)*table_dev, P, slots, (int64_t)n * P};
    return v;
}

// 24q/4kv x 256 at contexts 32K and 128K, n = 1 (decode), 8 and 16 (verify), each under both decode kernels
// (route attn_decode = blocked | warp); GB/s counts the K/V bytes of the live context (scales included for e4m3),
// the floor every such kernel has to read.
static void bench_dattn(const char *kv) {
    fd_backend *be = cuda_rig_new_gpu();
    const char *spec = kv;
    FD_CHECK(!strcmp(kv, "kv=bf16") || routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
    g_timed = be;
    const int64_t cap = 131072 + 16, chunk = 4096;
    const size_t kvb = be->kv_bytes_per_token(be, 4, 256);
    dattn_t d = {be, NULL, NULL, be->alloc(be, kvb * (size_t)cap), NULL, 0, cap, 1, NULL};
    float *h = fd_malloc((size_t)chunk * 4 * 256 * 4);
    test_fill_uniform(h, (size_t)chunk * 4 * 256, -1, 1, &g_seed);
    void *k = be->alloc(be, (size_t)chunk * 4 * 256 * 4);
    be->to_device(be, k, h, (size_t)chunk * 4 * 256 * 4);
    for (int64_t p = 0; p < cap - 16; p += chunk)
        be->kv_store(be, FD_KV_FLAT(d.cache, cap), k, k, p, NULL, (int)chunk, 4, 256);
    test_fill_uniform(h, (size_t)16 * 24 * 256, -1, 1, &g_seed);
    d.q = be->alloc(be, (size_t)16 * 24 * 256 * 4);
    be->to_device(be, d.q, h, (size_t)16 * 24 * 256 * 4);
    d.out = be->alloc(be, (size_t)16 * 24 * 256 * 4);
    const int64_t ctxs[] = {32768, 131072};
    const int ns[] = {1, 8, 16};
    void *table = NULL;
    const fd_kv_view paged = shuffled_view(be, d.cache, cap, cap / FD_KV_PAGE_TOKENS * FD_KV_PAGE_TOKENS, &table);
    const char *decoders[] = {"blocked", "warp"}; // route attn_decode: each shape timed under both, side by side
    for (int pg = 0; pg < 2; pg++)                // contiguous, then through a shuffled page table (the engine's pool)
        for (int ci = 0; ci < 2; ci++)
            for (int ni = 0; ni < 3; ni++)
                for (int dk = 0; dk < 2; dk++) {
                    FD_CHECK(fd_cuda_set_route(be, "attn_decode", decoders[dk]) == 0, "%s", fd_error_msg());
                    d.n = ns[ni], d.pos0 = ctxs[ci] - d.n, d.paged = pg ? &paged : NULL;
                    char what[96];
                    snprintf(what, sizeof what, "attention %s n=%d at ctx %lldK (%s%s) %s",
                             d.n == 1 ? "decode" : "verify", d.n, (long long)(ctxs[ci] / 1024), kv + 3,
                             pg ? ", paged" : "", decoders[dk]);
                    row(what, time_ms(f_dattn, &d), 0, (double)ctxs[ci] * kvb);
                }
    FD_CHECK(fd_cuda_set_route(be, "attn_decode", "warp") == 0, "%s", fd_error_msg());
    d.paged = NULL;
    // a graph-style call: position in device memory, grid sized from the 128K capacity, 32K live
    int64_t pos = 32768 - 1;
    void *pd = be->alloc(be, sizeof pos);
    be->to_device(be, pd, &pos, sizeof pos);
    d.n = 1, d.pos0 = 0, d.pos_dev = (const int64_t *)pd;
    char what[80];
    snprintf(what, sizeof what, "attention n=1 32K, pos_dev, cap 128K (%s)", kv + 3);
    row(what, time_ms(f_dattn, &d), 0, (double)32768 * kvb);
    d.paged = &paged;
    snprintf(what, sizeof what, "attention n=1 32K, pos_dev, cap 128K (%s, paged)", kv + 3);
    row(what, time_ms(f_dattn, &d), 0, (double)32768 * kvb);
    g_timed = NULL;
    free(h);
    be->free(be, table), be->free(be, pd), be->free(be, k), be->free(be, d.q), be->free(be, d.out),
        be->free(be, d.cache);
    be->destroy(be);
}

TEST(bench_cuda_decode_attn) {
    if (cuda_rig_bench_skipped()) return;
    bench_dattn("kv=bf16");
    bench_dattn("kv=e4m3");
}

// ---- tensor-core attention prefill (route attn_kernel=mma, and =wgmma beside it on the bf16 cache) at the 27B
// geometry: a 4096-query chunk of a long prompt against everything cached so far (24q/4kv x 256, causal), bf16 and
// e4m3 caches, both kernels on each. FLOPs counted as
// 4 * rows * visible keys * hd with rows = (token, q head) pairs; the ceiling is cuDNN's 621 TFLOP/s (DESIGN.md §8).
// Timed with the decode bench's f_dattn (pos_dev NULL: the chunk starts at pos0).
TEST(bench_cuda_attn_prefill) {
    if (cuda_rig_bench_skipped()) return;
    const int N = 4096, H = 24, Hkv = 4, hd = 256;
    const int64_t cap = 65536;
    for (int e4 = 0; e4 < 2; e4++) {
        fd_backend *be = cuda_rig_new_gpu();
        const char *spec = e4 ? "kv=e4m3" : "kv=bf16";
        ASSERT(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
        dattn_t a = {.be = be, .n = N, .cap = cap}; // pos_dev NULL: the position is pos0
        a.cache = be->alloc(be, be->kv_bytes_per_token(be, Hkv, hd) * (size_t)cap);
        size_t kvn = (size_t)N * Hkv * hd, qn = (size_t)N * H * hd;
        float *h = fd_malloc(qn * 4);
        void *k = be->alloc(be, kvn * 4), *v = be->alloc(be, kvn * 4);
        for (int64_t p = 0; p < cap; p += N) { // fresh random K/V per 4096-token chunk
            test_fill_uniform(h, kvn, -2, 2, &g_seed);
            be->to_device(be, k, h, kvn * 4);
            test_fill_uniform(h, kvn, -1, 1, &g_seed);
            be->to_device(be, v, h, kvn * 4);
            be->kv_store(be, FD_KV_FLAT(a.cache, cap), k, v, p, NULL, N, Hkv, hd);
        }
        test_fill_uniform(h, qn, -1, 1, &g_seed);
        a.q = be->alloc(be, qn * 4);
        be->to_device(be, a.q, h, qn * 4);
        a.out = be->alloc(be, qn * 4);
        const int64_t ctxs[] = {4096, 32768, 65536};
        void *table = NULL;
        const fd_kv_view paged = shuffled_view(be, a.cache, cap, cap, &table);
        const char *kernels[] = {"mma", "wgmma"};
        for (int ki = 0; ki < 2; ki++) {
            ASSERT(fd_cuda_set_route(be, "attn_kernel", kernels[ki]) == 0, "%s", fd_error_msg());
            const int64_t ran0 = cuda_rig_route_value_calls(be, "attn_kernel", kernels[ki]);
            for (int pg = 0; pg < 2; pg++) // contiguous, then through a shuffled page table
                for (int i = 0; i < 3; i++) {
                    a.pos0 = ctxs[i] - N, a.paged = pg ? &paged : NULL;
                    double ms = time_be_ms(be, f_dattn, &a);
                    double visible = (double)N * a.pos0 + (double)N * (N + 1) / 2; // keys summed over the queries
                    double tf = 4.0 * H * visible * hd / ms / 1e9;
                    char what[96];
                    snprintf(what, sizeof what, "attn prefill %s %s%s 4096 q at %lldK..%lldK", kernels[ki],
                             e4 ? "e4m3" : "bf16", pg ? " paged" : "", (long long)(a.pos0 / 1024),
                             (long long)(ctxs[i] / 1024));
                    printf("BENCH | %-46s | %9.3f ms | %7.1f TFLOP/s (%4.1f%% of 621)\n", what, ms, tf,
                           100.0 * tf / 621.0);
                }
            EXPECT(cuda_rig_route_value_calls(be, "attn_kernel", kernels[ki]) > ran0, "attn_kernel=%s never ran",
                   kernels[ki]);
        }
        free(h);
        be->free(be, table);
        be->free(be, k), be->free(be, v), be->free(be, a.q), be->free(be, a.out), be->free(be, a.cache);
        be->destroy(be);
    }
}

// ---- DFlash2 drafter ops at a 27B-class drafter geometry (d 5120, 32q/8kv x 128, conv group 16, K 2, block 8,
// sliding window 2048) ----
typedef struct {
    void *out, *x, *q, *cache;
    float *dyn;
    fd_weight *base;
    int n, window;
    int64_t pos0, cap;
} d2_ctx;

static void f_dyn_conv(void *p) {
    d2_ctx *c = p;
    B()->dyn_conv(B(), c->out, c->x, c->dyn, 2 * 2 * 320, c->base, 0, c->n, 5120, 16, 2);
}
static void f_window(void *p) {
    d2_ctx *c = p;
    if (c->window)
        B()->attention_window(B(), c->out, c->q, FD_KV_FLAT(c->cache, c->cap), c->pos0, c->n, 32, 8, 128, 0.088f,
                              c->window);
    else // the same block without a window: every key of the context
        B()->attention(B(), c->out, c->q, FD_KV_FLAT(c->cache, c->cap), c->pos0, NULL, c->n, 32, 8, 128, 0.088f, 0);
}

TEST(bench_cuda_dflash2_ops) {
    if (cuda_rig_bench_skipped()) return;
    const int d = 5120, n = 8, G = d / 16;
    d2_ctx c;
    memset(&c, 0, sizeof c);
    fd_weight base = wrand(2, 2 * d, -0.5f, 0.5f);
    c.base = &base, c.n = n;
    c.x = dev_rand((size_t)n * d, -1, 1);
    c.dyn = dev_rand((size_t)n * 2 * 2 * G, -1, 1);
    c.out = B()->alloc(B(), (size_t)n * d * 4);
    // bytes: x read once per tap (2 rows), dyn taps, base taps, out written
    row("dflash2 dyn_conv n=8 d=5120 group=16 K=2", time_ms(f_dyn_conv, &c), 0,
        (double)n * d * 4 * 3 + (double)n * 2 * G * 4 + 2.0 * d * 2);
    B()->free(B(), c.x), B()->free(B(), c.dyn), B()->free(B(), c.out), B()->free(B(), base.dev);
    const int64_t ctx = 32768;
    c.cap = ctx + 16;
    const size_t kvb = B()->kv_bytes_per_token(B(), 8, 128);
    c.cache = B()->alloc(B(), kvb * (size_t)c.cap);
    {
        void *k = dev_rand((size_t)4096 * 8 * 128, -1, 1), *v = dev_rand((size_t)4096 * 8 * 128, -1, 1);
        for (int64_t p = 0; p < ctx; p += 4096)
            B()->kv_store(B(), FD_KV_FLAT(c.cache, c.cap), k, v, p, NULL, 4096, 8, 128);
        B()->free(B(), k), B()->free(B(), v);
    }
    c.q = dev_rand((size_t)n * 32 * 128, -1, 1);
    c.out = B()->alloc(B(), (size_t)n * 32 * 128 * 4);
    c.pos0 = ctx - n;
    c.window = 2048;
    // bytes: the K and V rows of the window (2048 + n keys), read once per kv head
    row("dflash2 attention_window n=8 at ctx 32K, window 2048", time_ms(f_window, &c), 0, (double)(2048 + n) * kvb);
    c.window = 0;
    row("dflash2 same block, full non-causal attention at ctx 32K", time_ms(f_window, &c), 0, (double)ctx * kvb);
    B()->free(B(), c.q), B()->free(B(), c.out), B()->free(B(), c.cache);
}
