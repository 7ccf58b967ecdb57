// Depthwise causal conv1d (kernel K, no bias) + SiLU over C channels, with an fp32 state holding the previous
// K-1 inputs per channel (oldest first).
//   out[t, c] = silu( sum_j w[c, j] * in(t - (K-1) + j, c) ),  in(s) = x[s, c] for s >= 0, state[c, K-1+s] else
// Calls of up to CONV_TT tokens (decode, verify blocks, small prompt chunks) are one launch: one thread per
// channel walks all the tokens, so it may read its old state and write the new one itself. Longer calls take
// two launches, the outputs (parallel over channels and token tiles) and then the state update, which keeps the
// first kernel free of a read/write race on the state between token tiles.
// state_slots (optional, f32 [n, C, K-1]): the state after token t, i.e. in(t-K+2 .. t), written to slot t.
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
