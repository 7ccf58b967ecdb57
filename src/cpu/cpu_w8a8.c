// The CPU reference of route gemm_fp8 = wgmma (src/cuda/gemv_fp8wg.cu): the W8A8 semantics of FP8 block-scaled
// checkpoints with `activation_scheme: dynamic` (HF fine-grained FP8, DeepSeek-V3's act_quant). Per token and
// 128-group of k: amax = max |x| (clamped below at 1e-10: an all-zero group would divide by zero), r = 448 / amax,
// s = amax / 448 (both fp32, IEEE), x_q = e4m3(x * r) (fp32 product, then round to nearest even, saturating).
// Each 128-k block's e4m3 x e4m3 products are exact in double and summed there; the block sum times
// w_scale * s is added in double. The GPU kernel does the same quantization bitwise; only its sums differ
// (fp32, wgmma's reduced-precision accumulation), which is what its tolerance covers.
#include <stdlib.h>

#include "cpu/cpu.h"

typedef struct {
    float *out;
    const float *x;
    const fd_weight *W;
    int n;
    const float *xq; // [n, k] the quantized activations as fp32 values (exact: e4m3 fits fp32)
    const float *xs; // [n, groups] their scales s
} w8a8_ctx;

void cpu_w8a8_quantize(const float *x, int64_t k, float *xq, float *xs) {
    const int64_t groups = (k + 127) / 128;
    for (int64_t g = 0; g < groups; g++) {
        const int64_t a = 128 * g, b = a + 128 < k ? a + 128 : k;
        float amax = 0.f;
        for (int64_t c = a; c < b; c++) amax = fmaxf(amax, fabsf(x[c]));
        amax = fmaxf(amax, 1e-10f);
        const float r = 448.f / amax;
        xs[g] = amax / 448.f;
        for (int64_t c = a; c < b; c++) xq[c] = fd_e4m3_to_f32(fd_f32_to_e4m3(x[c] * r));
    }
}

static void w8a8_rows(void *p, int64_t b, int64_t e) {
    w8a8_ctx *c = p;
    const int64_t k = c->W->cols, m = c->W->rows, groups = (k + 127) / 128;
    const uint8_t *q = c->W->data;
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = fd_e4m3_to_f32((uint8_t)i);
    for (int64_t row = b; row < e; row++) {
        const uint8_t *wr = q + row * k;
        for (int i = 0; i < c->n; i++) {
            const float *xq = c->xq + (int64_t)i * k;
            double acc = 0;
            for (int64_t g = 0; g < groups; g++) {
                const int64_t a = 128 * g, z = a + 128 < k ? a + 128 : k;
                double part = 0;
                for (int64_t col = a; col < z; col++) part += (double)lut[wr[col]] * (double)xq[col];
                acc += part * (double)fd_weight_block_scale(c->W, row, a) * (double)c->xs[(int64_t)i * groups + g];
            }
            c->out[(int64_t)i * m + row] = (float)acc;
        }
    }
}

int cpu_w8a8_applies(const fd_weight *W, int n) {
    return W->fmt == FD_WFMT_FP8_BLOCK && W->block_cols == 128 && n >= 1 && n <= 16;
}

void cpu_matmul_w8a8(float *out, const float *x, const fd_weight *W, int n) {
    const int64_t k = W->cols, groups = (k + 127) / 128;
    float *xq = fd_malloc((size_t)(n * k) * sizeof(float)), *xs = fd_malloc((size_t)(n * groups) * sizeof(float));
    for (int i = 0; i < n; i++) cpu_w8a8_quantize(x + (int64_t)i * k, k, xq + (int64_t)i * k, xs + (int64_t)i * groups);
    w8a8_ctx c = {out, x, W, n, xq, xs};
    fd_parallel_for(W->rows, 8, w8a8_rows, &c);
    free(xq);
    free(xs);
}
