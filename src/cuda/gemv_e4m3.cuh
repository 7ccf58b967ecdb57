// The e4m3 pieces of the FP8 GEMV (gemv.cu, k_gemv<..., GV_FP8>): the weight conversion to bf16 and the block
// scales of a step, kept apart so gemv.cu stays one file's length.
#ifndef FD_CUDA_GEMV_E4M3_CUH
#define FD_CUDA_GEMV_E4M3_CUH
#include <cuda_bf16.h>
#include <stdint.h>

// Four e4m3 bytes w = [b3 b2 b1 b0] -> bf16x2 {b0, b2} (even) and {b1, b3} (odd), exactly, on the integer and FMA
// pipes: the conversion instructions (e4m3x2 -> f16x2, f32x2 -> bf16x2) run at a fraction of their rate on the
// H200 and held the first FP8 kernels near 2-2.5 TB/s (session 7, docs/perf-notes.md). Each byte's sign goes to
// bit 15 of its half and its 7 exponent-mantissa bits to bits 10..4: the bf16 with exponent field e and mantissa
// mmm0000 is 2^(e - 127) x 1.mmm (or, e = 0, the subnormal 2^-126 x 0.mmm), i.e. the e4m3 value (bias 7) times
// 2^-120, and one bf16x2 multiply by 2^120 restores it (exact: a power of two, no overflow below 448; bf16
// multiplies keep subnormals on sm_90). The e4m3 NaN codes (0x7f, 0xff) would come out as +-480: checkpoints hold
// none (e4m3fn's largest finite value is 448, and quantizers saturate).
static __device__ __forceinline__ void gv_e4m3x4_bf16x2(uint32_t w, uint32_t *even, uint32_t *odd) {
    const __nv_bfloat162 two120 = __halves2bfloat162(__ushort_as_bfloat16(0x7b80), __ushort_as_bfloat16(0x7b80));
    uint32_t e = ((w & 0x00800080u) << 8) | ((w << 4) & 0x07f007f0u);
    uint32_t o = (w & 0x80008000u) | ((w >> 4) & 0x07f007f0u);
    __nv_bfloat162 be = __hmul2(*(__nv_bfloat162 *)&e, two120), bo = __hmul2(*(__nv_bfloat162 *)&o, two120);
    *even = *(uint32_t *)&be, *odd = *(uint32_t *)&bo;
}

// The block scales of e4m3 step kstep's halves (kstep % 128 == 0): columns hx / q and (hx + 1) / q of the tile's
// scale row for hx = kstep / 64, by the divider of gv_block_setup (no division per step). A half wholly past k
// (the tail step only) would index one column past the row: it reads the row's last scale instead (its part of
// the sum is +0, and +0 times any finite scale is +0: the same sum). Plain loads: early-launched kernels use no
// __ldg.
template <bool CHECKED>
static __device__ __forceinline__ void gv_scales(float (&sc)[2], const float *srow, uint32_t smagic, int scols,
                                                 int kstep) {
    const uint32_t hx2 = (uint32_t)kstep >> 5; // 2 hx
    const int c0 = (int)__umulhi(hx2, smagic), c1 = (int)__umulhi(hx2 + 2, smagic);
    sc[0] = srow[CHECKED ? min(c0, scols - 1) : c0], sc[1] = srow[CHECKED ? min(c1, scols - 1) : c1];
}
#endif
