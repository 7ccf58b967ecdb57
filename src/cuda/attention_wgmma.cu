// Attention prefill on Hopper warpgroup MMA (route attn_kernel = wgmma, sm_90a): the flash-attention forward of
// attention_mma.cu with its two products on wgmma.mma_async instead of mma.sync, for head_dim 256 over a bf16 or
// an e4m3 cache (other head dims take the mma kernel). Same inputs, rows, causal / GQA rules, paged and
// contiguous caches, pos0 / pos_dev and output contract as the mma kernel.
//
// Rows are the (token, head-of-group) pairs of one KV head, r = t*G + g. Block = 2 warpgroups x 64 rows = 128 rows;
// key tiles of 64, two cp.async stages, one barrier per tile (as the mma kernel).
//   S = Q K^T   wgmma m64n64k16, 16 k-steps over the head dim; A = the warpgroup's 64 Q rows, B = the 64 keys
//               (K[key][dim]: B stored N x K, "K-major"), both from shared memory through descriptors
//   softmax     on the S accumulators in registers (base-2, scale * log2(e) folded in), exactly the mma kernel's
//   O += P V    wgmma m64n256k16, 4 k-steps of 16 keys; A = P from registers (the accumulator of two 8-key column
//               groups is the A fragment of one 16-key step, rounded to bf16), B = V[key][dim] from shared memory
//               (B stored K x N with N contiguous: "MN-major", imm-trans-b = 1)
// Registers per thread: O 64 x 256 fp32 over 128 threads = 128, S 64 x 64 = 32, P as bf16 16, plus the row
// state and addresses (launch bound 256 threads x 1 block: up to 255 each).
//
// Shared memory, every operand in the canonical 128-byte-swizzle layout wgmma descriptors take (PTX ISA, "shared
// memory matrix layout"): a [rows][256] bf16 matrix is 4 panels of 64 columns, each panel rows x 128 bytes, and
// the 16-byte chunk j of row i sits at chunk j ^ (i % 8) of its row (the hardware applies that XOR to address bits
// 4-6 from bits 7-9, so every panel starts on a 1024-byte boundary: base offset 0).
//   Q  128 x 256   64 KB   (warpgroup w's rows at w * 64 * 128 inside each 16 KB panel)
//   bf16 cache: two stages of K 64 x 256 and V 64 x 256, 32 KB each: 128 KB;  total 192 KB + 1 KB of alignment slack
//   e4m3 cache (as the mma kernel's): one bf16 K and V tile (64 KB), then two stages of the raw e4m3 K8 and V8
//   [64][256] bytes (unswizzled, 32 KB a stage) and two stages of the fp32 scales Ksc, Vsc [64] (512 bytes a
//   stage); once per tile the block converts the raw stage into the bf16 tile (exact: every e4m3 value is a bf16
//   value), fences it for the async proxy, and meets at a second barrier. The K scale multiplies S's key columns
//   (with the softmax scale), the V scale P's key columns before their bf16 rounding (the sums use the unscaled P).
//   Total 193 KB + 1 KB of slack.
// Descriptors: K-major operands (Q, K): stride byte offset 1024 (8 rows of 128 bytes), leading offset unused; a
// 16-wide k-step at column 16 kk starts at panel kk / 4, byte 32 (kk % 4). MN-major V: leading byte offset 8192
// (the next 64 dims = the next panel), stride byte offset 1024 (the next 8 keys); key step j starts at 2048 j.
//
// Synchronisation: cp.async lands through the generic proxy and wgmma reads through the async proxy, so each
// thread fences (fence.proxy.async) its landed copies and Q stores before the tile barrier. wgmma.fence before
// each batch; commit + wait_group 0 before the accumulators are read (S) or the stage may be refilled (O).
//
// Precision: Q, K, V and P enter the tensor cores as bf16; scores, max, sums and O accumulate in fp32 (as mma).
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"
#include "cuda/wgmma_ptx.cuh"

#define WG_BM      128 // query rows per block: 2 warpgroups x 64
#define WG_BN      64  // keys per tile
#define WG_HD      256
#define WG_THREADS 256

