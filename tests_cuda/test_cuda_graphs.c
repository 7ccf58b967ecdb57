// Recorded forwards (route graphs) and the device argmax on the CUDA backend. Two engines of one model on one
// backend, one with graphs=on and one with graphs=off, must give bitwise equal logits and ids step for step: decode
// steps (across a prefix-cache style state restore and a reset), verify blocks with state slots and taps, and
// after a scratch buffer grew (the graphs are then stale and must be recorded again). MoE fixtures are never
// recorded (their routing syncs the host); for them the test only checks that on and off agree.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/fixture.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/engine.h"
#include "engine/engine_state.h"
#include "engine/routes.h"

static fd_backend *gpu(void) {
    static fd_backend *be;
    if (!be) be = cuda_rig_new_gpu_for_graphs(); // no FD_CUDA_SYNC / FD_CUDA_PROFILE: they remove the graphs
    return be;
}

typedef struct {
    fixture fx;
    fd_model m;
    fd_engine on, off;
    int V;
} pair;

static void pair_open(pair *p, const char *name, int budget, int64_t extra) {
    memset(p, 0, sizeof *p);
    ASSERT(fixture_load(name, &p->fx) == 0, "%s", fd_error_msg());
    ASSERT(model_load(p->fx.dir, &p->m) == 0, "%s", fd_error_msg());
    model_upload(&p->m, gpu());
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = budget;
    o.capacity = p->fx.n_ids + extra;
    ASSERT(engine_init(&p->on, &p->m, gpu(), &o) == 0, "%s", fd_error_msg());
    ASSERT(engine_init(&p->off, &p->m, gpu(), &o) == 0, "%s", fd_error_msg());
    ASSERT(routes_set(&p->on, "graphs=on") == 0, "%s", fd_error_msg());
    ASSERT(routes_set(&p->off, "graphs=off") == 0, "%s", fd_error_msg());
    p->V = p->m.cfg.vocab_size;
}

static void pair_close(pair *p) {
    engine_free(&p->on);
    engine_free(&p->off);
    model_free(&p->m);
    fixture_free(&p->fx);
}

static void print_stats(const char *what, const fd_engine *e) {
    const fd_graph_stats *s = &e->graph_stats;
    printf("    %-34s graphs: %lld replays, %lld recordings, %lld discarded, %lld stale, %lld eager\n", what,
           (long long)s->replayed, (long long)s->recorded, (long long)s->failed, (long long)s->stale,
           (long long)s->eager);
}

// Route pdl for each engine's calls: the on engine (graphs) runs under pdl=gemv, the off engine under pdl=off.
static void use_pdl(const char *v) {
    ASSERT(fd_cuda_set_route(gpu(), "pdl", v) == 0, "%s", fd_error_msg());
}

// routes_verify, except route pdl: step_both switches it on purpose, so its counts hold both values.
static int verify_routes(fd_engine *e) {
    fd_route *pdl = routes_find(e, "pdl");
    memset(pdl->calls, 0, sizeof pdl->calls);
    return routes_verify(e);
}

// One decode step on both engines from token tok; returns the greedy id (from the off engine's host logits) and
// counts a logits mismatch. greedy: the on engine takes engine_forward_greedy (device argmax) instead of logits.
static int32_t step_both(pair *p, int32_t tok, float *la, float *lb, int greedy, int *mismatch) {
    int32_t ga = -1;
    use_pdl("gemv");
    if (greedy)
        ASSERT(engine_forward_greedy(&p->on, &tok, 1, &ga) == 0, "%s", fd_error_msg());
    else
        ASSERT(engine_forward(&p->on, &tok, 1, la, 0) == 0, "%s", fd_error_msg());
    use_pdl("off");
    ASSERT(engine_forward(&p->off, &tok, 1, lb, 0) == 0, "%s", fd_error_msg());
    use_pdl("gemv");
    const int32_t gb = engine_argmax(lb, p->V);
    if (greedy ? ga != gb : memcmp(la, lb, sizeof(float) * (size_t)p->V) != 0) (*mismatch)++;
    return gb;
}

