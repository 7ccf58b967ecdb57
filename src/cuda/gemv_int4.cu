// GPTQ / AWQ int4 weights on the GPU (route gemm_int4): out[n, m] f32 = x[n, k] f32 . W[m, k]^T with W the
// published 4-bit weights, element (r, c) = s[g, r] * (q - z[g, r]) (base/weight.h has both layouts).
//
// Upload (cu_upload_int4) keeps 4 bits per weight and one 32-bit word per (group, row):
//   - nibbles, repacked on the device into rows of the weight ([m, kpad / 8] words, kpad = k rounded up to 128,
//     the padding zero). Inside a 128-wide k chunk c of a row, word 16c + 4t + i holds k = 128c + 32i + 8t + p in
//     nibble p: lane t of a quad reads words 4t .. 4t+3 with one 16-byte load, and word i of the four lanes covers
//     one 32-wide k block, so one MMA never mixes groups of 32, 64 or 128 (GPTQ's qweight is packed along k
//     already, so its repack is a transpose of words; AWQ's is packed along n in its interleaved order, gathered).
//   - meta [G, m] uint32: bits 0..15 the scale as stored (f16, or bf16 with bit 31 set: the published dtypes; f32
//     scales are converted when exact in one of them, else refused), bits 16..30 the bf16 bits of 128 + z with z
//     the effective zero (GPTQ v1: stored + 1, so 1..16; v2 and AWQ: 0..15).
//   - a g_idx equal to k / group_size is dropped (the same groups; GPTQ always writes one); any other (desc_act
//     act-order) is kept on the device behind the meta words and only the dequant route runs the weight.
//
// gemv (default), n <= 16 rows (decode, DFlash verify, drafter blocks): weight-read bound at 0.5 byte per weight
// (plus 4 bytes per group and row: 6 % at group 128). Same schedule as the bf16 GEMV (gemv.cu): mma.sync
// m16n8k16 bf16 with the W rows as A (32 rows per block, two tiles) and the token rows as B (8 per group,
// NG = 1 or 2 groups); 8 warps, warp w takes the 128-wide chunks w, w + 8, ... of its block's k slice, I4_P
// chunks loaded before their MMAs run; k is cut into slices by (m, k, SM count) only (i4_plan) and the slice sums
// added in slice order by the tile's last block. Every output element is the same sequence of operations
// whatever n is: batch invariant, bitwise.
// Dequant in registers, exact: (word >> 4p) & 0x000f000f | 0x43004300 is the bf16 pair (128 + q_p, 128 + q_p+4),
// and one bf16x2 subtraction of (128 + z, 128 + z) leaves q - z, an integer in [-16, 15], exact in bf16. So the
// MMA multiplies exact integer weights by x rounded to bf16 (or split in two bf16 terms) per route gemm_act,
// exactly as for bf16 weights, and each group's fp32 partial sum is multiplied by its fp32 scale (the FP8 GEMV's
// form). The pair (p, p + 4) of a word is one A register (logical k 2t, 2t + 1); B takes x at the same physical
// k: MMA (i, h) of a chunk uses nibbles {2h, 2h+4} and {2h+1, 2h+5} of word i.
// dequant (n > 16, a g_idx that is not k / group_size, or selected): the weight expanded in scratch slot W, to
// bf16 (rounded: the bf16-weight contract) under a bf16 gemm_act, to f32 (exact) where it keeps activations ~fp32,
// and the dense path (cuBLASLt for prefill).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.h"

#define I4_WARPS         8
#define I4_THREADS       (I4_WARPS * 32)
#define I4_CHUNK         128                    // k per warp step (16 bytes per lane and row)
#define I4_BLOCK_KSTEP   (I4_CHUNK * I4_WARPS)  // 1024: k of one step of all warps
#define I4_P             2                      // steps whose weights a lane loads before their MMAs (128 bytes)
#define I4_SLICE_QUANTUM (I4_P * I4_BLOCK_KSTEP) // k slices are multiples of this: equal work for every warp
#define I4_ROWS          32                     // weight rows per block: two 16-row MMA tiles
#define I4_PARTIAL_TILE  (I4_ROWS * 16)         // partial sums per (tile, slice): 32 rows x 16 tokens, any n
#define I4_META_BF16     0x80000000u            // meta bit 31: the scale half is bf16 (else f16)

