// Decode / verify attention without block barriers per key tile (route attn_decode=warp): the same calls, inputs
// and partials as attention_decode.cu (whose header states the batch-invariance contract this kernel keeps), for
// head_dim 64/128/256, both kv layouts and the tree mask.
//
// Why: the blocked kernel shares each 32-key tile among 8 warps, so every tile costs three block barriers with the
// softmax on a few warps in between; it reached 57 % of copy bandwidth for n = 1 at 128K and e4m3 (half the bytes)
// ran slower than bf16 (docs/perf-notes.md, session 9). Here a warp never waits for another inside a chunk.
//
// Work decomposition. Block = 4 warps on one 512-key chunk (blockIdx.y) of one kv head (blockIdx.z) for 8*RT
// query rows (blockIdx.x; rows r = token * G + head-of-group, so one K/V read serves the group). Warp w owns keys
// [128w, 128w + 128) of the chunk (always: a row's arithmetic depends on this split, never on n, RT or the grid)
// and streams them in steps of 16 keys through its own shared-memory ring (cp.async, NE entries; an entry is the
// K or the V tile of a step, so K of the next step is in flight while V of this one is consumed). Per step,
// "transposed" (keys and dims as the mma's m, query rows as its n, so one n8 tile holds a decode step's 6 GQA rows):
//   S^T = K Q^T   mma.sync m16n8k16 bf16 -> f32, A = K (16 keys x 16 dims), B = Q (bf16, shared, read-only)
//   softmax       in registers: each lane holds 2 keys x 2 rows; row max over the 8 lanes of a row (3 shuffles),
//                 running sum kept per lane and summed over those lanes once at the end
//   P^T           rounded to bf16 and moved into the B layout with movmatrix.trans (no shared memory)
//   O^T += V^T P^T  A = V^T (16 dims x 16 keys); O^T for 8 rows x HD dims is HD/4 registers per lane and row tile
// At the end of the chunk (one barrier) the 4 warps' (max, sum, O) go to shared memory and are merged in warp
// order 0..3; the block writes the chunk's partials (acc, max in log2 units, sum) for k_attn_combine, as the
// blocked kernel does.
// bf16 K/V tiles are read with ldmatrix (V transposed). e4m3 tiles stay fp8 in shared memory (half the bytes) and
// each lane converts the bytes it needs in registers, value * row scale rounded to bf16 as the blocked kernel's
// dequantisation pass does. To read whole 8-byte runs of a row, the e4m3 path permutes the head dims: for K (and
// Q, stored permuted to match) within every 32 dims, and for the output dims of O (undone when the partials are
// stored); a dot product does not depend on the order of its dims beyond the mma's own summation.
// tools/dw_emu.cpp runs this file on the host (fragment layouts rebuilt from the PTX ISA) against a direct
// attention and checks the bitwise properties; run it after any change to the index arithmetic.
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"
#include "cuda/decode_warp_ptx.cuh"
#include "cuda/tree.cuh"

#define DW_WARPS 4                            // key streams per chunk = warps per block
#define DW_KEYS  (CU_DECODE_CHUNK / DW_WARPS) // keys per warp: [128w, 128w + 128) of the chunk
#define DW_BK    16                           // keys per step: the m of S^T = K Q^T and the k of O^T = V^T P^T
#define DW_STEPS (DW_KEYS / DW_BK)
static_assert(DW_KEYS % DW_BK == 0, "a warp's keys are whole steps");

