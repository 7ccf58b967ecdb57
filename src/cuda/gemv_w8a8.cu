// W8A8 GEMV on FP8 block-scaled weights (route gemm_fp8 = w8a8): out[n, m] f32 = e4m3(x)[n, k] . W[m, k]^T for
// n <= 16 rows, with W in e4m3 and one f32 scale per 128-column block (block_cols == 128, block_rows % 32 == 0).
//
// Why: the weight-only FP8 GEMV (gemv.cu, GV_FP8) turns every weight into bf16 in registers and multiplies by 2^120
// before a bf16 MMA, and rounds x to bf16 (or splits it in two); ~615 warp instructions per 4 KB step hold it near
// 58 % of the copy bandwidth (docs/perf-notes.md, sessions 9-11). Here x is quantized like the weights instead
// (the published format's `activation_scheme: dynamic`: HF transformers' fine-grained FP8, DeepSeek-V3's
// act_quant), so both operands are e4m3 values. sm_90 has no e4m3 mma.sync in hardware (m16n8k32 .e4m3 is an
// sm_89 instruction: ptxas emulates it on Hopper with e4m3 -> f16 conversions of both operands, 14 more SASS
// instructions per MMA than a bf16 one, on the conversion pipe; NVIDIA/cutlass#1986); Hopper's native FP8 MMA is
// wgmma. So both operands become f16 by a bit trick on the integer pipe (exact: e4m3 values are f16 values,
// times 2^-8 here, folded into the block factor) and run f16 m16n8k16 MMAs with f32 accumulation: products exact,
// no rescale multiply, x's conversion shared by the block's two 16-row tiles.
//
// Activation quantization (per token row and 128-wide group of k, groups from k = 0; the last one may be short
// when k % 128 != 0, HF refuses such k): amax = max |x| over the group, clamped below at 1e-10 (HF's act_quant
// divides by zero on an all-zero group; 1e-10 is vLLM's eps), s = amax / 448 and r = 448 / amax in f32, x_q =
// e4m3(x * r) rounded to nearest even, saturated at +-448. HF divides x / s instead; the two differ only when
// x / s lies within an f32 ulp of an e4m3 rounding boundary (and Triton's fp32 division is not correctly rounded
// either). Each 128-k block's MMA sum is started fresh, multiplied by w_scale(row block, k block) * s(token, group)
// and added to the fp32 accumulator (acc += part * (ws * s * 2^16)), as HF's block-scaled GEMM promotes each
// 128-k block (and DeepSeek-V3 on Hopper's FP8 tensor cores, whose internal accumulation is narrower than fp32;
// the f16 MMAs here accumulate in fp32 anyway).
//
// Schedule (gemv.cu's, so its properties carry over): 8 warps over 32 weight rows and one k slice (cu_gemv_plan;
// slices multiples of 2048), warp w of 8 takes the 128-wide steps w, w+8, ... = the activation groups, the next
// step's weights in flight while this one is multiplied (a ring of one step), the 8 warp sums added in warp order
// and the slice sums in slice order (cu_gemv_tile_finish). Fused segments (up to CU_GEMV_MAX_SEGS weights of one
// x) as cu_gemv_multi. x is quantized inside the kernel, by each block for its own k range: x is tiny and
// L2-resident, and a separate quantization kernel would add a launch (~2 us, ~250 of them per 27B decode step).
//
// Fragments: a lane (g = lane / 4, t = lane % 4) loads 16 bytes of each of its rows g, g+8 (per 16-row tile) at
// k = step + 16t and step + 64 + 16t, as gemv.cu does, and quantizes the 32 x values of token g at the same k.
// The k order inside a dot product is free as long as A and B use the same permutation: word i of those bytes
// feeds one m16n8k16 MMA, its even bytes as PTX's logical k {2t, 2t+1} and its odd ones as {2t+8, 2t+9}, for
// both operands (w8_mma). Per step and 16-row tile: 8 MMAs. The 4 lanes of a token row hold its 128-group between
// them (32 values each): amax by two xor shuffles; the C fragment's columns are tokens 2t, 2t+1, whose scales
// come from lanes 8t and 8t+4.
//
// Batch invariance: a token's quantization depends only on its own row, an MMA's output column only on its B
// column, and the k partition only on (m, k, SM count): row j of an n-row call is bitwise the 1-row call. Token
// rows past n read token 0's x and are never written out.
#include <cuda_fp8.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/gemv_tile.cuh"
#include "cuda/mma.cuh"