// Byte offsets inside the 1024-aligned shared window.
#define WG_Q_PANEL  (WG_BM * 128)   // 16 KB: 128 rows x 64 dims
#define WG_Q_BYTES  (4 * WG_Q_PANEL) // 64 KB
#define WG_KV_PANEL (WG_BN * 128)   // 8 KB: 64 keys x 64 dims
#define WG_TILE     (4 * WG_KV_PANEL) // 32 KB: one K or V tile
#define WG_STAGE    (2 * WG_TILE)     // K then V
#define WG_SMEM     ((size_t)WG_Q_BYTES + 2 * WG_STAGE + 1024)
// e4m3 cache: the converted tile at WG_Q_BYTES (one WG_STAGE), then the raw stages, then the scale stages
#define WG_RAW_OFF   (WG_Q_BYTES + WG_STAGE)
#define WG_RAW_TILE  (WG_BN * WG_HD)     // 16 KB: one raw K8 or V8 tile
#define WG_RAW_STAGE (2 * WG_RAW_TILE)
#define WG_SC_OFF    (WG_RAW_OFF + 2 * WG_RAW_STAGE)
#define WG_SC_STAGE  (2 * WG_BN * 4)     // Ksc then Vsc
#define WG_SMEM_E4   ((size_t)WG_SC_OFF + 2 * WG_SC_STAGE + 1024)

// Element (row, col) of a [rows][256] bf16 matrix in the swizzled panel layout (see the header).
static __device__ __forceinline__ uint32_t sw128_off(int row, int col, uint32_t panel_bytes) {
    return (uint32_t)(col >> 6) * panel_bytes + (uint32_t)row * 128u + (uint32_t)((((col >> 3) & 7) ^ (row & 7)) << 4) +
           (uint32_t)(col & 7) * 2u;
}

// A shared-memory matrix descriptor (PTX ISA "matrix descriptor format"): bits 0-13 start address >> 4, 16-29
// leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 49-51 base offset (0: the swizzle
// patterns start on 1024-byte boundaries), 62-63 swizzle mode 1 (128-byte). Here, not in wgmma_ptx.cuh, so that
// tools/wg_emu.cpp decodes what the kernel encodes.
static __device__ __forceinline__ uint64_t wg_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)((lbo & 0x3ffff) >> 4) << 16 |
           (uint64_t)((sbo & 0x3ffff) >> 4) << 32 | 1ull << 62;
}

static __device__ __forceinline__ uint32_t wg_pack2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
}

// Two e4m3 bytes (the first element in the low byte) -> bf16x2, exactly (e4m3 -> f16 -> f32 -> bf16 loses nothing).
static __device__ __forceinline__ uint32_t wg_e4m3x2(uint32_t two) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return wg_pack2(f.x, f.y);
}

