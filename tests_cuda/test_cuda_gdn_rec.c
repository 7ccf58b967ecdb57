// The GDN recurrence as decode and DFlash verify use it (serial route, n <= 16), and the one-launch conv1d:
//   - cuda_gdn_serial_decode_equals_verify: n single-token calls vs one n-token call with per-token state slots
//     vs the same call without slots, from the same random state: outputs, every slot, and the final state must
//     be bitwise equal (a DFlash commit takes slot k-1 and decoding goes on from it, so any difference would make
//     speculative greedy differ from plain greedy), at head sizes that take every code path
//     of k_gdn_rec (rows per lane 1..32, vector and scalar loads, partial column groups, rows past dk).
//   - cuda_conv1d_silu_one_launch: calls of up to 64 tokens update the conv state inside the output kernel;
//     state exact vs the CPU, outputs within TOL_F32, for K = 2, 3, 4 around the 64-token boundary.
//     The read-only core (gdn_core_readonly, route gdn_verify=replay) gives the same outputs and leaves the state
//     as it was, and gdn_core over the first a tokens (the commit's replay) leaves bitwise slot a - 1's state.
// The kernel's accuracy vs the CPU and an fp64 recurrence is checked in test_cuda_gdn.c (cuda_gdn_*).
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x2545f4914f6cdd1dull)

static void down_to(float *h, const void *d, size_t n) { // into the caller's buffer
    gpu()->to_host(gpu(), h, d, n * 4);
}

static void decode_vs_verify(int n, int Hk, int Hv, int dk, int dv) {
    const int cq = 2 * Hk * dk + Hv * dv;
    const size_t ns = (size_t)Hv * dk * dv, no = (size_t)Hv * dv;
    float *qkv = rnd((size_t)n * cq, -1, 1), *b = rnd((size_t)n * Hv, -3, 3), *a = rnd((size_t)n * Hv, -3, 3);
    float *S0 = rnd(ns, -0.3f, 0.3f), *Al = rnd((size_t)Hv, -1, 1.5f), *dtb = rnd((size_t)Hv, -1, 1);
    fd_weight A_log = cuda_rig_f32_weight(gpu(), "A_log", Al, Hv, 1),
              dt_bias = cuda_rig_f32_weight(gpu(), "dt_bias", dtb, Hv, 1);
    // decode: one token per call; the state after every call is what a verify slot must hold
    float *o1 = fd_malloc((size_t)n * no * 4), *st1 = fd_malloc((size_t)n * ns * 4);
    void *dS = up(S0, ns);
    for (int t = 0; t < n; t++) {
        void *dq = up(qkv + (size_t)t * cq, (size_t)cq), *db = up(b + (size_t)t * Hv, (size_t)Hv);
        void *da = up(a + (size_t)t * Hv, (size_t)Hv), *dout = poisoned(no);
        gpu()->gdn_core(gpu(), FD_GDN_SERIAL, dout, dq, db, da, &A_log, &dt_bias, dS, 1, Hk, Hv, dk, dv, NULL);
        down_to(o1 + (size_t)t * no, dout, no);
        down_to(st1 + (size_t)t * ns, dS, ns);
        gpu()->free(gpu(), dq), gpu()->free(gpu(), db), gpu()->free(gpu(), da), gpu()->free(gpu(), dout);
    }
    gpu()->free(gpu(), dS);
    const int finite = cuda_rig_all_finite(o1, (size_t)n * no) && cuda_rig_all_finite(st1, (size_t)n * ns);
    // verify: the n tokens in one call, with slots and without
    void *dq = up(qkv, (size_t)n * cq), *db = up(b, (size_t)n * Hv), *da = up(a, (size_t)n * Hv);
    float *o2 = fd_malloc((size_t)n * no * 4), *st2 = fd_malloc((size_t)n * ns * 4), *fin = fd_malloc(ns * 4);
    int same_o[2], same_final[2], same_slots = 0;
    for (int with_slots = 1; with_slots >= 0; with_slots--) {
        void *dS2 = up(S0, ns), *dout = poisoned((size_t)n * no), *dsl = with_slots ? poisoned((size_t)n * ns) : NULL;
        gpu()->gdn_core(gpu(), FD_GDN_SERIAL, dout, dq, db, da, &A_log, &dt_bias, dS2, n, Hk, Hv, dk, dv, dsl);
        down_to(o2, dout, (size_t)n * no);
        down_to(fin, dS2, ns);
        same_o[with_slots] = !memcmp(o1, o2, (size_t)n * no * 4);
        same_final[with_slots] = !memcmp(st1 + (size_t)(n - 1) * ns, fin, ns * 4);
        if (dsl) {
            down_to(st2, dsl, (size_t)n * ns);
            same_slots = !memcmp(st1, st2, (size_t)n * ns * 4);
            gpu()->free(gpu(), dsl);
        }
        gpu()->free(gpu(), dS2), gpu()->free(gpu(), dout);
    }
    // gdn_verify=replay: the read-only core gives the same outputs and leaves S0 as it was; gdn_core over the first
    // a tokens from S0 (the commit's replay) leaves bitwise what slot a - 1 holds, for every a
    int ro_o = 0, ro_untouched = 0, replay_same = 1;
    {
        void *dS2 = up(S0, ns), *dout = poisoned((size_t)n * no);
        gpu()->gdn_core_readonly(gpu(), dout, dq, db, da, &A_log, &dt_bias, dS2, n, Hk, Hv, dk, dv);
        down_to(o2, dout, (size_t)n * no);
        down_to(fin, dS2, ns);
        ro_o = !memcmp(o1, o2, (size_t)n * no * 4);
        ro_untouched = !memcmp(S0, fin, ns * 4);
        for (int keep = 1; keep <= n; keep++) {
            gpu()->to_device(gpu(), dS2, S0, ns * 4);
            gpu()->gdn_core(gpu(), FD_GDN_SERIAL, dout, dq, db, da, &A_log, &dt_bias, dS2, keep, Hk, Hv, dk, dv, NULL);
            down_to(fin, dS2, ns);
            replay_same &= !memcmp(st1 + (size_t)(keep - 1) * ns, fin, ns * 4);
        }
        gpu()->free(gpu(), dS2), gpu()->free(gpu(), dout);
    }
    printf("    gdn readonly n=%-2d: outputs %s, state %s; replays of 1..%d tokens %s\n", n, ro_o ? "bitwise" : "DIFFER",
           ro_untouched ? "untouched" : "WRITTEN", n, replay_same ? "bitwise the slots" : "DIFFER");
    EXPECT(ro_o && ro_untouched && replay_same, "gdn readonly / replay n=%d Hk=%d Hv=%d dk=%d dv=%d", n, Hk, Hv, dk,
           dv);
    const int ok = finite && same_o[0] && same_o[1] && same_final[0] && same_final[1] && same_slots;
    printf("    gdn serial n=%-2d Hk=%d Hv=%d dk=%-3d dv=%-3d: outputs %s/%s, slots %s, final state %s/%s%s\n", n,
           Hk, Hv, dk, dv, same_o[1] ? "bitwise" : "DIFFER", same_o[0] ? "bitwise" : "DIFFER",
           same_slots ? "bitwise" : "DIFFER", same_final[1] ? "bitwise" : "DIFFER",
           same_final[0] ? "bitwise" : "DIFFER", finite ? "" : " (NON-FINITE decode values)");
    EXPECT(ok, "gdn serial n=%d Hk=%d Hv=%d dk=%d dv=%d: decode and verify differ", n, Hk, Hv, dk, dv);
    gpu()->free(gpu(), dq), gpu()->free(gpu(), db), gpu()->free(gpu(), da);
    gpu()->release_weight(gpu(), &A_log), gpu()->release_weight(gpu(), &dt_bias);
    free(qkv), free(b), free(a), free(S0), free(Al), free(dtb), free(o1), free(st1), free(o2), free(st2), free(fin);
}

