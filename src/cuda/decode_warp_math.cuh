// The per-element arithmetic that attention_decode_warp.cu (route attn_decode=warp) and attention_decode_rows.cu
// (=rows) share: bf16 rounding, e4m3 dequantisation, the e4m3 head-dim permutation and the mask. One definition, so
// the two kernels convert exactly alike (tools/dw_emu.cpp includes both files in one translation unit).
#ifndef FD_CUDA_DECODE_WARP_MATH_CUH
#define FD_CUDA_DECODE_WARP_MATH_CUH
#include <stdint.h>

static __device__ __forceinline__ uint32_t dw_bf2(float lo, float hi) {
    __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&b;
}
// The two e4m3 bytes in the low half of `two`, dequantised: value * s rounded to bf16 (the blocked kernel's
// arithmetic: exact e4m3 -> f16 -> f32, one f32 product, one rounding).
static __device__ __forceinline__ uint32_t dw_e4_pair(uint32_t two, float s) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return dw_bf2(f.x * s, f.y * s);
}
// e4m3 only: where Q's head dims P, P+1 (P even) go so that they meet K's. Lane c of the K fragment reads dims
// [32p + 8c, +8) of its key as four pairs: k-step 2p (logical 2c | 2c + 8) and k-step 2p + 1 (the same).
template <bool E4> static __device__ __forceinline__ int dw_qcol(int P) {
    if (!E4) return P;
    return (P & ~31) + ((P >> 2) & 1) * 16 + ((P >> 1) & 1) * 8 + ((P >> 3) & 3) * 2;
}

// Whether query row q_r (its last key, relative to the chunk start; -1: none here) sees key key_r of the chunk;
// TREE: context keys before p_r, then the row's ancestors (anc) and itself. |p_r|, q_r clamped to 1024: exact.
template <bool TREE>
static __device__ __forceinline__ bool dw_sees(int key_r, int q_r, int p_r, unsigned long long anc) {
    if (!TREE) return key_r <= q_r;
    return q_r >= 0 && (key_r < p_r || (key_r <= q_r && (anc >> (key_r - p_r) & 1ull)));
}
#endif
