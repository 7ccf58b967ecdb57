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

TEST(cuda_gdn_serial_vs_cpu_and_fp64) {
    for (size_t s = 0; s < GDN_RIG_N_SHAPES; s++) {
        const int *c = gdn_rig_shapes[s];
        check_gdn(FD_GDN_SERIAL, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

TEST(cuda_gdn_chunked_vs_cpu_and_fp64) {
    for (size_t s = 0; s < GDN_RIG_N_SHAPES; s++) {
        const int *c = gdn_rig_shapes[s];
        check_gdn(FD_GDN_CHUNKED, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

// Every n from 1 to 200 (all chunk tails): gdn_rig_sweep_n.
TEST(cuda_gdn_chunked_sweep_n) {
    FD_CHECK(fd_cuda_set_route(gpu(), "gdn_chunk", "tf32x3") == 0, "%s", fd_error_msg());
    gdn_rig_sweep_n(&g_rig, "chunked", "tf32x3", TOL_GDN);
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
