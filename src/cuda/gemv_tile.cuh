// What the tensor-core GEMVs (gemv.cu: bf16 / FP8 weights, gemv_int4.cu: int4) share, written once: both run 8
// warps over 32 weight rows (a row tile) and one k slice and finish the same way (below), and both plan their k
// slices and keep their split-k counters the same way (the host side, at the end).
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

// ---- host side, shared by both GEMVs ----

// The k partition of an (m, k) problem: a function of the shape, the format's slice quantum and the target block
// count only, never of n (nor of the other weights of a fused launch). S slices so that ceil(m / tile_rows) row
// tiles x S come to ~target_blocks, so the blocks still running when the queue empties are a small part of the
// call; slices are multiples of `quantum` (two steps per warp), so every warp of a block gets the same work.
static inline int cu_gemv_plan(int m, int k, int tile_rows, int quantum, int target_blocks, int *kslice) {
    const int tiles = (m + tile_rows - 1) / tile_rows;
    const int max_slices = (k + quantum - 1) / quantum;
    int S = (target_blocks + tiles - 1) / tiles;
    if (S > max_slices) S = max_slices;
    if (S < 1) S = 1;
    int ks = (k + S - 1) / S;
    ks = (ks + quantum - 1) / quantum * quantum;
    *kslice = ks;
    return (k + ks - 1) / ks;
}

// Per-tile split-k arrival counters (cu_impl.gemv_counters, one buffer for every GEMV: kernels on the one stream
// run in order and each leaves them zero; an early-launched GEMV touches them only after its PDL wait). The
// backend allocates CU_GEMV_COUNTERS at start (no allocation inside a captured graph); a launch needs one per
// 32-row tile of its split-k segments (a 27B FFN gate|up pair: 1088), so this grows only for a much wider model.
static inline int *cu_gemv_counters(cu_impl *c, int tiles) {
    if (c->gemv_counters_len < tiles) {
        if (c->gemv_counters) {
            FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
            FD_CUDA_CHECK(cudaFree(c->gemv_counters));
        }
        const int len = tiles < CU_GEMV_COUNTERS ? CU_GEMV_COUNTERS : tiles;
        FD_CUDA_CHECK(cudaMalloc(&c->gemv_counters, (size_t)len * sizeof(int)));
        FD_CUDA_CHECK(cudaMemsetAsync(c->gemv_counters, 0, (size_t)len * sizeof(int), c->stream));
        c->gemv_counters_len = len;
    }
    return c->gemv_counters;
}
#endif
