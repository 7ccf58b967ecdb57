// Decode / verify attention: calls with n <= 16 query tokens (one decode step, a DFlash verify block, a drafter
// block) over a long KV cache, head_dim 64/128/256, both kv layouts. This file's chunk kernel is route
// attn_decode=blocked; =warp runs attention_decode_warp.cu's instead (same partials, the same combine below). Memory-bound: every K/V byte of the live
// context is read once per call, so the kernel is built to keep the loads streaming and to make each query row's
// result a function of that row alone.
//
// Batch invariance (docs/decisions.md): the key axis is cut into chunks on *absolute* boundaries
// (chunk z = keys [512z, 512z + 512)), never sized from n, pos0 or the grid. Within a chunk a row's scores, its
// online softmax and its P V products are computed by the same instruction sequence whichever block, warp or
// m-tile slot the row lands in; a row's partials are then merged over its own live chunks in increasing z. So row
// j of an n-token call is bitwise the 1-token call with the same history, and pos_dev + a larger capacity changes
// nothing but how many blocks exit at once.
//
// Work decomposition. Rows = (token, head-of-group) of one KV head, r = t*G + g, so one K/V read serves the GQA
// group and all n tokens. Block = 8 warps, rows [16*MT*blockIdx.x, +16*MT) (MT m-tiles of 16), one chunk
// (blockIdx.y) of one KV head (blockIdx.z). Keys stream through shared memory in tiles of 32 with cp.async
// (16-byte copies, NST stages in flight). Per tile:
//   S = Q K^T   mma.sync m16n8k16 bf16 -> fp32; items (m-tile, 8-key n-tile) spread over the warps, to shared
//   softmax     two threads per row, 16 keys each in order: running max / sum in fp32, P rounded to bf16
//   O += P V    warp w owns output dims [w*HD/8, (w+1)*HD/8) for every m-tile (acc in registers)
// e4m3: the fp8 bytes and their row scales are copied raw, then dequantised (value * scale -> bf16, the rounding
// of the old path) into one bf16 work tile, so the math afterwards is the bf16 path's.
// Each block writes unnormalised partials (acc, max, sum; max in log2 units) for the rows that see a key of its
// chunk; k_attn_combine merges them.
// Tree verify (TREE, cu_attention_decode_tree): the same kernel over the n nodes of a verify tree, causal in node
// order with one more mask, the row's ancestors (cuda/tree.cuh): a row sees the context and the keys of its
// ancestors and itself. Its last key is its own (pos0 + t), as in the causal case, so the chunks and the combine
// are the causal ones; every chunk up to the row's own holds a key it sees (context, or itself: n <= 64 < 512).
#include <math.h>
#include <stdint.h>

#include "cuda/cuda_common.h"
#include "cuda/tree.cuh"

#define DEC_BK    32 // keys per tile
#define DEC_WARPS 8
// Shared memory per block, as many stages as fit. A 16-row block (MT 1: a decode step, n * G <= 16) takes 112 KB so
// that two blocks share an SM and one block's barriers (three per tile) overlap the other's loads: measured on the
// H200 at 128K keys, 0.297 -> 0.223 ms (bf16) and 0.338 -> 0.249 ms (e4m3), perf-notes session 9. Larger blocks
// keep 200 KB, one per SM: at 112 KB they would have fewer than 3 stages, and 16-row blocks for a verify (the
// same keys read by more blocks) measured slower (n = 8 at 128K 0.449 -> 0.565 ms).
template <int MT> struct dec_budget {
    static constexpr int BYTES = MT == 1 ? 112 * 1024 : 200 * 1024, BLOCKS_PER_SM = MT == 1 ? 2 : 1;
};
static_assert(CU_DECODE_CHUNK % DEC_BK == 0, "tiles must not straddle chunks");

