// Row norms (zero-centred and plain RMSNorm, the GDN gated RMSNorm, the residual add fused with the next norm),
// partial NeoX RoPE, the fused q/k norm + RoPE of attention and the elementwise ops. All fp32; one pass each.
// Reductions accumulate in fp32 per thread, then a tree over the block (or one warp).
#include "cuda/cuda_common.h"

static __device__ __forceinline__ float silu_f(float x) {
    return x / (1.f + expf(-x));
}
static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.f / (1.f + expf(-x));
}

// Row norms keep a thread's elements (and their weights) in registers when d <= RMS_REG x the block size: the
// weights then load next to x, before the block reduction, instead of one more memory round trip after it (a
// decode step runs ~130 of these one-row norms; they are latency, not bandwidth). The float operations and their
// order are those of the plain loops (kept for larger d), so both forms give the same bits.
#define RMS_REG 16

// The end of a row norm, shared by k_rmsnorm and k_add_rmsnorm: ss (this thread's sum of squares) summed over the
// block, then out = x * rsqrt(mean + eps) * weight, from the registers (v, wv: the thread's elements and weights,
// see RMS_REG) or from memory (xr, w).
static __device__ __forceinline__ void rms_finish_regs(float *orow, const float (&v)[RMS_REG],
                                                       const float (&wv)[RMS_REG], float ss, int d, float eps) {
    ss = cu_block_sum(ss);
    const float r = rsqrtf(ss / (float)d + eps);
#pragma unroll
    for (int i = 0; i < RMS_REG; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < d) orow[j] = v[i] * r * wv[i];
    }
}
static __device__ __forceinline__ void rms_finish(float *orow, const float *xr, const float *w, float ss, int d,
                                                  float eps, int plus_one) {
    ss = cu_block_sum(ss);
    float r = rsqrtf(ss / (float)d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float wj = plus_one ? 1.f + w[j] : w[j];
        orow[j] = xr[j] * r * wj;
    }
}

// One block per row. out may alias x: each element is read and then written by the same thread.
__global__ void k_rmsnorm(float *out, const float *x, const float *w, int d, float eps, int plus_one) {
    CU_PDL_ENTER();
    int64_t row = blockIdx.x;
    const float *xr = x + row * d;
    float *orow = out + row * d;
    float ss = 0.f;
    if (d <= RMS_REG * (int)blockDim.x) {
        float v[RMS_REG] = {0.f}, wv[RMS_REG] = {0.f};
#pragma unroll
        for (int i = 0; i < RMS_REG; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < d) v[i] = xr[j], wv[i] = plus_one ? 1.f + w[j] : w[j];
        }
#pragma unroll
        for (int i = 0; i < RMS_REG; i++)
            if (threadIdx.x + i * blockDim.x < d) ss += v[i] * v[i];
        rms_finish_regs(orow, v, wv, ss, d, eps);
        return;
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
    rms_finish(orow, xr, w, ss, d, eps, plus_one);
}

// The block size of a row norm depends on d only, so a row's reduction order never depends on n.
static int rms_threads(int d) {
    return d >= 1024 ? 512 : 128;
}

void cu_rmsnorm(fd_backend *be, void *out, const void *x, const fd_weight *w, int64_t n, int d, float eps,
                int plus_one) {
    if (n <= 0) return;
    FD_CHECK(n < (1ll << 31));
    cu_launch(be, k_rmsnorm, (unsigned)n, rms_threads(d), 0, (float *)out, (const float *)x, cu_wf32(w), d, eps,
              plus_one);
}

// k_add then k_rmsnorm in one pass: the same block size, loops and float operations as k_rmsnorm on the sum
// (each thread adds, stores and squares its own elements, then re-reads what it stored), so the results are
// bitwise the two-kernel path's. Saves a launch and one read of x per decoder sublayer.
__global__ void k_add_rmsnorm(float *out, float *x, const float *y, const float *w, int d, float eps, int plus_one) {
    CU_PDL_ENTER();
    int64_t row = blockIdx.x;
    float *xr = x + row * d;
    const float *yr = y + row * d;
    float *orow = out + row * d;
    float ss = 0.f;
    if (d <= RMS_REG * (int)blockDim.x) { // registers (see k_rmsnorm)
        float v[RMS_REG] = {0.f}, wv[RMS_REG] = {0.f};
#pragma unroll
        for (int i = 0; i < RMS_REG; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < d) v[i] = xr[j] + yr[j], wv[i] = plus_one ? 1.f + w[j] : w[j];
        }
#pragma unroll
        for (int i = 0; i < RMS_REG; i++) {
            const int j = threadIdx.x + i * blockDim.x;
            if (j < d) {
                xr[j] = v[i];
                ss += v[i] * v[i];
            }
        }
        rms_finish_regs(orow, v, wv, ss, d, eps);
        return;
    }
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j] + yr[j];
        xr[j] = v;
        ss += v * v;
    }
    rms_finish(orow, xr, w, ss, d, eps, plus_one);
}

