// CUDA graphs for fixed-shape forwards (decode steps, verify blocks) and the device argmax of greedy decoding.
//
// Recording: the engine calls graph_begin, issues the forward's ops as usual, and graph_end turns what the stream
// recorded into an executable graph; a later step of the same shape launches that graph instead of ~1000 kernels.
// Everything that changes between steps is read by the kernels from device memory when they run (the position
// pos_dev, the ids ids_dev, the caches and states in place), so a replay computes the current step exactly as the
// eager ops would: the same kernels with the same launch shapes (bitwise equal results).
//
// What may not happen inside a recording, and how each case is handled:
//  - synchronising or freeing (cu_scratch growth): the old buffer is kept until graph_end, the recording is
//    marked failed (cu_capture_fail), graph_end discards it and returns NULL; the engine re-runs the ops eagerly.
//  - copies from host memory: none of the recorded ops makes one (embed reads ids_dev, rope keeps its frequency
//    tables on the device; a missing table fails the recording like a scratch growth).
//  - MoE layers copy routing decisions to the host, so the engine never records a MoE model's forward.
// Capture mode is Relaxed: the backend's buffers may be cudaMalloc'ed while recording (a growth that the failed
// recording then discards) without the capture being invalidated.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_common.h"

void cu_capture_fail(fd_backend *be, const char *why) {
    cu_impl *c = cu_of(be);
    if (c->capturing && !c->capture_fail) c->capture_fail = why;
}

static int cu_graph_begin(fd_backend *be) {
    cu_impl *c = cu_of(be);
    if (c->capturing) return -1;
    FD_CUDA_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed));
    c->capturing = 1;
    c->capture_fail = NULL;
    return 0;
}

static void *cu_graph_end(fd_backend *be) {
    cu_impl *c = cu_of(be);
    FD_CHECK(c->capturing, "graph_end without graph_begin");
    cudaGraph_t graph = NULL;
    cudaError_t err = cudaStreamEndCapture(c->stream, &graph);
    c->capturing = 0;
    const char *fail = c->capture_fail;
    if (err != cudaSuccess) {
        fail = cudaGetErrorString(err);
        (void)cudaGetLastError(); // a failed capture is not a sticky error: clear it
    }
    cudaGraphExec_t exec = NULL;
    if (!fail) {
        err = cudaGraphInstantiate(&exec, graph, 0);
        if (err != cudaSuccess) {
            fail = cudaGetErrorString(err);
            (void)cudaGetLastError();
            exec = NULL;
        }
    }
    if (graph) FD_CUDA_CHECK(cudaGraphDestroy(graph)); // the executable keeps what it needs
    if (c->n_deferred) {
        // Buffers replaced while recording: no recorded op ever ran, earlier eager ops may still read them.
        FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
        for (int i = 0; i < c->n_deferred; i++) FD_CUDA_CHECK(cudaFree(c->deferred_free[i]));
        c->n_deferred = 0;
    }
    if (fail) {
        FD_INFO("cuda: graph recording discarded (%s); this forward runs eagerly", fail);
        return NULL;
    }
    return (void *)exec;
}

static void cu_graph_launch(fd_backend *be, void *graph) {
    FD_CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph, cu_of(be)->stream));
}

static void cu_graph_free(fd_backend *be, void *graph) {
    if (!graph) return;
    FD_CUDA_CHECK(cudaStreamSynchronize(cu_of(be)->stream)); // a launch of it may still be running
    FD_CUDA_CHECK(cudaGraphExecDestroy((cudaGraphExec_t)graph));
}

static uint64_t cu_graph_generation(fd_backend *be) {
    return cu_of(be)->graph_gen;
}

// ---- argmax over each row of [rows, V] f32 logits ----
// One block per row. Each thread scans a strided slice in increasing index, keeping the first maximum it meets;
// the block then reduces (value, index) pairs with "larger value, else lower index", an order-independent rule,
// so the result is the lowest index of the row's maximum whatever the thread layout. NaN counts as -inf (the
// host engine_argmax differs only for a NaN in column 0, which it returns).
#define ARGMAX_THREADS 1024

static __device__ __forceinline__ void argmax_pick(float &bv, int &bi, float v, int i) {
    if (v > bv || (v == bv && i < bi)) {
        bv = v;
        bi = i;
    }
}

__global__ void __launch_bounds__(ARGMAX_THREADS) k_argmax_rows(int32_t *out, const float *logits, int V) {
    CU_PDL_ENTER();
    const float *row = logits + (int64_t)blockIdx.x * V;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = row[i];
        if (v != v) v = -INFINITY;
        argmax_pick(bv, bi, v, i);
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_pick(bv, bi, ov, oi);
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        sv[warp] = bv;
        si[warp] = bi;
    }
    __syncthreads();
    if (warp) return;
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi = lane < nw ? si[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        argmax_pick(bv, bi, ov, oi);
    }
    if (lane == 0) out[blockIdx.x] = bi < V ? bi : 0; // an empty row (V == 0) cannot happen; stay in range anyway
}

void cu_argmax_rows(fd_backend *be, int32_t *out_host, const float *logits_dev, int rows, int V) {
    cu_impl *c = cu_of(be);
    if (rows <= 0) return;
    FD_CHECK(V > 0, "argmax over %d logits", V);
    int32_t *ids = (int32_t *)cu_scratch(be, CU_SCR_H, (size_t)rows * sizeof(int32_t));
    cu_launch(be, k_argmax_rows, (unsigned)rows, ARGMAX_THREADS, 0, ids, logits_dev, V);
    if (c->argmax_host_len < rows) { // pinned, so the 4 bytes per row come back without a staging copy
        if (c->argmax_host) FD_CUDA_CHECK(cudaFreeHost(c->argmax_host));
        c->argmax_host_len = rows < 64 ? 64 : rows;
        FD_CUDA_CHECK(cudaMallocHost((void **)&c->argmax_host, (size_t)c->argmax_host_len * sizeof(int32_t)));
    }
    FD_CUDA_CHECK(
        cudaMemcpyAsync(c->argmax_host, ids, (size_t)rows * sizeof(int32_t), cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    memcpy(out_host, c->argmax_host, (size_t)rows * sizeof(int32_t));
}

void cu_install_graphs(fd_backend *be) {
    be->argmax_rows = cu_argmax_rows;
    be->topk_rows = cu_topk_rows;
    // Debug synchronisation and per-op profiling need every op to run as it is issued: no graphs then.
    if (cu_debug_sync || cu_profile) {
        FD_INFO("cuda: graphs unavailable under FD_CUDA_SYNC / FD_CUDA_PROFILE (route graphs offers only off)");
        return;
    }
    be->graph_begin = cu_graph_begin;
    be->graph_end = cu_graph_end;
    be->graph_launch = cu_graph_launch;
    be->graph_free = cu_graph_free;
    be->graph_generation = cu_graph_generation;
}