static __device__ __forceinline__ void dec_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
static __device__ __forceinline__ void ldsm_x2_trans(uint32_t r[2], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(p)));
}
// 16 bytes global -> shared; ok == false zero-fills the destination (no global read).
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}
static __device__ __forceinline__ void cp_async4(void *dst, const void *src, bool ok) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}
static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n");
}
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Shared-memory plan of one instantiation (bytes; every region starts 16-byte aligned).
template <int HD, int MT, bool E4> struct dec_plan {
    static constexpr int ROWS = 16 * MT;
    static constexpr int LDQ = HD + 8;     // bf16 row pitch of Q and of the K/V tiles: conflict-free ldmatrix
    static constexpr int LDS = DEC_BK + 8; // fp32 score pitch
    static constexpr int LDP = DEC_BK + 8; // bf16 P pitch (80 B rows: the 8 rows of an ldmatrix hit 8 bank groups)
    static constexpr int KV_TILE = DEC_BK * LDQ * 2;                                      // one bf16 K or V tile
    static constexpr int RAW_STAGE = E4 ? 2 * DEC_BK * HD + 2 * DEC_BK * 4 : 2 * KV_TILE; // K8, V8, ks, vs
    static constexpr int Q_BYTES = ROWS * LDQ * 2;
    static constexpr int WORK_BYTES = E4 ? 2 * KV_TILE : 0; // dequantised tile (e4m3 only)
    static constexpr int S_BYTES = ROWS * LDS * 4;
    static constexpr int P_BYTES = ROWS * LDP * 2;
    static constexpr int ROW_BYTES = ROWS * 4 * 3; // m, l, alpha per row
    static constexpr int FIXED = Q_BYTES + WORK_BYTES + S_BYTES + P_BYTES + ROW_BYTES;
    static constexpr int NST_FIT = (dec_budget<MT>::BYTES - FIXED) / RAW_STAGE;
    static constexpr int NST = NST_FIT > 6 ? 6 : NST_FIT; // stages in flight (>= 3 asserted below)
    static constexpr int TOTAL = FIXED + NST * RAW_STAGE;
    static_assert(NST >= 3, "decode attention: too little shared memory for 3 stages");
};

// The cache slot of key k0 + j of the tile pt (keys from k0); *ok = 0 and slot 0 (any address: the copy
// zero-fills) for a key at or past kend.
static __device__ __forceinline__ int64_t dec_key_slot(const cu_kv_tile &pt, int64_t k0, int j, int64_t kend,
                                                       bool *ok) {
    const int64_t kp = k0 + j;
    *ok = kp < kend;
    return *ok ? cu_kv_tile_slot(pt, k0, kp) : 0;
}

// Copies tile t (keys kbeg + 32t ..) into raw stage t % NST with cp.async; keys >= kend are zero-filled (no
// global read). Always commits a group, so the group count per loop iteration is uniform for cp.async.wait_group.
template <int HD, int MT, bool E4>
static __device__ __forceinline__ void dec_issue(char *raw, const cu_kv *kv, int64_t kbeg, int64_t kend, int ntiles,
                                                 int t, int Hkv, int kvh, int tid) {
    typedef dec_plan<HD, MT, E4> P;
    if (t < ntiles) {
        char *st = raw + (t % P::NST) * P::RAW_STAGE;
        const int64_t k0 = kbeg + (int64_t)t * DEC_BK;
        const cu_kv_tile pt = cu_kv_tile_at(*kv, k0, min(kend, k0 + DEC_BK)); // 32-aligned tile: one page, one read
        if (E4) {
            constexpr int OCT = HD / 16; // 16-byte pieces per fp8 row
            for (int e = tid; e < 2 * DEC_BK * OCT; e += DEC_WARPS * 32) {
                const int plane = e / (DEC_BK * OCT), j = (e / OCT) % DEC_BK, o = e % OCT;
                bool ok;
                const int64_t slot = dec_key_slot(pt, k0, j, kend, &ok);
                const uint8_t *src = (plane ? kv->v8 : kv->k8) + (slot * Hkv + kvh) * HD + o * 16;
                cp_async16(st + (plane * DEC_BK + j) * HD + o * 16, src, ok);
            }
            float *sc = (float *)(st + 2 * DEC_BK * HD);
            if (tid < 2 * DEC_BK) {
                const int plane = tid / DEC_BK, j = tid % DEC_BK;
                bool ok;
                const int64_t slot = dec_key_slot(pt, k0, j, kend, &ok);
                cp_async4(sc + tid, (plane ? kv->vs : kv->ks) + slot * Hkv + kvh, ok);
            }
        } else {
            constexpr int OCT = HD / 8; // 16-byte pieces per bf16 row
            for (int e = tid; e < 2 * DEC_BK * OCT; e += DEC_WARPS * 32) {
                const int plane = e / (DEC_BK * OCT), j = (e / OCT) % DEC_BK, o = e % OCT;
                bool ok;
                const int64_t slot = dec_key_slot(pt, k0, j, kend, &ok);
                const __nv_bfloat16 *src = (plane ? kv->v : kv->k) + (slot * Hkv + kvh) * HD + o * 8;
                cp_async16(st + plane * P::KV_TILE + (j * P::LDQ + o * 8) * 2, src, ok);
            }
        }
    }
    cp_async_commit();
}

