// FP8 block-scaled weights on the GPU (route gemm_fp8), the dequant half: out[n, m] f32 = x[n, k] f32 . W[m, k]^T
// with W in e4m3 and one f32 scale per block_rows x block_cols block (base/weight.h, HF fine-grained FP8).
//
// gemv (default), n <= 16 rows: the GEMV of gemv.cu with the e4m3 weight loader (same schedule, fused segments and
// batch invariance as bf16 weights).
// dequant (n > 16, shapes the GEMV does not take, or selected): the weight is expanded in a scratch buffer (fp8 x
// scale) and the dense path runs (cuBLASLt for prefill): to bf16 (rounded, the bf16-weight contract) for GEMMs
// whose activations gemm_act rounds to bf16, to f32 (exact, the fp32 GEMM) where it keeps them ~fp32 (bf16x2: the
// toy and test models under auto). m k 3 (or 5) bytes of extra traffic, small next to the 2 n m k FLOPs of a
// prefill chunk.
#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

// dst[m, k] = e4m3(W) x its block scale, in f32 (exact) or rounded to bf16; one thread per 16 weights (k % 16
// == 0: one 16-byte load; a run of 16 never crosses a scale block, block_cols % 16 == 0).
template <int F32>
__global__ void k_fp8_dequant16(void *dst, const uint8_t *W, const float *scale, int64_t m, int k, int br, int bc,
                                int scols) {
    CU_PDL_ENTER();
    const int64_t groups = m * (k / 16);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / (k / 16);
        const int col = (int)(i % (k / 16)) * 16;
        const float s = scale[(r / br) * scols + col / bc];
        const uint4 q = *(const uint4 *)(W + r * k + col);
        const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
        float f[16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(qw[j / 2] >> (16 * (j & 1))), __NV_E4M3);
            const float2 v = __half22float2(*(__half2 *)&h);
            f[2 * j] = v.x * s, f[2 * j + 1] = v.y * s;
        }
        if (F32) {
            float4 *d = (float4 *)((float *)dst + r * k + col);
#pragma unroll
            for (int j = 0; j < 4; j++) d[j] = make_float4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
        } else {
            uint32_t o[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
                o[j] = *(uint32_t *)&b;
            }
            uint4 *d = (uint4 *)((__nv_bfloat16 *)dst + r * k + col);
            d[0] = make_uint4(o[0], o[1], o[2], o[3]);
            d[1] = make_uint4(o[4], o[5], o[6], o[7]);
        }
    }
}

// The same one element per thread, for any k.
template <int F32>
__global__ void k_fp8_dequant(void *dst, const uint8_t *W, const float *scale, int64_t m, int k, int br, int bc,
                              int scols) {
    CU_PDL_ENTER();
    const int64_t count = m * k;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / k;
        const int col = (int)(i % k);
        __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)W[i], __NV_E4M3);
        const float v = __half2float(*(__half *)&h) * scale[(r / br) * scols + col / bc];
        if (F32)
            ((float *)dst)[i] = v;
        else
            ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v);
    }
}

void cu_fp8_dequant(fd_backend *be, void *dst, const fd_weight *W, int f32) {
    const int vec = W->cols % 16 == 0 && W->block_cols % 16 == 0 && (uintptr_t)W->dev % 16 == 0 &&
                    (uintptr_t)dst % 16 == 0;
    const int64_t count = W->rows * W->cols / (vec ? 16 : 1);
    const unsigned grid = cu_blocks(count, 256) < 65535u ? cu_blocks(count, 256) : 65535u;
    const uint8_t *w = (const uint8_t *)W->dev;
    const float *s = (const float *)W->dev_scale;
    const int k = (int)W->cols, br = W->block_rows, bc = W->block_cols, sc = (int)W->scale_cols;
    if (vec)
        f32 ? cu_launch(be, k_fp8_dequant16<1>, grid, 256, 0, dst, w, s, W->rows, k, br, bc, sc)
            : cu_launch(be, k_fp8_dequant16<0>, grid, 256, 0, dst, w, s, W->rows, k, br, bc, sc);
    else
        f32 ? cu_launch(be, k_fp8_dequant<1>, grid, 256, 0, dst, w, s, W->rows, k, br, bc, sc)
            : cu_launch(be, k_fp8_dequant<0>, grid, 256, 0, dst, w, s, W->rows, k, br, bc, sc);
}
