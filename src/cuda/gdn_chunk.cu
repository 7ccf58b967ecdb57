// Chunked Gated-DeltaNet prefill on the tensor cores (route gdn_prefill = chunked). Same op as gdn.cu describes;
// chunk C = 64, gamma = in-chunk cumulative sum of g, Gamma_ij = exp(gamma_i - gamma_j). Four kernels:
//   prep  (per token)         normalised q (times 1/sqrt(dk)) and k, beta, g
//   intra (per head, chunk)   A = strict_lower(beta K K^T o Gamma), P = lower_incl(Q K^T o Gamma),
//                             T = (I + A)^-1 (blocked fp32 substitution), U = T (beta V), W = T (beta exp(gamma) K)
//   state (per head, 32 value columns; chunks in order)
//                             Hs[chunk] = S;  Vnew = U - W S (written over U);
//                             S <- exp(gamma_last) S + (K o exp(gamma_last - gamma))^T Vnew
//   out   (per head, chunk, 64 value columns)
//                             O = diag(exp gamma) Q Hs[chunk] + P Vnew
// Only `state` walks the chunks in sequence, and it does the two products that must (W S and K^T Vnew); the
// output products run fully parallel from the stored chunk-start states Hs (fp32), as in FLA's chunk_fwd_h/_o.
//
// Precision: every matrix product runs on the tensor cores as 3xTF32 (x = hi + lo with hi = tf32(x),
// lo = tf32(x - hi); a b ~ a_hi b_hi + a_hi b_lo + a_lo b_hi, fp32 accumulation), which keeps ~fp32 accuracy
// (the dropped a_lo b_lo term is ~2^-22 relative). The state, Hs, U, W, Vnew, P and the triangular inverse are
// fp32 in memory. Plain TF32 (10-bit mantissa) would put ~3e-4 relative error into every product feeding the
// state; bf16 ~4e-3.
//
// Exponentials only ever see gamma_i - gamma_j <= 0 (i >= j) or gamma <= 0, so nothing overflows. Calls longer
// than GDN_SEG tokens run as consecutive passes (the state carries), which bounds the scratch.
//
// mma.sync m16n8k8 tf32 fragments (PTX ISA), g = lane / 4, c = lane % 4:
//   A (16 x 8, row): a0 (g, c)  a1 (g + 8, c)  a2 (g, c + 4)  a3 (g + 8, c + 4)
//   B (8 x 8, col):  b0 (k c, n g)  b1 (k c + 4, n g)
//   C (16 x 8):      c0 (g, 2c)  c1 (g, 2c + 1)  c2 (g + 8, 2c)  c3 (g + 8, 2c + 1)
// Shared-memory leading dimensions are chosen so each fragment load hits 32 distinct banks: row-indexed reads
// (g * ld + c) want ld = 4 mod 8, column-indexed reads (c * ld + g) want ld = 8 mod 32.
#include <math.h>
#include <stdint.h>

#include "cuda/cp_async.cuh"
#include "cuda/cuda_common.h"
#include "cuda/gdn_chunk.cuh"

#include "cuda/gdn_gates.h"

#define GDN_C   64
#define GDN_SEG 4096 // tokens per pass: bounds the scratch (Hs is Hv * dk * dv * 4 bytes per chunk)
#define LD_T    68   // T, A, P tiles [64][68]
#define LD_COL  40   // [rows][32 columns] tiles read column-indexed
#define LD_OCOL 72   // [rows][64 columns] tiles read column-indexed

static_assert(GDN_C == GDN_CHUNK && LD_T == GDN_CHUNK_LD, "gdn_chunk.cuh's tile layout");