// Decode steps of the graphs=on engine under pdl=gemv (recorded with programmatic edges, the default) against the
// graphs=off engine under pdl=off: bitwise equal logits and ids. The prompts run under the same split.
TEST(cuda_graphs_decode_equal_off) {
    enum { STEPS = 48 };
    for (int f = 0; k_fixture_names[f]; f++) {
        pair p;
        pair_open(&p, k_fixture_names[f], 64, 3 * STEPS);
        const int V = p.V;
        float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
        ASSERT(engine_prefill(&p.on, p.fx.ids, p.fx.n_ids, 0, la, 0) == 0, "%s", fd_error_msg());
        use_pdl("off");
        ASSERT(engine_prefill(&p.off, p.fx.ids, p.fx.n_ids, 0, lb, 0) == 0, "%s", fd_error_msg());
        use_pdl("gemv");
        EXPECT(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: prefill logits differ", k_fixture_names[f]);
        // prefix-cache style snapshot of the post-prompt state
        es_geom g;
        es_geom_init(&g, &p.on);
        void *sa = gpu()->alloc(gpu(), g.state_bytes + 1), *sb = gpu()->alloc(gpu(), g.state_bytes + 1);
        es_state_save(&p.on, &g, sa);
        es_state_save(&p.off, &g, sb);
        const int64_t P = p.on.n_past;
        const int32_t first = engine_argmax(lb, V);
        int32_t ref[STEPS];
        int bad_logits = 0, bad_ids = 0, bad_reset = 0;
        int32_t tok = first;
        for (int i = 0; i < STEPS; i++) ref[i] = tok = step_both(&p, tok, la, lb, 0, &bad_logits);
        // restore the snapshot (the KV past P is overwritten in place) and decode again with the device argmax
        es_state_load(&p.on, &g, sa);
        es_state_load(&p.off, &g, sb);
        p.on.n_past = p.off.n_past = P;
        tok = first;
        for (int i = 0; i < STEPS; i++) {
            tok = step_both(&p, tok, la, lb, 1, &bad_ids);
            bad_ids += tok != ref[i];
        }
        // reset and run the prompt again: positions go back to 0
        engine_reset(&p.on);
        engine_reset(&p.off);
        ASSERT(engine_prefill(&p.on, p.fx.ids, p.fx.n_ids, 0, la, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&p.off, p.fx.ids, p.fx.n_ids, 0, lb, 0) == 0, "%s", fd_error_msg());
        tok = first;
        for (int i = 0; i < 16; i++) {
            tok = step_both(&p, tok, la, lb, 0, &bad_reset);
            bad_reset += tok != ref[i];
        }
        printf("    %-20s %d decode steps: logits mismatches %d, restored ids mismatches %d, after reset %d\n",
               k_fixture_names[f], STEPS, bad_logits, bad_ids, bad_reset);
        print_stats("graphs=on", &p.on);
        EXPECT(bad_logits == 0 && bad_ids == 0 && bad_reset == 0, "%s: graphs on and off disagree", k_fixture_names[f]);
        if (p.on.graphs_capable)
            EXPECT(p.on.graph_stats.replayed >= 2 * STEPS, "%s: only %lld replays", k_fixture_names[f],
                   (long long)p.on.graph_stats.replayed);
        EXPECT(p.off.graph_stats.replayed == 0 && p.off.graph_stats.recorded == 0, "graphs=off recorded");
        EXPECT(verify_routes(&p.on) == 0, "%s", fd_error_msg());
        EXPECT(verify_routes(&p.off) == 0, "%s", fd_error_msg());
        gpu()->free(gpu(), sa);
        gpu()->free(gpu(), sb);
        free(la), free(lb);
        pair_close(&p);
    }
}

TEST(cuda_graphs_verify_equal_off) {
    const int lens[] = {8, 4, 8, 3, 8, 4, 8, 8, 1, 8, 4, 8};
    const int n_lens = (int)(sizeof lens / sizeof lens[0]), n_rounds = 2 * n_lens;
    for (int f = 0; k_fixture_names[f]; f++) {
        pair p;
        pair_open(&p, k_fixture_names[f], 64, 8 * n_rounds + 8);
        const int V = p.V, d = p.m.cfg.hidden_size, L = p.m.cfg.num_layers;
        const int taps[] = {0, L / 2, L - 1};
        const int n_taps = L >= 3 ? 3 : 1;
        fd_engine *es[2] = {&p.on, &p.off};
        for (int k = 0; k < 2; k++) {
            ASSERT(engine_set_taps(es[k], taps, n_taps) == 0, "%s", fd_error_msg());
            ASSERT(engine_enable_slots(es[k], 8) == 0, "%s", fd_error_msg());
        }
        float *la = malloc(sizeof(float) * 8 * (size_t)V), *lb = malloc(sizeof(float) * 8 * (size_t)V);
        const size_t tap_floats = (size_t)8 * n_taps * d;
        float *ta = malloc(sizeof(float) * tap_floats), *tb = malloc(sizeof(float) * tap_floats);
        ASSERT(engine_prefill(&p.on, p.fx.ids, p.fx.n_ids, 0, la, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&p.off, p.fx.ids, p.fx.n_ids, 0, lb, 0) == 0, "%s", fd_error_msg());
        int32_t anchor = engine_argmax(lb, V);
        int bad_logits = 0, bad_taps = 0;
        uint64_t st = 12345;
        for (int r = 0; r < n_rounds; r++) {
            const int n = lens[r % n_lens];
            int32_t block[8];
            block[0] = anchor;
            for (int i = 1; i < n; i++) { // a mix of plausible and arbitrary drafts
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                block[i] = i < n / 2 ? p.fx.greedy[(r + i) % p.fx.n_greedy] : (int32_t)((st >> 33) % (uint64_t)V);
            }
            const int64_t n0 = p.on.n_past;
            ASSERT(engine_verify(&p.on, block, n, la) == 0, "%s", fd_error_msg());
            ASSERT(engine_verify(&p.off, block, n, lb) == 0, "%s", fd_error_msg());
            bad_logits += memcmp(la, lb, sizeof(float) * (size_t)n * V) != 0;
            gpu()->to_host(gpu(), ta, p.on.taps, sizeof(float) * (size_t)n * n_taps * d);
            gpu()->to_host(gpu(), tb, p.off.taps, sizeof(float) * (size_t)n * n_taps * d);
            bad_taps += memcmp(ta, tb, sizeof(float) * (size_t)n * n_taps * d) != 0;
            const int keep = 1 + (r * 5) % n;
            engine_commit(&p.on, n0, keep);
            engine_commit(&p.off, n0, keep);
            anchor = engine_argmax(lb + (size_t)(keep - 1) * V, V);
        }
        printf("    %-20s %d verify blocks: logits mismatches %d, taps mismatches %d\n", k_fixture_names[f], n_rounds,
               bad_logits, bad_taps);
        print_stats("graphs=on (verify)", &p.on);
        EXPECT(bad_logits == 0 && bad_taps == 0, "%s: verify with graphs differs from without", k_fixture_names[f]);
        if (p.on.graphs_capable)
            EXPECT(p.on.graph_stats.replayed >= 6, "%s: only %lld replays", k_fixture_names[f],
                   (long long)p.on.graph_stats.replayed);
        EXPECT(verify_routes(&p.on) == 0, "%s", fd_error_msg());
        free(la), free(lb), free(ta), free(tb);
        pair_close(&p);
    }
}

TEST(cuda_graphs_rerecord_after_scratch_growth) {
    int f = 0;
    pair p;
    for (;; f++) { // the first fixture whose forwards can be recorded (no MoE)
        ASSERT(k_fixture_names[f], "no dense fixture");
        pair_open(&p, k_fixture_names[f], 64, 256);
        if (p.on.graphs_capable) break;
        pair_close(&p);
    }
    const int V = p.V;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    // prompt in chunks of 4 rows, so no scratch buffer is sized for more than that yet
    ASSERT(engine_prefill(&p.on, p.fx.ids, p.fx.n_ids, 4, la, 0) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&p.off, p.fx.ids, p.fx.n_ids, 4, lb, 0) == 0, "%s", fd_error_msg());
    int bad = 0;
    int32_t tok = engine_argmax(lb, V);
    for (int i = 0; i < 6; i++) tok = step_both(&p, tok, la, lb, 0, &bad);
    const fd_graph_stats s0 = p.on.graph_stats;
    const uint64_t gen0 = gpu()->graph_generation(gpu());
    // 64 rows at once: prefill-sized scratch (GDN chunk buffers, GEMM activation copies) grows
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = p.fx.ids[i % p.fx.n_ids];
    ASSERT(engine_forward(&p.on, ids, 64, NULL, 0) == 0, "%s", fd_error_msg());
    ASSERT(engine_forward(&p.off, ids, 64, NULL, 0) == 0, "%s", fd_error_msg());
    const uint64_t gen1 = gpu()->graph_generation(gpu());
    ASSERT(gen1 != gen0, "the 64-row forward grew no scratch buffer: the test does not test what it says");
    for (int i = 0; i < 8; i++) tok = step_both(&p, tok, la, lb, 0, &bad);
    const fd_graph_stats *s1 = &p.on.graph_stats;
    printf("    %-20s generation %llu -> %llu: %lld stale, %lld new recordings, %lld replays after; mismatches %d\n",
           k_fixture_names[f], (unsigned long long)gen0, (unsigned long long)gen1, (long long)(s1->stale - s0.stale),
           (long long)(s1->recorded - s0.recorded), (long long)(s1->replayed - s0.replayed), bad);
    EXPECT(bad == 0, "graphs on and off disagree around a scratch growth");
    EXPECT(s1->stale - s0.stale >= 1 && s1->recorded - s0.recorded >= 1, "the stale decode graph was not re-recorded");
    EXPECT(s1->replayed - s0.replayed >= 4, "only %lld replays after the re-recording",
           (long long)(s1->replayed - s0.replayed));
    EXPECT(s1->failed == 0, "%lld recordings discarded", (long long)s1->failed);
    EXPECT(verify_routes(&p.on) == 0, "%s", fd_error_msg());
    free(la), free(lb);
    pair_close(&p);
}

