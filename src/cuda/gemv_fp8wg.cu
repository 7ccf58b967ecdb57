// Route gemm_fp8 = wgmma (sm_90a): the W8A8 GEMV on FP8 block-scaled weights on Hopper warpgroup MMA,
// out[n, m] f32 = W8A8(x[n, k], W[m, k]) for n <= 16 rows. Semantics (the CPU reference, src/cpu/cpu_w8a8.c, is
// the same bitwise up to the sums): x quantized per token and 128-group of k (amax clamped at 1e-10,
// r = 448 / amax, s = amax / 448, x_q = e4m3(x * r), RNE, saturating: HF fine-grained FP8 with
// `activation_scheme: dynamic`), each 128-k block's e4m3 x e4m3 dot in a fresh fp32 accumulator, times
// w_scale * s and added in fp32 (DeepSeek-V3's promotion every 128 k). Design, counts and the prediction:
// docs/perf-notes.md, session 14, "gemm_fp8=wgmma"; measured and reworked in sessions 15-16.
//
// Block: 2 warpgroups, 128 weight rows of a tile at a time (warpgroup w: rows 64w..64w+63 as one m64 A tile), a
// run of (tile, 128-k block) units (below).
// - A = the weights, straight from global memory into the RS A fragment, no conversion: the PTX ISA's 8-bit A
//   fragment (mma.m16n8k32's, per warp w rows 16w..16w+15; lane g = lane/4, c = lane%4; register 0 = row g, k
//   4c..4c+3; 1 = row g+8, same k; 2 = row g, k 16+4c..; 3 = row g+8, k 16+4c..) is fed with lane c's bytes
//   16c..16c+15 and 64+16c..64+16c+15 of rows g and g+8 of each 128-k block (words 0..7): word w is register
//   (w odd ? k 16+4c.. : k 4c..) of k32 step w / 2. That permutes k inside the block; the quantizer stores x_q
//   into B with the same permutation, so the dot is the same (checked on the host: tools/fp8wg_layout.cpp).
// - B = x_q, 16 token columns for every n (the unused ones zero) in shared memory, K-major, no swizzle: per 128-k
//   block 2 KB, core matrix (k16 chunk q, token half h) at q * 256 + h * 128, 8 tokens x 16 bytes each; the
//   descriptor of step j starts at block + 512 j (LBO 256: next k16 chunk, SBO 128: next 8 tokens).
// - Batch invariance: N = 16 whatever n, and an output column depends only on its own B column and scale, so row
//   j of an n-row call is bitwise the 1-row call (the cut below never depends on n).
// - Stream-K split: the launch's weights are stacked into one column of 128-row tiles (fused groups: every
//   segment's tiles, one k); its units, (tile, 128-k block) in tile-major order, are cut into equal runs of U,
//   one a block, about one block per resident slot (wg8_plan), so the weights stream without waves. A block's run
//   covers pieces of one or more tiles; a tile wholly in one run is written directly, else each piece writes its
//   128 x n partial and the tile's last piece to arrive adds the pieces in run order (gemv_tile.cuh's pattern).
//   The cut depends on (stacked tiles, k, SM count) only, never n.
#include <stdint.h>
#include <string.h>

#include "cuda/cuda.h"
#include "cuda/cuda_common.h"
#include "cuda/wgmma_ptx.cuh"

#define WG8_THREADS   256
#define WG8_ROWS      128                // weight rows a block: 2 warpgroups x m64
#define WG8_N         16                 // B columns (tokens) for every n
#define WG8_KBLK      128                // k of one scale block = one promotion
#define WG8_BTILE     (WG8_N * WG8_KBLK) // B bytes a 128-k block (2 KB)
#define WG8_MIN_RUN   4                  // units a block at least: a tile's pieces stay few on small launches
// dynamic shared memory of a block holding `groups` B tiles (128-k blocks of x_q)
#define WG8_SMEM(groups) ((size_t)(groups) * (WG8_BTILE + WG8_N * sizeof(float)) + WG8_PARTIAL * sizeof(float) + 16)
#define WG8_PARTIAL      (WG8_ROWS * WG8_N) // partial sums a (tile, slice)
#define WG8_MAX_SEGS     CU_GEMV_MAX_SEGS
#ifndef WG8_BLOCKS_PER_SM
#define WG8_BLOCKS_PER_SM 3 // resident blocks a SM (the launch bound: 80 registers a thread); the cut plans on it
#endif
// B tiles a block holds at most: WG8_BLOCKS_PER_SM blocks of WG8_SMEM(slots) in a SM's 228 KB (1 KB of it
// reserved a block), so the plan's slot count stays resident (3 a SM: 32 tiles, 75 KB)
#define WG8_MAX_SLOTS \
    ((int)((228 * 1024 / WG8_BLOCKS_PER_SM - 1024 - WG8_PARTIAL * sizeof(float) - 16) / (WG8_BTILE + WG8_N * sizeof(float))))
