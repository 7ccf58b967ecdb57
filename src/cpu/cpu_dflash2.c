// CPU DFlash2 drafter ops: the grouped dynamic two-tap causal conv around every draft sublayer, and non-causal
// attention with a symmetric sliding window (DFlash2 drafters publish `sliding_attention` layers) over either
// KV cache layout (route kv = f32 | e4m3).
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"

// The reference adds the base and the dynamic term as two separate products (out += base x; out += dyn x);
// the same order here keeps the fp32 rounding close to it.
static void cpu_dyn_conv(fd_backend *be, void *out, const void *x, const float *dyn, int dyn_stride,
                         const fd_weight *base_w, int half, int n, int d, int group, int K) {
    (void)be;
    FD_CHECK(group > 0 && d / group * group == d && (half == 0 || half == 1), "dyn_conv: group %d, d %d", group, d);
    const float *X = x;
    float *O = out;
    const int G = d / group;
    const int64_t b0 = (int64_t)half * K * d;
    for (int64_t i = 0; i < n; i++) {
        const float *dy = dyn + i * dyn_stride;
        for (int c = 0; c < d; c++) {
            float acc = 0;
            for (int t = 0; t < K && t <= i; t++) {
                const float v = X[(i - t) * d + c];
                acc += cpu_w_at(base_w, b0 + (int64_t)t * d + c) * v;
                acc += dy[t * G + c / group] * v;
            }
            O[i * d + c] = acc;
        }
    }
}

typedef struct {
    float *out;
    const float *q, *K, *V; // f32 cache layout
    const uint8_t *k8, *v8; // e4m3 layout (when K is NULL), with one f32 scale per (token, kv head) row
    const float *ks, *vs;
    float lut[256]; // e4m3 code -> value
    int64_t pos0;
    int n, H, Hkv, hd, window;
    float scale;
} win_ctx;

// Key or value row (token j, kv head h) as f32: in place (f32 layout) or dequantised into tmp (e4m3).
static const float *win_kv_row(const win_ctx *c, int is_v, int64_t j, int h, float *tmp) {
    const int64_t at = j * c->Hkv + h;
    if (c->K) return (is_v ? c->V : c->K) + at * c->hd;
    const uint8_t *b = (is_v ? c->v8 : c->k8) + at * c->hd;
    const float s = (is_v ? c->vs : c->ks)[at];
    for (int x = 0; x < c->hd; x++) tmp[x] = c->lut[b[x]] * s;
    return tmp;
}

static void win_rows(void *p, int64_t b, int64_t e) {
    win_ctx *c = p;
    const int hd = c->hd, group = c->H / c->Hkv;
    const int64_t span = c->pos0 + c->n;
    float *sc = fd_malloc((size_t)span * 4), *tmp = fd_malloc((size_t)hd * 4);
    for (int64_t idx = b; idx < e; idx++) {
        const int64_t t = idx / c->H, qp = c->pos0 + t;
        const int h = (int)(idx % c->H), kvh = h / group;
        // keys strictly within the window on either side of the query's position
        const int64_t lo = qp - c->window + 1 > 0 ? qp - c->window + 1 : 0;
        const int64_t hi = qp + c->window - 1 < span - 1 ? qp + c->window - 1 : span - 1;
        const float *q = c->q + idx * hd;
        float mx = -INFINITY;
        for (int64_t j = lo; j <= hi; j++) {
            const float *kr = win_kv_row(c, 0, j, kvh, tmp);
            float d = 0;
            for (int x = 0; x < hd; x++) d += q[x] * kr[x];
            sc[j] = d * c->scale;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int64_t j = lo; j <= hi; j++) sum += sc[j] = expf(sc[j] - mx);
        const float inv = (float)(1.0 / sum);
        float *o = c->out + (t * c->H + h) * hd;
        for (int x = 0; x < hd; x++) o[x] = 0;
        for (int64_t j = lo; j <= hi; j++) {
            const float *vr = win_kv_row(c, 1, j, kvh, tmp), w = sc[j] * inv;
            for (int x = 0; x < hd; x++) o[x] += w * vr[x];
        }
    }
    free(sc);
    free(tmp);
}

static void cpu_attention_window(fd_backend *be, void *out, const void *q, const void *cache, int64_t pos0, int n,
                                 int H, int Hkv, int hd, int64_t capacity, float scale, int window) {
    FD_CHECK(window >= 1, "attention_window: window %d", window);
    win_ctx *c = fd_calloc(1, sizeof *c);
    *c = (win_ctx){.out = out, .q = q, .pos0 = pos0, .n = n, .H = H, .Hkv = Hkv, .hd = hd, .window = window,
                   .scale = scale};
    // The two cache layouts of route kv (cpu_attn.c): f32 K rows then V rows, or e4m3 K, e4m3 V, then the K and
    // V scales [capacity, Hkv].
    const int64_t plane = capacity * Hkv * hd;
    if (cpu_of(be)->kv == CPU_KV_E4M3) {
        c->k8 = cache;
        c->v8 = c->k8 + plane;
        c->ks = (const float *)(c->k8 + 2 * plane);
        c->vs = c->ks + capacity * Hkv;
        for (int b = 0; b < 256; b++) c->lut[b] = fd_e4m3_to_f32((uint8_t)b);
    } else {
        c->K = cache;
        c->V = c->K + plane;
    }
    fd_parallel_for((int64_t)n * H, 1, win_rows, c);
    free(c);
}

void cpu_install_dflash2(fd_backend *be) {
    be->dyn_conv = cpu_dyn_conv;
    be->attention_window = cpu_attention_window;
}