// ---- tensor-core helpers ----
static __device__ __forceinline__ uint32_t tf32_bits(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}
static __device__ __forceinline__ void split_tf32(float x, uint32_t *hi, uint32_t *lo) {
    *hi = tf32_bits(x);
    *lo = tf32_bits(x - __uint_as_float(*hi));
}
static __device__ __forceinline__ void mma_tf32(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// acc[j] (16 x 8 tiles j < NT, columns 8j..) += A (16 x 8*ksteps) * B (8*ksteps x 8*NT) in 3xTF32, one warp.
// A(r, k) = A[r * lda + k], or A[k * lda + r] when A_T; B(k, n) = B[k * ldb + n], or B[n * ldb + k] when B_T.
template <int NT, bool A_T, bool B_T>
static __device__ __forceinline__ void warp_mma3(float (*acc)[4], const float *A, int lda, const float *B, int ldb,
                                                 int ksteps) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    for (int ks = 0; ks < ksteps; ks++) {
        const int k0 = ks * 8;
        float a[4];
        if (A_T) {
            a[0] = A[(k0 + c) * lda + g], a[1] = A[(k0 + c) * lda + g + 8];
            a[2] = A[(k0 + c + 4) * lda + g], a[3] = A[(k0 + c + 4) * lda + g + 8];
        } else {
            a[0] = A[g * lda + k0 + c], a[1] = A[(g + 8) * lda + k0 + c];
            a[2] = A[g * lda + k0 + c + 4], a[3] = A[(g + 8) * lda + k0 + c + 4];
        }
        uint32_t ah[4], al[4];
#pragma unroll
        for (int e = 0; e < 4; e++) split_tf32(a[e], &ah[e], &al[e]);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            float b0, b1;
            if (B_T) {
                b0 = B[(8 * j + g) * ldb + k0 + c], b1 = B[(8 * j + g) * ldb + k0 + c + 4];
            } else {
                b0 = B[(k0 + c) * ldb + 8 * j + g], b1 = B[(k0 + c + 4) * ldb + 8 * j + g];
            }
            uint32_t bh0, bl0, bh1, bl1;
            split_tf32(b0, &bh0, &bl0);
            split_tf32(b1, &bh1, &bl1);
            mma_tf32(acc[j], al, bh0, bh1); // small terms first
            mma_tf32(acc[j], ah, bl0, bl1);
            mma_tf32(acc[j], ah, bh0, bh1);
        }
    }
}

// acc1[j] += A1 B and acc2[j] += A2 B for two row-major A (same lda) and one B read as B(k, n) = B[n * ldb + k]:
// the B fragments are loaded and split once for both products (K K^T and Q K^T share K^T).
template <int NT>
static __device__ __forceinline__ void warp_mma3_pair(float (*acc1)[4], float (*acc2)[4], const float *A1,
                                                      const float *A2, int lda, const float *B, int ldb, int ksteps) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    for (int ks = 0; ks < ksteps; ks++) {
        const int k0 = ks * 8;
        uint32_t h1[4], l1[4], h2[4], l2[4];
        split_tf32(A1[g * lda + k0 + c], &h1[0], &l1[0]), split_tf32(A1[(g + 8) * lda + k0 + c], &h1[1], &l1[1]);
        split_tf32(A1[g * lda + k0 + c + 4], &h1[2], &l1[2]);
        split_tf32(A1[(g + 8) * lda + k0 + c + 4], &h1[3], &l1[3]);
        split_tf32(A2[g * lda + k0 + c], &h2[0], &l2[0]), split_tf32(A2[(g + 8) * lda + k0 + c], &h2[1], &l2[1]);
        split_tf32(A2[g * lda + k0 + c + 4], &h2[2], &l2[2]);
        split_tf32(A2[(g + 8) * lda + k0 + c + 4], &h2[3], &l2[3]);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            uint32_t bh0, bl0, bh1, bl1;
            split_tf32(B[(8 * j + g) * ldb + k0 + c], &bh0, &bl0);
            split_tf32(B[(8 * j + g) * ldb + k0 + c + 4], &bh1, &bl1);
            mma_tf32(acc1[j], l1, bh0, bh1);
            mma_tf32(acc1[j], h1, bl0, bl1);
            mma_tf32(acc1[j], h1, bh0, bh1);
            mma_tf32(acc2[j], l2, bh0, bh1);
            mma_tf32(acc2[j], h2, bl0, bl1);
            mma_tf32(acc2[j], h2, bh0, bh1);
        }
    }
}

// ---- chunk gates (the tile loads, the decay mask, the inverse and the state fragments: gdn_chunk.cuh) ----

// gam[i] = g_0 + ... + g_i over the chunk (g = 0 past L), by one warp: two elements per lane and a shuffle scan.
static __device__ void chunk_cumsum(float *gam, const float *g_row, int step, int L) {
    if (threadIdx.x >= 32) return;
    const int lane = threadIdx.x;
    float x0 = 2 * lane < L ? g_row[(int64_t)(2 * lane) * step] : 0.f;
    float x1 = 2 * lane + 1 < L ? g_row[(int64_t)(2 * lane + 1) * step] : 0.f;
    float s = x0 + x1, incl = s;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        float y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    gam[2 * lane] = incl - s + x0;
    gam[2 * lane + 1] = incl;
}