#define W8_WARPS       CU_GEMV_TILE_WARPS
#define W8_THREADS     CU_GEMV_TILE_THREADS
#define W8_ROWS        CU_GEMV_TILE_ROWS
#define W8_R           (W8_ROWS / 16) // 16-row MMA tiles per block
#define W8_KSTEP       128            // k per warp step: one activation group, one weight scale column
#define W8_BLOCK_KSTEP (W8_KSTEP * W8_WARPS)
#define W8_QUANTUM     (2 * W8_BLOCK_KSTEP) // k slices are multiples of this
#define W8_AMAX_MIN    1e-10f
#define W8_E4M3_MAX    448.f

// One weight of a (possibly fused) launch (as gemv.cu's gv_seg): blocks [block0, block0 + tiles * S) are its
// (tile, slice) pairs, tile fastest; scale [ceil(m / br), scols] f32.
typedef struct {
    const uint8_t *W;
    const float *scale;
    float *out;
    float *partial;
    int *counters;
    int m, kslice, S, tiles, block0;
    int br, scols;
} w8_seg;
typedef struct {
    w8_seg seg[CU_GEMV_MAX_SEGS];
    int count;
} w8_job;

// The segment of block bid: the last one starting at or before it (block-uniform selects, no local copy).
static __device__ __forceinline__ int w8_segment(const w8_job &job, int bid) {
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_GEMV_MAX_SEGS; i++)
        if (i < job.count && bid >= job.seg[i].block0) si = i;
    return si;
}

// One step of weights for a lane: rows g + 8 i (i = 2r + hf: rows g, g+8 of tile r), 16 bytes each at the step's
// k + 16t and + 64 + 16t, woff bytes past the lane's pointer; CHECKED: zeros past kend, ROWCHK: zeros for rows
// >= m (a partial row tile); neither is loaded. k % 16 == 0, slices multiples of 16: a 16-byte group is all in or
// all out.
template <bool CHECKED, bool ROWCHK>
static __device__ __forceinline__ void w8_load_w(uint4 (&wv)[W8_R][2][2], const uint8_t *wlane, int64_t wstep,
                                                 const bool (&wok)[W8_R][2], int woff, int kstep, int kend, int t) {
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool kin = !CHECKED || kstep + 64 * h + 16 * t < kend;
#pragma unroll
        for (int r = 0; r < W8_R; r++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                wv[r][hf][h] =
                    kin && (!ROWCHK || wok[r][hf]) ? cu_ld_stream(wlane + (2 * r + hf) * wstep + woff + 64 * h) : zero4;
    }
}

// x of one step for token row xp (the lane's 32 values of its token's 128-group: k + 16t and + 64 + 16t) quantized
// to e4m3, word w of half h in xq[4h + w] (k ascending from the low byte); *scale_out: the group's s. CHECKED:
// values past kend are zeros (no load; they change no amax). RELOAD (n > 8, where two steps of weights, two
// token groups' accumulators and 32 live fp32 values do not fit 128 registers): amax from a first pass, the
// values loaded again (L1 hits) to be quantized four at a time; the same values, the same result. Coherent loads
// (ld.global.ca), never __ldg: under route pdl=gemv x is written by the kernel before this one while this grid
// already runs (cuda_common.h).
static __device__ __forceinline__ float w8_amax4(float4 v) {
    return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}
