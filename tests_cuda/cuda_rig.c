// Helpers shared by the GPU tests and benches: cuda_rig.h.
#include "cuda_rig.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "cuda/cuda.h"
#include "engine/routes.h"

int cuda_rig_bench_skipped(void) {
    const char *en = getenv("FD_CUDA_BENCH");
    if (en && en[0] == '1') return 0;
    printf("    (skipped: set FD_CUDA_BENCH=1)\n");
    return 1;
}

fd_backend *cuda_rig_new_gpu(void) {
    fd_backend *be = fd_backend_cuda_create(0);
    FD_CHECK(routes_backend_preset(be, NULL, 0) == 0, "%s", fd_error_msg());
    return be;
}

fd_backend *cuda_rig_new_gpu_for_graphs(void) {
    unsetenv("FD_CUDA_SYNC");
    unsetenv("FD_CUDA_PROFILE");
    return cuda_rig_new_gpu();
}

void cuda_rig_pair(const char *kv, fd_backend **cpu, fd_backend **gpu) {
    *cpu = fd_backend_cpu_create(0);
    *gpu = cuda_rig_new_gpu();
    if (!strcmp(kv, "bf16")) return; // the CUDA default; the CPU keeps its f32 cache
    char spec[32];
    snprintf(spec, sizeof spec, "kv=%s", kv);
    const char *s = spec;
    FD_CHECK(routes_backend_preset(*cpu, &s, 1) == 0, "%s", fd_error_msg());
    FD_CHECK(routes_backend_preset(*gpu, &s, 1) == 0, "%s", fd_error_msg());
}

fd_backend *cuda_rig_cpu(cuda_rig *r) {
    if (!r->cpu) r->cpu = fd_backend_cpu_create(0);
    return r->cpu;
}

fd_backend *cuda_rig_gpu(cuda_rig *r) {
    if (!r->gpu) {
        r->gpu = cuda_rig_new_gpu();
        snprintf(r->gemm_act_at_start, sizeof r->gemm_act_at_start, "%s", fd_cuda_route(r->gpu, "gemm_act"));
    }
    return r->gpu;
}

float *cuda_rig_rnd(cuda_rig *r, size_t n, float lo, float hi) {
    float *x = fd_malloc(n * sizeof(float) + sizeof(float));
    test_fill_uniform(x, n, lo, hi, &r->seed);
    return x;
}

void *cuda_rig_up(fd_backend *g, const void *h, size_t bytes) {
    return cuda_rig_up_slack(g, h, bytes, 0);
}

void *cuda_rig_up_slack(fd_backend *g, const void *h, size_t bytes, size_t slack) {
    void *d = g->alloc(g, bytes + slack);
    g->to_device(g, d, h, bytes);
    return d;
}

void cuda_rig_poison(fd_backend *g, void *d, size_t floats) {
    float *nan = fd_malloc(floats * sizeof(float) + sizeof(float));
    for (size_t i = 0; i < floats; i++) nan[i] = NAN;
    g->to_device(g, d, nan, floats * sizeof(float));
    free(nan);
}

void *cuda_rig_poisoned(fd_backend *g, size_t floats) {
    void *d = g->alloc(g, floats * sizeof(float) + sizeof(float));
    cuda_rig_poison(g, d, floats);
    return d;
}

float *cuda_rig_down(fd_backend *g, const void *d, size_t floats) {
    float *h = fd_malloc(floats * sizeof(float) + sizeof(float));
    g->to_host(g, h, d, floats * sizeof(float));
    return h;
}

int cuda_rig_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

cuda_rig_weight cuda_rig_weight_rand(cuda_rig *r, const char *name, int64_t rows, int64_t cols, fd_dtype dt, float lo,
                                     float hi) {
    const size_t n = (size_t)(rows * cols);
    float *f = cuda_rig_rnd(r, n, lo, hi);
    void *data = f;
    if (dt == FD_BF16 || dt == FD_F16) {
        uint16_t *b = fd_malloc(n * 2 + 2);
        for (size_t i = 0; i < n; i++) b[i] = dt == FD_BF16 ? fd_f32_to_bf16(f[i]) : fd_f32_to_f16(f[i]);
        free(f);
        data = b;
    }
    cuda_rig_weight w;
    memset(&w, 0, sizeof w);
    w.c.name = name, w.c.dtype = dt, w.c.rows = rows, w.c.cols = cols, w.c.data = data;
    w.owned[0] = data;
    cuda_rig_weight_bind(r, &w);
    return w;
}