// q [n, H, HD] f32 at positions p0.. (p0 = *pos_dev when given); writes partials for chunk blockIdx.y:
// opart [n*H][zslots][HD], ml [n*H][zslots][2] = (max in log2 units, sum). TREE: causal, and tree_parent [n] (backend
// memory) masks the keys at p0.. to the row's ancestors.
template <int HD, int MT, bool E4, bool TREE>
__global__ void __launch_bounds__(DEC_WARPS * 32, dec_budget<MT>::BLOCKS_PER_SM)
    k_attn_decode(float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev, int n, int H,
                  int Hkv, int64_t capacity, int64_t zslots, float scale_log2, int causal, const int32_t *tree_parent) {
    CU_PDL_ENTER();
    typedef dec_plan<HD, MT, E4> P;
    constexpr int NST = P::NST, LDQ = P::LDQ, LDS = P::LDS, LDP = P::LDP, NTW = HD / 64; // n-tiles per warp in P V
    extern __shared__ uint4 dec_sm[];
    char *base = (char *)dec_sm;
    char *raw = base;                                                 // NST raw stages
    __nv_bfloat16 *Qs = (__nv_bfloat16 *)(raw + NST * P::RAW_STAGE);  // [ROWS][LDQ]
    __nv_bfloat16 *work = (__nv_bfloat16 *)((char *)Qs + P::Q_BYTES); // e4m3: dequantised K | V
    float *Ss = (float *)((char *)work + P::WORK_BYTES);              // [ROWS][LDS]
    __nv_bfloat16 *Ps = (__nv_bfloat16 *)((char *)Ss + P::S_BYTES);   // [ROWS][LDP]
    float *m_s = (float *)((char *)Ps + P::P_BYTES), *l_s = m_s + P::ROWS, *alpha_s = l_s + P::ROWS;

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, c = lane & 3;
    const int kvh = blockIdx.z, G = H / Hkv, R = n * G, rb0 = blockIdx.x * P::ROWS;
    const int64_t z = blockIdx.y, kbeg = z * CU_DECODE_CHUNK;
    const int64_t p0 = pos_dev ? *pos_dev : pos0;
    if (p0 < 0 || p0 + n > capacity) __trap(); // the caller promised live keys inside the cache
    const int rows_here = min(P::ROWS, R - rb0), mtl = (rows_here + 15) / 16;   // live m-tiles
    const int64_t klast = causal ? p0 + (rb0 + rows_here - 1) / G : p0 + n - 1; // last key any row here sees
    if (kbeg > klast) return; // a chunk past the live keys (grid sized from capacity): nothing to do
    const int64_t kend = min(klast + 1, kbeg + CU_DECODE_CHUNK);
    const int ntiles = (int)((kend - kbeg + DEC_BK - 1) / DEC_BK);

#pragma unroll 1
    for (int t = 0; t < NST - 1; t++) dec_issue<HD, MT, E4>(raw, &kv, kbeg, kend, ntiles, t, Hkv, kvh, tid);
    // TREE: the ancestor masks of the nodes, worked out while the first tiles are in flight
    __shared__ unsigned long long anc_s[TREE ? CU_TREE_MAX_NODES : 1];
    __shared__ int par_s[TREE ? CU_TREE_MAX_NODES : 1];
    if (TREE) cu_tree_ancestors(anc_s, par_s, tree_parent, n);

    // Q rows of this block as bf16 (padding rows zero), row state.
    for (int e = tid; e < P::ROWS * (HD / 4); e += DEC_WARPS * 32) {
        const int i = e / (HD / 4), d = (e % (HD / 4)) * 4, r = rb0 + i;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (i < rows_here) v = *(const float4 *)(q + ((int64_t)(r / G) * H + kvh * G + r % G) * HD + d);
        __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        *(uint2 *)(Qs + i * LDQ + d) = make_uint2(*(uint32_t *)&lo, *(uint32_t *)&hi);
    }
    for (int i = tid; i < P::ROWS; i += DEC_WARPS * 32) m_s[i] = -INFINITY, l_s[i] = 0.f, alpha_s[i] = 1.f;

    float acc[MT][NTW][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NTW; nt++) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.f;

#pragma unroll 1
    for (int t = 0; t < ntiles; t++) {
        cp_async_wait<NST - 2>(); // this thread's copies of tile t have landed
        __syncthreads();          // ... everyone's; and tile t-1 is fully consumed
        dec_issue<HD, MT, E4>(raw, &kv, kbeg, kend, ntiles, t + NST - 1, Hkv, kvh, tid); // the stage of tile t-1
        const __nv_bfloat16 *Kt, *Vt;
        if (E4) {
            const uint8_t *st = (const uint8_t *)(raw + (t % NST) * P::RAW_STAGE);
            const float *sc = (const float *)(st + 2 * DEC_BK * HD);
            for (int e = tid; e < 2 * DEC_BK * (HD / 8); e += DEC_WARPS * 32) {
                const int plane = e / (DEC_BK * (HD / 8)), j = (e / (HD / 8)) % DEC_BK, o = (e % (HD / 8)) * 8;
                const uint2 b = *(const uint2 *)(st + (plane * DEC_BK + j) * HD + o);
                const float s = sc[plane * DEC_BK + j];
                const __nv_fp8x2_storage_t *b2 = (const __nv_fp8x2_storage_t *)&b;
                uint4 outv;
                __nv_bfloat162 *o2 = (__nv_bfloat162 *)&outv;
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    __half2_raw hr = __nv_cvt_fp8x2_to_halfraw2(b2[i], __NV_E4M3);
                    float2 f = __half22float2(*(const __half2 *)&hr);
                    o2[i] = __floats2bfloat162_rn(f.x * s, f.y * s);
                }
                *(uint4 *)(work + plane * DEC_BK * LDQ + j * LDQ + o) = outv;
            }
            __syncthreads();
            Kt = work;
            Vt = work + DEC_BK * LDQ;
        } else {
            Kt = (const __nv_bfloat16 *)(raw + (t % NST) * P::RAW_STAGE);
            Vt = Kt + DEC_BK * LDQ;
        }
        const int64_t kt0 = kbeg + (int64_t)t * DEC_BK;

        // S = Q K^T (log2 units): item = (m-tile, n-tile of 8 keys)
        for (int it = w; it < 4 * mtl; it += DEC_WARPS) {
            const int mt = it >> 2, nt = it & 3;
            float s4[4] = {0.f, 0.f, 0.f, 0.f}, t4[4] = {0.f, 0.f, 0.f, 0.f}; // even / odd k-steps: 2 chains

            const __nv_bfloat16 *qa = Qs + (mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDQ + (lane >> 4) * 8;
            const __nv_bfloat16 *kb = Kt + (nt * 8 + (lane & 7)) * LDQ + (lane >> 3) * 8;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk += 2) {
                uint32_t a0[4], a1[4], b[4];
                ldsm_x4(a0, qa + kk * 16);
                ldsm_x4(a1, qa + kk * 16 + 16);
                ldsm_x4(b, kb + kk * 16); // dims kk*16 + {0-7, 8-15, 16-23, 24-31} of keys nt*8..
                dec_mma(s4, a0, b[0], b[1]);
                dec_mma(t4, a1, b[2], b[3]);
            }
            float *srow = Ss + (mt * 16 + g) * LDS + nt * 8 + 2 * c;
            *(float2 *)srow = make_float2((s4[0] + t4[0]) * scale_log2, (s4[1] + t4[1]) * scale_log2);
            *(float2 *)(srow + 8 * LDS) = make_float2((s4[2] + t4[2]) * scale_log2, (s4[3] + t4[3]) * scale_log2);
        }
        __syncthreads();

        // online softmax: two threads per row (warp w = m-tile w), each over 16 keys in order, joined by one
        // shuffle (a + b == b + a: both threads hold the same max and sum)
        if (w < mtl) {
            const int i = tid >> 1, half = tid & 1, r = rb0 + i;
            const int64_t qpos = i < rows_here ? (causal ? p0 + r / G : p0 + n - 1) : -1; // -1: padding row
            const int64_t k0 = kt0 + 16 * half;
            float v[16];
            const float4 *src = (const float4 *)(Ss + i * LDS + 16 * half);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 f = src[u];
                v[4 * u] = f.x, v[4 * u + 1] = f.y, v[4 * u + 2] = f.z, v[4 * u + 3] = f.w;
            }
            float mx = -INFINITY;
            const unsigned long long anc = TREE && i < rows_here ? anc_s[r / G] : 0ull;
#pragma unroll
            for (int u = 0; u < 16; u++) {
                const bool vis = TREE ? qpos >= 0 && cu_tree_sees(anc, p0, qpos, k0 + u) : k0 + u <= qpos;
                v[u] = vis ? v[u] : -INFINITY;
                mx = fmaxf(mx, v[u]);
            }
            const float mold = m_s[i], lold = l_s[i];
            const float mn = fmaxf(mold, fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1)));
            float alpha = 1.f, sum = 0.f;
            // mn == -inf: no visible key yet, everything stays zero; mold == -inf gives alpha = 0
            if (mn != -INFINITY) {
                alpha = exp2f(mold - mn);
#pragma unroll
                for (int u = 0; u < 16; u++) {
                    v[u] = exp2f(v[u] - mn); // masked: exp2(-inf) = 0
                    sum += v[u];
                }
            } else {
#pragma unroll
                for (int u = 0; u < 16; u++) v[u] = 0.f;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            uint4 pk[2];
            uint32_t *pw = (uint32_t *)pk;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                __nv_bfloat162 b2 = __floats2bfloat162_rn(v[2 * u], v[2 * u + 1]);
                pw[u] = *(uint32_t *)&b2;
            }
            uint4 *dst = (uint4 *)(Ps + i * LDP + 16 * half);
            dst[0] = pk[0], dst[1] = pk[1];
            __syncwarp(); // both threads of the row have read m_s / l_s
            if (!half) m_s[i] = mn, l_s[i] = __fmaf_rn(lold, alpha, sum), alpha_s[i] = alpha;
        }
        __syncthreads();

        // O = alpha O + P V on this warp's output dims
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            if (mt >= mtl) break;
            const float aa = alpha_s[mt * 16 + g], ab = alpha_s[mt * 16 + g + 8];
