// Gated DeltaNet core: gates (beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)), per-head L2 norm of
// q and k, q scale 1/sqrt(dk), and the gated delta rule over an fp32 state S [Hv, dk, dv]:
//   S <- exp(g_t) S ;  S <- S + beta_t k_t (v_t - S^T k_t)^T ;  o_t = S^T q_t        (value head h reads q/k h / r)
//
// Two routes:
//  FD_GDN_SERIAL  - one kernel, token-recurrent; each block owns 32 state columns of one head in registers. With
//                   state_slots (f32 [n, Hv, dk, dv]) it also writes the state after every token to slot t
//                   (speculative verify: committing k accepted tokens = taking slot k-1). Slots imply this route.
//  FD_GDN_CHUNKED - chunk C = 64, tensor cores (gdn_chunk.cu).
#include <math.h>

#include "cuda/cuda_common.h"

#include "cuda/gdn_gates.h"

// ---------------------------------------------------------------------------------------------------------
// qwen3_next grouped projections -> contiguous layout.
//   qkvz [n, Hk (2dk + 2 r dv)] per group g: q dk | k dk | v r*dv | z r*dv ;  ba [n, Hk 2r] per g: b r | a r
//   -> qkv [n, 2Hk dk + Hv dv] (Q | K | V), z [n, Hv dv], b [n, Hv], a [n, Hv]
__global__ void k_split_qkvz(float *qkv, float *z, const float *qkvz, int64_t count, int Hk, int Hv, int dk, int dv) {
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
    k_split_qkvz<<<g1, 256, 0, s>>>((float *)qkv, (float *)z, (const float *)qkvz, c1, Hk, Hv, dk, dv);
    FD_CUDA_LAUNCH_CHECK();
    k_split_ba<<<cu_blocks(c2, 256), 256, 0, s>>>((float *)b, (float *)a, (const float *)ba, c2, Hk, Hv);
    FD_CUDA_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------------------
// Serial route. grid (Hv, ceil(dv/32)), 128 threads = 4 warps. Lane j owns state column c = 32*blockIdx.y + j;
// warp w owns rows [w*RW, w*RW + RW) with RW = ceil(dk/4) <= 64, held in registers for all n tokens.
#define SER_ROWS 64
__global__ void __launch_bounds__(128)
    k_gdn_serial(float *o, float *slots, const float *qkv, const float *bb, const float *aa, const float *A_log,
                 const float *dt_bias, float *state, int n, int Hk, int Hv, int dk, int dv) {
    __shared__ float qs[GDN_MAXD], ks[GDN_MAXD];
    __shared__ float red[2][4][32];
    __shared__ float nrm[2][4];
    int h = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int c = blockIdx.y * 32 + lane;
    int g = h / (Hv / Hk);
    int RW = (dk + 3) / 4;
    int cq = 2 * Hk * dk + Hv * dv;
    float *Sg = state + (int64_t)h * dk * dv;
    float S[SER_ROWS];
#pragma unroll
    for (int r = 0; r < SER_ROWS; r++) {
        int i = w * RW + r;
        S[r] = (r < RW && i < dk && c < dv) ? Sg[(int64_t)i * dv + c] : 0.f;
    }
    float Al = A_log[h], dtb = dt_bias[h], qscale = rsqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        const float *row = qkv + (int64_t)t * cq;
        // q, k of head g -> shared, with their squared norms
        float sq = 0.f, sk = 0.f;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            float qv = row[g * dk + i], kv = row[Hk * dk + g * dk + i];
            qs[i] = qv, ks[i] = kv;
            sq += qv * qv, sk += kv * kv;
        }
        sq = warp_sum(sq), sk = warp_sum(sk);
        if (lane == 0) nrm[0][w] = sq, nrm[1][w] = sk;
        __syncthreads();
        float rq = rsqrtf(nrm[0][0] + nrm[0][1] + nrm[0][2] + nrm[0][3] + 1e-6f) * qscale;
        float rk = rsqrtf(nrm[1][0] + nrm[1][1] + nrm[1][2] + nrm[1][3] + 1e-6f);
        float beta = sigmoid_f(bb[(int64_t)t * Hv + h]);
        float decay = expf(gate_g(aa[(int64_t)t * Hv + h], Al, dtb));
        // kv = S^T k after the decay, partial over this warp's rows
        float part = 0.f;
#pragma unroll
        for (int r = 0; r < SER_ROWS; r++) {
            int i = w * RW + r;
            if (r < RW && i < dk) {
                S[r] *= decay;
                part += S[r] * ks[i] * rk;
            }
        }
        red[0][w][lane] = part;
        __syncthreads();
        float kvc = red[0][0][lane] + red[0][1][lane] + red[0][2][lane] + red[0][3][lane];
        float vc = c < dv ? row[2 * Hk * dk + (int64_t)h * dv + c] : 0.f;
        float u = beta * (vc - kvc);
        part = 0.f;
#pragma unroll
        for (int r = 0; r < SER_ROWS; r++) {
            int i = w * RW + r;
            if (r < RW && i < dk) {
                S[r] += ks[i] * rk * u;
                part += S[r] * qs[i] * rq;
            }
        }
        if (slots && c < dv) { // state after token t -> slot t; a running pointer keeps row addresses out of registers
            float *p = slots + ((int64_t)t * Hv + h) * dk * dv + (int64_t)(w * RW) * dv + c;
#pragma unroll
            for (int r = 0; r < SER_ROWS; r++, p += dv)
                if (r < RW && w * RW + r < dk) *p = S[r];
        }
        red[1][w][lane] = part;
        __syncthreads();
        if (w == 0 && c < dv)
            o[((int64_t)t * Hv + h) * dv + c] = red[1][0][lane] + red[1][1][lane] + red[1][2][lane] + red[1][3][lane];

        // the next token overwrites qs/ks/nrm/red: everyone must be done reading them
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < SER_ROWS; r++) {
        int i = w * RW + r;
        if (r < RW && i < dk && c < dv) Sg[(int64_t)i * dv + c] = S[r];
    }
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
        k_gdn_serial<<<dim3(Hv, (dv + 31) / 32), 128, 0, cu_of(be)->stream>>>(
            (float *)o, state_slots, (const float *)qkv, (const float *)b, (const float *)a, Al, dtb, state, n, Hk, Hv,
            dk, dv);
        FD_CUDA_LAUNCH_CHECK();
    } else {
        cu_gdn_chunked(be, (float *)o, (const float *)qkv, (const float *)b, (const float *)a, Al, dtb, state, n, Hk,
                       Hv, dk, dv);
    }
}
