// Decode / verify attention with every query row of a kv head in one block (route attn_decode=rows), head_dim 256:
// the same calls, inputs and partials as attention_decode_warp.cu (whose per-element helpers it shares), feeding
// the same k_attn_combine.
//
// Why: the warp kernel holds O^T for all 256 dims in a warp, so a block holds at most 16 rows; a verify step of 8
// tokens (48 rows a kv head for GQA 6) ran as 3 row blocks that each streamed every chunk's K and V (27B layer at
// 128K: n = 1 0.182 ms, n = 8 0.398 ms on the H200, docs/perf-notes.md session 13). Here the 4 warps split the head
// dims instead of the keys, so a block's O^T is 64 dims a warp and a block takes up to 48 rows; K and V stream once.
//
// Work decomposition. Block = 4 warps on one 512-key chunk (blockIdx.y) of one kv head (blockIdx.z) for 8*RT query
// rows (blockIdx.x; rows r = token * G + head-of-group). Warp w owns head dims [64w, 64w + 64) and streams exactly
// those bytes of every key of the chunk, in steps of 16 keys, through its own cp.async ring (as the warp kernel,
// K of the next step in flight while V of this one is consumed). Per step:
//   S^T partial = K[:, quarter w] Q[:, quarter w]^T   4 mma k-steps, one chain, written to shared memory
//   barrier (the block's only one a step; the partials are double-buffered, so one barrier orders both uses)
//   S^T = ((S_0 + S_1) + S_2) + S_3                   every warp the same sum in the same order: the same bits
//   online softmax, P^T                               as the warp kernel, computed identically by all 4 warps
//   O^T[quarter w] += V[:, quarter w]^T P^T            4 m-tiles per row tile
// so the running max and sum never need merging and a warp writes its own 64 dims of the chunk's partials.
// Batch invariance (attention_decode.cu's contract): a row's arithmetic is the same whatever n, RT, its row block or
// its place in the tiles (mma columns are independent; the dim split, the partial-sum order and the 16-key steps
// are fixed), so route rows serves every n = 1..16 itself. It is NOT bitwise equal to route warp (the S sum order
// differs): a run uses one route for every call. Other head dims run the warp kernel (counted as warp).
// tools/dw_emu.cpp runs this file on the host as well ("rows").
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"
#include "cuda/decode_warp_math.cuh"
#include "cuda/decode_warp_ptx.cuh"
#include "cuda/tree.cuh"

#define DR_HD    256
#define DR_WARPS 4                   // head-dim quarters = warps per block
#define DR_QD    (DR_HD / DR_WARPS)  // dims per warp
#define DR_BK    16                  // keys per step
#define DR_STEPS (CU_DECODE_CHUNK / DR_BK)

// Shared-memory plan (bytes, 16-byte aligned regions). Ring: per warp NE entries, each the K or V quarter tile of one
// step: bf16 rows of 2*64 + 16 bytes (conflict-free ldmatrix) or fp8 rows of 64 + 16 bytes, then (e4m3) the 16 row
// scales. Q: bf16 [ROWS][HD + 8] (e4m3: dims permuted, dw_qcol). S: the 4 warps' partial S^T fragments, two
// buffers. Last, the tree's ancestor masks and parents. Two blocks per SM (110 KB each).
template <int RT, bool E4> struct dr_plan {
    static constexpr int ROWS = 8 * RT;
    static constexpr int PITCH = E4 ? DR_QD + 16 : 2 * DR_QD + 16;
    static constexpr int QBYTES = E4 ? DR_QD : 2 * DR_QD; // a warp's bytes of one cache row
    static constexpr int OCT = QBYTES / 16;
    static constexpr int SCALES = DR_BK * PITCH;
    static constexpr int ENTRY = DR_BK * PITCH + (E4 ? DR_BK * 4 : 0);
    static constexpr int QP = DR_HD + 8;
    static constexpr int Q_OFF = 0;
    static constexpr int Q_BYTES = ROWS * QP * 2;
    static constexpr int S_OFF = Q_OFF + Q_BYTES;
    static constexpr int S_BYTES = 2 * DR_WARPS * RT * 32 * 16;
    static constexpr int TREE_OFF = S_OFF + S_BYTES;
    static constexpr int RING_OFF = TREE_OFF + CU_TREE_MAX_NODES * 12 + 16 - (CU_TREE_MAX_NODES * 12) % 16;
    static constexpr int BUDGET = 110 * 1024;
    static constexpr int NE_FIT = (BUDGET - RING_OFF) / (DR_WARPS * ENTRY);
    static constexpr int NE = NE_FIT > 8 ? 8 : NE_FIT;
    static constexpr int TOTAL = RING_OFF + DR_WARPS * NE * ENTRY;
    static_assert(NE >= 4, "decode attention (rows): too little shared memory for 4 ring entries");
    static_assert(OCT % 2 == 0 && ENTRY % 16 == 0 && PITCH % 16 == 0 && RING_OFF % 16 == 0, "16-byte copies");
};

