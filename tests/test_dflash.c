// DFlash on the CPU backend: draft logits against the z-lab reference (two rounds), speculative greedy output
// identical to plain greedy at several block sizes, every accept count forced by the oracle drafter with the
// committed state checked against a fresh prefill after every round, the capacity edge, and bad drafters.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dflash.h"
#include "spec_rig.h"
#include "test.h"

typedef struct {
    const char *name, *target;
    int block, commit;
} draft_fx;

static const draft_fx k_drafts[] = {
    {"qwen35_dense_tied_b8", "qwen35_dense_tied", 8, 3},
    {"qwen3_next_moe_b4", "qwen3_next_moe", 4, 2},
    {"qwen35_moe_b16", "qwen35_moe", 16, 5},
};
#define N_DRAFTS (int)(sizeof k_drafts / sizeof k_drafts[0])

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static int rig_open(spec_rig *r, const draft_fx *df, int block, int64_t capacity) {
    return spec_rig_open(r, cpu(), df->target, df->name, block, capacity);
}

TEST(dflash_draft_logits_match_reference) {
    for (int i = 0; i < N_DRAFTS; i++) {
        const draft_fx *df = &k_drafts[i];
        spec_rig r;
        ASSERT(rig_open(&r, df, 0, 0) == 0, "%s: %s", df->name, fd_error_msg());
        const int B = r.s.B, V = r.m.cfg.vocab_size;
        EXPECT(B == df->block);
        float *want1 = dflash_fixture_f32(df->name, "draft_logits.f32", (size_t)(B - 1) * V);
        float *want2 = dflash_fixture_f32(df->name, "draft_logits2.f32", (size_t)(B - 1) * V);
        ASSERT(want1 && want2, "%s: reference logits missing", df->name);
        float *got = malloc(sizeof(float) * (B - 1) * V);
        int32_t anchor, draft[FD_SPEC_MAX_BLOCK];
        ASSERT(dflash_prefill(&r.s, r.fx.ids, r.fx.n_ids, 64, NULL, &anchor) == 0, "%s", fd_error_msg());
        EXPECT(anchor == r.fx.greedy[0]);
        for (int j = 0; j < (B - 1) * V; j++) got[j] = NAN;
        ASSERT(dflash_draft(&r.s, anchor, draft, got) == 0, "%s", fd_error_msg());
        double e1 = test_rel_l2(got, want1, (size_t)(B - 1) * V);
        // round 2: the target consumes HF's greedy g0..g(k-1), whose taps extend the context; anchor g(k)
        ASSERT(engine_forward(&r.e, r.fx.greedy, df->commit, NULL, 0) == 0, "%s", fd_error_msg());
        dflash_context_append(&r.s, df->commit);
        ASSERT(dflash_draft(&r.s, r.fx.greedy[df->commit], draft, got) == 0, "%s", fd_error_msg());
        double e2 = test_rel_l2(got, want2, (size_t)(B - 1) * V);
        printf("    %-22s draft logits rel-L2 round 1 %.2e, round 2 %.2e\n", df->name, e1, e2);
        EXPECT(e1 <= 1e-4 && e2 <= 1e-4, "%s: draft logits rel-L2 %.3g / %.3g", df->name, e1, e2);
        free(got);
        free(want1);
        free(want2);
        spec_rig_close(&r);
    }
}

TEST(dflash_greedy_identical_at_block_sizes) {
    const int blocks[] = {4, 8, 16};
    for (int i = 0; i < N_DRAFTS; i++)
        for (int b = 0; b < 3; b++) {
            spec_rig r;
            ASSERT(rig_open(&r, &k_drafts[i], blocks[b], 0) == 0, "%s", fd_error_msg());
            int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out);
            ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, out) == 0, "%s", fd_error_msg());
            int same = 0;
            while (same < r.fx.n_greedy && out[same] == r.fx.greedy[same]) same++;
            EXPECT(same == r.fx.n_greedy, "%s block %d: differs from greedy at token %d", k_drafts[i].name,
                   blocks[b], same);
            EXPECT(r.s.st.emitted >= r.fx.n_greedy - 1 && r.s.st.rounds >= 1);
            free(out);
            spec_rig_close(&r);
        }
}

