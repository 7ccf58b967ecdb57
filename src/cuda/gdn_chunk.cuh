// The steps the two chunked GDN kernel sets share, written once: gdn_chunk.cu (fp32 operands, tf32x3 mma) and
// gdn_chunk_bf16.cu (bf16 operands) differ in how they multiply and round their operands, not in these steps,
// which run in fp32 on both: the decay mask of a chunk's K K^T and Q K^T, the inverse T = (I + A)^-1, and the
// state slice's fragments loaded at the start of a call and stored at its end. A chunk is 64 tokens; the fp32
// A and T tiles are [64][68] in shared memory; 256 threads = 8 warps.
#ifndef FD_CUDA_GDN_CHUNK_CUH
#define FD_CUDA_GDN_CHUNK_CUH
#include <cuda_bf16.h>
#include <stdint.h>

#include "cuda/cp_async.cuh"

#define GDN_CHUNK    64 // tokens per chunk
#define GDN_CHUNK_LD 68 // leading dimension of the fp32 [64][68] A and T tiles

static __device__ __forceinline__ float gdn_zero(const float *) {
    return 0.f;
}
static __device__ __forceinline__ __nv_bfloat16 gdn_zero(const __nv_bfloat16 *) {
    return __float2bfloat16_rn(0.f);
}

// dst[r][col] (leading dimension ld, a multiple of 16 bytes) = src[r * stride + col] for r < rows_valid,
// col < cols_valid, 0 elsewhere in [0, rows) x [0, cols_pad) (cols_pad a multiple of 16 bytes), T = float or
// bf16: 16-byte cp.async when the source rows allow it, plain loads otherwise (odd dv); the caller commits and
// waits either way (the plain path has nothing pending, so waiting is harmless).
template <typename T>
static __device__ void gdn_tile_load(T *dst, int ld, const T *src, int64_t stride, int rows, int rows_valid,
                                     int cols_valid, int cols_pad) {
    constexpr int PER = 16 / sizeof(T); // elements per 16-byte copy
    const bool vec = ((((uintptr_t)src) | (uintptr_t)(stride * sizeof(T))) & 15) == 0 && (cols_valid & (PER - 1)) == 0;
    if (vec) {
        const int cpn = cols_pad / PER;
        for (int e = threadIdx.x; e < rows * cpn; e += blockDim.x) {
            const int r = e / cpn, cp = (e - r * cpn) * PER;
            const bool ok = r < rows_valid && cp < cols_valid;
            cu_cp_async16(dst + r * ld + cp, ok ? src + (int64_t)r * stride + cp : src, ok);
        }
    } else {
        const T zero = gdn_zero(src);
        for (int e = threadIdx.x; e < rows * cols_pad; e += blockDim.x) {
            const int r = e / cols_pad, cc = e - r * cols_pad;
            dst[r * ld + cc] = r < rows_valid && cc < cols_valid ? src[(int64_t)r * stride + cc] : zero;
        }
    }
}

// Two adjacent P elements: fp32 (tf32x3 set) or bf16 rounded to nearest (bf16 set).
static __device__ __forceinline__ void gdn_store_p_pair(float *p, float v0, float v1) {
    *(float2 *)p = make_float2(v0, v1);
}
static __device__ __forceinline__ void gdn_store_p_pair(__nv_bfloat16 *p, float v0, float v1) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(v0, v1);
}

// The decay mask of warp w's tiles (rows 16 mt.., columns n0..n0 + 31; g, c: its lane's fragment coordinates)
// of kk = K K^T and qk = Q K^T over a chunk of L tokens with cumulative log-decays gam and betas bet:
// A[i][j] = beta_i (k_i . k_j) exp(gam_i - gam_j) strictly below the diagonal, else 0 (As, [64][68]), and
// P[i][j] = (q_i . k_j) exp(gam_i - gam_j) on and below it, else 0 (Pc, [64][64]); rows past L are 0.
template <typename PT>
static __device__ __forceinline__ void gdn_decay_mask(float *As, PT *Pc, const float (*kk)[4], const float (*qk)[4],
                                                      const float *gam, const float *bet, int mt, int n0, int g, int c,
                                                      int L) {
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e2 = 0; e2 < 2; e2++) { // e2: rows g / g + 8
            const int i = mt * 16 + g + 8 * e2, jj = n0 + 8 * j + 2 * c;
            float pv[2];
#pragma unroll
            for (int e1 = 0; e1 < 2; e1++) {
                const int col = jj + e1;
                const bool in = i < L && col <= i;
                const float dec = in ? expf(gam[i] - gam[col]) : 0.f;
                As[i * GDN_CHUNK_LD + col] = in && col < i ? bet[i] * kk[j][2 * e2 + e1] * dec : 0.f;
                pv[e1] = in ? qk[j][2 * e2 + e1] * dec : 0.f;
            }
            gdn_store_p_pair(Pc + i * GDN_CHUNK + jj, pv[0], pv[1]);
        }
}