#ifndef WG8_RING
#define WG8_RING 2 // 128-k weight blocks in flight a thread (64 bytes each; x 3 blocks a SM)
#endif

typedef struct {
    const uint8_t *W;
    const float *scale; // [ceil(m / br), scols] f32
    float *out;
    int m, br, scols, tile0; // tile0: the segment's first tile in the launch's stack
} wg8_seg;
typedef struct {
    wg8_seg seg[WG8_MAX_SEGS];
    float *partial; // [blocks + tiles][16][128]: piece (block b, tile t) at b + t (unique: pieces ordered by start)
    int *counters;  // [tiles] pieces arrived, left zero
    int count, tiles, bk, units, run; // bk = k / 128; units = tiles x bk; run = U
} wg8_job;

// A K-major, no-swizzle matrix descriptor (start, LBO, SBO in bytes; base offset 0, swizzle mode 0).
static __device__ __forceinline__ uint64_t wg8_desc(uint32_t start, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((start >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32;
}

// One 128-k block of a lane's two rows: bytes 16c.. and 64 + 16c.. of row g (lo) and of row g + 8 (hi), so each
// 16-byte load of a warp covers whole 32-byte sectors of its 8 rows. Rows past m: zeros. Streaming loads
// (mma.cuh's cu_ld_stream: not kept in L1, L2 asked for the 256-byte window), safe before the PDL wait: the
// weights are constant during a forward.
struct wg8_a {
    uint4 lo0, lo1, hi0, hi1;
};
#ifdef WG8_EMU
#define wg8_ld(p) (*(const uint4 *)(p))
#else
#include "cuda/mma.cuh"
#define wg8_ld(p) cu_ld_stream(p)
#endif
static __device__ __forceinline__ void wg8_load(wg8_a &a, const uint8_t *rlo, const uint8_t *rhi, bool oklo, bool okhi,
                                                int kb) {
    const uint4 z = make_uint4(0, 0, 0, 0);
    a.lo0 = oklo ? wg8_ld(rlo + kb) : z;
    a.lo1 = oklo ? wg8_ld(rlo + kb + 64) : z;
    a.hi0 = okhi ? wg8_ld(rhi + kb) : z;
    a.hi1 = okhi ? wg8_ld(rhi + kb + 64) : z;
}
static __device__ __forceinline__ uint32_t wg8_word(const uint4 &v0, const uint4 &v1, int w) {
    const uint4 &v = w < 4 ? v0 : v1;
    const int i = w & 3;
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The block's x_q and scales, one B tile a slot: slot s holds the 128-k group `g0 + s` mod bk (a run no longer
// than a tile: its units' groups in run order, all distinct) or group s (a longer run: every group, once).
// 16 threads a live (token t < n, slot), 8 consecutive k a thread (two float4 loads, coherent: x may have been
// written by the kernel before, under PDL).
#ifndef WG8_QBATCH
#define WG8_QBATCH 1
#endif
static __device__ __forceinline__ void wg8_quantize_item(uint8_t *bs, float *xs, const float4 f0, const float4 f1,
                                                         int t, int g, int groups, int u, bool ok) {
    const float v[8] = {f0.x, f0.y, f0.z, f0.w, f1.x, f1.y, f1.z, f1.w};
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int o = 8; o >= 1; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    amax = fmaxf(amax, 1e-10f);
    const float r = 448.f / amax; // IEEE division (no fast math): the CPU reference's r
    if (!ok) return; // a lane past the live items: the shuffles above still had every lane of the warp
    if (u == 0) xs[t * groups + g] = amax / 448.f;
    // physical k 8u..8u+7 of the block = words 2(u % 2), +1 of lane c = (u % 8) / 2's load u / 8 (wg8_load):
    // step j = 2 (u / 8) + u % 2, logical k 4c..4c+3 (chunk 2j) and 16+4c.. (chunk 2j+1) of the B tile
    const int c = (u & 7) >> 1, j = ((u >> 3) << 1) | (u & 1);
    uint8_t *tile = bs + g * WG8_BTILE + (t >> 3) * 128 + (t & 7) * 16 + 4 * c;
    *(uint32_t *)(tile + (2 * j) * 256) = wg_e4m3x4(v[0] * r, v[1] * r, v[2] * r, v[3] * r);
    *(uint32_t *)(tile + (2 * j + 1) * 256) = wg_e4m3x4(v[4] * r, v[5] * r, v[6] * r, v[7] * r);
}
static __device__ void wg8_quantize(uint8_t *bs, float *xs, const float *x, int n, int k, int groups, int g0) {
    const int bk = k / WG8_KBLK, u = threadIdx.x & 15, live = n * groups, step = WG8_THREADS / 16;
    // the dead columns: (group, token t >= n, k16 chunk) 16 bytes each; their scales
    const int dead = WG8_N - n;
    for (int e = threadIdx.x; e < groups * dead * 8; e += WG8_THREADS) {
        const int q = e & 7, t = n + (e >> 3) % dead, g = (e >> 3) / dead;
        *(uint4 *)(bs + g * WG8_BTILE + q * 256 + (t >> 3) * 128 + (t & 7) * 16) = make_uint4(0, 0, 0, 0);
    }
    for (int e = threadIdx.x; e < groups * dead; e += WG8_THREADS) xs[(n + e / groups) * groups + e % groups] = 0.f;
    // the live items, a half-warp each (the shuffles stay inside it); both halves of a warp run every batch
    // (items past `live` load nothing and store nothing), so the full-mask shuffles see the whole warp
    for (int wbase = (threadIdx.x >> 5) * 2; wbase < live; wbase += WG8_QBATCH * step) {
        const int base = wbase + ((threadIdx.x >> 4) & 1); // this half-warp's first item
        float4 f[WG8_QBATCH][2];
#pragma unroll
        for (int i = 0; i < WG8_QBATCH; i++) {
            const int item = base + i * step, t = item / groups, g = item % groups;
            if (item < live) {
                const float4 *p = (const float4 *)(x + (int64_t)t * k + ((g0 + g) % bk) * WG8_KBLK + 8 * u);
                f[i][0] = p[0], f[i][1] = p[1];
            } else {
                f[i][0] = f[i][1] = make_float4(0.f, 0.f, 0.f, 0.f);
            }
        }
#pragma unroll
        for (int i = 0; i < WG8_QBATCH; i++) {
            const int item = base + i * step;
            wg8_quantize_item(bs, xs, f[i][0], f[i][1], item / groups, item % groups, groups, u, item < live);
        }
    }
}

// The 4 wgmmas of one 128-k block into a fresh accumulator, then the promotion: tot += acc * (w_scale * s[col]).
// The accumulator's element i is row g + 8 ((i / 2) % 2), column 8 (i / 4) + 2c + i % 2 of the warp's 16 rows.
static __device__ __forceinline__ void wg8_block(float (&tot)[8], const wg8_a &a, uint32_t bs_addr, const float *xs,
                                                 int groups, int gb, float ws, int c) {
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.f;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint64_t db = wg8_desc(bs_addr + gb * WG8_BTILE + 512 * j, 256, 128);
        wgmma_rs_m64n16k32_e4m3(acc, wg8_word(a.lo0, a.lo1, 2 * j), wg8_word(a.hi0, a.hi1, 2 * j),
                                wg8_word(a.lo0, a.lo1, 2 * j + 1), wg8_word(a.hi0, a.hi1, 2 * j + 1), db, j);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wg_fence_regs(acc);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int col = 8 * (i >> 2) + 2 * c + (i & 1);
        tot[i] = fmaf(acc[i], ws * xs[col * groups + gb], tot[i]);
    }
}

// Where unit u's weights are: its segment, the lane's two rows (zeros past m) and the warpgroup's scale row.
struct wg8_src {
    const uint8_t *rlo, *rhi;
    const float *srow;
    bool oklo, okhi, live;
};
static __device__ __forceinline__ int wg8_seg_of(const wg8_job &job, int tile) {
    int si = 0;
#pragma unroll
    for (int i = 1; i < WG8_MAX_SEGS; i++)
        if (i < job.count && tile >= job.seg[i].tile0) si = i;
    return si;
}
static __device__ __forceinline__ wg8_src wg8_src_of(const wg8_job &job, int tile, int k) {
    const wg8_seg &sg = job.seg[wg8_seg_of(job, tile)];
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31;
    const int r0 = (tile - sg.tile0) * WG8_ROWS + 64 * wg, row_lo = r0 + 16 * warp + (lane >> 2), row_hi = row_lo + 8;
    wg8_src w;
    w.oklo = row_lo < sg.m, w.okhi = row_hi < sg.m, w.live = r0 < sg.m; // live: the warpgroup has a row
    w.rlo = sg.W + (int64_t)(w.oklo ? row_lo : 0) * k + 16 * (lane & 3);
    w.rhi = sg.W + (int64_t)(w.okhi ? row_hi : 0) * k + 16 * (lane & 3);
    // one scale row for the warpgroup's 64 rows (block_rows % 64 == 0); a warpgroup wholly past m reads none
    w.srow = sg.scale + (int64_t)(w.live ? r0 / sg.br : 0) * sg.scols;
    return w;
}
// Unit u's weights into a ring slot.
static __device__ __forceinline__ void wg8_fetch(const wg8_job &job, int u, int k, wg8_a &a) {
    const int tile = u / job.bk, kg = u - tile * job.bk;
    const wg8_src w = wg8_src_of(job, tile, k);
    wg8_load(a, w.rlo, w.rhi, w.oklo, w.okhi, kg * WG8_KBLK);
}
// Unit u's weight scale (an L1 hit after the tile's first unit).
static __device__ __forceinline__ float wg8_wscale(const wg8_job &job, int tile, int kg, int k) {
    const wg8_src w = wg8_src_of(job, tile, k);
    return w.live ? w.srow[kg] : 0.f;
}

// The end of a piece (this block's units of `tile`): its 128 x 16 sums `tot` go out, directly when the tile is
// wholly this block's, else as the piece's partial, the tile's last piece adding all of them in run order.
static __device__ void wg8_flush(const wg8_job &job, const float (&tot)[8], float *red, int &is_last, int tile, int n) {
    const int wg = threadIdx.x >> 7, warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2,
              c = lane & 3;
    const wg8_seg &sg = job.seg[wg8_seg_of(job, tile)];
    const int row_base = (tile - sg.tile0) * WG8_ROWS;
    // the block's 128 x 16 sums (row-major by row: element (row, col) at row * 16 + col)
    const int rl = 64 * wg + 16 * warp + g;
#pragma unroll
    for (int i = 0; i < 8; i++) red[(rl + 8 * ((i >> 1) & 1)) * WG8_N + 8 * (i >> 2) + 2 * c + (i & 1)] = tot[i];
    __syncthreads();
    const int b_first = tile * job.bk / job.run, b_last = ((tile + 1) * job.bk - 1) / job.run;
    if (b_first == b_last) {
        for (int e = threadIdx.x; e < WG8_PARTIAL; e += WG8_THREADS) {
            const int row = e % WG8_ROWS, col = e / WG8_ROWS; // consecutive threads: consecutive rows
            if (row_base + row < sg.m && col < n) sg.out[(int64_t)col * sg.m + row_base + row] = red[row * WG8_N + col];
        }
        __syncthreads(); // red is the next piece's
        return;
    }
    float *mine = job.partial + (int64_t)(blockIdx.x + tile) * WG8_PARTIAL;
    // only the n live columns: the last piece reads no other (the sums are the same for every n)
    for (int e = threadIdx.x; e < WG8_ROWS * n; e += WG8_THREADS) mine[e] = red[(e % WG8_ROWS) * WG8_N + e / WG8_ROWS];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&job.counters[tile], 1) == b_last - b_first;
    __syncthreads();
    if (is_last) {
        __threadfence();
        for (int e = threadIdx.x; e < WG8_ROWS * n; e += WG8_THREADS) {
            const int row = e % WG8_ROWS, col = e / WG8_ROWS;
            if (row_base + row >= sg.m) continue;
            const float *pt = job.partial + (int64_t)(b_first + tile) * WG8_PARTIAL + e;
            float v = __ldcg(pt);
            for (int b = b_first + 1; b <= b_last; b++) v += __ldcg(pt + (int64_t)(b - b_first) * WG8_PARTIAL);
            sg.out[(int64_t)col * sg.m + row_base + row] = v;
        }
        if (threadIdx.x == 0) job.counters[tile] = 0; // ready for the next call (stream order)
    }
    __syncthreads(); // red and is_last are the next piece's
}

__global__ void __launch_bounds__(WG8_THREADS, WG8_BLOCKS_PER_SM) k_gemv_fp8wg(const wg8_job job, const float *x, int n, int k) {
    // dynamic shared memory only (the name tools/gdn_emu's runtime gives it): B tiles [slots][2 KB], the x
    // scales [16][slots], the piece's sums [128 x 16], the last-piece flag
    extern __shared__ float4 sm4[];
    const int bk = job.bk, u0 = blockIdx.x * job.run, u1 = min(u0 + job.run, job.units), len = u1 - u0;
    // B slots: a run no longer than a tile has distinct groups, slot = position in the run; a longer one holds
    // every group once, slot = group
    const bool by_pos = len <= bk;
    const int slots = by_pos ? len : bk, g0 = by_pos ? u0 % bk : 0;
    const int c = threadIdx.x & 3;

    // a ring of WG8_RING units in registers, all in flight while the previous kernel finishes (weights are
    // constant) and the x quantization runs; slot r is refilled with unit u + WG8_RING as soon as unit u's
    // wgmmas are done with it (the unrolled ring keeps the slot indices static)
    wg8_a a[WG8_RING];
#pragma unroll
    for (int r = 0; r < WG8_RING; r++)
        if (r < len) wg8_fetch(job, u0 + r, k, a[r]);
    CU_PDL_ENTER();
    uint8_t *bs = (uint8_t *)sm4;
    float *xs = (float *)(bs + (size_t)slots * WG8_BTILE), *red = xs + WG8_N * slots;
    int &is_last = *(int *)(red + WG8_PARTIAL);
    wg8_quantize(bs, xs, x, n, k, slots, g0);
    wg_fence_proxy(); // the B tiles were written through the generic proxy; wgmma reads them through the async one
    __syncthreads();

    float tot[8];
#pragma unroll
    for (int i = 0; i < 8; i++) tot[i] = 0.f;
    const uint32_t bs_addr = wg_smem(bs);
    for (int ub = u0; ub < u1; ub += WG8_RING) {
#pragma unroll
        for (int r = 0; r < WG8_RING; r++) {
            const int u = ub + r;
            if (u >= u1) break;
            const int tile = u / bk, kg = u - tile * bk;
            const float ws = wg8_wscale(job, tile, kg, k);
            wg8_block(tot, a[r], bs_addr, xs, slots, by_pos ? u - u0 : kg, ws, c);
            if (u + WG8_RING < u1) wg8_fetch(job, u + WG8_RING, k, a[r]);
            if (kg == bk - 1 || u == u1 - 1) { // the piece of `tile` ends here
                wg8_flush(job, tot, red, is_last, tile, n);
#pragma unroll
                for (int i = 0; i < 8; i++) tot[i] = 0.f;
            }
        }
    }
}

// The cut of a launch's units (tiles x k / 128) into runs: one run a resident slot (blocks_per_sm x SMs), so
// the weights stream in one wave with no tail (on the H200 about as fast as session 15's slices in whole waves
// for single weights, and it keeps a fused group's stacked tiles in one wave); at least WG8_MIN_RUN units, and at most WG8_MAX_SLOTS when a tile is longer (a run's B tiles must fit
// in shared memory). A function of (tiles, k, SM count) only. Returns the block count; *smem its shared memory.
static int wg8_plan(wg8_job *job, int k, int num_sms, int blocks_per_sm, size_t *smem) {
    job->bk = k / WG8_KBLK;
    job->units = job->tiles * job->bk;
    const int slots = num_sms * blocks_per_sm;
    int run = (job->units + slots - 1) / slots;
    if (run < WG8_MIN_RUN) run = WG8_MIN_RUN;
    if (run > WG8_MAX_SLOTS && job->bk > WG8_MAX_SLOTS) run = WG8_MAX_SLOTS;
    if (run > job->units) run = job->units;
    job->run = run;
    const int blocks = (job->units + run - 1) / run;
    // slots a block: its run's length when no longer than a tile, else one per group (bk <= WG8_MAX_SLOTS then)
    *smem = WG8_SMEM(run <= job->bk ? run : job->bk);
    return blocks;
}
// Stacks the segments' tiles (each segment's m set): tile0 of each, the launch's tile count.
static void wg8_stack(wg8_job *job) {
    job->tiles = 0;
    for (int i = 0; i < job->count; i++) {
        job->seg[i].tile0 = job->tiles;
        job->tiles += (job->seg[i].m + WG8_ROWS - 1) / WG8_ROWS;
    }
}

#ifndef WG8_EMU // tools/fp8wg_emu.cpp runs the kernel and the plan above on the host, and builds the job itself
// The split-k arrival counters are the GEMVs' pool (gemv_tile.cuh's cu_gemv_counters), one per 128-row tile.
#include "cuda/gemv_tile.cuh"

int cu_gemv_fp8wg_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > WG8_N || W->fmt != FD_WFMT_FP8_BLOCK || !W->dev || !W->dev_scale) return 0;
    // whole 128-k blocks (one scale column each: block_cols 128), a warpgroup's 64 rows in one scale row, 16-byte
    // loads of W rows and x rows
    if (W->cols <= 0 || W->cols % WG8_KBLK || W->rows <= 0 || W->block_cols != WG8_KBLK || W->block_rows % 64) return 0;
    return ((uintptr_t)W->dev | (uintptr_t)x) % 16 == 0;
}