#pragma unroll
            for (int nt = 0; nt < NTW; nt++)
                acc[mt][nt][0] *= aa, acc[mt][nt][1] *= aa, acc[mt][nt][2] *= ab, acc[mt][nt][3] *= ab;
            const __nv_bfloat16 *pa = Ps + (mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDP + (lane >> 4) * 8;
#pragma unroll
            for (int kk = 0; kk < DEC_BK / 16; kk++) {
                uint32_t a[4];
                ldsm_x4(a, pa + kk * 16);
#pragma unroll
                for (int nt = 0; nt < NTW; nt++) {
                    uint32_t b[2]; // keys kk*16 + {0-7, 8-15} (lanes 0-7, 8-15 address them), dims of n-tile nt
                    ldsm_x2_trans(b, Vt + (kk * 16 + (lane & 15)) * LDQ + w * (HD / 8) + nt * 8);
                    dec_mma(acc[mt][nt], a, b[0], b[1]);
                }
            }
        }
    }
    cp_async_wait<0>(); // no copy may land after the block exits (the tail groups are empty, but be explicit)

    // partials of the rows that see at least one key of this chunk
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        if (mt >= mtl) break;
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int i = mt * 16 + g + 8 * half, r = rb0 + i;
            if (i >= rows_here) continue;
            const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
            if (qpos < kbeg) continue;
            const int64_t th = (int64_t)(r / G) * H + kvh * G + r % G;
            float *orow = opart + (th * zslots + z) * HD + w * (HD / 8) + 2 * c;
