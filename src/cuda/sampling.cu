// sample_rows on the GPU: one 1024-thread block per logits row; only the token ids come back to the host.
//
// The row follows the host sampler (engine/sampling.c) step by step, so the kept set and the draw are the host's:
//  1. mx = max logit; e_i = exp((l_i - mx) / T) rounded to fp32 (the quotient in fp32 as on the host; exp in fp64
//     then rounded, which agrees with glibc's expf except in rare last-bit cases); sum = sum e_i in fp64;
//     p_i = fp32(e_i / sum) (as e_i * (1 / sum) in fp64: the same fp32 except within 2^-29 of a rounding midpoint).
//  2. top-k and top-p WITHOUT a sort. The tokens in rank order (p descending, ties by lower index) are cut at one
//     position; a cut is (key, idx): token i is kept when bits(p_i) > key, or == key and i <= idx (p >= 0, so the
//     fp32 bit pattern orders like the value). The cut is found by radix select over the 32 key bits (digits of
//     11, 11, 10 bits; shared-memory histograms of counts, and for top-p of masses in 2^-56 fixed point, which sum
//     exactly and in any order), then an index-ordered count finds the idx of the last kept tie. top-k: the k-th
//     ranked token; top-p (within the top-k set): the first ranked token whose cumulative mass reaches top_p times
//     the set's mass (the host's `cum >= top_p`, up to the rounding of its running sum).
//  3. kept mass in fp64 and p'_i = fp32(p_i / kept) for kept tokens; the inverse-CDF draw in index order: the first
//     i with sum_{j <= i} p'_j > u * sum_j p'_j, by a block prefix sum over 1024 contiguous segments and one warp's
//     scan of the segment that crosses. u lands past the end (rounding): the last token with mass, as the host.
// Differences from the host ids can only come from fp64 summation order (~1e-16 relative) and rare last-bit
// differences of exp: a u within ~1e-12 of a CDF boundary, or a top-p sum within that of top_p.
//
// Scratch: the fp32 p row ([rows, V], slot A) is written once and re-read by each later sweep (from L2).
#include "cuda/cuda.h"
#include "cuda/cuda_common.h" // first: wraps backend.h in extern "C"

#include <stdlib.h>
#include <string.h>

#define SMP_THREADS 1024
#define SMP_WARPS   (SMP_THREADS / 32)
#define SMP_BINS    2048                // the widest radix digit (11 bits)
#define SMP_FIX     72057594037927936.0 // 2^56: fixed-point unit of masses (p <= 1, sums of V <= 2^31 terms fit)
#define FULL_MASK   0xffffffffu

typedef unsigned long long u64;

typedef struct {
    int hcount[SMP_BINS];
    u64 hmass[SMP_BINS];
    double seg[SMP_THREADS]; // per-segment sums, then their inclusive prefix sums
    double wd[SMP_WARPS];
    u64 wu[SMP_WARPS];
    float wf[SMP_WARPS];
    int wi[SMP_WARPS];
    int b_bin, b_cnt, b_idx, b_found;
    u64 b_before;
    double b_d;
} smp_shared;

// Token i is in the cut when its key is above `key`, or equal and i <= idx (see the file comment).
typedef struct {
    unsigned key;
    int idx;
} smp_cut;

static __device__ __forceinline__ bool in_cut(unsigned key, int i, smp_cut c) {
    return key > c.key || (key == c.key && i <= c.idx);
}
static __device__ __forceinline__ u64 fixmass(float p) {
    return (u64)((double)p * SMP_FIX);
}

// Weights for the index-ordered search: ties of key `v` within `cut` (count), p itself, or the renormalised
// fp32 p' = fp32(p * scale) of tokens within `cut`.
enum { W_TIES = 0, W_P = 1, W_KEPT = 2 };
typedef struct {
    int mode;
    smp_cut cut;
    unsigned v;
    double scale;
} smp_weight;

static __device__ __forceinline__ double weight_of(float x, int i, const smp_weight *w) {
    const unsigned key = __float_as_uint(x);
    if (w->mode == W_TIES) return key == w->v && in_cut(key, i, w->cut) ? 1.0 : 0.0;
    if (w->mode == W_P) return (double)x;
    return in_cut(key, i, w->cut) ? (double)(float)((double)x * w->scale) : 0.0;
}

