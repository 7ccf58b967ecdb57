// Gated DeltaNet core: gates (beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)), per-head L2 norm of
// q and k, q scale 1/sqrt(dk), and the gated delta rule over an fp32 state S [Hv, dk, dv]:
//   S <- exp(g_t) S ;  S <- S + beta_t k_t (v_t - S^T k_t)^T ;  o_t = S^T q_t        (value head h reads q/k h / r)
//
// Two routes:
//  FD_GDN_SERIAL  - one kernel, token-recurrent, the state in registers (k_gdn_rec; the first kernel, k_gdn_serial,
//                   2x slower, was removed in session 6: docs/perf-notes.md). With state_slots (f32 [n, Hv, dk, dv]) it
//                   also writes the state after every token to slot t (speculative verify: committing k accepted
//                   tokens = taking slot k-1). Slots imply this route. gdn_core_readonly is the same kernel
//                   without the final state store (route gdn_verify=replay: the commit replays the accepted tokens).
//  FD_GDN_CHUNKED - chunk C = 64, tensor cores (gdn_chunk.cu).
// Tree verify (gdn_core_tree, route spec_verify=tree) is the recurrent kernel with TREE set: node t starts from
// its parent's state (the committed state for a root, else the parent's slot, which this thread wrote itself), so
// along any root-to-node path the arithmetic, and so the bits, are the chain's.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.h"

#include "cuda/gdn_gates.h"

// ---------------------------------------------------------------------------------------------------------
// qwen3_next grouped projections -> contiguous layout.
//   qkvz [n, Hk (2dk + 2 r dv)] per group g: q dk | k dk | v r*dv | z r*dv ;  ba [n, Hk 2r] per g: b r | a r
//   -> qkv [n, 2Hk dk + Hv dv] (Q | K | V), z [n, Hv dv], b [n, Hv], a [n, Hv]
__global__ void k_split_qkvz(float *qkv, float *z, const float *qkvz, int64_t count, int Hk, int Hv, int dk, int dv) {
    CU_PDL_ENTER();
    int r = Hv / Hk;
    int grp = 2 * dk + 2 * r * dv, row = Hk * grp, cq = 2 * Hk * dk + Hv * dv;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / row;
        int e = (int)(i - t * row);
        int g = e / grp, o = e - g * grp;
        float v = qkvz[i];
        if (o < dk)
            qkv[t * cq + g * dk + o] = v;
        else if (o < 2 * dk)
            qkv[t * cq + Hk * dk + g * dk + (o - dk)] = v;
        else if (o < 2 * dk + r * dv)
            qkv[t * cq + 2 * Hk * dk + g * r * dv + (o - 2 * dk)] = v;
        else
            z[t * Hv * dv + g * r * dv + (o - 2 * dk - r * dv)] = v;
    }
}
__global__ void k_split_ba(float *b, float *a, const float *ba, int64_t count, int Hk, int Hv) {
    CU_PDL_ENTER();
    int r = Hv / Hk;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / (2 * Hv);
        int e = (int)(i - t * 2 * Hv);
        int g = e / (2 * r), o = e - g * 2 * r;
        if (o < r)
            b[t * Hv + g * r + o] = ba[i];
        else
            a[t * Hv + g * r + (o - r)] = ba[i];
    }
}

void cu_gdn_split_qkvz(fd_backend *be, void *qkv, void *z, void *b, void *a, const void *qkvz, const void *ba, int n,
                       int Hk, int Hv, int dk, int dv) {
    if (n <= 0) return;
    if (Hk <= 0 || Hv % Hk) FD_PANIC("gdn_split_qkvz: Hv %d not a multiple of Hk %d", Hv, Hk);
    cudaStream_t s = cu_of(be)->stream;
    int64_t c1 = (int64_t)n * Hk * (2 * dk + 2 * (Hv / Hk) * dv), c2 = (int64_t)n * 2 * Hv;
    unsigned g1 = cu_blocks(c1, 256) > 8192 ? 8192 : cu_blocks(c1, 256);
    cu_launch(be, k_split_qkvz, g1, 256, 0, (float *)qkv, (float *)z, (const float *)qkvz, c1, Hk, Hv, dk, dv);
    cu_launch(be, k_split_ba, cu_blocks(c2, 256), 256, 0, (float *)b, (float *)a, (const float *)ba, c2, Hk, Hv);
}