// gam[i] = gcum[i] (the intra kernel's cumulative sums) for i < L, 0 past L (rows whose results are dropped).
static __device__ void chunk_load_gam(float *gam, const float *gcum_row, int L) {
    if (threadIdx.x < GDN_C) gam[threadIdx.x] = (int)threadIdx.x < L ? gcum_row[threadIdx.x] : 0.f;
}

// ---------------------------------------------------------------------------------------------------------
// prep: grid n, 256 threads; one warp per head vector.
__global__ void k_gdn_prep(float *qn, float *kn, float *beta, float *gg, const float *qkv, const float *bb,
                           const float *aa, const float *A_log, const float *dt_bias, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int cq = 2 * Hk * dk + Hv * dv;
    const float *row = qkv + (int64_t)t * cq;
    for (int v = w; v < 2 * Hk; v += nw) { // v < Hk: q head v; else k head v - Hk (K follows Q in the row)
        const float *src = row + (int64_t)v * dk;
        float ss = 0.f;
        for (int i = lane; i < dk; i += 32) ss += src[i] * src[i];
        ss = cu_warp_sum(ss);
        float r = rsqrtf(ss + 1e-6f) * (v < Hk ? rsqrtf((float)dk) : 1.f);
        float *dst = (v < Hk ? qn + ((int64_t)t * Hk + v) * dk : kn + ((int64_t)t * Hk + (v - Hk)) * dk);
        for (int i = lane; i < dk; i += 32) dst[i] = src[i] * r;
    }
    for (int h = threadIdx.x; h < Hv; h += blockDim.x) {
        beta[(int64_t)t * Hv + h] = sigmoid_f(bb[(int64_t)t * Hv + h]);
        gg[(int64_t)t * Hv + h] = gate_g(aa[(int64_t)t * Hv + h], A_log[h], dt_bias[h]);
    }
}

