// Attention on the tensor cores (route attn = mma): flash-attention forward with mma.sync m16n8k16 bf16 -> fp32,
// for head_dim 64, 128 and 256, more than CU_DECODE_MAX_N tokens and at least 64 query rows (prefill; decode and
// verify take the split-K kernel of attention_decode.cu).
//
// Rows are the (token, head-of-group) pairs of one KV head, r = t*G + g (G = H/Hkv), as in attention.cu: one K/V
// tile read serves the whole group. Block = 4 warps x 16 rows = 64 rows; key tiles of 64.
//   S = Q K^T     A = Q rows from shared (bf16), B = K rows from shared: K[key][dim] is exactly the "col" B layout
//   online softmax in fp32 registers (base-2 exponentials, scale * log2(e) folded into the scores)
//   O += P V      A = P straight from the S accumulators (the C fragment of two n-tiles is the A fragment of one
//                 k-step), B = V read from shared as bf16 pairs along the key axis
// Precision: Q, K, V and P enter the tensor cores as bf16 (K/V are bf16 in the cache anyway; Q and P are rounded
// here); scores, max, sums and O accumulate in fp32.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), g = lane/4, c = lane%4:
//   A regs: {row g, k 2c..2c+1}, {row g+8, k 2c..}, {row g, k 8+2c..}, {row g+8, k 8+2c..}
//   B regs: {k 2c..2c+1, n g}, {k 8+2c.., n g}          C: {row g, n 2c, 2c+1}, {row g+8, n 2c, 2c+1}
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

#define MMA_BM 64 // query rows per block
#define MMA_BN 64 // keys per tile

static __device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats -> one register of two bf16, the first in the low half (the lower k/column index).
static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

static __device__ __forceinline__ uint32_t lds32(const __nv_bfloat16 *p) {
    return *(const uint32_t *)p;
}

// q [n, H, HD] f32 -> out [n, H*HD] f32; cache K/V bf16 [cap, Hkv, HD]. Shared: Qs, Ks, Vs [64][HD + 8] bf16
// (8 bf16 of padding: the fragment loads of 8 rows x 4 columns then hit 32 different banks).
template <int HD>
__global__ void __launch_bounds__(128, 1)
    k_attn_mma(float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n, int H, int Hkv,
               float scale_log2, int causal) {
    constexpr int LD = HD + 8, NT = HD / 8; // NT: n-tiles of the output (8 dims each)
    extern __shared__ uint4 sm_u4[];
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)sm_u4, *Ks = Qs + MMA_BM * LD, *Vs = Ks + MMA_BN * LD;
    const int G = H / Hkv, R = n * G, kvh = blockIdx.y, r0 = blockIdx.x * MMA_BM;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    if (pos_dev) pos0 = *pos_dev; // the grid depends on n only, so a replayed graph may move the position

    for (int e = threadIdx.x; e < MMA_BM * HD / 2; e += blockDim.x) {
        int i = e / (HD / 2), d = (e - i * (HD / 2)) * 2, r = r0 + i;
        float2 v = make_float2(0.f, 0.f);
        if (r < R) v = *(const float2 *)(q + ((int64_t)(r / G) * H + kvh * G + r % G) * HD + d);
        *(__nv_bfloat162 *)(Qs + i * LD + d) = __floats2bfloat162_rn(v.x, v.y);
    }
    const int ra = r0 + w * 16 + g, rb = ra + 8; // the two rows this thread accumulates
    const int64_t qa = ra < R ? (causal ? pos0 + ra / G : pos0 + n - 1) : -1;
    const int64_t qb = rb < R ? (causal ? pos0 + rb / G : pos0 + n - 1) : -1;
    const int64_t kend = (causal ? pos0 + min(n - 1, (r0 + MMA_BM - 1) / G) : pos0 + n - 1) + 1;

    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; t++) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    const __nv_bfloat16 *qw = Qs + (w * 16) * LD;
    const unsigned short *vs16 = (const unsigned short *)Vs;

    for (int64_t kt0 = 0; kt0 < kend; kt0 += MMA_BN) {
        __syncthreads(); // previous tile consumed; Qs written on the first pass
        for (int e = threadIdx.x; e < MMA_BN * (HD / 8); e += blockDim.x) {
            int j = e / (HD / 8), c8 = (e - j * (HD / 8)) * 8;
            int64_t kp = kt0 + j;
            uint4 kq = make_uint4(0, 0, 0, 0), vq = kq;
            if (kp < kend) {
                const int64_t row = kp * Hkv + kvh;
                kq = cu_kv_oct(kv.k, kv.k8, kv.ks, row, HD, c8);
                vq = cu_kv_oct(kv.v, kv.v8, kv.vs, row, HD, c8);
            }
            *(uint4 *)(Ks + j * LD + c8) = kq;
            *(uint4 *)(Vs + j * LD + c8) = vq;
        }
        __syncthreads();

        float s[8][4];
#pragma unroll
        for (int t = 0; t < 8; t++) s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            const __nv_bfloat16 *qa0 = qw + g * LD + kk * 16 + 2 * c, *qb0 = qa0 + 8 * LD;
            uint32_t a0 = lds32(qa0), a1 = lds32(qb0), a2 = lds32(qa0 + 8), a3 = lds32(qb0 + 8);
#pragma unroll
            for (int t = 0; t < 8; t++) {
                const __nv_bfloat16 *kr = Ks + (t * 8 + g) * LD + kk * 16 + 2 * c;
                mma_bf16(s[t], a0, a1, a2, a3, lds32(kr), lds32(kr + 8));
            }
        }
        // mask + scale, running max per row (a quad of lanes shares a row)
        float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
        for (int t = 0; t < 8; t++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int64_t key = kt0 + t * 8 + 2 * c + (e & 1);
                bool vis = key <= (e < 2 ? qa : qb);
                float v = vis ? s[t][e] * scale_log2 : -INFINITY;
                s[t][e] = v;
                if (e < 2)
                    mxa = fmaxf(mxa, v);
                else
                    mxb = fmaxf(mxb, v);
            }
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
        mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
        mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
        float mna = fmaxf(ma, mxa), mnb = fmaxf(mb, mxb);
        // a row with no visible key yet keeps everything at zero (base 0 avoids inf - inf)
        float basea = mna == -INFINITY ? 0.f : mna, baseb = mnb == -INFINITY ? 0.f : mnb;
        float alpha_a = exp2f(ma - basea), alpha_b = exp2f(mb - baseb); // ma = -inf -> 0
        ma = mna, mb = mnb;
        float suma = 0.f, sumb = 0.f;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            s[t][0] = exp2f(s[t][0] - basea), s[t][1] = exp2f(s[t][1] - basea);
            s[t][2] = exp2f(s[t][2] - baseb), s[t][3] = exp2f(s[t][3] - baseb);
            suma += s[t][0] + s[t][1], sumb += s[t][2] + s[t][3];
        }
        la = la * alpha_a + suma, lb = lb * alpha_b + sumb; // per-thread partial sums; the quad is summed at the end