int cu_gemv_fp8wg_multi_supported(const void *x, const fd_weight *const Ws[], int count, int n) {
    if (count < 1 || count > WG8_MAX_SEGS) return 0;
    for (int i = 0; i < count; i++)
        if (!cu_gemv_fp8wg_supported(x, Ws[i], n) || Ws[i]->cols != Ws[0]->cols) return 0;
    return 1;
}

void cu_gemv_fp8wg_multi(fd_backend *be, float *const outs[], const fd_weight *const Ws[], int count, const float *x,
                         int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_fp8wg_multi_supported(x, Ws, count, n), "gemv_fp8wg: unsupported call n=%d count=%d %s", n, count,
             Ws[0]->name ? Ws[0]->name : "?");
    const int k = (int)Ws[0]->cols;
    wg8_job job;
    memset(&job, 0, sizeof job);
    job.count = count;
    for (int i = 0; i < count; i++) {
        wg8_seg *sg = &job.seg[i];
        sg->W = (const uint8_t *)Ws[i]->dev;
        sg->scale = (const float *)Ws[i]->dev_scale;
        sg->out = outs[i];
        sg->m = (int)Ws[i]->rows;
        sg->br = Ws[i]->block_rows, sg->scols = (int)Ws[i]->scale_cols;
    }
    wg8_stack(&job);
    size_t smem;
    const int blocks = wg8_plan(&job, k, c->num_sms, WG8_BLOCKS_PER_SM, &smem);
    if (blocks > 1) { // a tile may be cut: the pieces' partials and the tiles' arrival counters
        job.partial = (float *)cu_scratch(be, CU_SCR_A, (size_t)(blocks + job.tiles) * WG8_PARTIAL * sizeof(float));
        job.counters = cu_gemv_counters(c, job.tiles);
    }
    if (!c->fp8wg_smem_set) { // over 48 KB of dynamic shared memory: opted in once per backend (its device)
        FD_CUDA_CHECK(cudaFuncSetAttribute(k_gemv_fp8wg, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)WG8_SMEM(WG8_MAX_SLOTS)));
        c->fp8wg_smem_set = 1;
    }
    c->gemv_launches++;
    cu_launch_early(be, k_gemv_fp8wg, blocks, WG8_THREADS, smem, job, x, n, k);
}

void cu_gemv_fp8wg(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    float *outs[1] = {out};
    const fd_weight *Ws[1] = {W};
    cu_gemv_fp8wg_multi(be, outs, Ws, 1, x, n);
}
#endif
