// The weight-format descriptor (weight.h): element access for every format, views, FP8 block quantization.
#include "base/weight.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/threads.h"

const char *fd_wfmt_name(fd_wfmt f) {
    switch (f) {
    case FD_WFMT_DENSE: return "dense";
    case FD_WFMT_FP8_BLOCK: return "fp8-block";
    case FD_WFMT_GPTQ_INT4: return "gptq-int4";
    case FD_WFMT_AWQ_INT4: return "awq-int4";
    default: return "?";
    }
}

// e4m3 byte -> fp32 by table: the CPU matmul decodes every weight element once per use.
static float g_e4m3[256];
static void e4m3_table_init(void) {
    for (int b = 0; b < 256; b++) g_e4m3[b] = fd_e4m3_to_f32((uint8_t)b);
}
static float e4m3(uint8_t b) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, e4m3_table_init);
    return g_e4m3[b];
}

static float scalar_at(const void *p, fd_dtype t, int64_t i) {
    switch (t) {
    case FD_F32: return ((const float *)p)[i];
    case FD_BF16: return fd_bf16_to_f32(((const uint16_t *)p)[i]);
    case FD_F16: return fd_f16_to_f32(((const uint16_t *)p)[i]);
    default: FD_PANIC("unsupported element dtype %s", fd_dtype_name(t));
    }
}

float fd_weight_block_scale(const fd_weight *w, int64_t r, int64_t c) {
    return scalar_at(w->scale, w->scale_dtype, (r / w->block_rows) * w->scale_cols + c / w->block_cols);
}

// Nibble position of column n % 8 inside an AWQ word: the inverse of AutoAWQ's pack order {0, 2, 4, 6, 1, 3, 5, 7}
// (nibble i holds column order[i], so column j sits in nibble inv[j]).
static const int k_awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

static inline int nib(uint32_t word, int pos) { return (int)(word >> (4 * pos)) & 15; }

// Elements (n, k0..k0+count) of one row of an int4 weight. The scale and zero change only at group boundaries, but
// g_idx may send neighbouring k to different groups (desc_act), so each k looks its group up: the tiny fixtures
// are what the CPU reference runs, and this is exact whatever the order.
static void int4_row(const fd_weight *w, int64_t n, int64_t k0, int64_t count, float *out) {
    const uint32_t *qw = w->data, *qz = w->qzeros;
    const int64_t N = w->rows, N8 = N / 8;
    if (w->fmt == FD_WFMT_GPTQ_INT4) {
        const int zpos = (int)(n % 8);
        for (int64_t j = 0; j < count; j++) {
            const int64_t k = k0 + j;
            const int64_t g = w->g_idx ? w->g_idx[k] : k / w->group_size;
            const int q = nib(qw[(k / 8) * N + n], (int)(k % 8));
            const int z = nib(qz[g * N8 + n / 8], zpos) + w->zero_add;
            out[j] = scalar_at(w->scale, w->scale_dtype, g * N + n) * (float)(q - z);
        }
        return;
    }
    const int pos = k_awq_nibble[n % 8];
    for (int64_t j = 0; j < count; j++) {
        const int64_t k = k0 + j, g = k / w->group_size;
        const int q = nib(qw[k * N8 + n / 8], pos), z = nib(qz[g * N8 + n / 8], pos);
        out[j] = (float)(q - z) * scalar_at(w->scale, w->scale_dtype, g * N + n);
    }
}

float fd_weight_elem(const fd_weight *w, int64_t i) {
    if (fd_wfmt_is_int4(w->fmt)) {
        float v;
        int4_row(w, i / w->cols, i % w->cols, 1, &v);
        return v;
    }
    if (w->fmt == FD_WFMT_FP8_BLOCK) {
        const int64_t r = i / w->cols, c = i % w->cols;
        return e4m3(((const uint8_t *)w->data)[i]) * fd_weight_block_scale(w, r, c);
    }
    FD_CHECK(w->fmt == FD_WFMT_DENSE, "weight %s: format %d", w->name ? w->name : "?", (int)w->fmt);
    return scalar_at(w->data, w->dtype, i);
}

