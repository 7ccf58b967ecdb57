// The device layout of GPTQ / AWQ int4 weights on the CUDA backend, shared by the upload and dequant (int4.cu)
// and the GEMV (gemv_int4.cu); docs/quant.md describes it.
//   - nibbles, repacked on the device into rows of the weight ([m, kwords] words, k rounded up to 128, the padding
//     zero). Inside a 128-wide k chunk c of a row, word 16c + 4t + i holds k = 128c + 32i + 8t + p in nibble p:
//     lane t of a quad reads words 4t .. 4t+3 with one 16-byte load, and word i of the four lanes covers one
//     32-wide k block, so one MMA never mixes groups of 32, 64 or 128 (GPTQ's qweight is packed along k already,
//     so its repack is a transpose of words; AWQ's is packed along n in its interleaved order, gathered).
//   - meta [G, m] uint32 (fd_weight.dev_scale): bits 0..15 the scale as stored (f16, or bf16 with bit 31 set: the
//     published dtypes; f32 scales are converted when exact in one of them, else refused), bits 16..30 the bf16
//     bits of 128 + z with z the effective zero (GPTQ v1: stored + 1, so 1..16; v2 and AWQ: 0..15).
//   - a g_idx equal to k / group_size is dropped at upload (w->g_idx = NULL: the same groups; GPTQ always writes
//     one); any other (desc_act act-order) is kept on the device after the meta words, and only the dequant route
//     runs the weight.
#ifndef FD_CUDA_INT4_H
#define FD_CUDA_INT4_H
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define I4_CHUNK     128         // k of one repacked chunk (16 words per row)
#define I4_META_BF16 0x80000000u // meta bit 31: the scale half is bf16 (else f16)

// Repacked words per row: k rounded up to a whole chunk, 8 nibbles a word.
static inline int64_t i4_kwords(int64_t k) {
    return (k + I4_CHUNK - 1) / I4_CHUNK * I4_CHUNK / 8;
}

static __device__ __forceinline__ float i4_scale(uint32_t meta) {
    const uint32_t s16 = meta & 0xffffu;
    if (meta & I4_META_BF16) return __uint_as_float(s16 << 16);
    return __half2float(__ushort_as_half((unsigned short)s16));
}

// (128 + z, 128 + z) as bf16x2.
static __device__ __forceinline__ uint32_t i4_zero_pair(uint32_t meta) {
    const uint32_t z = (meta >> 16) & 0x7fffu;
    return z | (z << 16);
}

// Nibbles p and p + 4 of a word minus the zero, as a bf16x2 register (exact).
static __device__ __forceinline__ uint32_t i4_pair(uint32_t word, int p, uint32_t zpair) {
    uint32_t v = ((word >> (4 * p)) & 0x000f000fu) | 0x43004300u;
    const __nv_bfloat162 r = __hsub2(*(const __nv_bfloat162 *)&v, *(const __nv_bfloat162 *)&zpair);
    return *(const uint32_t *)&r;
}

// The first k of repacked word d of a row (its 8 nibbles hold k0 .. k0 + 7).
static __device__ __forceinline__ int i4_word_k0(int64_t d) {
    return 128 * (int)(d >> 4) + 32 * (int)(d & 3) + 8 * (int)((d >> 2) & 3);
}
#endif