// Entry e of warp w's stream (K of step e/2 for even e, its V for odd e; dims [64w, 64w + 64)) into ring slot
// e % NE; keys at or past kend are zero-filled. Always commits a group, so wait_group counts stay uniform.
template <int RT, bool E4>
static __device__ __forceinline__ void dr_issue(char *ring, const cu_kv &kv, int64_t kbeg, int64_t kend, int nent,
                                                int e, int Hkv, int kvh, int w, int lane) {
    typedef dr_plan<RT, E4> P;
    if (e < nent) {
        char *dst = ring + (e % P::NE) * P::ENTRY;
        const int plane = e & 1;
        const int64_t k0 = kbeg + (int64_t)(e >> 1) * DR_BK;
        const cu_kv_tile pt = cu_kv_tile_at(kv, k0, min(kend, k0 + DR_BK)); // 16-aligned: one page
        const char *src = E4 ? (const char *)(plane ? kv.v8 : kv.k8) : (const char *)(plane ? kv.v : kv.k);
        const int row_bytes = E4 ? DR_HD : 2 * DR_HD;
#pragma unroll
        for (int u = 0; u < P::OCT / 2; u++) { // 16 rows x OCT copies over 32 lanes
            const int piece = lane + 32 * u, j = piece / P::OCT, o = piece % P::OCT;
            const bool ok = k0 + j < kend;
            const int64_t slot = ok ? cu_kv_tile_slot(pt, k0, k0 + j) : 0;
            dw_cp16(dst + j * P::PITCH + o * 16, src + (slot * Hkv + kvh) * row_bytes + w * P::QBYTES + o * 16, ok);
        }
        if (E4 && lane < DR_BK) {
            const bool ok = k0 + lane < kend;
            const int64_t slot = ok ? cu_kv_tile_slot(pt, k0, k0 + lane) : 0;
            dw_cp4(dst + P::SCALES + lane * 4, (plane ? kv.vs : kv.ks) + slot * Hkv + kvh, ok);
        }
    }
    dw_commit();
}

// q [n, H, 256] f32 at positions p0.. (p0 = *pos_dev when given); writes partials for chunk blockIdx.y: opart
// [n*H][zslots][256], ml [n*H][zslots][2] = (max in log2 units, sum), for the rows that see a key of the chunk.
template <int RT, bool E4, bool TREE>
__global__ void __launch_bounds__(DR_WARPS * 32, 2)
    k_attn_decode_rows(float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n,
                       int H, int Hkv, int64_t capacity, int64_t zslots, float scale_log2, int causal,
                       const int32_t *tree_parent) {
    CU_PDL_ENTER();
    typedef dr_plan<RT, E4> P;
    constexpr int NE = P::NE, QP = P::QP, PITCH = P::PITCH, MD = DR_QD / 16;
    extern __shared__ float4 sm4[];
    char *base = (char *)sm4;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c = lane & 3;
    const int kvh = blockIdx.z, G = H / Hkv, R = n * G, rb0 = blockIdx.x * P::ROWS;
    const int64_t z = blockIdx.y, kbeg = z * CU_DECODE_CHUNK;
    const int64_t p0 = pos_dev ? *pos_dev : pos0;
    if (p0 < 0 || p0 + n > capacity) __trap(); // the caller promised live keys inside the cache
    const int rows_here = min(P::ROWS, R - rb0);
    const int64_t klast = causal ? p0 + (rb0 + rows_here - 1) / G : p0 + n - 1; // last key any row here sees
    if (kbeg > klast) return; // the whole block: a chunk past the live keys
    const int64_t kend = min(klast + 1, kbeg + CU_DECODE_CHUNK);
    const int nsteps = (int)((kend - kbeg + DR_BK - 1) / DR_BK); // the same on every warp: one barrier a step
    char *ring = base + P::RING_OFF + w * NE * P::ENTRY;
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(base + P::Q_OFF);
    float4 *Sp = (float4 *)(base + P::S_OFF); // [buffer][warp][row tile][lane]
#pragma unroll 1
    for (int e = 0; e < NE - 1; e++) dr_issue<RT, E4>(ring, kv, kbeg, kend, 2 * nsteps, e, Hkv, kvh, w, lane);

    unsigned long long *anc_s = (unsigned long long *)(base + P::TREE_OFF);
    if (TREE) cu_tree_ancestors(anc_s, (int *)(anc_s + CU_TREE_MAX_NODES), tree_parent, n);
    for (int e = tid; e < P::ROWS * (DR_HD / 4); e += DR_WARPS * 32) {
        const int i = e / (DR_HD / 4), d = (e % (DR_HD / 4)) * 4, r = rb0 + i;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < rows_here) v = *(const float4 *)(q + ((int64_t)(r / G) * H + kvh * G + r % G) * DR_HD + d);
        *(uint32_t *)(Qs + i * QP + dw_qcol<E4>(d)) = dw_bf2(v.x, v.y);
        *(uint32_t *)(Qs + i * QP + dw_qcol<E4>(d + 2)) = dw_bf2(v.z, v.w);
    }
    // The lane's rows: tile rt, rows 2c and 2c + 1 (j): last visible key relative to kbeg, -1 for none, as the two
    // 16-bit halves of qr[rt] (-1..1024: exact). A tree row's ancestor mask is read from shared memory where it is
    // used. Both to keep 48 rows in 255 registers without spills (O^T alone takes 96).
    int qr[RT];
    const int pr = (int)max((int64_t)-1024, min((int64_t)1024, p0 - kbeg));
