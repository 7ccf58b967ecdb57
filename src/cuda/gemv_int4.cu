// The int4 GEMV (route gemm_int4 = gemv; int4.cu uploads and dispatches): out[n, m] f32 = x[n, k] f32 . W[m, k]^T
// for n <= 16 rows (decode, DFlash verify, drafter blocks) with W GPTQ / AWQ int4 in the layout of int4.h, element
// (r, c) = s[g, r] * (q - z[g, r]). Weight-read bound at 0.5 byte per weight (plus 4 bytes per group and row: +6 %
// at group 128).
//
// Same schedule as the bf16 GEMV (gemv.cu): mma.sync m16n8k16 bf16 with the W rows as A (32 rows per block, two
// tiles) and the token rows as B (8 per group, NG = 1 or 2 groups); 8 warps, warp w takes the 128-wide chunks w,
// w + 8, ... of its block's k slice, I4_P chunks loaded before their MMAs run; k is cut into slices by (m, k, SM
// count) only (cu_gemv_plan) and the slice sums added in slice order by the tile's last block. Every output element is
// the same sequence of operations whatever n is: batch invariant, bitwise. Up to CU_GEMV_MAX_SEGS weights sharing
// x run as segments of one launch, each with its own plan, so a fused result is bitwise the separate call's.
// Dequant in registers, exact: (word >> 4p) & 0x000f000f | 0x43004300 is the bf16 pair (128 + q_p, 128 + q_p+4),
// and one bf16x2 subtraction of (128 + z, 128 + z) leaves q - z, an integer in [-16, 15], exact in bf16 (integer
// and FMA pipes only: no conversion instruction, which runs at a fraction of the rate on the H200). So the MMA
// multiplies exact integer weights by x rounded to bf16 (or split in two bf16 terms) per route gemm_act, exactly
// as for bf16 weights, and each group's fp32 partial sum is multiplied by its fp32 scale. The pair (p, p + 4) of a
// word is one A register (logical k 2t, 2t + 1); B takes x at the same physical k: MMA (i, h) of a chunk uses
// nibbles {2h, 2h+4} and {2h+1, 2h+5} of word i.
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.h"
#include "cuda/gemv_tile.cuh"
#include "cuda/int4.h"
#include "cuda/mma.cuh"

#define I4_WARPS         8
#define I4_THREADS       (I4_WARPS * 32)
#define I4_BLOCK_KSTEP   (I4_CHUNK * I4_WARPS)   // 1024: k of one step of all warps
#define I4_P             2                       // steps whose weights a lane loads before their MMAs (128 bytes)
#define I4_SLICE_QUANTUM (I4_P * I4_BLOCK_KSTEP) // k slices are multiples of this: equal work for every warp
#define I4_ROWS          32                      // weight rows per block: two 16-row MMA tiles
#define I4_PARTIAL_TILE  (I4_ROWS * 16)          // partial sums per (tile, slice): 32 rows x 16 tokens, any n
static_assert(I4_WARPS == CU_GEMV_TILE_WARPS && I4_ROWS == CU_GEMV_TILE_ROWS && I4_PARTIAL_TILE == CU_GEMV_TILE_PARTIAL,
              "gemv_tile.cuh's block");
static_assert(I4_ROWS == I4_TILE_ROWS, "a block's rows are one repacked tile");

// Meta words: constant for a forward and read once, past L1 (as cu_ld_stream for the weights).
static __device__ __forceinline__ uint32_t i4_ld_meta(const uint32_t *p) {
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}

