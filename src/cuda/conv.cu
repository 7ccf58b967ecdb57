// Depthwise causal conv1d (kernel K, no bias) + SiLU over C channels, with an fp32 state holding the previous
// K-1 inputs per channel (oldest first).
//   out[t, c] = silu( sum_j w[c, j] * in(t - (K-1) + j, c) ),  in(s) = x[s, c] for s >= 0, state[c, K-1+s] else
// Calls of up to CONV_TT tokens (decode, verify blocks, small prompt chunks) are one launch: one thread per
// channel walks all the tokens, so it may read its old state and write the new one itself. Longer calls take
// two launches, the outputs (parallel over channels and token tiles) and then the state update, which keeps the
// first kernel free of a read/write race on the state between token tiles.
// state_slots (optional, f32 [n, C, K-1]): the state after token t, i.e. in(t-K+2 .. t), written to slot t.
// Tree verify (k_conv1d_silu_tree, at the end): every node's window from its ancestors' inputs.
#include "cuda/cuda_common.h"

#define CONV_MAXK 8
#define CONV_TT   64 // tokens per thread

// new_state (non-NULL only with a single token tile, gridDim.y == 1): where this thread leaves its channel's
// state after the last token (the same buffer as `state`: the thread read it before).
__global__ void k_conv1d_silu(float *out, float *slots, float *new_state, const float *x, const float *w,
                              const float *state, int n, int C, int K) {
    CU_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int t0 = blockIdx.y * CONV_TT;
    int t1 = min(n, t0 + CONV_TT);
    // win[j] = in(t - (K-1) + j): a sliding window in registers, so each input is loaded once per thread
    float wk[CONV_MAXK], win[CONV_MAXK];
#pragma unroll
    for (int j = 0; j < CONV_MAXK; j++) {
        wk[j] = j < K ? w[(int64_t)c * K + j] : 0.f;
        int s = t0 - (K - 1) + j;
        win[j] = j < K - 1 ? (s >= 0 ? x[(int64_t)s * C + c] : state[(int64_t)c * (K - 1) + (K - 1) + s]) : 0.f;
    }
    for (int t = t0; t < t1; t++) {
        float xt = x[(int64_t)t * C + c], acc = 0.f;
#pragma unroll
        for (int j = 0; j < CONV_MAXK; j++) {
            if (j == K - 1) win[j] = xt;
            if (j < K) acc += wk[j] * win[j];
        }
        out[(int64_t)t * C + c] = acc / (1.f + expf(-acc));
#pragma unroll
        for (int j = 0; j < CONV_MAXK - 1; j++) win[j] = win[j + 1]; // win[0..K-2] = in(t-K+2 .. t)
        if (slots) {
#pragma unroll
            for (int j = 0; j < CONV_MAXK - 1; j++)
                if (j < K - 1) slots[((int64_t)t * C + c) * (K - 1) + j] = win[j];
        }
    }
    if (new_state) { // win[0..K-2] = in(n-K+1 .. n-1): k_conv_state's result
#pragma unroll
        for (int j = 0; j < CONV_MAXK - 1; j++)
            if (j < K - 1) new_state[(int64_t)c * (K - 1) + j] = win[j];
    }
}

// new_state[c, j] = in(n - (K-1) + j, c) for j < K-1, reading the old state before overwriting it.
__global__ void k_conv_state(float *state, const float *x, int n, int C, int K) {
    CU_PDL_ENTER();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float nv[CONV_MAXK];
#pragma unroll
    for (int j = 0; j < CONV_MAXK - 1; j++) {
        if (j < K - 1) {
            int s = n - (K - 1) + j;
            nv[j] = s >= 0 ? x[(int64_t)s * C + c] : state[(int64_t)c * (K - 1) + (K - 1) + s];
        }
    }
#pragma unroll
    for (int j = 0; j < CONV_MAXK - 1; j++)
        if (j < K - 1) state[(int64_t)c * (K - 1) + j] = nv[j];
}

