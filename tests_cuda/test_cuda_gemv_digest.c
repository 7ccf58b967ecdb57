// A digest of the small-n GEMV's outputs (src/cuda/gemv.cu, bf16 and FP8 weights), for changes that must keep
// every result bitwise (session 11's instruction diet): the test prints one FNV-1a hash per (format, gemm_act,
// slicing target) over fixed shapes and n, and the lead compares the lines of two builds (the commit before a
// change and the change). The shapes reach the checked paths: m % 32 != 0 (a partial row tile), k with a last
// partial step (bf16 k % 64 = 8, e4m3 k % 128 = 16), several slices with a short last one, and scale block
// widths of 1, 2, 3 and 4 half steps. It fails only if a call is not finite where the inputs are.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0xd16e57ull)

static uint64_t fnv1a(uint64_t h, const void *p, size_t bytes) {
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static const int k_ns[] = {1, 3, 8, 9, 16};

// The hash of every n's output for one weight (x: 16 rows, fresh per weight, the same in both builds).
static uint64_t digest_weight(uint64_t h, const fd_weight *W, const float *x) {
    for (size_t j = 0; j < sizeof k_ns / sizeof k_ns[0]; j++) {
        float *o = cuda_rig_gpu_matmul(gpu(), x, W, k_ns[j]);
        EXPECT(cuda_rig_all_finite(o, (size_t)k_ns[j] * W->rows), "%s m %lld k %lld n %d: not finite", W->name,
               (long long)W->rows, (long long)W->cols, k_ns[j]);
        h = fnv1a(h, o, (size_t)k_ns[j] * W->rows * sizeof(float));
        free(o);
    }
    return h;
}

TEST(cuda_gemv_digest) {
    static const int bf16_shapes[][2] = {{48, 512}, {130, 1096}, {515, 2048}, {1000, 4104}, {4100, 1032}};
    static const int fp8_shapes[][4] = {
        // m, k, block rows, block cols
        {200, 512, 128, 128}, {1000, 4160, 128, 128}, {130, 8336, 128, 128}, {64, 192, 64, 64},
        {300, 2576, 128, 64}, {160, 1344, 32, 192},   {96, 3072, 256, 256},
    };
    static const char *acts[] = {"bf16", "bf16x2"};
    static const int bpss[] = {2, 6, 64};
    const int prev_bps = fd_cuda_set_gemv_blocks_per_sm(gpu(), 6);
    ASSERT(prev_bps >= 1, "gemv knob refused");
    ASSERT(fd_cuda_set_route(gpu(), "gemm_small", "gemv") == 0, "%s", fd_error_msg());
    ASSERT(fd_cuda_set_route(gpu(), "gemm_fp8", "gemv") == 0, "%s", fd_error_msg());
    for (int fmt = 0; fmt < 2; fmt++)
        for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
            ASSERT(fd_cuda_set_route(gpu(), "gemm_act", acts[a]) == 0, "%s", fd_error_msg());
            for (size_t b = 0; b < sizeof bpss / sizeof bpss[0]; b++) {
                fd_cuda_set_gemv_blocks_per_sm(gpu(), bpss[b]);
                uint64_t h = 0xcbf29ce484222325ull;
                const size_t count = fmt ? sizeof fp8_shapes / sizeof fp8_shapes[0]
                                         : sizeof bf16_shapes / sizeof bf16_shapes[0];
                for (size_t s = 0; s < count; s++) {
                    const int m = fmt ? fp8_shapes[s][0] : bf16_shapes[s][0];
                    const int k = fmt ? fp8_shapes[s][1] : bf16_shapes[s][1];
                    tw w = fmt ? cuda_rig_weight_fp8(&g_rig, "W", m, k, fp8_shapes[s][2], fp8_shapes[s][3], 0)
                               : mkw("W", m, k, FD_BF16, -0.1f, 0.1f);
                    float *x = rnd((size_t)16 * k, -1.f, 1.f);
                    h = digest_weight(h, &w.g, x);
                    free(x);
                    freew(&w);
                }
                printf("gemv digest %s gemm_act %-6s blocks_per_sm %2d: %016llx\n", fmt ? "fp8 " : "bf16", acts[a],
                       bpss[b], (unsigned long long)h);
            }
        }
    fd_cuda_set_gemv_blocks_per_sm(gpu(), prev_bps);
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "auto") == 0, "%s", fd_error_msg());
}
