// Chunked Gated-DeltaNet prefill with bf16 tensor-core operands (route gdn_chunk = bf16). The same chunk-64 UT/WY
// form as gdn_chunk.cu (route value tf32x3, which keeps ~fp32 products), rounded where FLA's Triton
// chunk_gated_delta_rule rounds, so its error against fp64 can be compared with FLA's on the same inputs
// (issue 16's screen: not worse than 2x FLA's). Two kernels:
//   intra     (per head, chunk)   q, k L2-normalised (q times 1/sqrt(dk)) and rounded to bf16 [FLA: l2norm writes
//                                  the input dtype]; beta, g and gamma = cumsum(g) in fp32; K K^T, Q K^T on bf16
//                                  operands with fp32 sums; A = strict_lower(beta K K^T o Gamma) fp32;
//                                  T = (I + A)^-1 in fp32, rounded to bf16 [FLA stores it as k.dtype];
//                                  U = T bf16(beta V), W = T bf16(beta exp(gamma) K), stored bf16 [FLA: same];
//                                  P = lower_incl(Q K^T o Gamma) stored bf16 [FLA casts it to bf16 before P Vnew]
//   state_out (per head, 32 value columns; chunks in order)
//                                  S (fp32, in mma accumulators) rounded to bf16 for the products [FLA: h is
//                                  stored and multiplied as bf16]; Vnew = U - W S (fp32 sum);
//                                  O = diag(exp gamma) Q S + P bf16(Vnew), written fp32 [FLA writes bf16];
//                                  S <- exp(gamma_last) S + K^T bf16(Vnew o exp(gamma_last - gamma)) [FLA: same]
// Compared with the tf32x3 route: no separate prep pass (intra normalises q and k itself; the first value head
// of each key group also stores them for state_out), no per-chunk states Hs in memory (the output is computed
// where the state is), bf16 scratch. DRAM per 4096-token call at the 27B's heads: ~0.55 GB (qkv 168 MB read
// once, U/W/P 125 MB written and read, o 100 MB), against ~1.6 GB.
//
// mma.sync m16n8k16 bf16 fragments (PTX ISA; the same convention as gemv.cu), g = lane / 4, c = lane % 4, each
// 32-bit register two bf16 with the lower k (or column) in the low half:
//   A (16 x 16): r0 (g, 2c..2c+1)  r1 (g + 8, 2c..)  r2 (g, 2c + 8..)  r3 (g + 8, 2c + 8..)
//   B (16 x 8):  r0 (k 2c..2c+1, n g)  r1 (k 2c + 8.., n g)
//   C (16 x 8):  c0 (g, 2c)  c1 (g, 2c + 1)  c2 (g + 8, 2c)  c3 (g + 8, 2c + 1)
// Shared bf16 tiles have a leading dimension of 8 mod 16 elements (4 mod 8 words), so the pair loads of a fragment
// (row g, word c) hit 32 distinct banks.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

#include "cuda/cp_async.cuh"
#include "cuda/gdn_chunk.cuh"
#include "cuda/gdn_gates.h"
#include "cuda/mma.cuh"

#define GB_C   64   // chunk
#define GB_SEG 4096 // tokens per pass (bounds the scratch: U, W, P are ~(dk + dv + 64) * 2 bytes per token-head)
#define GB_LDF 68   // fp32 [64][68] tiles (A, T): the tf32x3 kernel's layout
#define GB_LDC 72   // bf16 tiles whose row is one chunk (T, P, Vnew^T): 64 + 8

typedef __nv_bfloat16 bf16;
static_assert(GB_C == GDN_CHUNK && GB_LDF == GDN_CHUNK_LD, "gdn_chunk.cuh's tile layout");