void cu_add_rmsnorm(fd_backend *be, void *out, void *x, const void *y, const fd_weight *w, int64_t n, int d, float eps,
                    int plus_one) {
    if (n <= 0) return;
    FD_CHECK(n < (1ll << 31));
    cu_launch(be, k_add_rmsnorm, (unsigned)n, rms_threads(d), 0, (float *)out, (float *)x, (const float *)y, cu_wf32(w),
              d, eps, plus_one);
}

// One warp per row of dv: out = w * x * rsqrt(mean(x^2) + eps) * silu(z). out may alias x (per-lane read, then write).
#define GRMS_REG 8
__global__ void k_gated_rmsnorm(float *out, const float *x, const float *z, const float *w, int64_t rows, int dv,
                                float eps) {
    CU_PDL_ENTER();
    int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *xr = x + row * dv, *zr = z + row * dv;
    float ss = 0.f;
    if (dv <= 32 * GRMS_REG) { // registers: z, w and silu(z) load and compute before the reduction (see k_rmsnorm)
        float xv[GRMS_REG] = {0.f}, gv[GRMS_REG] = {0.f}, wv[GRMS_REG] = {0.f};
#pragma unroll
        for (int i = 0; i < GRMS_REG; i++) {
            const int j = lane + 32 * i;
            if (j < dv) xv[i] = xr[j], gv[i] = silu_f(zr[j]), wv[i] = w[j];
        }
#pragma unroll
        for (int i = 0; i < GRMS_REG; i++)
            if (lane + 32 * i < dv) ss += xv[i] * xv[i];
        ss = cu_warp_sum(ss);
        const float r = rsqrtf(ss / (float)dv + eps);
#pragma unroll
        for (int i = 0; i < GRMS_REG; i++) {
            const int j = lane + 32 * i;
            if (j < dv) out[row * dv + j] = wv[i] * (xv[i] * r) * gv[i];
        }
        return;
    }
    for (int j = lane; j < dv; j += 32) ss += xr[j] * xr[j];
    ss = cu_warp_sum(ss);
    float r = rsqrtf(ss / (float)dv + eps);
    for (int j = lane; j < dv; j += 32) out[row * dv + j] = w[j] * (xr[j] * r) * silu_f(zr[j]);
}

void cu_gated_rmsnorm(fd_backend *be, void *out, const void *x, const void *z, const fd_weight *w, int64_t rows, int dv,
                      float eps) {
    if (rows <= 0) return;
    cu_launch(be, k_gated_rmsnorm, cu_blocks(rows, 8), 256, 0, (float *)out, (const float *)x, (const float *)z,
              cu_wf32(w), rows, dv, eps);
}

// ---- elementwise ----
#define GRID_STRIDE(i, count)                                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_add(float *x, const float *y, int64_t count) {
    CU_PDL_ENTER();
    GRID_STRIDE(i, count) x[i] += y[i];
}
__global__ void k_silu_mul(float *out, const float *g, const float *u, int64_t count) {
    CU_PDL_ENTER();
    GRID_STRIDE(i, count) out[i] = silu_f(g[i]) * u[i];
}
__global__ void k_sigmoid_mul(float *x, const float *gate, int64_t count) {
    CU_PDL_ENTER();
    GRID_STRIDE(i, count) x[i] *= sigmoid_f(gate[i]);
}

static unsigned ew_grid(int64_t count) {
    unsigned b = cu_blocks(count, 256);
    return b > 8192u ? 8192u : (b ? b : 1u);
}

void cu_add(fd_backend *be, void *x, const void *y, int64_t count) {
    if (count <= 0) return;
    cu_launch(be, k_add, ew_grid(count), 256, 0, (float *)x, (const float *)y, count);
}
void cu_silu_mul(fd_backend *be, void *out, const void *g, const void *u, int64_t count) {
    if (count <= 0) return;
    cu_launch(be, k_silu_mul, ew_grid(count), 256, 0, (float *)out, (const float *)g, (const float *)u, count);
}
void cu_sigmoid_mul(fd_backend *be, void *x, const void *gate, int64_t count) {
    if (count <= 0) return;
    cu_launch(be, k_sigmoid_mul, ew_grid(count), 256, 0, (float *)x, (const float *)gate, count);
}

