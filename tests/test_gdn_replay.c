// Route gdn_verify on the CPU backend (engine_verify.c). Under `replay` a chain verify writes no per-token GDN
// state and the commit replays the accepted tokens from the state the verify left untouched; under `slots` the
// verify writes every token's state and the commit copies one. The committed GDN and conv state must be bitwise
// the same under both, at every accept count 1..block and at verifies shorter than the block, on every
// architecture, and bitwise what plain one-token decode of the same tokens leaves (a reference that uses neither
// slots nor replay). DFlash greedy equals plain greedy under both values.
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"
#include "engine/routes.h"
#include "spec_rig.h"
#include "test.h"

static const struct {
    const char *target, *drafter;
} k_fx[] = {
    {"qwen35_dense_tied", "qwen35_dense_tied_b8"},
    {"qwen3_next_moe", "qwen3_next_moe_b4"},
    {"qwen35_moe", "qwen35_moe_b16"},
};
#define N_FX (int)(sizeof k_fx / sizeof k_fx[0])

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

// Layers whose GDN or conv state differs bitwise between engines a and b (CPU: host memory).
static int state_diffs(const fd_engine *a, const fd_engine *b, const char *what, int round) {
    const fd_rank_plan *p = &a->m->plan;
    const size_t gdn = (size_t)plan_gdn_state_bytes(p), conv = (size_t)plan_conv_state_bytes(p);
    int bad = 0;
    for (int l = 0; l < p->num_layers; l++) {
        if (p->layers[l].kind != FD_LAYER_GDN) continue;
        const int g = memcmp(a->gdn_state[l], b->gdn_state[l], gdn) != 0;
        const int c = memcmp(a->conv_state[l], b->conv_state[l], conv) != 0;
        if (g || c) fprintf(stderr, "    round %d layer %d: %s%s differ (%s)\n", round, l, g ? "GDN " : "", c ? "conv" : "", what);
        bad += g || c;
    }
    return bad;
}

TEST(gdn_verify_replay_commits_the_slot_state_bitwise) {
    for (int i = 0; i < N_FX; i++) {
        spec_rig r; // its engine takes slots; `rep` replays; `dec` decodes the kept tokens one at a time
        ASSERT(spec_rig_open(&r, cpu(), k_fx[i].target, k_fx[i].drafter, 0, 0) == 0, "%s", fd_error_msg());
        const int B = r.s.B, V = r.m.cfg.vocab_size;
        const int64_t cap = r.fx.n_ids + (int64_t)B * (B + 1) + 2 * B;
        spec_rig_close(&r);
        ASSERT(spec_rig_open(&r, cpu(), k_fx[i].target, k_fx[i].drafter, 0, cap) == 0, "%s", fd_error_msg());
        fd_engine *slots = &r.e, rep, dec;
        ASSERT(engine_init(&rep, &r.m, cpu(), &r.e.opt) == 0 && engine_init(&dec, &r.m, cpu(), &r.e.opt) == 0);
        ASSERT(engine_enable_slots(&rep, B) == 0, "%s", fd_error_msg());
        ASSERT(routes_set(slots, "gdn_verify=slots") == 0 && routes_set(&rep, "gdn_verify=replay") == 0, "%s",
               fd_error_msg());
        fd_engine *all[] = {slots, &rep, &dec};
        for (int k = 0; k < 3; k++)
            ASSERT(engine_prefill(all[k], r.fx.ids, r.fx.n_ids, 64, NULL, 0) == 0, "%s", fd_error_msg());
        float *la = malloc(sizeof(float) * (size_t)B * V), *lb = malloc(sizeof(float) * (size_t)B * V);
        int bad = 0, logits_bad = 0, cursor = 0, rounds = 0;
        // every accept count 1..B twice: once after a full block, once after a shorter verify (n < spec_block, so
        // the kept rows' layout follows the verify's n, not the block's)
        for (int pass = 0; pass < 2; pass++)
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
                for (int t = 0; t < keep; t++) ASSERT(engine_forward(&dec, &block[t], 1, NULL, 0) == 0);
                cursor += keep;
                bad += state_diffs(slots, &rep, "replay vs slots", rounds);
                bad += state_diffs(&dec, &rep, "replay vs one-token decode", rounds);
                EXPECT(rep.n_past == slots->n_past && dec.n_past == slots->n_past);
            }
        EXPECT(bad == 0, "%s: %d layer states differ", k_fx[i].target, bad);
        EXPECT(logits_bad == 0, "%s: %d verifies gave other logits under replay", k_fx[i].target, logits_bad);
        // every verify counted under the value it ran, and nothing under the other
        const fd_route *ra = &slots->routes[FD_ROUTE_GDN_VERIFY], *rb = &rep.routes[FD_ROUTE_GDN_VERIFY];
        EXPECT(ra->calls[FD_GDN_VERIFY_SLOTS] == rounds && ra->calls[FD_GDN_VERIFY_REPLAY] == 0);
        EXPECT(rb->calls[FD_GDN_VERIFY_REPLAY] == rounds && rb->calls[FD_GDN_VERIFY_SLOTS] == 0);
        EXPECT(routes_verify(&rep) == 0 && routes_verify(slots) == 0, "%s", fd_error_msg());
        printf("    %-20s block %2d: %d commits (accept 1..%d, full and short verifies), replay == slots == decode "
               "bitwise\n",
               k_fx[i].target, B, rounds, B);
        free(la);
        free(lb);
        engine_free(&rep);
        engine_free(&dec);
        spec_rig_close(&r);
    }
}

// DFlash greedy (the drafter's own proposals, so accept counts are whatever the target agrees with) is plain
// greedy under both values, and the two runs end in bitwise the same state.
TEST(gdn_verify_dflash_greedy_under_both_values) {
    static const char *const values[] = {"gdn_verify=slots", "gdn_verify=replay"};
    for (int i = 0; i < N_FX; i++) {
        spec_rig r[2];
        for (int v = 0; v < 2; v++) {
            ASSERT(spec_rig_open(&r[v], cpu(), k_fx[i].target, k_fx[i].drafter, 0, 0) == 0, "%s", fd_error_msg());
            ASSERT(routes_set(&r[v].e, values[v]) == 0, "%s", fd_error_msg());
            int32_t *out = calloc((size_t)r[v].fx.n_greedy, sizeof *out);
            ASSERT(dflash_generate(&r[v].s, r[v].fx.ids, r[v].fx.n_ids, 64, r[v].fx.n_greedy, NULL, out) == 0, "%s",
                   fd_error_msg());
            int same = 0;
            while (same < r[v].fx.n_greedy && out[same] == r[v].fx.greedy[same]) same++;
            EXPECT(same == r[v].fx.n_greedy, "%s %s: differs from greedy at token %d", k_fx[i].target, values[v], same);
            EXPECT(r[v].e.routes[FD_ROUTE_GDN_VERIFY].calls[v] == r[v].s.st.rounds && r[v].s.st.rounds >= 1);
            free(out);
        }
        EXPECT(r[0].e.n_past == r[1].e.n_past && state_diffs(&r[0].e, &r[1].e, "dflash slots vs replay", -1) == 0,
               "%s", k_fx[i].target);
        for (int v = 0; v < 2; v++) spec_rig_close(&r[v]);
    }
}
