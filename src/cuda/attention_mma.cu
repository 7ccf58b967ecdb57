// Attention on the tensor cores (route attn = mma): flash-attention forward with mma.sync m16n8k16 bf16 -> fp32,
// for head_dim 64, 128 and 256, more than CU_DECODE_MAX_N tokens and at least 64 query rows (prefill; decode and
// verify take the split-K kernel of attention_decode.cu).
//
// Rows are the (token, head-of-group) pairs of one KV head, r = t*G + g (G = H/Hkv), as in attention.cu: one K/V
// tile read serves the whole group. Block = 8 warps x 16 rows = 128 rows; key tiles of 64.
//   S = Q K^T     A = Q rows (ldmatrix from shared), B = K rows (ldmatrix: K[key][dim] is the "col" B layout)
//   online softmax in fp32 registers (base-2 exponentials, scale * log2(e) folded into the scores)
//   O += P V      A = P straight from the S accumulators (the C fragment of two n-tiles is the A fragment of one
//                 k-step), B = V via ldmatrix.trans (V[key][dim] rows transposed into key-pair registers)
// Pipeline: K/V tiles arrive by cp.async (16 bytes per instruction) into two stages; tile j+1 is in flight while
// the warps work on tile j, and one barrier per tile separates "everybody finished reading stage s" from
// "stage s is refilled". Blocks are numbered heaviest-first (the last row tiles of a causal call see the most
// keys) so the short blocks fill the tail of the grid instead of the long ones.
//
// e4m3 cache: the raw fp8 tile (16 values per cp.async) and its per-(token, head) fp32 scales go through the same
// two stages; once per tile the block converts fp8 -> bf16 (exact: every e4m3 value is a bf16 value) into one
// bf16 tile, so the fragment loads and MMAs are the bf16 path's. The scales never touch bf16: the K scale
// multiplies the fp32 score of its key column, the V scale multiplies P before P is rounded to bf16.
//
// Precision: Q, K, V and P enter the tensor cores as bf16 (Q and P are rounded here); scores, max, sums and O
// accumulate in fp32.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), g = lane/4, c = lane%4:
//   A regs: {row g, k 2c..2c+1}, {row g+8, k 2c..}, {row g, k 8+2c..}, {row g+8, k 8+2c..}
//   B regs: {k 2c..2c+1, n g}, {k 8+2c.., n g}          C: {row g, n 2c, 2c+1}, {row g+8, n 2c, 2c+1}
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i, and register i of every lane receives
// matrix i in the A/B/C fragment distribution above ({row g, cols 2c..2c+1}; .trans: {rows 2c..2c+1, col g}).
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

#define MMA_BM      128 // query rows per block
#define MMA_BN      64  // keys per tile
#define MMA_WARPS   8
#define MMA_THREADS (MMA_WARPS * 32)

static __device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Asynchronous global -> shared copies. With valid == 0 nothing is read and the destination is zero-filled
// (src-size 0): keys past the live range must be zeros, not stale cache contents (0 * NaN would poison O).
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(valid ? 4 : 0));
}
static __device__ __forceinline__ void cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}
static __device__ __forceinline__ void cp_async_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// 2^x on the special-function unit, one instruction (exp2f adds range fix-ups for denormal results; a weight
// below 2^-126 of the row max is as good as zero here). ex2(-inf) = +0.
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats -> one register of two bf16, the first in the low half (the lower k/column index).
static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

// Two e4m3 bytes (first element in the low byte) -> bf16x2, exactly (e4m3 -> f16 -> f32 -> bf16 loses nothing).
static __device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), __NV_E4M3);
    float2 f = __half22float2(*(const __half2 *)&h);
    return pack2(f.x, f.y);
}

