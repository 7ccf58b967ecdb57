// Helpers shared by the op benches (bench_cuda_ops.c, bench_cuda_gemv.c, bench_cuda_decode.c, bench_cuda_tree.c):
// bench_common.h.
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

fd_backend *B(void) {
    static fd_backend *be;
    if (!be) be = cuda_rig_new_gpu();
    return be;
}

uint64_t g_seed = 12345;

void *dev_rand(size_t n, float lo, float hi) {
    float *h = fd_malloc(n * 4);
    test_fill_uniform(h, n, lo, hi, &g_seed);
    void *d = B()->alloc(B(), n * 4);
    B()->to_device(B(), d, h, n * 4);
    free(h);
    return d;
}

fd_weight wrand(int64_t rows, int64_t cols, float lo, float hi) {
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

void bench_mm_cycle(void *bench_mm_ctx_ptr) {
    bench_mm_ctx *c = bench_mm_ctx_ptr;
    for (int r = 0; r < c->reps; r++) B()->matmul(B(), c->out, c->x, &c->Ws[r % c->copies], c->n, 0);
}

bench_pool bench_pool_make(const fd_weight *seed, const char *name, const int *m, int count, int k) {
    bench_pool p = {.count = count};
    size_t wbytes[4];
    FD_CHECK(count >= 1 && count <= 4);
    for (int i = 0; i < count; i++)
        wbytes[i] = (size_t)m[i] * k * 2, p.group_bytes += (wbytes[i] + 255) / 256 * 256;
    p.copies = p.group_bytes > ((size_t)384 << 20) ? 1 : (int)(((size_t)384 << 20) / p.group_bytes) + 1;
    const size_t pool_bytes = p.group_bytes * (size_t)p.copies, seed_bytes = (size_t)(seed->rows * seed->cols) * 2;
    p.pool = B()->alloc(B(), pool_bytes);
    for (size_t off = 0; off < pool_bytes; off += seed_bytes) {
        const size_t len = pool_bytes - off < seed_bytes ? pool_bytes - off : seed_bytes;
        B()->copy(B(), p.pool + off, seed->dev, len);
    }
    p.Ws = fd_calloc((size_t)p.copies * count, sizeof(fd_weight));
    size_t off = 0;
    for (int cp = 0; cp < p.copies; cp++)
        for (int i = 0; i < count; i++) {
            fd_weight *w = &p.Ws[cp * count + i];
            w->name = name, w->dtype = FD_BF16, w->rows = m[i], w->cols = k;
            w->dev = p.pool + off, w->dev_dtype = FD_BF16;
            off += (wbytes[i] + 255) / 256 * 256;
        }
    return p;
}

void bench_pool_free(bench_pool *p) {
    free(p->Ws);
    B()->free(B(), p->pool);
    memset(p, 0, sizeof *p);
}

int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

fd_backend *g_timed;
double time_ms(bench_fn fn, void *ctx) {
    return time_be_ms(g_timed ? g_timed : B(), fn, ctx);
}

double time_be_ms(fd_backend *be, bench_fn fn, void *ctx) {
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

double bench_event_us(bench_fn fn, void *ctx, int calls, void *spacer) {
    cudaEvent_t e0, e1;
    ASSERT(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess, "cudaEventCreate");
    for (int w = 0; w < 3; w++) fn(ctx);
    B()->sync(B());
    double t[11];
    for (int r = 0; r < 11; r++) {
        B()->zero(B(), spacer, (size_t)512 << 20);
        fd_cuda_record_event(B(), e0);
        for (int k = 0; k < calls; k++) fn(ctx);
        fd_cuda_record_event(B(), e1);
        ASSERT(cudaEventSynchronize(e1) == cudaSuccess, "cudaEventSynchronize");
        float ms = 0;
        ASSERT(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess, "cudaEventElapsedTime");
        t[r] = 1e3 * ms / calls;
    }
    qsort(t, 11, sizeof t[0], cmp_d);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return t[5];
}

void row(const char *what, double ms, double flop, double bytes) {
    printf("BENCH | %-44s | %9.3f ms |", what, ms);
    if (flop > 0) printf(" %7.1f TFLOP/s (%4.1f%% of 709)", flop / ms / 1e9, 100.0 * flop / ms / 1e9 / 709.0);
    if (bytes > 0) printf(" %7.0f GB/s (%4.1f%% of 4250)", bytes / ms / 1e6, 100.0 * bytes / ms / 1e6 / 4250.0);
    printf("\n");
}

int bench_gemv_bps(void) {
    const char *v = getenv("FD_BENCH_GEMV_BPS");
    const int want = v && v[0] ? atoi(v) : 0;
    const int prev = fd_cuda_set_gemv_blocks_per_sm(B(), want >= 1 && want <= 64 ? want : 1);
    if (want >= 1 && want <= 64) return want;
    fd_cuda_set_gemv_blocks_per_sm(B(), prev); // unset (or out of range, said once): the default stays
    if (v && v[0]) printf("    FD_BENCH_GEMV_BPS=%s ignored (1..64)\n", v);
    return prev;
}

int bench_shape_wanted(const char *what) {
    const char *want = getenv("FD_BENCH_SHAPE");
    return !want || !want[0] || strstr(what, want) != NULL;
}