void fd_weight_f32(const fd_weight *w, int64_t off, int64_t count, float *out) {
    if (fd_wfmt_is_int4(w->fmt)) {
        for (int64_t i = 0; i < count;) { // row by row: a row is one output column of qweight
            const int64_t r = (off + i) / w->cols, c = (off + i) % w->cols;
            const int64_t run = w->cols - c < count - i ? w->cols - c : count - i;
            int4_row(w, r, c, run, out + i);
            i += run;
        }
        return;
    }
    if (w->fmt == FD_WFMT_FP8_BLOCK) {
        const uint8_t *q = (const uint8_t *)w->data;
        for (int64_t i = 0; i < count;) {
            const int64_t r = (off + i) / w->cols, c = (off + i) % w->cols;
            // one scale per run of block_cols elements within the row
            int64_t run = w->block_cols - c % w->block_cols;
            if (run > w->cols - c) run = w->cols - c;
            if (run > count - i) run = count - i;
            const float s = fd_weight_block_scale(w, r, c);
            for (int64_t j = 0; j < run; j++) out[i + j] = e4m3(q[off + i + j]) * s;
            i += run;
        }
        return;
    }
    switch (w->dtype) {
    case FD_F32: memcpy(out, (const float *)w->data + off, (size_t)count * sizeof(float)); return;
    case FD_BF16:
        for (int64_t i = 0; i < count; i++) out[i] = fd_bf16_to_f32(((const uint16_t *)w->data)[off + i]);
        return;
    case FD_F16:
        for (int64_t i = 0; i < count; i++) out[i] = fd_f16_to_f32(((const uint16_t *)w->data)[off + i]);
        return;
    default: FD_PANIC("weight %s: unsupported dtype %s", w->name ? w->name : "?", fd_dtype_name(w->dtype));
    }
}

int64_t fd_weight_scale_rows(const fd_weight *w) {
    return w->fmt == FD_WFMT_FP8_BLOCK ? (w->rows + w->block_rows - 1) / w->block_rows : 0;
}

size_t fd_weight_bytes(const fd_weight *w) {
    const int64_t n = w->rows * w->cols;
    size_t b = (size_t)n * fd_dtype_size(w->dtype);
    if (w->fmt == FD_WFMT_FP8_BLOCK) b += (size_t)(fd_weight_scale_rows(w) * w->scale_cols) * fd_dtype_size(w->scale_dtype);
    if (fd_wfmt_is_int4(w->fmt)) { // nibbles, packed zeros, scales and g_idx
        b = (size_t)n / 2 + (size_t)(w->n_groups * w->rows) / 2 +
            (size_t)(w->n_groups * w->rows) * fd_dtype_size(w->scale_dtype) + (w->g_idx ? (size_t)w->cols * 4 : 0);
    }
    return b;
}

int fd_weight_view_rows(const fd_weight *w, int64_t row0, int64_t rows, fd_weight *out) {
    *out = *w;
    if (fd_wfmt_is_int4(w->fmt))
        return fd_error_set("tensor '%s': row slices of %s weights are not supported (int4 checkpoints store "
                            "experts one by one)",
                            w->name ? w->name : "?", fd_wfmt_name(w->fmt));
    out->data = (const char *)w->data + (size_t)(row0 * w->cols) * fd_dtype_size(w->dtype);
    out->rows = rows;
    if (w->fmt == FD_WFMT_FP8_BLOCK) {
        if (row0 % w->block_rows)
            return fd_error_set("tensor '%s': a slice starting at row %lld is not aligned to its %d-row scale "
                                "blocks",
                                w->name ? w->name : "?", (long long)row0, w->block_rows);
        out->scale = (const char *)w->scale +
                     (size_t)(row0 / w->block_rows * w->scale_cols) * fd_dtype_size(w->scale_dtype);
    }
    return 0;
}

typedef struct {
    const fd_weight *src;
    uint8_t *q;
    float *scale;
    int bn, bk;
    int64_t scols;
} quant_ctx;

// One block row per call unit: amax of each block, then the rounded quotients.
static void quant_rows(void *p, int64_t b, int64_t e) {
    const quant_ctx *c = p;
    const int64_t K = c->src->cols, N = c->src->rows;
    float *row = fd_malloc((size_t)K * sizeof(float));
    for (int64_t br = b; br < e; br++) {
        const int64_t r0 = br * c->bn, r1 = r0 + c->bn < N ? r0 + c->bn : N;
        float *s = c->scale + br * c->scols;
        for (int64_t j = 0; j < c->scols; j++) s[j] = 0;
        for (int64_t r = r0; r < r1; r++) {
            fd_weight_f32(c->src, r * K, K, row);
            for (int64_t k = 0; k < K; k++) {
                const float a = fabsf(row[k]);
                if (a > s[k / c->bk]) s[k / c->bk] = a;
            }
        }
        for (int64_t j = 0; j < c->scols; j++) s[j] = s[j] > 0 ? s[j] / 448.0f : 1.0f;
        for (int64_t r = r0; r < r1; r++) {
            fd_weight_f32(c->src, r * K, K, row);
            for (int64_t k = 0; k < K; k++) c->q[r * K + k] = fd_f32_to_e4m3(row[k] / s[k / c->bk]);
        }
    }
    free(row);
}

// The descriptor both quantizers fill: src's name and shape in format fmt, elements `data` of `dtype` and their
// scales of scale_dtype; everything else zero (the caller sets its format's own fields).
static void quantized_weight(fd_weight *w, const fd_weight *src, fd_wfmt fmt, fd_dtype dtype, const void *data,
                             const void *scale, fd_dtype scale_dtype) {
    memset(w, 0, sizeof *w);
    w->name = src->name;
    w->fmt = fmt;
    w->dtype = dtype;
    w->rows = src->rows;
    w->cols = src->cols;
    w->data = data;
    w->scale = scale;
    w->scale_dtype = scale_dtype;
}

