// DFlash2 drafter ops on the GPU (backend.h: dyn_conv, attention_window). Both run on draft blocks of a few rows
// (B <= 16 tokens), so they are written for clarity and exact agreement with the CPU reference, not for peak speed:
// a DFlash2 round spends its time in the GEMMs and the target's verify, not here.
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

// out[i, c] = sum_{t < K, t <= i} (base[t, c] + dyn[i * dyn_stride + t * G + c / group]) x[i - t, c], G = d / group.
// The two products are added separately (base first), the order of the CPU reference and of the published code.
__global__ void k_dyn_conv(float *out, const float *x, const float *dyn, int dyn_stride, const void *base, int base_bf16,
                           int64_t b0, int n, int d, int group, int K) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * d) return;
    const int i = (int)(idx / d), c = (int)(idx - (int64_t)i * d), G = d / group;
    const float *dy = dyn + (int64_t)i * dyn_stride;
    float acc = 0.f;
    for (int t = 0; t < K && t <= i; t++) {
        const float v = x[(int64_t)(i - t) * d + c];
        const int64_t bi = b0 + (int64_t)t * d + c;
        const float bw = base_bf16 ? __bfloat162float(((const __nv_bfloat16 *)base)[bi]) : ((const float *)base)[bi];
        acc += bw * v;
        acc += dy[t * G + c / group] * v;
    }
    out[idx] = acc;
}

static void cu_dyn_conv(fd_backend *be, void *out, const void *x, const float *dyn, int dyn_stride,
                        const fd_weight *base_w, int half, int n, int d, int group, int K) {
    FD_CHECK(group > 0 && d / group * group == d && (half == 0 || half == 1), "dyn_conv: group %d, d %d", group, d);
    FD_CHECK(base_w->dev && (base_w->dev_dtype == FD_F32 || base_w->dev_dtype == FD_BF16),
             "dyn_conv: base weight %s not uploaded as f32/bf16", base_w->name ? base_w->name : "?");
    if (n <= 0) return;
    const int64_t total = (int64_t)n * d;
    k_dyn_conv<<<cu_blocks(total, 256), 256, 0, cu_of(be)->stream>>>(
        (float *)out, (const float *)x, dyn, dyn_stride, base_w->dev, base_w->dev_dtype == FD_BF16,
        (int64_t)half * K * d, n, d, group, K);
    FD_CUDA_LAUNCH_CHECK();
}

// Non-causal attention with a symmetric window: query t (position pos0 + t) sees keys j < pos0 + n with
// |pos0 + t - j| < window. One warp per (token, head) row; lane l holds dims l, l + 32, ... (hd <= 256); online
// softmax in fp32 over the window's keys in increasing order.
#define WIN_MAXD 256
__global__ void k_attn_window(float *out, const float *q, cu_kv kv, int64_t pos0, int n, int H, int Hkv, int hd,
                              float scale, int window) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= (int64_t)n * H) return;
    const int t = (int)(row / H), h = (int)(row - (int64_t)t * H), kvh = h / (H / Hkv);
    const int64_t qp = pos0 + t, span = pos0 + n;
    const int64_t lo = qp - window + 1 > 0 ? qp - window + 1 : 0, hi = qp + window - 1 < span - 1 ? qp + window - 1 : span - 1;
    constexpr int PER = WIN_MAXD / 32;
    float qv[PER], acc[PER];
#pragma unroll
    for (int e = 0; e < PER; e++) {
        const int x = lane + 32 * e;
        qv[e] = x < hd ? q[row * hd + x] : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int64_t j = lo; j <= hi; j++) {
        const int64_t r = j * Hkv + kvh;
        float dot = 0.f;
#pragma unroll
        for (int e = 0; e < PER; e++) {
            const int x = lane + 32 * e;
            if (x < hd) dot += qv[e] * cu_kv_elem(kv.k, kv.k8, kv.ks, r, hd, x);
        }
        const float s = cu_warp_sum(dot) * scale;
        const float mn = fmaxf(m, s), alpha = expf(m - mn), p = expf(s - mn); // m = -inf first: alpha = 0
        l = l * alpha + p;
#pragma unroll
        for (int e = 0; e < PER; e++) {
            const int x = lane + 32 * e;
            if (x < hd) acc[e] = acc[e] * alpha + p * cu_kv_elem(kv.v, kv.v8, kv.vs, r, hd, x);
        }
        m = mn;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
    for (int e = 0; e < PER; e++) {
        const int x = lane + 32 * e;
        if (x < hd) out[row * hd + x] = acc[e] * inv;
    }
}

static void cu_attention_window(fd_backend *be, void *out, const void *q, const void *cache, int64_t pos0, int n, int H,
                                int Hkv, int hd, int64_t capacity, float scale, int window) {
    FD_CHECK(window >= 1, "attention_window: window %d", window);
    FD_CHECK(hd >= 1 && hd <= WIN_MAXD, "attention_window: head_dim %d unsupported (max %d)", hd, WIN_MAXD);
    FD_CHECK(Hkv > 0 && H % Hkv == 0, "attention_window: %d heads over %d kv heads", H, Hkv);
    if (n <= 0) return;
    const cu_kv kv = cu_kv_view(be, cache, capacity, Hkv, hd);
    const int64_t rows = (int64_t)n * H;
    k_attn_window<<<cu_blocks(rows * 32, 128), 128, 0, cu_of(be)->stream>>>((float *)out, (const float *)q, kv, pos0, n,
                                                                           H, Hkv, hd, scale, window);
    FD_CUDA_LAUNCH_CHECK();
}

void cu_install_dflash2(fd_backend *be) {
    be->dyn_conv = cu_dyn_conv;
    be->attention_window = cu_attention_window;
}