static __device__ __forceinline__ int pad32(int x) {
    return (x + 31) & ~31;
}
static __device__ __forceinline__ uint32_t ld_pair(const bf16 *p) { // p[0] low, p[1] high; p 4-byte aligned
    return *(const uint32_t *)p;
}
static __device__ __forceinline__ uint32_t pack_pair(bf16 lo, bf16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

// acc[j] (16 x 8 tiles, columns 8j..) += A (16 x 16 ksteps) B (16 ksteps x 8 NT), one warp, fp32 sums.
// A(r, k) = A[r * lda + k], or A[k * lda + r] when A_T; B(k, n) = B[k * ldb + n], or B[n * ldb + k] when B_T.
// The pairs of a fragment are one 32-bit load where k is the contiguous index (A row-major, B_T), two 16-bit
// loads otherwise.
template <int NT, bool A_T, bool B_T>
static __device__ __forceinline__ void warp_mma_bf16(float (*acc)[4], const bf16 *A, int lda, const bf16 *B, int ldb,
                                                     int ksteps) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    for (int ks = 0; ks < ksteps; ks++) {
        const int k0 = ks * 16 + 2 * c;
        uint32_t a[4];
        if (A_T) {
            a[0] = pack_pair(A[k0 * lda + g], A[(k0 + 1) * lda + g]);
            a[1] = pack_pair(A[k0 * lda + g + 8], A[(k0 + 1) * lda + g + 8]);
            a[2] = pack_pair(A[(k0 + 8) * lda + g], A[(k0 + 9) * lda + g]);
            a[3] = pack_pair(A[(k0 + 8) * lda + g + 8], A[(k0 + 9) * lda + g + 8]);
        } else {
            a[0] = ld_pair(A + g * lda + k0), a[1] = ld_pair(A + (g + 8) * lda + k0);
            a[2] = ld_pair(A + g * lda + k0 + 8), a[3] = ld_pair(A + (g + 8) * lda + k0 + 8);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int nn = 8 * j + g;
            uint32_t b0, b1;
            if (B_T) {
                b0 = ld_pair(B + nn * ldb + k0), b1 = ld_pair(B + nn * ldb + k0 + 8);
            } else {
                b0 = pack_pair(B[k0 * ldb + nn], B[(k0 + 1) * ldb + nn]);
                b1 = pack_pair(B[(k0 + 8) * ldb + nn], B[(k0 + 9) * ldb + nn]);
            }
            cu_mma_bf16(acc[j], a[0], a[1], a[2], a[3], b0, b1);
        }
    }
}

// acc1[j] += A1 B and acc2[j] += A2 B for two row-major A (same lda) and one B read as B(k, n) = B[n * ldb + k]:
// the B fragments are loaded once for both (K K^T with Q K^T; W S with Q S).
template <int NT>
static __device__ __forceinline__ void warp_mma_bf16_pair(float (*acc1)[4], float (*acc2)[4], const bf16 *A1,
                                                          const bf16 *A2, int lda, const bf16 *B, int ldb, int ksteps) {
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    for (int ks = 0; ks < ksteps; ks++) {
        const int k0 = ks * 16 + 2 * c;
        const uint32_t x0 = ld_pair(A1 + g * lda + k0), x1 = ld_pair(A1 + (g + 8) * lda + k0);
        const uint32_t x2 = ld_pair(A1 + g * lda + k0 + 8), x3 = ld_pair(A1 + (g + 8) * lda + k0 + 8);
        const uint32_t y0 = ld_pair(A2 + g * lda + k0), y1 = ld_pair(A2 + (g + 8) * lda + k0);
        const uint32_t y2 = ld_pair(A2 + g * lda + k0 + 8), y3 = ld_pair(A2 + (g + 8) * lda + k0 + 8);
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int nn = 8 * j + g;
            const uint32_t b0 = ld_pair(B + nn * ldb + k0), b1 = ld_pair(B + nn * ldb + k0 + 8);
            cu_mma_bf16(acc1[j], x0, x1, x2, x3, b0, b1);
            cu_mma_bf16(acc2[j], y0, y1, y2, y3, b0, b1);
        }
    }
}

// row[col], row[col + 1] = v0, v1 rounded to bf16, the ones below ncol; one 32-bit store when aligned.
static __device__ __forceinline__ void store_pair_bf16(bf16 *row, int col, float v0, float v1, int ncol) {
    if (col + 1 < ncol && ((uintptr_t)(row + col) & 3) == 0) {
        *(__nv_bfloat162 *)(row + col) = __floats2bfloat162_rn(v0, v1);
    } else {
        if (col < ncol) row[col] = __float2bfloat16_rn(v0);
        if (col + 1 < ncol) row[col + 1] = __float2bfloat16_rn(v1);
    }
}

