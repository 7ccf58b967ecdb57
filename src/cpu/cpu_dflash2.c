// CPU DFlash2 drafter ops: the grouped dynamic two-tap causal conv around every draft sublayer, and non-causal
// attention with a symmetric sliding window (DFlash2 drafters publish `sliding_attention` layers) over either
// KV cache layout (route kv = f32 | e4m3).
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

// Non-causal attention over the draft block and its context with a symmetric window: the shared CPU attention
// (cpu_attn.c, both kv layouts) restricted to keys within window - 1 of each query's position.
static void cpu_attention_window(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n,
                                 int H, int Hkv, int hd, float scale, int window) {
    FD_CHECK(window >= 1, "attention_window: window %d", window);
    cpu_attention_keys(be, out, q, kv, pos0, n, H, Hkv, hd, scale, 0, window);
}

void cpu_install_dflash2(fd_backend *be) {
    be->dyn_conv = cpu_dyn_conv;
    be->attention_window = cpu_attention_window;
}
