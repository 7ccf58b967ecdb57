// DFlash2 drafter ops on the GPU (backend.h: dyn_conv, attention_window); the CPU reference is
// src/cpu/cpu_dflash2.c.
//
// dyn_conv: the grouped dynamic causal conv around a draft sublayer. One thread per output element (block row i,
// channel c); K (the taps, 2 in the published drafters) is tiny, so each thread reads K inputs and K taps. The
// products are added in the CPU's order with explicitly rounded fp32 operations (no FMA contraction), so the GPU
// result equals the CPU reference bit for bit on the same inputs.
//
// attention_window: the drafter block's non-causal attention with a symmetric sliding window, used when the
// window binds (the context is longer than the window). Query i (position p = pos0 + i) sees keys j with
// |p - j| < window and j < pos0 + n. Same tiling as the CUDA-core attention kernel (attention.cu): the query rows
// of one KV head's group, (token t, head g) flattened as r = t*G + g, are tiled 16 per block (4 warps x 4 rows)
// so one K/V tile in shared memory serves the whole group; keys stream in tiles of 32 (lane j scores key j) with
// an online softmax; each row keeps its own key bounds [lo, hi]. A drafter block has few queries (B <= 16 rows
// per head) and a context up to the cache capacity, so the key range (the union of the rows' windows) is split
// over the grid (split-K) and a combine kernel merges the partials. K/V come through the cu_kv helpers, so the
// bf16 and the e4m3 cache layouts (route kv) are both read, dequantised to bf16 as they enter shared memory.
#include <math.h>

#include "cuda/cuda_common.h"

// ---- dyn_conv ----

// out[i, c] = sum_{t < K, t <= i} (base[t, c] + dyn[i * dyn_stride + t * G + c / group]) * x[i - t, c]
// base: the K x d taps of the chosen half (bf16 or fp32 on the device).
__global__ void k_dyn_conv(float *out, const float *x, const float *dyn, int dyn_stride, const void *base,
                           int base_bf16, int n, int d, int group, int K) {
    CU_PDL_ENTER();
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * d) return;
    const int i = (int)(idx / d), c = (int)(idx - (int64_t)i * d);
    const int G = d / group;
    const float *dy = dyn + (int64_t)i * dyn_stride + c / group;
    float acc = 0.f;
    for (int t = 0; t < K && t <= i; t++) {
        const float v = x[(int64_t)(i - t) * d + c];
        const int64_t bi = (int64_t)t * d + c;
        const float b = base_bf16 ? __bfloat162float(((const __nv_bfloat16 *)base)[bi]) : ((const float *)base)[bi];
        // two separate rounded products, base first, as the CPU reference adds them
        acc = __fadd_rn(acc, __fmul_rn(b, v));
        acc = __fadd_rn(acc, __fmul_rn(dy[(int64_t)t * G], v));
    }
    out[idx] = acc;
}

static void cu_dyn_conv(fd_backend *be, void *out, const void *x, const float *dyn, int dyn_stride,
                        const fd_weight *base_w, int half, int n, int d, int group, int K) {
    if (n <= 0) return;
    FD_CHECK(group > 0 && d % group == 0 && (half == 0 || half == 1) && K >= 1,
             "dyn_conv: group %d, d %d, half %d, K %d", group, d, half, K);
    FD_CHECK(dyn_stride >= K * (d / group), "dyn_conv: dyn stride %d < K * d / group = %d", dyn_stride,
             K * (d / group));
    FD_CHECK(base_w->rows * base_w->cols == (int64_t)2 * K * d,
             "dyn_conv: base kernel %s has %lld values, want 2 x %d x %d", base_w->name ? base_w->name : "?",
             (long long)(base_w->rows * base_w->cols), K, d);
    FD_CHECK(base_w->dev && (base_w->dev_dtype == FD_BF16 || base_w->dev_dtype == FD_F32),
             "dyn_conv: base kernel %s not uploaded as bf16/fp32", base_w->name ? base_w->name : "?");
    const int bf16 = base_w->dev_dtype == FD_BF16;
    const int64_t off = (int64_t)half * K * d; // element offset of the half's taps
    const void *base = bf16 ? (const void *)((const __nv_bfloat16 *)base_w->dev + off)
                            : (const void *)((const float *)base_w->dev + off);
    const int64_t count = (int64_t)n * d;
    cu_launch(be, k_dyn_conv, cu_blocks(count, 256), 256, 0, (float *)out, (const float *)x, dyn, dyn_stride, base,
              bf16, n, d, group, K);
}