#pragma unroll
    for (int rt = 0; rt < RT; rt++) {
        int h[2];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = rt * 8 + 2 * c + j, r = rb0 + i;
            const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
            h[j] = i < rows_here ? (int)max((int64_t)-1, min((int64_t)1024, qpos - kbeg)) : -1;
        }
        qr[rt] = (h[0] & 0xffff) | (h[1] << 16);
    }
    __syncthreads(); // Q (and the tree masks) are in shared memory

    float o[RT][MD][4], m[RT][2], l[RT][2]; // O^T fragments of the warp's 64 dims; per row: max (log2), lane's sum
#pragma unroll
    for (int rt = 0; rt < RT; rt++) {
#pragma unroll
        for (int md = 0; md < MD; md++) o[rt][md][0] = o[rt][md][1] = o[rt][md][2] = o[rt][md][3] = 0.f;
        m[rt][0] = m[rt][1] = -INFINITY, l[rt][0] = l[rt][1] = 0.f;
    }

#pragma unroll 1
    for (int t = 0; t < nsteps; t++) {
        // ---- K of step t: the warp's partial S^T = K[:, quarter] Q[:, quarter]^T ----
        dr_issue<RT, E4>(ring, kv, kbeg, kend, 2 * nsteps, 2 * t + NE - 1, Hkv, kvh, w, lane);
        dw_wait<NE - 1>();
        __syncwarp();
        const char *Ke = ring + ((2 * t) % NE) * P::ENTRY;
        float sa[RT][4];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) sa[rt][0] = sa[rt][1] = sa[rt][2] = sa[rt][3] = 0.f;
        float ks0 = 0.f, ks1 = 0.f;
        if (E4) ks0 = ((const float *)(Ke + P::SCALES))[g], ks1 = ((const float *)(Ke + P::SCALES))[g + 8];
#pragma unroll
        for (int kp = 0; kp < DR_QD / 32; kp++) { // dims 64w + [32kp, 32kp + 32)
            uint32_t ka[4], kb[4];
            if (E4) { // keys g, g+8: 8 bytes each at dims 32kp + 8c of the quarter (permuted: see dw_qcol)
                const uint2 x0 = *(const uint2 *)(Ke + g * PITCH + 32 * kp + 8 * c);
                const uint2 x1 = *(const uint2 *)(Ke + (g + 8) * PITCH + 32 * kp + 8 * c);
                ka[0] = dw_e4_pair(x0.x, ks0), ka[1] = dw_e4_pair(x1.x, ks1);
                ka[2] = dw_e4_pair(x0.x >> 16, ks0), ka[3] = dw_e4_pair(x1.x >> 16, ks1);
                kb[0] = dw_e4_pair(x0.y, ks0), kb[1] = dw_e4_pair(x1.y, ks1);
                kb[2] = dw_e4_pair(x0.y >> 16, ks0), kb[3] = dw_e4_pair(x1.y >> 16, ks1);
            } else {
                const char *kr = Ke + ((lane & 7) + ((lane >> 3) & 1) * 8) * PITCH + (32 * kp + (lane >> 4) * 8) * 2;
                dw_ldsm_x4(ka, kr);
                dw_ldsm_x4(kb, kr + 32);
            }
#pragma unroll
            for (int rt = 0; rt < RT; rt++) {
                uint32_t qb[4];
                dw_ldsm_x4(qb, Qs + (rt * 8 + (lane & 7)) * QP + DR_QD * w + 32 * kp + (lane >> 3) * 8);
                dw_mma(sa[rt], ka, qb[0], qb[1]);
                dw_mma(sa[rt], kb, qb[2], qb[3]);
            }
        }
        float4 *Sbuf = Sp + (t & 1) * DR_WARPS * RT * 32;
