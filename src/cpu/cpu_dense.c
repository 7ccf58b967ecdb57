// CPU dense ops: embedding, RMSNorm, matmul, elementwise. fp32 math, weights read in their published format.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sample_math.h"
#include "cpu/cpu.h"

static void cpu_embed(fd_backend *be, void *out, const fd_weight *table, const int32_t *ids, int n) {
    (void)be;
    float *o = out;
    for (int i = 0; i < n; i++) {
        FD_CHECK(ids[i] >= 0 && ids[i] < table->rows, "token id %d out of range [0, %lld)", ids[i],
                 (long long)table->rows);
        cpu_w_row(table, (int64_t)ids[i] * table->cols, table->cols, o + (int64_t)i * table->cols);
    }
}

typedef struct {
    float *out;
    float *x_add;   // add_rmsnorm: the residual, updated in place (then x == x_add)
    const float *y; // add_rmsnorm: what is added to it; NULL for a plain rmsnorm
    const float *x;
    const fd_weight *w;
    int d;
    float eps;
    int plus_one;
} rms_ctx;

static void rms_rows(void *p, int64_t b, int64_t e) {
    rms_ctx *c = p;
    for (int64_t r = b; r < e; r++) {
        if (c->y) { // the residual add, row by row so the row is still in cache for the norm
            float *xa = c->x_add + r * c->d;
            const float *ya = c->y + r * c->d;
            for (int i = 0; i < c->d; i++) xa[i] += ya[i];
        }
        const float *x = c->x + r * c->d;
        float *o = c->out + r * c->d;
        double ss = 0;
        for (int i = 0; i < c->d; i++) ss += (double)x[i] * x[i];
        float inv = 1.0f / sqrtf((float)(ss / c->d) + c->eps);
        for (int i = 0; i < c->d; i++) {
            float w = cpu_w_at(c->w, i);
            o[i] = x[i] * inv * (c->plus_one ? 1.0f + w : w);
        }
    }
}

void cpu_rmsnorm_f32(float *out, const float *x, const fd_weight *w, int64_t n, int d, float eps, int plus_one) {
    rms_ctx c = {out, NULL, NULL, x, w, d, eps, plus_one};
    fd_parallel_for(n, 16, rms_rows, &c);
}

static void cpu_rmsnorm(fd_backend *be, void *out, const void *x, const fd_weight *w, int64_t n, int d, float eps,
                        int plus_one) {
    (void)be;
    cpu_rmsnorm_f32(out, x, w, n, d, eps, plus_one);
}

// The same float operations as cpu_add then cpu_rmsnorm (a row's add finishes before its norm reads it), so the
// result is bitwise theirs.
static void cpu_add_rmsnorm(fd_backend *be, void *out, void *x, const void *y, const fd_weight *w, int64_t n, int d,
                            float eps, int plus_one) {
    (void)be;
    rms_ctx c = {out, x, y, x, w, d, eps, plus_one};
    fd_parallel_for(n, 16, rms_rows, &c);
}

// Matmul: parallel over output features; each worker converts a few weight rows to fp32 once and
// reuses them for every token, so bf16/f16 conversion costs O(m k), not O(n m k).
#define MM_ROWS 8
typedef struct {
    float *out;
    const float *x;
    const fd_weight *W;
    int n;
} mm_ctx;

static float dot_f32(const float *a, const float *b, int64_t k) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) {
        s0 += a[i] * b[i];
        s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2];
        s3 += a[i + 3] * b[i + 3];
        s4 += a[i + 4] * b[i + 4];
        s5 += a[i + 5] * b[i + 5];
        s6 += a[i + 6] * b[i + 6];
        s7 += a[i + 7] * b[i + 7];
    }
    for (; i < k; i++) s0 += a[i] * b[i];
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
}

static void mm_range(void *p, int64_t b, int64_t e) {
    mm_ctx *c = p;
    int64_t k = c->W->cols, m = c->W->rows;
    float *rows = fd_malloc((size_t)(MM_ROWS * k) * sizeof(float));
    for (int64_t j0 = b; j0 < e; j0 += MM_ROWS) {
        int64_t nr = e - j0 < MM_ROWS ? e - j0 : MM_ROWS;
        cpu_w_row(c->W, j0 * k, nr * k, rows);
        for (int i = 0; i < c->n; i++) {
            const float *xi = c->x + (int64_t)i * k;
            float *oi = c->out + (int64_t)i * m + j0;
            for (int64_t r = 0; r < nr; r++) oi[r] = dot_f32(xi, rows + r * k, k);
        }
    }
    free(rows);
}