#pragma unroll
            for (int nt = 0; nt < NTW; nt++)
                *(float2 *)(orow + nt * 8) = make_float2(acc[mt][nt][2 * half], acc[mt][nt][2 * half + 1]);
        }
    }
    if (tid < rows_here) {
        const int r = rb0 + tid;
        const int64_t qpos = causal ? p0 + r / G : p0 + n - 1;
        if (qpos >= kbeg) {
            const int64_t th = (int64_t)(r / G) * H + kvh * G + r % G;
            *(float2 *)(ml + (th * zslots + z) * 2) = make_float2(m_s[tid], l_s[tid]);
        }
    }
}

// Merges a row's partials over its live chunks z = 0 .. qpos / chunk (every one holds a visible key, so its max
// is finite) in increasing z, the same order whatever n or the grid: one block of 64 threads per (row, 64 dims).
// out = sum_z e^(m_z - M) acc_z / sum_z e^(m_z - M) l_z, exponentials base 2 when log2_domain.
__global__ void __launch_bounds__(64)
    k_attn_combine(float *out, const float *opart, const float *ml, int64_t zslots, int64_t chunk, int64_t pos0,
                   const int64_t *pos_dev, int n, int H, int hd, int causal, int log2_domain) {
    CU_PDL_ENTER();
    __shared__ float red[2];
    const int64_t th = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const int64_t p0 = pos_dev ? *pos_dev : pos0;
    const int64_t qpos = causal ? p0 + th / H : p0 + n - 1;
    const int64_t zrow = qpos / chunk + 1;
    const float *mlr = ml + th * zslots * 2;
    float M = -INFINITY;
    for (int64_t z = tid; z < zrow; z += 64) M = fmaxf(M, mlr[2 * z]);
    M = cu_warp_max(M);
    if (lane == 0) red[wid] = M;
    __syncthreads();
    M = fmaxf(red[0], red[1]);
    __syncthreads();
    float L = 0.f; // thread tid sums z = tid, tid + 64, ... in order; then a fixed tree
    for (int64_t z = tid; z < zrow; z += 64) {
        const float d = mlr[2 * z] - M, e = log2_domain ? exp2f(d) : expf(d);
        L = __fmaf_rn(e, mlr[2 * z + 1], L);
    }
    L = cu_warp_sum(L);
    if (lane == 0) red[wid] = L;
    __syncthreads();
    L = red[0] + red[1];
    const float inv = L > 0.f ? 1.f / L : 0.f;
    const int d = blockIdx.y * 64 + tid;
    if (d >= hd) return;
    const float *src = opart + th * zslots * hd + d;
    float o = 0.f;
#pragma unroll 8 // 8 partial loads in flight per thread; the sum itself stays in increasing z
    for (int64_t z = 0; z < zrow; z++) {
        const float dm = mlr[2 * z] - M, e = log2_domain ? exp2f(dm) : expf(dm);
        o = __fmaf_rn(e, src[z * hd], o);
    }
    out[th * hd + d] = o * inv;
}