// Shared-memory plan (bytes; every region 16-byte aligned). Ring: per warp NE entries, each the K or V tile of one
// step: bf16 rows of 2*HD + 16 bytes (conflict-free ldmatrix), or fp8 rows of HD + 32 (K) / HD + 16 (V) bytes (the
// pitches that make the lanes' 8-byte reads conflict-free) and the 16 row scales. Merge (after the loop, over the
// ring and Q): each warp's O fragments [warp][row tile][HD/16][lane] float4, then (max, sum) per warp and row.
// Last, the tree's ancestor masks and parents (unused by the chain: 768 bytes).
// Budgets: hd 256 two blocks per SM (110 KB each); smaller heads 72 KB (three).
template <int HD, int RT, bool E4> struct dw_plan {
    static constexpr int ROWS = 8 * RT;
    static constexpr int KP = E4 ? HD + 32 : 2 * HD + 16; // K row pitch
    static constexpr int VP = E4 ? HD + 16 : 2 * HD + 16; // V row pitch
    static constexpr int ROW_BYTES = E4 ? HD : 2 * HD;    // a cache row of one (slot, kv head)
    static constexpr int OCT = ROW_BYTES / 16;            // 16-byte copies per row
    static constexpr int SCALES = DW_BK * KP;             // e4m3: offset of the entry's 16 fp32 scales
    static constexpr int ENTRY = DW_BK * KP + (E4 ? DW_BK * 4 : 0);
    static constexpr int QP = HD + 8; // bf16 pitch of Q
    static constexpr int Q_BYTES = ROWS * QP * 2;
    static constexpr int MERGE_O = DW_WARPS * RT * (HD / 16) * 32 * 16;
    static constexpr int ML_BYTES = DW_WARPS * ROWS * 8;
    static constexpr int BUDGET = (HD == 256 ? 110 : 72) * 1024;
    static constexpr int NE_FIT = (BUDGET - Q_BYTES - ML_BYTES) / (DW_WARPS * ENTRY);
    static constexpr int NE = NE_FIT > 8 ? 8 : NE_FIT; // ring entries per warp: NE - 1 in flight
    static constexpr int RING = DW_WARPS * NE * ENTRY;
    static constexpr int MAIN = RING + Q_BYTES > MERGE_O ? RING + Q_BYTES : MERGE_O;
    static constexpr int TREE_OFF = MAIN + ML_BYTES; // tree verify: the nodes' ancestor masks and parents
    static constexpr int TOTAL = TREE_OFF + CU_TREE_MAX_NODES * 12;
    static_assert(NE >= 3, "decode attention (warp): too little shared memory for 3 ring entries");
    static_assert(OCT % 2 == 0 && ENTRY % 16 == 0 && KP % 16 == 0 && VP % 16 == 0, "16-byte copies");
};

static __device__ __forceinline__ uint32_t dw_bf2(float lo, float hi) {
    __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&b;
}
// The two e4m3 bytes in the low half of `two`, dequantised: value * s rounded to bf16 (the blocked kernel's
// arithmetic: exact e4m3 -> f16 -> f32, one f32 product, one rounding).
static __device__ __forceinline__ uint32_t dw_e4_pair(uint32_t two, float s) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu), __NV_E4M3);
    const float2 f = __half22float2(*(const __half2 *)&h);
    return dw_bf2(f.x * s, f.y * s);
}
// e4m3 only: where Q's head dims P, P+1 (P even) go so that they meet K's. Lane c of the K fragment reads dims
// [32p + 8c, +8) of its key as four pairs: k-step 2p (logical 2c | 2c + 8) and k-step 2p + 1 (the same).
template <bool E4> static __device__ __forceinline__ int dw_qcol(int P) {
    if (!E4) return P;
    return (P & ~31) + ((P >> 2) & 1) * 16 + ((P >> 1) & 1) * 8 + ((P >> 3) & 3) * 2;
}

// Whether query row q_r (its last key, relative to the chunk start; -1: none here) sees key key_r of the chunk;
// TREE: context keys before p_r, then the row's ancestors (anc) and itself. |p_r|, q_r clamped to 1024: exact.
template <bool TREE>
static __device__ __forceinline__ bool dw_sees(int key_r, int q_r, int p_r, unsigned long long anc) {
    if (!TREE) return key_r <= q_r;
    return q_r >= 0 && (key_r < p_r || (key_r <= q_r && (anc >> (key_r - p_r) & 1ull)));
}