static inline int64_t i4_kwords(int64_t k) {
    return (k + I4_CHUNK - 1) / I4_CHUNK * I4_CHUNK / 8;
}

// ---- upload ----

// Nibble position of column n % 8 inside an AWQ word: the inverse of AutoAWQ's pack order {0, 2, 4, 6, 1, 3, 5, 7}.
__constant__ int c_awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// dst [N, kwords] (the GEMV layout above) from the published qweight: GPTQ [K/8, N] (8 k per word, plain order),
// AWQ [K, N/8] (8 columns per word, interleaved).
__global__ void k_int4_repack(uint32_t *dst, const uint32_t *src, int64_t N, int K, int64_t kwords, int awq) {
    CU_PDL_ENTER();
    const int64_t total = N * kwords;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t n = idx / kwords, d = idx % kwords;
        const int c = (int)(d >> 4), t = (int)(d >> 2) & 3, i = (int)d & 3;
        const int k0 = 128 * c + 32 * i + 8 * t;
        uint32_t word = 0;
        if (k0 < K) {
            if (!awq) {
                word = src[(int64_t)(k0 / 8) * N + n];
            } else {
                const int pos = c_awq_nibble[n & 7];
                for (int p = 0; p < 8; p++) word |= ((src[(int64_t)(k0 + p) * (N / 8) + n / 8] >> (4 * pos)) & 15u) << (4 * p);
            }
        }
        dst[idx] = word;
    }
}

static int nib(uint32_t word, int pos) {
    return (int)(word >> (4 * pos)) & 15;
}

// The meta word's scale half: the stored 16 bits, or an f32 scale that is exact in f16 or bf16. -1: neither.
static int64_t i4_scale_bits(const fd_weight *w, int64_t i) {
    if (w->scale_dtype == FD_F16) return ((const uint16_t *)w->scale)[i];
    if (w->scale_dtype == FD_BF16) return ((const uint16_t *)w->scale)[i] | (int64_t)I4_META_BF16;
    const float v = ((const float *)w->scale)[i];
    const uint16_t h = fd_f32_to_f16(v), b = fd_f32_to_bf16(v);
    if (fd_f16_to_f32(h) == v) return h;
    if (fd_bf16_to_f32(b) == v) return b | (int64_t)I4_META_BF16;
    return -1;
}

// Ends the run as a user error (upload_weight has no error return; the input is unsupported, nothing is broken).
static void i4_refuse(const fd_weight *w, const char *why) {
    fprintf(stderr, "flashdelta: error: tensor '%s' (%s): %s on the cuda backend (use --backend cpu)\n",
            w->name ? w->name : "?", fd_wfmt_name(w->fmt), why);
    exit(2);
}