// ---------------------------------------------------------------------------------------------------------
// Serial route, recurrent kernel (default). One warp owns REC_COLS = 8 state columns of one value head and all
// dk rows: lane = 4 rg + cg holds rows [rg RL, rg RL + RL) (row group rg = 0..7; RL = dk / 8 rounded up to a
// power of two) of the two columns c = c0 + 2 cg, c + 1, in registers for all n tokens. Why this shape:
//  - the dot products over dk are a per-lane sum over RL rows plus a 3-step shuffle butterfly over the 8 row
//    groups: no shared memory and no block barrier in the token loop (21 shuffles per token and warp);
//  - o_t = S_t^T q = decay S_{t-1}^T q + u (k.q): both dots (S^T k, S^T q) read the state *before* the token's
//    update, so one reduction round per token serves the update and the output;
//  - the lanes of a row group hold the same q/k rows, so the L2 norms and k.q come out of the same butterfly,
//    redundantly per warp but with no cross-warp dependency (3 x 3 shuffles);
//  - the 27B layer (48 heads x 128 columns) runs 768 warps that each issue their state loads (RL float2 per lane)
//    at once: the 3 MB read is one DRAM round trip, not a chain behind barriers;
//  - token t+1's q, k, v, b, a are loaded while token t computes; slots are written with streaming stores.
// Every butterfly leaves bitwise the same sum in all lanes of a column (a + b == b + a), and a row's arithmetic
// depends on neither n nor slots: decode (n = 1) and verify (n = B, slots) agree bitwise, token by token.
#define REC_COLS  8 // state columns per warp (4 lanes x 2)
#define REC_WARPS 2 // warps per block (64 threads: 16 columns of one head; ~3 blocks per SM at the 27B layer)

template <int RL> struct rec_in {
    float q[RL], k[RL]; // raw rows [rg RL, rg RL + RL) of q and k (0 past dk)
    float v0, v1, b, a; // v at columns c, c + 1; the gate inputs of the head
};

// VEC: dk and dv multiples of 4 and 16-byte aligned buffers, so q/k rows load as float4 and state pairs as float2.
template <int RL, bool VEC>
static __device__ __forceinline__ void rec_load(rec_in<RL> &in, const float *__restrict__ qkv,
                                                const float *__restrict__ bb, const float *__restrict__ aa, int t,
                                                int h, int g, int i0, int c, int Hk, int Hv, int dk, int dv) {
    const float *row = qkv + (int64_t)t * (2 * Hk * dk + Hv * dv);
    const float *qr = row + g * dk, *kr = row + Hk * dk + g * dk, *vr = row + 2 * Hk * dk + (int64_t)h * dv;
    if (VEC && RL % 4 == 0) {
#pragma unroll
        for (int j = 0; j < RL; j += 4) {
            const bool ok = i0 + j < dk; // dk % 4 == 0: the whole float4 is in range
            const float4 q4 = ok ? *(const float4 *)(qr + i0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            const float4 k4 = ok ? *(const float4 *)(kr + i0 + j) : make_float4(0.f, 0.f, 0.f, 0.f);
            in.q[j] = q4.x, in.q[j + 1] = q4.y, in.q[j + 2] = q4.z, in.q[j + 3] = q4.w;
            in.k[j] = k4.x, in.k[j + 1] = k4.y, in.k[j + 2] = k4.z, in.k[j + 3] = k4.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < RL; j++) {
            const bool ok = i0 + j < dk;
            in.q[j] = ok ? qr[i0 + j] : 0.f;
            in.k[j] = ok ? kr[i0 + j] : 0.f;
        }
    }
    in.v0 = c < dv ? vr[c] : 0.f;
    in.v1 = c + 1 < dv ? vr[c + 1] : 0.f;
    in.b = bb[(int64_t)t * Hv + h];
    in.a = aa[(int64_t)t * Hv + h];
}

// The sum over the 8 row groups of a warp (lane bits 2..4), the same bits in every lane of a column pair.
static __device__ __forceinline__ float rec_rowsum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    return v;
}