TEST(cuda_gdn_serial_decode_equals_verify) {
    static const int shapes[][4] = {
        // Hk, Hv, dk, dv: the 27B head (rows per lane 16, vector loads); 64/32 (8); 96/48 (row groups past dk);
        // 256/128 (32, no prefetch); 16/16 (2); 24/20 (4, a half-empty column group); odd dv (scalar loads);
        // dk 6 (1 row per lane, scalar)
        {2, 6, 128, 128}, {1, 3, 64, 32}, {2, 4, 96, 48}, {1, 2, 256, 128},
        {2, 4, 16, 16},   {1, 1, 24, 20}, {2, 2, 48, 37}, {1, 2, 6, 10},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *c = shapes[s];
        decode_vs_verify(16, c[0], c[1], c[2], c[3]);
        if (s == 0) decode_vs_verify(5, c[0], c[1], c[2], c[3]);
    }
}

TEST(cuda_conv1d_silu_one_launch) {
    const int C = 1000, ns[] = {1, 16, 64, 65, 3};
    for (int K = 2; K <= 4; K++) {
        float *wf = rnd((size_t)C * K, -0.7f, 0.7f), *st = rnd((size_t)C * (K - 1), -1, 1);
        fd_weight wc = cuda_rig_f32_weight(cpu(), "conv", wf, C, K), wg = cuda_rig_f32_weight(gpu(), "conv", wf, C, K);
        void *dst = up(st, (size_t)C * (K - 1));
        double worst = 0;
        int state_exact = 1;
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) { // consecutive calls: the state carries over
            const int n = ns[i];
            const size_t cnt = (size_t)n * C;
            float *x = rnd(cnt, -2, 2), *oc = fd_malloc(cnt * 4), *og = fd_malloc(cnt * 4);
            float *sg = fd_malloc((size_t)C * (K - 1) * 4);
            void *dx = up(x, cnt), *dout = poisoned(cnt);
            gpu()->conv1d_silu(gpu(), dout, dx, &wg, dst, n, C, K, NULL);
            cpu()->conv1d_silu(cpu(), oc, x, &wc, st, n, C, K, NULL);
            down_to(og, dout, cnt);
            down_to(sg, dst, (size_t)C * (K - 1));
            const double e = test_rel_l2(og, oc, cnt);
            if (!(e <= worst)) worst = e;
            state_exact &= !memcmp(sg, st, (size_t)C * (K - 1) * 4);
            free(x), free(oc), free(og), free(sg), gpu()->free(gpu(), dx), gpu()->free(gpu(), dout);
        }
        printf("    conv1d_silu C=%d K=%d n=1,16,64,65,3 in turn: out rel-L2 %.3g, state %s\n", C, K, worst,
               state_exact ? "exact" : "DIFFERS");
        EXPECT(worst <= TOL_F32, "conv1d_silu K=%d: out rel-L2 %.3g", K, worst);
        EXPECT(state_exact, "conv1d_silu K=%d: state differs from the CPU", K);
        gpu()->free(gpu(), dst), gpu()->release_weight(gpu(), &wg), cpu()->release_weight(cpu(), &wc);
        free(wf), free(st);
    }
}