void cu_upload_int4(fd_backend *be, fd_weight *w) {
    cu_impl *c = cu_of(be);
    const int64_t N = w->rows, K = w->cols, G = w->n_groups, kwords = i4_kwords(K);
    FD_CHECK(N % 8 == 0 && K % 8 == 0 && G >= 1 && w->group_size >= 1 && w->qzeros && w->scale,
             "int4 weight %s: bad descriptor", w->name ? w->name : "?");
    if (w->scale_dtype != FD_F16 && w->scale_dtype != FD_BF16 && w->scale_dtype != FD_F32)
        i4_refuse(w, "scales must be F16, BF16 or F32");
    if (K > INT32_MAX / 2) i4_refuse(w, "more than 2^30 inputs");
    // g_idx k / group_size is the plain grouping: drop it so the GEMV takes the weight (the CPU reads the same).
    int trivial = 1;
    for (int64_t k = 0; w->g_idx && k < K && trivial; k++) trivial = w->g_idx[k] == k / w->group_size;
    if (trivial) w->g_idx = NULL;

    // meta [G, N], then g_idx [K] when kept
    const size_t meta_words = (size_t)(G * N) + (w->g_idx ? (size_t)K : 0);
    uint32_t *meta = (uint32_t *)fd_malloc(meta_words * 4);
    const uint32_t *qz = (const uint32_t *)w->qzeros;
    const int awq = w->fmt == FD_WFMT_AWQ_INT4;
    static const int awq_nibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            const int64_t s = i4_scale_bits(w, g * N + n);
            if (s < 0) {
                free(meta);
                i4_refuse(w, "an f32 scale exact in neither f16 nor bf16 (the GPU kernels keep 16-bit scales)");
            }
            const uint32_t zw = qz[g * (N / 8) + n / 8];
            const int z = awq ? nib(zw, awq_nibble[n % 8]) : nib(zw, (int)(n % 8)) + w->zero_add;
            const uint32_t zbits = 0x4300u | (uint32_t)z; // bf16 of 128 + z (z <= 16)
            meta[g * N + n] = (uint32_t)(s & 0xffff) | (zbits << 16) | (uint32_t)(s & I4_META_BF16);
        }
    if (w->g_idx) memcpy(meta + G * N, w->g_idx, (size_t)K * 4);
    FD_CUDA_CHECK(cudaMalloc(&w->dev_scale, meta_words * 4));
    FD_CUDA_CHECK(cudaMemcpyAsync(w->dev_scale, meta, meta_words * 4, cudaMemcpyHostToDevice, c->stream));

    const size_t raw = (size_t)(N * K / 2);
    void *tmp = cu_scratch(be, CU_SCR_H, raw);
    FD_CUDA_CHECK(cudaMemcpyAsync(tmp, w->data, raw, cudaMemcpyHostToDevice, c->stream));
    FD_CUDA_CHECK(cudaMalloc(&w->dev, (size_t)(N * kwords) * 4));
    const int64_t total = N * kwords;
    const unsigned grid = cu_blocks(total, 256) < 65535u ? cu_blocks(total, 256) : 65535u;
    cu_launch(be, k_int4_repack, grid, 256, 0, (uint32_t *)w->dev, (const uint32_t *)tmp, N, (int)K, kwords, awq);
    // The host copies may be an mmap the caller unmaps later, and meta is freed now: finish the transfers.
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    free(meta);
    w->dev_dtype = FD_I32; // packed words: no dense path reads them (cu_gemv_supported wants BF16)
}

// ---- device helpers ----

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