static __device__ __forceinline__ uint32_t w8_e4m3x4(float4 v, float r) {
    const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x * r, v.y * r), __NV_SATFINITE, __NV_E4M3);
    const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z * r, v.w * r), __NV_SATFINITE, __NV_E4M3);
    return (lo & 0xffffu) | (hi << 16);
}
template <bool CHECKED, bool RELOAD>
static __device__ __forceinline__ void w8_quant_x(uint32_t (&xq)[8], float *scale_out, const float *xp, int kstep,
                                                  int kend, int t) {
    float4 v[2][4];
    bool kin[2];
    float amax = 0.f;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        kin[h] = !CHECKED || kstep + 64 * h + 16 * t < kend;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            v[h][q] = kin[h] ? __ldca((const float4 *)(xp + 64 * h) + q) : make_float4(0.f, 0.f, 0.f, 0.f);
            amax = fmaxf(amax, w8_amax4(v[h][q]));
        }
    }
    // the 4 lanes of this token row (lane = 4g + t) hold its 128-group between them
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    amax = fmaxf(amax, W8_AMAX_MIN);
    const float r = W8_E4M3_MAX / amax;
    *scale_out = amax / W8_E4M3_MAX;
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            if (RELOAD) v[h][q] = kin[h] ? __ldca((const float4 *)(xp + 64 * h) + q) : make_float4(0.f, 0.f, 0.f, 0.f);
            xq[4 * h + q] = w8_e4m3x4(v[h][q], r);
        }
}

// The x of token group j of one step (kstep < kend), quantized (xq), and the factors its 128-k sums are added
// with (f: ws * s * 2^16 for the C fragment's columns, tokens 2t and 2t+1 of the group, their s from lanes 8t, 8t+4).
template <bool CHECKED, bool RELOAD>
static __device__ __forceinline__ void w8_xgroup(uint32_t (&xq)[8], float (&f)[2], const float *xp, float ws, int kstep,
                                                 int kend, int t) {
    float s;
    w8_quant_x<CHECKED, RELOAD>(xq, &s, xp, kstep, kend, t);
    // 65536: the 2^-8 x 2^-8 of w8_e4m3x4_f16x2's products (a power of two: no rounding)
    f[0] = ws * __shfl_sync(0xffffffffu, s, 8 * t) * 65536.f;
    f[1] = ws * __shfl_sync(0xffffffffu, s, 8 * t + 4) * 65536.f;
}

// Four e4m3 bytes w = [b3 b2 b1 b0] -> f16x2 {b0, b2} (even) and {b1, b3} (odd), each the e4m3 value times 2^-8,
// exactly, on the integer pipe: sign to bit 15 of its half, the 7 exponent-mantissa bits to bits 13..7 (an f16
// with exponent field 0eeee and mantissa mmm0000000 is 2^(e - 15) x 1.mmm, the e4m3 value (bias 7) x 2^-8; e = 0:
// the subnormal 2^-14 x 0.mmm, again x 2^-8). Why not mma.sync m16n8k32 .e4m3: sm_90 has no such instruction in
// hardware; ptxas emulates it with e4m3 -> f16 conversions of both operands on the conversion pipe (~14 more
// SASS instructions per MMA than a bf16 one here, and NVIDIA/cutlass#1986), the pipe that held the first FP8
// GEMVs near 2-2.5 TB/s (session 7). The 2^-16 of a product is folded into the block factor.
static __device__ __forceinline__ void w8_e4m3x4_f16x2(uint32_t w, uint32_t *even, uint32_t *odd) {
    *even = ((w << 8) & 0x80008000u) | ((w << 7) & 0x3f803f80u);
    *odd = (w & 0x80008000u) | ((w >> 1) & 0x3f803f80u);
}

