// Host emulation of the CUDA subset the GDN bf16 kernels use: one std::thread per CUDA thread, blocks in
// sequence, __syncthreads as a block barrier, warp collectives (shuffles, mma.sync m16n8k16 bf16) through
// per-warp exchange slots, cp.async queued per thread and completed at the wait (or at the issue).
#pragma once
#include <cuda_bf16.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <thread>
#include <vector>

using std::max;
using std::min;

#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__

struct emu_dim3 {
    unsigned x, y, z;
};
extern thread_local emu_dim3 threadIdx;
extern emu_dim3 blockIdx, blockDim, gridDim;
extern float4 sm4[];
extern int emu_cp_immediate;

static inline float rsqrtf(float x) {
    return 1.f / sqrtf(x);
}

void emu_syncthreads();
void __syncthreads();
// warp exchange: every lane deposits `n` words, waits for the warp, reads all lanes' words, waits again
void emu_warp_exchange(const uint32_t *mine, int n, uint32_t (*all)[16]);
// the same over the thread's warpgroup (128 threads; all[128][16])
void emu_wg_exchange(const uint32_t *mine, int n, uint32_t (*all)[16]);

static inline float __shfl_xor_sync(unsigned, float v, int o) {
    uint32_t mine = 0, all[32][16];
    memcpy(&mine, &v, 4);
    emu_warp_exchange(&mine, 1, all);
    float r;
    memcpy(&r, &all[(threadIdx.x & 31) ^ o][0], 4);
    return r;
}
static inline double __shfl_xor_sync(unsigned, double v, int o) {
    uint32_t mine[2], all[32][16];
    memcpy(mine, &v, 8);
    emu_warp_exchange(mine, 2, all);
    double r;
    memcpy(&r, all[(threadIdx.x & 31) ^ o], 8);
    return r;
}
static inline int __shfl_xor_sync(unsigned, int v, int o) {
    uint32_t mine = (uint32_t)v, all[32][16];
    emu_warp_exchange(&mine, 1, all);
    return (int)all[(threadIdx.x & 31) ^ o][0];
}
static inline float __shfl_up_sync(unsigned, float v, int o) {
    uint32_t mine = 0, all[32][16];
    memcpy(&mine, &v, 4);
    emu_warp_exchange(&mine, 1, all);
    const int lane = threadIdx.x & 31, src = lane >= o ? lane - o : lane;
    float r;
    memcpy(&r, &all[src][0], 4);
    return r;
}

#define FD_CUDA_MMA_CUH
// c += a . b, m16n8k16 bf16: the fragments of all lanes reassembled by the PTX layout (independently of the
// kernels' code), the product summed in double.
static inline float emu_bf(uint32_t r, int hi) {
    uint16_t h = hi ? (uint16_t)(r >> 16) : (uint16_t)(r & 0xffff);
    uint32_t f = (uint32_t)h << 16;
    float x;
    memcpy(&x, &f, 4);
    return x;
}
static inline void cu_mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                               uint32_t b1) {
    uint32_t mine[6] = {a0, a1, a2, a3, b0, b1}, all[32][16];
    emu_warp_exchange(mine, 6, all);
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const int g = l >> 2, t = l & 3;
        for (int hi = 0; hi < 2; hi++) {
            A[g][2 * t + hi] = emu_bf(all[l][0], hi);
            A[g + 8][2 * t + hi] = emu_bf(all[l][1], hi);
            A[g][2 * t + 8 + hi] = emu_bf(all[l][2], hi);
            A[g + 8][2 * t + 8 + hi] = emu_bf(all[l][3], hi);
            B[2 * t + hi][g] = emu_bf(all[l][4], hi);
            B[2 * t + 8 + hi][g] = emu_bf(all[l][5], hi);
        }
    }
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int e = 0; e < 4; e++) {
        const int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        double s = c[e];
        for (int k = 0; k < 16; k++) s += (double)A[row][k] * B[k][col];
        c[e] = (float)s;
    }
}

#define FD_CUDA_CP_ASYNC_CUH
void cu_cp_async16(void *dst, const void *src, bool valid);
void emu_cp_async4(void *dst, const void *src, bool valid); // a 4-byte cp.async (zero-filled when !valid)
void cu_cp_async_commit(void);
void emu_cp_wait(int n);
template <int N> static inline void cu_cp_async_wait(void) {
    emu_cp_wait(N);
}
static inline void cu_prefetch_l2(const void *) {}

// ---- what cuda_common.h gives the kernel file ----
#define FD_CUDA_COMMON_H
#define CU_PDL_ENTER() ((void)0)
#include "cuda/reduce.cuh"
typedef struct fd_backend fd_backend;
enum { CU_SCR_A = 0, CU_SCR_B, CU_SCR_C, CU_SCR_D, CU_SCR_E, CU_SCR_F, CU_SCR_G, CU_SCR_H, CU_SCR_COUNT };
void *cu_scratch(fd_backend *be, int slot, size_t bytes);
#define FD_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            abort();                                                                                                   \
        }                                                                                                              \
    } while (0)
#define FD_CUDA_CHECK(x)          ((void)0)
#define cudaFuncSetAttribute(...) 0
typedef struct {
    int dummy;
} cu_prof;
#define cu_prof_begin(...) ((void)0)
#define cu_prof_mark(...)  ((void)0)
#define cu_prof_end(...)   ((void)0)

void emu_run_blocks(dim3 grid, dim3 block, size_t smem, void (*body)(void *), void *ctx);
template <typename... Params, typename... Args>
static void emu_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Args... args) {
    struct ctx_t {
        void (*k)(Params...);
        std::tuple<Params...> a;
    } ctx{kernel, std::tuple<Params...>(((Params)args)...)};
    emu_run_blocks(
        grid, block, smem, [](void *p) { std::apply(((ctx_t *)p)->k, ((ctx_t *)p)->a); }, &ctx);
}
#define cu_launch(be, kernel, grid, block, smem, ...) emu_launch(kernel, grid, block, smem, __VA_ARGS__)