// Entry e of a warp's stream (K of step e/2 for even e, its V for odd e) into ring slot e % NE; keys at or past
// kend are zero-filled (no global read). Always commits a group, so wait_group counts stay uniform.
template <int HD, int RT, bool E4>
static __device__ __forceinline__ void dw_issue(char *ring, const cu_kv &kv, int64_t kw0, int64_t kend, int nent, int e,
                                                int Hkv, int kvh, int lane) {
    typedef dw_plan<HD, RT, E4> P;
    if (e < nent) {
        char *dst = ring + (e % P::NE) * P::ENTRY;
        const int plane = e & 1, pitch = plane ? P::VP : P::KP;
        const int64_t k0 = kw0 + (int64_t)(e >> 1) * DW_BK;
        const cu_kv_tile pt = cu_kv_tile_at(kv, k0, min(kend, k0 + DW_BK)); // 16-aligned: one page
        const char *src = E4 ? (const char *)(plane ? kv.v8 : kv.k8) : (const char *)(plane ? kv.v : kv.k);
#pragma unroll
        for (int u = 0; u < P::OCT / 2; u++) { // 16 rows x OCT copies over 32 lanes
            const int piece = lane + 32 * u, j = piece / P::OCT, o = piece % P::OCT;
            const bool ok = k0 + j < kend;
            const int64_t slot = ok ? cu_kv_tile_slot(pt, k0, k0 + j) : 0;
            dw_cp16(dst + j * pitch + o * 16, src + (slot * Hkv + kvh) * P::ROW_BYTES + o * 16, ok);
        }
        if (E4 && lane < DW_BK) {
            const bool ok = k0 + lane < kend;
            const int64_t slot = ok ? cu_kv_tile_slot(pt, k0, k0 + lane) : 0;
            dw_cp4(dst + P::SCALES + lane * 4, (plane ? kv.vs : kv.ks) + slot * Hkv + kvh, ok);
        }
    }
    dw_commit();
}

// q [n, H, HD] f32 at positions p0.. (p0 = *pos_dev when given); writes partials for chunk blockIdx.y: opart
// [n*H][zslots][HD], ml [n*H][zslots][2] = (max in log2 units, sum), for the rows that see a key of the chunk.
template <int HD, int RT, bool E4, bool TREE>
__global__ void __launch_bounds__(DW_WARPS * 32, 2)
    k_attn_decode_warp(float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                       int H, int Hkv, int64_t capacity, int64_t zslots, float scale_log2, int causal,
                       const int32_t *tree_parent) {
    CU_PDL_ENTER();
    typedef dw_plan<HD, RT, E4> P;
    constexpr int NE = P::NE, MD = HD / 16, KP = P::KP, VP = P::VP, QP = P::QP;
    extern __shared__ float4 sm4[]; // the name tools/gdn_emu's runtime gives the block's shared memory
    char *base = (char *)sm4;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c = lane & 3;
    const int kvh = blockIdx.z, G = H / Hkv, R = n * G, rb0 = blockIdx.x * P::ROWS;
    const int64_t z = blockIdx.y, kbeg = z * CU_DECODE_CHUNK;
    const int64_t p0 = pos_dev ? *pos_dev : pos0;
    if (p0 < 0 || p0 + n > capacity) __trap(); // the caller promised live keys inside the cache
    const int rows_here = min(P::ROWS, R - rb0);
    const int64_t klast = causal ? p0 + (rb0 + rows_here - 1) / G : p0 + n - 1; // last key any row here sees
    if (kbeg > klast) return; // a chunk past the live keys (grid sized from capacity): nothing to do
    const int64_t kend = min(klast + 1, kbeg + CU_DECODE_CHUNK);
    char *ring = base + w * NE * P::ENTRY;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(base + P::RING); // [ROWS][QP], e4m3: dims permuted (dw_qcol)
    const int64_t kw0 = kbeg + w * DW_KEYS;
    const int nsteps = kw0 < kend ? (int)min((int64_t)DW_STEPS, (kend - kw0 + DW_BK - 1) / DW_BK) : 0;
#pragma unroll 1
    for (int e = 0; e < NE - 1; e++) dw_issue<HD, RT, E4>(ring, kv, kw0, kend, 2 * nsteps, e, Hkv, kvh, lane);

    // TREE: the ancestor masks of the nodes, worked out while the first entries are in flight
    unsigned long long *anc_s = (unsigned long long *)(base + P::TREE_OFF);
    if (TREE) cu_tree_ancestors(anc_s, (int *)(anc_s + CU_TREE_MAX_NODES), tree_parent, n);
    for (int e = tid; e < P::ROWS * (HD / 4); e += DW_WARPS * 32) {
        const int i = e / (HD / 4), d = (e % (HD / 4)) * 4, r = rb0 + i;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < rows_here) v = *(const float4 *)(q + ((int64_t)(r / G) * H + kvh * G + r % G) * HD + d);
        *(uint32_t *)(Qs + i * QP + dw_qcol<E4>(d)) = dw_bf2(v.x, v.y);
        *(uint32_t *)(Qs + i * QP + dw_qcol<E4>(d + 2)) = dw_bf2(v.z, v.w);
    }
    // The lane's rows: tile rt, rows 2c and 2c + 1 (j = 0, 1): last visible key relative to kbeg, -1 for none
    // (padding rows, rows before the chunk).
    int qr[RT][2];
    unsigned long long anc[RT][2];
    const int pr = (int)max((int64_t)-1024, min((int64_t)1024, p0 - kbeg));
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = rt * 8 + 2 * c + j, r = rb0 + i;
            const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
            qr[rt][j] = i < rows_here ? (int)max((int64_t)-1, min((int64_t)1024, qpos - kbeg)) : -1;
            anc[rt][j] = TREE && i < rows_here ? anc_s[r / G] : 0ull;
        }
    __syncthreads(); // Q is in shared memory

    float o[RT][MD][4], m[RT][2], l[RT][2]; // O^T fragments; per row: running max (log2 units), lane's sum
