// Small-n GEMM on the tensor cores (route gemm_small = gemv for bf16 weights, gemm_fp8 = gemv for FP8
// block-scaled ones): out[n, m] f32 = x[n, k] f32 . W[m, k]^T for n <= 16 rows (decode, DFlash verify, drafter
// blocks, batched decode). Weight-read bound: 2 bytes (bf16) or 1 byte (e4m3) per weight and at most 16 FMAs per
// weight, so the kernel is built to keep HBM busy, not the tensor cores.
//
// One kernel for both formats (template FMT): a lane loads the same 16 bytes per (row, step half) either way, so
// the bytes in flight, the grid, the k slicing and the fused segments are the same; an e4m3 step covers twice the
// k (128: 16 weights per 16 bytes), its weights become bf16 in registers (exact: e4m3 -> f16 -> f32 -> bf16) and
// feed twice as many MMAs, and each 64-wide half of a step is summed in a fresh accumulator and added times its
// block scale (block_cols % 64 == 0, block_rows % 32 == 0: a 32-row tile and a half step lie in one scale block).
// The first FP8 kernel (whole k per 32-row block, no split-k, no fusion; session 6) streamed ~1.9 TB/s; this one
// inherits the bf16 kernel's schedule.
//
// mma.sync m16n8k16 with the W rows as A (16 rows per tile) and the token rows as B (8 per group, zero-padded).
// The k order inside one dot product is free as long as A and B use the same permutation, so instead of the
// scattered fragment layout each lane loads 16 contiguous bytes (8 bf16) of a W row at k = base + 8t (t = lane%4)
// and feeds its halves to two MMAs; the same lane reads the matching 8 fp32 of its token row (lane/4) and rounds
// them itself, so no activation conversion kernel runs. A lane's A registers are
//   {row g, k 8t+0,1} {row g+8, k 8t+0,1} {row g, k 8t+2,3} {row g+8, k 8t+2,3}      (first MMA; +4 for the second)
// and its B registers {token g, k 8t+0,1} {token g, k 8t+2,3}: PTX's logical k 2t,2t+1 | 8+2t,8+2t+1 mapped to
// physical 8t+0,1 | 8t+2,3 for both operands.
//
// gemm_act (same numerics as the cuBLAS route): bf16 rounds x to bf16, so every product equals the cuBLAS path's
// and only the summation order differs; bf16x2 splits x = hi + lo (both bf16) and runs an MMA for each; auto picks
// one of the two by k (cu_gemm_split), the same for every weight of a fused launch.
//
// Batch invariance (the contract that makes speculative decoding lossless on the GPU): one output element is the
// same sum in the same order whatever n is and whatever the other token rows hold. The k partition depends on
// (m, k, SM count) only:
//   - k is cut into S slices of `kslice` (cu_gemv_plan; a multiple of two block steps);
//   - inside a slice, warp w of 8 takes the 64-wide steps w, w+8, w+16, ... and accumulates them in k order in
//     its MMA accumulators (a token's column of an MMA depends only on that column of B);
//   - the 8 warp sums are added in warp order through shared memory, the S slice sums in slice order by the
//     block that finishes a row tile last (a per-tile arrival counter; the order of the sum is fixed, only who
//     computes it varies).
// What varies with n is only how many token groups a block runs (NG = 1 for n <= 8, 2 above) and how many
// steps a lane loads at once (P); neither changes any element's sequence of operations. Steps wholly past the
// slice end are skipped, never run as zero MMAs.
//
// Fused projections (cu_gemv_multi): one launch runs up to GV_MAX_SEGS weights that share the input x (GDN
// qkv|z|b|a, attention q|k|v, FFN gate|up). Each weight is a segment with its own pointer, output, row tiles and
// its own cu_gemv_plan (m of that weight, not of the group), so a fused result is bitwise the separate call's. The
// weights need not be adjacent in memory: a block finds its segment in a small table passed by value.
//
// Load schedule: each warp loads P = 2 steps of weights, waits, runs their MMAs, repeat. Six other schedules
// (register rings of 2-4 steps, and the same rings in persistent blocks running across items) gave bitwise the
// same results and were no faster in the H200 sweep (docs/perf-notes.md, session 3); they were removed in
// session 6 (issue 14: kernel variants that no route selects go). The k-slicing target stays a tuning knob
// (fd_cuda_set_gemv_blocks_per_sm; FD_CUDA_BENCH=1 fd_cuda_tests bench_cuda_gemv_sweep).
#include <stdint.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/gemv_e4m3.cuh"
#include "cuda/gemv_tile.cuh"
#include "cuda/mma.cuh"

