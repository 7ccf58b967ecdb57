// Op timings at the Qwen3.5-27B geometry (d 5120, GDN 16k/48v x 128, attention 24q/4kv x 256, FFN 17408).
// Runs only with FD_CUDA_BENCH=1 (it is a measurement, not a check). Wall clock around be->sync, one warm-up,
// median of 5; random inputs (never zeros). Prints one table line per op with the roofline ratio:
//   GEMM: achieved TFLOP/s / 709 (bf16 ceiling measured on this H200 kind, DESIGN.md §8)
//   memory-bound ops: achieved GB/s / 4250 (copy bandwidth, read + write)
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"

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
static double time_ms(bench_fn fn, void *ctx) {
    double t[5];
    fn(ctx);
    B()->sync(B());
    for (int r = 0; r < 5; r++) {
        double t0 = fd_time_s();
        fn(ctx);
        B()->sync(B());
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
    B()->attention(B(), c->out, c->x, c->st, c->pos0, c->n, c->H, c->Hkv, c->hd, c->cap, 0.0625f, 1);
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
        for (int64_t p = 0; p < 32768; p += 4096) B()->kv_store(B(), c.st, k, v, p, 4096, 4, 256, c.cap);
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
    fd_cuda_set_route(B(), "attn_kernel", "simt");
    c.pos0 = 32768 - 16, c.n = 16;
    ms = time_ms(f_attn, &c);
    row("attention verify n=16 at ctx 32K", ms, 0, (double)32768 * kvb);
    c.pos0 = 32768 - 1, c.n = 1;
    ms = time_ms(f_attn, &c);
    row("attention decode n=1 at ctx 32K", ms, 0, (double)32768 * kvb);
    B()->free(B(), c.x), B()->free(B(), c.out), B()->free(B(), c.st);
}