// Issues the copies of key tile [kt0, kt0 + BN) into stage `st` (keys >= kend zero-filled: 0 * NaN would poison
// O). bf16: straight into the swizzled K / V stage; e4m3: the raw bytes and the scales into their stages.
template <bool E4>
static __device__ __forceinline__ void wg_issue_tile(unsigned char *sm, int st, cu_kv kv, int64_t kt0, int64_t kend,
                                                     int Hkv, int kvh) {
    const cu_kv_tile pt = cu_kv_tile_at(kv, kt0, min(kend, kt0 + WG_BN));
    if (!E4) {
        unsigned char *stage = sm + WG_Q_BYTES + st * WG_STAGE;
#pragma unroll 4
        for (int e = threadIdx.x; e < WG_BN * (WG_HD / 8); e += WG_THREADS) {
            const int j = e / (WG_HD / 8), c8 = (e % (WG_HD / 8)) * 8;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t off = ((ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh) * WG_HD + c8;
            const uint32_t at = sw128_off(j, c8, WG_KV_PANEL);
            wg_cp16(stage + at, kv.k + off, ok);
            wg_cp16(stage + WG_TILE + at, kv.v + off, ok);
        }
    } else {
        unsigned char *raw = sm + WG_RAW_OFF + st * WG_RAW_STAGE;
        float *sc = (float *)(sm + WG_SC_OFF + st * WG_SC_STAGE);
#pragma unroll 4
        for (int e = threadIdx.x; e < WG_BN * (WG_HD / 16); e += WG_THREADS) {
            const int j = e / (WG_HD / 16), c16 = (e % (WG_HD / 16)) * 16;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t off = ((ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh) * WG_HD + c16;
            wg_cp16(raw + j * WG_HD + c16, kv.k8 + off, ok);
            wg_cp16(raw + WG_RAW_TILE + j * WG_HD + c16, kv.v8 + off, ok);
        }
        if (threadIdx.x < 2 * WG_BN) {
            const int j = threadIdx.x & (WG_BN - 1), isv = threadIdx.x >= WG_BN;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t row = (ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh;
            wg_cp4(sc + isv * WG_BN + j, (isv ? kv.vs : kv.ks) + row, ok);
        }
    }
    wg_commit();
}

// e4m3: raw stage `st` -> the bf16 K / V tile in the swizzled layout (16 values per thread and step).
static __device__ __forceinline__ void wg_convert_tile(unsigned char *sm, int st) {
    const unsigned char *raw = sm + WG_RAW_OFF + st * WG_RAW_STAGE;
#pragma unroll 4
    for (int e = threadIdx.x; e < 2 * WG_BN * (WG_HD / 16); e += WG_THREADS) {
        const int isv = e >= WG_BN * (WG_HD / 16), e2 = e - isv * WG_BN * (WG_HD / 16);
        const int j = e2 / (WG_HD / 16), c16 = (e2 % (WG_HD / 16)) * 16;
        const uint4 r = *(const uint4 *)(raw + isv * WG_RAW_TILE + j * WG_HD + c16);
        unsigned char *tile = sm + WG_Q_BYTES + isv * WG_TILE;
        uint4 lo, hi;
        lo.x = wg_e4m3x2(r.x), lo.y = wg_e4m3x2(r.x >> 16), lo.z = wg_e4m3x2(r.y), lo.w = wg_e4m3x2(r.y >> 16);
        hi.x = wg_e4m3x2(r.z), hi.y = wg_e4m3x2(r.z >> 16), hi.z = wg_e4m3x2(r.w), hi.w = wg_e4m3x2(r.w >> 16);
        *(uint4 *)(tile + sw128_off(j, c16, WG_KV_PANEL)) = lo;
        *(uint4 *)(tile + sw128_off(j, c16 + 8, WG_KV_PANEL)) = hi;
    }
}

// q [n, H, 256] f32 -> out [n, H*256] f32. Grid: one block per (row tile, kv head), heaviest row tile first.
template <bool E4>
__global__ void __launch_bounds__(WG_THREADS, 1)
    k_attn_wgmma(float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n, int H, int Hkv,
                 float scale_log2, int causal, int tiles) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[]; // the name tools/gdn_emu's runtime gives the block's shared memory
    unsigned char *sm = (unsigned char *)sm4;
    sm += (1024u - (wg_smem(sm) & 1023u)) & 1023u; // swizzle patterns start on 1024-byte boundaries
    const uint32_t sm_s = wg_smem(sm);
    const int G = H / Hkv, R = n * G;
    const int kvh = (int)(blockIdx.x % (unsigned)Hkv), r0 = (tiles - 1 - (int)(blockIdx.x / (unsigned)Hkv)) * WG_BM;
    const int wg = threadIdx.x >> 7, wi = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    if (pos_dev) pos0 = *pos_dev; // the grid depends on n only, so a replayed graph may move the position

    const int64_t kend = (causal ? pos0 + min(n - 1, (r0 + WG_BM - 1) / G) : pos0 + n - 1) + 1;
    const int ntiles = (int)((kend + WG_BN - 1) / WG_BN);
    wg_issue_tile<E4>(sm, 0, kv, 0, kend, Hkv, kvh); // the first tile flies while Q is converted

    for (int e = threadIdx.x; e < WG_BM * (WG_HD / 8); e += WG_THREADS) { // 8 dims (16 bytes) per step
        const int i = e / (WG_HD / 8), d = (e % (WG_HD / 8)) * 8, r = r0 + i;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        if (r < R) {
            const float *src = q + ((int64_t)(r / G) * H + kvh * G + r % G) * WG_HD + d;
            a = *(const float4 *)src, b = *(const float4 *)(src + 4);
        }
        uint4 v;
        v.x = wg_pack2(a.x, a.y), v.y = wg_pack2(a.z, a.w), v.z = wg_pack2(b.x, b.y), v.w = wg_pack2(b.z, b.w);
        *(uint4 *)(sm + sw128_off(i, d, WG_Q_PANEL)) = v;
    }
    const int rw = r0 + wg * 64, ra = rw + wi * 16 + g, rb = ra + 8; // warpgroup's first row; this thread's two
    const bool wg_live = rw < R;
    const int64_t qa = ra < R ? (causal ? pos0 + ra / G : pos0 + n - 1) : -1;
    const int64_t qb = rb < R ? (causal ? pos0 + rb / G : pos0 + n - 1) : -1;
    // keys <= key_all are visible to every row of the warpgroup (no mask needed); keys > key_last to none of them
    const int64_t key_all = causal ? pos0 + rw / G : pos0 + n - 1;
    const int64_t key_last = causal ? pos0 + min(n - 1, (rw + 63) / G) : pos0 + n - 1;

    float o[128]; // n-group t (dims 8t..8t+7): o[4t] (row a, dim 8t+2c), [4t+1] (a, +1), [4t+2] (row b, 8t+2c), [4t+3]
#pragma unroll
    for (int i = 0; i < 128; i++) o[i] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    const uint32_t q_s = sm_s + (uint32_t)wg * 64u * 128u;

    for (int it = 0; it < ntiles; it++) {
        const int64_t kt0 = (int64_t)it * WG_BN;
        const int st = it & 1;
        wg_wait_all();              // this thread's copies of tile `it` have landed ...
        if (!E4) wg_fence_proxy();  // ... are visible to wgmma's async proxy (so are the Q stores, on tile 0) ...
        __syncthreads();            // ... and everybody's; also: everybody finished tile it-1 (its stage is free)
        if (it + 1 < ntiles) wg_issue_tile<E4>(sm, st ^ 1, kv, kt0 + WG_BN, kend, Hkv, kvh);
        const float *ksc = NULL, *vsc = NULL;
        if (E4) { // the raw stage -> the bf16 tile everybody finished reading at tile it-1
            wg_convert_tile(sm, st);
            wg_fence_proxy(); // the converted tile (and the Q stores, on tile 0) for wgmma's async proxy
            __syncthreads();
            ksc = (const float *)(sm + WG_SC_OFF + st * WG_SC_STAGE), vsc = ksc + WG_BN;
        }
        if (!wg_live || kt0 > key_last) continue; // uniform over the warpgroup: nothing of this tile is visible

        const uint32_t k_s = sm_s + WG_Q_BYTES + (E4 ? 0u : (uint32_t)st * WG_STAGE), v_s = k_s + WG_TILE;
        float s[32]; // n-group t (keys 8t..): s[4t] (row a, key 8t+2c), [4t+1] (a, +1), [4t+2] (row b), [4t+3]
#pragma unroll
        for (int i = 0; i < 32; i++) s[i] = 0.f;
        wg_fence_regs(s);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_HD / 16; kk++) {
            const uint32_t col = (uint32_t)(kk >> 2), byte = (uint32_t)(kk & 3) * 32u;
            wgmma_ss_m64n64(s, wg_desc_sw128(q_s + col * WG_Q_PANEL + byte, 16, 1024),
                            wg_desc_sw128(k_s + col * WG_KV_PANEL + byte, 16, 1024), kk);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wg_fence_regs(s);

        // scale, mask, running max per row (a quad shares a row)
        const bool masked = kt0 + WG_BN - 1 > key_all;
        float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            float v = s[i] * (E4 ? scale_log2 * ksc[(i >> 2) * 8 + 2 * c + (i & 1)] : scale_log2);
            if (masked) {
                const int64_t key = kt0 + (i >> 2) * 8 + 2 * c + (i & 1);
                if (key > ((i & 2) ? qb : qa)) v = -INFINITY;
            }
            s[i] = v;
            if (i & 2)
                mxb = fmaxf(mxb, v);
            else
                mxa = fmaxf(mxa, v);
        }
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
        const float mna = fmaxf(ma, mxa), mnb = fmaxf(mb, mxb);
        // a row with no visible key yet keeps everything at zero (base 0 avoids inf - inf)
        const float basea = mna == -INFINITY ? 0.f : mna, baseb = mnb == -INFINITY ? 0.f : mnb;
        const float alpha_a = wg_exp2(ma - basea), alpha_b = wg_exp2(mb - baseb); // ma = -inf -> 0
        ma = mna, mb = mnb;
        float suma = 0.f, sumb = 0.f;
#pragma unroll
        for (int i = 0; i < 32; i++) {
            s[i] = wg_exp2(s[i] - ((i & 2) ? baseb : basea));
            if (i & 2)
                sumb += s[i];
            else
                suma += s[i];
        }
        la = la * alpha_a + suma, lb = lb * alpha_b + sumb; // per-thread partial sums; the quad is summed at the end
        // skip the multiplications by exactly 1 (bitwise a no-op) when no row of the warp changed its max
        if (!__all_sync(0xffffffffu, alpha_a == 1.f && alpha_b == 1.f)) {
#pragma unroll
            for (int t = 0; t < 32; t++)
                o[4 * t] *= alpha_a, o[4 * t + 1] *= alpha_a, o[4 * t + 2] *= alpha_b, o[4 * t + 3] *= alpha_b;
        }
        // P as the A fragments of the 4 key steps: step j = n-groups 2j (k 0..7) and 2j+1 (k 8..15)
        uint32_t p[16];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float v0 = 1.f, v1 = 1.f, v8 = 1.f, v9 = 1.f; // e4m3: the V scale of each key column
            if (E4) {
                v0 = vsc[16 * j + 2 * c], v1 = vsc[16 * j + 2 * c + 1];
                v8 = vsc[16 * j + 8 + 2 * c], v9 = vsc[16 * j + 9 + 2 * c];
            }
            p[4 * j] = wg_pack2(s[8 * j] * v0, s[8 * j + 1] * v1);
            p[4 * j + 1] = wg_pack2(s[8 * j + 2] * v0, s[8 * j + 3] * v1);
            p[4 * j + 2] = wg_pack2(s[8 * j + 4] * v8, s[8 * j + 5] * v9);
            p[4 * j + 3] = wg_pack2(s[8 * j + 6] * v8, s[8 * j + 7] * v9);
        }
        wg_fence_regs(o);
        wg_fence_regs(p);
        wgmma_fence();
#pragma unroll
        for (int j = 0; j < 4; j++)
            wgmma_rs_m64n256_mn(o, p + 4 * j, wg_desc_sw128(v_s + (uint32_t)j * 2048u, WG_KV_PANEL, 1024));
        wgmma_commit();
        wgmma_wait<0>(); // the stage is refilled after the next barrier; O is rescaled in registers next tile
        wg_fence_regs(o);
    }
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    const float ia = la > 0.f ? 1.f / la : 0.f, ib = lb > 0.f ? 1.f / lb : 0.f;
    if (ra < R) {
        float *orow = out + ((int64_t)(ra / G) * H + kvh * G + ra % G) * WG_HD + 2 * c;
#pragma unroll
        for (int t = 0; t < 32; t++) *(float2 *)(orow + t * 8) = make_float2(o[4 * t] * ia, o[4 * t + 1] * ia);
    }
    if (rb < R) {
        float *orow = out + ((int64_t)(rb / G) * H + kvh * G + rb % G) * WG_HD + 2 * c;
#pragma unroll
        for (int t = 0; t < 32; t++) *(float2 *)(orow + t * 8) = make_float2(o[4 * t + 2] * ib, o[4 * t + 3] * ib);
    }
}