void cpu_matmul_f32(float *out, const float *x, const fd_weight *W, int n) {
    mm_ctx c = {out, x, W, n};
    fd_parallel_for(W->rows, MM_ROWS, mm_range, &c);
}

static void cpu_matmul(fd_backend *be, void *out, const void *x, const fd_weight *W, int n, int out_f32) {
    (void)out_f32; // activations are fp32 already
    if (W->fmt == FD_WFMT_FP8_BLOCK) {
        cpu_impl *c = cpu_of(be);
        const int w8a8 = c->gemm_fp8 == CPU_GEMM_FP8_WGMMA && cpu_w8a8_applies(W, n);
        const int value = w8a8                                ? CPU_GEMM_FP8_WGMMA
                          : c->gemm_fp8 == CPU_GEMM_FP8_WGMMA ? CPU_GEMM_FP8_GEMV
                                                              : c->gemm_fp8;
        c->routes[1].calls[value]++;
        c->routes[1].tokens[value] += n;
        if (value == CPU_GEMM_FP8_WGMMA) {
            cpu_matmul_w8a8(out, x, W, n);
            return;
        }
    }
    cpu_matmul_f32(out, x, W, n);
}

// The reference runs the group as separate matmuls: same results by definition.
static void cpu_matmul_multi(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x,
                             int n) {
    for (int i = 0; i < count; i++) cpu_matmul(be, outs[i], x, Ws[i], n, 0);
}

static void cpu_add(fd_backend *be, void *x, const void *y, int64_t count) {
    (void)be;
    float *a = x;
    const float *b = y;
    for (int64_t i = 0; i < count; i++) a[i] += b[i];
}
static void cpu_silu_mul(fd_backend *be, void *out, const void *g, const void *u, int64_t count) {
    (void)be;
    float *o = out;
    const float *a = g, *b = u;
    for (int64_t i = 0; i < count; i++) o[i] = cpu_silu(a[i]) * b[i];
}
static void cpu_sigmoid_mul(fd_backend *be, void *x, const void *gate, int64_t count) {
    (void)be;
    float *a = x;
    const float *g = gate;
    for (int64_t i = 0; i < count; i++) a[i] *= cpu_sigmoid(g[i]);
}
static void cpu_to_f32(fd_backend *be, float *out, const void *x, int64_t count) {
    (void)be;
    memcpy(out, x, (size_t)count * sizeof(float));
}

static void cpu_copy_rows(fd_backend *be, void *dst, size_t dst_stride, const void *src, size_t src_stride,
                          int64_t rows, size_t row_bytes) {
    (void)be;
    for (int64_t r = 0; r < rows; r++)
        memmove((char *)dst + (size_t)r * dst_stride, (const char *)src + (size_t)r * src_stride, row_bytes);
}

// Lowest index wins ties, as engine_argmax (the engine's host greedy pick).
static void cpu_argmax_rows(fd_backend *be, int32_t *out, const float *logits, int rows, int V) {
    (void)be;
    for (int r = 0; r < rows; r++) {
        const float *l = logits + (int64_t)r * V;
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        out[r] = best;
    }
}

static void cpu_topk_rows(fd_backend *be, int32_t *ids, float *vals, const float *logits, int rows, int V, int K) {
    (void)be;
    FD_CHECK(K >= 1 && K <= FD_TOPK_ROWS_MAX && K <= V, "top-%d of %d logits", K, V);
    for (int r = 0; r < rows; r++) top_k_row(logits + (int64_t)r * V, V, K, ids + (int64_t)r * K, vals + (int64_t)r * K);
}

void cpu_install_dense(fd_backend *be) {
    be->argmax_rows = cpu_argmax_rows;
    be->topk_rows = cpu_topk_rows;
    be->copy_rows = cpu_copy_rows;
    be->embed = cpu_embed;
    be->rmsnorm = cpu_rmsnorm;
    be->matmul = cpu_matmul;
    be->matmul_multi = cpu_matmul_multi;
    be->add = cpu_add;
    be->add_rmsnorm = cpu_add_rmsnorm;
    be->silu_mul = cpu_silu_mul;
    be->sigmoid_mul = cpu_sigmoid_mul;
    be->to_f32 = cpu_to_f32;
}