#define GV_WARPS   8
#define GV_THREADS (GV_WARPS * 32)
#define GV_ROWS    32 // W rows per block: two 16-row MMA tiles
// Weight formats of the kernel (template FMT).
#define GV_BF16 0
#define GV_FP8  1
// k per warp step: bf16, lane t reads [8t, 8t+8) and [32+8t, 32+8t+8); e4m3, [16t, 16t+16) and [64+16t, ...).
#define GV_KSTEP(FMT)          (64 << (FMT))
#define GV_BLOCK_KSTEP(FMT)    (GV_KSTEP(FMT) * GV_WARPS) // k covered by one step of all warps (512 / 1024)
#define GV_SLICE_QUANTUM(FMT)  (2 * GV_BLOCK_KSTEP(FMT))  // k slices are multiples of this (1024 / 2048)
#define GV_XWORDS(FMT)         (4 << (FMT))               // bf16 pairs of x per lane, token and step half
#define GV_PARTIAL_TILE  (GV_ROWS * 16)        // partial sums per (tile, slice): 32 rows x 16 tokens, any n
static_assert(GV_WARPS == CU_GEMV_TILE_WARPS && GV_ROWS == CU_GEMV_TILE_ROWS && GV_PARTIAL_TILE == CU_GEMV_TILE_PARTIAL,
              "gemv_tile.cuh's block");
#define GV_MAX_SEGS      CU_GEMV_MAX_SEGS

// One weight of a (possibly fused) launch: blocks [block0, block0 + tiles * S) are its (tile, slice) pairs,
// tile fastest. partial/counters: its own regions of the shared split-k buffers (S > 1 only).
// FP8 only: scale [ceil(m / br), scols] f32, one per br x bc block.
typedef struct {
    const uint8_t *W;
    const float *scale;
    float *out;
    float *partial;
    int *counters;
    int m, kslice, S, tiles, block0;
    int br, bc, scols;
} gv_seg;
typedef struct {
    gv_seg seg[GV_MAX_SEGS];
    int count;
} gv_job;

static __device__ __forceinline__ uint32_t gv_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

// hi = bf16(a, b); lo = bf16 of what hi dropped (bf16x2 only).
static __device__ __forceinline__ void gv_split(float a, float b, uint32_t *hi, uint32_t *lo, int split) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    *hi = *(uint32_t *)&h;
    if (split) *lo = gv_pack(a - __low2float(h), b - __high2float(h));
}

// Checked and unchecked steps (template CHECKED, one source): a step whose k all lies inside the block's slice
// (kstep + KSTEP <= kend: every step of a slice that ends on a slice quantum, all but the last of the slice that
// ends at k) runs without k predicates or zero-selects; the checked one zeros what lies past kend and loads none of
// it, as every step did before session 11. Rows past m are checked (ROWCHK) only in a block of a partial row
// tile, which runs its own copy of the k loop. Token rows past n are not checked at all: they read token 0's x
// (gv_block_setup), which changes no element that is written out: an MMA's output column depends only on its B
// column, and cu_gemv_tile_finish writes only tokens < n.
//
// Addresses: a lane holds one weight pointer and one per token group (xp) at its k of the current step, advanced
// by a constant per loop iteration; the halves and the steps of an iteration are immediate offsets (woff bytes,
// xoff floats: compile-time after inlining).