int cu_attention_wgmma(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                       int n, int H, int Hkv, int hd, float scale, int causal) {
    const bool e4 = !kv.k;
    if (hd != WG_HD || (e4 && !kv.k8) || (int64_t)n * (H / Hkv) < 64) return 0; // the mma kernel takes the rest
    const size_t smem = e4 ? WG_SMEM_E4 : WG_SMEM;
    FD_CUDA_CHECK(cudaFuncSetAttribute(e4 ? k_attn_wgmma<true> : k_attn_wgmma<false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t rows = (int64_t)n * (H / Hkv), tiles = (rows + WG_BM - 1) / WG_BM;
    FD_CHECK(tiles * Hkv < (1ll << 31), "attention: %lld row tiles", (long long)tiles);
    cu_prof pr;
    cu_prof_begin(be, &pr, "attention_wgmma", n);
    if (e4)
        cu_launch(be, (k_attn_wgmma<true>), (unsigned)(tiles * Hkv), WG_THREADS, smem, out, q, kv, pos0, pos_dev, n, H,
                  Hkv, scale * 1.4426950408889634f, causal, (int)tiles);
    else
        cu_launch(be, (k_attn_wgmma<false>), (unsigned)(tiles * Hkv), WG_THREADS, smem, out, q, kv, pos0, pos_dev, n, H,
                  Hkv, scale * 1.4426950408889634f, causal, (int)tiles);
    cu_prof_mark(be, &pr, "main");
    cu_prof_end(be, &pr);
    return 1;
}