// 4 floats of x, coherent (ld.global.ca; never .nc: x is written by the kernel before this one, which may still
// be running under PDL). Volatile: kept in program order with the MMAs (asm volatile too), so a word's x is
// loaded where it is used instead of every word's x hoisted to the top of an iteration (registers: spills).
static __device__ __forceinline__ float4 i4_ldx(const float *p) {
    float4 v;
    asm volatile("ld.global.ca.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
    return v;
}

static __device__ __forceinline__ uint32_t i4_word(const uint4 &v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

static __device__ __forceinline__ void i4_split(float a, float b, uint32_t *hi, uint32_t *lo, int split) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    *hi = *(uint32_t *)&h;
    if (split) {
        __nv_bfloat162 l = __floats2bfloat162_rn(a - __low2float(h), b - __high2float(h));
        *lo = *(uint32_t *)&l;
    }
}

// One weight of a (possibly fused) launch: blocks [block0, block0 + tiles * S) are its (tile, slice) pairs,
// tile fastest; partial / counters its own regions of the split-k buffers (S > 1 only).
typedef struct {
    const uint32_t *W;    // repacked nibbles, 32-row tiles (int4.h)
    const uint32_t *meta; // [G, m_pad]
    float *out, *partial;
    int *counters;
    int m, m_pad, gshift, kslice, S, tiles, block0; // gshift: group g = k >> gshift (31: one group)
} i4_seg;
typedef struct {
    i4_seg seg[CU_GEMV_MAX_SEGS];
    int count, k, kwords;
} i4_job;

#define I4_STEP_WORDS (I4_WARPS * I4_TILE_CHUNK) // a tile's words of one step of all warps (8 chunks)

// One loop iteration of a lane: the I4_P chunks kc0 + p I4_BLOCK_KSTEP of its warp, whose words start at wp (the
// lane's 16 bytes of row g; rows g + 8j at + 128 j words) and whose x rows start at xb[j] (token 8j + g at k kc0 +
// 8t); mlane the meta word of row g of group 0 (+ grp m_pad, rows + 8 j). CHECK = 0 (every chunk of every warp lies
// inside the slice: all iterations but a last slice's tail) runs without load predicates or zero-selects; CHECK = 1
// is the tail: chunks, parts and words past kend skipped (warp-uniform), x past kend zero (the padding nibbles are q = 0,
// not zero weights). Both run the same operations on the same chunks: the sums do not depend on which one ran.
template <int NG, int GPC, int SPLIT, int SBF16, int CHECK>
static __device__ __forceinline__ void i4_iter(float (&acc)[2][NG][4], const uint32_t *wp, const uint32_t *mlane,
                                               int m_pad, int gshift, int kc0, int kend, const float *const (&xb)[NG],
                                               int t, bool &entered) {
    constexpr int WPP = 4 / GPC; // words (32-wide k blocks) per part
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
    // All weight and meta loads first (constant data: issued before the PDL wait on the first iteration); then
    // chunk by chunk its x and its MMAs.
    uint4 wv[I4_P][4];
    uint32_t mt[I4_P][GPC][4];
#pragma unroll
    for (int p = 0; p < I4_P; p++) {
        const int kc = kc0 + p * I4_BLOCK_KSTEP;
        const bool in = !CHECK || kc < kend;
#pragma unroll
        for (int j = 0; j < 4; j++) wv[p][j] = in ? cu_ld_stream(wp + p * I4_STEP_WORDS + 128 * j) : zero4;
#pragma unroll
        for (int q = 0; q < GPC; q++) {
            const bool qin = !CHECK || kc + q * (I4_CHUNK / GPC) < kend;
            const uint32_t *mp = mlane + (int64_t)((kc >> gshift) + q) * m_pad; // < G whenever the part is in k
#pragma unroll
            for (int j = 0; j < 4; j++) mt[p][q][j] = qin ? i4_ld_meta(mp + 8 * j) : 0u;
        }
    }
    if (!entered) {
        CU_PDL_ENTER();
        entered = true;
    }
#pragma unroll
    for (int p = 0; p < I4_P; p++) {
        const int kc = kc0 + p * I4_BLOCK_KSTEP;
        // Warp-uniform: chunks past the slice are not in the partition. This check and x's below are kept when
        // CHECK = 0 (never taken there, a few instructions a chunk): they bound how far ptxas hoists the next
        // chunk's loads and dequant above this one's MMAs, i.e. its registers (the build measured in session 11).
        if (kc >= kend) break;
#pragma unroll
        for (int q = 0; q < GPC; q++) {
            if (CHECK && kc + q * (I4_CHUNK / GPC) >= kend) break; // a part wholly past k (the last chunk's padding)
            uint32_t zp[4];
            float sc[4];
#pragma unroll
            for (int j = 0; j < 4; j++) zp[j] = i4_zero_pair(mt[p][q][j]), sc[j] = i4_scale(mt[p][q][j], SBF16);
            float part[2][NG][4];
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < NG; j++) part[r][j][0] = part[r][j][1] = part[r][j][2] = part[r][j][3] = 0.f;
#pragma unroll
            for (int ii = 0; ii < WPP; ii++) {
                const int i = q * WPP + ii, kk = kc + 32 * i; // word i: k block [kk, kk + 32)
                if (CHECK && kk >= kend) break;               // warp-uniform, as above
                // B: token g's x at kk + 8t + {2h, 2h+4} and {2h+1, 2h+5}, as bf16 pairs (hi, lo when split)
                uint32_t bh[NG][2][2], bl[NG][2][2];
#pragma unroll
                for (int j = 0; j < NG; j++) {
                    float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
                    if (kk + 8 * t < kend) {
                        const float *xp = xb[j] + p * I4_BLOCK_KSTEP + 32 * i;
                        x0 = i4_ldx(xp);
                        x1 = i4_ldx(xp + 4);
                    }
                    i4_split(x0.x, x1.x, &bh[j][0][0], &bl[j][0][0], SPLIT);
                    i4_split(x0.y, x1.y, &bh[j][0][1], &bl[j][0][1], SPLIT);
                    i4_split(x0.z, x1.z, &bh[j][1][0], &bl[j][1][0], SPLIT);
                    i4_split(x0.w, x1.w, &bh[j][1][1], &bl[j][1][1], SPLIT);
                }
#pragma unroll
                for (int r = 0; r < 2; r++) {
                    const uint32_t wg = i4_word(wv[p][2 * r], i), wh = i4_word(wv[p][2 * r + 1], i); // rows g, g+8
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t a0 = i4_pair(wg, 2 * h, zp[2 * r]), a1 = i4_pair(wh, 2 * h, zp[2 * r + 1]);
                        const uint32_t a2 = i4_pair(wg, 2 * h + 1, zp[2 * r]);
                        const uint32_t a3 = i4_pair(wh, 2 * h + 1, zp[2 * r + 1]);
#pragma unroll
                        for (int j = 0; j < NG; j++) {
                            cu_mma_bf16(part[r][j], a0, a1, a2, a3, bh[j][h][0], bh[j][h][1]);
                            if (SPLIT) cu_mma_bf16(part[r][j], a0, a1, a2, a3, bl[j][h][0], bl[j][h][1]);
                        }
                    }
                }
            }
            // C fragment: e = 0, 1 row g; e = 2, 3 row g + 8 (tokens 2t, 2t + 1)
#pragma unroll
            for (int r = 0; r < 2; r++)
#pragma unroll
                for (int j = 0; j < NG; j++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[r][j][e] += part[r][j][e] * sc[2 * r + (e >> 1)];
        }
    }
}

