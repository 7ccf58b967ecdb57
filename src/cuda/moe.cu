// Mixture of experts, correctness-first version.
//   router logits [n, E] in fp32 (own kernel, fp32 activations x bf16 weights, so the expert choice matches the
//   fp32 CPU reference instead of flipping near-ties through a bf16-rounded GEMM) -> softmax (fp32) -> top-k
//   (ties: lower expert id) -> renormalise when asked.
//   The choices go to the host (one sync), which sorts the n*k (token, expert) slots by expert; rows are gathered
//   into an expert-sorted buffer, each expert with tokens runs three cuBLASLt GEMMs on its slice, and one combine
//   kernel sums the k weighted rows per token plus sigmoid(x . sh_gate_w) * shared_expert(x). No atomics, so the
//   result is deterministic.
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_common.h"

// out[n, m] = x[n, d] W[m, d]^T, one warp per output element, fp32 accumulation. For narrow outputs only.
__global__ void k_dot_rows(float *out, const float *x, const void *W, int w_bf16, int n, int m, int d) {
    CU_PDL_ENTER();
    int64_t wid = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (wid >= (int64_t)n * m) return;
    int t = (int)(wid / m), e = (int)(wid % m);
    const float *xr = x + (int64_t)t * d;
    float acc = 0.f;
    if (w_bf16) {
        const __nv_bfloat16 *wr = (const __nv_bfloat16 *)W + (int64_t)e * d;
        for (int j = lane; j < d; j += 32) acc += xr[j] * __bfloat162float(wr[j]);
    } else {
        const float *wr = (const float *)W + (int64_t)e * d;
        for (int j = lane; j < d; j += 32) acc += xr[j] * wr[j];
    }
    acc = cu_warp_sum(acc);
    if (lane == 0) out[wid] = acc;
}

static void dot_rows(fd_backend *be, float *out, const float *x, const fd_weight *W, int n) {
    FD_CHECK(W->dev && (W->dev_dtype == FD_BF16 || W->dev_dtype == FD_F32));
    int m = (int)W->rows, d = (int)W->cols;
    int64_t warps = (int64_t)n * m;
    cu_launch(be, k_dot_rows, cu_blocks(warps * 32, 256), 256, 0, out, x, W->dev, W->dev_dtype == FD_BF16, n, m, d);
}

// One warp per token: probs = softmax(logits) in place, then k rounds of warp argmax (lower id wins ties).
__global__ void k_topk(float *logits, int32_t *ids, float *wts, int n, int E, int k, int renorm) {
    CU_PDL_ENTER();
    int t = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (t >= n) return;
    float *p = logits + (int64_t)t * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, p[e]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float s = 0.f;
    for (int e = lane; e < E; e += 32) {
        float v = expf(p[e] - mx);
        p[e] = v;
        s += v;
    }
    s = cu_warp_sum(s);
    __syncwarp();
    for (int e = lane; e < E; e += 32) p[e] /= s;
    __syncwarp();
    float tot = 0.f;
    for (int r = 0; r < k; r++) {
        float bv = -1.f;
        int bi = E;
        for (int e = lane; e < E; e += 32)
            if (p[e] > bv) bv = p[e], bi = e; // ascending e per lane: first max kept
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        if (lane == 0) {
            ids[(int64_t)t * k + r] = bi;
            wts[(int64_t)t * k + r] = bv;
            if (bi < E) p[bi] = -2.f; // taken (bi == E only for NaN probabilities; the host refuses it)
        }
        __syncwarp();
        tot += bv;
    }
    if (renorm && lane < k) wts[(int64_t)t * k + lane] /= tot;
    // k > 32 is refused on the host
}

// xs[r, :] = x[src[r], :]
__global__ void k_gather_rows(float *xs, const float *x, const int32_t *src, int rows, int d) {
    CU_PDL_ENTER();
    for (int r = blockIdx.y; r < rows; r += gridDim.y) // grid.y is capped at 65535
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j += gridDim.x * blockDim.x)
            xs[(int64_t)r * d + j] = x[(int64_t)src[r] * d + j];
}

// out[t, :] = sum_j w[t, j] Y[pos[t, j], :] + (ysh ? sg(t) * ysh[t, :] : 0), sg = sigmoid(shl[t]) or 1
__global__ void k_moe_combine(float *out, const float *Y, const int32_t *pos, const float *w, int k, const float *ysh,
                              const float *shl, int n, int d) {
    CU_PDL_ENTER();
    for (int t = blockIdx.y; t < n; t += gridDim.y) {
        float sg = 1.f;
        if (shl) sg = 1.f / (1.f + expf(-shl[t]));
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < d; j += gridDim.x * blockDim.x) {
            float acc = 0.f;
            for (int r = 0; r < k; r++) acc += w[(int64_t)t * k + r] * Y[(int64_t)pos[(int64_t)t * k + r] * d + j];
            if (ysh) acc += sg * ysh[(int64_t)t * d + j];
            out[(int64_t)t * d + j] = acc;
        }
    }
}

static unsigned row_grid(int d) {
    unsigned g = cu_blocks(d, 256);
    return g > 16 ? 16 : g;
}