// x of one warp step half h (lane t reads the k its weights hold, [8t, 8t+8) and [32+8t, 32+8t+8) for bf16,
// [16t, 16t+16) and [64+16t, 64+16t+16) for e4m3, of its token rows g, 8+g) as bf16 pairs for the MMA B operand,
// paired as the weights are (consecutive k for bf16, k and k + 2 for e4m3); CHECKED: zeros past the slice end.
// gv_load_x: both halves.
template <int NG, int SPLIT, int FMT, bool CHECKED>
static __device__ __forceinline__ void gv_load_xh(uint32_t (&bh)[NG][GV_XWORDS(FMT)], uint32_t (&bl)[NG][GV_XWORDS(FMT)],
                                                  const float *const (&xp)[NG], int xoff, int kstep, int kend, int t,
                                                  int h) {
    constexpr int XW = GV_XWORDS(FMT); // 2 floats per word, XW / 2 float4 per lane
    const bool kin = !CHECKED || kstep + (GV_KSTEP(FMT) / 2) * h + 2 * XW * t < kend;
#pragma unroll
    for (int j = 0; j < NG; j++) {
#pragma unroll
        for (int q = 0; q < XW / 2; q++) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            // Coherent loads (ld.global.ca), never __ldg: under route pdl=gemv x is written by the kernel before
            // this one while this grid is already running, and a non-coherent load (.nc promises the data is
            // read-only for the kernel's lifetime) may be scheduled above the griddepcontrol.wait.
            if (kin) v = __ldca((const float4 *)(xp[j] + xoff + (GV_KSTEP(FMT) / 2) * h) + q);
            if (FMT == GV_FP8) { // the even / odd k pairs of gv_e4m3x4_bf16x2
                gv_split(v.x, v.z, &bh[j][2 * q], &bl[j][2 * q], SPLIT);
                gv_split(v.y, v.w, &bh[j][2 * q + 1], &bl[j][2 * q + 1], SPLIT);
            } else {
                gv_split(v.x, v.y, &bh[j][2 * q], &bl[j][2 * q], SPLIT);
                gv_split(v.z, v.w, &bh[j][2 * q + 1], &bl[j][2 * q + 1], SPLIT);
            }
        }
    }
}
template <int NG, int SPLIT, int FMT, bool CHECKED>
static __device__ __forceinline__ void gv_load_x(uint32_t (&bh)[2][NG][GV_XWORDS(FMT)],
                                                 uint32_t (&bl)[2][NG][GV_XWORDS(FMT)], const float *const (&xp)[NG],
                                                 int xoff, int kstep, int kend, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) gv_load_xh<NG, SPLIT, FMT, CHECKED>(bh[h], bl[h], xp, xoff, kstep, kend, t, h);
}

// What a block needs before its k loop, for item bid (= the block id of the one-block-per-item grid): its
// segment si (the last one starting at or before bid; block-uniform selects, no local copy of the table), its
// (tile, slice) and k range, and the lane's pointers at its first step k0 = kbeg + warp * KSTEP: weight row
// row_base + g at k0 + 8t (bf16) / 16t (e4m3), rows g + 8i (i = 2r + hf) wstep * i bytes on (one pointer: fewer
// registers than one per row, and wstep is block-uniform), wok: which are < m (all of them: full_rows); x rows
// (token 8j + g; past n: token 0) at the same k; FP8: the tile's row of block scales and its column divider.
// Only what the k loop needs is selected here; the output pointers after it (gv_finish: fewer live registers).
template <int R, int NG, int FMT>
static __device__ __forceinline__ void gv_block_setup(const gv_job &job, const float *x, int n, int k, int bid, int warp,
                                                      int t, int *si_out, int *tile_out, int *s_out, int *kbeg_out,
                                                      int *kend_out, const uint8_t **wlane_out, int64_t *wstep_out,
                                                      bool (&wok)[R][2], bool *full_rows_out, const float *(&xp)[NG],
                                                      const float **srow_out, uint32_t *smagic_out, int *scols_out) {
    const int g = (threadIdx.x & 31) >> 2;
    int si = 0;
#pragma unroll
    for (int i = 1; i < GV_MAX_SEGS; i++)
        if (i < job.count && bid >= job.seg[i].block0) si = i;
    const uint8_t *W = job.seg[0].W;
    const float *scale = job.seg[0].scale;
    int m = job.seg[0].m, kslice = job.seg[0].kslice, tiles = job.seg[0].tiles, block0 = 0;
    int br = job.seg[0].br, bc = job.seg[0].bc, scols = job.seg[0].scols;
#pragma unroll
    for (int i = 1; i < GV_MAX_SEGS; i++) {
        if (i == si) {
            W = job.seg[i].W, m = job.seg[i].m, kslice = job.seg[i].kslice, tiles = job.seg[i].tiles;
            block0 = job.seg[i].block0;
            if (FMT == GV_FP8) scale = job.seg[i].scale, br = job.seg[i].br, bc = job.seg[i].bc, scols = job.seg[i].scols;
        }
    }
    const int tile = (bid - block0) % tiles, s = (bid - block0) / tiles;
    const int row_base = tile * GV_ROWS;
    *si_out = si, *tile_out = tile, *s_out = s;
    const int kbeg = s * kslice;
    *kbeg_out = kbeg, *kend_out = min(k, kbeg + kslice);

    constexpr int ES = FMT == GV_FP8 ? 1 : 2, PER16 = 16 / ES; // bytes per weight, weights per 16 bytes
    const int k0 = kbeg + warp * GV_KSTEP(FMT);
    *wlane_out = W + ((int64_t)(row_base + g) * k + k0 + PER16 * t) * ES;
    *wstep_out = (int64_t)8 * k * ES;
    *full_rows_out = row_base + GV_ROWS <= m;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) wok[r][hf] = row_base + 16 * r + 8 * hf + g < m;
    if (FMT == GV_FP8) {
        // The scale column of half index hx (k / 64) is hx / q, q = bc / 64, as __umulhi(2 hx, ceil(2^32 / 2q)):
        // exact while 4 hx q < 2^32 (the rounding error of the magic number, < 2q / 2^32 per unit of 2 hx, stays
        // below 1 / 2q), which holds with q capped at ceil(k / 64) (hx < ceil(k / 64); a q that large makes every
        // column 0 either way) for any k < 2^21 (cu_gemv_fp8_supported).
        const uint32_t q2 = 2u * (uint32_t)min(bc / 64, (k + 63) / 64);
        *srow_out = scale + (int64_t)(row_base / br) * scols, *smagic_out = 0xffffffffu / q2 + 1u, *scols_out = scols;
    }
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xp[j] = x + (int64_t)(tok < n ? tok : 0) * k + k0 + 2 * GV_XWORDS(FMT) * t;
    }
}

