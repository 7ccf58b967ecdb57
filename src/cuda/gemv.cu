// Small-n GEMM on the tensor cores (route gemm_small = gemv): out[n, m] f32 = x[n, k] f32 . W[m, k]^T bf16 for
// n <= 16 rows (decode, DFlash verify, drafter blocks, batched decode). Weight-read bound: 2 bytes per weight and
// at most 16 FMAs per weight, so the kernel is built to keep HBM busy, not the tensor cores.
//
// mma.sync m16n8k16 with the W rows as A (16 rows per tile) and the token rows as B (8 per group, zero-padded).
// The k order inside one dot product is free as long as A and B use the same permutation, so instead of the
// scattered fragment layout each lane loads 16 contiguous bytes (8 bf16) of a W row at k = base + 8t (t = lane%4)
// and feeds its halves to two MMAs; the same lane reads the matching 8 fp32 of its token row (lane/4) and rounds
// them itself, so no activation conversion kernel runs. A lane's A registers are
//   {row g, k 8t+0,1} {row g+8, k 8t+0,1} {row g, k 8t+2,3} {row g+8, k 8t+2,3}      (first MMA; +4 for the second)
// and its B registers {token g, k 8t+0,1} {token g, k 8t+2,3}: PTX's logical k 2t,2t+1 | 8+2t,8+2t+1 mapped to
// physical 8t+0,1 | 8t+2,3 for both operands.
//
// gemm_act (same numerics as the cuBLAS route): bf16 rounds x to bf16, so every product equals the cuBLAS path's
// and only the summation order differs; bf16x2 splits x = hi + lo (both bf16) and runs an MMA for each.
//
// Batch invariance (the contract that makes speculative decoding lossless on the GPU): one output element is the
// same sum in the same order whatever n is and whatever the other token rows hold. The k partition depends on
// (m, k, SM count) only:
//   - k is cut into S slices of `kslice` (gv_plan; a multiple of two block steps);
//   - inside a slice, warp w of 8 takes the 64-wide steps w, w+8, w+16, ... and accumulates them in k order in
//     its MMA accumulators (a token's column of an MMA depends only on that column of B);
//   - the 8 warp sums are added in warp order through shared memory, the S slice sums in slice order by the
//     block that finishes a row tile last (a per-tile arrival counter; the order of the sum is fixed, only who
//     computes it varies).
// What varies with n is only how many row tiles a block covers (R) and how many token groups it runs (NG); both
// leave every element's sequence of operations unchanged. Steps wholly past the slice end are skipped, never
// run as zero MMAs.
#include <stdint.h>

#include "cuda/cuda_common.h"

#define GV_WARPS         8
#define GV_THREADS       (GV_WARPS * 32)
#define GV_KSTEP         64                    // k per warp step: lane t reads [8t, 8t+8) and [32+8t, 32+8t+8)
#define GV_BLOCK_KSTEP   (GV_KSTEP * GV_WARPS) // 512: k covered by one step of all warps
#define GV_LOADS         4                     // steps x row tiles whose weights one lane has in flight at once
#define GV_BLOCKS_PER_SM 6                     // k slices: enough 64-row blocks for ~6 per SM (wave tails)
#define GV_SLICE_QUANTUM (2 * GV_BLOCK_KSTEP)  // k slices are multiples of this (1024)

static __device__ __forceinline__ void gv_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Weights are read once per call: keep them out of L1 (x and the partial sums live there) and ask L2 for the
// whole 256-byte window, which the neighbouring lanes and warps of the block read next.
static __device__ __forceinline__ uint4 gv_ld_stream(const __nv_bfloat16 *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

static __device__ __forceinline__ uint32_t gv_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

// hi = bf16(a, b); lo = bf16 of what hi dropped (bf16x2 only).
static __device__ __forceinline__ void gv_split(float a, float b, uint32_t *hi, uint32_t *lo, int split) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    *hi = *(uint32_t *)&h;
    if (split) *lo = gv_pack(a - __low2float(h), b - __high2float(h));
}