// Ts = (I + As)^-1, lower triangular, in 16 x 16 blocks (i, j): the diagonal blocks by forward substitution (one
// thread per column), then T_ij = -T_ii sum_{j <= k < i} A_ik T_kj by block distance i - j = 1, 2, 3 (Xs: 3 x 256
// floats of scratch). Ts must hold zeros above the diagonal blocks; it is complete for all threads on return.
static __device__ __forceinline__ void gdn_solve_T(float *Ts, const float *As, float *Xs) {
    if (threadIdx.x < GDN_CHUNK) {
        const int b16 = (threadIdx.x >> 4) * 16, j = threadIdx.x & 15;
        float x[16];
#pragma unroll
        for (int r = 0; r < 16; r++) {
            float s = r == j ? 1.f : 0.f;
#pragma unroll
            for (int k = 0; k < r; k++) s -= As[(b16 + r) * GDN_CHUNK_LD + b16 + k] * x[k];
            x[r] = s;
            Ts[(b16 + r) * GDN_CHUNK_LD + b16 + j] = s;
        }
    }
    __syncthreads();
    for (int d = 1; d < 4; d++) {
        const int nb = 4 - d;
        for (int e = threadIdx.x; e < nb * 256; e += blockDim.x) {
            const int bj = e >> 8, bi = bj + d, r = (e >> 4) & 15, cc = e & 15;
            const float *Ar = As + (bi * 16 + r) * GDN_CHUNK_LD;
            float s = 0.f;
            for (int k = bj * 16; k < bi * 16; k++) s += Ar[k] * Ts[k * GDN_CHUNK_LD + bj * 16 + cc];
            Xs[e] = s;
        }
        __syncthreads();
        for (int e = threadIdx.x; e < nb * 256; e += blockDim.x) {
            const int bj = e >> 8, bi = bj + d, r = (e >> 4) & 15, cc = e & 15;
            const float *Tr = Ts + (bi * 16 + r) * GDN_CHUNK_LD + bi * 16;
            float s = 0.f;
#pragma unroll
            for (int m = 0; m < 16; m++) s += Tr[m] * Xs[bj * 256 + m * 16 + cc];
            Ts[(bi * 16 + r) * GDN_CHUNK_LD + bj * 16 + cc] = -s;
        }
        __syncthreads();
    }
}

// The state kernels' slice of head h's state Sg [dk, dv] (columns col0..col0 + 8 NT - 1; NT = 4 in the tf32x3
// set, 2 in the bf16 one) in mma accumulators: S[m][j][e] of warp w is row (w + 8 m) * 16 + g + 8 (e >> 1),
// column col0 + 8 j + 2 c + (e & 1); nmt = dkp / 16 row tiles exist. Load: 0 past dk, dv and nmt (so those rows
// and columns stay 0); store: only inside [dk, dv].
template <int NT>
static __device__ __forceinline__ void gdn_state_load(float (*S)[NT][4], const float *Sg, int w, int g, int c, int nmt,
                                                      int col0, int dk, int dv) {
#pragma unroll
    for (int m = 0; m < 2; m++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int mt = w + 8 * m, i = mt * 16 + g + 8 * (e >> 1), col = col0 + 8 * j + 2 * c + (e & 1);
                S[m][j][e] = mt < nmt && i < dk && col < dv ? Sg[(int64_t)i * dv + col] : 0.f;
            }
}
template <int NT>
static __device__ __forceinline__ void gdn_state_store(float *Sg, const float (*S)[NT][4], int w, int g, int c, int nmt,
                                                       int col0, int dk, int dv) {
#pragma unroll
    for (int m = 0; m < 2; m++)
        if (w + 8 * m < nmt)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = (w + 8 * m) * 16 + g + 8 * (e >> 1), col = col0 + 8 * j + 2 * c + (e & 1);
                    if (i < dk && col < dv) Sg[(int64_t)i * dv + col] = S[m][j][e];
                }
}
#endif