#pragma unroll
    for (int rt = 0; rt < RT; rt++) {
#pragma unroll
        for (int md = 0; md < MD; md++) o[rt][md][0] = o[rt][md][1] = o[rt][md][2] = o[rt][md][3] = 0.f;
        m[rt][0] = m[rt][1] = -INFINITY, l[rt][0] = l[rt][1] = 0.f;
    }

#pragma unroll 1
    for (int t = 0; t < nsteps; t++) {
        // ---- K of step t: S^T = K Q^T ----
        dw_issue<HD, RT, E4>(ring, kv, kw0, kend, 2 * nsteps, 2 * t + NE - 1, Hkv, kvh, lane); // slot of V(t-1)
        dw_wait<NE - 1>(); // this lane's copies of K(t) have landed
        __syncwarp();      // ... and the other lanes'
        const char *Ke = ring + ((2 * t) % NE) * P::ENTRY;
        float sa[RT][4]; // one chain over the k-steps (memory-bound: latency is hidden by the ring)
#pragma unroll
        for (int rt = 0; rt < RT; rt++) sa[rt][0] = sa[rt][1] = sa[rt][2] = sa[rt][3] = 0.f;
        float ks0 = 0.f, ks1 = 0.f;
        if (E4) ks0 = ((const float *)(Ke + P::SCALES))[g], ks1 = ((const float *)(Ke + P::SCALES))[g + 8];
#pragma unroll
        for (int kp = 0; kp < HD / 32; kp++) { // k-steps 2kp, 2kp + 1: dims [32kp, 32kp + 32)
            uint32_t ka[4], kb[4];
            if (E4) { // keys g, g+8: 8 bytes each at dims 32kp + 8c (permuted: see dw_qcol)
                const uint2 x0 = *(const uint2 *)(Ke + g * KP + 32 * kp + 8 * c);
                const uint2 x1 = *(const uint2 *)(Ke + (g + 8) * KP + 32 * kp + 8 * c);
                ka[0] = dw_e4_pair(x0.x, ks0), ka[1] = dw_e4_pair(x1.x, ks1);
                ka[2] = dw_e4_pair(x0.x >> 16, ks0), ka[3] = dw_e4_pair(x1.x >> 16, ks1);
                kb[0] = dw_e4_pair(x0.y, ks0), kb[1] = dw_e4_pair(x1.y, ks1);
                kb[2] = dw_e4_pair(x0.y >> 16, ks0), kb[3] = dw_e4_pair(x1.y >> 16, ks1);
            } else { // a0..a3: keys 0-7 | 8-15 (lanes 0-7 | 8-15 address them) x dims +0 | +8 (lanes 16-31)
                const char *kr = Ke + ((lane & 7) + ((lane >> 3) & 1) * 8) * KP + (32 * kp + (lane >> 4) * 8) * 2;
                dw_ldsm_x4(ka, kr);
                dw_ldsm_x4(kb, kr + 32);
            }
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                uint32_t qb[4]; // b0, b1 of k-step 2kp, then of 2kp + 1: rows rt*8 + 0-7 (lanes 0-7 of each 8)
                dw_ldsm_x4(qb, Qs + (rt * 8 + (lane & 7)) * QP + 32 * kp + (lane >> 3) * 8);
                dw_mma(sa[rt], ka, qb[0], qb[1]);
                dw_mma(sa[rt], kb, qb[2], qb[3]);
            }
        }

        // ---- online softmax: lane holds keys g, g+8 (x = 0,1 | 2,3) of rows 2c, 2c+1 (x even | odd) ----
        const int key0 = w * DW_KEYS + t * DW_BK + g; // relative to kbeg
        uint32_t pb[RT][2];                           // P^T as the B operand: keys 2c.. | 2c+8.. of row g
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            float v[4], alpha[2];
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const bool vis = dw_sees<TREE>(key0 + 8 * (x >> 1), qr[rt][x & 1], pr, anc[rt][x & 1]);
                v[x] = vis ? sa[rt][x] * scale_log2 : -INFINITY;
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float mx = fmaxf(v[j], v[j + 2]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float mn = fmaxf(m[rt][j], mx);
                // mn == -inf: no visible key yet, everything stays zero; m == -inf gives alpha = 0
                if (mn != -INFINITY) {
                    alpha[j] = exp2f(m[rt][j] - mn);
                    v[j] = exp2f(v[j] - mn), v[j + 2] = exp2f(v[j + 2] - mn); // masked: exp2(-inf) = 0
                } else {
                    alpha[j] = 1.f, v[j] = v[j + 2] = 0.f;
                }
                l[rt][j] = __fmaf_rn(l[rt][j], alpha[j], v[j] + v[j + 2]);
                m[rt][j] = mn;
            }
            pb[rt][0] = dw_movt(dw_bf2(v[0], v[1]));
            pb[rt][1] = dw_movt(dw_bf2(v[2], v[3]));
