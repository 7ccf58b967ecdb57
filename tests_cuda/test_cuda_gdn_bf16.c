// The chunked GDN route's bf16 kernels (cuda route gdn_chunk=bf16, src/cuda/gdn_chunk_bf16.cu) against the fp64
// recurrence written from the definition and against the CPU reference (gdn_rig.c): calls carrying the state,
// chunk tails (n not a multiple of 64), calls over a 4096-token pass, Hv / Hk 1..3, head sizes that are not
// multiples of 32 and odd dv (zero-padded tiles, scalar loads); the route's counting and refusal; and the
// precision of both chunk kernels at the 27B's heads on the same inputs. Tolerance TOL_GDN_BF16 (cuda_rig.h).
// Built only in CUDA builds (make test-cuda); needs a GPU.
#include <stdio.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "gdn_rig.h"

CUDA_RIG(0x6a09e667f3bcc909ull)

static void use_chunk_kernel(const char *value) {
    FD_CHECK(fd_cuda_set_route(gpu(), "gdn_chunk", value) == 0, "%s", fd_error_msg());
}

static double check_bf16(const int *calls, int ncalls, int Hk, int Hv, int dk, int dv, int quiet) {
    use_chunk_kernel("bf16");
    return gdn_rig_check_calls(&g_rig, FD_GDN_CHUNKED, "bf16", TOL_GDN_BF16, calls, ncalls, Hk, Hv, dk, dv, 0, quiet);
}

static int64_t chunk_calls(const char *value) {
    const int64_t calls = cuda_rig_route_value_calls(gpu(), "gdn_chunk", value);
    if (calls < 0) FD_PANIC("cuda route gdn_chunk has no value %s", value);
    return calls;
}

TEST(cuda_gdn_bf16_vs_cpu_and_fp64) {
    for (size_t s = 0; s < GDN_RIG_N_SHAPES; s++) {
        const int *c = gdn_rig_shapes[s]; // n1, n2 are the two calls
        check_bf16(c, 2, c[2], c[3], c[4], c[5], 0);
    }
}

// Every n from 1 to 200 (all chunk tails): gdn_rig_sweep_n.
TEST(cuda_gdn_bf16_sweep_n) {
    use_chunk_kernel("bf16");
    gdn_rig_sweep_n(&g_rig, "chunked/bf16", "bf16", TOL_GDN_BF16);
}

// The state carried over several calls of uneven sizes, two of them longer than a 4096-token pass (split into
// passes inside the call).
TEST(cuda_gdn_bf16_multi_call) {
    const int c1[] = {100, 64, 1, 137, 4200, 33};
    check_bf16(c1, 6, 1, 2, 64, 64, 0);
    const int c2[] = {63, 65, 1, 129, 2};
    check_bf16(c2, 5, 2, 6, 128, 128, 0);
    const int c3[] = {4097, 70};
    check_bf16(c3, 2, 2, 6, 128, 128, 0);
}

// Each chunked call is counted under the kernel set that ran; calls with per-token state slots run the
// recurrence and count under neither; an unknown value is refused naming the known ones.
TEST(cuda_gdn_bf16_route_counted) {
    const int calls[1] = {70};
    const int64_t b0 = chunk_calls("bf16"), t0 = chunk_calls("tf32x3");
    check_bf16(calls, 1, 1, 2, 32, 32, 1);
    EXPECT(chunk_calls("bf16") == b0 + 1 && chunk_calls("tf32x3") == t0, "bf16 call not counted under bf16");
    use_chunk_kernel("tf32x3");
    gdn_rig_check_calls(&g_rig, FD_GDN_CHUNKED, "tf32x3", TOL_GDN, calls, 1, 1, 2, 32, 32, 0, 1);
    EXPECT(chunk_calls("tf32x3") == t0 + 1 && chunk_calls("bf16") == b0 + 1, "tf32x3 call not counted under tf32x3");
    use_chunk_kernel("bf16");
    const int two[2] = {30, 16};
    gdn_rig_check_calls(&g_rig, FD_GDN_CHUNKED, "bf16 + slots", TOL_GDN_BF16, two, 2, 1, 2, 32, 32, 1, 1);
    EXPECT(chunk_calls("bf16") == b0 + 2, "a slots call (the recurrence) must count under neither kernel set");
    EXPECT(fd_cuda_set_route(gpu(), "gdn_chunk", "fp8") != 0 && strstr(fd_error_msg(), "tf32x3, bf16"),
           "gdn_chunk=fp8 accepted or refused without the known values: %s", fd_error_msg());
    printf("    gdn_chunk counted per kernel set; refusal: %s\n", fd_error_msg());
}

// Both kernel sets on the same inputs (the rig's stream rewound) at the 27B's heads, 1100 tokens (17 chunks, a
// tail of 12): the errors side by side. FLA's error on the same kind of inputs is what tools/peer_prefill.py
// measures; the screen is bf16 <= 2x FLA.
TEST(cuda_gdn_bf16_precision_27b_heads) {
    const int calls[2] = {1000, 100};
    const uint64_t seed = g_rig.seed;
    use_chunk_kernel("tf32x3");
    const double e32 = gdn_rig_check_calls(&g_rig, FD_GDN_CHUNKED, "tf32x3", TOL_GDN, calls, 2, 16, 48, 128, 128, 0, 0);
    g_rig.seed = seed;
    const double e16 = check_bf16(calls, 2, 16, 48, 128, 128, 0);
    printf("    gdn chunked 1000+100 tokens, Hk16 Hv48 128/128: worst rel-L2 tf32x3 %.3g, bf16 %.3g\n", e32, e16);
}