// ---------------------------------------------------------------------------------------------------------
// intra: grid (Hv, nch) (heads fastest: the r heads of a key group share K/Q reads in L2), 256 threads = 8 warps.
// Shared: Ks [64][dkp+4], QV [64][..] (Q, then V), As, Ts [64][68], Xs [3][16][16], gam, bet. dkp, dvp: dk, dv
// rounded up to 32 (zero-filled columns, so any head size runs the same tiles).
// Writes P [Hv, nch, 64, 64], U [Hv, n, dv], W [Hv, n, dk], gcum [Hv, n].
__global__ void __launch_bounds__(256)
    k_gdn_intra_tc(float *P, float *U, float *W, float *gcum, const float *qn, const float *kn, const float *beta,
                   const float *gg, const float *qkv, int n, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[];
    const int h = blockIdx.x, ch = blockIdx.y, nch = gridDim.y, grp = h / (Hv / Hk);
    const int t0 = ch * GDN_C, L = min(GDN_C, n - t0);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int dkp = (dk + 31) & ~31, ldk = dkp + 4, dvp = (dv + 31) & ~31, ldv = dvp + 8;
    float *Ks = (float *)sm4, *QV = Ks + GDN_C * ldk, *As = QV + GDN_C * max(ldk, ldv), *Ts = As + GDN_C * LD_T;
    float *Xs = Ts + GDN_C * LD_T, *gam = Xs + 3 * 256, *bet = gam + GDN_C;

    gdn_tile_load(Ks, ldk, kn + ((int64_t)t0 * Hk + grp) * dk, (int64_t)Hk * dk, GDN_C, L, dk, dkp);
    gdn_tile_load(QV, ldk, qn + ((int64_t)t0 * Hk + grp) * dk, (int64_t)Hk * dk, GDN_C, L, dk, dkp);
    cu_cp_async_commit();
    if (threadIdx.x < GDN_C) bet[threadIdx.x] = threadIdx.x < L ? beta[(int64_t)(t0 + threadIdx.x) * Hv + h] : 0.f;
    chunk_cumsum(gam, gg + (int64_t)t0 * Hv + h, Hv, L);
    for (int e = threadIdx.x; e < GDN_C * LD_T; e += blockDim.x) Ts[e] = 0.f;
    cu_cp_async_wait<0>();
    __syncthreads();
    if (threadIdx.x < L) gcum[(int64_t)h * n + t0 + threadIdx.x] = gam[threadIdx.x];

    // K K^T and Q K^T: warp w owns rows 16 (w & 3).. and columns 32 (w >> 2)..; tiles above the diagonal are 0
    {
        const int mt = w & 3, n0 = (w >> 2) * 32;
        float kk[4][4], qk[4][4];
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) kk[j][e] = qk[j][e] = 0.f;
        if (n0 <= mt * 16 + 15)
            warp_mma3_pair<4>(kk, qk, Ks + mt * 16 * ldk, QV + mt * 16 * ldk, ldk, Ks + n0 * ldk, ldk, dkp / 8);
        gdn_decay_mask(As, P + ((int64_t)h * nch + ch) * GDN_C * GDN_C, kk, qk, gam, bet, mt, n0, g, c, L);
    }
    __syncthreads();
    // Q is consumed: V of head h goes into its place while T is solved
    gdn_tile_load(QV, ldv, qkv + (int64_t)t0 * (2 * Hk * dk + Hv * dv) + 2 * Hk * dk + (int64_t)h * dv,
                  2 * Hk * dk + Hv * dv, GDN_C, L, dv, dvp);
    cu_cp_async_commit();

    gdn_solve_T(Ts, As, Xs); // T = (I + A)^-1 (gdn_chunk.cuh)
    cu_cp_async_wait<0>();
    __syncthreads();
    // fold the row scales into the right-hand sides: V rows by beta, K rows by beta exp(gamma)
    for (int e = threadIdx.x; e < GDN_C * dvp; e += blockDim.x) {
        int r = e / dvp, cc = e - r * dvp;
        QV[r * ldv + cc] *= bet[r];
    }
    for (int e = threadIdx.x; e < GDN_C * dk; e += blockDim.x) {
        int r = e / dk, cc = e - r * dk;
        Ks[r * ldk + cc] *= bet[r] * expf(gam[r]);
    }
    __syncthreads();
    // U = T (beta V), W = T (beta exp(gamma) K): warp w owns rows 16 (w & 3).., 32-column blocks w >> 2, +2, ...
    // T's rows 16 mt.. are zero past column 16 mt + 15, so only 2 (mt + 1) k-steps run.
    {
        const int mt = w & 3, ks = 2 * (mt + 1), i0 = mt * 16 + g;
        for (int pass = 0; pass < 2; pass++) {
            const int ncol = pass ? dk : dv, ncolp = pass ? dkp : dvp, ldb = pass ? ldk : ldv;
            const float *Bm = pass ? Ks : QV;
            float *dst = pass ? W + ((int64_t)h * n + t0) * dk : U + ((int64_t)h * n + t0) * dv;
            for (int cb = w >> 2; cb * 32 < ncolp; cb += 2) {
                float acc[4][4];
#pragma unroll
                for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
                warp_mma3<4, false, false>(acc, Ts + mt * 16 * LD_T, LD_T, Bm + cb * 32, ldb, ks);
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = i0 + 8 * (e >> 1), col = cb * 32 + 8 * j + 2 * c + (e & 1);
                        if (i < L && col < ncol) dst[(int64_t)i * ncol + col] = acc[j][e];
                    }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// state: grid (Hv, ceil(dv / 32)), 256 threads = 8 warps; block owns state columns col0 = 32 blockIdx.y .. + 32
// of head h for the whole call. The state slice [dkp][32] lives in mma accumulators: warp w owns rows
// 16 w.. and 16 (w + 8).. (dk <= 256; rows past dk stay 0). Shared: Ws [64][dkp+4], Ks [64][dkp+8], Ss [dkp][40],
// Vs [64][40], gam.
// Next chunk's W is fetched (cp.async) while K^T Vnew runs, next chunk's K while Hs/W S run; three barriers
// per chunk.
__global__ void __launch_bounds__(256)
    k_gdn_state_tc(float *Hs, float *UV, float *state, const float *W, const float *kn, const float *gcum, int n,
                   int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[];
    const int h = blockIdx.x, col0 = blockIdx.y * 32, grp = h / (Hv / Hk), nch = (n + GDN_C - 1) / GDN_C;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int dkp = (dk + 31) & ~31, ldw = dkp + 4, ldk = dkp + 8, nmt = dkp / 16;
    float *Ws = (float *)sm4, *Ks = Ws + GDN_C * ldw, *Ss = Ks + GDN_C * ldk, *Vs = Ss + dkp * LD_COL;
    float *gam = Vs + GDN_C * LD_COL;
    const float *Wh = W + (int64_t)h * n * dk;
    float *Uh = UV + (int64_t)h * n * dv, *Sg = state + (int64_t)h * dk * dv;

    float S[2][4][4]; // [m-tile w, w + 8][n-tile][C fragment]
    gdn_state_load(S, Sg, w, g, c, nmt, col0, dk, dv);
    gdn_tile_load(Ws, ldw, Wh, dk, GDN_C, min(GDN_C, n), dk, dkp);
    cu_cp_async_commit();
    gdn_tile_load(Ks, ldk, kn + grp * dk, (int64_t)Hk * dk, GDN_C, min(GDN_C, n), dk, dkp);
    cu_cp_async_commit();
    // gamma of the next chunk travels in a register (thread i < 64 holds row i), so its load is off the chain
    const float *gh = gcum + (int64_t)h * n;
    float gnext = (int)threadIdx.x < min(GDN_C, n) ? gh[threadIdx.x] : 0.f;

    for (int ch = 0; ch < nch; ch++) {
        const int t0 = ch * GDN_C, L = min(GDN_C, n - t0);
        if (threadIdx.x < GDN_C) gam[threadIdx.x] = gnext;
        gnext = ch + 1 < nch && (int)threadIdx.x < min(GDN_C, n - t0 - GDN_C) ? gh[t0 + GDN_C + threadIdx.x] : 0.f;
        // chunk-start state -> Ss (for W S) and Hs (for the output kernel)
        float *Hc = Hs + ((int64_t)h * nch + ch) * dk * dv;
#pragma unroll
        for (int m = 0; m < 2; m++)
            if (w + 8 * m < nmt)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = (w + 8 * m) * 16 + g + 8 * (e >> 1), cl = 8 * j + 2 * c + (e & 1);
                        Ss[i * LD_COL + cl] = S[m][j][e];
                        if (i < dk && col0 + cl < dv) Hc[(int64_t)i * dv + col0 + cl] = S[m][j][e];
                    }
        // this thread's U elements of the Vnew tile (rows 16 (w & 3).., columns 16 (w >> 2)..), loaded early
        const int vm = w & 3, vn0 = (w >> 2) * 16;
        float u[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = vm * 16 + g + 8 * (e >> 1), col = col0 + vn0 + 8 * j + 2 * c + (e & 1);
                u[j][e] = t < L && col < dv ? Uh[(int64_t)(t0 + t) * dv + col] : 0.f;
            }
        cu_cp_async_wait<1>(); // this chunk's W (its K may still be in flight)
        __syncthreads();
        // Vnew = U - W S; Vs = Vnew o exp(gamma_last - gamma) (0 past L)
        {
            float ws[2][4];
#pragma unroll
            for (int j = 0; j < 2; j++) ws[j][0] = ws[j][1] = ws[j][2] = ws[j][3] = 0.f;
            warp_mma3<2, false, false>(ws, Ws + vm * 16 * ldw, ldw, Ss + vn0, LD_COL, dkp / 8);
            const float glast = gam[L - 1];
#pragma unroll
            for (int j = 0; j < 2; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = vm * 16 + g + 8 * (e >> 1), cl = vn0 + 8 * j + 2 * c + (e & 1);
                    const float v = u[j][e] - ws[j][e];
                    if (t < L && col0 + cl < dv) Uh[(int64_t)(t0 + t) * dv + col0 + cl] = v;
                    Vs[t * LD_COL + cl] = t < L ? v * expf(glast - gam[t]) : 0.f;
                }
        }
        cu_cp_async_wait<0>(); // this chunk's K
        __syncthreads();    // Ws consumed, Vs and Ks complete
        if (ch + 1 < nch)
            gdn_tile_load(Ws, ldw, Wh + (int64_t)(t0 + GDN_C) * dk, dk, GDN_C, min(GDN_C, n - t0 - GDN_C), dk, dkp);
        cu_cp_async_commit();
        // S <- exp(gamma_last) S + K^T Vs
        {
            const float eg = expf(gam[L - 1]);
#pragma unroll
            for (int m = 0; m < 2; m++)
                if (w + 8 * m < nmt) {
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) S[m][j][e] *= eg;
                    warp_mma3<4, true, false>(S[m], Ks + (w + 8 * m) * 16, ldk, Vs, LD_COL, GDN_C / 8);
                }
        }
        __syncthreads(); // Ks, Vs, gam, Ss consumed
        if (ch + 1 < nch)
            gdn_tile_load(Ks, ldk, kn + ((int64_t)(t0 + GDN_C) * Hk + grp) * dk, (int64_t)Hk * dk, GDN_C,
                          min(GDN_C, n - t0 - GDN_C), dk, dkp);
        cu_cp_async_commit();
    }
    gdn_state_store(Sg, S, w, g, c, nmt, col0, dk, dv);
}