void cu_attn_combine(fd_backend *be, float *out, const float *opart, const float *ml, int64_t zslots, int64_t chunk,
                     int64_t pos0, const int64_t *pos_dev, int n, int H, int hd, int causal, int log2_domain) {
    const int64_t rows = (int64_t)n * H;
    FD_CHECK(rows < (1ll << 31));
    dim3 grid((unsigned)rows, (unsigned)((hd + 63) / 64));
    cu_launch(be, k_attn_combine, grid, 64, 0, out, opart, ml, zslots, chunk, pos0, pos_dev, n, H, hd, causal,
              log2_domain);
}

template <int HD, int MT, bool E4, bool TREE>
static void launch_decode(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                          const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                          int causal, const int32_t *tree_parent) {
    typedef dec_plan<HD, MT, E4> P;
    // Opt in to > 48 KB of shared memory once per device and instantiation, not on every call of a decode step
    // (a racing second set is harmless: same value).
    static int opted_in[64];
    const int dev = cu_of(be)->device;
    if (dev < 0 || dev >= 64 || !opted_in[dev]) {
        FD_CUDA_CHECK(cudaFuncSetAttribute(k_attn_decode<HD, MT, E4, TREE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           P::TOTAL));
        if (dev >= 0 && dev < 64) opted_in[dev] = 1;
    }
    const int64_t rows = (int64_t)n * (H / Hkv);
    dim3 grid((unsigned)((rows + P::ROWS - 1) / P::ROWS), (unsigned)zslots, (unsigned)Hkv);
    cu_launch(be, (k_attn_decode<HD, MT, E4, TREE>), grid, DEC_WARPS * 32, P::TOTAL, opart, ml, q, kv, pos0, pos_dev, n,
              H, Hkv, capacity, zslots, scale * 1.4426950408889634f, causal, tree_parent);
}