// ---------------------------------------------------------------------------------------------------------
// intra: grid (Hv, chunks), 256 threads = 8 warps. Shared (fp32 first): As, Ts [64][68], Xs [3][256], gam, bet;
// then bf16 Kb [64][dkp+8], QV [64][..] (Q, later beta V); Tb [64][72] (bf16 T) over As. At dk = dv = 128 that
// is 71.5 KB, so three blocks a SM (80 registers a thread, the most three blocks of 256 allow). dkp, dvp: dk, dv
// rounded up to 32 (zero columns). Writes qn, kn [n, Hk, dk] (the group's first value head only),
// P [Hv, chunks, 64, 64], U [Hv, n, dv], W [Hv, n, dk] (bf16) and gcum [Hv, n] (fp32).
template <int JJ> // dk <= 32 JJ: JJ = 4 (dk <= 128, three blocks a SM) or 8
__global__ void __launch_bounds__(256, JJ <= 4 ? 3 : 2)
    k_gdn_intra_bf16(bf16 *qn, bf16 *kn, bf16 *P, bf16 *U, bf16 *W, float *gcum, const float *qkv, const float *bb,
                     const float *aa, const float *A_log, const float *dt_bias, int n, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[];
    const int h = blockIdx.x, ch = blockIdx.y, nch = gridDim.y, r = Hv / Hk, grp = h / r;
    const int t0 = ch * GB_C, L = min(GB_C, n - t0), cq = 2 * Hk * dk + Hv * dv;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int dkp = pad32(dk), ldk = dkp + 8, dvp = pad32(dv), ldv = dvp + 8;
    float *As = (float *)sm4, *Ts = As + GB_C * GB_LDF, *Xs = Ts + GB_C * GB_LDF, *gam = Xs + 3 * 256;
    float *bet = gam + GB_C;
    bf16 *Kb = (bf16 *)(bet + GB_C), *QV = Kb + GB_C * ldk;
    bf16 *Tb = (bf16 *)sm4; // bf16 T [64][72] (9 KB) over fp32 A [64][68] (17 KB), dead once T is solved

    // The chunk's q and k rows of the key group and v rows of head h toward L2 first: the loads below come in
    // batches with shuffles and stores between them, so each batch waits its full latency; from L2, not DRAM.
    // Lines: every 32 floats of a row and its last float (a row need not start on a line).
    {
        const int lq = (dk + 31) / 32 + 1, lv = (dv + 31) / 32 + 1, per_row = 2 * lq + lv;
        for (int e = threadIdx.x; e < L * per_row; e += blockDim.x) {
            const int row = e / per_row, x = e - row * per_row;
            const float *base = qkv + (int64_t)(t0 + row) * cq;
            const float *p = x < lq       ? base + grp * dk + min(32 * x, dk - 1)
                             : x < 2 * lq ? base + Hk * dk + grp * dk + min(32 * (x - lq), dk - 1)
                                          : base + 2 * Hk * dk + h * dv + min(32 * (x - 2 * lq), dv - 1);
            cu_prefetch_l2(p);
        }
    }
    // gates: warp 0 the cumulative log-decay (two tokens per lane, shuffle scan), warps 1-2 beta
    if (w == 0) {
        const float Al = A_log[h], dtb = dt_bias[h];
        const float *arow = aa + (int64_t)t0 * Hv + h;
        const float x0 = 2 * lane < L ? gate_g(arow[(int64_t)(2 * lane) * Hv], Al, dtb) : 0.f;
        const float x1 = 2 * lane + 1 < L ? gate_g(arow[(int64_t)(2 * lane + 1) * Hv], Al, dtb) : 0.f;
        const float s = x0 + x1;
        float incl = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += y;
        }
        gam[2 * lane] = incl - s + x0;
        gam[2 * lane + 1] = incl;
    } else if (w < 3) {
        const int t = threadIdx.x - 32;
        bet[t] = t < L ? sigmoid_f(bb[(int64_t)(t0 + t) * Hv + h]) : 0.f;
    }
    for (int e = threadIdx.x; e < GB_C * GB_LDF; e += blockDim.x) Ts[e] = 0.f;
    // q and k rows of the key group, one warp per row: x * rsqrt(sum x^2 + 1e-6) (q also / sqrt(dk)), rounded
    // to bf16 here and, by the group's first value head, in memory for state_out
    // Warp w takes rows w + 8u (u < 16: 64 q rows, then 64 k rows), four at a time: their loads all issued
    // before the first sum (lane holds elements lane + 32 jj), the same sums and products as one row at a time.
    for (int v0 = w; v0 < 2 * GB_C; v0 += 32) {
        float xr[4][JJ], ss[4];
#pragma unroll
        for (int b4 = 0; b4 < 4; b4++) {
            const int v = v0 + 8 * b4, row = v & (GB_C - 1), is_k = v >= GB_C;
            const float *src = qkv + (int64_t)(t0 + row) * cq + (is_k ? Hk * dk : 0) + grp * dk;
#pragma unroll
            for (int jj = 0; jj < JJ; jj++) {
                const int i = lane + 32 * jj;
                xr[b4][jj] = row < L && i < dk ? src[i] : 0.f;
            }
        }
#pragma unroll
        for (int b4 = 0; b4 < 4; b4++) {
            float s2 = 0.f;
#pragma unroll
            for (int jj = 0; jj < JJ; jj++) s2 += xr[b4][jj] * xr[b4][jj];
            ss[b4] = cu_warp_sum(s2);
        }
#pragma unroll
        for (int b4 = 0; b4 < 4; b4++) {
            const int v = v0 + 8 * b4, row = v & (GB_C - 1), is_k = v >= GB_C;
            const float sc = rsqrtf(ss[b4] + 1e-6f) * (is_k ? 1.f : rsqrtf((float)dk));
            bf16 *dst = (is_k ? Kb : QV) + row * ldk;
            bf16 *mem = (is_k ? kn : qn) + ((int64_t)(t0 + row) * Hk + grp) * dk;
            const bool store = h % r == 0 && row < L;
#pragma unroll
            for (int jj = 0; jj < JJ; jj++) {
                const int i = lane + 32 * jj;
                if (i < dkp) {
                    const bf16 x = __float2bfloat16_rn(xr[b4][jj] * sc);
                    dst[i] = x;
                    if (store && i < dk) mem[i] = x;
                }
            }
        }
    }
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
            warp_mma_bf16_pair<4>(kk, qk, Kb + mt * 16 * ldk, QV + mt * 16 * ldk, ldk, Kb + n0 * ldk, ldk, dkp / 16);
        gdn_decay_mask(As, P + ((int64_t)h * nch + ch) * GB_C * GB_C, kk, qk, gam, bet, mt, n0, g, c, L);
    }
    __syncthreads();
    // Q is consumed: bf16(beta V) of head h goes into its place, and K's rows become bf16(beta exp(gamma) K)
    {
        const float *vsrc = qkv + (int64_t)t0 * cq + 2 * Hk * dk + (int64_t)h * dv;
        // four loads in flight a thread, then their four stores (0 past L and dv: 0 * beta = +0, as before);
        // eight (session 12) need more than the 80 registers three blocks a SM allow
        const int tot = GB_C * dvp;
        for (int e0 = threadIdx.x; e0 < tot; e0 += 4 * 256) {
            float vv[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = e0 + 256 * u, rr = e / dvp, cc = e - rr * dvp;
                vv[u] = e < tot && rr < L && cc < dv ? vsrc[(int64_t)rr * cq + cc] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = e0 + 256 * u, rr = e / dvp, cc = e - rr * dvp;
                if (e < tot) QV[rr * ldv + cc] = __float2bfloat16_rn(vv[u] * bet[rr]);
            }
        }
        for (int e = threadIdx.x; e < GB_C * dkp; e += blockDim.x) {
            const int rr = e / dkp, cc = e - rr * dkp;
            Kb[rr * ldk + cc] = __float2bfloat16_rn(__bfloat162float(Kb[rr * ldk + cc]) * bet[rr] * expf(gam[rr]));
        }
    }
    gdn_solve_T(Ts, As, Xs); // T = (I + A)^-1 in fp32 (gdn_chunk.cuh), the tf32x3 set's substitution
    // gdn_solve_T's last barrier: every read of As is done, so Tb (its first 9 KB) may be written
    for (int e = threadIdx.x; e < GB_C * GB_C; e += blockDim.x) {
        const int rr = e >> 6, cc = e & 63;
        Tb[rr * GB_LDC + cc] = __float2bfloat16_rn(Ts[rr * GB_LDF + cc]);
    }
    __syncthreads();
    // U = T (beta V), W = T (beta exp(gamma) K): warp w owns rows 16 (w & 3).., 32-column blocks w >> 2, +2, ...
    // T's rows 16 mt.. are zero past column 16 mt + 15, so only mt + 1 k-steps run.
    {
        const int mt = w & 3, i0 = mt * 16 + g;
        for (int pass = 0; pass < 2; pass++) {
            const int ncol = pass ? dk : dv, ncolp = pass ? dkp : dvp, ldb = pass ? ldk : ldv;
            const bf16 *Bm = pass ? Kb : QV;
            bf16 *dst = pass ? W + ((int64_t)h * n + t0) * dk : U + ((int64_t)h * n + t0) * dv;
            for (int cb = w >> 2; cb * 32 < ncolp; cb += 2) {
                float acc[4][4];
#pragma unroll
                for (int j = 0; j < 4; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
                warp_mma_bf16<4, false, false>(acc, Tb + mt * 16 * GB_LDC, GB_LDC, Bm + cb * 32, ldb, mt + 1);
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int e2 = 0; e2 < 2; e2++) {
                        const int i = i0 + 8 * e2, col = cb * 32 + 8 * j + 2 * c;
                        if (i < L)
                            store_pair_bf16(dst + (int64_t)i * ncol, col, acc[j][2 * e2], acc[j][2 * e2 + 1], ncol);
                    }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// state_out: grid (ceil(dv / COLS), Hv) (the column blocks of a head are neighbours: they read the same W, Q, K,
// P, from L2), 256 threads = 8 warps. The block owns state columns col0 = COLS blockIdx.x .. + COLS of head h for
// the whole call; the slice [dkp][COLS] lives in mma accumulators: warp w owns rows 16 w.. and 16 (w + 8)..
// (dk <= 256; rows past dk stay 0). Shared: gam (fp32), then bf16 Wb, Qb, Kb [64][dkp+8], SbT [COLS][dkp+8] (the
// state, transposed: B operand of W S and Q S), Pb [64][72], VbT, VdT [COLS][72] (Vnew and the decayed Vnew,
// transposed). Per chunk, three barriers: (A) state -> SbT; (B) Vnew = U - W S, O = e^gamma Q S; (C) O += P Vnew
// (stored), S <- e^gamma_last S + K^T Vd. The next chunk's W and Q arrive (cp.async) during (C), its K and P
// during (A) and (B), its U (registers) during (C).
// COLS = 32 (the default): 192 blocks at the 27B's heads, two a SM at most, so 60 SMs run two chains and 72 one.
// COLS = 16: 384 blocks, 69 KB of shared memory and <= 80 registers, three a SM, all resident at once; measured
// slower on the H200 (0.481 vs 0.451 ms per 4096 tokens, docs/perf-notes.md session 13: each block still loads
// the whole W/Q/K/P tiles per chunk, so L2 traffic doubles). Kept built: tools/gdn_emu compares the two bitwise.
// Every output and state element sums the same products in the same order for either COLS (each mma chain has the same
// k-steps; only which warp owns a column changes), so the two give the same bits.
template <int COLS>
__global__ void __launch_bounds__(256, COLS == 16 ? 3 : 2)
    k_gdn_state_out_bf16(float *o, float *state, const bf16 *W, const bf16 *U, const bf16 *qn, const bf16 *kn,
                         const bf16 *P, const float *gcum, int n, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    extern __shared__ float4 sm4[];
    static_assert(COLS == 16 || COLS == 32, "8 warps: 4 row tiles x 2 column halves of the Vnew tile");
    constexpr int NS = COLS / 8, VN = COLS / 16; // n-tiles of a warp's state rows; of its Vnew tile
    const int col0 = blockIdx.x * COLS, h = blockIdx.y, grp = h / (Hv / Hk), nch = (n + GB_C - 1) / GB_C;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const int dkp = pad32(dk), ldk = dkp + 8, nmt = dkp / 16;
    float *gam = (float *)sm4;
    bf16 *Wb = (bf16 *)(gam + GB_C), *Qb = Wb + GB_C * ldk, *Kb = Qb + GB_C * ldk, *SbT = Kb + GB_C * ldk;
    bf16 *Pb = SbT + COLS * ldk, *VbT = Pb + GB_C * GB_LDC, *VdT = VbT + COLS * GB_LDC;
    const bf16 *Wh = W + (int64_t)h * n * dk, *Uh = U + (int64_t)h * n * dv, *Ph = P + (int64_t)h * nch * GB_C * GB_C;
    const bf16 *qg = qn + (int64_t)grp * dk, *kg = kn + (int64_t)grp * dk;
    const int64_t qk_stride = (int64_t)Hk * dk;
    float *Sg = state + (int64_t)h * dk * dv;

    float S[2][NS][4]; // [m-tile w, w + 8][n-tile][C fragment]
    gdn_state_load(S, Sg, w, g, c, nmt, col0, dk, dv);
    const int L0 = min(GB_C, n);
    gdn_tile_load(Wb, ldk, Wh, dk, GB_C, L0, dk, dkp);
    gdn_tile_load(Qb, ldk, qg, qk_stride, GB_C, L0, dk, dkp);
    cu_cp_async_commit();
    gdn_tile_load(Kb, ldk, kg, qk_stride, GB_C, L0, dk, dkp);
    gdn_tile_load(Pb, GB_LDC, Ph, GB_C, GB_C, GB_C, GB_C, GB_C);
    cu_cp_async_commit();
    // this thread's U elements of the Vnew tile (rows 16 (w & 3).., columns COLS / 2 (w >> 2)..) and gamma
    // (thread i < 64: row i) travel one chunk ahead in registers, so their loads are off the chain
    const int vm = w & 3, vn0 = (w >> 2) * 8 * VN;
    const float *gh = gcum + (int64_t)h * n;
    float gnext = (int)threadIdx.x < L0 ? gh[threadIdx.x] : 0.f;
    float un[VN][4];
#pragma unroll
    for (int j = 0; j < VN; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = vm * 16 + g + 8 * (e >> 1), col = col0 + vn0 + 8 * j + 2 * c + (e & 1);
            un[j][e] = t < L0 && col < dv ? __bfloat162float(Uh[(int64_t)t * dv + col]) : 0.f;
        }

    for (int ch = 0; ch < nch; ch++) {
        const int t0 = ch * GB_C, L = min(GB_C, n - t0), Ln = min(GB_C, n - t0 - GB_C); // Ln <= 0: no next chunk
        if (threadIdx.x < GB_C) gam[threadIdx.x] = gnext;
        gnext = (int)threadIdx.x < Ln ? gh[t0 + GB_C + threadIdx.x] : 0.f;
        float u[VN][4];
#pragma unroll
        for (int j = 0; j < VN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) u[j][e] = un[j][e];
                // (A) chunk-start state -> SbT (bf16, transposed)
#pragma unroll
        for (int m = 0; m < 2; m++)
            if (w + 8 * m < nmt)
#pragma unroll
                for (int j = 0; j < NS; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int i = (w + 8 * m) * 16 + g + 8 * (e >> 1), cl = 8 * j + 2 * c + (e & 1);
                        SbT[cl * ldk + i] = __float2bfloat16_rn(S[m][j][e]);
                    }
        cu_cp_async_wait<1>(); // this chunk's W and Q (its K and P may still be in flight)
        __syncthreads();
        // (B) Vnew = U - W S and e^gamma Q S for rows 16 vm.., columns vn0..; Vnew and Vnew e^(gamma_L - gamma)
        // into VbT / VdT (0 past L)
        float oacc[VN][4];
        {
            float ws[VN][4];
#pragma unroll
            for (int j = 0; j < VN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) ws[j][e] = oacc[j][e] = 0.f;
            warp_mma_bf16_pair<VN>(ws, oacc, Wb + vm * 16 * ldk, Qb + vm * 16 * ldk, ldk, SbT + vn0 * ldk, ldk,
                                   dkp / 16);
            const float glast = gam[L - 1];
#pragma unroll
            for (int j = 0; j < VN; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int t = vm * 16 + g + 8 * (e >> 1), cl = vn0 + 8 * j + 2 * c + (e & 1);
                    const float v = u[j][e] - ws[j][e];
                    oacc[j][e] *= expf(gam[t]);
                    VbT[cl * GB_LDC + t] = __float2bfloat16_rn(t < L ? v : 0.f);
                    VdT[cl * GB_LDC + t] = __float2bfloat16_rn(t < L ? v * expf(glast - gam[t]) : 0.f);
                }
        }
        cu_cp_async_wait<0>(); // this chunk's K and P
        __syncthreads();       // Wb, Qb, SbT consumed; VbT, VdT, Kb, Pb complete
        if (Ln > 0) {
            gdn_tile_load(Wb, ldk, Wh + (int64_t)(t0 + GB_C) * dk, dk, GB_C, Ln, dk, dkp);
            gdn_tile_load(Qb, ldk, qg + (int64_t)(t0 + GB_C) * qk_stride, qk_stride, GB_C, Ln, dk, dkp);
        }
        cu_cp_async_commit();
#pragma unroll
        for (int j = 0; j < VN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = vm * 16 + g + 8 * (e >> 1), col = col0 + vn0 + 8 * j + 2 * c + (e & 1);
                un[j][e] = t < Ln && col < dv ? __bfloat162float(Uh[(int64_t)(t0 + GB_C + t) * dv + col]) : 0.f;
            }
        // (C) O += P Vnew (P is zero right of the diagonal: rows 16 vm.. need vm + 1 k-steps), stored fp32
        warp_mma_bf16<VN, false, true>(oacc, Pb + vm * 16 * GB_LDC, GB_LDC, VbT + vn0 * GB_LDC, GB_LDC, vm + 1);
#pragma unroll
        for (int j = 0; j < VN; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int t = vm * 16 + g + 8 * (e >> 1), col = col0 + vn0 + 8 * j + 2 * c + (e & 1);
                if (t < L && col < dv) o[((int64_t)(t0 + t) * Hv + h) * dv + col] = oacc[j][e];
            }
        // S <- exp(gamma_last) S + K^T Vd
        {
            const float eg = expf(gam[L - 1]);
#pragma unroll
            for (int m = 0; m < 2; m++)
                if (w + 8 * m < nmt) {
#pragma unroll
                    for (int j = 0; j < NS; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) S[m][j][e] *= eg;
                    warp_mma_bf16<NS, true, true>(S[m], Kb + (w + 8 * m) * 16, ldk, VdT, GB_LDC, GB_C / 16);
                }
        }
        __syncthreads(); // Kb, Pb, VbT, VdT, gam consumed
        if (Ln > 0) {
            gdn_tile_load(Kb, ldk, kg + (int64_t)(t0 + GB_C) * qk_stride, qk_stride, GB_C, Ln, dk, dkp);
            gdn_tile_load(Pb, GB_LDC, Ph + (int64_t)(ch + 1) * GB_C * GB_C, GB_C, GB_C, GB_C, GB_C, GB_C);
        }
        cu_cp_async_commit();
    }
    gdn_state_store(Sg, S, w, g, c, nmt, col0, dk, dv);
}

// ---------------------------------------------------------------------------------------------------------
static int pad32_host(int x) {
    return (x + 31) & ~31;
}
static size_t smem_intra_bf16(int dk, int dv) {
    const int ldk = pad32_host(dk) + 8, ldv = pad32_host(dv) + 8;
    static_assert(GB_C * GB_LDC * sizeof(bf16) <= GB_C * GB_LDF * sizeof(float), "Tb fits over As");
    return (2 * GB_C * GB_LDF + 3 * 256 + 2 * GB_C) * sizeof(float) +
           ((size_t)GB_C * ldk + (size_t)GB_C * (ldk > ldv ? ldk : ldv)) * sizeof(bf16);
}
static size_t smem_state_out_bf16(int dk, int cols) {
    const int ldk = pad32_host(dk) + 8;
    return GB_C * sizeof(float) +
           ((size_t)3 * GB_C * ldk + (size_t)cols * ldk + GB_C * GB_LDC + 2 * (size_t)cols * GB_LDC) * sizeof(bf16);
}
// The call with `cols` value columns per state_out block (16 or 32; the same bits): cu_gdn_chunked_bf16 uses 32,
// tools/gdn_emu also runs 16 and compares.
static void gdn_chunked_bf16_cols(fd_backend *be, float *o, const float *qkv, const float *b, const float *a,
                                  const float *A_log, const float *dt_bias, float *state, int n_all, int Hk, int Hv,
                                  int dk, int dv, int cols) {
    FD_CHECK(cols == 16 || cols == 32, "gdn chunked bf16: %d state_out columns a block (16 or 32)", cols);
    FD_CHECK(dk >= 1 && dk <= GDN_MAXD && dv >= 1 && dv <= GDN_MAXD, "gdn chunked bf16: dk %d / dv %d not covered", dk,
             dv);
    const int cq = 2 * Hk * dk + Hv * dv, seg = n_all < GB_SEG ? n_all : GB_SEG, nch_max = (seg + GB_C - 1) / GB_C;
    bf16 *qn = (bf16 *)cu_scratch(be, CU_SCR_B, (size_t)seg * Hk * dk * 2);
    bf16 *kn = (bf16 *)cu_scratch(be, CU_SCR_C, (size_t)seg * Hk * dk * 2);
    float *gcum = (float *)cu_scratch(be, CU_SCR_D, (size_t)seg * Hv * 4);
    bf16 *P = (bf16 *)cu_scratch(be, CU_SCR_E, (size_t)Hv * nch_max * GB_C * GB_C * 2);
    bf16 *U = (bf16 *)cu_scratch(be, CU_SCR_F, (size_t)Hv * seg * dv * 2);
    bf16 *W = (bf16 *)cu_scratch(be, CU_SCR_G, (size_t)Hv * seg * dk * 2);
    const size_t sm_i = smem_intra_bf16(dk, dv), sm_s = smem_state_out_bf16(dk, cols);
    void (*state_out)(float *, float *, const bf16 *, const bf16 *, const bf16 *, const bf16 *, const bf16 *,
                      const float *, int, int, int, int, int) =
        cols == 16 ? k_gdn_state_out_bf16<16> : k_gdn_state_out_bf16<32>;
    void (*intra)(bf16 *, bf16 *, bf16 *, bf16 *, bf16 *, float *, const float *, const float *, const float *,
                  const float *, const float *, int, int, int, int, int) =
        dk <= 128 ? k_gdn_intra_bf16<4> : k_gdn_intra_bf16<GDN_MAXD / 32>;
    // the blocks a SM counted on (intra 3, state_out 3 or 2) need the whole 228 KB as shared memory, not L1
    FD_CUDA_CHECK(cudaFuncSetAttribute(intra, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_i));
    FD_CUDA_CHECK(
        cudaFuncSetAttribute(intra, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
    FD_CUDA_CHECK(cudaFuncSetAttribute(state_out, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_s));
    FD_CUDA_CHECK(cudaFuncSetAttribute(state_out, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));

    for (int t0 = 0; t0 < n_all; t0 += GB_SEG) {
        const int n = n_all - t0 < GB_SEG ? n_all - t0 : GB_SEG, nch = (n + GB_C - 1) / GB_C;
        cu_prof pr;
        cu_prof_begin(be, &pr, "gdn_chunked_bf16", n);
        cu_launch(be, intra, dim3(Hv, nch), 256, sm_i, qn, kn, P, U, W, gcum, qkv + (int64_t)t0 * cq,
                  b + (int64_t)t0 * Hv, a + (int64_t)t0 * Hv, A_log, dt_bias, n, Hk, Hv, dk, dv);
        cu_prof_mark(be, &pr, "intra");
        cu_launch(be, state_out, dim3((dv + cols - 1) / cols, Hv), 256, sm_s, o + (int64_t)t0 * Hv * dv, state,
                  (const bf16 *)W, (const bf16 *)U, (const bf16 *)qn, (const bf16 *)kn, (const bf16 *)P,
                  (const float *)gcum, n, Hk, Hv, dk, dv);
        cu_prof_mark(be, &pr, "state_out");
        cu_prof_end(be, &pr);
    }
}

void cu_gdn_chunked_bf16(fd_backend *be, float *o, const float *qkv, const float *b, const float *a, const float *A_log,
                         const float *dt_bias, float *state, int n_all, int Hk, int Hv, int dk, int dv) {
    gdn_chunked_bf16_cols(be, o, qkv, b, a, A_log, dt_bias, state, n_all, Hk, Hv, dk, dv, 32);
}