// This lane's part (rows i0.., columns c, c + 1) of the state S [dk, dv] at src into s0 / s1 (0 outside the head).
template <int RL, bool VEC>
static __device__ __forceinline__ void rec_state_load(float s0[RL], float s1[RL], const float *src, int i0, int c,
                                                      int dk, int dv) {
    const bool ok0 = c < dv, ok1 = c + 1 < dv;
#pragma unroll
    for (int j = 0; j < RL; j++) {
        const int64_t at = (int64_t)(i0 + j) * dv + c;
        s0[j] = s1[j] = 0.f;
        if (i0 + j < dk) {
            if (VEC) {
                if (ok0) {
                    const float2 p = *(const float2 *)(src + at);
                    s0[j] = p.x, s1[j] = p.y;
                }
            } else {
                if (ok0) s0[j] = src[at];
                if (ok1) s1[j] = src[at + 1];
            }
        }
    }
}

// grid (ceil(ceil(dv / REC_COLS) / REC_WARPS), Hv), REC_WARPS * 32 threads.
// TREE: parent [n] (n <= 64, parent[t] < t, -1: from the committed state) orders the recurrence as a tree; every
// node's state goes to its slot and `state` is only read. The registers hold the state of the node just done; a
// node whose parent is another one loads its parent's state, and that load is issued one node early (while the
// node before it computes) so it does not sit on the token loop's critical path.
template <int RL, bool VEC, bool TREE>
__global__ void __launch_bounds__(REC_WARPS * 32)
    k_gdn_rec(float *__restrict__ o, float *__restrict__ slots, const float *__restrict__ qkv,
              const float *__restrict__ bb, const float *__restrict__ aa, const float *__restrict__ A_log,
              const float *__restrict__ dt_bias, float *__restrict__ state, int n, int Hk, int Hv, int dk, int dv,
              const int32_t *__restrict__ parent, int store_state) {
    CU_PDL_ENTER();
    // Prefetching the next token doubles the q/k registers: skipped at dk > 128 (a test-only size) to stay unspilled.
    constexpr bool PREFETCH = RL <= 16;
    const int lane = threadIdx.x & 31, rg = lane >> 2, cg = lane & 3;
    const int h = blockIdx.y, c0 = (blockIdx.x * REC_WARPS + (threadIdx.x >> 5)) * REC_COLS;
    if (c0 >= dv) return; // warp-uniform: the shuffles below always run with all 32 lanes
    const int c = c0 + 2 * cg, i0 = rg * RL, g = h / (Hv / Hk);
    const bool ok0 = c < dv, ok1 = c + 1 < dv; // VEC (dv % 4 == 0): ok0 implies ok1
    float *Sh = state + (int64_t)h * dk * dv;
    float s0[RL], s1[RL]; // state rows i0 + j, columns c and c + 1 (0 outside the head)
    // TREE: the parents of nodes lane and lane + 32, read per node with a shuffle; a node's state source
    int par_lo = -1, par_hi = -1;
    if (TREE) {
        par_lo = lane < n ? parent[lane] : -1;
        par_hi = lane + 32 < n ? parent[lane + 32] : -1;
    }
    auto parent_of = [&](int t) { // warp-uniform t
        const int p = __shfl_sync(0xffffffffu, t < 32 ? par_lo : par_hi, t & 31);
        if (p >= t) __trap(); // the engine checks the tree before the forward; a bad one must not read garbage
        return p;
    };
    auto source_of = [&](int p) -> const float * { // the state node p left (p < 0: the committed state)
        return p < 0 ? Sh : slots + ((int64_t)p * Hv + h) * dk * dv;
    };
    if (TREE)
        rec_state_load<RL, VEC>(s0, s1, source_of(parent_of(0)), i0, c, dk, dv);
    else
        rec_state_load<RL, VEC>(s0, s1, Sh, i0, c, dk, dv);
    // TREE: the next node's parent state, loaded early, and whether the next node's parent is another node
    float p0s[TREE && PREFETCH ? RL : 1], p1s[TREE && PREFETCH ? RL : 1];
    bool next_jumps = false;
    const float Al = A_log[h], dtb = dt_bias[h], qscale = rsqrtf((float)dk);
    rec_in<RL> cur, nxt;
    rec_load<RL, VEC>(cur, qkv, bb, aa, 0, h, g, i0, c, Hk, Hv, dk, dv);
#pragma unroll 1
    for (int t = 0; t < n; t++) {
        if (PREFETCH && t + 1 < n) rec_load<RL, VEC>(nxt, qkv, bb, aa, t + 1, h, g, i0, c, Hk, Hv, dk, dv);
        if (TREE && t + 1 < n) { // slots of nodes < t are written: node t + 1's parent state can be loaded now
            const int p = parent_of(t + 1);
            next_jumps = p != t;
            if (PREFETCH && next_jumps) rec_state_load<RL, VEC>(p0s, p1s, source_of(p), i0, c, dk, dv);
        }
        // L2 norms of q and k and their dot, over all dk rows (the lanes of a row group hold the same rows)
        float sq = 0.f, sk = 0.f, sqk = 0.f;
#pragma unroll
        for (int j = 0; j < RL; j++) {
            sq = fmaf(cur.q[j], cur.q[j], sq);
            sk = fmaf(cur.k[j], cur.k[j], sk);
            sqk = fmaf(cur.q[j], cur.k[j], sqk);
        }
        // S^T k and S^T q on the raw q, k (normalised once per column below, not once per row)
        float pk0 = 0.f, pk1 = 0.f, pq0 = 0.f, pq1 = 0.f;
#pragma unroll
        for (int j = 0; j < RL; j++) {
            pk0 = fmaf(s0[j], cur.k[j], pk0);
            pk1 = fmaf(s1[j], cur.k[j], pk1);
            pq0 = fmaf(s0[j], cur.q[j], pq0);
            pq1 = fmaf(s1[j], cur.q[j], pq1);
        }
        sq = rec_rowsum(sq), sk = rec_rowsum(sk), sqk = rec_rowsum(sqk);
        pk0 = rec_rowsum(pk0), pk1 = rec_rowsum(pk1), pq0 = rec_rowsum(pq0), pq1 = rec_rowsum(pq1);
        const float rq = rsqrtf(sq + 1e-6f) * qscale, rk = rsqrtf(sk + 1e-6f);
        const float kq = sqk * rk * rq; // (normalised k) . (normalised, scaled q)
        const float beta = sigmoid_f(cur.b), decay = expf(gate_g(cur.a, Al, dtb));
        // S <- decay S + k u^T with u = beta (v - decay S^T k);  o = decay S^T q + u (k.q)
        const float u0 = beta * (cur.v0 - decay * (pk0 * rk)), u1 = beta * (cur.v1 - decay * (pk1 * rk));
        const float o0 = decay * (pq0 * rq) + u0 * kq, o1 = decay * (pq1 * rq) + u1 * kq;
#pragma unroll
        for (int j = 0; j < RL; j++) {
            const float kn = cur.k[j] * rk;
            s0[j] = fmaf(kn, u0, decay * s0[j]);
            s1[j] = fmaf(kn, u1, decay * s1[j]);
        }
        float *orow = o + ((int64_t)t * Hv + h) * dv;
        if (rg == 0) {
            if (VEC) {
                if (ok0) *(float2 *)(orow + c) = make_float2(o0, o1);
            } else {
                if (ok0) orow[c] = o0;
                if (ok1) orow[c + 1] = o1;
            }
        }
        if (slots) { // state after token t -> slot t, streamed past the caches (read back only on a commit)
            float *Sl = slots + ((int64_t)t * Hv + h) * dk * dv;
#pragma unroll
            for (int j = 0; j < RL; j++) {
                const int64_t at = (int64_t)(i0 + j) * dv + c;
                if (i0 + j < dk) {
                    if (VEC) {
                        if (ok0) __stcs((float2 *)(Sl + at), make_float2(s0[j], s1[j]));
                    } else {
                        if (ok0) __stcs(Sl + at, s0[j]);
                        if (ok1) __stcs(Sl + at + 1, s1[j]);
                    }
                }
            }
        }
        if (t + 1 < n) {
            if (PREFETCH)
                cur = nxt;
            else
                rec_load<RL, VEC>(cur, qkv, bb, aa, t + 1, h, g, i0, c, Hk, Hv, dk, dv);
            if (TREE && next_jumps) { // node t + 1 continues from another node: its parent's state
                if (PREFETCH) {
#pragma unroll
                    for (int j = 0; j < RL; j++) s0[j] = p0s[j], s1[j] = p1s[j];
                } else {
                    rec_state_load<RL, VEC>(s0, s1, source_of(parent_of(t + 1)), i0, c, dk, dv);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < RL; j++) {
        const int64_t at = (int64_t)(i0 + j) * dv + c;
        if (!TREE && store_state && i0 + j < dk) { // a tree and a read-only chain leave the state as it was
            if (VEC) {
                if (ok0) *(float2 *)(Sh + at) = make_float2(s0[j], s1[j]);
            } else {
                if (ok0) Sh[at] = s0[j];
                if (ok1) Sh[at + 1] = s1[j];
            }
        }
    }
}

template <int RL, bool TREE>
static void rec_launch_kind(fd_backend *be, bool vec, float *o, float *slots, const float *qkv, const float *b,
                            const float *a, const float *Al, const float *dtb, float *state, int n, int Hk, int Hv,
                            int dk, int dv, const int32_t *parent, int store_state) {
    const int warps = (dv + REC_COLS - 1) / REC_COLS;
    const dim3 grid((unsigned)((warps + REC_WARPS - 1) / REC_WARPS), (unsigned)Hv);
    if (vec)
        cu_launch(be, (k_gdn_rec<RL, true, TREE>), grid, REC_WARPS * 32, 0, o, slots, qkv, b, a, Al, dtb, state, n, Hk,
                  Hv, dk, dv, parent, store_state);
    else
        cu_launch(be, (k_gdn_rec<RL, false, TREE>), grid, REC_WARPS * 32, 0, o, slots, qkv, b, a, Al, dtb, state, n, Hk,
                  Hv, dk, dv, parent, store_state);
}

template <int RL>
static void rec_launch(fd_backend *be, bool vec, float *o, float *slots, const float *qkv, const float *b,
                       const float *a, const float *Al, const float *dtb, float *state, int n, int Hk, int Hv, int dk,
                       int dv, const int32_t *parent, int store_state) {
    if (parent)
        rec_launch_kind<RL, true>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, 0);
    else
        rec_launch_kind<RL, false>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent,
                                   store_state);
}

// parent: NULL for a chain, else the tree's parents (backend memory; see k_gdn_rec). store_state: a chain writes
// its final state back (0: gdn_core_readonly; a tree never does).
static void gdn_rec(fd_backend *be, float *o, float *slots, const float *qkv, const float *b, const float *a,
                    const float *Al, const float *dtb, float *state, int n, int Hk, int Hv, int dk, int dv,
                    const int32_t *parent, int store_state) {
    const uintptr_t addr_bits = (uintptr_t)o | (uintptr_t)slots | (uintptr_t)qkv | (uintptr_t)state;
    const bool vec = dk % 4 == 0 && dv % 4 == 0 && addr_bits % 16 == 0;
    // rows per lane: dk over the 8 row groups, rounded up to a power of two (GDN_MAXD 256 -> 32)
    if (dk <= 8)
        rec_launch<1>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
    else if (dk <= 16)
        rec_launch<2>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
    else if (dk <= 32)
        rec_launch<4>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
    else if (dk <= 64)
        rec_launch<8>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
    else if (dk <= 128)
        rec_launch<16>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
    else
        rec_launch<32>(be, vec, o, slots, qkv, b, a, Al, dtb, state, n, Hk, Hv, dk, dv, parent, store_state);
}

// Bench/test hooks (cuda.h).
// Records a cudaEvent_t (passed as void *: the tests are C) on the backend's stream, so a bench can time a
// stretch of queued ops with CUDA events instead of wall clock around a synchronise.
extern "C" void fd_cuda_record_event(fd_backend *be, void *event) {
    FD_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, cu_of(be)->stream));
}