// Block: 8 warps, I4_ROWS weight rows of one segment (a repacked tile: rows past m are zero words with zero meta,
// read like the others, their outputs never written), NG token groups of 8, one k slice. GPC: groups per 128-wide
// chunk (1 for group >= 128 or a single group, 2 for 64, 4 for 32; the same for every segment of a launch): each
// part's MMAs go into a fresh fp32 partial sum that is multiplied by the part's scale. SBF16: the meta scales are
// bf16 (else f16), the same for every segment.
// Token rows >= n read token 0's x: a token's MMA output column depends on its own B column only, and the finish
// writes columns < n only, so no token predicate is needed.
// Two blocks a SM (up to 128 registers, no spill): with the unpredicated iterations ptxas keeps 120 registers
// live, and the three-blocks-a-SM build of session 10 (80 registers) spilled 22-600 bytes; measured, two blocks
// a SM is the faster one now (AWQ step at n = 1 7.08 vs 7.26 ms; docs/perf-notes.md, session 11).
template <int NG, int GPC, int SPLIT, int SBF16>
__global__ void __launch_bounds__(I4_THREADS, 2) k_gemv_int4(const i4_job job, const float *x, int n) {
    constexpr int NC = 8 * NG;
    __shared__ float red[I4_WARPS][I4_ROWS][NC];
    __shared__ int is_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    // The block's segment: the last one starting at or before it (block-uniform selects, no local copy).
    int si = 0;
#pragma unroll
    for (int i = 1; i < CU_GEMV_MAX_SEGS; i++)
        if (i < job.count && (int)blockIdx.x >= job.seg[i].block0) si = i;
    const i4_seg &sg = job.seg[si];
    const int tile = ((int)blockIdx.x - sg.block0) % sg.tiles, s = ((int)blockIdx.x - sg.block0) / sg.tiles;
    const int row_base = tile * I4_ROWS, m_pad = sg.m_pad, gshift = sg.gshift;
    const int kbeg = s * sg.kslice, kend = min(job.k, kbeg + sg.kslice);
    const uint32_t *mlane = sg.meta + row_base + g;
    int kc0 = kbeg + warp * I4_CHUNK;
    // The lane's words of its first chunk: tile, chunk kc0 / 128, row g, words 4t .. 4t+3.
    const uint32_t *wp =
        sg.W + ((int64_t)tile * (job.kwords / 16) + kc0 / I4_CHUNK) * I4_TILE_CHUNK + 16 * g + 4 * t;
    const float *xb[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xb[j] = x + (int64_t)(tok < n ? tok : 0) * job.k + kc0 + 8 * t;
    }
    float acc[2][NG][4];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;

    bool entered = false;
    // Whole iterations (every warp's chunks inside the slice; slices are multiples of I4_SLICE_QUANTUM, so only a
    // slice ending at k has a remainder), then the remainder checked.
    const int full = (kend - kbeg) / I4_SLICE_QUANTUM;
#pragma unroll 1 // one iteration's loads are all the registers hold
    for (int it = 0; it < full; it++) {
        i4_iter<NG, GPC, SPLIT, SBF16, 0>(acc, wp, mlane, m_pad, gshift, kc0, kend, xb, t, entered);
        kc0 += I4_SLICE_QUANTUM, wp += I4_P * I4_STEP_WORDS;
#pragma unroll
        for (int j = 0; j < NG; j++) xb[j] += I4_SLICE_QUANTUM;
    }
    if (kc0 < kend) i4_iter<NG, GPC, SPLIT, SBF16, 1>(acc, wp, mlane, m_pad, gshift, kc0, kend, xb, t, entered);
    if (!entered) CU_PDL_ENTER(); // a warp with no chunk in its slice

    // The 8 warp sums in warp order; with S > 1 the slice sum goes to `partial` and the tile's last block adds the
    // S slice sums in slice order (gemv.cu's gv_finish). C fragment: {row g, tokens 2t, 2t+1}, {row g+8, same}.
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][16 * r + g + 8 * (e >> 1)][8 * j + 2 * t + (e & 1)] = acc[r][j][e];
    __syncthreads();
    float *const out = sg.out, *const partial = sg.partial;
    const int S = sg.S, tiles = sg.tiles, m = sg.m;
    cu_gemv_tile_finish<NC>(red, is_last, out, partial, sg.counters, S, tiles, tile, s, row_base, m, n);
}

