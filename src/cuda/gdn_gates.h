// Gate helpers shared by the GDN kernels (gdn.cu: split + serial route, gdn_chunk.cu: chunked
// route), so both routes compute beta and g with the same fp32 expressions.
#ifndef FD_CUDA_GDN_GATES_H
#define FD_CUDA_GDN_GATES_H

#define GDN_MAXD 256 // largest dk, dv supported

static __device__ __forceinline__ float softplus_f(float x) {
    return x > 20.f ? x : log1pf(expf(x));
}
static __device__ __forceinline__ float gate_g(float a, float A_log, float dt_bias) {
    return -expf(A_log) * softplus_f(a + dt_bias);
}
static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.f / (1.f + expf(-x));
}

#endif