// SwiGLU of rows x [rows, d] through (gate, up, down) -> y [rows, d]; uses scratch D and E.
static void swiglu(fd_backend *be, float *y, const float *x, const fd_weight *gate, const fd_weight *up,
                   const fd_weight *down, int rows) {
    int I = (int)gate->rows;
    FD_CHECK(up->rows == I && down->cols == I, "expert %s: inconsistent shapes", gate->name ? gate->name : "?");
    float *G = (float *)cu_scratch(be, CU_SCR_D, (size_t)rows * I * 4);
    float *Uu = (float *)cu_scratch(be, CU_SCR_E, (size_t)rows * I * 4);
    cu_gemm_f32out(be, G, x, gate, rows);
    cu_gemm_f32out(be, Uu, x, up, rows);
    cu_silu_mul(be, G, G, Uu, (int64_t)rows * I);
    cu_gemm_f32out(be, y, G, down, rows);
}

void cu_moe(fd_backend *be, void *out, const void *xv, const fd_moe_weights *mw, int n, int d) {
    if (n <= 0) return;
    cu_impl *c = cu_of(be);
    const float *x = (const float *)xv;
    int E = mw->n_experts, k = mw->top_k;
    FD_CHECK(k >= 1 && k <= 32 && k <= E, "MoE top_k %d unsupported (1..32, <= %d experts)", k, E);
    FD_CHECK(mw->router && mw->router->rows == E && mw->router->cols == d);
    int nk = n * k;

    float *logits = (float *)cu_scratch(be, CU_SCR_B, (size_t)n * E * 4);
    dot_rows(be, logits, x, mw->router, n);
    // H: ids [nk] | w [nk] | pos [nk] | src [nk] | shared-gate logits [n]
    char *hs = (char *)cu_scratch(be, CU_SCR_H, (size_t)(4 * nk + n) * 4);
    int32_t *d_ids = (int32_t *)hs, *d_pos = d_ids + 2 * nk, *d_src = d_ids + 3 * nk;
    float *d_w = (float *)(d_ids + nk), *d_shl = (float *)(d_ids + 4 * nk);
    cu_launch(be, k_topk, cu_blocks((int64_t)n * 32, 128), 128, 0, logits, d_ids, d_w, n, E, k, mw->renorm);

    // Host: counting sort of the slots by expert. pos[t*k + j] = row of slot (t, j) in the sorted buffer.
    int32_t *ids = (int32_t *)fd_malloc((size_t)nk * 4 * 3);
    int32_t *pos = ids + nk, *src = ids + 2 * nk;
    int *start = (int *)fd_calloc((size_t)E + 1, sizeof(int));
    FD_CUDA_CHECK(cudaMemcpyAsync(ids, d_ids, (size_t)nk * 4, cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (int i = 0; i < nk; i++) {
        FD_CHECK(ids[i] >= 0 && ids[i] < E, "router picked expert %d of %d (NaN logits?)", ids[i], E);
        start[ids[i] + 1]++;
    }
    for (int e = 0; e < E; e++) start[e + 1] += start[e];
    int *fill = (int *)fd_malloc((size_t)E * sizeof(int));
    memcpy(fill, start, (size_t)E * sizeof(int));
    for (int i = 0; i < nk; i++) {
        int r = fill[ids[i]]++;
        pos[i] = r;
        src[r] = i / k;
    }
    FD_CUDA_CHECK(cudaMemcpyAsync(d_pos, pos, (size_t)nk * 4 * 2, cudaMemcpyHostToDevice, c->stream));

    float *xs = (float *)cu_scratch(be, CU_SCR_C, (size_t)nk * d * 4);
    float *Y = (float *)cu_scratch(be, CU_SCR_F, (size_t)nk * d * 4);
    cu_launch(be, k_gather_rows, dim3(row_grid(d), nk < 65535 ? (unsigned)nk : 65535u), 256, 0, xs, x, d_src, nk, d);
    for (int e = 0; e < E; e++) {
        int cnt = start[e + 1] - start[e];
        if (!cnt) continue;
        int r0 = start[e];
        swiglu(be, Y + (int64_t)r0 * d, xs + (int64_t)r0 * d, &mw->gate[e], &mw->up[e], &mw->down[e], cnt);
    }

    float *ysh = NULL, *shl = NULL;
    if (mw->sh_gate) {
        ysh = (float *)cu_scratch(be, CU_SCR_G, (size_t)n * d * 4);
        swiglu(be, ysh, x, mw->sh_gate, mw->sh_up, mw->sh_down, n);
        if (mw->sh_gate_w) {
            shl = d_shl;
            dot_rows(be, shl, x, mw->sh_gate_w, n);
        }
    }
    cu_launch(be, k_moe_combine, dim3(row_grid(d), n < 65535 ? (unsigned)n : 65535u), 256, 0, (float *)out, Y, d_pos,
              d_w, k, ysh, shl, n, d);
    // A host-to-device copy from pageable memory is staged before cudaMemcpyAsync returns: safe to free.
    free(ids);
    free(start);
    free(fill);
}