// ---- block reductions and scans (every thread gets the result; all threads must call) ----
static __device__ double block_sum_d(double v, smp_shared *sh) {
    return cu_block_reduce_full<double, cu_warp_sum_d>(v, sh->wd, &sh->b_d);
}
static __device__ float block_max_f(float v, smp_shared *sh) {
    return cu_block_reduce_full<float, cu_warp_max>(v, sh->wf, &sh->wf[0]);
}
static __device__ int block_max_i(int v, smp_shared *sh) {
    return cu_block_reduce_full<int, cu_warp_max_i>(v, sh->wi, &sh->wi[0]);
}
// Exclusive prefix sum in thread order (integers: exact whatever the order); *total = the block's sum.
static __device__ u64 block_excl_scan_u64(u64 v, u64 *total, smp_shared *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u64 x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const u64 y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sh->wu[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u64 t = sh->wu[lane];
        for (int o = 1; o < 32; o <<= 1) {
            const u64 y = __shfl_up_sync(FULL_MASK, t, o);
            if (lane >= o) t += y;
        }
        sh->wu[lane] = t;
    }
    __syncthreads();
    const u64 excl = (warp ? sh->wu[warp - 1] : 0) + x - v;
    *total = sh->wu[SMP_WARPS - 1];
    __syncthreads();
    return excl;
}
static __device__ double warp_incl_scan_d(double x) {
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    return x;
}
static __device__ double block_incl_scan_d(double x, smp_shared *sh) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    x = warp_incl_scan_d(x);
    if (lane == 31) sh->wd[warp] = x;
    __syncthreads();
    if (warp == 0) sh->wd[lane] = warp_incl_scan_d(sh->wd[lane]);
    __syncthreads();
    if (warp) x += sh->wd[warp - 1];
    __syncthreads();
    return x;
}

