// The GDN core on the GPU against an fp64 recurrence written from the definition (DESIGN.md section 3; gdn_rig.c) and
// against the CPU reference, both routes: the state carried across consecutive calls of uneven sizes, every chunk
// tail (n = 1..200), calls longer than one 4096-token pass of the chunked route, and per-token state slots. GPU
// outputs are poisoned with NaN before each call (test_rel_l2 returns INFINITY on any NaN); bound TOL_GDN
// (cuda_rig.h). Every other op (and gdn_core's perf rows) is in the op table: op_harness.h.
// Built only in CUDA builds (make test-cuda); needs a GPU.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "gdn_rig.h"

CUDA_RIG(0x9e3779b97f4a7c15ull)

// The checks live in gdn_rig.c (shared with the bf16 chunk kernels' tests, test_cuda_gdn_bf16.c); this file's rig
// draws their inputs. The chunked route here is the fp32 kernel set (gdn_chunk=tf32x3), whatever the environment
// selects.
static double check_gdn_calls(fd_gdn_route route, const int *calls, int ncalls, int Hk, int Hv, int dk, int dv,
                              int slots, int quiet) {
    FD_CHECK(fd_cuda_set_route(gpu(), "gdn_chunk", "tf32x3") == 0, "%s", fd_error_msg());
    return gdn_rig_check_calls(&g_rig, route, "tf32x3", TOL_GDN, calls, ncalls, Hk, Hv, dk, dv, slots, quiet);
}

// Two consecutive calls (n1 then n2 tokens).
static void check_gdn(fd_gdn_route route, int n1, int n2, int Hk, int Hv, int dk, int dv, int slots) {
    int calls[2] = {n1, n2};
    check_gdn_calls(route, calls, 2, Hk, Hv, dk, dv, slots, 0);
}

static const int gdn_shapes[][6] = {
    // n1, n2, Hk, Hv, dk, dv
    {1, 0, 2, 6, 128, 128},  {7, 0, 2, 6, 128, 128},  {64, 0, 2, 6, 128, 128}, {200, 0, 2, 6, 128, 128},
    {64, 1, 2, 6, 128, 128}, {130, 70, 2, 4, 96, 48}, {7, 200, 1, 3, 64, 32},  {3, 5, 2, 2, 256, 256},
    // Hv / Hk = 1, 2, 3 at the 27B head size; n not a multiple of 64; odd dv (scalar tile loads); head sizes
    // that are not multiples of 32 (zero-padded tiles in the chunked kernels; the fixtures use 16)
    {129, 63, 3, 3, 128, 128}, {191, 0, 2, 4, 128, 128}, {65, 127, 1, 3, 128, 128}, {100, 28, 2, 6, 64, 37},
    {150, 0, 1, 2, 256, 128},  {70, 3, 1, 2, 48, 40},     {90, 40, 2, 4, 16, 16},    {66, 0, 1, 1, 24, 20},
};

TEST(cuda_gdn_serial_vs_cpu_and_fp64) {
    for (size_t s = 0; s < sizeof gdn_shapes / sizeof gdn_shapes[0]; s++) {
        const int *c = gdn_shapes[s];
        check_gdn(FD_GDN_SERIAL, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

TEST(cuda_gdn_chunked_vs_cpu_and_fp64) {
    for (size_t s = 0; s < sizeof gdn_shapes / sizeof gdn_shapes[0]; s++) {
        const int *c = gdn_shapes[s];
        check_gdn(FD_GDN_CHUNKED, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

// Every n from 1 to 200 (all chunk tails), Hv / Hk cycling through 1, 2, 3, one call each from a random state;
// every 5th n at the 27B head size 128/128, the others at 64/48. One summary line with the worst error.
TEST(cuda_gdn_chunked_sweep_n) {
    double worst = 0;
    int worst_n = 0;
    for (int n = 1; n <= 200; n++) {
        int r = 1 + n % 3, Hk = 1 + n % 2, big = n % 5 == 0;
        int calls[1] = {n};
        double e = check_gdn_calls(FD_GDN_CHUNKED, calls, 1, Hk, Hk * r, big ? 128 : 64, big ? 128 : 48, 0, 1);
        if (!(e <= worst)) worst = e, worst_n = n;
    }
    printf("    gdn chunked n=1..200 (Hv/Hk 1..3): worst rel-L2 (out/state vs fp64 and cpu) %.3g at n=%d\n", worst,
           worst_n);
    EXPECT(worst <= TOL_GDN, "gdn chunked sweep worst %.3g at n=%d", worst, worst_n);
}

// The state carried over several calls of uneven sizes, one of them longer than a 4096-token pass of the
// chunked route (so it is split into passes internally).
TEST(cuda_gdn_chunked_multi_call) {
    const int c1[] = {100, 64, 1, 137, 4200, 33};
    check_gdn_calls(FD_GDN_CHUNKED, c1, 6, 1, 2, 64, 64, 0, 0);
    const int c2[] = {63, 65, 1, 129, 2};
    check_gdn_calls(FD_GDN_CHUNKED, c2, 5, 2, 6, 128, 128, 0, 0);
    check_gdn_calls(FD_GDN_SERIAL, c2, 5, 2, 6, 128, 128, 0, 0);
}

// Verify-style calls: a prefill of 30 tokens, then 16 (and 1) tokens that write per-token state slots. Both routes
// take the recurrence when slots are asked for.
TEST(cuda_gdn_state_slots) {
    for (int r = 0; r < 2; r++) {
        check_gdn((fd_gdn_route)r, 30, 16, 2, 6, 128, 128, 1);
        check_gdn((fd_gdn_route)r, 70, 1, 1, 3, 64, 32, 1);
    }
}