#pragma unroll
        for (int rt = 0; rt < RT; rt++)
            Sbuf[(w * RT + rt) * 32 + lane] = make_float4(sa[rt][0], sa[rt][1], sa[rt][2], sa[rt][3]);
        __syncthreads(); // the 4 partials of step t are in; every warp has read those of step t - 2 (other buffer)

        // ---- S^T = ((S_0 + S_1) + S_2) + S_3, online softmax (as the warp kernel) ----
        const int key0 = t * DR_BK + g; // relative to kbeg
        uint32_t pb[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; rt++) {
            float4 s = Sbuf[rt * 32 + lane];
#pragma unroll
            for (int ww = 1; ww < DR_WARPS; ww++) {
                const float4 x = Sbuf[(ww * RT + rt) * 32 + lane];
                s.x += x.x, s.y += x.y, s.z += x.z, s.w += x.w;
            }
            const float sv[4] = {s.x, s.y, s.z, s.w};
            float v[4], alpha[2];
            unsigned long long anc[2] = {0ull, 0ull};
            if (TREE)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int i = rt * 8 + 2 * c + j;
                    anc[j] = i < rows_here ? anc_s[(rb0 + i) / G] : 0ull;
                }
#pragma unroll
            const int qrow[2] = {(int)(short)(qr[rt] & 0xffff), qr[rt] >> 16};
#pragma unroll
            for (int x = 0; x < 4; x++) {
                const bool vis = dw_sees<TREE>(key0 + 8 * (x >> 1), qrow[x & 1], pr, anc[x & 1]);
                v[x] = vis ? sv[x] * scale_log2 : -INFINITY;
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                float mx = fmaxf(v[j], v[j + 2]);
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
                const float mn = fmaxf(m[rt][j], mx);
                if (mn != -INFINITY) {
                    alpha[j] = exp2f(m[rt][j] - mn);
                    v[j] = exp2f(v[j] - mn), v[j + 2] = exp2f(v[j + 2] - mn);
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
        __syncwarp(); // every lane is done with K(t)

        // ---- V of step t: O^T[quarter] += V[:, quarter]^T P^T ----
        dr_issue<RT, E4>(ring, kv, kbeg, kend, 2 * nsteps, 2 * t + NE, Hkv, kvh, w, lane);
        dw_wait<NE - 1>();
        __syncwarp();
        const char *Ve = ring + ((2 * t + 1) % NE) * P::ENTRY;
        if (E4) { // keys 2c, 2c+1, 2c+8, 2c+9 at quarter dims 8g .. +8: m-tile i has dims (2i, 2i+1) there
            const float *vsc = (const float *)(Ve + P::SCALES);
            const float vs[4] = {vsc[2 * c], vsc[2 * c + 1], vsc[2 * c + 8], vsc[2 * c + 9]};
            uint32_t wv[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                const uint2 x = *(const uint2 *)(Ve + (2 * c + (kk & 1) + (kk >> 1) * 8) * PITCH + 8 * g);
                wv[kk][0] = dw_e4_pair(x.x, vs[kk]), wv[kk][1] = dw_e4_pair(x.x >> 16, vs[kk]);
                wv[kk][2] = dw_e4_pair(x.y, vs[kk]), wv[kk][3] = dw_e4_pair(x.y >> 16, vs[kk]);
            }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t va[4];
                va[0] = __byte_perm(wv[0][i], wv[1][i], 0x5410), va[1] = __byte_perm(wv[0][i], wv[1][i], 0x7632);
                va[2] = __byte_perm(wv[2][i], wv[3][i], 0x5410), va[3] = __byte_perm(wv[2][i], wv[3][i], 0x7632);
#pragma unroll
                for (int rt = 0; rt < RT; rt++) dw_mma(o[rt][i], va, pb[rt][0], pb[rt][1]);
            }
        } else {
            const char *vr = Ve + ((lane >> 4) * 8 + (lane & 7)) * PITCH + ((lane >> 3) & 1) * 16;
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
    dw_wait<0>();

    // ---- the chunk's partials: the warp's 64 dims; (max, sum) are the same on every warp, warp 0 writes them ----
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 4);
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 8);
            l[rt][j] += __shfl_xor_sync(0xffffffffu, l[rt][j], 16);
        }