// Groups per 128-wide chunk, or 0 when the GEMV cannot take this grouping.
static int i4_gpc(const fd_weight *W) {
    if (W->n_groups == 1 || W->group_size % I4_CHUNK == 0) return 1;
    if (W->group_size == 64) return 2;
    if (W->group_size == 32) return 4;
    return 0;
}

// The kernel's group of input k is k >> this: 31 for a single group, log2 of a power-of-two group size, else -1
// (a group of 384, say: the dequant route takes the weight).
static int i4_gshift(const fd_weight *W) {
    if (W->n_groups == 1) return 31;
    const int gs = W->group_size;
    if (gs < 32 || (gs & (gs - 1))) return -1;
    int sh = 0;
    while ((1 << sh) < gs) sh++;
    return sh;
}

int cu_gemv_int4_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || !fd_wfmt_is_int4(W->fmt) || !W->dev || !W->dev_scale) return 0;
    if (W->g_idx || !i4_gpc(W) || i4_gshift(W) < 0 || W->cols % 8) return 0; // g_idx kept at upload: not k / gs
    return (uintptr_t)x % 16 == 0;
}

int cu_gemv_int4_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n) {
    if (count < 1 || count > CU_GEMV_MAX_SEGS) return 0;
    for (int i = 0; i < count; i++)
        if (!cu_gemv_int4_supported(x, Ws[i], n) || Ws[i]->cols != Ws[0]->cols || i4_gpc(Ws[i]) != i4_gpc(Ws[0]) ||
            Ws[i]->dev_scale_dtype != Ws[0]->dev_scale_dtype)
            return 0;
    return 1;
}