// One warp step of weights for a lane: rows g, g+8 of each 16-row MMA tile, 16 bytes each at k = kstep + 8t and
// kstep + 32 + 8t (bf16) or kstep + 16t and kstep + 64 + 16t (e4m3), woff bytes past the lane's pointer;
// CHECKED: zeros past the slice end, ROWCHK (a partial row tile): zeros for rows >= m; neither is loaded.
template <int R, int FMT, bool CHECKED, bool ROWCHK>
static __device__ __forceinline__ void gv_load_w(uint4 (&wv)[R][2][2], const uint8_t *wlane, int64_t wstep,
                                                 const bool (&wok)[R][2], int woff, int kstep, int kend, int t) {
    constexpr int ES = FMT == GV_FP8 ? 1 : 2, PER16 = 16 / ES; // weights per 16 bytes
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        // k % PER16 == 0 and slices are multiples of PER16: a 16-byte group is all in or out
        const bool kin = !CHECKED || kstep + (GV_KSTEP(FMT) / 2) * h + PER16 * t < kend;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++)
                wv[r][hf][h] = kin && (!ROWCHK || wok[r][hf])
                                   ? cu_ld_stream(wlane + (2 * r + hf) * wstep + woff + (GV_KSTEP(FMT) / 2) * ES * h)
                                   : zero4;
    }
}

// Advances the lane's pointers by `steps` block steps.
template <int NG, int FMT>
static __device__ __forceinline__ void gv_advance(const uint8_t *&wlane, const float *(&xp)[NG], int steps) {
    wlane += steps * GV_BLOCK_KSTEP(FMT) * (FMT == GV_FP8 ? 1 : 2);
#pragma unroll
    for (int j = 0; j < NG; j++) xp[j] += steps * GV_BLOCK_KSTEP(FMT);
}

// The MMAs of one warp step, in the one order every schedule uses (the order of the sum is the result).
template <int R, int NG, int SPLIT>
static __device__ __forceinline__ void gv_step_mma(float (&acc)[R][NG][4], const uint4 (&wv)[R][2][2],
                                                   const uint32_t (&bh)[2][NG][4], const uint32_t (&bl)[2][NG][4]) {
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint4 lo8 = wv[r][0][h], hi8 = wv[r][1][h]; // rows g and g+8
#pragma unroll
            for (int j = 0; j < NG; j++) {
                const uint32_t *xh = bh[h][j], *xl = bl[h][j];
                cu_mma_bf16(acc[r][j], lo8.x, hi8.x, lo8.y, hi8.y, xh[0], xh[1]);
                if (SPLIT) cu_mma_bf16(acc[r][j], lo8.x, hi8.x, lo8.y, hi8.y, xl[0], xl[1]);
                cu_mma_bf16(acc[r][j], lo8.z, hi8.z, lo8.w, hi8.w, xh[2], xh[3]);
                if (SPLIT) cu_mma_bf16(acc[r][j], lo8.z, hi8.z, lo8.w, hi8.w, xl[2], xl[3]);
            }
        }
}

// The same for an e4m3 step, which loads its x itself, half by half (an e4m3 step holds twice the x of a bf16 one:
// both halves at once would not fit the registers): each 64-wide half h is summed in a fresh accumulator and added
// times its block scale sc[h]. Word i of a lane's 16 bytes is k 16t + 4i + {0, 1, 2, 3}: MMA i of the half takes
// the even bytes {0, 2} as PTX's logical k {2t, 2t+1} and the odd ones {1, 3} as {2t+8, 2t+9}, for both operands
// (gv_load_xh puts x's k 16t + 4i + {0, 2} in word 2i, {1, 3} in 2i + 1).
template <int R, int NG, int SPLIT, bool CHECKED>
static __device__ __forceinline__ void gv_step_mma_fp8(float (&acc)[R][NG][4], const uint4 (&wv)[R][2][2],
                                                       const float *const (&xp)[NG], int xoff, const float (&sc)[2],
                                                       int kstep, int kend, int t) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t bh[NG][8], bl[NG][8];
        gv_load_xh<NG, SPLIT, GV_FP8, CHECKED>(bh, bl, xp, xoff, kstep, kend, t, h);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint32_t lo[4] = {wv[r][0][h].x, wv[r][0][h].y, wv[r][0][h].z, wv[r][0][h].w}; // row g
            const uint32_t hi[4] = {wv[r][1][h].x, wv[r][1][h].y, wv[r][1][h].z, wv[r][1][h].w}; // row g + 8
            float part[NG][4];