void cu_conv1d_silu(fd_backend *be, void *out, const void *x, const fd_weight *w, float *conv_state, int n, int C,
                    int K, float *state_slots) {
    if (n <= 0) return;
    FD_CHECK(K >= 1 && K <= CONV_MAXK, "conv kernel %d unsupported (max %d)", K, CONV_MAXK);
    FD_CHECK(w->rows == C && w->cols == K, "conv weight %s is [%lld, %lld], want [%d, %d]", w->name ? w->name : "?",
             (long long)w->rows, (long long)w->cols, C, K);
    cudaStream_t s = cu_of(be)->stream;
    const int one_tile = n <= CONV_TT;
    dim3 grid(cu_blocks(C, 128), cu_blocks(n, CONV_TT));
    cu_launch(be, k_conv1d_silu, grid, 128, 0, (float *)out, state_slots, one_tile ? conv_state : NULL,
              (const float *)x, cu_wf32(w), conv_state, n, C, K);
    if (K > 1 && !one_tile) {
        cu_launch(be, k_conv_state, cu_blocks(C, 128), 128, 0, conv_state, (const float *)x, n, C, K);
    }
}

// Tree verify (conv1d_silu_tree): node t's window is the inputs of its path, t and its K-2 nearest ancestors
// (in(d) for a node at depth d is its own x row), then, past the root, the committed state's tail, exactly the
// chain's window over that path. Every node's window comes straight from x (its ancestors' rows) and the state,
// so one thread per (node, channel) runs with no dependency on other nodes' slots. Slot t = the window after t.
// grid (ceil(C / 128), n); the committed state is only read.
__global__ void k_conv1d_silu_tree(float *out, float *slots, const float *x, const float *w, const float *state,
                                   const int32_t *parent, int n, int C, int K) {
    CU_PDL_ENTER();
    const int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (c >= C || t >= n) return;
    float wk[CONV_MAXK], win[CONV_MAXK]; // win[j] = in(depth - (K-1) + j) along the path, as k_conv1d_silu's
    int a = t, before_root = 0;          // the path's node for win[j] walking down from j = K-1; steps past the root
#pragma unroll
    for (int j = CONV_MAXK - 1; j >= 0; j--) {
        if (j >= K) continue;
        wk[j] = w[(int64_t)c * K + j];
        if (a >= 0) {
            win[j] = x[(int64_t)a * C + c];
            const int p = parent[a];
            if (p >= a) __trap(); // the engine checks the tree before the forward
            a = p;
        } else { // in(s) = state[c, K-1+s] for s < 0: before_root = 1 is s = -1
            before_root++;
            win[j] = state[(int64_t)c * (K - 1) + (K - 1) - before_root];
        }
    }
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < CONV_MAXK; j++)
        if (j < K) acc += wk[j] * win[j];
    out[(int64_t)t * C + c] = acc / (1.f + expf(-acc));
#pragma unroll
    for (int j = 0; j < CONV_MAXK - 1; j++) // the window after t: in(depth-K+2 .. depth)
        if (j < K - 1) slots[((int64_t)t * C + c) * (K - 1) + j] = win[j + 1];
}

void cu_conv1d_silu_tree(fd_backend *be, void *out, const void *x, const fd_weight *w, const float *conv_state, int n,
                         int C, int K, float *state_slots, const int32_t *parent_dev) {
    if (n <= 0) return;
    FD_CHECK(K >= 1 && K <= CONV_MAXK, "conv kernel %d unsupported (max %d)", K, CONV_MAXK);
    FD_CHECK(w->rows == C && w->cols == K, "conv weight %s is [%lld, %lld], want [%d, %d]", w->name ? w->name : "?",
             (long long)w->rows, (long long)w->cols, C, K);
    FD_CHECK(state_slots && parent_dev, "conv tree: slots and parents required");
    FD_CHECK(n <= 65535, "conv tree of %d nodes exceeds the grid", n);
    const dim3 grid(cu_blocks(C, 128), (unsigned)n);
    cu_launch(be, k_conv1d_silu_tree, grid, 128, 0, (float *)out, state_slots, (const float *)x, cu_wf32(w), conv_state,
              parent_dev, n, C, K);
}
