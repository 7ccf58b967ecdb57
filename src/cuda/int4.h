// The device layout of GPTQ / AWQ int4 weights on the CUDA backend, shared by the upload and dequant (int4.cu)
// and the GEMV (gemv_int4.cu); docs/quant.md describes it.
//   - nibbles, repacked on the device into 32-row tiles, rows padded to a multiple of 32 and k to a multiple of 128
//     with zeros: tile T's 128-wide k chunk c is 2 KB at word ((T nchunks + c) 32 + rr) 16 + w for its row
//     32 T + rr; inside a row's chunk, word w = 4t + i holds k = 128c + 32i + 8t + p in nibble p. So a warp's
//     16-byte load of 8 rows (lane g, t: row g + 8j, words 4t .. 4t+3) is 512 contiguous bytes, a lane's four row
//     loads of a chunk are one pointer plus constants, and word i of a quad covers one 32-wide k block: one MMA
//     never mixes groups of 32, 64 or 128 (GPTQ's qweight is packed along k already, so its repack is a transpose
//     of words; AWQ's is packed along n in its interleaved order, gathered).
//   - meta [G, m_pad] uint32 (fd_weight.dev_scale; padded rows 0): bits 0..15 the scale, f16 or bf16 for the whole
//     tensor (fd_weight.dev_scale_dtype: the published dtype, or an f32 tensor's when every scale is exact in it,
//     else refused), bits 16..31 the bf16 bits of 128 + z with z the effective zero (GPTQ v1: stored + 1, so 1..16;
//     v2 and AWQ: 0..15).
//   - a g_idx equal to k / group_size is dropped at upload (w->g_idx = NULL: the same groups; GPTQ always writes
//     one); any other (desc_act act-order) is kept on the device after the meta words, and only the dequant route
//     runs the weight.
#ifndef FD_CUDA_INT4_H
#define FD_CUDA_INT4_H
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#define I4_CHUNK      128 // k of one repacked chunk (16 words per row)
#define I4_TILE_ROWS  32  // rows of a repacked tile
#define I4_TILE_CHUNK (I4_TILE_ROWS * I4_CHUNK / 8) // words of one tile's chunk (2 KB)

// Repacked words per row: k rounded up to a whole chunk, 8 nibbles a word.
static inline int64_t i4_kwords(int64_t k) {
    return (k + I4_CHUNK - 1) / I4_CHUNK * I4_CHUNK / 8;
}

// Rows of the repacked weight and of its meta words: m rounded up to a whole tile.
static __host__ __device__ __forceinline__ int64_t i4_rows_pad(int64_t m) {
    return (m + I4_TILE_ROWS - 1) / I4_TILE_ROWS * I4_TILE_ROWS;
}

// The repacked word of row r, word d of that row's k (d < i4_kwords(k); nchunks = i4_kwords(k) / 16).
static __host__ __device__ __forceinline__ int64_t i4_word_index(int64_t r, int64_t d, int64_t nchunks) {
    return (((r / I4_TILE_ROWS) * nchunks + d / 16) * I4_TILE_ROWS + r % I4_TILE_ROWS) * 16 + d % 16;
}

// A meta word's scale (bf16: the tensor's scale halves are bf16, else f16).
static __device__ __forceinline__ float i4_scale(uint32_t meta, int bf16) {
    if (bf16) return __uint_as_float(meta << 16);
    return __half2float(__ushort_as_half((unsigned short)(meta & 0xffffu)));
}

// (128 + z, 128 + z) as bf16x2: the meta word's upper half twice.
static __device__ __forceinline__ uint32_t i4_zero_pair(uint32_t meta) {
    return __byte_perm(meta, 0, 0x3232);
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