// Block: 8 warps, R row tiles of 16 (rows blockIdx.x * 16R ...), token groups NG (8 tokens each), k slice
// blockIdx.y. S = gridDim.y > 1: the slice sum goes to `partial` and the tile's last block adds the slices.
template <int R, int NG, int SPLIT>
__global__ void __launch_bounds__(GV_THREADS, R == 4 ? 1 : 2)
    k_gemv(const __nv_bfloat16 *__restrict__ W, const float *__restrict__ x, float *__restrict__ out,
           float *__restrict__ partial, int *__restrict__ counters, int n, int m, int k, int kslice) {
    constexpr int P = GV_LOADS / R; // warp steps per loop iteration (weights of all of them loaded up front)
    constexpr int ROWS = 16 * R, NC = 8 * NG;
    __shared__ float red[GV_WARPS][ROWS][NC];
    __shared__ int is_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int row_base = blockIdx.x * ROWS;
    const int s = blockIdx.y, S = gridDim.y;
    const int kbeg = s * kslice, kend = min(k, kbeg + kslice);

    const __nv_bfloat16 *wrow[R][2];
    bool wok[R][2];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int row = row_base + 16 * r + 8 * hf + g;
            wok[r][hf] = row < m;
            wrow[r][hf] = W + (int64_t)(row < m ? row : 0) * k;
        }
    const float *xrow[NG];
    bool xok[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xok[j] = tok < n;
        xrow[j] = x + (int64_t)(tok < n ? tok : 0) * k;
    }

    float acc[R][NG][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;

    const uint4 zero4 = make_uint4(0, 0, 0, 0);
    for (int k0 = kbeg + warp * GV_KSTEP; k0 < kend; k0 += P * GV_BLOCK_KSTEP) {
        // All weight loads of the iteration first; then the x loads, whose latency (L1/L2 hits) passes while
        // the weights are still on their way; then the MMAs.
        uint4 wv[P][R][2][2]; // [step][tile][row g / g+8][k group +0 / +32]
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int kk = k0 + p * GV_BLOCK_KSTEP + 32 * h + 8 * t;
                const bool kin = kk < kend; // k % 8 == 0 and slices are multiples of 8: a group is all in or out
#pragma unroll
                for (int r = 0; r < R; r++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++)
                        wv[p][r][hf][h] = kin && wok[r][hf] ? gv_ld_stream(wrow[r][hf] + kk) : zero4;
            }
        uint32_t bh[P][2][NG][4], bl[P][2][NG][4]; // x as bf16 pairs: hi, and lo for bf16x2
#pragma unroll
        for (int p = 0; p < P; p++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int kk = k0 + p * GV_BLOCK_KSTEP + 32 * h + 8 * t;
                const bool kin = kk < kend;
#pragma unroll
                for (int j = 0; j < NG; j++) {
                    float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
                    if (kin && xok[j]) {
                        x0 = __ldg((const float4 *)(xrow[j] + kk));
                        x1 = __ldg((const float4 *)(xrow[j] + kk + 4));
                    }
                    gv_split(x0.x, x0.y, &bh[p][h][j][0], &bl[p][h][j][0], SPLIT);
                    gv_split(x0.z, x0.w, &bh[p][h][j][1], &bl[p][h][j][1], SPLIT);
                    gv_split(x1.x, x1.y, &bh[p][h][j][2], &bl[p][h][j][2], SPLIT);
                    gv_split(x1.z, x1.w, &bh[p][h][j][3], &bl[p][h][j][3], SPLIT);
                }
            }
#pragma unroll
        for (int p = 0; p < P; p++) {
            if (k0 + p * GV_BLOCK_KSTEP >= kend) break; // warp-uniform: steps past the slice are not in the partition
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint4 lo8 = wv[p][r][0][h], hi8 = wv[p][r][1][h]; // rows g and g+8
#pragma unroll
                    for (int j = 0; j < NG; j++) {
                        const uint32_t *xh = bh[p][h][j], *xl = bl[p][h][j];
                        gv_mma(acc[r][j], lo8.x, hi8.x, lo8.y, hi8.y, xh[0], xh[1]);
                        if (SPLIT) gv_mma(acc[r][j], lo8.x, hi8.x, lo8.y, hi8.y, xl[0], xl[1]);
                        gv_mma(acc[r][j], lo8.z, hi8.z, lo8.w, hi8.w, xh[2], xh[3]);
                        if (SPLIT) gv_mma(acc[r][j], lo8.z, hi8.z, lo8.w, hi8.w, xl[2], xl[3]);
                    }
                }
        }
    }

    // C fragment: {row g, token 2t, 2t+1}, {row g+8, token 2t, 2t+1} of each (tile, group).
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) {
            red[warp][16 * r + g][8 * j + 2 * t] = acc[r][j][0];
            red[warp][16 * r + g][8 * j + 2 * t + 1] = acc[r][j][1];
            red[warp][16 * r + g + 8][8 * j + 2 * t] = acc[r][j][2];
            red[warp][16 * r + g + 8][8 * j + 2 * t + 1] = acc[r][j][3];
        }
    __syncthreads();
    // Element e = (row e % ROWS, token e / ROWS): consecutive threads write consecutive rows of one output row.
    for (int e = threadIdx.x; e < ROWS * NC; e += GV_THREADS) {
        const int row = e % ROWS, col = e / ROWS;
        float v = red[0][row][col];
#pragma unroll
        for (int w = 1; w < GV_WARPS; w++) v += red[w][row][col];
        if (S == 1) {
            if (row_base + row < m && col < n) out[(int64_t)col * m + row_base + row] = v;
        } else {
            partial[((int64_t)s * gridDim.x + blockIdx.x) * (ROWS * NC) + e] = v;
        }
    }
    if (S == 1) return;
    // The last block of this row tile to finish adds the S slice sums in slice order (threadFenceReduction
    // pattern: publish, fence, count; the last one to count sees every slice).
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[blockIdx.x], 1) == S - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < ROWS * NC; e += GV_THREADS) {
        const int row = e % ROWS, col = e / ROWS;
        if (row_base + row >= m || col >= n) continue;
        float v = __ldcg(&partial[(int64_t)blockIdx.x * (ROWS * NC) + e]);
        for (int s2 = 1; s2 < S; s2++) v += __ldcg(&partial[((int64_t)s2 * gridDim.x + blockIdx.x) * (ROWS * NC) + e]);
        out[(int64_t)col * m + row_base + row] = v;
    }
    if (threadIdx.x == 0) counters[blockIdx.x] = 0; // ready for the next call (stream order)
}