// qg [n, H, 2hd] (per head: query | gate) -> q [n, H, hd], gate [n, H*hd]
__global__ void k_split_q_gate(float *q, float *gate, const float *qg, int64_t count, int hd) {
    CU_PDL_ENTER();
    GRID_STRIDE(i, count) { // i indexes q: (token*H + head)*hd + j
        int64_t th = i / hd;
        int j = (int)(i - th * hd);
        q[i] = qg[th * 2 * hd + j];
        gate[i] = qg[th * 2 * hd + hd + j];
    }
}

void cu_split_q_gate(fd_backend *be, void *q, void *gate, const void *qg, int n, int H, int hd) {
    int64_t count = (int64_t)n * H * hd;
    if (count <= 0) return;
    cu_launch(be, k_split_q_gate, ew_grid(count), 256, 0, (float *)q, (float *)gate, (const float *)qg, count, hd);
}

// NeoX rotary on dims [0, rot_dim) of each head: pairs (i, i + rot_dim/2) rotate by pos * inv_freq[i].
// Angles follow HF (and the CPU reference) bit for bit where it matters: inv_freq = 1 / theta^(2i/rot) in fp32
// on the host, angle = (float)pos * inv_freq in fp32; only cos/sin differ (full-precision sincosf).
__global__ void k_rope(float *x, int n, int H, int hd, int half, const float *inv_freq, int64_t pos0,
                       const int64_t *pos_dev) {
    CU_PDL_ENTER();
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; // over n*H*half
    int64_t total = (int64_t)n * H * half;
    if (idx >= total) return;
    if (pos_dev) pos0 = *pos_dev; // read at execution time: a replayed CUDA graph rotates for the current step
    int i = (int)(idx % half);
    int64_t th = idx / half;
    int64_t t = th / H;
    float ang = __fmul_rn((float)(pos0 + t), inv_freq[i]); // no FMA contraction: same rounding as the CPU
    float s, c;
    sincosf(ang, &s, &c);
    float *xh = x + th * hd;
    float x1 = xh[i], x2 = xh[i + half];
    xh[i] = x1 * c - x2 * s;
    xh[i + half] = x2 * c + x1 * s;
}

// The device table of inverse frequencies for (theta, rot_dim), made on first use. NULL when it would have to be
// made during a CUDA graph recording (a host copy cannot be recorded): the recording is then discarded and re-run.
static const float *rope_inv_freq(fd_backend *be, float theta, int rot_dim) {
    cu_impl *c = cu_of(be);
    for (int i = 0; i < c->n_rope_tab; i++)
        if (c->rope_tab[i].theta == theta && c->rope_tab[i].rot_dim == rot_dim) return c->rope_tab[i].inv;
    if (c->capturing) {
        cu_capture_fail(be, "rope: first use of a (theta, rot_dim) pair");
        return NULL;
    }
    FD_CHECK(c->n_rope_tab < CU_ROPE_TABLES, "rope: more than %d distinct (theta, rot_dim) pairs", CU_ROPE_TABLES);
    const int half = rot_dim / 2;
    float inv[512];
    for (int i = 0; i < half; i++) inv[i] = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
    float *dinv = NULL;
    FD_CUDA_CHECK(cudaMalloc(&dinv, (size_t)half * sizeof(float)));
    // From pageable memory the copy is staged before the call returns, so `inv` may go out of scope.
    FD_CUDA_CHECK(cudaMemcpyAsync(dinv, inv, (size_t)half * sizeof(float), cudaMemcpyHostToDevice, c->stream));
    c->rope_tab[c->n_rope_tab].theta = theta;
    c->rope_tab[c->n_rope_tab].rot_dim = rot_dim;
    c->rope_tab[c->n_rope_tab++].inv = dinv;
    return dinv;
}

void cu_rope(fd_backend *be, void *x, int n, int H, int hd, int rot_dim, float theta, int64_t pos0,
             const int64_t *pos_dev) {
    if (n <= 0 || rot_dim <= 0) return;
    if ((rot_dim & 1) || rot_dim > hd || rot_dim > 1024)
        FD_PANIC("rope: rot_dim %d unsupported (head_dim %d)", rot_dim, hd);
    const int half = rot_dim / 2;
    const float *dinv = rope_inv_freq(be, theta, rot_dim);
    if (!dinv) return;
    int64_t total = (int64_t)n * H * half;
    cu_launch(be, k_rope, cu_blocks(total, 256), 256, 0, (float *)x, n, H, hd, half, dinv, pos0, pos_dev);
}