#pragma unroll
            for (int j = 0; j < NG; j++) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
#pragma unroll
            for (int i = 0; i < 4; i++) { // converted right before their MMAs: 4 live registers, not 16
                uint32_t a0, a1, a2, a3;
                gv_e4m3x4_bf16x2(lo[i], &a0, &a2);
                gv_e4m3x4_bf16x2(hi[i], &a1, &a3);
#pragma unroll
                for (int j = 0; j < NG; j++) {
                    cu_mma_bf16(part[j], a0, a1, a2, a3, bh[j][2 * i], bh[j][2 * i + 1]);
                    if (SPLIT) cu_mma_bf16(part[j], a0, a1, a2, a3, bl[j][2 * i], bl[j][2 * i + 1]);
                }
            }
#pragma unroll
            for (int j = 0; j < NG; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[r][j][e] += part[j][e] * sc[h];
        }
    }
}

// The end of a block, shared by every load schedule: the 8 warp sums of the block's (tile, slice) are added in
// warp order through shared memory; with S > 1 the slice sum goes to `partial` and the tile's last block adds
// the S slice sums in slice order.
template <int NG>
static __device__ __forceinline__ void gv_finish(const gv_job &job, int si, int tile, int s, int n,
                                                 const float (&acc)[GV_ROWS / 16][NG][4],
                                                 float (&red)[GV_WARPS][GV_ROWS][8 * NG], int *is_last_flag) {
    constexpr int R = GV_ROWS / 16, NC = 8 * NG;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int row_base = tile * GV_ROWS;
    int &is_last = *is_last_flag;
    float *out = job.seg[0].out, *partial = job.seg[0].partial;
    int m = job.seg[0].m, tiles = job.seg[0].tiles;
    int *counters = job.seg[0].counters, S = job.seg[0].S;
#pragma unroll
    for (int i = 1; i < GV_MAX_SEGS; i++) {
        if (i == si) {
            out = job.seg[i].out, partial = job.seg[i].partial, counters = job.seg[i].counters, S = job.seg[i].S;
            m = job.seg[i].m, tiles = job.seg[i].tiles;
        }
    }

    // C fragment: {row g, token 2t, 2t+1}, {row g+8, token 2t, 2t+1} of each (tile, group).
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) {
            red[warp][16 * r + g][8 * j + 2 * t] = acc[r][j][0];
            red[warp][16 * r + g][8 * j + 2 * t + 1] = acc[r][j][1];
            red[warp][16 * r + g + 8][8 * j + 2 * t] = acc[r][j][2];
            red[warp][16 * r + g + 8][8 * j + 2 * t + 1] = acc[r][j][3];
        }
    __syncthreads();
    cu_gemv_tile_finish<NC>(red, is_last, out, partial, counters, S, tiles, tile, s, row_base, m, n);
}