// The k partition of a (m, k) problem: a function of the shape and the SM count only, never of n. Enough blocks
// for ~GV_BLOCKS_PER_SM per SM when a block covers 64 rows (the n > 8 case; twice as many for n <= 8), so the
// blocks still running when the queue empties are a small part of the call. Slices are multiples of
// GV_SLICE_QUANTUM (two steps per warp: with n <= 8 one loop iteration loads both, 256 bytes per lane in
// flight), so every warp of a block gets the same work and a block is not all latency.
static int gv_plan(int m, int k, int num_sms, int *kslice) {
    const int tiles64 = (m + 63) / 64;
    const int max_slices = (k + GV_SLICE_QUANTUM - 1) / GV_SLICE_QUANTUM;
    int S = (GV_BLOCKS_PER_SM * num_sms + tiles64 - 1) / tiles64;
    if (S > max_slices) S = max_slices;
    if (S < 1) S = 1;
    int ks = (k + S - 1) / S;
    ks = (ks + GV_SLICE_QUANTUM - 1) / GV_SLICE_QUANTUM * GV_SLICE_QUANTUM;
    *kslice = ks;
    return (k + ks - 1) / ks;
}

// Per-tile arrival counters: zeroed once when grown, and every kernel leaves them zero again. The backend
// allocates CU_GEMV_COUNTERS at start (no allocation inside a captured graph); split-k calls have fewer than
// 2 x GV_BLOCKS_PER_SM x SMs tiles, so this grows only on a GPU with more than ~340 SMs.
static int *gv_counters(cu_impl *c, int tiles) {
    if (c->gemv_counters_len < tiles) {
        if (c->gemv_counters) {
            FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
            FD_CUDA_CHECK(cudaFree(c->gemv_counters));
        }
        int len = tiles < CU_GEMV_COUNTERS ? CU_GEMV_COUNTERS : tiles;
        FD_CUDA_CHECK(cudaMalloc(&c->gemv_counters, (size_t)len * sizeof(int)));
        FD_CUDA_CHECK(cudaMemsetAsync(c->gemv_counters, 0, (size_t)len * sizeof(int), c->stream));
        c->gemv_counters_len = len;
    }
    return c->gemv_counters;
}

