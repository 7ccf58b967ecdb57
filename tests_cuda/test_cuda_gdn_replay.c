// Route gdn_verify on the CUDA backend (engine_verify.c), the engine-level twin of tests/test_gdn_replay.c: two
// target engines on the GPU, one verifying with `slots`, one with `replay`, take the same verify blocks and commit
// every accept count 1..block after full and shorter verifies; the verify logits and the committed GDN and conv
// state of every layer must be bitwise equal (speculative greedy then stays plain greedy under replay). The route's
// default on CUDA is replay; graphs stay at their default (verify blocks recorded and replayed).
#include <stdlib.h>
#include <string.h>

#include "../tests/spec_rig.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/routes.h"

CUDA_RIG(0)

static const struct {
    const char *target, *drafter;
} k_fx[] = {
    {"qwen35_dense_tied", "qwen35_dense_tied_b8"},
    {"qwen3_next_moe", "qwen3_next_moe_b4"},
    {"qwen35_moe", "qwen35_moe_b16"},
};
#define N_FX (int)(sizeof k_fx / sizeof k_fx[0])

// Bytes of backend memory at d equal to those at e (n bytes)?
static int dev_equal(const void *d, const void *e, size_t n) {
    char *a = malloc(n), *b = malloc(n);
    gpu()->to_host(gpu(), a, d, n);
    gpu()->to_host(gpu(), b, e, n);
    const int same = !memcmp(a, b, n);
    free(a), free(b);
    return same;
}

static int state_diffs(const fd_engine *a, const fd_engine *b, int round) {
    const fd_rank_plan *p = &a->m->plan;
    const size_t gdn = (size_t)plan_gdn_state_bytes(p), conv = (size_t)plan_conv_state_bytes(p);
    int bad = 0;
    for (int l = 0; l < p->num_layers; l++) {
        if (p->layers[l].kind != FD_LAYER_GDN) continue;
        const int g = !dev_equal(a->gdn_state[l], b->gdn_state[l], gdn);
        const int c = !dev_equal(a->conv_state[l], b->conv_state[l], conv);
        if (g || c) fprintf(stderr, "    round %d layer %d: %s%s differ\n", round, l, g ? "GDN " : "", c ? "conv" : "");
        bad += g || c;
    }
    return bad;
}

TEST(cuda_gdn_verify_replay_commits_the_slot_state_bitwise) {
    for (int i = 0; i < N_FX; i++) {
        spec_rig r;
        ASSERT(spec_rig_open(&r, gpu(), k_fx[i].target, k_fx[i].drafter, 0, 0) == 0, "%s", fd_error_msg());
        const int B = r.s.B, V = r.m.cfg.vocab_size;
        const int64_t cap = r.fx.n_ids + (int64_t)B * (B + 1) + 2 * B;
        spec_rig_release_close(&r, gpu());
        ASSERT(spec_rig_open(&r, gpu(), k_fx[i].target, k_fx[i].drafter, 0, cap) == 0, "%s", fd_error_msg());
        fd_route *gv = routes_find(&r.e, "gdn_verify");
        ASSERT(gv && !strcmp(gv->values[*gv->sel], "replay"), "route gdn_verify is not replay by default on CUDA");
        fd_engine *slots = &r.e, rep;
        ASSERT(engine_init(&rep, &r.m, gpu(), &r.e.opt) == 0 && engine_enable_slots(&rep, B) == 0, "%s",
               fd_error_msg());
        ASSERT(routes_set(slots, "gdn_verify=slots") == 0 && routes_set(&rep, "gdn_verify=replay") == 0, "%s",
               fd_error_msg());
        ASSERT(engine_prefill(slots, r.fx.ids, r.fx.n_ids, 64, NULL, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&rep, r.fx.ids, r.fx.n_ids, 64, NULL, 0) == 0, "%s", fd_error_msg());
        float *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
        int bad = state_diffs(slots, &rep, -1), logits_bad = 0, cursor = 0, rounds = 0;
        for (int pass = 0; pass < 2; pass++) // every accept count after a full block, then after a shorter verify
            for (int j = 0; j < B; j++, rounds++) {
                const int keep = (j * 5 + 3) % B + 1, L = pass == 0 ? B : keep + (B - keep) / 2;
                int32_t block[FD_SPEC_MAX_BLOCK];
                for (int t = 0; t < L; t++) block[t] = r.fx.greedy[(cursor + t) % r.fx.n_greedy];
                const int64_t n0 = slots->n_past;
                ASSERT(engine_verify(slots, block, L, la) == 0 && engine_verify(&rep, block, L, lb) == 0, "%s",
                       fd_error_msg());
                logits_bad += memcmp(la, lb, sizeof(float) * (size_t)L * V) != 0;
                engine_commit(slots, n0, keep);
                engine_commit(&rep, n0, keep);
                cursor += keep;
                bad += state_diffs(slots, &rep, rounds);
            }
        printf("    %-20s block %2d: %d commits, replay vs slots: state %s, logits %s\n", k_fx[i].target, B, rounds,
               bad ? "DIFFERS" : "bitwise", logits_bad ? "DIFFER" : "bitwise");
        EXPECT(bad == 0 && logits_bad == 0, "%s: %d layer states, %d verifies differ", k_fx[i].target, bad,
               logits_bad);
        EXPECT(rep.routes[FD_ROUTE_GDN_VERIFY].calls[FD_GDN_VERIFY_REPLAY] == rounds &&
                   slots->routes[FD_ROUTE_GDN_VERIFY].calls[FD_GDN_VERIFY_SLOTS] == rounds,
               "verifies not counted under the values they ran");
        free(la), free(lb);
        engine_free(&rep);
        spec_rig_release_close(&r, gpu());
    }
}