#pragma unroll
            for (int md = 0; md < MD; md++) {
                o[rt][md][0] *= alpha[0], o[rt][md][1] *= alpha[1];
                o[rt][md][2] *= alpha[0], o[rt][md][3] *= alpha[1];
            }
        }
        __syncwarp(); // every lane is done with K(t): its slot is refilled next

        // ---- V of step t: O^T += V^T P^T ----
        dw_issue<HD, RT, E4>(ring, kv, kw0, kend, 2 * nsteps, 2 * t + NE, Hkv, kvh, lane); // slot of K(t)
        dw_wait<NE - 1>();
        __syncwarp();
        const char *Ve = ring + ((2 * t + 1) % NE) * P::ENTRY;
        if (E4) { // keys 2c, 2c+1, 2c+8, 2c+9 at dims 64jg + 8g .. +8: m-tile 4jg + i has dims (2i, 2i+1) there
            const float *vsc = (const float *)(Ve + P::SCALES);
            const float vs[4] = {vsc[2 * c], vsc[2 * c + 1], vsc[2 * c + 8], vsc[2 * c + 9]};
#pragma unroll
            for (int jg = 0; jg < HD / 64; jg++) {
                uint32_t wv[4][4]; // [key][dim pair i]: bf16x2
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const uint2 x = *(const uint2 *)(Ve + (2 * c + (kk & 1) + (kk >> 1) * 8) * VP + 64 * jg + 8 * g);
                    wv[kk][0] = dw_e4_pair(x.x, vs[kk]), wv[kk][1] = dw_e4_pair(x.x >> 16, vs[kk]);
                    wv[kk][2] = dw_e4_pair(x.y, vs[kk]), wv[kk][3] = dw_e4_pair(x.y >> 16, vs[kk]);
                }
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    uint32_t va[4]; // rows g | g+8 = dims 2i | 2i+1 of the lane's 8, keys (2c, 2c+1) | (2c+8, 2c+9)
                    va[0] = __byte_perm(wv[0][i], wv[1][i], 0x5410), va[1] = __byte_perm(wv[0][i], wv[1][i], 0x7632);
                    va[2] = __byte_perm(wv[2][i], wv[3][i], 0x5410), va[3] = __byte_perm(wv[2][i], wv[3][i], 0x7632);
#pragma unroll
                    for (int rt = 0; rt < RT; rt++) dw_mma(o[rt][4 * jg + i], va, pb[rt][0], pb[rt][1]);
                }
            }
        } else { // a0..a3 = V^T (dims 0-7 | 8-15) x (keys 0-7 | 8-15): lanes 0-7, 8-15, 16-23, 24-31 address them
            const char *vr = Ve + ((lane >> 4) * 8 + (lane & 7)) * VP + ((lane >> 3) & 1) * 16;
#pragma unroll
            for (int md = 0; md < MD; md++) {
                uint32_t va[4];
                dw_ldsm_x4_trans(va, vr + md * 32);
#pragma unroll
                for (int rt = 0; rt < RT; rt++) dw_mma(o[rt][md], va, pb[rt][0], pb[rt][1]);
            }
        }
        __syncwarp(); // every lane is done with V(t)
    }
    dw_wait<0>(); // nothing may land in the ring once it holds the merge buffers

    // ---- merge the 4 warps in order (one barrier), write the chunk's partials ----
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < 2; j++) { // the row's sum over its 8 lanes: the same fixed tree on every lane
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 4);
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 8);
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 16);
        }
    __syncthreads(); // every warp has left its ring and Q
    float4 *mo = (float4 *)base;
    float2 *mls = (float2 *)(base + P::MAIN);