static __device__ __forceinline__ void i4_mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                              uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Weights and meta are constant for a forward and read once: stream them past L1 (non-coherent loads are safe
// before the PDL wait for them, never for x).
static __device__ __forceinline__ uint4 i4_ld_stream(const uint32_t *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}
static __device__ __forceinline__ uint32_t i4_ld_meta(const uint32_t *p) {
    uint32_t v;
    asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
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

typedef struct {
    const uint32_t *W;    // repacked nibbles [m, kwords]
    const uint32_t *meta; // [G, m]
    float *out, *partial;
    int *counters;
    int m, k, kwords, gs, kslice, S, tiles;
} i4_job;

// Block: 8 warps, I4_ROWS weight rows, NG token groups of 8, one k slice. GPC: groups per 128-wide chunk (1 for
// group >= 128 or a single group, 2 for 64, 4 for 32): each part's MMAs go into a fresh fp32 partial sum that is
// multiplied by the part's scale.
template <int NG, int GPC, int SPLIT>
__global__ void __launch_bounds__(I4_THREADS, 2) k_gemv_int4(const i4_job job, const float *x, int n) {
    constexpr int NC = 8 * NG, WPP = 4 / GPC; // words (32-wide k blocks) per part
    __shared__ float red[I4_WARPS][I4_ROWS][NC];
    __shared__ int is_last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int tile = blockIdx.x % job.tiles, s = blockIdx.x / job.tiles;
    const int row_base = tile * I4_ROWS, m = job.m;
    const int kbeg = s * job.kslice, kend = min(job.k, kbeg + job.kslice);
    // The lane's rows row_base + g + 8j (j = 2r + hf: tile r, half hf) from one base pointer.
    const uint32_t *wlane = job.W + (int64_t)(row_base + g) * job.kwords + 4 * t;
    const int64_t wstep = (int64_t)8 * job.kwords;
    bool wok[4];
#pragma unroll
    for (int j = 0; j < 4; j++) wok[j] = row_base + g + 8 * j < m;
    const float *xrow[NG];
    bool xok[NG];
#pragma unroll
    for (int j = 0; j < NG; j++) {
        const int tok = 8 * j + g;
        xok[j] = tok < n;
        xrow[j] = x + (int64_t)(tok < n ? tok : 0) * job.k + 8 * t;
    }
    float acc[2][NG][4];
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;

    bool entered = false;
    const uint4 zero4 = make_uint4(0, 0, 0, 0);
    for (int k0 = kbeg + warp * I4_CHUNK; k0 < kend; k0 += I4_P * I4_BLOCK_KSTEP) {
        // All weight and meta loads of the iteration first (constant data: issued before the PDL wait on the
        // first one); then chunk by chunk its x and its MMAs.
        uint4 wv[I4_P][4];
        uint32_t mt[I4_P][GPC][4];
#pragma unroll
        for (int p = 0; p < I4_P; p++) {
            const int kc = k0 + p * I4_BLOCK_KSTEP;
#pragma unroll
            for (int j = 0; j < 4; j++) wv[p][j] = kc < kend && wok[j] ? i4_ld_stream(wlane + j * wstep + kc / 8) : zero4;
#pragma unroll
            for (int q = 0; q < GPC; q++) {
                const int kq = kc + q * (I4_CHUNK / GPC);
                const int64_t grp = kq / job.gs; // < G whenever kq < kend <= k
#pragma unroll
                for (int j = 0; j < 4; j++)
                    mt[p][q][j] = kq < kend && wok[j] ? i4_ld_meta(job.meta + grp * m + row_base + g + 8 * j) : 0u;
            }
        }
        if (!entered) {
            CU_PDL_ENTER();
            entered = true;
        }
#pragma unroll
        for (int p = 0; p < I4_P; p++) {
            const int kc = k0 + p * I4_BLOCK_KSTEP;
            if (kc >= kend) break; // warp-uniform: chunks past the slice are not in the partition
#pragma unroll
            for (int q = 0; q < GPC; q++) {
                if (kc + q * (I4_CHUNK / GPC) >= kend) break; // a part wholly past k (the padding of the last chunk)
                uint32_t zp[4];
                float sc[4];
#pragma unroll
                for (int j = 0; j < 4; j++) zp[j] = i4_zero_pair(mt[p][q][j]), sc[j] = i4_scale(mt[p][q][j]);
                float part[2][NG][4];
#pragma unroll
                for (int r = 0; r < 2; r++)
#pragma unroll
                    for (int j = 0; j < NG; j++) part[r][j][0] = part[r][j][1] = part[r][j][2] = part[r][j][3] = 0.f;
#pragma unroll
                for (int ii = 0; ii < WPP; ii++) {
                    const int i = q * WPP + ii, kk = kc + 32 * i; // word i: k block [kk, kk + 32)
                    if (kk >= kend) break;                        // warp-uniform, as above
                    // B: token g's x at kk + 8t + {2h, 2h+4} and {2h+1, 2h+5}, as bf16 pairs (hi, lo when split)
                    uint32_t bh[NG][2][2], bl[NG][2][2];
#pragma unroll
                    for (int j = 0; j < NG; j++) {
                        float4 x0 = make_float4(0.f, 0.f, 0.f, 0.f), x1 = x0;
                        if (xok[j] && kk + 8 * t < kend) {
                            // coherent loads, never __ldg: x is written by the kernel before this one (PDL)
                            x0 = __ldca((const float4 *)(xrow[j] + kk));
                            x1 = __ldca((const float4 *)(xrow[j] + kk + 4));
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
                                i4_mma(part[r][j], a0, a1, a2, a3, bh[j][h][0], bh[j][h][1]);
                                if (SPLIT) i4_mma(part[r][j], a0, a1, a2, a3, bl[j][h][0], bl[j][h][1]);
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
    if (!entered) CU_PDL_ENTER(); // a warp with no chunk in its slice

    // The 8 warp sums in warp order; with S > 1 the slice sum goes to `partial` and the tile's last block adds
    // the S slice sums in slice order (gemv.cu's gv_finish).
#pragma unroll
    for (int r = 0; r < 2; r++)
#pragma unroll
        for (int j = 0; j < NG; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][16 * r + g + 8 * (e >> 1)][8 * j + 2 * t + (e & 1)] = acc[r][j][e];
    __syncthreads();
    float *my_partial = job.partial + ((int64_t)s * job.tiles + tile) * I4_PARTIAL_TILE;
    for (int e = threadIdx.x; e < I4_ROWS * NC; e += I4_THREADS) {
        const int row = e % I4_ROWS, col = e / I4_ROWS;
        float v = red[0][row][col];
#pragma unroll
        for (int w = 1; w < I4_WARPS; w++) v += red[w][row][col];
        if (job.S == 1) {
            if (row_base + row < m && col < n) job.out[(int64_t)col * m + row_base + row] = v;
        } else {
            my_partial[e] = v;
        }
    }
    if (job.S == 1) return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&job.counters[tile], 1) == job.S - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    for (int e = threadIdx.x; e < I4_ROWS * NC; e += I4_THREADS) {
        const int row = e % I4_ROWS, col = e / I4_ROWS;
        if (row_base + row >= m || col >= n) continue;
        const float *pt = job.partial + (int64_t)tile * I4_PARTIAL_TILE + e;
        float v = __ldcg(pt);
        for (int s2 = 1; s2 < job.S; s2++) v += __ldcg(pt + (int64_t)s2 * job.tiles * I4_PARTIAL_TILE);
        job.out[(int64_t)col * m + row_base + row] = v;
    }
    if (threadIdx.x == 0) job.counters[tile] = 0; // ready for the next call (stream order)
}

// The k partition: a function of (m, k, SM count, the gemv blocks-per-SM knob) only, never of n. About
// 2 x blocks_per_sm 32-row blocks per SM (gv_plan's target, counted the same way), slices multiples of
// I4_SLICE_QUANTUM.
static int i4_plan(int m, int k, int num_sms, int blocks_per_sm, int *kslice) {
    const int tiles = (m + I4_ROWS - 1) / I4_ROWS;
    const int max_slices = (k + I4_SLICE_QUANTUM - 1) / I4_SLICE_QUANTUM;
    int S = (2 * blocks_per_sm * num_sms + tiles - 1) / tiles;
    if (S > max_slices) S = max_slices;
    if (S < 1) S = 1;
    int ks = (k + S - 1) / S;
    ks = (ks + I4_SLICE_QUANTUM - 1) / I4_SLICE_QUANTUM * I4_SLICE_QUANTUM;
    *kslice = ks;
    return (k + ks - 1) / ks;
}

// The split-k arrival counters are the bf16 GEMV's (cu_impl.gemv_counters): kernels on the one stream run in
// order and each leaves them zero, and an early-launched GEMV touches them only after its PDL wait. Grown here
// like gemv.cu does, should an int4 weight need more tiles than the backend allocated.
static int *i4_counters(cu_impl *c, int tiles) {
    if (c->gemv_counters_len < tiles) {
        FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        FD_CUDA_CHECK(cudaFree(c->gemv_counters));
        FD_CUDA_CHECK(cudaMalloc(&c->gemv_counters, (size_t)tiles * sizeof(int)));
        FD_CUDA_CHECK(cudaMemsetAsync(c->gemv_counters, 0, (size_t)tiles * sizeof(int), c->stream));
        c->gemv_counters_len = tiles;
    }
    return c->gemv_counters;
}

// Groups per 128-wide chunk, or 0 when the GEMV cannot take this grouping.
static int i4_gpc(const fd_weight *W) {
    if (W->n_groups == 1 || W->group_size % I4_CHUNK == 0) return 1;
    if (W->group_size == 64) return 2;
    if (W->group_size == 32) return 4;
    return 0;
}

int cu_gemv_int4_supported(const void *x, const fd_weight *W, int n) {
    if (n < 1 || n > CU_GEMV_MAX_N || !fd_wfmt_is_int4(W->fmt) || !W->dev || !W->dev_scale) return 0;
    if (W->g_idx || !i4_gpc(W) || W->cols % 8) return 0; // g_idx kept at upload: not k / group_size
    return (uintptr_t)x % 16 == 0;
}

template <int NG, int GPC>
static void i4_launch(fd_backend *be, int blocks, int split, const i4_job &job, const float *x, int n) {
    if (split)
        cu_launch_early(be, (k_gemv_int4<NG, GPC, 1>), blocks, I4_THREADS, 0, job, x, n);
    else
        cu_launch_early(be, (k_gemv_int4<NG, GPC, 0>), blocks, I4_THREADS, 0, job, x, n);
}

template <int NG>
static void i4_launch_ng(fd_backend *be, int blocks, int split, int gpc, const i4_job &job, const float *x, int n) {
    if (gpc == 1)
        i4_launch<NG, 1>(be, blocks, split, job, x, n);
    else if (gpc == 2)
        i4_launch<NG, 2>(be, blocks, split, job, x, n);
    else
        i4_launch<NG, 4>(be, blocks, split, job, x, n);
}

void cu_gemv_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    cu_impl *c = cu_of(be);
    FD_CHECK(cu_gemv_int4_supported(x, W, n), "int4 gemv: unsupported call n=%d %s", n, W->name ? W->name : "?");
    i4_job job;
    memset(&job, 0, sizeof job);
    job.W = (const uint32_t *)W->dev;
    job.meta = (const uint32_t *)W->dev_scale;
    job.out = out;
    job.m = (int)W->rows;
    job.k = (int)W->cols;
    job.kwords = (int)i4_kwords(W->cols);
    job.gs = W->group_size;
    job.S = i4_plan(job.m, job.k, c->num_sms, c->gemv_blocks_per_sm, &job.kslice);
    job.tiles = (job.m + I4_ROWS - 1) / I4_ROWS;
    // Partial sums sized for 16 tokens whatever n is (as gemv.cu): a decode step leaves the buffer big enough for
    // a verify block, which a CUDA graph can then record without growing scratch.
    if (job.S > 1) {
        job.partial = (float *)cu_scratch(be, CU_SCR_A, (size_t)job.S * job.tiles * I4_PARTIAL_TILE * sizeof(float));
        job.counters = i4_counters(c, job.tiles);
    }
    const int split = cu_gemm_split(c->gemm_act, job.k), gpc = i4_gpc(W);
    c->gemv_launches++;
    const int blocks = job.tiles * job.S;
    if (n <= 8)
        i4_launch_ng<1>(be, blocks, split, gpc, job, x, n);
    else
        i4_launch_ng<2>(be, blocks, split, gpc, job, x, n);
}

// dst [m, k] = s * (q - z), f32 (exact) or rounded to bf16; one thread per repacked word (8 consecutive k of a
// row). gidx (NULL: k / gs) the group of each input.
template <int F32>
__global__ void k_int4_dequant(void *dst, const uint32_t *W, const uint32_t *meta, const int32_t *gidx, int64_t m,
                               int k, int64_t kwords, int gs) {
    CU_PDL_ENTER();
    const int64_t total = m * kwords;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = idx / kwords, d = idx % kwords;
        const int k0 = 128 * (int)(d >> 4) + 32 * (int)(d & 3) + 8 * (int)((d >> 2) & 3);
        if (k0 >= k) continue;
        const uint32_t word = W[idx];
        float f[8];
#pragma unroll
        for (int p = 0; p < 8; p++) {
            const int64_t grp = gidx ? gidx[k0 + p] : (k0 + p) / gs;
            const uint32_t mt = meta[grp * m + r];
            const int z = (int)__uint_as_float(((mt >> 16) & 0x7fffu) << 16) - 128;
            f[p] = i4_scale(mt) * (float)((int)((word >> (4 * p)) & 15u) - z);
        }
        if (F32) {
            float4 *o = (float4 *)((float *)dst + r * k + k0);
            o[0] = make_float4(f[0], f[1], f[2], f[3]);
            o[1] = make_float4(f[4], f[5], f[6], f[7]);
        } else {
            uint32_t o[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                __nv_bfloat162 b = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
                o[j] = *(uint32_t *)&b;
            }
            *(uint4 *)((__nv_bfloat16 *)dst + r * k + k0) = make_uint4(o[0], o[1], o[2], o[3]);
        }
    }
}

void cu_int4_dequant(fd_backend *be, void *dst, const fd_weight *W, int f32) {
    const int64_t m = W->rows, kwords = i4_kwords(W->cols), total = m * kwords;
    const unsigned grid = cu_blocks(total, 256) < 65535u ? cu_blocks(total, 256) : 65535u;
    const uint32_t *meta = (const uint32_t *)W->dev_scale;
    const int32_t *gidx = W->g_idx ? (const int32_t *)(meta + W->n_groups * m) : NULL;
    const int k = (int)W->cols, gs = W->group_size;
    if (f32)
        cu_launch(be, k_int4_dequant<1>, grid, 256, 0, dst, (const uint32_t *)W->dev, meta, gidx, m, k, kwords, gs);
    else
        cu_launch(be, k_int4_dequant<0>, grid, 256, 0, dst, (const uint32_t *)W->dev, meta, gidx, m, k, kwords, gs);
}

// Route gemm_int4: the int4 GEMV for small n, else the weight dequantized in scratch slot W (bf16, or f32 under a
// bf16x2 gemm_act) and the dense path, which counts gemm_act and gemm_small itself.
void cu_gemm_int4(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    cu_impl *c = cu_of(be);
    const int gemv = c->gemm_int4 == CU_GEMM_INT4_GEMV && cu_gemv_int4_supported(x, W, n);
    const int v = gemv ? CU_GEMM_INT4_GEMV : CU_GEMM_INT4_DEQUANT;
    c->routes[CU_ROUTE_GEMM_INT4].calls[v]++;
    c->routes[CU_ROUTE_GEMM_INT4].tokens[v] += n;
    if (gemv) {
        const int split = cu_gemm_split(c->gemm_act, W->cols);
        c->routes[CU_ROUTE_GEMM_ACT].calls[split]++;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[split] += n;
        cu_gemv_int4(be, out, x, W, n);
        if (cu_debug_sync) FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return;
    }
    const int f32 = cu_gemm_split(c->gemm_act, W->cols);
    fd_weight tmp = *W;
    tmp.fmt = FD_WFMT_DENSE;
    tmp.dev = cu_scratch(be, CU_SCR_W, (size_t)(W->rows * W->cols) * (f32 ? 4 : 2));
    tmp.dev_dtype = f32 ? FD_F32 : FD_BF16;
    tmp.dev_scale = NULL;
    tmp.g_idx = NULL;
    cu_int4_dequant(be, tmp.dev, W, f32);
    if (f32) { // the fp32 GEMM counts under no gemm_act value of its own: count the split the route chose
        c->routes[CU_ROUTE_GEMM_ACT].calls[1]++;
        c->routes[CU_ROUTE_GEMM_ACT].tokens[1] += n;
    }
    cu_gemm_f32out(be, out, x, &tmp, n);
}