template <int NG, int GPC, int SBF16>
static void i4_launch(fd_backend *be, int blocks, int split, const i4_job &job, const float *x, int n) {
    if (split)
        cu_launch_early(be, (k_gemv_int4<NG, GPC, 1, SBF16>), blocks, I4_THREADS, 0, job, x, n);
    else
        cu_launch_early(be, (k_gemv_int4<NG, GPC, 0, SBF16>), blocks, I4_THREADS, 0, job, x, n);
}

template <int NG, int SBF16>
static void i4_launch_ng(fd_backend *be, int blocks, int split, int gpc, const i4_job &job, const float *x, int n) {
    if (gpc == 1)
        i4_launch<NG, 1, SBF16>(be, blocks, split, job, x, n);
    else if (gpc == 2)
        i4_launch<NG, 2, SBF16>(be, blocks, split, job, x, n);
    else
        i4_launch<NG, 4, SBF16>(be, blocks, split, job, x, n);
}

void cu_gemv_int4_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x,
                        int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_int4_multi_supported(x, Ws, count, n), "int4 gemv: unsupported call n=%d count=%d %s", n, count,
             Ws[0]->name ? Ws[0]->name : "?");
    i4_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    job.k = (int)Ws[0]->cols;
    job.kwords = (int)i4_kwords(Ws[0]->cols);
    // Blocks and split-k regions of each segment, in segment order; each segment's plan is its own (m of that
    // weight), so a fused result is bitwise the separate call's. Partial sums sized for 16 tokens whatever n is
    // (as gemv.cu): a decode step leaves the buffer big enough for a verify block, which a CUDA graph can then
    // record without growing scratch.
    int blocks = 0, split_tiles = 0;
    size_t partial_elems = 0, part_off[CU_GEMV_MAX_SEGS];
    int ctr_off[CU_GEMV_MAX_SEGS];
    for (int i = 0; i < count; i++) {
        i4_seg *sg = &job.seg[i];
        sg->W = (const uint32_t *)Ws[i]->dev;
        sg->meta = (const uint32_t *)Ws[i]->dev_scale;
        sg->out = outs[i];
        sg->m = (int)Ws[i]->rows;
        sg->m_pad = (int)i4_rows_pad(Ws[i]->rows);
        sg->gshift = i4_gshift(Ws[i]);
        // 2 x blocks_per_sm 32-row blocks a SM: gemv.cu's target, counted the same way
        sg->S = cu_gemv_plan(sg->m, job.k, I4_ROWS, I4_SLICE_QUANTUM, 2 * c->gemv_blocks_per_sm * c->num_sms,
                             &sg->kslice);
        sg->tiles = (sg->m + I4_ROWS - 1) / I4_ROWS;
        sg->block0 = blocks;
        blocks += sg->tiles * sg->S;
        part_off[i] = partial_elems;
        ctr_off[i] = split_tiles;
        if (sg->S > 1) {
            partial_elems += (size_t)sg->S * sg->tiles * I4_PARTIAL_TILE;
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
    const int split = cu_gemm_split(c->gemm_act, job.k), gpc = i4_gpc(Ws[0]);
    c->gemv_launches++;
    const int sbf16 = Ws[0]->dev_scale_dtype == FD_BF16;
    if (n <= 8 && sbf16)
        i4_launch_ng<1, 1>(be, blocks, split, gpc, job, x, n);
    else if (n <= 8)
        i4_launch_ng<1, 0>(be, blocks, split, gpc, job, x, n);
    else if (sbf16)
        i4_launch_ng<2, 1>(be, blocks, split, gpc, job, x, n);
    else
        i4_launch_ng<2, 0>(be, blocks, split, gpc, job, x, n);
}

void cu_gemv_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    float *outs[1] = {out};
    const fd_weight *Ws[1] = {W};
    cu_gemv_int4_multi(be, outs, Ws, 1, x, n);
}