cuda_rig_weight cuda_rig_weight_fp8(cuda_rig *r, const char *name, int rows, int cols, int block_rows, int block_cols,
                                    int bf16_scales) {
    cuda_rig_weight w;
    memset(&w, 0, sizeof w);
    float *f = cuda_rig_rnd(r, (size_t)rows * cols, -0.1f, 0.1f);
    for (int row = 0; row < rows; row += 37)
        for (int i = 0; i < cols; i++) f[(size_t)row * cols + i] *= 40.f;
    fd_weight src = {.name = name, .fmt = FD_WFMT_DENSE, .dtype = FD_F32, .rows = rows, .cols = cols, .data = f};
    uint8_t *q;
    float *scale;
    fd_weight_quantize_fp8(&src, block_rows, block_cols, &q, &scale, &w.c);
    free(f);
    w.owned[0] = q, w.owned[1] = scale;
    if (bf16_scales) {
        const int64_t ns = fd_weight_scale_rows(&w.c) * w.c.scale_cols;
        uint16_t *s16 = fd_malloc((size_t)ns * 2);
        for (int64_t i = 0; i < ns; i++) s16[i] = fd_f32_to_bf16(scale[i]);
        w.c.scale = s16, w.c.scale_dtype = FD_BF16;
        w.owned[2] = s16;
    }
    cuda_rig_weight_bind(r, &w);
    return w;
}

void cuda_rig_weight_bind(cuda_rig *r, cuda_rig_weight *w) {
    w->g = w->c;
    cuda_rig_cpu(r)->upload_weight(cuda_rig_cpu(r), &w->c);
    cuda_rig_gpu(r)->upload_weight(cuda_rig_gpu(r), &w->g);
}

void cuda_rig_weight_free(cuda_rig *r, cuda_rig_weight *w) {
    cuda_rig_gpu(r)->release_weight(cuda_rig_gpu(r), &w->g);
    for (int i = 0; i < 3; i++) free(w->owned[i]), w->owned[i] = NULL;
}

float *cuda_rig_gpu_matmul(fd_backend *g, const float *x, const fd_weight *W, int n) {
    const size_t nx = (size_t)n * W->cols, no = (size_t)n * W->rows;
    void *dx = cuda_rig_up_slack(g, x, nx * 4, 64), *dout = cuda_rig_poisoned(g, no);
    g->matmul(g, dout, dx, W, n, 0);
    float *h = cuda_rig_down(g, dout, no);
    g->free(g, dx);
    g->free(g, dout);
    return h;
}

fd_weight cuda_rig_f32_weight(fd_backend *be, const char *name, const float *data, int64_t rows, int64_t cols) {
    fd_weight w;
    memset(&w, 0, sizeof w);
    w.name = name, w.dtype = FD_F32, w.rows = rows, w.cols = cols, w.data = data;
    be->upload_weight(be, &w);
    return w;
}

int64_t cuda_rig_route_calls(fd_backend *be, const char *route, int value) {
    for (int i = 0; i < be->n_routes; i++)
        if (!strcmp(be->routes[i].name, route)) return be->routes[i].calls[value];
    return -1;
}

int64_t cuda_rig_route_value_calls(fd_backend *be, const char *route, const char *value) {
    for (int i = 0; i < be->n_routes; i++)
        if (!strcmp(be->routes[i].name, route))
            for (int v = 0; be->routes[i].values[v]; v++)
                if (!strcmp(be->routes[i].values[v], value)) return be->routes[i].calls[v];
    return -1;
}

double cuda_rig_cmp(const char *what, const float *got, const float *want, size_t n, double tol) {
    const double e = test_rel_l2(got, want, n);
    EXPECT(e <= tol, "%s: rel-L2 %.3g > %.1g", what, e, tol);
    printf("    %-52s rel-L2 %.3g\n", what, e);
    return e;
}

int cuda_rig_greedy_parts_at_near_tie(fd_backend *g, fd_model *m, const fd_engine_opts *o, const int32_t *prompt,
                                      int n_prompt, const int32_t *prefix, int s, int32_t pick, int32_t other,
                                      double tol, double *gap, double *bound) {
    fd_engine e;
    if (engine_init(&e, m, g, o)) return 0;
    const int n = n_prompt + s, V = m->cfg.vocab_size;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    memcpy(ids + n_prompt, prefix, (size_t)s * sizeof *ids);
    float *row = malloc((size_t)V * sizeof *row);
    const int rc = engine_prefill(&e, ids, n, 0, row, 0);
    double ss = 0;
    for (int v = 0; v < V; v++) ss += (double)row[v] * row[v];
    *gap = (double)row[pick] - row[other];
    *bound = 2 * tol * sqrt(ss / V);
    engine_free(&e);
    free(ids);
    free(row);
    return rc == 0 && *gap >= 0 && *gap <= *bound;
}