// One loop iteration of the bf16 kernel: P steps from k0, CHECKED or not (see gv_load_xh).
template <int R, int NG, int P, int XLAZY, int SPLIT, bool CHECKED, bool ROWCHK>
static __device__ __forceinline__ void gv_iter_bf16(float (&acc)[R][NG][4], const uint8_t *wlane, int64_t wstep,
                                                    const bool (&wok)[R][2], const float *const (&xp)[NG], int k0,
                                                    int kend, int t, bool &entered) {
    constexpr int FMT = GV_BF16, BLOCK_KSTEP = GV_BLOCK_KSTEP(FMT), XW = GV_XWORDS(FMT);
    // All weight loads of the iteration first; then the x loads, whose latency (L1/L2 hits) passes while the
    // weights are still on their way (XLAZY: step by step); then the MMAs.
    uint4 wv[P][R][2][2]; // [step][tile][row g / g+8][k group +0 / +32]
#pragma unroll
    for (int p = 0; p < P; p++)
        gv_load_w<R, FMT, CHECKED, ROWCHK>(wv[p], wlane, wstep, wok, p * BLOCK_KSTEP * 2, k0 + p * BLOCK_KSTEP, kend, t);
    if (!entered) {
        CU_PDL_ENTER();
        entered = true;
    }
    uint32_t bh[P][2][NG][XW], bl[P][2][NG][XW]; // x as bf16 pairs: hi, and lo for bf16x2
    if (!XLAZY)
#pragma unroll
        for (int p = 0; p < P; p++)
            gv_load_x<NG, SPLIT, FMT, CHECKED>(bh[p], bl[p], xp, p * BLOCK_KSTEP, k0 + p * BLOCK_KSTEP, kend, t);
#pragma unroll
    for (int p = 0; p < P; p++) {
        const int kstep = k0 + p * BLOCK_KSTEP;
        if (CHECKED && kstep >= kend) break; // warp-uniform: steps past the slice are not in the partition
        if (XLAZY) gv_load_x<NG, SPLIT, FMT, CHECKED>(bh[p], bl[p], xp, p * BLOCK_KSTEP, kstep, kend, t);
        gv_step_mma<R, NG, SPLIT>(acc, wv[p], bh[p], bl[p]);
    }
}

// The k loop of a block (ROWCHK: a partial row tile), from the lane's first step k0 (pointers at k0) to kend.
template <int NG, int P, int XLAZY, int SPLIT, int FMT, bool ROWCHK>
static __device__ __forceinline__ void gv_kloop(float (&acc)[GV_ROWS / 16][NG][4], const uint8_t *wlane,
                                                int64_t wstep, const bool (&wok)[GV_ROWS / 16][2],
                                                const float *(&xp)[NG], const float *srow, uint32_t smagic, int scols,
                                                int k0, int kend, int t, bool &entered) {
    constexpr int R = GV_ROWS / 16, KSTEP = GV_KSTEP(FMT), BLOCK_KSTEP = GV_BLOCK_KSTEP(FMT);
    const int kfull = kend - KSTEP; // a step at kstep <= kfull is whole (only a slice ending at k has one that is not)
    if constexpr (FMT == GV_FP8) {
        // e4m3: a ring of one step. An e4m3 step's conversions and MMAs are ~5x a bf16 step's work, long enough
        // that a warp loading two steps and then computing them leaves HBM idle for it half the time; so the next
        // step's weights are always in flight while this one is multiplied (same steps, same order: same sums).
        uint4 cur[R][2][2], nxt[R][2][2];
        gv_load_w<R, FMT, true, ROWCHK>(cur, wlane, wstep, wok, 0, k0, kend, t);
        CU_PDL_ENTER();
        entered = true;
        float sc[2];
        for (; k0 <= kfull; k0 += BLOCK_KSTEP) {
            const int kn = k0 + BLOCK_KSTEP;
            // NG = 2 checks every next step (as before the diet): its unchecked / checked pair spilled and ran
            // n = 16 13 % slower (docs/perf-notes.md, session 11); a whole step's checks all pass, same loads.
            if (NG == 1 && kn <= kfull)
                gv_load_w<R, FMT, false, ROWCHK>(nxt, wlane, wstep, wok, BLOCK_KSTEP, kn, kend, t);
            else // zeros, no loads, past the end
                gv_load_w<R, FMT, true, ROWCHK>(nxt, wlane, wstep, wok, BLOCK_KSTEP, kn, kend, t);
            gv_scales<false>(sc, srow, smagic, scols, k0);
            gv_step_mma_fp8<R, NG, SPLIT, false>(acc, cur, xp, 0, sc, k0, kend, t);
            gv_advance<NG, FMT>(wlane, xp, 1);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int hf = 0; hf < 2; hf++) cur[r][hf][0] = nxt[r][hf][0], cur[r][hf][1] = nxt[r][hf][1];
        }
        if (k0 < kend) { // the step holding k (k % 128 != 0): once per block
            gv_scales<true>(sc, srow, smagic, scols, k0);
            gv_step_mma_fp8<R, NG, SPLIT, true>(acc, cur, xp, 0, sc, k0, kend, t);
        }
    } else {
        for (; k0 + (P - 1) * BLOCK_KSTEP <= kfull; k0 += P * BLOCK_KSTEP) {
            gv_iter_bf16<R, NG, P, XLAZY, SPLIT, false, ROWCHK>(acc, wlane, wstep, wok, xp, k0, kend, t, entered);
            gv_advance<NG, FMT>(wlane, xp, P);
        }
        // at most one more: the next iteration would start at or past kend
        if (k0 < kend)
            gv_iter_bf16<R, NG, P, XLAZY, SPLIT, true, ROWCHK>(acc, wlane, wstep, wok, xp, k0, kend, t, entered);
    }
}