#pragma unroll
        for (int t = 0; t < NT; t++) o[t][0] *= alpha_a, o[t][1] *= alpha_a, o[t][2] *= alpha_b, o[t][3] *= alpha_b;
            // O += P V, k-steps of 16 keys
#pragma unroll
        for (int j = 0; j < MMA_BN / 16; j++) {
            uint32_t a0 = pack2(s[2 * j][0], s[2 * j][1]), a1 = pack2(s[2 * j][2], s[2 * j][3]);
            uint32_t a2 = pack2(s[2 * j + 1][0], s[2 * j + 1][1]), a3 = pack2(s[2 * j + 1][2], s[2 * j + 1][3]);
            const unsigned short *v0 = vs16 + (16 * j + 2 * c) * LD + g; // key 16j+2c, dim g (+ 8t)
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const unsigned short *vp = v0 + t * 8;
                uint32_t b0 = (uint32_t)vp[0] | ((uint32_t)vp[LD] << 16);
                uint32_t b1 = (uint32_t)vp[8 * LD] | ((uint32_t)vp[9 * LD] << 16);
                mma_bf16(o[t], a0, a1, a2, a3, b0, b1);
            }
        }
    }
    la += __shfl_xor_sync(0xffffffffu, la, 1);
    la += __shfl_xor_sync(0xffffffffu, la, 2);
    lb += __shfl_xor_sync(0xffffffffu, lb, 1);
    lb += __shfl_xor_sync(0xffffffffu, lb, 2);
    float ia = la > 0.f ? 1.f / la : 0.f, ib = lb > 0.f ? 1.f / lb : 0.f;
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

template <int HD>
static void launch(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                   int H, int Hkv, float scale, int causal) {
    size_t smem = (size_t)3 * MMA_BM * (HD + 8) * sizeof(__nv_bfloat16);
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_attn_mma<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int64_t rows = (int64_t)n * (H / Hkv);
    dim3 grid((unsigned)((rows + MMA_BM - 1) / MMA_BM), (unsigned)Hkv);
    k_attn_mma<HD><<<grid, 128, smem, cu_of(be)->stream>>>(out, q, kv, pos0, pos_dev, n, H, Hkv,
                                                           scale * 1.4426950408889634f, causal);
    FD_CUDA_LAUNCH_CHECK();
}

int cu_attention_mma(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                     int H, int Hkv, int hd, float scale, int causal) {
    if ((int64_t)n * (H / Hkv) < MMA_BM) return 0; // too few rows to fill one block: the split-K kernel does better
    switch (hd) {
    case 64:
        launch<64>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
        return 1;
    case 128:
        launch<128>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
        return 1;
    case 256:
        launch<256>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, scale, causal);
        return 1;
    default:
        return 0;
    }
}
