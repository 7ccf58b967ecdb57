// logsumexp_rows (backend.h): log sum exp of each logits row, so a DFlash tree's ranked draft rows (topk_rows'
// values minus this) reach the host without the rows. One block of LSE_THREADS per row: each thread keeps an online
// (max, sum of exp(x - max)) over its strided elements in fp32, the pairs merge by rescaling to the larger max
// (warp shuffles, then the warps' pairs in order), out = max + log(sum). One read of the row (~1 MB at V = 248320).
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_common.h"

#define LSE_THREADS 1024

// (m, s) and (om, os) as one pair at the larger max; an empty pair is (-inf, 0).
static __device__ __forceinline__ void lse_merge(float &m, float &s, float om, float os) {
    const float nm = fmaxf(m, om);
    if (nm == -INFINITY) return; // both empty
    s = (m == -INFINITY ? 0.f : s * expf(m - nm)) + (om == -INFINITY ? 0.f : os * expf(om - nm));
    m = nm;
}

__global__ void __launch_bounds__(LSE_THREADS) k_logsumexp_rows(float *out, const float *logits, int V) {
    CU_PDL_ENTER();
    __shared__ float wm[LSE_THREADS / 32], ws[LSE_THREADS / 32];
    const float *row = logits + (int64_t)blockIdx.x * V;
    float m = -INFINITY, s = 0.f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float z = row[v];
        if (z > m) {
            s = s * expf(m - z) + 1.f; // m = -inf at first: exp(-inf) = 0
            m = z;
        } else if (m != -INFINITY) {
            s += expf(z - m);
        }
    }
    for (int o = 16; o > 0; o >>= 1)
        lse_merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
    if ((threadIdx.x & 31) == 0) wm[threadIdx.x >> 5] = m, ws[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x) return;
    m = -INFINITY, s = 0.f;
    for (int w = 0; w < LSE_THREADS / 32; w++) lse_merge(m, s, wm[w], ws[w]);
    out[blockIdx.x] = m + logf(s); // an empty or all -inf row: -inf
}

void cu_logsumexp_rows(fd_backend *be, float *out_host, const float *logits_dev, int rows, int V) {
    if (rows <= 0) return;
    FD_CHECK(V >= 1 && rows <= 65535, "logsumexp_rows: %d rows of %d logits", rows, V);
    cu_impl *c = cu_of(be);
    float *dev = (float *)cu_scratch(be, CU_SCR_G, (size_t)rows * sizeof(float));
    cu_launch(be, k_logsumexp_rows, (unsigned)rows, LSE_THREADS, 0, dev, logits_dev, V);
    FD_CUDA_CHECK(cudaMemcpyAsync(out_host, dev, (size_t)rows * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    FD_CUDA_CHECK(cudaStreamSynchronize(c->stream));
}