// Block: 8 warps, GV_ROWS weight rows (two 16-row MMA tiles) of one segment, NG token groups of 8, one k slice.
// P: warp steps whose weights a lane loads before it runs their MMAs (256 bytes in flight per lane at P = 2).
// XLAZY: a step's x is loaded right before its MMAs instead of with the weights (n > 8: holding the x of both
// steps would need ~140 registers; the x loads hit L1 and the other 15 warps of the SM cover them).
// S > 1: the slice sum goes to `partial` and the tile's last block adds the slices.
template <int NG, int P, int XLAZY, int SPLIT, int FMT>
__global__ void __launch_bounds__(GV_THREADS, 2) k_gemv(const gv_job job, const float *__restrict__ x, int n, int k) {
    // CU_PDL_ENTER comes after the first iteration's weight loads (weights are constant during a forward), so under
    // route pdl=gemv they are in flight while the previous kernel runs; x, out and the counters are touched after.
    constexpr int R = GV_ROWS / 16, NC = 8 * NG;
    __shared__ float red[GV_WARPS][GV_ROWS][NC];
    __shared__ int is_last;
    const int warp = threadIdx.x >> 5, t = threadIdx.x & 3;
    int si, tile, s, kbeg, kend;
    const uint8_t *wlane;
    int64_t wstep;
    bool wok[R][2], full_rows;
    const float *xp[NG];
    const float *srow = nullptr;
    uint32_t smagic = 0;
    int scols = 1;
    gv_block_setup<R, NG, FMT>(job, x, n, k, blockIdx.x, warp, t, &si, &tile, &s, &kbeg, &kend, &wlane, &wstep, wok,
                               &full_rows, xp, &srow, &smagic, &scols);

    float acc[R][NG][4];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;

    bool entered = false;
    const int k0 = kbeg + warp * GV_KSTEP(FMT);
    if (full_rows)
        gv_kloop<NG, P, XLAZY, SPLIT, FMT, false>(acc, wlane, wstep, wok, xp, srow, smagic, scols, k0, kend, t, entered);
    else
        gv_kloop<NG, P, XLAZY, SPLIT, FMT, true>(acc, wlane, wstep, wok, xp, srow, smagic, scols, k0, kend, t, entered);
    if (!entered) CU_PDL_ENTER(); // a warp with no step in its slice

    gv_finish<NG>(job, si, tile, s, n, acc, red, &is_last);
}

int cu_gemv_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || W->dev_dtype != FD_BF16 || !W->dev) return 0;
    // 16-byte loads of W rows and x rows: k % 8 (rows start 16-byte aligned) and aligned bases.
    if (W->cols % 8 != 0 || W->cols <= 0 || W->rows <= 0) return 0;
    if (((uintptr_t)W->dev | (uintptr_t)x) % 16 != 0) return 0;
    return 1;
}

int cu_gemv_fp8_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || W->fmt != FD_WFMT_FP8_BLOCK || !W->dev || !W->dev_scale) return 0;
    // 16-byte loads (k % 16); a 64-wide half step in one scale column and a 32-row tile in one scale row; k < 2^21
    // keeps gv_scales' column divider exact.
    if (W->cols % 16 != 0 || W->cols <= 0 || W->cols >= (1 << 21) || W->rows <= 0 || W->block_cols % 64 ||
        W->block_rows % 32)
        return 0;
    return ((uintptr_t)W->dev | (uintptr_t)x) % 16 == 0;
}

// The kernel's format of W: GV_BF16, GV_FP8, or -1 (not a GEMV weight).
static int gv_format(const void *x, const fd_weight *W, int n) {
    if (W->fmt == FD_WFMT_FP8_BLOCK) return cu_gemv_fp8_supported(x, W, n) ? GV_FP8 : -1;
    return W->fmt == FD_WFMT_DENSE && cu_gemv_supported(x, W, n) ? GV_BF16 : -1;
}

int cu_gemv_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n) {
    if (count < 1 || count > GV_MAX_SEGS) return 0;
    const int fmt = gv_format(x, Ws[0], n);
    if (fmt < 0) return 0;
    for (int i = 1; i < count; i++)
        if (gv_format(x, Ws[i], n) != fmt || Ws[i]->cols != Ws[0]->cols) return 0;
    return 1;
}

template <int NG, int P, int XLAZY, int FMT>
static void gv_launch(fd_backend *be, int blocks, int split, const gv_job &job, const float *x, int n, int k) {
    if (split)
        cu_launch_early(be, (k_gemv<NG, P, XLAZY, 1, FMT>), blocks, GV_THREADS, 0, job, x, n, k);
    else
        cu_launch_early(be, (k_gemv<NG, P, XLAZY, 0, FMT>), blocks, GV_THREADS, 0, job, x, n, k);
}