#pragma unroll
    for (int rt = 0; rt < RT; rt++) {
#pragma unroll
        for (int md = 0; md < MD; md++)
            mo[((w * RT + rt) * MD + md) * 32 + lane] =
                make_float4(o[rt][md][0], o[rt][md][1], o[rt][md][2], o[rt][md][3]);
        if (g == 0)
#pragma unroll
            for (int j = 0; j < 2; j++) mls[w * P::ROWS + rt * 8 + 2 * c + j] = make_float2(m[rt][j], l[rt][j]);
    }
    __syncthreads();
    // item = (row tile, 64 dims = 4 m-tiles), spread over the warps
    for (int item = w; item < RT * (HD / 64); item += DW_WARPS) {
        const int rt = item / (HD / 64), jg = item % (HD / 64);
        float f[2][DW_WARPS], M[2], L[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = rt * 8 + 2 * c + j;
            M[j] = -INFINITY;
#pragma unroll
            for (int ww = 0; ww < DW_WARPS; ww++) M[j] = fmaxf(M[j], mls[ww * P::ROWS + i].x);
            L[j] = 0.f;
#pragma unroll
            for (int ww = 0; ww < DW_WARPS; ww++) { // a warp without a visible key (max -inf) adds nothing
                const float2 e = mls[ww * P::ROWS + i];
                f[j][ww] = e.x == -INFINITY ? 0.f : exp2f(e.x - M[j]);
                L[j] = ww ? __fmaf_rn(f[j][ww], e.y, L[j]) : f[j][ww] * e.y;
            }
        }
        float acc[4][4]; // m-tile 4jg + i4: (dim row g | g+8) x (row 2c | 2c+1), as the O^T fragment
#pragma unroll
        for (int ww = 0; ww < DW_WARPS; ww++)
#pragma unroll
            for (int i4 = 0; i4 < 4; i4++) {
                const float4 v = mo[((ww * RT + rt) * MD + 4 * jg + i4) * 32 + lane];
                const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int e = 0; e < 4; e++)
                    acc[i4][e] = ww ? __fmaf_rn(f[e & 1][ww], x[e], acc[i4][e]) : f[e & 1][ww] * x[e];
            }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = rt * 8 + 2 * c + j, r = rb0 + i;
            if (i >= rows_here) continue;
            const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
            if (qpos < kbeg) continue; // sees no key of this chunk: the combine does not read this slot
            const int64_t th = (int64_t)(r / G) * H + kvh * G + r % G;
            float *orow = opart + (th * zslots + z) * HD + 64 * jg;
            if (E4) { // m-tile 4jg + i4, dim row g + 8h holds dim 8g + 2*i4 + h: 8 consecutive dims
                *(float4 *)(orow + 8 * g) = make_float4(acc[0][j], acc[0][2 + j], acc[1][j], acc[1][2 + j]);
                *(float4 *)(orow + 8 * g + 4) = make_float4(acc[2][j], acc[2][2 + j], acc[3][j], acc[3][2 + j]);
            } else { // dim row g + 8h of m-tile 4jg + i4 is dim 16*i4 + g + 8h
#pragma unroll
                for (int i4 = 0; i4 < 4; i4++) orow[16 * i4 + g] = acc[i4][j], orow[16 * i4 + g + 8] = acc[i4][2 + j];
            }
            if (jg == 0 && g == 0) *(float2 *)(ml + (th * zslots + z) * 2) = make_float2(M[j], L[j]);
        }
    }
}