void cu_gdn_core(fd_backend *be, fd_gdn_route route, void *o, const void *qkv, const void *b, const void *a,
                 const fd_weight *A_log, const fd_weight *dt_bias, float *state, int n, int Hk, int Hv, int dk, int dv,
                 float *state_slots) {
    if (n <= 0) return;
    if (Hk <= 0 || Hv % Hk) FD_PANIC("gdn_core: Hv %d not a multiple of Hk %d", Hv, Hk);
    FD_CHECK(dk >= 1 && dk <= GDN_MAXD && dv >= 1 && dv <= GDN_MAXD, "GDN head dims %d/%d unsupported (max %d)", dk, dv,
             GDN_MAXD);
    FD_CHECK(route == FD_GDN_CHUNKED || route == FD_GDN_SERIAL, "unknown GDN route %d", (int)route);
    const float *Al = cu_wf32(A_log), *dtb = cu_wf32(dt_bias);
    if (route == FD_GDN_SERIAL || state_slots) { // per-token slots only exist in the recurrence
        gdn_rec(be, (float *)o, state_slots, (const float *)qkv, (const float *)b, (const float *)a, Al, dtb, state, n,
                Hk, Hv, dk, dv, NULL, 1);
    } else {
        cu_impl *c = cu_of(be);
        fd_route *rc = &c->routes[CU_ROUTE_GDN_CHUNK];
        rc->calls[c->gdn_chunk]++, rc->tokens[c->gdn_chunk] += n;
        if (c->gdn_chunk == CU_GDN_CHUNK_BF16)
            cu_gdn_chunked_bf16(be, (float *)o, (const float *)qkv, (const float *)b, (const float *)a, Al, dtb, state,
                                n, Hk, Hv, dk, dv);
        else
            cu_gdn_chunked(be, (float *)o, (const float *)qkv, (const float *)b, (const float *)a, Al, dtb, state, n,
                           Hk, Hv, dk, dv);
    }
}

