// The memory ceilings the GEMV and attention benches are compared with, measured on this GPU in one run:
// device-to-device copy (cudaMemcpyAsync: each byte read once and written once; GB/s counts the bytes read) and a
// read-only stream (every byte read once with 16-byte non-caching loads, one word written per thread), both over
// buffers far larger than L2 (4 GiB by default). A weight-streaming GEMV is bounded by the read-only figure.
// Build: nvcc -O3 -arch=sm_90a -o bw_probe tools/bw_probe.cu; run: ./bw_probe [GiB]. Median of 20 after 3 warm-ups.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                                                     \
    do {                                                                                                          \
        cudaError_t e_ = (x);                                                                                     \
        if (e_ != cudaSuccess) {                                                                                  \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                         \
            exit(1);                                                                                              \
        }                                                                                                         \
    } while (0)

// Each thread reads UNROLL 16-byte words per iteration (all loads issued before their use) and XORs them, so the
// loads cannot be dropped; the result goes to out[thread] (4 bytes a thread, negligible).
template <int UNROLL>
__global__ void k_read(const uint4 *__restrict__ src, size_t words, uint32_t *out) {
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    uint32_t acc = 0;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < words; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++)
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w)
                         : "l"(src + i + u * stride));
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < words; i += stride) acc ^= src[i].x;
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

static int cmp(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

template <typename F>
static float median_ms(F f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    float t[20];
    for (int i = 0; i < 3; i++) f();
    for (int i = 0; i < 20; i++) {
        CK(cudaEventRecord(a));
        f();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&t[i], a, b));
    }
    CK(cudaGetLastError());
    qsort(t, 20, sizeof t[0], cmp);
    return t[10];
}

int main(int argc, char **argv) {
    const double gib = argc > 1 ? atof(argv[1]) : 4.0;
    const size_t bytes = (size_t)(gib * (1u << 30)) & ~(size_t)4095;
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, 0));
    void *a, *b;
    uint32_t *out;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMemset(a, 1, bytes));
    const int threads = 512, blocks = p.multiProcessorCount * 4;
    CK(cudaMalloc(&out, (size_t)blocks * threads * sizeof(uint32_t)));
    printf("bw_probe: %s, %d SMs, L2 %d MiB, buffers %.2f GiB\n", p.name, p.multiProcessorCount,
           p.l2CacheSize >> 20, bytes / (double)(1u << 30));
    const float tc = median_ms([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
    printf("BENCH copy (D2D, bytes read)       %8.3f ms  %7.0f GB/s\n", tc, bytes / tc / 1e6);
    const size_t words = bytes / 16;
    const float t4 = median_ms([&] { k_read<4><<<blocks, threads>>>((const uint4 *)a, words, out); });
    printf("BENCH read-only stream (unroll 4)  %8.3f ms  %7.0f GB/s\n", t4, bytes / t4 / 1e6);
    const float t8 = median_ms([&] { k_read<8><<<blocks, threads>>>((const uint4 *)a, words, out); });
    printf("BENCH read-only stream (unroll 8)  %8.3f ms  %7.0f GB/s\n", t8, bytes / t8 / 1e6);
    const float t8b = median_ms([&] { k_read<8><<<blocks * 2, threads / 2>>>((const uint4 *)a, words, out); });
    printf("BENCH read-only stream (8, 256 t)  %8.3f ms  %7.0f GB/s\n", t8b, bytes / t8b / 1e6);
    return 0;
}