// The MMAs of token group j of one step: each 16-row tile's 8 MMAs summed fresh and added times
// ws * s * 2^16 (the one order every call uses). Word i (0..7: half i / 4, word i % 4) of a lane's bytes is
// k 16t + 4i' + {0, 1, 2, 3} (i' = i % 4, + 64 for the second half): MMA i takes the even bytes {0, 2} as PTX's
// logical k {2t, 2t+1} and the odd ones {1, 3} as {2t+8, 2t+9}, for the weights (A, rows g and g+8) and for x (B,
// token g) alike.
// XEAGER: x's f16 pairs made once for both tiles (16 registers); else per MMA (n > 8: no registers to spare).
template <bool XEAGER>
static __device__ __forceinline__ void w8_mma(float (&acc)[W8_R][4], const uint4 (&wv)[W8_R][2][2],
                                              const uint32_t (&xq)[8], const float (&f)[2]) {
    uint32_t xe[8], xo[8];
    if (XEAGER)
#pragma unroll
        for (int i = 0; i < 8; i++) w8_e4m3x4_f16x2(xq[i], &xe[i], &xo[i]);
#pragma unroll
    for (int r = 0; r < W8_R; r++) {
        const uint32_t lo[8] = {wv[r][0][0].x, wv[r][0][0].y, wv[r][0][0].z, wv[r][0][0].w,
                                wv[r][0][1].x, wv[r][0][1].y, wv[r][0][1].z, wv[r][0][1].w}; // row g
        const uint32_t hi[8] = {wv[r][1][0].x, wv[r][1][0].y, wv[r][1][0].z, wv[r][1][0].w,
                                wv[r][1][1].x, wv[r][1][1].y, wv[r][1][1].z, wv[r][1][1].w}; // row g + 8
        float part[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 8; i++) { // converted right before their MMA: 4 live registers, not 32
            uint32_t a0, a1, a2, a3, wl = lo[i], wh = hi[i];
            // n > 8: converted again for each token group; without this the compiler keeps one conversion of
            // the step's weights for both groups (32 more live registers) and spills
            if (!XEAGER) asm volatile("" : "+r"(wl), "+r"(wh));
            w8_e4m3x4_f16x2(wl, &a0, &a2);
            w8_e4m3x4_f16x2(wh, &a1, &a3);
            if (!XEAGER) w8_e4m3x4_f16x2(xq[i], &xe[i], &xo[i]);
            cu_mma_f16(part, a0, a1, a2, a3, xe[i], xo[i]);
        }
        acc[r][0] += part[0] * f[0], acc[r][1] += part[1] * f[1];
        acc[r][2] += part[2] * f[0], acc[r][3] += part[3] * f[1];
    }
}

// One step of a warp: per token group, x quantized then its MMAs; the next step's weights (nxt) are issued after
// the first group's x is quantized (its 32 fp32 values die there), so they are in flight while this step's MMAs
// and the next step's x run. LOAD_NXT: 0 none (the tail step), 1 unchecked, 2 checked.
template <int NG, bool CHECKED, int LOAD_NXT, bool ROWCHK>
static __device__ __forceinline__ void w8_step(float (&acc)[NG][W8_R][4], const uint4 (&cur)[W8_R][2][2],
                                               uint4 (&nxt)[W8_R][2][2], const uint8_t *wlane, int64_t wstep,
                                               const bool (&wok)[W8_R][2], const float *const (&xp)[NG],
                                               const float *srow, int kstep, int kend, int t) {
    const float ws = srow[kstep / W8_KSTEP]; // block_cols == 128: the step's scale column
#pragma unroll
    for (int j = 0; j < NG; j++) {
        uint32_t xq[8];
        float f[2];
        w8_xgroup<CHECKED, (NG > 1)>(xq, f, xp[j], ws, kstep, kend, t);
        if (j == 0 && LOAD_NXT)
            w8_load_w<LOAD_NXT == 2, ROWCHK>(nxt, wlane, wstep, wok, W8_BLOCK_KSTEP, kstep + W8_BLOCK_KSTEP, kend, t);
        w8_mma<NG == 1>(acc[j], cur, xq, f);
    }
}