#pragma unroll
    for (int rt = 0; rt < RT; rt++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = rt * 8 + 2 * c + j, r = rb0 + i;
            if (i >= rows_here) continue;
            const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
            if (qpos < kbeg) continue; // sees no key of this chunk: the combine does not read this slot
            const int64_t th = (int64_t)(r / G) * H + kvh * G + r % G;
            float *orow = opart + (th * zslots + z) * DR_HD + DR_QD * w;
            if (E4) { // m-tile i4, dim row g + 8h holds quarter dim 8g + 2*i4 + h
                *(float4 *)(orow + 8 * g) = make_float4(o[rt][0][j], o[rt][0][2 + j], o[rt][1][j], o[rt][1][2 + j]);
                *(float4 *)(orow + 8 * g + 4) =
                    make_float4(o[rt][2][j], o[rt][2][2 + j], o[rt][3][j], o[rt][3][2 + j]);
            } else { // dim row g + 8h of m-tile i4 is quarter dim 16*i4 + g + 8h
#pragma unroll
                for (int i4 = 0; i4 < MD; i4++) orow[16 * i4 + g] = o[rt][i4][j], orow[16 * i4 + g + 8] = o[rt][i4][2 + j];
            }
            if (w == 0 && g == 0) *(float2 *)(ml + (th * zslots + z) * 2) = make_float2(m[rt][j], l[rt][j]);
        }
}

template <int RT, bool E4, bool TREE>
static void dr_launch(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                      const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                      int causal, const int32_t *tree_parent) {
    typedef dr_plan<RT, E4> P;
    static int opted_in[64]; // > 48 KB of shared memory: opted in once per device and instantiation
    const int dev = cu_of(be)->device;
    if (dev < 0 || dev >= 64 || !opted_in[dev]) {
        FD_CUDA_CHECK(cudaFuncSetAttribute(k_attn_decode_rows<RT, E4, TREE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, P::TOTAL));
        if (dev >= 0 && dev < 64) opted_in[dev] = 1;
    }
    const int64_t rows = (int64_t)n * (H / Hkv);
    dim3 grid((unsigned)((rows + P::ROWS - 1) / P::ROWS), (unsigned)zslots, (unsigned)Hkv);
    cu_launch(be, (k_attn_decode_rows<RT, E4, TREE>), grid, DR_WARPS * 32, P::TOTAL, opart, ml, q, kv, pos0, pos_dev,
              n, H, Hkv, capacity, zslots, scale * 1.4426950408889634f, causal, tree_parent);
}

// Rows per block: 8 (a decode step's group), 24, else 48 (O^T: RT * 16 registers per lane, 96 at most); more
// than 48 rows take several row blocks, each streaming the chunk (n = 16 at GQA 6: 2).
template <bool E4, bool TREE>
static void dr_dispatch(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                        const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                        int causal, const int32_t *tree_parent) {
    const int64_t rows = (int64_t)n * (H / Hkv);
#define FD_DR_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
    if (rows <= 8)
        dr_launch<1, E4, TREE>(FD_DR_ARGS);
    else if (rows <= 24)
        dr_launch<3, E4, TREE>(FD_DR_ARGS);
    else
        dr_launch<6, E4, TREE>(FD_DR_ARGS);
#undef FD_DR_ARGS
}

void cu_decode_rows_chunks(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                           const int64_t *pos_dev, int n, int H, int Hkv, int hd, int64_t capacity, int64_t zslots,
                           float scale, int causal, const int32_t *tree_parent) {
    FD_CHECK(hd == DR_HD, "decode attention (rows): head_dim %d (256 only; others run route warp)", hd);
    const bool e4 = kv.k8 != NULL, tree = tree_parent != NULL;
#define FD_DR_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
    if (e4)
        tree ? dr_dispatch<true, true>(FD_DR_ARGS) : dr_dispatch<true, false>(FD_DR_ARGS);
    else
        tree ? dr_dispatch<false, true>(FD_DR_ARGS) : dr_dispatch<false, false>(FD_DR_ARGS);
#undef FD_DR_ARGS
}