// After every commit, the target's state must equal a fresh prefill of the same tokens.
typedef struct {
    spec_rig *r;
    const int32_t *ref; // the continuation the target has consumed after the prompt
    fd_engine fresh;
    int checked, bad;
    int seen_accept[FD_SPEC_MAX_BLOCK];
} commit_check;

static double rel_l2_dev(const float *a, const float *b, size_t n) { return test_rel_l2(a, b, n); }

static void on_commit(void *ctx, const fd_dflash *s, int accepted) {
    commit_check *cc = ctx;
    spec_rig *r = cc->r;
    const fd_config *c = &r->m.cfg;
    const int64_t n_past = r->e.n_past, n = r->fx.n_ids;
    cc->seen_accept[accepted]++;
    // tokens the target has consumed: the prompt, then the greedy continuation (which the output equals)
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_past);
    memcpy(toks, r->fx.ids, sizeof(int32_t) * (size_t)n);
    memcpy(toks + n, cc->ref, sizeof(int32_t) * (size_t)(n_past - n));
    engine_reset(&cc->fresh);
    if (engine_prefill(&cc->fresh, toks, n_past, 64, NULL, 0)) cc->bad++;
    const int conv = 2 * c->gdn_num_k_heads * c->gdn_k_dim + c->gdn_num_v_heads * c->gdn_v_dim;
    for (int l = 0; l < c->num_layers; l++) {
        if (c->layer_kind[l] == FD_LAYER_GDN) {
            size_t ns = (size_t)c->gdn_num_v_heads * c->gdn_k_dim * c->gdn_v_dim;
            double es = rel_l2_dev(r->e.gdn_state[l], cc->fresh.gdn_state[l], ns);
            double ec = rel_l2_dev(r->e.conv_state[l], cc->fresh.conv_state[l], (size_t)conv * (c->gdn_conv_kernel - 1));
            // not bitwise: the fresh prefill takes the chunked GDN route, the spec run the recurrence
            if (!(es <= 1e-5 && ec <= 1e-5)) {
                cc->bad++;
                fprintf(stderr, "    layer %d after accept %d at n_past %lld: state rel-L2 %.3g, conv %.3g\n", l,
                        accepted, (long long)n_past, es, ec);
            }
        } else { // KV rows [0, n_past) of K and of V, gathered through each sequence's page table (CPU f32 layout)
            const size_t row = (size_t)c->num_kv_heads * c->head_dim;
            fd_backend *be = r->e.be;
            float *a = calloc((size_t)n_past * 2, row * sizeof(float)),
                  *b = calloc((size_t)n_past * 2, row * sizeof(float));
            const fd_kv_view fa = fd_kv_flat(a, n_past), fb = fd_kv_flat(b, n_past);
            const fd_kv_view va = engine_kv_view(&r->e, l), vb = engine_kv_view(&cc->fresh, l);
            be->kv_copy(be, &fa, 0, &va, 0, n_past, c->num_kv_heads, c->head_dim);
            be->kv_copy(be, &fb, 0, &vb, 0, n_past, c->num_kv_heads, c->head_dim);
            double ek = rel_l2_dev(a, b, (size_t)n_past * row);
            double ev = rel_l2_dev(a + n_past * row, b + n_past * row, (size_t)n_past * row);
            if (!(ek <= 1e-5 && ev <= 1e-5)) {
                cc->bad++;
                fprintf(stderr, "    layer %d KV rel-L2 %.3g / %.3g\n", l, ek, ev);
            }
            free(a);
            free(b);
        }
    }
    (void)s;
    cc->checked++;
    free(toks);
}