template <int HD, int RT, bool E4, bool TREE>
static void dw_launch(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                      const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                      int causal, const int32_t *tree_parent) {
    typedef dw_plan<HD, RT, E4> P;
    // > 48 KB of shared memory: opted in once per device and instantiation (a racing second set is harmless)
    static int opted_in[64];
    const int dev = cu_of(be)->device;
    if (dev < 0 || dev >= 64 || !opted_in[dev]) {
        FD_CUDA_CHECK(cudaFuncSetAttribute(k_attn_decode_warp<HD, RT, E4, TREE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, P::TOTAL));
        if (dev >= 0 && dev < 64) opted_in[dev] = 1;
    }
    const int64_t rows = (int64_t)n * (H / Hkv);
    dim3 grid((unsigned)((rows + P::ROWS - 1) / P::ROWS), (unsigned)zslots, (unsigned)Hkv);
    cu_launch(be, (k_attn_decode_warp<HD, RT, E4, TREE>), grid, DW_WARPS * 32, P::TOTAL, opart, ml, q, kv, pos0,
              pos_dev, n, H, Hkv, capacity, zslots, scale * 1.4426950408889634f, causal, tree_parent);
}

// Rows per block: 8 (a decode step's group fits one n8 tile), else 16, else (head dims up to 128) 32; O^T takes
// RT * HD / 4 registers per lane, at most 128.
template <int HD, bool E4, bool TREE>
static void dw_dispatch(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                        const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                        int causal, const int32_t *tree_parent) {
    const int64_t rows = (int64_t)n * (H / Hkv);
#define FD_DW_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
    if (rows <= 8) {
        dw_launch<HD, 1, E4, TREE>(FD_DW_ARGS);
    } else if constexpr (HD == 256) {
        dw_launch<HD, 2, E4, TREE>(FD_DW_ARGS);
    } else {
        if (rows <= 16)
            dw_launch<HD, 2, E4, TREE>(FD_DW_ARGS);
        else
            dw_launch<HD, 4, E4, TREE>(FD_DW_ARGS);
    }
#undef FD_DW_ARGS
}

void cu_decode_warp_chunks(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                           const int64_t *pos_dev, int n, int H, int Hkv, int hd, int64_t capacity, int64_t zslots,
                           float scale, int causal, const int32_t *tree_parent) {
    FD_CHECK(hd == 64 || hd == 128 || hd == 256, "decode attention (warp): head_dim %d (64/128/256 only)", hd);
    const bool e4 = kv.k8 != NULL, tree = tree_parent != NULL;
#define FD_DW_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
#define FD_DW_HD(HD)                                                                                                   \
    (e4 ? (tree ? dw_dispatch<HD, true, true>(FD_DW_ARGS) : dw_dispatch<HD, true, false>(FD_DW_ARGS))                  \
        : (tree ? dw_dispatch<HD, false, true>(FD_DW_ARGS) : dw_dispatch<HD, false, false>(FD_DW_ARGS)))
    if (hd == 64)
        FD_DW_HD(64);
    else if (hd == 128)
        FD_DW_HD(128);
    else
        FD_DW_HD(256);
#undef FD_DW_HD
#undef FD_DW_ARGS
}