// The k loop of a warp from its first step k0 (pointers at k0) to kend (ROWCHK: a partial row tile); same steps,
// same order whatever the schedule: same sums.
template <int NG, bool ROWCHK>
// The PDL wait comes after the first step's weight loads (weights are constant during a forward; under route
// pdl=gemv the kernel before this one may still run), before x is read.
static __device__ __forceinline__ void w8_kloop(float (&acc)[NG][W8_R][4], const uint8_t *wlane, int64_t wstep,
                                                const bool (&wok)[W8_R][2], const float *(&xp)[NG], const float *srow,
                                                int k0, int kend, int t) {
    const int kfull = kend - W8_KSTEP; // a step at kstep <= kfull is whole
    uint4 cur[W8_R][2][2], nxt[W8_R][2][2];
    w8_load_w<true, ROWCHK>(cur, wlane, wstep, wok, 0, k0, kend, t);
    CU_PDL_ENTER();
    for (; k0 <= kfull; k0 += W8_BLOCK_KSTEP) {
        // NG = 2 checks every next step (its unchecked / checked pair spills, as gemv.cu's e4m3 loop did); a
        // whole step's checks all pass: the same loads. Past the end: zeros, no loads.
        if (NG == 1 && k0 + W8_BLOCK_KSTEP <= kfull)
            w8_step<NG, false, 1, ROWCHK>(acc, cur, nxt, wlane, wstep, wok, xp, srow, k0, kend, t);
        else
            w8_step<NG, false, 2, ROWCHK>(acc, cur, nxt, wlane, wstep, wok, xp, srow, k0, kend, t);
        wlane += W8_BLOCK_KSTEP;
#pragma unroll
        for (int j = 0; j < NG; j++) xp[j] += W8_BLOCK_KSTEP;
#pragma unroll
        for (int r = 0; r < W8_R; r++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) cur[r][hf][0] = nxt[r][hf][0], cur[r][hf][1] = nxt[r][hf][1];
    }
    if (k0 < kend) // the short step holding k (k % 128 != 0)
        w8_step<NG, true, 0, ROWCHK>(acc, cur, nxt, wlane, wstep, wok, xp, srow, k0, kend, t);
}

// Block: 8 warps, 32 weight rows of one segment, NG token groups of 8, one k slice; S > 1: the slice sum goes to
// `partial` and the tile's last block adds the slices.
template <int NG>
__global__ void __launch_bounds__(W8_THREADS, 2) k_gemv_w8a8(const w8_job job, const float *x, int n, int k) {
    constexpr int NC = 8 * NG;
    __shared__ float red[W8_WARPS][W8_ROWS][NC];
    __shared__ int is_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int si = w8_segment(job, blockIdx.x);
    const uint8_t *W = job.seg[0].W;
    const float *scale = job.seg[0].scale;
    int m = job.seg[0].m, kslice = job.seg[0].kslice, tiles = job.seg[0].tiles, block0 = 0, br = job.seg[0].br;
    int scols = job.seg[0].scols;
#pragma unroll
    for (int i = 1; i < CU_GEMV_MAX_SEGS; i++)
        if (i == si) {
            W = job.seg[i].W, scale = job.seg[i].scale, m = job.seg[i].m, kslice = job.seg[i].kslice;
            tiles = job.seg[i].tiles, block0 = job.seg[i].block0, br = job.seg[i].br, scols = job.seg[i].scols;
        }
    const int tile = (blockIdx.x - block0) % tiles, s = (blockIdx.x - block0) / tiles;
    const int row_base = tile * W8_ROWS, kbeg = s * kslice, kend = min(k, kbeg + kslice);
    const int k0 = kbeg + warp * W8_KSTEP;
    const uint8_t *wlane = W + (int64_t)(row_base + g) * k + k0 + 16 * t;
    const int64_t wstep = (int64_t)8 * k;
    bool wok[W8_R][2];
#pragma unroll
    for (int r = 0; r < W8_R; r++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) wok[r][hf] = row_base + 16 * r + 8 * hf + g < m;
    const float *srow = scale + (int64_t)(row_base / br) * scols; // a 32-row tile lies in one scale row
    const float *xp[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xp[j] = x + (int64_t)(tok < n ? tok : 0) * k + k0 + 16 * t;
    }
    float acc[NG][W8_R][4];
#pragma unroll
    for (int r = 0; r < W8_R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) acc[j][r][0] = acc[j][r][1] = acc[j][r][2] = acc[j][r][3] = 0.f;
    if (row_base + W8_ROWS <= m)
        w8_kloop<NG, false>(acc, wlane, wstep, wok, xp, srow, k0, kend, t);
    else
        w8_kloop<NG, true>(acc, wlane, wstep, wok, xp, srow, k0, kend, t);
    CU_PDL_ENTER(); // w8_kloop has waited (after its first weight loads); a repeated wait returns at once

        // C fragment: {row g, token 2t, 2t+1}, {row g+8, token 2t, 2t+1} of each (tile, group)
#pragma unroll
    for (int r = 0; r < W8_R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) {
            red[warp][16 * r + g][8 * j + 2 * t] = acc[j][r][0];
            red[warp][16 * r + g][8 * j + 2 * t + 1] = acc[j][r][1];
            red[warp][16 * r + g + 8][8 * j + 2 * t] = acc[j][r][2];
            red[warp][16 * r + g + 8][8 * j + 2 * t + 1] = acc[j][r][3];
        }
    __syncthreads();
    float *out = job.seg[0].out, *partial = job.seg[0].partial;
    int *counters = job.seg[0].counters, S = job.seg[0].S;
#pragma unroll
    for (int i = 1; i < CU_GEMV_MAX_SEGS; i++)
        if (i == si)
            out = job.seg[i].out, partial = job.seg[i].partial, counters = job.seg[i].counters, S = job.seg[i].S;
    cu_gemv_tile_finish<NC>(red, is_last, out, partial, counters, S, tiles, tile, s, row_base, m, n);
}