TEST(dflash_every_accept_count_commits_exact_state) {
    for (int i = 0; i < N_DRAFTS; i++) {
        const int B = k_drafts[i].block;
        int sched[FD_SPEC_MAX_BLOCK], n_new = 1;
        for (int a = 0; a < B; a++) {
            sched[a] = (a * 5 + 3) % B; // every count 0..B-1, shuffled
            n_new += sched[a] + 1;
        }
        // The reference continuation is plain greedy from this engine (checked against HF elsewhere), long
        // enough for one full pass of the schedule.
        spec_rig r;
        ASSERT(rig_open(&r, &k_drafts[i], 0, 0) == 0, "%s", fd_error_msg());
        const int64_t cap = r.fx.n_ids + n_new + B;
        spec_rig_close(&r);
        ASSERT(rig_open(&r, &k_drafts[i], 0, cap) == 0, "%s", fd_error_msg());
        commit_check cc = {.r = &r};
        fd_engine_opts o = r.e.opt;
        ASSERT(engine_init(&cc.fresh, &r.m, cpu(), &o) == 0);
        int32_t *ref = calloc((size_t)n_new, sizeof *ref), *out = calloc((size_t)n_new, sizeof *out);
        ASSERT(engine_generate_greedy(&cc.fresh, r.fx.ids, r.fx.n_ids, 64, n_new, ref) == 0, "%s", fd_error_msg());
        cc.ref = ref;
        fd_spec_oracle orc = {ref, n_new, sched, B, 0}; // genuine acceptance
        r.s.oracle = &orc;
        r.s.on_commit = on_commit;
        r.s.on_commit_ctx = &cc;
        ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, n_new, NULL, out) == 0, "%s", fd_error_msg());
        EXPECT(!memcmp(out, ref, sizeof(int32_t) * (size_t)n_new), "%s: oracle run differs from greedy",
               k_drafts[i].name);
        EXPECT(cc.bad == 0 && cc.checked == r.s.st.rounds, "%s: %d of %d commits wrong", k_drafts[i].name, cc.bad,
               cc.checked);
        int missing = 0;
        for (int a = 0; a < B; a++) missing += cc.seen_accept[a] == 0;
        EXPECT(missing == 0, "%s: %d accept counts never exercised", k_drafts[i].name, missing);
        printf("    %-22s %d rounds, every accept count 0..%d, state checked after each commit\n", k_drafts[i].name,
               cc.checked, B - 1);
        free(out);
        free(ref);
        engine_free(&cc.fresh);
        spec_rig_close(&r);
    }
}

TEST(dflash_capacity_edge) {
    // capacity exactly prompt + n_new - 1: the last emitted token is never fed to the target
    spec_rig r;
    fixture fx;
    ASSERT(fixture_load(k_drafts[0].target, &fx) == 0);
    const int64_t cap = fx.n_ids + fx.n_greedy - 1;
    fixture_free(&fx);
    ASSERT(rig_open(&r, &k_drafts[0], 0, cap) == 0, "%s", fd_error_msg());
    int sched[] = {7, 6, 7};
    fd_spec_oracle orc = {r.fx.greedy, r.fx.n_greedy, sched, 3, 0};
    r.s.oracle = &orc;
    int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out);
    ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, r.fx.n_greedy, NULL, out) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(out, r.fx.greedy, sizeof(int32_t) * (size_t)r.fx.n_greedy));
    EXPECT(r.e.n_past == cap, "n_past %lld, capacity %lld", (long long)r.e.n_past, (long long)cap);
    free(out);
    spec_rig_close(&r);
}

TEST(dflash_bad_drafters) {
    fd_model m;
    ASSERT(model_load("tests/data/fixtures/qwen35_vl_sharded", &m) == 0, "%s", fd_error_msg());
    fd_drafter d;
    EXPECT(drafter_load("tests/data/dflash/qwen35_dense_tied_b8", &m, &d) != 0);
    EXPECT(strstr(fd_error_msg(), "hidden size 64") != NULL, "%s", fd_error_msg());
    EXPECT(drafter_load("tests/data/fixtures/qwen35_dense_tied", &m, &d) != 0); // a target, not a drafter
    EXPECT(strstr(fd_error_msg(), "not a supported drafter") != NULL, "%s", fd_error_msg());
    EXPECT(drafter_load("/nonexistent", &m, &d) != 0);
    EXPECT(strstr(fd_error_msg(), "/nonexistent") != NULL, "%s", fd_error_msg());
    model_free(&m);
}

