// softmax_scan_rows (backend.h) on the GPU: a rank of a tensor-parallel group sums its slice's softmax terms and
// finds the inverse-CDF crossing without sending the row (engine/tp_sample.c). One block of SCAN_THREADS per row;
// thread t owns one contiguous segment of the row and sums its q_i in index order in double; thread 0 chains the
// segments' sums in order from the row's incoming acc, picks the first segment whose end passes the target, and
// that segment's thread walks it again to the crossing. The float steps are the CPU's; the double sum is grouped
// by segments, so it can differ from the CPU's by rounding (as sample_rows'), and a pick only where the target lies
// within that of a cumulative sum. With a target the acc returned is the row's whole sum, not the partial at the
// crossing (tp_sample.c reads acc only from scans without a target).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.h"

#define SCAN_THREADS 256

typedef struct {
    double acc, div, target; // target < 0: none
    float mx, temp;
} scan_in;

typedef struct {
    double acc;
    int32_t pick, pad;
} scan_out;

static __device__ __forceinline__ float scan_q(float x, const scan_in &p) {
    float q = expf((x - p.mx) / p.temp);
    if (p.div > 0) q = (float)(q / p.div);
    return q;
}

__global__ void __launch_bounds__(SCAN_THREADS)
    k_softmax_scan_rows(scan_out *out, const scan_in *in, const float *logits, int V) {
    CU_PDL_ENTER();
    __shared__ double part[SCAN_THREADS];
    __shared__ int last[SCAN_THREADS];
    __shared__ int cross;
    __shared__ double cross_from;
    const scan_in p = in[blockIdx.x];
    if (!(p.temp > 0)) return; // the row is not scanned (the host keeps its acc)
    const float *row = logits + (int64_t)blockIdx.x * V;
    const int seg = (V + SCAN_THREADS - 1) / SCAN_THREADS, t = threadIdx.x;
    const int b = t * seg < V ? t * seg : V, e = b + seg < V ? b + seg : V;
    double s = 0;
    int lp = -1;
    for (int i = b; i < e; i++) {
        const float q = scan_q(row[i], p);
        s += q;
        if (q > 0) lp = i;
    }
    part[t] = s, last[t] = lp;
    __syncthreads();
    if (t == 0) {
        double acc = p.acc;
        int c = -1, lpos = -1;
        for (int k = 0; k < SCAN_THREADS; k++) {
            if (c < 0 && p.target >= 0 && p.target < acc + part[k]) c = k, cross_from = acc;
            acc += part[k];
            lpos = last[k] > lpos ? last[k] : lpos;
        }
        cross = c;
        out[blockIdx.x].acc = acc;
        out[blockIdx.x].pick = lpos >= 0 ? -2 - lpos : -1;
    }
    __syncthreads();
    if (t != cross) return;
    double acc = cross_from;
    int pick = -1;
    for (int i = b; i < e && pick < 0; i++) {
        const float q = scan_q(row[i], p);
        acc += q;
        if (q > 0 && p.target < acc) pick = i;
    }
    if (pick >= 0) out[blockIdx.x].pick = pick; // else rounding kept it short of the segment's sum: no crossing
}

void cu_softmax_scan_rows(fd_backend *be, double *acc_host, int32_t *pick_host, const float *logits_dev, int rows,
                          int V, const float *mx, const float *temp, const double *div, const double *target) {
    FD_CHECK(rows >= 0 && rows <= 65535 && V >= 1, "softmax_scan_rows: %d rows of %d", rows, V);
    if (rows == 0) return;
    cu_impl *c = cu_of(be);
    const size_t ib = (size_t)rows * sizeof(scan_in), ob = (size_t)rows * sizeof(scan_out);
    scan_in *host = (scan_in *)fd_malloc(ib);
    for (int r = 0; r < rows; r++) // a target is a uniform times a positive total: >= 0, so -1 means none
        host[r] = (scan_in){acc_host[r], div[r], target ? target[r] : -1.0, mx[r], temp[r]};
    char *dev = (char *)cu_scratch(be, CU_SCR_G, ib + ob);
    FD_CUDA_CHECK(cudaMemcpyAsync(dev, host, ib, cudaMemcpyHostToDevice, c->stream));
    scan_out *res = (scan_out *)fd_malloc(ob), *res_dev = (scan_out *)(dev + ib);
    cu_launch(be, k_softmax_scan_rows, (unsigned)rows, SCAN_THREADS, 0, res_dev, (const scan_in *)dev, logits_dev, V);
    FD_CUDA_CHECK(cudaMemcpyAsync(res, res_dev, ob, cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    for (int r = 0; r < rows; r++) {
        if (!(temp[r] > 0)) continue;
        acc_host[r] = res[r].acc;
        if (pick_host) pick_host[r] = res[r].pick;
    }
    free(host);
    free(res);
}