template <int HD, bool E4, bool TREE>
static void dispatch_mt(fd_backend *be, float *opart, float *ml, const float *q, cu_kv kv, int64_t pos0,
                        const int64_t *pos_dev, int n, int H, int Hkv, int64_t capacity, int64_t zslots, float scale,
                        int causal, const int32_t *tree_parent) {
    const int64_t rows = (int64_t)n * (H / Hkv);
#define FD_DEC_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
    if (rows <= 16)
        launch_decode<HD, 1, E4, TREE>(FD_DEC_ARGS);
    else if (rows <= 32)
        launch_decode<HD, 2, E4, TREE>(FD_DEC_ARGS);
    else if (rows <= 64)
        launch_decode<HD, 4, E4, TREE>(FD_DEC_ARGS);
    else
        launch_decode<HD, 8, E4, TREE>(FD_DEC_ARGS);
#undef FD_DEC_ARGS
}

// The decode kernel and the combine; tree_parent NULL: the chain (causal or not), else the tree mask (causal).
template <bool TREE>
static void decode_run(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                       int n, int H, int Hkv, int hd, int64_t capacity, float scale, int causal,
                       const int32_t *tree_parent) {
    // Chunk slots: from capacity when the position is only known on the device, else from the live keys.
    const int64_t keys = pos_dev ? capacity : pos0 + n, zslots = (keys + CU_DECODE_CHUNK - 1) / CU_DECODE_CHUNK;
    FD_CHECK(zslots >= 1 && zslots <= 65535, "decode attention: %lld keys exceed the grid", (long long)keys);
    const int64_t rows = (int64_t)n * H;
    float *opart = (float *)cu_scratch(be, CU_SCR_B, (size_t)(rows * zslots * hd) * sizeof(float));
    float *ml = (float *)cu_scratch(be, CU_SCR_C, (size_t)(rows * zslots * 2) * sizeof(float));
    cu_impl *c = cu_of(be);
    const bool warp = c->attn_decode == CU_ATTN_DECODE_WARP;
    fd_route *route = &c->routes[CU_ROUTE_ATTN_DECODE]; // counted under the kernel that runs the chunks
    route->calls[c->attn_decode]++;
    route->tokens[c->attn_decode] += n;
    cu_prof pr;
    cu_prof_begin(be, &pr,
                  TREE ? (warp ? "attention_splitk_warp_tree" : "attention_splitk_tree")
                       : (warp ? "attention_splitk_warp" : "attention_splitk"),
                  n);
    const bool e4 = kv.k8 != NULL;
#define FD_DEC_ARGS be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, capacity, zslots, scale, causal, tree_parent
    if (warp)
        cu_decode_warp_chunks(be, opart, ml, q, kv, pos0, pos_dev, n, H, Hkv, hd, capacity, zslots, scale, causal,
                              tree_parent);
    else
        switch (hd) {
        case 64:
            e4 ? dispatch_mt<64, true, TREE>(FD_DEC_ARGS) : dispatch_mt<64, false, TREE>(FD_DEC_ARGS);
            break;
        case 128:
            e4 ? dispatch_mt<128, true, TREE>(FD_DEC_ARGS) : dispatch_mt<128, false, TREE>(FD_DEC_ARGS);
            break;
        default:
            e4 ? dispatch_mt<256, true, TREE>(FD_DEC_ARGS) : dispatch_mt<256, false, TREE>(FD_DEC_ARGS);
            break;
        }
#undef FD_DEC_ARGS
    cu_prof_mark(be, &pr, "chunks");
    cu_attn_combine(be, out, opart, ml, zslots, CU_DECODE_CHUNK, pos0, pos_dev, n, H, hd, causal, 1);
    cu_prof_mark(be, &pr, "combine");
    cu_prof_end(be, &pr);
}

int cu_attention_decode(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, const int64_t *pos_dev,
                        int n, int H, int Hkv, int hd, int64_t capacity, float scale, int causal) {
    if (n > CU_DECODE_MAX_N || (hd != 64 && hd != 128 && hd != 256)) return 0;
    decode_run<false>(be, out, q, kv, pos0, pos_dev, n, H, Hkv, hd, capacity, scale, causal, NULL);
    return 1;
}

int cu_attention_decode_tree(fd_backend *be, float *out, const float *q, cu_kv kv, int64_t pos0, int n, int H, int Hkv,
                             int hd, float scale, const int32_t *parent_dev) {
    if (n > CU_TREE_MAX_NODES || (hd != 64 && hd != 128 && hd != 256)) return 0;
    // the live keys end at the last node (pos_dev NULL: the grid is sized from them, not from the capacity)
    decode_run<true>(be, out, q, kv, pos0, NULL, n, H, Hkv, hd, pos0 + n, scale, 1, parent_dev);
    return 1;
}
