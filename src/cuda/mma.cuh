// What the small-n GEMV kernels share (gemv.cu: bf16 and e4m3 weights; gemv_int4.cu): the bf16 tensor-core MMA
// and the streaming load of weights read once per call.
#ifndef FD_CUDA_MMA_CUH
#define FD_CUDA_MMA_CUH
#include <stdint.h>

// c += a . b, mma.sync m16n8k16, bf16 inputs, f32 accumulators (PTX fragment layout).
static __device__ __forceinline__ void cu_mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                                   uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 16 bytes of weights, read once per call: kept out of L1 (x and partial sums live there), and L2 asked for the
// whole 256-byte window the neighbouring lanes and warps read next. Non-coherent: safe before the PDL wait for
// weights (constant during a forward), never for x.
static __device__ __forceinline__ uint4 cu_ld_stream(const void *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}
#endif
