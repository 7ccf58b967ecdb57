// The PTX helpers of attention_decode_warp.cu: cp.async with memory clobbers (so no shared-memory read of a slot
// moves below the copy that refills it), ldmatrix x4 (.trans), mma.sync m16n8k16 bf16, movmatrix. In a header of
// their own so that tools/dw_emu.cpp can put host versions in their place (it defines the include guard).
#ifndef FD_CUDA_DECODE_WARP_PTX_CUH
#define FD_CUDA_DECODE_WARP_PTX_CUH
#include <stdint.h>

static __device__ __forceinline__ uint32_t dw_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void dw_cp16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dw_smem(dst)), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}
static __device__ __forceinline__ void dw_cp4(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dw_smem(dst)), "l"(src), "r"(ok ? 4 : 0)
                 : "memory");
}
static __device__ __forceinline__ void dw_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void dw_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
static __device__ __forceinline__ void dw_ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(dw_smem(p)));
}
static __device__ __forceinline__ void dw_ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(dw_smem(p)));
}
// c += a b: m16n8k16, bf16 in, f32 accumulate (a register operation: free to schedule).
static __device__ __forceinline__ void dw_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The 8x8 b16 matrix held in fragment layout (lane l: row l/4, columns 2(l%4), +1), transposed.
static __device__ __forceinline__ uint32_t dw_movt(uint32_t a) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
    return d;
}
#endif