void fd_weight_quantize_fp8(const fd_weight *src, int block_rows, int block_cols, uint8_t **q, float **scale,
                            fd_weight *w_out) {
    const int64_t N = src->rows, K = src->cols;
    const int64_t srows = (N + block_rows - 1) / block_rows, scols = (K + block_cols - 1) / block_cols;
    quant_ctx c = {src, fd_malloc((size_t)(N * K)), fd_malloc((size_t)(srows * scols) * sizeof(float)), block_rows,
                   block_cols, scols};
    fd_parallel_for(srows, 1, quant_rows, &c);
    quantized_weight(w_out, src, FD_WFMT_FP8_BLOCK, FD_F8E4M3, c.q, c.scale, FD_F32);
    w_out->block_rows = block_rows;
    w_out->block_cols = block_cols;
    w_out->scale_cols = scols;
    *q = c.q;
    *scale = c.scale;
}

typedef struct {
    const fd_weight *src;
    fd_wfmt fmt;
    int group;
    int64_t G;
    uint32_t *qw, *qz;
    uint16_t *s;
} quant4_ctx;

// Rows [8u, 8u + 8) per unit u: 8 rows share the packed zero words (and AWQ's qweight words), so no two threads
// write one word.
static void quant4_rows(void *p, int64_t b, int64_t e) {
    const quant4_ctx *c = p;
    const int64_t N = c->src->rows, K = c->src->cols, N8 = N / 8;
    const int awq = c->fmt == FD_WFMT_AWQ_INT4;
    float *row = fd_malloc((size_t)K * sizeof(float));
    for (int64_t n = 8 * b; n < 8 * e; n++) {
        fd_weight_f32(c->src, n * K, K, row);
        const int pos = awq ? k_awq_nibble[n % 8] : (int)(n % 8);
        for (int64_t g = 0; g < c->G; g++) {
            const int64_t k0 = g * c->group, k1 = k0 + c->group < K ? k0 + c->group : K;
            float lo = 0, hi = 0, amax = 0;
            for (int64_t k = k0; k < k1; k++) {
                lo = row[k] < lo ? row[k] : lo;
                hi = row[k] > hi ? row[k] : hi;
                amax = fabsf(row[k]) > amax ? fabsf(row[k]) : amax;
            }
            // the scale as stored (f16), kept inside f16's normal range so that it is finite and not zero
            float sc = awq ? (hi - lo) / 15.0f : 2.0f * amax / 15.0f;
            sc = sc < 6.103515625e-05f ? 6.103515625e-05f : sc > 65504.0f ? 65504.0f : sc;
            uint16_t s16 = fd_f32_to_f16(sc);
            if (fd_f16_to_f32(s16) < sc) s16++; // round the step up: every value stays within half a step
            sc = fd_f16_to_f32(s16);
            int z = awq ? (int)lrintf(-lo / sc) : 8;
            z = z < 0 ? 0 : z > 15 ? 15 : z;
            c->s[g * N + n] = s16;
            c->qz[g * N8 + n / 8] |= (uint32_t)(awq ? z : z - 1) << (4 * pos); // GPTQ v1 stores z - 1
            for (int64_t k = k0; k < k1; k++) {
                long q = lrintf(row[k] / sc) + z;
                q = q < 0 ? 0 : q > 15 ? 15 : q;
                if (awq)
                    c->qw[k * N8 + n / 8] |= (uint32_t)q << (4 * pos);
                else
                    c->qw[(k / 8) * N + n] |= (uint32_t)q << (4 * (k % 8));
            }
        }
    }
    free(row);
}

void fd_weight_quantize_int4(const fd_weight *src, fd_wfmt fmt, int group, uint32_t **qweight, uint32_t **qzeros,
                             uint16_t **scales, fd_weight *w_out) {
    const int64_t N = src->rows, K = src->cols, G = (K + group - 1) / group;
    FD_CHECK(fd_wfmt_is_int4(fmt) && N % 8 == 0 && K % 8 == 0 && group > 0, "int4 quantization of %s [%lld, %lld]",
             src->name ? src->name : "?", (long long)N, (long long)K);
    quant4_ctx c = {src, fmt, group, G, fd_calloc((size_t)(N * K / 8), 4), fd_calloc((size_t)(G * N / 8), 4),
                    fd_malloc((size_t)(G * N) * 2)};
    fd_parallel_for(N / 8, 1, quant4_rows, &c);
    quantized_weight(w_out, src, fmt, FD_I32, c.qw, c.s, FD_F16);
    w_out->qzeros = c.qz;
    w_out->group_size = group;
    w_out->zero_add = fmt == FD_WFMT_GPTQ_INT4;
    w_out->n_groups = G;
    *qweight = c.qw;
    *qzeros = c.qz;
    *scales = c.s;
}