// ---------------------------------------------------------------------------------------------------------
// out: grid (ceil(dv / 64), Hv, nch), 256 threads = 8 warps; block computes O[chunk rows][64 columns] of head h.
// Shared: Qs [64][dkp+4], Hsm [dkp][72], Pm [64][68], Vm [64][72], gam. Warp w: rows 16 (w & 3).., columns
// 32 (w >> 2)...
__global__ void __launch_bounds__(256)
    k_gdn_out_tc(float *o, const float *Hs, const float *Vnew, const float *P, const float *qn, const float *gcum,
                 int n, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[];
    const int col0 = blockIdx.x * 64, h = blockIdx.y, ch = blockIdx.z, nch = gridDim.z, grp = h / (Hv / Hk);
    const int t0 = ch * GDN_C, L = min(GDN_C, n - t0);
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int dkp = (dk + 31) & ~31, ldq = dkp + 4, cols = min(64, dv - col0);
    float *Qs = (float *)sm4, *Hsm = Qs + GDN_C * ldq, *Pm = Hsm + dkp * LD_OCOL, *Vm = Pm + GDN_C * LD_T;
    float *gam = Vm + GDN_C * LD_OCOL;

    gdn_tile_load(Qs, ldq, qn + ((int64_t)t0 * Hk + grp) * dk, (int64_t)Hk * dk, GDN_C, L, dk, dkp);
    gdn_tile_load(Hsm, LD_OCOL, Hs + ((int64_t)h * nch + ch) * dk * dv + col0, dv, dkp, dk, cols, 64);
    gdn_tile_load(Pm, LD_T, P + ((int64_t)h * nch + ch) * GDN_C * GDN_C, GDN_C, GDN_C, GDN_C, GDN_C, GDN_C);
    gdn_tile_load(Vm, LD_OCOL, Vnew + ((int64_t)h * n + t0) * dv + col0, dv, GDN_C, L, cols, 64);
    cu_cp_async_commit();
    chunk_load_gam(gam, gcum + (int64_t)h * n + t0, L);
    cu_cp_async_wait<0>();
    __syncthreads();

    const int mt = w & 3, n0 = (w >> 2) * 32;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    warp_mma3<4, false, false>(acc, Qs + mt * 16 * ldq, ldq, Hsm + n0, LD_OCOL, dkp / 8);
    const float ea = expf(gam[mt * 16 + g]), eb = expf(gam[mt * 16 + g + 8]);
#pragma unroll
    for (int j = 0; j < 4; j++) acc[j][0] *= ea, acc[j][1] *= ea, acc[j][2] *= eb, acc[j][3] *= eb;
    // P is zero right of the diagonal: rows 16 mt.. need 2 (mt + 1) k-steps
    warp_mma3<4, false, false>(acc, Pm + mt * 16 * LD_T, LD_T, Vm + n0, LD_OCOL, 2 * (mt + 1));
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = mt * 16 + g + 8 * (e >> 1), cl = n0 + 8 * j + 2 * c + (e & 1);
            if (t < L && cl < cols) o[((int64_t)(t0 + t) * Hv + h) * dv + col0 + cl] = acc[j][e];
        }
}

