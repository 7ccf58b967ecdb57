// Warp and block reductions shared by the CUDA kernels (included by cuda_common.h). Each is a butterfly over the
// 32 lanes (__shfl_xor_sync, offsets 16, 8, 4, 2, 1): every lane ends with the same value, summed in an order
// fixed by the lane layout, so a result does not depend on which kernel computed it. The warp forms need all 32
// lanes active; the block forms need every thread of the block to call them.
#ifndef FD_CUDA_REDUCE_CUH
#define FD_CUDA_REDUCE_CUH

static __device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float cu_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ double cu_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ int cu_warp_max_i(int v) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over a block of up to 1024 threads; every thread gets the result. Warp sums, then one warp sums the
// per-warp partials (a static shared array, so one call at a time per block: the first barrier keeps a
// previous call's readers from seeing the next call's writes).
static __device__ float cu_block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); // `part` may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float t = lane < nw ? part[lane] : 0.f;
    return cu_warp_sum(t);
}

// The same over a block of 32 full warps (1024 threads) through slots the caller keeps in its own shared memory:
// part[32] (one per warp) and out (which may be part[0]). WarpOp is one of the warp reductions above. Every
// thread gets the result; the last barrier lets the caller reuse the slots at once.
template <typename T, T (*WarpOp)(T)>
static __device__ T cu_block_reduce_full(T v, T *part, T *out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = WarpOp(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = WarpOp(part[lane]);
        if (lane == 0) *out = v;
    }
    __syncthreads();
    v = *out;
    __syncthreads();
    return v;
}
#endif
