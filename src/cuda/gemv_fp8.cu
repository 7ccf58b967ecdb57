// FP8 block-scaled weights on the GPU (route gemm_fp8): out[n, m] f32 = x[n, k] f32 . W[m, k]^T with W in e4m3
// and one f32 scale per block_rows x block_cols block (base/weight.h, HF fine-grained FP8).
//
// gemv (default), n <= 16 rows (decode, DFlash verify, drafter blocks): weight-read bound, 1 byte per weight. One
// block of 8 warps owns 32 rows (two 16-row MMA tiles) and the whole k range, so no split-k reduction and no
// atomics: warp w takes the 64-wide k chunks w, w + 8, ... in order (the next chunk's weights load while one is
// multiplied), multiplies each chunk on the tensor cores (mma.sync m16n8k16 bf16: e4m3 -> bf16 is exact, the x
// rows are rounded to bf16 or split in two bf16 terms per route gemm_act, exactly as for bf16 weights) into a fresh
// accumulator, and adds it times the chunk's block scale (a block's two tiles share one block row: block_rows %
// 32 == 0). The 8 warp sums are then added in warp order. Every output element is the same sequence of
// operations whatever n is: decode and verify agree bitwise.
// Lane t (of 4 in a quad) reads 16 contiguous bytes of rows g and g + 8 at k = chunk + 16t and the matching 16
// floats of its token row g; the k order inside one MMA is free as long as A and B use the same permutation (as in
// gemv.cu): MMA i of the chunk takes physical k 16t + 4i + {0, 1} for PTX's logical {2t, 2t+1} and 16t + 4i +
// {2, 3} for {2t+8, 2t+9}.
// Measured on the H200 (session 6; docs/perf-notes.md): ~1.9 TB/s on the 27B shapes at n = 1 (45 % of copy), 76
// tok/s 27B decode. Four other schedules (16-row blocks with a 4-deep register ring; 32-row blocks with it;
// short split-k blocks with 4 or 8 chunks per warp; 128-wide chunks) and a cheaper e4m3 -> bf16 conversion
// measured the same or slower, the split-k form 65 tok/s end to end: the limit is not bytes in flight nor the
// conversions; it is still open.
// dequant (n > 16, shapes the GEMV does not take, or selected): the weight is expanded in a scratch buffer (fp8 x
// scale) and the dense path runs (cuBLASLt for prefill): to bf16 (rounded, the bf16-weight contract) for GEMMs
// whose activations gemm_act rounds to bf16, to f32 (exact, the fp32 GEMM) where it keeps them ~fp32 (bf16x2: the
// toy and test models under auto). m k 3 (or 5) bytes of extra traffic, small next to the 2 n m k FLOPs of a
// prefill chunk.
#include <cuda_fp8.h>
#include <stdint.h>

#include "cuda/cuda_common.h"

#define G8_WARPS 8
#define G8_CHUNK 64 // k per warp step

static __device__ __forceinline__ void g8_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Weights are read once: stream them past L1.
static __device__ __forceinline__ uint4 g8_ld_stream(const uint8_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Two e4m3 bytes (low byte first) -> bf16x2, exact (e4m3 -> f16 is exact, so is f16 -> f32 -> bf16 for them).
static __device__ __forceinline__ uint32_t g8_e4m3x2_bf16x2(uint32_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)two, __NV_E4M3);
    const float2 f = __half22float2(*(__half2 *)&h);
    __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
    return *(uint32_t *)&b;
}

static __device__ __forceinline__ void g8_split(float a, float b, uint32_t *hi, uint32_t *lo, int split) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    *hi = *(uint32_t *)&h;
    if (split) {
        __nv_bfloat162 l = __floats2bfloat162_rn(a - __low2float(h), b - __high2float(h));
        *lo = *(uint32_t *)&l;
    }
}

// grid: ceil(m / 32) blocks of 256 threads. scale [ceil(m / br), scols] f32.
template <int NG, int SPLIT>
__global__ void __launch_bounds__(G8_WARPS * 32) k_gemv_fp8(float *out, const float *x, const uint8_t *W,
                                                            const float *scale, int n, int m, int k, int br, int bc,
                                                            int scols) {
    CU_PDL_ENTER();
    __shared__ float red[G8_WARPS][32][NG * 8];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 32;
    const float *srow = scale + (int64_t)(row0 / br) * scols;
    bool wok[2][2];
    const uint8_t *wrow[2][2];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = row0 + 16 * r + 8 * h + g;
            wok[r][h] = row < m;
            wrow[r][h] = W + (int64_t)(row < m ? row : 0) * k + 16 * t;
        }
    const float *xrow[NG];
    bool xok[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xok[j] = tok < n;
        xrow[j] = x + (int64_t)(tok < n ? tok : 0) * k + 16 * t;
    }
    float acc[2][NG][4];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[r][j][e] = 0.f;

    const int nchunks = k / G8_CHUNK;
    uint4 wv[2][2], wn[2][2];
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int h = 0; h < 2; h++)
            wn[r][h] = warp < nchunks && wok[r][h] ? g8_ld_stream(wrow[r][h] + warp * G8_CHUNK) : zero4;
    for (int c = warp; c < nchunks; c += G8_WARPS) {
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int h = 0; h < 2; h++) wv[r][h] = wn[r][h];
        const int cn = c + G8_WARPS; // the next chunk's weights load while this one multiplies
