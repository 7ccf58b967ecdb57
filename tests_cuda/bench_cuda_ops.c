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
#include "cuda/cuda.h"
#include "engine/kv_pool.h"
#include "engine/routes.h"

static fd_backend *B(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cuda_create(0);
    return be;
}

static uint64_t g_seed = 12345;

static void *dev_rand(size_t n, float lo, float hi) {
    float *h = fd_malloc(n * 4);
    test_fill_uniform(h, n, lo, hi, &g_seed);
    void *d = B()->alloc(B(), n * 4);
    B()->to_device(B(), d, h, n * 4);
    free(h);
    return d;
}

static fd_weight wrand(int64_t rows, int64_t cols, float lo, float hi) {
    size_t n = (size_t)(rows * cols);
    float *f = fd_malloc(n * 4);
    test_fill_uniform(f, n, lo, hi, &g_seed);
    uint16_t *b = fd_malloc(n * 2);
    for (size_t i = 0; i < n; i++) b[i] = fd_f32_to_bf16(f[i]);
    free(f);
    fd_weight w = {.name = "bench", .dtype = cols == 1 ? FD_F32 : FD_BF16, .rows = rows, .cols = cols, .data = b};
    if (cols == 1) { // vectors are published fp32 here
        float *v = fd_malloc(n * 4);
        for (size_t i = 0; i < n; i++) v[i] = fd_bf16_to_f32(b[i]);
        free(b);
        w.data = v;
    }
    B()->upload_weight(B(), &w);
    free((void *)w.data);
    w.data = NULL;
    return w;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef void (*bench_fn)(void *ctx);
static fd_backend *g_timed; // the backend time_ms synchronises (NULL: B())
static double time_ms(bench_fn fn, void *ctx) {
    fd_backend *be = g_timed ? g_timed : B();
    double t[5];
    fn(ctx);
    be->sync(be);
    for (int r = 0; r < 5; r++) {
        double t0 = fd_time_s();
        fn(ctx);
        be->sync(be);
        t[r] = (fd_time_s() - t0) * 1e3;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    return t[2];
}

static void row(const char *what, double ms, double flop, double bytes) {
    printf("BENCH | %-44s | %9.3f ms |", what, ms);
    if (flop > 0) printf(" %7.1f TFLOP/s (%4.1f%% of 709)", flop / ms / 1e9, 100.0 * flop / ms / 1e9 / 709.0);
    if (bytes > 0) printf(" %7.0f GB/s (%4.1f%% of 4250)", bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / 4250.0);
    printf("\n");
}

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
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
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

// ---- the fused decoder-layer ops vs the op sequences they replace (norm_rope.cu), 27B shapes ----
// One timed call runs the op `reps` times back to back (stream launches, not a graph), so at n = 1 the per-call
// time is mostly launch gap + ramp + tail: what fusing saves. GB/s counts the fused op's bytes for both rows
// (the useful traffic), so the two rows of a pair compare directly.
typedef struct {
    void *x, *y, *h, *qg, *q, *g, *k;
    fd_weight *w, *qn, *kn;
    int n, reps, fused;
} fuse_t;

static void f_add_norm(void *p) {
    fuse_t *c = p;
    for (int r = 0; r < c->reps; r++) {
        if (c->fused) {
            B()->add_rmsnorm(B(), c->h, c->x, c->y, c->w, c->n, 5120, 1e-6f, 1);
        } else {
            B()->add(B(), c->x, c->y, (int64_t)c->n * 5120);
            B()->rmsnorm(B(), c->h, c->x, c->w, c->n, 5120, 1e-6f, 1);
        }
    }
}
static void f_qk_prep(void *p) {
    fuse_t *c = p;
    const int H = 24, Hkv = 4, hd = 256, rot = 64;
    for (int r = 0; r < c->reps; r++) {
        if (c->fused) {
            B()->qk_norm_rope(B(), c->q, c->g, c->k, c->qg, c->qn, c->kn, c->n, H, Hkv, hd, rot, 1e7f, 1e-6f, 1000,
                              NULL);
        } else {
            B()->split_q_gate(B(), c->q, c->g, c->qg, c->n, H, hd);
            B()->rmsnorm(B(), c->q, c->q, c->qn, (int64_t)c->n * H, hd, 1e-6f, 1);
            B()->rmsnorm(B(), c->k, c->k, c->kn, (int64_t)c->n * Hkv, hd, 1e-6f, 1);
            B()->rope(B(), c->q, c->n, H, hd, rot, 1e7f, 1000, NULL);
            B()->rope(B(), c->k, c->n, Hkv, hd, rot, 1e7f, 1000, NULL);
        }
    }
}

TEST(bench_cuda_fused_norms) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    const int d = 5120, N = 4096, H = 24, Hkv = 4, hd = 256;
    fd_weight w = wrand(d, 1, -0.2f, 0.2f), qn = wrand(hd, 1, -0.2f, 0.2f), kn = wrand(hd, 1, -0.2f, 0.2f);
    fuse_t c = {.w = &w, .qn = &qn, .kn = &kn};
    c.x = dev_rand((size_t)N * d, -1, 1), c.y = dev_rand((size_t)N * d, -1e-3f, 1e-3f);
    c.h = B()->alloc(B(), (size_t)N * d * 4);
    c.qg = dev_rand((size_t)N * H * 2 * hd, -1, 1), c.k = dev_rand((size_t)N * Hkv * hd, -1, 1);
    c.q = B()->alloc(B(), (size_t)N * H * hd * 4), c.g = B()->alloc(B(), (size_t)N * H * hd * 4);
    const int ns[] = {1, 16, N};
    for (int i = 0; i < 3; i++) {
        c.n = ns[i], c.reps = c.n == N ? 10 : 200;
        const double an_bytes = 4.0 * c.n * d * 4, qk_bytes = (4.0 * H + 2.0 * Hkv) * c.n * hd * 4;
        for (c.fused = 0; c.fused < 2; c.fused++) {
            char what[80];
            snprintf(what, sizeof what, "%s n=%d d=%d", c.fused ? "add_rmsnorm (1 launch)" : "add + rmsnorm (2)", c.n,
                     d);
            row(what, time_ms(f_add_norm, &c) / c.reps, 0, an_bytes);
        }
        for (c.fused = 0; c.fused < 2; c.fused++) {
            char what[80];
            snprintf(what, sizeof what, "%s n=%d", c.fused ? "qk_norm_rope (1 launch)" : "split+2 norms+2 ropes (5)",
                     c.n);
            row(what, time_ms(f_qk_prep, &c) / c.reps, 0, qk_bytes);
        }
    }
    void *bufs[] = {c.x, c.y, c.h, c.qg, c.k, c.q, c.g, w.dev, qn.dev, kn.dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) B()->free(B(), bufs[i]);
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

// 24q/4kv x 256 at contexts 32K and 128K, n = 1 (decode), 8 and 16 (verify); GB/s counts the K/V bytes of the
// live context (scales included for e4m3), the floor every such kernel has to read.
static void bench_dattn(const char *kv) {
    fd_backend *be = fd_backend_cuda_create(0);
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
    for (int pg = 0; pg < 2; pg++) // contiguous, then through a shuffled page table (the engine's paged pool)
        for (int ci = 0; ci < 2; ci++)
            for (int ni = 0; ni < 3; ni++) {
                d.n = ns[ni], d.pos0 = ctxs[ci] - d.n, d.paged = pg ? &paged : NULL;
                char what[80];
                snprintf(what, sizeof what, "attention %s n=%d at ctx %lldK (%s%s)", d.n == 1 ? "decode" : "verify",
                         d.n, (long long)(ctxs[ci] / 1024), kv + 3, pg ? ", paged" : "");
                row(what, time_ms(f_dattn, &d), 0, (double)ctxs[ci] * kvb);
            }
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
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    bench_dattn("kv=bf16");
    bench_dattn("kv=e4m3");
}

// ---- tensor-core attention prefill (route attn_kernel=mma) at the 27B geometry: a 4096-query chunk of a long
// prompt against everything cached so far (24q/4kv x 256, causal), bf16 and e4m3 caches. FLOPs counted as
// 4 * rows * visible keys * hd with rows = (token, q head) pairs; the ceiling is cuDNN's 621 TFLOP/s (DESIGN.md §8).
typedef struct {
    fd_backend *be;
    void *out, *q, *cache;
    int64_t pos0, cap;
    int n;
    const fd_kv_view *paged; // not NULL: read the cache through this page table instead
} attn_ctx;

static void f_attn_prefill(void *p) {
    attn_ctx *a = p;
    const fd_kv_view *kv = a->paged ? a->paged : FD_KV_FLAT(a->cache, a->cap);
    a->be->attention(a->be, a->out, a->q, kv, a->pos0, NULL, a->n, 24, 4, 256, 0.0625f, 1);
}

static double time_be_ms(fd_backend *be, bench_fn fn, void *ctx) {
    double t[5];
    fn(ctx);
    be->sync(be);
    for (int r = 0; r < 5; r++) {
        double t0 = fd_time_s();
        fn(ctx);
        be->sync(be);
        t[r] = (fd_time_s() - t0) * 1e3;
    }
    qsort(t, 5, sizeof t[0], cmp_d);
    return t[2];
}

TEST(bench_cuda_attn_prefill) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    const int N = 4096, H = 24, Hkv = 4, hd = 256;
    const int64_t cap = 65536;
    for (int e4 = 0; e4 < 2; e4++) {
        fd_backend *be = fd_backend_cuda_create(0);
        const char *spec = e4 ? "kv=e4m3" : "kv=bf16";
        ASSERT(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
        ASSERT(fd_cuda_set_route(be, "attn_kernel", "mma") == 0, "%s", fd_error_msg());
        attn_ctx a = {.be = be, .n = N, .cap = cap};
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
        for (int pg = 0; pg < 2; pg++) // contiguous, then through a shuffled page table
            for (int i = 0; i < 3; i++) {
                a.pos0 = ctxs[i] - N, a.paged = pg ? &paged : NULL;
                double ms = time_be_ms(be, f_attn_prefill, &a);
                double visible = (double)N * a.pos0 + (double)N * (N + 1) / 2; // keys summed over the query tokens
                double tf = 4.0 * H * visible * hd / ms / 1e9;
                char what[96];
                snprintf(what, sizeof what, "attn prefill mma %s%s 4096 q at %lldK..%lldK", e4 ? "e4m3" : "bf16",
                         pg ? " paged" : "", (long long)(a.pos0 / 1024), (long long)(ctxs[i] / 1024));
                printf("BENCH | %-44s | %9.3f ms | %7.1f TFLOP/s (%4.1f%% of 621)\n", what, ms, tf, 100.0 * tf / 621.0);
            }
        free(h);
        be->free(be, table);
        be->free(be, k), be->free(be, v), be->free(be, a.q), be->free(be, a.out), be->free(be, a.cache);
        be->destroy(be);
    }
}

// ---- small-n GEMM (route gemm_small): every bf16 GEMM shape of a 27B decode step at n = 1, 8, 16 ----
// Each timing cycles through enough copies of the weight (>= 384 MB together) that no call finds its weights in
// the 50 MB L2, and runs back-to-back calls between two syncs (a decode step issues them that way), so launch
// gaps count: the small shapes (k/v 1024 x 5120 = 10 MB, b/a 48 x 5120) are launch-bound by design.
typedef struct {
    fd_weight *Ws;
    int copies, reps, n;
    void *x, *out;
} gemv_ctx;

static void f_gemv(void *p) {
    gemv_ctx *c = p;
    for (int r = 0; r < c->reps; r++) B()->matmul(B(), c->out, c->x, &c->Ws[r % c->copies], c->n, 0);
}

TEST(bench_cuda_gemv) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
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
    gemv_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    c.out = B()->alloc(B(), (size_t)16 * 248320 * 4);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int m = shapes[s].m, k = shapes[s].k;
        const size_t wbytes = (size_t)m * k * 2;
        int copies = (int)(((size_t)384 << 20) / wbytes) + 1;
        if (wbytes > ((size_t)384 << 20)) copies = 1;
        const size_t pool_bytes = wbytes * (size_t)copies;
        char *pool = B()->alloc(B(), pool_bytes);
        for (size_t off = 0; off < pool_bytes; off += seed_elems * 2) {
            size_t len = pool_bytes - off < seed_elems * 2 ? pool_bytes - off : seed_elems * 2;
            B()->copy(B(), pool + off, seed.dev, len);
        }
        c.Ws = fd_calloc((size_t)copies, sizeof(fd_weight));
        for (int i = 0; i < copies; i++) {
            fd_weight *w = &c.Ws[i];
            w->name = shapes[s].what, w->dtype = FD_BF16, w->rows = m, w->cols = k;
            w->dev = pool + (size_t)i * wbytes; // wbytes is a multiple of 16 (k % 8 == 0)
            w->dev_dtype = FD_BF16;
        }
        c.copies = copies;
        for (int in = 0; in < 3; in++)
            for (int r = 0; r < 2; r++) {
                fd_cuda_set_route(B(), "gemm_small", routes[r]);
                c.n = ns[in];
                const double bytes = (double)wbytes + (double)c.n * k * 4 + (double)c.n * m * 4;
                c.reps = (int)(2e9 / bytes);
                c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
                double ms = time_ms(f_gemv, &c) / c.reps;
                char what[96];
                snprintf(what, sizeof what, "%-6s n=%-2d %6d x %-5d (%s)", routes[r], c.n, m, k, shapes[s].what);
                row(what, ms, 0, bytes);
                per_token_ms[in][r] += ms * shapes[s].per_token;
            }
        free(c.Ws);
        B()->free(B(), pool);
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
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
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
    row("dflash2 attention_window n=8 at ctx 32K, window 2048", time_ms(f_window, &c), 0,
        (double)(2048 + n) * kvb);
    c.window = 0;
    row("dflash2 same block, full non-causal attention at ctx 32K", time_ms(f_window, &c), 0, (double)ctx * kvb);
    B()->free(B(), c.q), B()->free(B(), c.out), B()->free(B(), c.cache);
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

TEST(bench_cuda_gemv_fused) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    // One Qwen3.5-27B token: 48 GDN layers, 16 attention layers, 64 dense FFNs, the LM head.
    static const struct {
        int count, k, per_token, m[4];
        const char *what;
    } groups[] = {{4, 5120, 48, {10240, 6144, 48, 48}, "GDN qkv|z|b|a"},
                  {3, 5120, 16, {12288, 1024, 1024}, "attn q|k|v"},
                  {2, 5120, 64, {17408, 17408}, "FFN gate|up"},
                  {1, 6144, 64, {5120}, "GDN out, attn o"},
                  {1, 17408, 64, {5120}, "FFN down"},
                  {1, 5120, 1, {248320}, "lm_head"}};
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
    for (const char *p = getenv("FD_BENCH_GEMV_BPS"); p && *p && n_bps < 16;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (v >= 1 && v <= 64) bps_list[n_bps++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    if (!n_bps) bps_list[n_bps++] = bps_default;
    for (int bi = 0; bi < n_bps; bi++) {
        fd_cuda_set_gemv_blocks_per_sm(B(), bps_list[bi]);
        double step_ms[3][3] = {{0}}; // [n][mode]
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
            const int count = groups[g].count, k = groups[g].k;
            size_t gbytes = 0, wbytes[4];
            for (int i = 0; i < count; i++)
                wbytes[i] = (size_t)groups[g].m[i] * k * 2, gbytes += (wbytes[i] + 255) / 256 * 256;
            int copies = gbytes > ((size_t)384 << 20) ? 1 : (int)(((size_t)384 << 20) / gbytes) + 1;
            const size_t pool_bytes = gbytes * (size_t)copies;
            char *pool = B()->alloc(B(), pool_bytes);
            for (size_t off = 0; off < pool_bytes; off += seed_elems * 2) {
                size_t len = pool_bytes - off < seed_elems * 2 ? pool_bytes - off : seed_elems * 2;
                B()->copy(B(), pool + off, seed.dev, len);
            }
            c.Ws = fd_calloc((size_t)copies * count, sizeof(fd_weight));
            size_t off = 0;
            for (int cp = 0; cp < copies; cp++)
                for (int i = 0; i < count; i++) {
                    fd_weight *w = &c.Ws[cp * count + i];
                    w->name = groups[g].what, w->dtype = FD_BF16, w->rows = groups[g].m[i], w->cols = k;
                    w->dev = pool + off, w->dev_dtype = FD_BF16;
                    off += (wbytes[i] + 255) / 256 * 256;
                }
            for (int i = 0; i < count; i++) c.outs[i] = B()->alloc(B(), (size_t)16 * groups[g].m[i] * 4);
            c.copies = copies, c.count = count;
            for (int in = 0; in < 3; in++)
                for (int md = 0; md < 3; md++) {
                    fd_cuda_set_route(B(), "gemm_small", md == 2 ? "cublas" : "gemv");
                    c.fused = md == 0, c.n = ns[in];
                    const double bytes = (double)gbytes + (double)c.n * k * 4;
                    c.reps = (int)(2e9 / bytes);
                    c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
                    double ms = time_ms(f_gfuse, &c) / c.reps;
                    char what[96];
                    snprintf(what, sizeof what, "%-8s n=%-2d %s (%.0f MB)", modes[md], c.n, groups[g].what,
                             gbytes / 1e6);
                    row(what, ms, 0, bytes);
                    step_ms[in][md] += ms * groups[g].per_token;
                }
            for (int i = 0; i < count; i++) B()->free(B(), c.outs[i]);
            free(c.Ws);
            B()->free(B(), pool);
        }
        double wsum = 0;
        for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++)
            for (int i = 0; i < groups[g].count; i++)
                wsum += (double)groups[g].m[i] * groups[g].k * 2 * groups[g].per_token;
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

// ---- GDN recurrence for decode and verify (serial route, 27B layer: Hk 16, Hv 48, dk dv 128) ----
// GPU time per call from CUDA events on the backend's stream: a 512 MB memset first keeps the GPU busy while the
// host queues the start event and `calls` back-to-back calls (then the host's launch cost is hidden, as in a graph
// replay or a deep queue); median of 11 such samples after 3 warm-up calls. The calls rotate through REC_STATES
// state buffers (100 MB, one per layer as in a decode step), so every call reads its state from DRAM, not L2.
// Both serial kernels (v2 = k_gdn_rec, the default; v1 = k_gdn_serial, FD_CUDA_GDN_SERIAL=v1), n = 1 (decode),
// 8 and 16 (verify; with per-token state slots as DFlash writes them, and without), 4096 (serial prefill).
// GB/s: state read + written, q/k/v rows read, outputs and slots written, over 4250 (copy bandwidth). Also
// conv1d_silu at the same layer (C 10240, K 4).
int fd_cuda_set_gdn_serial_kernel(int version);         // src/cuda/gdn.cu
void fd_cuda_record_event(fd_backend *be, void *event); // src/cuda/gdn.cu

#define REC_STATES 32

typedef struct {
    fd_weight *A_log, *dt_bias, *conv_w;
    void *qkv, *b, *a, *o, *slots, *conv_state, *conv_slots, *spacer;
    float *states[REC_STATES];
    int n, calls, with_slots, next_state;
} rec_ctx;

static void f_rec(void *p) {
    rec_ctx *c = p;
    float *state = c->states[c->next_state];
    c->next_state = (c->next_state + 1) % REC_STATES;
    B()->gdn_core(B(), FD_GDN_SERIAL, c->o, c->qkv, c->b, c->a, c->A_log, c->dt_bias, state, c->n, 16, 48, 128, 128,
                  c->with_slots ? c->slots : NULL);
}
static void f_conv_rec(void *p) {
    rec_ctx *c = p;
    B()->conv1d_silu(B(), c->o, c->qkv, c->conv_w, c->conv_state, c->n, 10240, 4, c->with_slots ? c->conv_slots : NULL);
}

static double event_us(bench_fn fn, rec_ctx *c) {
    cudaEvent_t e0, e1;
    ASSERT(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess, "cudaEventCreate");
    for (int w = 0; w < 3; w++) fn(c);
    B()->sync(B());
    double t[11];
    for (int r = 0; r < 11; r++) {
        B()->zero(B(), c->spacer, (size_t)512 << 20);
        fd_cuda_record_event(B(), e0);
        for (int k = 0; k < c->calls; k++) fn(c);
        fd_cuda_record_event(B(), e1);
        ASSERT(cudaEventSynchronize(e1) == cudaSuccess, "cudaEventSynchronize");
        float ms = 0;
        ASSERT(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess, "cudaEventElapsedTime");
        t[r] = 1e3 * ms / c->calls;
    }
    qsort(t, 11, sizeof t[0], cmp_d);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return t[5];
}

static void row_us(const char *what, double us, double bytes) {
    printf("BENCH | %-44s | %9.2f us | %7.0f GB/s (%4.1f%% of 4250)\n", what, us, bytes / us / 1e3,
           100.0 * bytes / us / 1e3 / 4250.0);
}

TEST(bench_cuda_gdn_serial) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    const int Hk = 16, Hv = 48, dk = 128, dv = 128, cq = 2 * Hk * dk + Hv * dv, N = 4096;
    const double state_bytes = (double)Hv * dk * dv * 4;
    fd_weight Al = wrand(Hv, 1, -1, 1.5f), dtb = wrand(Hv, 1, -1, 1), cw = wrand(cq, 4, -0.5f, 0.5f);
    rec_ctx c;
    memset(&c, 0, sizeof c);
    c.A_log = &Al, c.dt_bias = &dtb, c.conv_w = &cw;
    c.qkv = dev_rand((size_t)N * cq, -1, 1);
    c.b = dev_rand((size_t)N * Hv, -3, 3);
    c.a = dev_rand((size_t)N * Hv, -3, 3);
    c.o = B()->alloc(B(), (size_t)N * cq * 4); // also the conv output
    for (int i = 0; i < REC_STATES; i++) c.states[i] = dev_rand((size_t)Hv * dk * dv, -0.1f, 0.1f);
    c.slots = B()->alloc(B(), (size_t)16 * Hv * dk * dv * 4);
    c.conv_state = dev_rand((size_t)cq * 3, -1, 1);
    c.conv_slots = B()->alloc(B(), (size_t)16 * cq * 3 * 4);
    c.spacer = B()->alloc(B(), (size_t)512 << 20);
    const int prev = fd_cuda_set_gdn_serial_kernel(0);
    static const int cases[][2] = {{1, 0}, {8, 0}, {8, 1}, {16, 0}, {16, 1}, {4096, 0}}; // n, slots
    for (int kernel = 2; kernel >= 1; kernel--) {
        fd_cuda_set_gdn_serial_kernel(kernel);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            c.n = cases[i][0], c.with_slots = cases[i][1], c.calls = c.n > 16 ? 2 : 20;
            const double bytes =
                2 * state_bytes + (double)c.n * (cq + Hv * dv) * 4 + (c.with_slots ? (double)c.n * state_bytes : 0);
            char what[96];
            snprintf(what, sizeof what, "gdn serial v%d n=%d%s (Hk16 Hv48 128/128)", kernel, c.n,
                     c.with_slots ? " slots" : "");
            row_us(what, event_us(f_rec, &c), bytes);
        }
    }
    fd_cuda_set_gdn_serial_kernel(prev);
    for (int i = 0; i < 3; i++) {
        c.n = i == 0 ? 1 : 16, c.with_slots = i == 2, c.calls = 20;
        // x read, out written, state read + written, slots written
        const double bytes = (double)c.n * cq * 8 + 2.0 * cq * 3 * 4 + (c.with_slots ? (double)c.n * cq * 12 : 0);
        char what[96];
        snprintf(what, sizeof what, "conv1d_silu n=%d%s C=10240 K=4", c.n, c.with_slots ? " slots" : "");
        row_us(what, event_us(f_conv_rec, &c), bytes);
    }
    for (int i = 0; i < REC_STATES; i++) B()->free(B(), c.states[i]);
    B()->free(B(), c.qkv), B()->free(B(), c.b), B()->free(B(), c.a), B()->free(B(), c.o);
    B()->free(B(), c.slots), B()->free(B(), c.conv_state), B()->free(B(), c.conv_slots), B()->free(B(), c.spacer);
    B()->free(B(), Al.dev), B()->free(B(), dtb.dev), B()->free(B(), cw.dev);
}

// ---- gemv schedule sweep: load schedule (variant) x k-slicing target (bps), a 27B step's fused GEMMs ----
// The groups of bench_cuda_gemv_fused, issued as the engine does (matmul_multi), at n = 1, 8, 16, for every
// variant of fd_cuda_set_gemv_variant (FD_BENCH_GEMV_VARIANTS, default all) and every k-slicing target
// (FD_BENCH_GEMV_BPS, default 1,2,3,4,6,8,12,16; from 12 up the k = 5120 weights get 1024-wide slices). All
// variants are bitwise equal; bps changes the summation order, so the pair is a tuning choice. One line per
// (n, variant, bps): the step total (all 257 GEMM launches of a token) in ms and % of copy bandwidth, then
// cuBLAS, the best pair per n and that pair's time per group.
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

TEST(bench_cuda_gemv_sweep) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (!en || en[0] != '1') {
        printf("    (skipped: set FD_CUDA_BENCH=1)\n");
        return;
    }
    static const char *const variant_names[FD_CUDA_GEMV_VARIANTS] = {"batch",   "ring2",   "ring3",  "ring4",
                                                                     "stream2", "stream3", "stream4"};
    static const struct {
        int count, k, per_token, m[4];
        const char *what;
    } groups[] = {{4, 5120, 48, {10240, 6144, 48, 48}, "GDN qkv|z|b|a"},
                  {3, 5120, 16, {12288, 1024, 1024}, "attn q|k|v"},
                  {2, 5120, 64, {17408, 17408}, "FFN gate|up"},
                  {1, 6144, 64, {5120}, "GDN out, attn o"},
                  {1, 17408, 64, {5120}, "FFN down"},
                  {1, 5120, 1, {248320}, "lm_head"}};
    enum { NG = sizeof groups / sizeof groups[0], NN = 3, MAXV = FD_CUDA_GEMV_VARIANTS, MAXB = 8 };
    const int ns[NN] = {1, 8, 16};
    int vars[MAXV], bpss[MAXB];
    const int nv = parse_list("FD_BENCH_GEMV_VARIANTS", "0,1,2,3,4,5,6", vars, MAXV, 0, MAXV - 1);
    const int nb = parse_list("FD_BENCH_GEMV_BPS", "1,2,3,4,6,8,12,16", bpss, MAXB, 1, 64);
    const char *prev = fd_cuda_route(B(), "gemm_small");
    const int prev_variant = fd_cuda_set_gemv_variant(B(), 0);
    const int prev_bps = fd_cuda_set_gemv_blocks_per_sm(B(), 6);
    const size_t seed_elems = (size_t)16 << 20;
    fd_weight seed = wrand((int64_t)(seed_elems / 4096), 4096, -0.05f, 0.05f);
    gfuse_ctx c;
    memset(&c, 0, sizeof c);
    c.x = dev_rand((size_t)16 * 17408, -1, 1);
    static double step_ms[NN][MAXV][MAXB], group_ms[NG][NN][MAXV][MAXB], cublas_ms[NN];
    memset(step_ms, 0, sizeof step_ms), memset(cublas_ms, 0, sizeof cublas_ms);
    double wsum = 0;
    for (int g = 0; g < NG; g++) {
        const int count = groups[g].count, k = groups[g].k;
        size_t gbytes = 0, wbytes[4];
        for (int i = 0; i < count; i++)
            wbytes[i] = (size_t)groups[g].m[i] * k * 2, gbytes += (wbytes[i] + 255) / 256 * 256;
        for (int i = 0; i < count; i++) wsum += (double)wbytes[i] * groups[g].per_token;
        int copies = gbytes > ((size_t)384 << 20) ? 1 : (int)(((size_t)384 << 20) / gbytes) + 1;
        const size_t pool_bytes = gbytes * (size_t)copies;
        char *pool = B()->alloc(B(), pool_bytes);
        for (size_t off = 0; off < pool_bytes; off += seed_elems * 2) {
            size_t len = pool_bytes - off < seed_elems * 2 ? pool_bytes - off : seed_elems * 2;
            B()->copy(B(), pool + off, seed.dev, len);
        }
        c.Ws = fd_calloc((size_t)copies * count, sizeof(fd_weight));
        size_t off = 0;
        for (int cp = 0; cp < copies; cp++)
            for (int i = 0; i < count; i++) {
                fd_weight *w = &c.Ws[cp * count + i];
                w->name = groups[g].what, w->dtype = FD_BF16, w->rows = groups[g].m[i], w->cols = k;
                w->dev = pool + off, w->dev_dtype = FD_BF16;
                off += (wbytes[i] + 255) / 256 * 256;
            }
        for (int i = 0; i < count; i++) c.outs[i] = B()->alloc(B(), (size_t)16 * groups[g].m[i] * 4);
        c.copies = copies, c.count = count, c.fused = 1;
        for (int in = 0; in < NN; in++) {
            c.n = ns[in];
            const double bytes = (double)gbytes + (double)c.n * k * 4;
            c.reps = (int)(2e9 / bytes);
            c.reps = c.reps < 10 ? 10 : c.reps > 2000 ? 2000 : c.reps;
            fd_cuda_set_route(B(), "gemm_small", "cublas");
            cublas_ms[in] += time_ms(f_gfuse, &c) / c.reps * groups[g].per_token;
            fd_cuda_set_route(B(), "gemm_small", "gemv");
            for (int vi = 0; vi < nv; vi++)
                for (int bi = 0; bi < nb; bi++) {
                    fd_cuda_set_gemv_variant(B(), vars[vi]);
                    fd_cuda_set_gemv_blocks_per_sm(B(), bpss[bi]);
                    const double ms = time_ms(f_gfuse, &c) / c.reps;
                    group_ms[g][in][vi][bi] = ms;
                    step_ms[in][vi][bi] += ms * groups[g].per_token;
                }
        }
        for (int i = 0; i < count; i++) B()->free(B(), c.outs[i]);
        free(c.Ws);
        B()->free(B(), pool);
    }
    for (int in = 0; in < NN; in++) {
        int bv = 0, bb = 0;
        for (int vi = 0; vi < nv; vi++)
            for (int bi = 0; bi < nb; bi++) {
                char what[96];
                snprintf(what, sizeof what, "sweep n=%-2d %-7s bps=%-2d 27B step GEMMs", ns[in],
                         variant_names[vars[vi]], bpss[bi]);
                row(what, step_ms[in][vi][bi], 0, wsum);
                if (step_ms[in][vi][bi] < step_ms[in][bv][bb]) bv = vi, bb = bi;
            }
        char what[96];
        snprintf(what, sizeof what, "sweep n=%-2d cublas 27B step GEMMs", ns[in]);
        row(what, cublas_ms[in], 0, wsum);
        if (nv && nb) {
            snprintf(what, sizeof what, "sweep n=%-2d BEST %s bps=%d", ns[in], variant_names[vars[bv]], bpss[bb]);
            row(what, step_ms[in][bv][bb], 0, wsum);
            // Where the best pair's time goes, group by group (per call).
            for (int g = 0; g < NG; g++) {
                double gb = 0;
                for (int i = 0; i < groups[g].count; i++) gb += (double)groups[g].m[i] * groups[g].k * 2;
                snprintf(what, sizeof what, "  best n=%-2d %s (x%d)", ns[in], groups[g].what, groups[g].per_token);
                row(what, group_ms[g][in][bv][bb], 0, gb);
            }
        }
    }
    fd_cuda_set_gemv_variant(B(), prev_variant);
    fd_cuda_set_gemv_blocks_per_sm(B(), prev_bps);
    fd_cuda_set_route(B(), "gemm_small", prev);
    B()->free(B(), c.x), B()->free(B(), seed.dev);
}