// ---------------------------------------------------------------------------------------------------------
static size_t smem_intra(int dk, int dv) {
    int ldk = ((dk + 31) & ~31) + 4, ldv = ((dv + 31) & ~31) + 8;
    return ((size_t)GDN_C * ldk + (size_t)GDN_C * (ldk > ldv ? ldk : ldv) + 2 * GDN_C * LD_T + 3 * 256 + 2 * GDN_C) *
           sizeof(float);
}
static size_t smem_state(int dk) {
    dk = (dk + 31) & ~31;
    return ((size_t)GDN_C * (dk + 4) + (size_t)GDN_C * (dk + 8) + (size_t)dk * LD_COL + GDN_C * LD_COL + GDN_C) *
           sizeof(float);
}
static size_t smem_out(int dk) {
    dk = (dk + 31) & ~31;
    return ((size_t)GDN_C * (dk + 4) + (size_t)dk * LD_OCOL + GDN_C * LD_T + GDN_C * LD_OCOL + GDN_C) * sizeof(float);
}

void cu_gdn_chunked(fd_backend *be, float *o, const float *qkv, const float *b, const float *a, const float *A_log,
                    const float *dt_bias, float *state, int n_all, int Hk, int Hv, int dk, int dv) {
    FD_CHECK(dk >= 1 && dk <= GDN_MAXD && dv >= 1 && dv <= GDN_MAXD, "gdn chunked: dk %d / dv %d not covered", dk, dv);
    cudaStream_t s = cu_of(be)->stream;
    const int cq = 2 * Hk * dk + Hv * dv, seg = n_all < GDN_SEG ? n_all : GDN_SEG, nch_max = (seg + GDN_C - 1) / GDN_C;
    float *qn = (float *)cu_scratch(be, CU_SCR_B, (size_t)seg * Hk * dk * 4);
    float *kn = (float *)cu_scratch(be, CU_SCR_C, (size_t)seg * Hk * dk * 4);
    float *bg = (float *)cu_scratch(be, CU_SCR_D, (size_t)seg * Hv * 4 * 3); // beta | g | gcum
    float *P = (float *)cu_scratch(be, CU_SCR_E, (size_t)Hv * nch_max * GDN_C * GDN_C * 4);
    float *U = (float *)cu_scratch(be, CU_SCR_F, (size_t)Hv * seg * dv * 4);
    float *W = (float *)cu_scratch(be, CU_SCR_G, (size_t)Hv * seg * dk * 4);
    float *Hs = (float *)cu_scratch(be, CU_SCR_H, (size_t)Hv * nch_max * dk * dv * 4);
    const size_t sm_i = smem_intra(dk, dv), sm_s = smem_state(dk), sm_o = smem_out(dk);
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_gdn_intra_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_i));
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_gdn_state_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_s));
    FD_CUDA_CHECK(cudaFuncSetAttribute(k_gdn_out_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_o));

    for (int t0 = 0; t0 < n_all; t0 += GDN_SEG) {
        const int n = n_all - t0 < GDN_SEG ? n_all - t0 : GDN_SEG, nch = (n + GDN_C - 1) / GDN_C;
        const float *x = qkv + (int64_t)t0 * cq;
        float *beta = bg, *gg = bg + (size_t)n * Hv, *gcum = bg + (size_t)2 * n * Hv;
        cu_prof pr;
        cu_prof_begin(be, &pr, "gdn_chunked", n);
        cu_launch(be, k_gdn_prep, n, 256, 0, qn, kn, beta, gg, x, b + (int64_t)t0 * Hv, a + (int64_t)t0 * Hv, A_log,
                  dt_bias, Hk, Hv, dk, dv);
        cu_prof_mark(be, &pr, "prep");
        cu_launch(be, k_gdn_intra_tc, dim3(Hv, nch), 256, sm_i, P, U, W, gcum, qn, kn, beta, gg, x, n, Hk, Hv, dk, dv);
        cu_prof_mark(be, &pr, "intra");
        cu_launch(be, k_gdn_state_tc, dim3(Hv, (dv + 31) / 32), 256, sm_s, Hs, U, state, W, kn, gcum, n, Hk, Hv, dk,
                  dv);
        cu_prof_mark(be, &pr, "state");
        cu_launch(be, k_gdn_out_tc, dim3((dv + 63) / 64, Hv, nch), 256, sm_o, o + (int64_t)t0 * Hv * dv, Hs, U, P, qn,
                  gcum, n, Hk, Hv, dk, dv);
        cu_prof_mark(be, &pr, "out");
        cu_prof_end(be, &pr);
    }
}