// ---- greedy: argmax, lowest index on ties ----
static __device__ int block_argmax(const float *__restrict__ l, int V, smp_shared *sh) {
    float bv = -INFINITY;
    int bi = V;                                          // V: none yet
    for (int i = threadIdx.x; i < V; i += SMP_THREADS) { // ascending, strict >: the lowest index of a tie
        const float x = l[i];
        if (bi == V || x > bv) bv = x, bi = i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
        const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi != V && (bi == V || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) sh->wf[warp] = bv, sh->wi[warp] = bi;
    __syncthreads();
    if (warp == 0) {
        bv = sh->wf[lane], bi = sh->wi[lane];
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(FULL_MASK, bv, o);
            const int oi = __shfl_xor_sync(FULL_MASK, bi, o);
            if (oi != V && (bi == V || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        if (lane == 0) sh->b_idx = bi;
    }
    __syncthreads();
    const int best = sh->b_idx;
    __syncthreads();
    return best < V ? best : 0; // V == 0 cannot happen (checked on the host)
}

// ---- index-ordered search ----
// The first index i whose inclusive cumulative weight exceeds `target` (times the total weight when `relative`),
// or -1 when none does. The row is split into SMP_THREADS contiguous segments; warps sum them (coalesced), the
// block scans the sums, and warp 0 scans the one segment where the running sum crosses.
static __device__ int ordered_find(const float *p, int V, const smp_weight *w, double target, int relative,
                                   smp_shared *sh) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int seg = (V + SMP_THREADS - 1) / SMP_THREADS;
    for (int s = warp; s < SMP_THREADS; s += SMP_WARPS) {
        const int s0 = min(V, s * seg), s1 = min(V, s0 + seg);
        double acc = 0;
        for (int i = s0 + lane; i < s1; i += 32) acc += weight_of(p[i], i, w);
        acc = cu_warp_sum_d(acc);
        if (lane == 0) sh->seg[s] = acc;
    }
    __syncthreads();
    const double incl = block_incl_scan_d(sh->seg[tid], sh);
    sh->seg[tid] = incl;
    if (tid == 0) sh->b_idx = SMP_THREADS;
    __syncthreads();
    if (relative) target *= sh->seg[SMP_THREADS - 1];
    if (incl > target) atomicMin(&sh->b_idx, tid);
    __syncthreads();
    const int s = sh->b_idx;
    if (warp == 0) {
        int found = -1;
        if (s < SMP_THREADS) {
            const int s0 = min(V, s * seg), s1 = min(V, s0 + seg);
            double cum = s ? sh->seg[s - 1] : 0.0;
            int last_pos = -1;
            for (int c0 = s0; c0 < s1; c0 += 32) {
                const int i = c0 + lane;
                const double wv = i < s1 ? weight_of(p[i], i, w) : 0.0;
                const double c = cum + warp_incl_scan_d(wv);
                const unsigned hit = __ballot_sync(FULL_MASK, i < s1 && c > target);
                const unsigned pos = __ballot_sync(FULL_MASK, wv > 0);
                if (pos) last_pos = c0 + 31 - __clz((int)pos);
                if (hit) {
                    found = c0 + __ffs((int)hit) - 1;
                    break;
                }
                cum = __shfl_sync(FULL_MASK, c, 31);
            }
            // Rounding of the segment scan put the crossing just past this segment: its last token with weight.
            if (found < 0) found = last_pos;
        }
        if (lane == 0) sh->b_found = found;
    }
    __syncthreads();
    const int found = sh->b_found;
    __syncthreads();
    return found;
}

// ---- radix select of a cut ----
// Within the tokens of `in`, in rank order: by count, the `goal`-th token (goal = k); by mass, the first token whose
// cumulative mass reaches goal (a fraction) of the set's mass. Returns the cut that ends at that token.
static __device__ smp_cut select_cut(const float *p, int V, smp_cut in, int by_mass, double goal, smp_shared *sh) {
    const int tid = threadIdx.x;
    unsigned prefix = 0, mask = 0;
    u64 before = 0, target = 0; // weight of the tokens ranked above the current digit's bins; the rank sought
    int cnt_v = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
        const int nb = pass == 2 ? 1024 : 2048;
        for (int b = tid; b < SMP_BINS; b += SMP_THREADS) sh->hcount[b] = 0, sh->hmass[b] = 0;
        __syncthreads();
        for (int i0 = tid; i0 < V; i0 += 4 * SMP_THREADS) {
            float x[4];
#pragma unroll
            for (int j = 0; j < 4; j++) { // all loads first: four in flight per thread
                const int i = i0 + j * SMP_THREADS;
                x[j] = i < V ? p[i] : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int i = i0 + j * SMP_THREADS;
                const unsigned key = __float_as_uint(x[j]);
                if (i < V && (key & mask) == prefix && in_cut(key, i, in)) {
                    const int bin = (int)((key >> shift) & (unsigned)(nb - 1));
                    atomicAdd(&sh->hcount[bin], 1);
                    if (by_mass) atomicAdd(&sh->hmass[bin], fixmass(x[j]));
                }
            }
        }
        __syncthreads();
        // Bins in descending order: thread t owns the per = nb / SMP_THREADS bins below nb - t * per.
        const int per = nb / SMP_THREADS, hi = nb - 1 - tid * per;
        u64 mine = 0;
        for (int q = 0; q < per; q++) mine += by_mass ? sh->hmass[hi - q] : (u64)sh->hcount[hi - q];
        u64 total;
        const u64 excl = block_excl_scan_u64(mine, &total, sh);
        if (pass == 0) { // the rank sought, clamped into the set
            if (by_mass) {
                const double t = ceil(goal * (double)total);
                target = t < 1 ? 1 : t >= (double)total ? total : (u64)t;
            } else {
                target = goal < 1 ? 1 : goal >= (double)total ? total : (u64)goal;
            }
        }
        u64 acc = before + excl;
        for (int q = 0; q < per; q++) { // exactly one bin of the block holds the target (integer sums partition)
            const int b = hi - q;
            const u64 wb = by_mass ? sh->hmass[b] : (u64)sh->hcount[b];
            if (acc < target && target <= acc + wb) sh->b_bin = b, sh->b_before = acc, sh->b_cnt = sh->hcount[b];
            acc += wb;
        }
        __syncthreads();
        prefix |= (unsigned)sh->b_bin << shift;
        mask |= (unsigned)(nb - 1) << shift;
        before = sh->b_before;
        cnt_v = sh->b_cnt;
        __syncthreads();
    }
    // The sought token has key `prefix`; it is the m-th (in index order) of the cnt_v tokens of the set with it.
    u64 m;
    if (by_mass) {
        const u64 fv = fixmass(__uint_as_float(prefix));
        m = fv ? (target - before + fv - 1) / fv : (u64)cnt_v;
    } else {
        m = target - before;
    }
    m = m < 1 ? 1 : m > (u64)cnt_v ? (u64)cnt_v : m;
    const smp_weight ties = {W_TIES, in, prefix, 0.0};
    const int idx = ordered_find(p, V, &ties, (double)m - 0.5, 0, sh); // counts are exact in fp64
    return smp_cut{prefix, idx};
}

// out[r]: the sampled id of row r. probs_out (optional, [rows, V]): the distribution drawn from (sampler_probs).
// pbuf is written here and then read by other threads, so it is not __restrict__ (no read-only-cache loads).
__global__ void __launch_bounds__(SMP_THREADS)
    k_sample_rows(int32_t *__restrict__ out, float *__restrict__ probs_out, const float *__restrict__ logits,
                  float *pbuf, int V, const fd_sample_params *__restrict__ params,
                  const double *__restrict__ uniforms) {
    CU_PDL_ENTER();
    __shared__ smp_shared sh;
    const int r = blockIdx.x, tid = threadIdx.x;
    const float *l = logits + (size_t)r * V;
    float *p = pbuf + (size_t)r * V;
    float *po = probs_out ? probs_out + (size_t)r * V : NULL;
    const fd_sample_params sp = params[r];
    if (!(sp.temperature > 0)) {
        const int best = block_argmax(l, V, &sh);
        if (tid == 0) out[r] = best;
        if (po)
            for (int i = tid; i < V; i += SMP_THREADS) po[i] = i == best ? 1.0f : 0.0f;
        return;
    }
    float mx = -INFINITY;
#pragma unroll 4
    for (int i = tid; i < V; i += SMP_THREADS) mx = fmaxf(mx, l[i]);
    mx = block_max_f(mx, &sh);
    double s = 0;
#pragma unroll 4
    for (int i = tid; i < V; i += SMP_THREADS) {
        const float e = (float)exp((double)((l[i] - mx) / sp.temperature));
        p[i] = e;
        s += e;
    }
    const double rinv = 1.0 / block_sum_d(s, &sh);
#pragma unroll 4
    for (int i = tid; i < V; i += SMP_THREADS) p[i] = (float)((double)p[i] * rinv);
    __syncthreads(); // p is read across threads from here on

    const int use_k = (sp.top_k > 0 && sp.top_k < V), use_p = (sp.top_p > 0 && sp.top_p < 1);
    smp_cut cut = {0u, V - 1}; // everything
    smp_weight w = {W_P, cut, 0u, 1.0};
    if (use_k) cut = select_cut(p, V, cut, 0, (double)sp.top_k, &sh);
    if (use_p) cut = select_cut(p, V, cut, 1, (double)sp.top_p, &sh);
    if (use_k || use_p) {
        double kept = 0;
        for (int i = tid; i < V; i += SMP_THREADS) {
            const float x = p[i];
            if (in_cut(__float_as_uint(x), i, cut)) kept += x;
        }
        w = smp_weight{W_KEPT, cut, 0u, 1.0 / block_sum_d(kept, &sh)};
    }
    int id = ordered_find(p, V, &w, uniforms[r], 1, &sh);
    if (id < 0) { // u * total at or past the end of the CDF: the last token with mass, as the host
        int last = -1;
        for (int i = tid; i < V; i += SMP_THREADS)
            if (weight_of(p[i], i, &w) > 0) last = i;
        id = max(0, block_max_i(last, &sh));
    }
    if (tid == 0) out[r] = id;
    if (po)
        for (int i = tid; i < V; i += SMP_THREADS) po[i] = (float)weight_of(p[i], i, &w);
}

// Stages params and uniforms in one copy, runs the kernel, returns the ids (synchronises the stream).
static void sample_run(fd_backend *be, int32_t *out_host, float *probs_dev, const float *logits, int rows, int V,
                       const fd_sample_params *params, const double *uniforms) {
    FD_CHECK(rows >= 0 && V >= 1, "sample_rows: %d rows of %d", rows, V);
    if (rows == 0) return;
    cu_impl *c = cu_of(be);
    // layout: uniforms [rows] f64 | params [rows] | ids [rows] i32 (each part 8-byte aligned)
    const size_t ub = (size_t)rows * sizeof(double), pb = ((size_t)rows * sizeof(fd_sample_params) + 7) & ~(size_t)7;
    const size_t ib = (size_t)rows * sizeof(int32_t);
    char *host = (char *)fd_malloc(ub + pb);
    for (int r = 0; r < rows; r++) {
        const int greedy = !(params[r].temperature > 0);
        FD_CHECK(greedy || uniforms, "sample_rows: row %d samples but no uniforms were given", r);
        ((double *)host)[r] = greedy ? 0.0 : uniforms[r];
    }
    memcpy(host + ub, params, (size_t)rows * sizeof(fd_sample_params));
    char *dev = (char *)cu_scratch(be, CU_SCR_B, ub + pb + ib);
    FD_CUDA_CHECK(cudaMemcpyAsync(dev, host, ub + pb, cudaMemcpyHostToDevice, c->stream)); // staged: host reusable
    free(host);
    float *pbuf = (float *)cu_scratch(be, CU_SCR_A, (size_t)rows * V * sizeof(float));
    int32_t *ids_dev = (int32_t *)(dev + ub + pb);
    cu_launch(be, k_sample_rows, rows, SMP_THREADS, 0, ids_dev, probs_dev, logits, pbuf, V,
              (const fd_sample_params *)(dev + ub), (const double *)dev);
    FD_CUDA_CHECK(cudaMemcpyAsync(out_host, ids_dev, ib, cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
}

void cu_sample_rows(fd_backend *be, int32_t *out_host, const float *logits, int rows, int V,
                    const fd_sample_params *params, const double *uniforms) {
    sample_run(be, out_host, NULL, logits, rows, V, params, uniforms);
}

void fd_cuda_sample_probs(fd_backend *be, float *probs, const float *logits, int rows, int V,
                          const fd_sample_params *params) {
    int32_t *ids = (int32_t *)fd_malloc(sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
    double *u = (double *)fd_calloc((size_t)(rows > 0 ? rows : 1), sizeof(double));
    sample_run(be, ids, probs, logits, rows, V, params, u);
    free(ids);
    free(u);
}
