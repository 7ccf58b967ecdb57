// The end of a block of the tensor-core GEMVs (gemv.cu: bf16 / FP8 weights, gemv_int4.cu: int4), written once:
// both run 8 warps over 32 weight rows (a row tile) and one k slice, and finish the same way.
#ifndef FD_CUDA_GEMV_TILE_CUH
#define FD_CUDA_GEMV_TILE_CUH
#include <stdint.h>

#define CU_GEMV_TILE_WARPS   8
#define CU_GEMV_TILE_THREADS (CU_GEMV_TILE_WARPS * 32)
#define CU_GEMV_TILE_ROWS    32                       // weight rows per block: two 16-row MMA tiles
#define CU_GEMV_TILE_PARTIAL (CU_GEMV_TILE_ROWS * 16) // partial sums per (tile, slice): 32 rows x 16 tokens, any n

// red holds each warp's sums of the block's (tile, slice s) for NC tokens (synchronised by the caller). They are
// added in warp order; with S == 1 the sum is the output out [n, m]; with S > 1 it goes to `partial` and the
// tile's last block to finish adds the S slice sums in slice order (threadFenceReduction pattern: publish, fence,
// count; the last one to count sees every slice), then resets the tile's counter for the next call.
template <int NC>
static __device__ __forceinline__ void
cu_gemv_tile_finish(const float (&red)[CU_GEMV_TILE_WARPS][CU_GEMV_TILE_ROWS][NC], int &is_last, float *out,
                    float *partial, int *counters, int S, int tiles, int tile, int s, int row_base, int m, int n) {
    float *my_partial = partial + ((int64_t)s * tiles + tile) * CU_GEMV_TILE_PARTIAL;
    // Element e = (row e % 32, token e / 32): consecutive threads write consecutive rows of one output row.
    for (int e = threadIdx.x; e < CU_GEMV_TILE_ROWS * NC; e += CU_GEMV_TILE_THREADS) {
        const int row = e % CU_GEMV_TILE_ROWS, col = e / CU_GEMV_TILE_ROWS;
        float v = red[0][row][col];
#pragma unroll
        for (int w = 1; w < CU_GEMV_TILE_WARPS; w++) v += red[w][row][col];
        if (S == 1) {
            if (row_base + row < m && col < n) out[(int64_t)col * m + row_base + row] = v;
        } else {
            my_partial[e] = v;
        }
    }
    if (S == 1) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&counters[tile], 1) == S - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < CU_GEMV_TILE_ROWS * NC; e += CU_GEMV_TILE_THREADS) {
        const int row = e % CU_GEMV_TILE_ROWS, col = e / CU_GEMV_TILE_ROWS;
        if (row_base + row >= m || col >= n) continue;
        const float *pt = partial + (int64_t)tile * CU_GEMV_TILE_PARTIAL + e;
        float v = __ldcg(pt);
        for (int s2 = 1; s2 < S; s2++) v += __ldcg(pt + (int64_t)s2 * tiles * CU_GEMV_TILE_PARTIAL);
        out[(int64_t)col * m + row_base + row] = v;
    }
    if (threadIdx.x == 0) counters[tile] = 0; // ready for the next call (stream order)
}
#endif
