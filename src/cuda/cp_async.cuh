// Asynchronous global -> shared copies (cp.async, sm_80+): 16 bytes per call, zero-filled when `valid` is false
// (src-size 0), so tile tails need no second pass. The caller commits groups and waits on them.
#ifndef FD_CUDA_CP_ASYNC_CUH
#define FD_CUDA_CP_ASYNC_CUH

static __device__ __forceinline__ void cu_cp_async16(void *dst, const void *src, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void cu_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> static __device__ __forceinline__ void cu_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
// Starts moving the 128-byte line holding p toward L2 (prefetch.global.L2: no register, no completion to wait
// for), so a later plain load of it waits on L2 rather than DRAM.
static __device__ __forceinline__ void cu_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
#endif
