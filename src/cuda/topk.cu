// topk_rows: the K largest logits of each row and their ids, exactly as top_k_row (base/sample_math.h) orders
// them: descending, the lower index first among equals, NaNs never taken, -0 equal to +0. One block per row:
//   1. radix select of the K-th largest value over an order-preserving 32-bit key, 8 bits per pass (4 passes of
//      a 256-bin shared histogram over the elements still matching the key prefix): the threshold key T and how
//      many of the elements equal to T are taken (the lowest-indexed ones);
//   2. one pass in index order (each thread a contiguous chunk, an exclusive scan of the per-thread counts) that
//      gathers the elements above T and the first of those equal to T;
//   3. the K gathered pairs ranked by (value desc, index asc) and written in rank order; slots past the row's
//      non-NaN count hold (-inf, slot number), as the host's.
// A row is read 5 times (~1 MB each at V = 248320, from L2 after the first): tens of microseconds, against a
// device-to-host copy of the whole row and a host scan before (DFlash2's selector, 7 rows a round).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.h"

#define TOPK_THREADS 1024

// Order-preserving key of a non-NaN float (-0 folded into +0: equal floats, equal keys).
static __device__ __forceinline__ uint32_t topk_key(float x) {
    if (x == 0.0f) x = 0.0f;
    const uint32_t u = __float_as_uint(x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static __device__ __forceinline__ int topk_block_sum(int v, int *red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    int s = 0;
    for (int w = 0; w < TOPK_THREADS / 32; w++) s += red[w];
    return s;
}

// The sum of v over the threads before this one (Hillis-Steele over scan[TOPK_THREADS]).
static __device__ __forceinline__ int topk_exclusive_scan(int v, int *scan) {
    const int tid = threadIdx.x;
    scan[tid] = v;
    __syncthreads();
    for (int o = 1; o < TOPK_THREADS; o <<= 1) {
        const int u = tid >= o ? scan[tid - o] : 0;
        __syncthreads();
        scan[tid] += u;
        __syncthreads();
    }
    return scan[tid] - v;
}

__global__ void __launch_bounds__(TOPK_THREADS) k_topk_rows(int32_t *ids_out, float *vals_out, const float *logits,
                                                            int V, int K) {
    CU_PDL_ENTER();
    const float *row = logits + (int64_t)blockIdx.x * V;
    __shared__ int hist[256], red[TOPK_THREADS / 32], scan[TOPK_THREADS];
    __shared__ uint32_t sel_key[FD_TOPK_ROWS_MAX];
    __shared__ int sel_idx[FD_TOPK_ROWS_MAX];
    __shared__ uint32_t s_prefix;
    __shared__ int s_need;
    const int tid = threadIdx.x;

    int valid = 0;
    for (int i = tid; i < V; i += TOPK_THREADS) valid += row[i] == row[i];
    valid = topk_block_sum(valid, red);
    const int take = valid < K ? valid : K; // pairs that come from the row; the rest are the fill

    // 1. the threshold: prefix = the take-th largest key, need = how many keys equal to it are taken
    uint32_t prefix = 0, mask = 0;
    int need = take;
    if (take == valid) { // every non-NaN value is taken: no threshold (all keys above "T - 1")
        need = 0;
    } else {
        for (int shift = 24; shift >= 0; shift -= 8) {
            if (tid < 256) hist[tid] = 0;
            __syncthreads();
            for (int i = tid; i < V; i += TOPK_THREADS) {
                const float x = row[i];
                if (x != x) continue;
                const uint32_t k = topk_key(x);
                if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255u], 1);
            }
            __syncthreads();
            if (tid == 0) {
                int b = 255, above = 0;
                while (above + hist[b] < need) above += hist[b--];
                s_prefix = prefix | ((uint32_t)b << shift);
                s_need = need - above;
            }
            __syncthreads();
            prefix = s_prefix;
            need = s_need;
            mask |= 255u << shift;
        }
    }
    const int n_above = take - need; // keys strictly above the threshold (all of them are taken)

    // 2. gather in index order: thread t owns [t * chunk, (t + 1) * chunk)
    const int chunk = (V + TOPK_THREADS - 1) / TOPK_THREADS;
    const int i0 = min(V, tid * chunk), i1 = min(V, i0 + chunk);
    int n_gt = 0, n_eq = 0;
    for (int i = i0; i < i1; i++) {
        const float x = row[i];
        if (x != x) continue;
        const uint32_t k = topk_key(x);
        if (take == valid || k > prefix) n_gt++;
        else if (k == prefix) n_eq++;
    }
    int gt_pos = topk_exclusive_scan(n_gt, scan);
    __syncthreads(); // scan is reused
    int eq_pos = topk_exclusive_scan(n_eq, scan);
    for (int i = i0; i < i1; i++) {
        const float x = row[i];
        if (x != x) continue;
        const uint32_t k = topk_key(x);
        if (take == valid || k > prefix) {
            sel_key[gt_pos] = k, sel_idx[gt_pos] = i, gt_pos++;
        } else if (k == prefix) {
            if (eq_pos < need) sel_key[n_above + eq_pos] = k, sel_idx[n_above + eq_pos] = i;
            eq_pos++;
        }
    }
    __syncthreads();

    // 3. rank by (key desc, index asc); the fill after the row's pairs
    int32_t *ids = ids_out + (int64_t)blockIdx.x * K;
    float *vals = vals_out + (int64_t)blockIdx.x * K;
    for (int a = tid; a < take; a += TOPK_THREADS) {
        const uint32_t ka = sel_key[a];
        const int ia = sel_idx[a];
        int rank = 0;
        for (int b = 0; b < take; b++) {
            const uint32_t kb = sel_key[b];
            rank += kb > ka || (kb == ka && sel_idx[b] < ia);
        }
        ids[rank] = ia;
        vals[rank] = row[ia]; // as stored (-0 stays -0, as the host copies it)
    }
    for (int a = take + tid; a < K; a += TOPK_THREADS) {
        ids[a] = a;
        vals[a] = -INFINITY;
    }
}

void cu_topk_rows(fd_backend *be, int32_t *ids_host, float *vals_host, const float *logits_dev, int rows, int V,
                  int K) {
    cu_impl *c = cu_of(be);
    if (rows <= 0) return;
    FD_CHECK(K >= 1 && K <= FD_TOPK_ROWS_MAX && K <= V, "top-%d of %d logits", K, V);
    const size_t pairs = (size_t)rows * K, bytes = pairs * (sizeof(int32_t) + sizeof(float));
    char *dev = (char *)cu_scratch(be, CU_SCR_H, bytes);
    int32_t *ids = (int32_t *)dev;
    float *vals = (float *)(dev + pairs * sizeof(int32_t));
    cu_launch(be, k_topk_rows, (unsigned)rows, TOPK_THREADS, 0, ids, vals, logits_dev, V, K);
    if (c->topk_host_bytes < bytes) { // pinned, so the pairs come back without a staging copy
        if (c->topk_host) FD_CUDA_CHECK(cudaFreeHost(c->topk_host));
        c->topk_host_bytes = bytes;
        FD_CUDA_CHECK(cudaMallocHost(&c->topk_host, bytes));
    }
    FD_CUDA_CHECK(cudaMemcpyAsync(c->topk_host, dev, bytes, cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    memcpy(ids_host, c->topk_host, pairs * sizeof(int32_t));
    memcpy(vals_host, (char *)c->topk_host + pairs * sizeof(int32_t), pairs * sizeof(float));
}