void cu_gemv_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x, int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_multi_supported(x, Ws, count, n), "gemv: unsupported call n=%d count=%d %s [%lld, %lld]", n, count,
             Ws[0]->name ? Ws[0]->name : "?", (long long)Ws[0]->rows, (long long)Ws[0]->cols);
    const int k = (int)Ws[0]->cols, fmt = gv_format(x, Ws[0], n);
    gv_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    // Blocks and split-k buffer regions of each segment, in segment order. The partial sums are sized for 16
    // tokens whatever n is, so a decode step (n = 1) leaves the buffers big enough for a verify step, which can
    // then be captured in a CUDA graph right away.
    int blocks = 0, split_tiles = 0;
    size_t partial_elems = 0;
    size_t part_off[GV_MAX_SEGS];
    int ctr_off[GV_MAX_SEGS];
    for (int i = 0; i < count; i++) {
        gv_seg *sg = &job.seg[i];
        sg->W = (const uint8_t *)Ws[i]->dev;
        sg->out = outs[i];
        sg->m = (int)Ws[i]->rows;
        if (fmt == GV_FP8) {
            sg->scale = (const float *)Ws[i]->dev_scale;
            sg->br = Ws[i]->block_rows, sg->bc = Ws[i]->block_cols, sg->scols = (int)Ws[i]->scale_cols;
        }
        // ~blocks_per_sm blocks a SM counted in 64-row tiles (twice as many 32-row blocks)
        sg->S = cu_gemv_plan(sg->m, k, 64, fmt == GV_FP8 ? GV_SLICE_QUANTUM(GV_FP8) : GV_SLICE_QUANTUM(GV_BF16),
                             c->gemv_blocks_per_sm * c->num_sms, &sg->kslice);
        sg->tiles = (sg->m + GV_ROWS - 1) / GV_ROWS;
        sg->block0 = blocks;
        blocks += sg->tiles * sg->S;
        part_off[i] = partial_elems;
        ctr_off[i] = split_tiles;
        if (sg->S > 1) {
            partial_elems += (size_t)sg->S * sg->tiles * GV_PARTIAL_TILE;
            split_tiles += sg->tiles;
        }
    }
    if (partial_elems) {
        float *partial = (float *)cu_scratch(be, CU_SCR_A, partial_elems * sizeof(float));
        int *counters = cu_gemv_counters(c, split_tiles);
        for (int i = 0; i < count; i++)
            if (job.seg[i].S > 1)
                job.seg[i].partial = partial + part_off[i], job.seg[i].counters = counters + ctr_off[i];
    }
    const int split = cu_gemm_split(c->gemm_act, k);
    c->gemv_launches++;
    // Variant 0 (batch): n <= 8: one token group. n > 8: two groups on the same 32-row blocks (same grid, same
    // partition: the two are bitwise interchangeable by construction), x loaded step by step. Both keep two steps of
    // weights (256 bytes) in flight per lane with 2 blocks per SM: 128 KB per SM. (Round 1 ran n > 8 on 64-row
    // blocks at one block per SM, 64 KB in flight, and reached only ~60 % of the n <= 8 bandwidth.)
    // e4m3 loads x step by step at every n: an e4m3 step holds twice the x of a bf16 one.
    if (fmt == GV_FP8) {
        if (n <= 8)
            gv_launch<1, 2, 1, GV_FP8>(be, blocks, split, job, x, n, k);
        else
            gv_launch<2, 2, 1, GV_FP8>(be, blocks, split, job, x, n, k);
    } else if (n <= 8) {
        gv_launch<1, 2, 0, GV_BF16>(be, blocks, split, job, x, n, k);
    } else {
        gv_launch<2, 2, 1, GV_BF16>(be, blocks, split, job, x, n, k);
    }
}

void cu_gemv(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    float *outs[1] = {out};
    const fd_weight *Ws[1] = {W};
    cu_gemv_multi(be, outs, Ws, 1, x, n);
}

extern "C" int64_t fd_cuda_gemv_launches(fd_backend *be) {
    return cu_of(be)->gemv_launches;
}

extern "C" int fd_cuda_set_gemv_blocks_per_sm(fd_backend *be, int blocks_per_sm) {
    cu_impl *c = cu_of(be);
    if (blocks_per_sm < 1 || blocks_per_sm > 64) return -1;
    const int prev = c->gemv_blocks_per_sm;
    c->gemv_blocks_per_sm = blocks_per_sm;
    return prev;
}