TEST(cuda_argmax_rows_matches_cpu) {
    fd_backend *cpu = fd_backend_cpu_create(0);
    const int Vs[] = {1, 33, 1000, 151936, 248320};
    const int rows_of[] = {1, 3, 16};
    uint64_t seed = 99;
    int bad = 0, cases = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++)
        for (size_t ri = 0; ri < 3; ri++) {
            const int V = Vs[vi], rows = rows_of[ri];
            const size_t cnt = (size_t)V * rows;
            float *l = malloc(sizeof(float) * cnt);
            test_fill_uniform(l, cnt, -30, 30, &seed);
            for (int r = 0; r < rows; r++) {
                float *x = l + (size_t)r * V;
                const int kind = r % 5;
                if (kind == 1 && V > 2) { // a tie between two indices above everything else: the lower one wins
                    const int i = (int)((seed >> 7) % (uint64_t)(V - 1)), j = V - 1;
                    seed = seed * 6364136223846793005ull + 1;
                    x[i] = x[j] = 100.0f;
                } else if (kind == 2) { // all equal: index 0
                    for (int i = 0; i < V; i++) x[i] = 1.5f;
                } else if (kind == 3) { // all -inf: index 0
                    for (int i = 0; i < V; i++) x[i] = -INFINITY;
                } else if (kind == 4 && V > 6) { // a NaN (not in column 0) is never the maximum
                    x[5] = NAN;
                    x[V / 2] = 50.0f;
                }
            }
            float *dl = gpu()->alloc(gpu(), sizeof(float) * cnt);
            gpu()->to_device(gpu(), dl, l, sizeof(float) * cnt);
            int32_t got[16], want[16], host[16];
            for (int r = 0; r < rows; r++) got[r] = -7;
            gpu()->argmax_rows(gpu(), got, dl, rows, V);
            cpu->argmax_rows(cpu, want, l, rows, V);
            for (int r = 0; r < rows; r++) {
                host[r] = engine_argmax(l + (size_t)r * V, V);
                if (got[r] != want[r] || got[r] != host[r]) {
                    if (bad < 8)
                        printf("    V=%d row %d: gpu %d, cpu op %d, engine_argmax %d\n", V, r, got[r], want[r],
                               host[r]);
                    bad++;
                }
                cases++;
            }
            gpu()->free(gpu(), dl);
            free(l);
        }
    printf("    argmax_rows: %d rows, %d differ\n", cases, bad);
    EXPECT(bad == 0, "%d rows differ from the CPU argmax", bad);
    cpu->destroy(cpu);
}