#pragma unroll
        for (int r = 0; r < 2; r++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                wn[r][h] = cn < nchunks && wok[r][h] ? g8_ld_stream(wrow[r][h] + (int64_t)cn * G8_CHUNK) : zero4;
        const int kk = c * G8_CHUNK;
        // B fragments: token g's 16 floats at kk + 16t, as bf16 pairs (hi, and lo when split)
        uint32_t bh[NG][8], bl[NG][8];
#pragma unroll
        for (int j = 0; j < NG; j++) {
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (xok[j]) v = __ldca((const float4 *)(xrow[j] + kk) + q);
                g8_split(v.x, v.y, &bh[j][2 * q], &bl[j][2 * q], SPLIT);
                g8_split(v.z, v.w, &bh[j][2 * q + 1], &bl[j][2 * q + 1], SPLIT);
            }
        }
        const float s = srow[kk / bc];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t lo8[4] = {wv[r][0].x, wv[r][0].y, wv[r][0].z, wv[r][0].w}; // row g: 16 bytes
            const uint32_t hi8[4] = {wv[r][1].x, wv[r][1].y, wv[r][1].z, wv[r][1].w}; // row g + 8
#pragma unroll
            for (int j = 0; j < NG; j++) {
                float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int i = 0; i < 4; i++) { // MMA i: bytes 4i..4i+3 of each row
                    const uint32_t a[4] = {g8_e4m3x2_bf16x2(lo8[i] & 0xffffu), g8_e4m3x2_bf16x2(hi8[i] & 0xffffu),
                                           g8_e4m3x2_bf16x2(lo8[i] >> 16), g8_e4m3x2_bf16x2(hi8[i] >> 16)};
                    g8_mma(part, a, bh[j][2 * i], bh[j][2 * i + 1]);
                    if (SPLIT) g8_mma(part, a, bl[j][2 * i], bl[j][2 * i + 1]);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) acc[r][j][e] += part[e] * s;
            }
        }
    }
    // C fragment: c0, c1 = (row g, tokens 2t, 2t+1), c2, c3 = (row g + 8, same tokens) of each tile and group
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][16 * r + g + 8 * (e >> 1)][8 * j + 2 * t + (e & 1)] = acc[r][j][e];
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * NG * 8; i += blockDim.x) {
        const int row = i / (NG * 8), tok = i % (NG * 8);
        float sum = 0.f;
#pragma unroll
        for (int w = 0; w < G8_WARPS; w++) sum += red[w][row][tok];
        if (tok < n && row0 + row < m) out[(int64_t)tok * m + row0 + row] = sum;
    }
}

int cu_gemv_fp8_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || W->fmt != FD_WFMT_FP8_BLOCK || !W->dev || !W->dev_scale) return 0;
    if (W->cols % G8_CHUNK || W->block_cols % G8_CHUNK || W->block_rows % 32) return 0;
    return ((uintptr_t)W->dev | (uintptr_t)x) % 16 == 0;
}

void cu_gemv_fp8(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    cu_impl *c = cu_of(be);
    const int m = (int)W->rows, k = (int)W->cols, split = cu_gemm_split(c->gemm_act, k);
    const unsigned grid = (unsigned)((m + 31) / 32);
    const uint8_t *w = (const uint8_t *)W->dev;
    const float *s = (const float *)W->dev_scale;
    const int br = W->block_rows, bc = W->block_cols, sc = (int)W->scale_cols;
    if (n <= 8)
        split ? cu_launch_early(be, (k_gemv_fp8<1, 1>), grid, G8_WARPS * 32, 0, out, x, w, s, n, m, k, br, bc, sc)
              : cu_launch_early(be, (k_gemv_fp8<1, 0>), grid, G8_WARPS * 32, 0, out, x, w, s, n, m, k, br, bc, sc);
    else
        split ? cu_launch_early(be, (k_gemv_fp8<2, 1>), grid, G8_WARPS * 32, 0, out, x, w, s, n, m, k, br, bc, sc)
              : cu_launch_early(be, (k_gemv_fp8<2, 0>), grid, G8_WARPS * 32, 0, out, x, w, s, n, m, k, br, bc, sc);
}

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