// ---- attention_window ----

#define WIN_BQ   16 // query rows per block
#define WIN_QW   4  // query rows per warp
#define WIN_BK   32 // keys per tile
#define WIN_MAXP 4  // bf16 pairs per lane per row: hd <= 256

// The keys a query at position p sees: [max(0, p - window + 1), min(last, p + window - 1)], last = pos0 + n - 1.
static __device__ __forceinline__ int64_t win_lo(int64_t p, int window) {
    return p - window + 1 > 0 ? p - window + 1 : 0;
}
static __device__ __forceinline__ int64_t win_hi(int64_t p, int window, int64_t last) {
    return p + window - 1 < last ? p + window - 1 : last;
}

// q [n, H, hd] f32; out [n, H*hd] f32, or with splits (opart != NULL) the unnormalised partials
// opart [S, n, H, hd] and ml [S, n, H, 2] = (running max, sum). Split z covers keys [k0 + z*chunk, k0 + (z+1)*chunk).
// Shared: Qs [16][hd] f32, Kt [32][hd/2 + 1] bf16x2 (padded: lanes read 32 rows of one column), Vt [32][hd/2].
__global__ void __launch_bounds__(128)
    k_attention_window(float *out, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0, int n, int H,
                       int Hkv, int hd, float scale, int window, int64_t k0, int64_t chunk) {
    CU_PDL_ENTER();
    extern __shared__ float sm[];
    const int hd2 = hd / 2, ldk = hd2 + 1, G = H / Hkv, R = n * G;
    float *Qs = sm;
    __nv_bfloat162 *Kt = (__nv_bfloat162 *)(Qs + WIN_BQ * hd);
    __nv_bfloat162 *Vt = Kt + WIN_BK * ldk;
    const int kvh = blockIdx.y, z = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int r0 = blockIdx.x * WIN_BQ;
    const int64_t last = pos0 + n - 1;
    for (int e = threadIdx.x; e < WIN_BQ * hd; e += blockDim.x) {
        const int i = e / hd, dd = e - i * hd, r = r0 + i;
        Qs[e] = r < R ? q[((int64_t)(r / G) * H + kvh * G + r % G) * hd + dd] : 0.f;
    }
    float m[WIN_QW], l[WIN_QW], acc[WIN_QW][2 * WIN_MAXP];
    int64_t lo[WIN_QW], hi[WIN_QW]; // per row key bounds; hi < lo marks a padding row
#pragma unroll
    for (int a = 0; a < WIN_QW; a++) {
        const int r = r0 + w * WIN_QW + a;
        const int64_t p = pos0 + r / G;
        lo[a] = r < R ? win_lo(p, window) : 0;
        hi[a] = r < R ? win_hi(p, window, last) : -1;
        m[a] = -INFINITY, l[a] = 0.f;
#pragma unroll
        for (int e = 0; e < 2 * WIN_MAXP; e++) acc[a][e] = 0.f;
    }
    // keys any row of this block sees, clipped to this split
    const int t_first = r0 / G, t_last = min(n - 1, (r0 + WIN_BQ - 1) / G);
    int64_t kbeg = k0 + (int64_t)z * chunk, kend = kbeg + chunk;
    kbeg = max(kbeg, win_lo(pos0 + t_first, window));
    kend = min(kend, win_hi(pos0 + t_last, window, last) + 1);
    for (int64_t kt0 = kbeg; kt0 < kend; kt0 += WIN_BK) {
        __syncthreads(); // previous tile consumed (and Qs written, on the first pass)
        const cu_kv_tile pt = cu_kv_tile_at(kv, kt0, min(kend, kt0 + WIN_BK)); // unaligned tile: <= 2 pages
        for (int e = threadIdx.x; e < WIN_BK * hd2; e += blockDim.x) {
            const int j = e / hd2, d2 = e - j * hd2;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t row = (ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh;
            const __nv_bfloat162 z2 = __floats2bfloat162_rn(0.f, 0.f);
            Kt[j * ldk + d2] = ok ? cu_kv_pair(kv.k, kv.k8, kv.ks, row, hd, 2 * d2) : z2;
            Vt[j * hd2 + d2] = ok ? cu_kv_pair(kv.v, kv.v8, kv.vs, row, hd, 2 * d2) : z2;
        }
        __syncthreads();
        float s[WIN_QW];
#pragma unroll
        for (int a = 0; a < WIN_QW; a++) s[a] = 0.f;
        const float *qw = Qs + (w * WIN_QW) * hd;
        for (int d2 = 0; d2 < hd2; d2++) {
            const float2 kf = __bfloat1622float2(Kt[lane * ldk + d2]);
#pragma unroll
            for (int a = 0; a < WIN_QW; a++) s[a] += qw[a * hd + 2 * d2] * kf.x + qw[a * hd + 2 * d2 + 1] * kf.y;
        }
        float p[WIN_QW];
        const int64_t kp = kt0 + lane;
#pragma unroll
        for (int a = 0; a < WIN_QW; a++) {
            const bool vis = kp >= lo[a] && kp <= hi[a] && kp < kend;
            const float sa = vis ? s[a] * scale : -INFINITY;
            const float mn = fmaxf(m[a], cu_warp_max(sa)); // warp-uniform
            if (mn == -INFINITY) {                          // no visible key yet for this row
                p[a] = 0.f;
                continue;
            }
            const float alpha = expf(m[a] - mn); // m = -inf -> 0
            p[a] = vis ? expf(sa - mn) : 0.f;
            l[a] = l[a] * alpha + cu_warp_sum(p[a]);
            m[a] = mn;
#pragma unroll
            for (int e = 0; e < 2 * WIN_MAXP; e++) acc[a][e] *= alpha;
        }
        for (int j = 0; j < WIN_BK; j++) {
            float pj[WIN_QW];
#pragma unroll
            for (int a = 0; a < WIN_QW; a++) pj[a] = __shfl_sync(0xffffffffu, p[a], j);
#pragma unroll
            for (int mm = 0; mm < WIN_MAXP; mm++) {
                const int d2 = lane + 32 * mm;
                if (d2 < hd2) {
                    const float2 vf = __bfloat1622float2(Vt[j * hd2 + d2]);
#pragma unroll
                    for (int a = 0; a < WIN_QW; a++) {
                        acc[a][2 * mm] += pj[a] * vf.x;
                        acc[a][2 * mm + 1] += pj[a] * vf.y;
                    }
                }
            }
        }
    }
    // Every split writes every real row (an empty key range leaves max -inf, sum 0): the combine reads all S.
#pragma unroll
    for (int a = 0; a < WIN_QW; a++) {
        if (hi[a] < lo[a]) continue;
        const int r = r0 + w * WIN_QW + a;
        const int64_t th = (int64_t)(r / G) * H + kvh * G + r % G; // token * H + head
        const float sc = opart ? 1.f : (l[a] > 0.f ? 1.f / l[a] : 0.f);
        float *orow = opart ? opart + ((int64_t)z * n * H + th) * hd : out + th * hd;
#pragma unroll
        for (int mm = 0; mm < WIN_MAXP; mm++) {
            const int d2 = lane + 32 * mm;
            if (d2 < hd2) {
                orow[2 * d2] = acc[a][2 * mm] * sc;
                orow[2 * d2 + 1] = acc[a][2 * mm + 1] * sc;
            }
        }
        if (opart && lane == 0) {
            ml[((int64_t)z * n * H + th) * 2] = m[a];
            ml[((int64_t)z * n * H + th) * 2 + 1] = l[a];
        }
    }
}

// Merges the S split partials of each (token, head) row, one warp per row:
// out = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z, M = max_z m_z (splits with m_z = -inf saw no key).
__global__ void k_win_combine(float *out, const float *opart, const float *ml, int S, int64_t rows, int hd) {
    CU_PDL_ENTER();
    const int64_t th = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (th >= rows) return;
    float M = -INFINITY;
    for (int z = lane; z < S; z += 32) M = fmaxf(M, ml[(z * rows + th) * 2]);
    M = cu_warp_max(M);
    float L = 0.f;
    for (int z = lane; z < S; z += 32) {
        const float mz = ml[(z * rows + th) * 2];
        L += mz == -INFINITY ? 0.f : expf(mz - M) * ml[(z * rows + th) * 2 + 1];
    }
    L = cu_warp_sum(L);
    const float inv = L > 0.f ? 1.f / L : 0.f;
    for (int dd = lane; dd < hd; dd += 32) {
        float o = 0.f;
        for (int z = 0; z < S; z++) {
            const float mz = ml[(z * rows + th) * 2];
            if (mz != -INFINITY) o += expf(mz - M) * opart[(z * rows + th) * hd + dd];
        }
        out[th * hd + dd] = o * inv;
    }
}

static void cu_attention_window(fd_backend *be, void *out, const void *q, const fd_kv_view *view, int64_t pos0, int n,
                                int H, int Hkv, int hd, float scale, int window) {
    const int64_t capacity = view->capacity;
    if (n <= 0) return;
    FD_CHECK(window >= 1, "attention_window: window %d", window);
    if ((hd & 1) || hd > 2 * 32 * WIN_MAXP) FD_PANIC("attention_window: head_dim %d unsupported (even, <= 256)", hd);
    if (Hkv <= 0 || H % Hkv) FD_PANIC("attention_window: %d heads not a multiple of %d kv heads", H, Hkv);
    FD_CHECK(pos0 >= 0 && pos0 + n <= capacity, "attention_window beyond cache capacity");
    cu_impl *c = cu_of(be);
    const cu_kv kv = cu_kv_view(be, view, Hkv, hd);
    const size_t smem = (size_t)WIN_BQ * hd * 4 + (size_t)WIN_BK * (hd / 2 + 1) * 4 + (size_t)WIN_BK * (hd / 2) * 4;
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_attention_window, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t rows = (int64_t)n * (H / Hkv), tiles = (rows + WIN_BQ - 1) / WIN_BQ, blocks = tiles * Hkv;
    FD_CHECK(tiles < (1ll << 31));
    // Keys that any query sees: from the first query's window start to the block's last position.
    const int64_t k0 = pos0 - window + 1 > 0 ? pos0 - window + 1 : 0, keys = pos0 + n - k0;
    // Split the key range when the row tiles leave most SMs idle (always, for a drafter block); each split keeps
    // >= 256 keys so the partials stay a small fraction of the traffic.
    int64_t S = 1;
    if (blocks < 2 * c->num_sms) {
        S = (2 * c->num_sms + blocks - 1) / blocks;
        const int64_t max_s = (keys + 255) / 256;
        if (S > max_s) S = max_s;
        if (S > 1024) S = 1024;
        if (S < 1) S = 1;
    }
    int64_t chunk = (keys + S - 1) / S;
    chunk = (chunk + WIN_BK - 1) / WIN_BK * WIN_BK;
    S = (keys + chunk - 1) / chunk;
    float *opart = NULL, *ml = NULL;
    if (S > 1) {
        opart = (float *)cu_scratch(be, CU_SCR_B, (size_t)S * n * H * hd * 4);
        ml = (float *)cu_scratch(be, CU_SCR_C, (size_t)S * n * H * 2 * 4);
    }
    cu_prof pr;
    cu_prof_begin(be, &pr, "attention_window", n);
    const dim3 grid((unsigned)tiles, (unsigned)Hkv, (unsigned)S);
    cu_launch(be, k_attention_window, grid, 128, smem, (float *)out, opart, ml, (const float *)q, kv, pos0, n, H, Hkv,
              hd, scale, window, k0, chunk);
    cu_prof_mark(be, &pr, S > 1 ? "splits" : "main");
    if (S > 1) {
        const int64_t nH = (int64_t)n * H;
        cu_launch(be, k_win_combine, cu_blocks(nH * 32, 128), 128, 0, (float *)out, opart, ml, (int)S, nH, hd);
        cu_prof_mark(be, &pr, "combine");
    }
    cu_prof_end(be, &pr);
}

void cu_install_dflash2(fd_backend *be) {
    be->dyn_conv = cu_dyn_conv;
    be->attention_window = cu_attention_window;
}