TEST(dflash_cli_generate_and_draft_logits) {
    for (int i = 0; i < N_DRAFTS; i++) {
        const draft_fx *df = &k_drafts[i];
        fixture fx;
        ASSERT(fixture_load(df->target, &fx) == 0, "%s", fd_error_msg());
        char *csv = test_ids_csv(fx.ids, fx.n_ids), *plain = NULL, *spec = NULL, *stats = NULL;
        char *cmd = fd_sprintf("%s generate %s --ids %s -n 40 2>/dev/null", test_bin(), fx.dir, csv);
        EXPECT(test_run(cmd, &plain) == 0);
        free(cmd);
        cmd = fd_sprintf("%s generate %s --ids %s -n 40 --draft tests/data/dflash/%s --block-size 4 2>/dev/null",
                         test_bin(), fx.dir, csv, df->name);
        EXPECT(test_run(cmd, &spec) == 0);
        EXPECT(plain && spec && !strcmp(plain, spec), "%s: --draft output differs:\n%s%s", df->name, plain, spec);
        free(cmd);
        cmd = fd_sprintf("%s generate %s --ids %s -n 8 --draft tests/data/dflash/%s --stats 2>&1 >/dev/null",
                         test_bin(), fx.dir, csv, df->name);
        EXPECT(test_run(cmd, &stats) == 0);
        EXPECT(stats && strstr(stats, "emitted tokens/round") && strstr(stats, "accepted per position") &&
                   strstr(stats, "accept ") && strstr(stats, "commit "),
               "%s", stats ? stats : "");
        free(cmd);
        if (i == 0) { // --trace shows the round's phases as spans around their ops
            char tr[] = "/tmp/fd_rtraceXXXXXX";
            int tfd = mkstemp(tr);
            ASSERT(tfd >= 0);
            close(tfd);
            cmd = fd_sprintf("%s generate %s --ids %s -n 8 --draft tests/data/dflash/%s --trace %s >/dev/null 2>&1",
                             test_bin(), fx.dir, csv, df->name, tr);
            EXPECT(test_run(cmd, NULL) == 0);
            size_t tl = 0;
            char *tj = fd_read_file(tr, &tl);
            EXPECT(tj && strstr(tj, "\"round: draft\"") && strstr(tj, "\"round: verify\"") &&
                       strstr(tj, "\"round: accept\"") && strstr(tj, "\"round: commit\""),
                   "%s: no round phases in the trace", df->name);
            free(tj);
            free(cmd);
            unlink(tr);
        }
        char out[] = "/tmp/fd_draftXXXXXX";
        int fd = mkstemp(out);
        ASSERT(fd >= 0);
        close(fd);
        cmd = fd_sprintf("%s draft-logits %s --draft tests/data/dflash/%s --ids %s --out %s 2>/dev/null", test_bin(),
                         fx.dir, df->name, csv, out);
        EXPECT(test_run(cmd, NULL) == 0);
        size_t len = 0;
        char *got = fd_read_file(out, &len);
        float *want = dflash_fixture_f32(df->name, "draft_logits.f32", (size_t)(df->block - 1) * fx.vocab);
        ASSERT(got && want && len == (size_t)(df->block - 1) * fx.vocab * 4, "%s: draft-logits wrote %zu bytes",
               df->name, len);
        EXPECT(test_rel_l2((float *)got, want, (size_t)(df->block - 1) * fx.vocab) <= 1e-4);
        unlink(out);
        free(got);
        free(want);
        free(cmd);
        free(plain);
        free(spec);
        free(stats);
        free(csv);
        fixture_free(&fx);
    }
}