// ---- fused q/k preparation of gated attention (qk_norm_rope) ----
// One warp per (token, head) row, q heads first then k heads of each token: split off the gate (q rows), the
// zero-centred RMSNorm of the row (warp reduction), then NeoX rotary on dims [0, 2 half). The normalised row goes
// through shared memory so a lane can pair dim i with dim i + half for any rot_dim. A row's arithmetic depends on
// hd, its position and its data only: bitwise the same in a 1-token decode and in a verify block.
// row_pos (a verify tree, qk_norm_rope_tree): token t sits at pos0 + row_pos[t] (its depth), not at pos0 + t.
#define QKR_WARPS 4
__global__ void k_qk_norm_rope(float *q, float *gate, float *k, const float *qg, const float *q_w, const float *k_w,
                               int n, int H, int Hkv, int hd, int half, const float *inv_freq, float eps, int64_t pos0,
                               const int64_t *pos_dev, const int32_t *row_pos) {
    CU_PDL_ENTER();
    extern __shared__ float qkr_rows[]; // [QKR_WARPS, hd]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int heads = H + Hkv;
    const int64_t r = (int64_t)blockIdx.x * QKR_WARPS + warp;
    if (r >= (int64_t)n * heads) return; // whole warps leave; only __syncwarp below
    if (pos_dev) pos0 = *pos_dev;        // read at execution time, as k_rope
    const int64_t t = r / heads;
    const int h = (int)(r - t * heads);
    const float *src, *w;
    float *dst;
    if (h < H) {
        const float *qgr = qg + (t * H + h) * 2 * hd;
        float *gr = gate + (t * H + h) * hd;
        for (int j = lane; j < hd; j += 32) gr[j] = qgr[hd + j];
        src = qgr, dst = q + (t * H + h) * hd, w = q_w;
    } else {
        dst = k + (t * Hkv + (h - H)) * hd, src = dst, w = k_w; // in place: every read precedes __syncwarp
    }
    float *buf = qkr_rows + warp * hd;
    float ss = 0.f;
    for (int j = lane; j < hd; j += 32) {
        float v = src[j];
        buf[j] = v;
        ss += v * v;
    }
    ss = cu_warp_sum(ss);
    const float rs = rsqrtf(ss / (float)hd + eps);
    for (int j = lane; j < hd; j += 32) buf[j] = buf[j] * rs * (1.f + w[j]);
    __syncwarp();
    const float pos = (float)(pos0 + (row_pos ? (int64_t)row_pos[t] : t));
    for (int j = lane; j < hd; j += 32) {
        float v = buf[j];
        if (j < 2 * half) {
            const int i = j < half ? j : j - half;
            float sn, cs;
            sincosf(__fmul_rn(pos, inv_freq[i]), &sn, &cs); // the angle exactly as k_rope and the CPU
            v = j < half ? buf[j] * cs - buf[j + half] * sn : buf[j] * cs + buf[i] * sn;
        }
        dst[j] = v;
    }
}

void cu_qk_norm_rope(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                     const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta, float eps,
                     int64_t pos0, const int64_t *pos_dev) {
    if (n <= 0) return;
    if (rot_dim < 0 || (rot_dim & 1) || rot_dim > hd || hd > 1024)
        FD_PANIC("qk_norm_rope: rot_dim %d / head_dim %d unsupported", rot_dim, hd);
    const float *dinv = NULL;
    if (rot_dim > 0 && !(dinv = rope_inv_freq(be, theta, rot_dim))) return; // recording discarded (see above)
    const int64_t rows = (int64_t)n * (H + Hkv);
    cu_launch(be, k_qk_norm_rope, cu_blocks(rows, QKR_WARPS), QKR_WARPS * 32, (size_t)QKR_WARPS * hd * sizeof(float),
              (float *)q, (float *)gate, (float *)k, (const float *)qg, cu_wf32(q_norm), cu_wf32(k_norm), n, H, Hkv, hd,
              rot_dim / 2, dinv, eps, pos0, pos_dev, (const int32_t *)NULL);
}

void cu_qk_norm_rope_tree(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                          const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta, float eps,
                          int64_t pos0, const int32_t *depth_dev) {
    if (n <= 0) return;
    if (rot_dim < 0 || (rot_dim & 1) || rot_dim > hd || hd > 1024)
        FD_PANIC("qk_norm_rope_tree: rot_dim %d / head_dim %d unsupported", rot_dim, hd);
    FD_CHECK(depth_dev, "qk_norm_rope_tree: depths required");
    const float *dinv = NULL;
    if (rot_dim > 0 && !(dinv = rope_inv_freq(be, theta, rot_dim))) return;
    const int64_t rows = (int64_t)n * (H + Hkv);
    cu_launch(be, k_qk_norm_rope, cu_blocks(rows, QKR_WARPS), QKR_WARPS * 32, (size_t)QKR_WARPS * hd * sizeof(float),
              (float *)q, (float *)gate, (float *)k, (const float *)qg, cu_wf32(q_norm), cu_wf32(k_norm), n, H, Hkv, hd,
              rot_dim / 2, dinv, eps, pos0, (const int64_t *)NULL, depth_dev);
}