void cu_gdn_core_tree(fd_backend *be, void *o, const void *qkv, const void *b, const void *a, const fd_weight *A_log,
                      const fd_weight *dt_bias, const float *state, int n, int Hk, int Hv, int dk, int dv,
                      float *state_slots, const int32_t *parent_dev) {
    if (n <= 0) return;
    if (Hk <= 0 || Hv % Hk) FD_PANIC("gdn_core_tree: Hv %d not a multiple of Hk %d", Hv, Hk);
    FD_CHECK(dk >= 1 && dk <= GDN_MAXD && dv >= 1 && dv <= GDN_MAXD, "GDN head dims %d/%d unsupported (max %d)", dk, dv,
             GDN_MAXD);
    FD_CHECK(state_slots && parent_dev, "GDN tree: slots and parents required");
    FD_CHECK(n <= CU_TREE_MAX_NODES, "GDN tree of %d nodes: at most %d", n, CU_TREE_MAX_NODES);
    // the kernel only reads `state` with TREE set
    gdn_rec(be, (float *)o, state_slots, (const float *)qkv, (const float *)b, (const float *)a, cu_wf32(A_log),
            cu_wf32(dt_bias), (float *)state, n, Hk, Hv, dk, dv, parent_dev, 0);
}

// The chain recurrence without the state store (backend.h: gdn_core_readonly): the kernel of gdn_core's serial
// route, with the same per-token arithmetic (k_gdn_rec's registers hold the state; only the final store is skipped).
void cu_gdn_core_readonly(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                          const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk, int Hv,
                          int dk, int dv) {
    if (n <= 0) return;
    if (Hk <= 0 || Hv % Hk) FD_PANIC("gdn_core_readonly: Hv %d not a multiple of Hk %d", Hv, Hk);
    FD_CHECK(dk >= 1 && dk <= GDN_MAXD && dv >= 1 && dv <= GDN_MAXD, "GDN head dims %d/%d unsupported (max %d)", dk, dv,
             GDN_MAXD);
    gdn_rec(be, (float *)o, NULL, (const float *)qkv, (const float *)b, (const float *)a, cu_wf32(A_log),
            cu_wf32(dt_bias), (float *)state, n, Hk, Hv, dk, dv, NULL, 0);
}