int cu_gemv_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || W->dev_dtype != FD_BF16 || !W->dev) return 0;
    // 16-byte loads of W rows and x rows: k % 8 (rows start 16-byte aligned) and aligned bases.
    if (W->cols % 8 != 0 || W->cols <= 0 || W->rows <= 0) return 0;
    if (((uintptr_t)W->dev | (uintptr_t)x) % 16 != 0) return 0;
    return 1;
}

template <int R, int NG>
static void gv_launch(cu_impl *c, dim3 grid, int split, const __nv_bfloat16 *W, const float *x, float *out,
                      float *partial, int *counters, int n, int m, int k, int kslice) {
    if (split)
        k_gemv<R, NG, 1><<<grid, GV_THREADS, 0, c->stream>>>(W, x, out, partial, counters, n, m, k, kslice);
    else
        k_gemv<R, NG, 0><<<grid, GV_THREADS, 0, c->stream>>>(W, x, out, partial, counters, n, m, k, kslice);
    FD_CUDA_LAUNCH_CHECK();
}

void cu_gemv(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_supported(x, W, n), "gemv: unsupported call n=%d %s [%lld, %lld]", n, W->name ? W->name : "?",
             (long long)W->rows, (long long)W->cols);
    const int m = (int)W->rows, k = (int)W->cols;
    const int split = c->gemm_act == CU_GEMM_BF16X2;
    int kslice;
    const int S = gv_plan(m, k, c->num_sms, &kslice);
    // Row tiles per block by n: every block re-reads its x slice (n*4 bytes per k, from L1/L2) for 32R bytes of
    // weights per k, so 16 tokens share it over 64 rows (x traffic <= half the weight bytes). n <= 8 runs one
    // token group with R = 2, n > 8 two groups with R = 4. (Invariance: R changes no element's sum.)
    const int R = n <= 8 ? 2 : 4;
    const int tiles = (m + 16 * R - 1) / (16 * R);
    dim3 grid((unsigned)tiles, (unsigned)S);
    float *partial = NULL;
    int *counters = NULL;
    if (S > 1) {
        // Sized for the largest block shape (64 rows x 16 tokens) whatever n is: a decode step (n = 1) then
        // leaves the buffers big enough for a verify step, which can be captured in a CUDA graph right away.
        const int tiles64 = (m + 63) / 64;
        partial = (float *)cu_scratch(be, CU_SCR_A, (size_t)S * tiles64 * 64 * 16 * sizeof(float));
        counters = gv_counters(c, tiles64 * 2);
    }
    const __nv_bfloat16 *Wb = (const __nv_bfloat16 *)W->dev;
    if (R == 2)
        gv_launch<2, 1>(c, grid, split, Wb, x, out, partial, counters, n, m, k, kslice);
    else
        gv_launch<4, 2>(c, grid, split, Wb, x, out, partial, counters, n, m, k, kslice);
}
