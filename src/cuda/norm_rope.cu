// Row norms (zero-centred and plain RMSNorm, the GDN gated RMSNorm), partial NeoX RoPE and the elementwise
// ops. All fp32; one pass each. Reductions accumulate in fp32 per thread, then a tree over the block.
#include "cuda/cuda_common.h"

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over a block of up to 1024 threads; every thread gets the result.
static __device__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads(); // `part` may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    float t = lane < nw ? part[lane] : 0.f;
    return warp_sum(t);
}

static __device__ __forceinline__ float silu_f(float x) {
    return x / (1.f + expf(-x));
}
static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.f / (1.f + expf(-x));
}

// One block per row. out may alias x: each element is read and then written by the same thread.
__global__ void k_rmsnorm(float *out, const float *x, const float *w, int d, float eps, int plus_one) {
    int64_t row = blockIdx.x;
    const float *xr = x + row * d;
    float *orow = out + row * d;
    float ss = 0.f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) ss += xr[j] * xr[j];
    ss = block_sum(ss);
    float r = rsqrtf(ss / (float)d + eps);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float wj = plus_one ? 1.f + w[j] : w[j];
        orow[j] = xr[j] * r * wj;
    }
}

void cu_rmsnorm(fd_backend *be, void *out, const void *x, const fd_weight *w, int64_t n, int d, float eps,
                int plus_one) {
    if (n <= 0) return;
    FD_CHECK(n < (1ll << 31));
    k_rmsnorm<<<(unsigned)n, d >= 1024 ? 512 : 128, 0, cu_of(be)->stream>>>((float *)out, (const float *)x, cu_wf32(w),
                                                                            d, eps, plus_one);
    FD_CUDA_LAUNCH_CHECK();
}

// One warp per row of dv: out = w * x * rsqrt(mean(x^2) + eps) * silu(z).
__global__ void k_gated_rmsnorm(float *out, const float *x, const float *z, const float *w, int64_t rows, int dv,
                                float eps) {
    int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float *xr = x + row * dv, *zr = z + row * dv;
    float ss = 0.f;
    for (int j = lane; j < dv; j += 32) ss += xr[j] * xr[j];
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)dv + eps);
    for (int j = lane; j < dv; j += 32) out[row * dv + j] = w[j] * (xr[j] * r) * silu_f(zr[j]);
}

void cu_gated_rmsnorm(fd_backend *be, void *out, const void *x, const void *z, const fd_weight *w, int64_t rows, int dv,
                      float eps) {
    if (rows <= 0) return;
    k_gated_rmsnorm<<<cu_blocks(rows, 8), 256, 0, cu_of(be)->stream>>>((float *)out, (const float *)x, (const float *)z,
                                                                       cu_wf32(w), rows, dv, eps);
    FD_CUDA_LAUNCH_CHECK();
}

// ---- elementwise ----
#define GRID_STRIDE(i, count)                                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_add(float *x, const float *y, int64_t count) {
    GRID_STRIDE(i, count) x[i] += y[i];
}
__global__ void k_silu_mul(float *out, const float *g, const float *u, int64_t count) {
    GRID_STRIDE(i, count) out[i] = silu_f(g[i]) * u[i];
}
__global__ void k_sigmoid_mul(float *x, const float *gate, int64_t count) {
    GRID_STRIDE(i, count) x[i] *= sigmoid_f(gate[i]);
}

static unsigned ew_grid(int64_t count) {
    unsigned b = cu_blocks(count, 256);
    return b > 8192u ? 8192u : (b ? b : 1u);
}

void cu_add(fd_backend *be, void *x, const void *y, int64_t count) {
    if (count <= 0) return;
    k_add<<<ew_grid(count), 256, 0, cu_of(be)->stream>>>((float *)x, (const float *)y, count);
    FD_CUDA_LAUNCH_CHECK();
}
void cu_silu_mul(fd_backend *be, void *out, const void *g, const void *u, int64_t count) {
    if (count <= 0) return;
    k_silu_mul<<<ew_grid(count), 256, 0, cu_of(be)->stream>>>((float *)out, (const float *)g, (const float *)u, count);
    FD_CUDA_LAUNCH_CHECK();
}
void cu_sigmoid_mul(fd_backend *be, void *x, const void *gate, int64_t count) {
    if (count <= 0) return;
    k_sigmoid_mul<<<ew_grid(count), 256, 0, cu_of(be)->stream>>>((float *)x, (const float *)gate, count);
    FD_CUDA_LAUNCH_CHECK();
}

// qg [n, H, 2hd] (per head: query | gate) -> q [n, H, hd], gate [n, H*hd]
__global__ void k_split_q_gate(float *q, float *gate, const float *qg, int64_t count, int hd) {
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
    k_split_q_gate<<<ew_grid(count), 256, 0, cu_of(be)->stream>>>((float *)q, (float *)gate, (const float *)qg, count,
                                                                  hd);
    FD_CUDA_LAUNCH_CHECK();
}

// NeoX rotary on dims [0, rot_dim) of each head: pairs (i, i + rot_dim/2) rotate by pos * inv_freq[i].
// Angles follow HF (and the CPU reference) bit for bit where it matters: inv_freq = 1 / theta^(2i/rot) in fp32
// on the host, angle = (float)pos * inv_freq in fp32; only cos/sin differ (full-precision sincosf).
__global__ void k_rope(float *x, int n, int H, int hd, int half, const float *inv_freq, int64_t pos0,
                       const int64_t *pos_dev) {
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
    k_rope<<<cu_blocks(total, 256), 256, 0, cu_of(be)->stream>>>((float *)x, n, H, hd, half, dinv, pos0, pos_dev);
    FD_CUDA_LAUNCH_CHECK();
}