// Shared-memory plan of one block (bytes). Rows of the bf16 tiles are padded by 8 bf16 (16 bytes): the 8 row
// addresses of one ldmatrix matrix then start in 8 different 16-byte bank groups.
//   bf16 cache: Qs [BM][LD], then K and V in two stages: K0 V0 K1 V1, each [BN][LD]
//   e4m3 cache: Qs [BM][LD], K [BN][LD], V [BN][LD] (bf16, converted), then two stages of raw K8 V8 [BN][HD]
//               bytes, then two stages of scales Ksc Vsc [BN] fp32
template <int HD, bool E4> struct mma_plan {
    static constexpr int LD = HD + 8;
    static constexpr size_t q_bytes = (size_t)MMA_BM * LD * 2, tile_bytes = (size_t)MMA_BN * LD * 2;
    static constexpr size_t raw_bytes = (size_t)MMA_BN * HD, sc_bytes = (size_t)MMA_BN * 4;
    static constexpr size_t raw_off = q_bytes + 2 * tile_bytes, sc_off = raw_off + 4 * raw_bytes;
    static constexpr size_t smem = E4 ? sc_off + 4 * sc_bytes : q_bytes + 4 * tile_bytes;
};

// Issues the copies of the key tile [kt0, kt0 + BN) into stage `st` (keys >= kend are zero-filled).
template <int HD, bool E4>
static __device__ __forceinline__ void issue_tile(unsigned char *sm, int st, cu_kv kv, int64_t kt0, int64_t kend,
                                                  int Hkv, int kvh) {
    typedef mma_plan<HD, E4> P;
    const cu_kv_tile pt = cu_kv_tile_at(kv, kt0, min(kend, kt0 + MMA_BN)); // 64-aligned tile: one page, one read
    if (!E4) {
        constexpr int CPR = HD / 8; // 16-byte chunks per row
        __nv_bfloat16 *Ks = (__nv_bfloat16 *)(sm + P::q_bytes + (size_t)st * 2 * P::tile_bytes);
        __nv_bfloat16 *Vs = (__nv_bfloat16 *)((unsigned char *)Ks + P::tile_bytes);
#pragma unroll 4
        for (int e = threadIdx.x; e < MMA_BN * CPR; e += MMA_THREADS) {
            const int j = e / CPR, c8 = (e - j * CPR) * 8;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t off =
                ((ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh) * HD + c8; // zero-fill: any address
            cp_async16(Ks + j * P::LD + c8, kv.k + off, ok);
            cp_async16(Vs + j * P::LD + c8, kv.v + off, ok);
        }
    } else {
        constexpr int CPR = HD / 16;
        unsigned char *K8 = sm + P::raw_off + (size_t)st * 2 * P::raw_bytes, *V8 = K8 + P::raw_bytes;
        float *Ksc = (float *)(sm + P::sc_off + (size_t)st * 2 * P::sc_bytes), *Vsc = Ksc + MMA_BN;
#pragma unroll 4
        for (int e = threadIdx.x; e < MMA_BN * CPR; e += MMA_THREADS) {
            const int j = e / CPR, c16 = (e - j * CPR) * 16;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t off = ((ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh) * HD + c16;
            cp_async16(K8 + j * HD + c16, kv.k8 + off, ok);
            cp_async16(V8 + j * HD + c16, kv.v8 + off, ok);
        }
        if (threadIdx.x < 2 * MMA_BN) {
            const int j = threadIdx.x & (MMA_BN - 1), isv = threadIdx.x >= MMA_BN;
            const int64_t kp = kt0 + j;
            const bool ok = kp < kend;
            const int64_t row = (ok ? cu_kv_tile_slot(pt, kt0, kp) : 0) * Hkv + kvh;
            cp_async4((isv ? Vsc : Ksc) + j, (isv ? kv.vs : kv.ks) + row, ok);
        }
    }
    cp_async_commit();
}

// e4m3: raw stage `st` -> the bf16 K/V tile (16 values per thread and step).
template <int HD> static __device__ __forceinline__ void convert_tile(unsigned char *sm, int st) {
    typedef mma_plan<HD, true> P;
    constexpr int CPR = HD / 16;
    const unsigned char *K8 = sm + P::raw_off + (size_t)st * 2 * P::raw_bytes;
#pragma unroll 4
    for (int e = threadIdx.x; e < 2 * MMA_BN * CPR; e += MMA_THREADS) {
        const int isv = e >= MMA_BN * CPR, e2 = e - isv * MMA_BN * CPR;
        const int j = e2 / CPR, c16 = (e2 - j * CPR) * 16;
        const uint4 raw = *(const uint4 *)(K8 + (size_t)isv * P::raw_bytes + j * HD + c16);
        __nv_bfloat16 *dst = (__nv_bfloat16 *)(sm + P::q_bytes + (size_t)isv * P::tile_bytes) + j * P::LD + c16;
        uint4 lo, hi;
        lo.x = e4m3x2_to_bf16x2(raw.x), lo.y = e4m3x2_to_bf16x2(raw.x >> 16);
        lo.z = e4m3x2_to_bf16x2(raw.y), lo.w = e4m3x2_to_bf16x2(raw.y >> 16);
        hi.x = e4m3x2_to_bf16x2(raw.z), hi.y = e4m3x2_to_bf16x2(raw.z >> 16);
        hi.z = e4m3x2_to_bf16x2(raw.w), hi.w = e4m3x2_to_bf16x2(raw.w >> 16);
        *(uint4 *)dst = lo;
        *(uint4 *)(dst + 8) = hi;
    }
}

// q [n, H, HD] f32 -> out [n, H*HD] f32. Grid: one block per (row tile, kv head), numbered heaviest row tile
// first; `tiles` row tiles of MMA_BM rows.
template <int HD, bool E4>
__global__ void __launch_bounds__(MMA_THREADS, HD <= 64 ? 2 : 1)
    k_attn_mma(float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n, int H, int Hkv,
               float scale_log2, int causal, int tiles) {
    CU_PDL_ENTER();
    typedef mma_plan<HD, E4> P;
    constexpr int LD = P::LD, NT = HD / 8; // NT: n-tiles of the output (8 dims each)
    extern __shared__ uint4 sm_u4[];
    unsigned char *sm = (unsigned char *)sm_u4;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm;
    const int G = H / Hkv, R = n * G;
    const int kvh = (int)(blockIdx.x % (unsigned)Hkv), r0 = (tiles - 1 - (int)(blockIdx.x / (unsigned)Hkv)) * MMA_BM;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    if (pos_dev) pos0 = *pos_dev; // the grid depends on n only, so a replayed graph may move the position

    // last key any row of the block sees, + 1
    const int64_t kend = (causal ? pos0 + min(n - 1, (r0 + MMA_BM - 1) / G) : pos0 + n - 1) + 1;
    const int ntiles = (int)((kend + MMA_BN - 1) / MMA_BN);
    issue_tile<HD, E4>(sm, 0, kv, 0, kend, Hkv, kvh); // the first tile flies while Q is converted

    for (int e = threadIdx.x; e < MMA_BM * HD / 2; e += MMA_THREADS) {
        const int i = e / (HD / 2), d = (e - i * (HD / 2)) * 2, r = r0 + i;
        float2 v = make_float2(0.f, 0.f);
        if (r < R) v = *(const float2 *)(q + ((int64_t)(r / G) * H + kvh * G + r % G) * HD + d);
        *(__nv_bfloat162 *)(Qs + i * LD + d) = __floats2bfloat162_rn(v.x, v.y);
    }
    const int rw = r0 + w * 16, ra = rw + g, rb = ra + 8; // warp's first row; the two rows this thread owns
    const bool warp_live = rw < R;
    const int64_t qa = ra < R ? (causal ? pos0 + ra / G : pos0 + n - 1) : -1;
    const int64_t qb = rb < R ? (causal ? pos0 + rb / G : pos0 + n - 1) : -1;
    // keys <= key_all are visible to every row of the warp (no mask needed); keys > key_last to none of them
    const int64_t key_all = causal ? pos0 + rw / G : pos0 + n - 1;
    const int64_t key_last = causal ? pos0 + min(n - 1, (rw + 15) / G) : pos0 + n - 1;

    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;

    // Per-lane ldmatrix addresses (see the header): Q rows w*16 + lane%16, column half lane/16; K rows
    // (lane&7) + 8*(lane/16), column half (lane/8)&1; V (trans) rows (lane&7) + 8*((lane/8)&1), column half lane/16.
    const uint32_t q_addr = smem_u32(Qs + (w * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
    const int k_lane = ((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8;
    const int v_lane = ((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + (lane >> 4) * 8;

    for (int it = 0; it < ntiles; it++) {
        const int64_t kt0 = (int64_t)it * MMA_BN;
        const int st = it & 1;
        cp_async_wait_all(); // this thread's copies of tile `it` have landed ...
        __syncthreads();     // ... and everybody's; also: everybody finished tile it-1 (its stage is free again)
        if (it + 1 < ntiles) issue_tile<HD, E4>(sm, st ^ 1, kv, kt0 + MMA_BN, kend, Hkv, kvh);
        const __nv_bfloat16 *Kt, *Vt;
        const float *Ksc = NULL, *Vsc = NULL;
        if (E4) {
            convert_tile<HD>(sm, st);
            __syncthreads();
            Kt = (const __nv_bfloat16 *)(sm + P::q_bytes);
            Ksc = (const float *)(sm + P::sc_off + (size_t)st * 2 * P::sc_bytes), Vsc = Ksc + MMA_BN;
        } else {
            Kt = (const __nv_bfloat16 *)(sm + P::q_bytes + (size_t)st * 2 * P::tile_bytes);
        }
        Vt = (const __nv_bfloat16 *)((const unsigned char *)Kt + P::tile_bytes);
        if (!warp_live || kt0 > key_last) continue; // nothing of this tile is visible to the warp's rows

        // S = Q K^T over the tile: 16 rows x 64 keys per warp
        float s[8][4];
#pragma unroll
        for (int t = 0; t < 8; t++) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
        const uint32_t k_addr = smem_u32(Kt + k_lane);
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t a[4];
            ldsm_x4(a, q_addr + kk * 32);
#pragma unroll
            for (int t = 0; t < 8; t += 2) {
                uint32_t b[4];
                ldsm_x4(b, k_addr + (t * 8 * LD + kk * 16) * 2);
                mma_bf16(s[t], a, b[0], b[1]);
                mma_bf16(s[t + 1], a, b[2], b[3]);
            }
        }
        // scale (and the e4m3 K scale of each key column), mask, running max per row (a quad shares a row)
        const bool masked = kt0 + MMA_BN - 1 > key_all;
        float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            float k0 = scale_log2, k1 = scale_log2;
            if (E4) {
                const float2 ks = *(const float2 *)(Ksc + t * 8 + 2 * c);
                k0 *= ks.x, k1 *= ks.y;
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float v = s[t][e] * ((e & 1) ? k1 : k0);
                if (masked) {
                    const int64_t key = kt0 + t * 8 + 2 * c + (e & 1);
                    if (key > (e < 2 ? qa : qb)) v = -INFINITY;
                }
                s[t][e] = v;
                if (e < 2)
                    mxa = fmaxf(mxa, v);
                else
                    mxb = fmaxf(mxb, v);
            }
        }
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
        const float mna = fmaxf(ma, mxa), mnb = fmaxf(mb, mxb);
        // a row with no visible key yet keeps everything at zero (base 0 avoids inf - inf)
        const float basea = mna == -INFINITY ? 0.f : mna, baseb = mnb == -INFINITY ? 0.f : mnb;
        const float alpha_a = fast_exp2(ma - basea), alpha_b = fast_exp2(mb - baseb); // ma = -inf -> 0
        ma = mna, mb = mnb;
        float suma = 0.f, sumb = 0.f;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            s[t][0] = fast_exp2(s[t][0] - basea), s[t][1] = fast_exp2(s[t][1] - basea);
            s[t][2] = fast_exp2(s[t][2] - baseb), s[t][3] = fast_exp2(s[t][3] - baseb);
            suma += s[t][0] + s[t][1], sumb += s[t][2] + s[t][3];
        }
        la = la * alpha_a + suma, lb = lb * alpha_b + sumb; // per-thread partial sums; the quad is summed at the end
        // Far into a long context the running max rarely moves: skip the 4*NT multiplications by exactly 1
        // (bitwise a no-op) when no row of the warp changed its max.
        if (!__all_sync(0xffffffffu, alpha_a == 1.f && alpha_b == 1.f)) {
#pragma unroll
            for (int t = 0; t < NT; t++) o[t][0] *= alpha_a, o[t][1] *= alpha_a, o[t][2] *= alpha_b, o[t][3] *= alpha_b;
        }

        // O += P V, k-steps of 16 keys; e4m3: P picks up the V scale of its key before the bf16 rounding
        const uint32_t v_addr = smem_u32(Vt + v_lane);
#pragma unroll
        for (int j = 0; j < MMA_BN / 16; j++) {
            float v0 = 1.f, v1 = 1.f, v8 = 1.f, v9 = 1.f;
            if (E4) {
                const float2 lo = *(const float2 *)(Vsc + 16 * j + 2 * c),
                             hi = *(const float2 *)(Vsc + 16 * j + 8 + 2 * c);
                v0 = lo.x, v1 = lo.y, v8 = hi.x, v9 = hi.y;
            }
            uint32_t a[4];
            a[0] = pack2(s[2 * j][0] * v0, s[2 * j][1] * v1), a[1] = pack2(s[2 * j][2] * v0, s[2 * j][3] * v1);
            a[2] = pack2(s[2 * j + 1][0] * v8, s[2 * j + 1][1] * v9);
            a[3] = pack2(s[2 * j + 1][2] * v8, s[2 * j + 1][3] * v9);
#pragma unroll
            for (int t = 0; t < NT; t += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, v_addr + (16 * j * LD + t * 8) * 2);
                mma_bf16(o[t], a, b[0], b[1]);
                mma_bf16(o[t + 1], a, b[2], b[3]);
            }
        }
    }
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    const float ia = la > 0.f ? 1.f / la : 0.f, ib = lb > 0.f ? 1.f / lb : 0.f;
    if (ra < R) {
        float *orow = out + ((int64_t)(ra / G) * H + kvh * G + ra % G) * HD + 2 * c;
#pragma unroll
        for (int t = 0; t < NT; t++) *(float2 *)(orow + t * 8) = make_float2(o[t][0] * ia, o[t][1] * ia);
    }
    if (rb < R) {
        float *orow = out + ((int64_t)(rb / G) * H + kvh * G + rb % G) * HD + 2 * c;
#pragma unroll
        for (int t = 0; t < NT; t++) *(float2 *)(orow + t * 8) = make_float2(o[t][2] * ib, o[t][3] * ib);
    }
}

template <int HD, bool E4>
static void launch(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                   int H, int Hkv, float scale, int causal) {
    const size_t smem = mma_plan<HD, E4>::smem;
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_attn_mma<HD, E4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const int64_t rows = (int64_t)n * (H / Hkv), tiles = (rows + MMA_BM - 1) / MMA_BM;
    FD_CHECK(tiles * Hkv < (1ll << 31), "attention: %lld row tiles", (long long)tiles);
    cu_launch(be, (k_attn_mma<HD, E4>), (unsigned)(tiles * Hkv), MMA_THREADS, smem, out, q, kv, pos0, pos_dev, n, H,
              Hkv, scale * 1.4426950408889634f, causal, (int)tiles);
}

template <int HD>
static void launch_kv(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                      int H, int Hkv, float scale, int causal) {
    if (kv.k)
        launch<HD, false>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
    else
        launch<HD, true>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
}

int cu_attention_mma(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                     int H, int Hkv, int hd, float scale, int causal) {
    if ((int64_t)n * (H / Hkv) < 64) return 0; // too few rows to fill half a block: the split-K kernel does better
    if (hd != 64 && hd != 128 && hd != 256) return 0;
    cu_prof pr;
    cu_prof_begin(be, &pr, "attention_mma", n);
    if (hd == 64)
        launch_kv<64>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
    else if (hd == 128)
        launch_kv<128>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
    else
        launch_kv<256>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
    cu_prof_mark(be, &pr, "main");
    cu_prof_end(be, &pr);
    return 1;
}