int cu_gemv_w8a8_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || W->fmt != FD_WFMT_FP8_BLOCK || !W->dev || !W->dev_scale) return 0;
    if (W->cols % 16 != 0 || W->cols <= 0 || W->cols >= (1 << 21) || W->rows <= 0 || W->block_cols != W8_KSTEP ||
        W->block_rows % 32)
        return 0;
    return ((uintptr_t)W->dev | (uintptr_t)x) % 16 == 0;
}

int cu_gemv_w8a8_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n) {
    if (count < 1 || count > CU_GEMV_MAX_SEGS) return 0;
    for (int i = 0; i < count; i++)
        if (!cu_gemv_w8a8_supported(x, Ws[i], n) || Ws[i]->cols != Ws[0]->cols) return 0;
    return 1;
}

void cu_gemv_w8a8_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x,
                        int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_w8a8_multi_supported(x, Ws, count, n), "gemv w8a8: unsupported call n=%d count=%d %s [%lld, %lld]",
             n, count, Ws[0]->name ? Ws[0]->name : "?", (long long)Ws[0]->rows, (long long)Ws[0]->cols);
    const int k = (int)Ws[0]->cols;
    w8_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    // Blocks and split-k buffer regions of each segment, in segment order; partial sums sized for 16 tokens
    // whatever n is (as cu_gemv_multi: a decode step leaves the buffers big enough for a verify step).
    int blocks = 0, split_tiles = 0;
    size_t partial_elems = 0, part_off[CU_GEMV_MAX_SEGS];
    int ctr_off[CU_GEMV_MAX_SEGS];
    for (int i = 0; i < count; i++) {
        w8_seg *sg = &job.seg[i];
        sg->W = (const uint8_t *)Ws[i]->dev;
        sg->scale = (const float *)Ws[i]->dev_scale;
        sg->out = outs[i];
        sg->m = (int)Ws[i]->rows;
        sg->br = Ws[i]->block_rows, sg->scols = (int)Ws[i]->scale_cols;
        sg->S = cu_gemv_plan(sg->m, k, W8_QUANTUM, c->num_sms, c->gemv_blocks_per_sm, &sg->kslice);
        sg->tiles = (sg->m + W8_ROWS - 1) / W8_ROWS;
        sg->block0 = blocks;
        blocks += sg->tiles * sg->S;
        part_off[i] = partial_elems, ctr_off[i] = split_tiles;
        if (sg->S > 1) partial_elems += (size_t)sg->S * sg->tiles * CU_GEMV_TILE_PARTIAL, split_tiles += sg->tiles;
    }
    if (partial_elems) {
        float *partial = (float *)cu_scratch(be, CU_SCR_A, partial_elems * sizeof(float));
        int *counters = cu_gemv_counters(c, split_tiles);
        for (int i = 0; i < count; i++)
            if (job.seg[i].S > 1)
                job.seg[i].partial = partial + part_off[i], job.seg[i].counters = counters + ctr_off[i];
    }
    c->gemv_launches++;
    if (n <= 8)
        cu_launch_early(be, k_gemv_w8a8<1>, blocks, W8_THREADS, 0, job, x, n, k);
    else
        cu_launch_early(be, k_gemv_w8a8<2>, blocks, W8_THREADS, 0, job, x, n, k);
}
