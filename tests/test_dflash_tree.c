// Tree verification (route spec_verify=tree) on the CPU backend: every node's logits against the plain chain of
// its root-to-node path run as decode steps on a fresh engine (the brute-force reference), the committed state of
// an accepted path against a fresh prefill, the best-first tree against an exhaustive enumeration of paths, greedy
// tree rounds identical to plain greedy on every DFlash fixture at several budgets, refusals, the lossless
// acceptance math at T > 0 (chi-square against the target's distributions), the oracle drafter's tree (the
// bench's rounds) and the bench's tree columns.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/dflash_tree.h"
#include "spec_rig.h"
#include "test.h"

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

typedef struct {
    const char *name, *target;
} tree_fx;

static const tree_fx k_fx[] = {
    {"qwen35_dense_tied_b8", "qwen35_dense_tied"},
    {"qwen3_next_moe_b4", "qwen3_next_moe"},
    {"qwen35_moe_b16", "qwen35_moe"},
};
#define N_FX (int)(sizeof k_fx / sizeof k_fx[0])

// A tree with branching at several depths and non-contiguous paths: node t's parent.
static const int32_t k_parent[] = {-1, 0, 0, 1, 1, 2, 3, 5, 0, 6, 3};
#define N_NODES (int)(sizeof k_parent / sizeof k_parent[0])

// The root-to-node path of node t (root first); returns its length.
static int path_of(const int32_t *parent, int t, int32_t *path) {
    int len = 0;
    for (int a = t; a >= 0; a = parent[a]) len++;
    for (int a = t, i = len - 1; a >= 0; a = parent[a], i--) path[i] = a;
    return len;
}

// State of engine a against b: GDN / conv state and K/V rows [0, n_past); returns the worst rel-L2.
static double state_diff(fd_engine *a, fd_engine *b) {
    const fd_config *c = &a->m->cfg;
    const int64_t n = a->n_past;
    double worst = n == b->n_past ? 0 : INFINITY;
    for (int l = 0; l < c->num_layers && n == b->n_past; l++) {
        if (c->layer_kind[l] == FD_LAYER_GDN) {
            const size_t ns = (size_t)c->gdn_num_v_heads * c->gdn_k_dim * c->gdn_v_dim;
            const size_t nc = (size_t)(2 * c->gdn_num_k_heads * c->gdn_k_dim + c->gdn_num_v_heads * c->gdn_v_dim) *
                              (c->gdn_conv_kernel - 1);
            worst = fmax(worst, test_rel_l2(a->gdn_state[l], b->gdn_state[l], ns));
            worst = fmax(worst, test_rel_l2(a->conv_state[l], b->conv_state[l], nc));
        } else {
            const size_t row = (size_t)c->num_kv_heads * c->head_dim;
            float *x = calloc((size_t)n * 2, row * sizeof(float)), *y = calloc((size_t)n * 2, row * sizeof(float));
            const fd_kv_view fx = fd_kv_flat(x, n), fy = fd_kv_flat(y, n);
            const fd_kv_view va = engine_kv_view(a, l), vb = engine_kv_view(b, l);
            a->be->kv_copy(a->be, &fx, 0, &va, 0, n, c->num_kv_heads, c->head_dim);
            a->be->kv_copy(a->be, &fy, 0, &vb, 0, n, c->num_kv_heads, c->head_dim);
            worst = fmax(worst, test_rel_l2(x, y, (size_t)n * 2 * row));
            free(x);
            free(y);
        }
    }
    return worst;
}

TEST(tree_verify_nodes_match_chains_and_commit) {
    for (int f = 0; f < N_FX; f++) {
        spec_rig r;
        ASSERT(spec_rig_open(&r, cpu(), k_fx[f].target, k_fx[f].name, 0, 0) == 0, "%s", fd_error_msg());
        const int V = r.m.cfg.vocab_size, n = r.fx.n_ids;
        ASSERT(engine_enable_slots(&r.e, N_NODES) == 0, "%s", fd_error_msg());
        int32_t ids[N_NODES];
        uint64_t seed = 7 + (uint64_t)f;
        for (int t = 0; t < N_NODES; t++) ids[t] = (int32_t)((seed = seed * 6364136223846793005ULL + 1) >> 33) % V;
        ASSERT(engine_prefill(&r.e, r.fx.ids, n, 64, NULL, 0) == 0, "%s", fd_error_msg());
        float *tl = malloc(sizeof(float) * (size_t)N_NODES * V), *want = malloc(sizeof(float) * V);
        ASSERT(engine_verify_tree(&r.e, ids, k_parent, N_NODES, tl) == 0, "%s", fd_error_msg());
        EXPECT(r.e.n_past == n + N_NODES);
        fd_engine fresh;
        fd_engine_opts o = r.e.opt;
        ASSERT(engine_init(&fresh, &r.m, cpu(), &o) == 0);
        double worst = 0;
        for (int t = 0; t < N_NODES; t++) { // brute force: the path as plain decode steps after the prompt
            int32_t path[N_NODES];
            const int len = path_of(k_parent, t, path);
            engine_reset(&fresh);
            ASSERT(engine_prefill(&fresh, r.fx.ids, n, 64, NULL, 0) == 0);
            for (int d = 0; d < len; d++) ASSERT(engine_forward(&fresh, &ids[path[d]], 1, want, 0) == 0);
            const double err = test_rel_l2(tl + (size_t)t * V, want, (size_t)V);
            worst = fmax(worst, err);
            EXPECT(err <= 1e-5, "%s node %d (depth %d): logits rel-L2 %.3g vs its chain", k_fx[f].name, t, len - 1,
                   err);
            EXPECT(engine_argmax(tl + (size_t)t * V, V) == engine_argmax(want, V), "%s node %d argmax", k_fx[f].name,
                   t);
        }
        // commit the deepest non-contiguous path 0-1-3-6-9 and compare with a fresh prefill of prompt + path
        int32_t path[N_NODES], toks[256];
        const int keep = path_of(k_parent, 9, path);
        engine_commit_tree(&r.e, n, path, keep);
        memcpy(toks, r.fx.ids, sizeof(int32_t) * (size_t)n);
        for (int d = 0; d < keep; d++) toks[n + d] = ids[path[d]];
        engine_reset(&fresh);
        ASSERT(engine_prefill(&fresh, toks, n + keep, 64, NULL, 0) == 0);
        const double ds = state_diff(&r.e, &fresh);
        EXPECT(ds <= 1e-5, "%s: committed state rel-L2 %.3g vs a fresh prefill", k_fx[f].name, ds);
        // and the next step from the committed state agrees
        float *next = malloc(sizeof(float) * V);
        ASSERT(engine_forward(&r.e, &ids[0], 1, next, 0) == 0 && engine_forward(&fresh, &ids[0], 1, want, 0) == 0);
        EXPECT(test_rel_l2(next, want, (size_t)V) <= 1e-5);
        printf("    %-22s %d nodes: worst node logits rel-L2 %.2e vs chains, committed state %.2e\n", k_fx[f].name,
               N_NODES, worst, ds);
        free(next);
        free(tl);
        free(want);
        engine_free(&fresh);
        spec_rig_close(&r);
    }
}

// All paths of depth <= rows over V tokens, scored by summed log-softmax: the budget best must be the tree's nodes.
TEST(tree_build_is_best_first) {
    enum { V = 5, ROWS = 3 };
    float z[ROWS * V];
    uint64_t seed = 3;
    test_fill_uniform(z, ROWS * V, -2.0f, 2.0f, &seed);
    double lp[ROWS * V];
    for (int r = 0; r < ROWS; r++) {
        double s = 0;
        for (int v = 0; v < V; v++) s += exp((double)z[r * V + v]);
        for (int v = 0; v < V; v++) lp[r * V + v] = z[r * V + v] - log(s);
    }
    // every path as (depth, tokens) with its score
    enum { N_PATHS = V + V * V + V * V * V };
    double score[N_PATHS];
    int code[N_PATHS], np = 0; // tokens base V, plus the depth * 1000
    for (int d = 1; d <= ROWS; d++) {
        int count = 1;
        for (int i = 0; i < d; i++) count *= V;
        for (int c = 0; c < count; c++) {
            double s = 0;
            for (int i = 0, x = c; i < d; i++, x /= V) s += lp[i * V + x % V];
            score[np] = s;
            code[np++] = d * 1000 + c;
        }
    }
    const int budgets[] = {1, 4, 9, 30};
    for (int b = 0; b < 4; b++) {
        fd_spec_tree t;
        ASSERT(spec_tree_build(&t, 42, z, ROWS, V, budgets[b]) == 0, "%s", fd_error_msg());
        EXPECT(t.n == budgets[b] + 1 && t.token[0] == 42 && t.parent[0] == -1);
        int ok = 1;
        for (int k = 1; k < t.n; k++) {
            int32_t path[FD_SPEC_MAX_BLOCK];
            const int len = path_of(t.parent, k, path);
            int c = 0;
            for (int i = len - 1; i >= 1; i--) c = c * V + t.token[path[i]];
            const int want = (len - 1) * 1000 + c;
            // the node's path must be among the budget best: fewer than budget paths score strictly higher
            double s = 0;
            int above = 0;
            for (int p = 0; p < np; p++)
                if (code[p] == want) s = score[p];
            for (int p = 0; p < np; p++) above += score[p] > s + 1e-6;
            ok &= above < budgets[b] && t.depth[k] == len - 1 && t.parent[k] < k;
            ok &= fabs(t.logq[k] - s) < 1e-4;
        }
        EXPECT(ok, "budget %d: a node outside the best paths", budgets[b]);
    }
}

static int generate_tree(spec_rig *r, int budget, int32_t *out, int n_new) {
    r->e.spec_verify_sel = 1;
    r->s.tree_budget = budget;
    return dflash_generate(&r->s, r->fx.ids, r->fx.n_ids, 64, n_new, NULL, out);
}

TEST(tree_greedy_identical_on_fixtures) {
    const int budgets[] = {1, 3, 8, 16, 40}, blocks[] = {4, 8, 16};
    for (int f = 0; f < N_FX; f++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 5; k++) {
                spec_rig r;
                ASSERT(spec_rig_open(&r, cpu(), k_fx[f].target, k_fx[f].name, blocks[b], 0) == 0, "%s", fd_error_msg());
                int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out);
                ASSERT(generate_tree(&r, budgets[k], out, r.fx.n_greedy) == 0, "%s", fd_error_msg());
                int same = 0;
                while (same < r.fx.n_greedy && out[same] == r.fx.greedy[same]) same++;
                EXPECT(same == r.fx.n_greedy, "%s block %d budget %d: differs from greedy at token %d", k_fx[f].name,
                       blocks[b], budgets[k], same);
                EXPECT(r.s.st.tree_rounds == r.s.st.rounds && r.s.st.rounds >= 1);
                EXPECT(r.e.routes[FD_ROUTE_SPEC_VERIFY].calls[1] == r.s.st.rounds);
                free(out);
                spec_rig_close(&r);
            }
}

// DFlash2 drafters: the tree's children come from the selector after each node's token (dflash_tree.c).
TEST(tree_dflash2_greedy_identical_on_fixtures) {
    static const tree_fx d2[] = {{"qwen35_dense_tied_d2_b8", "qwen35_dense_tied"}, {"qwen35_moe_d2_b16", "qwen35_moe"}};
    const int budgets[] = {1, 3, 8, 16, 40}, blocks[] = {4, 8, 16};
    int cases = 0;
    for (int f = 0; f < 2; f++)
        for (int b = 0; b < 3; b++)
            for (int k = 0; k < 5; k++) {
                spec_rig r;
                ASSERT(spec_rig_open(&r, cpu(), d2[f].target, d2[f].name, blocks[b], 0) == 0, "%s", fd_error_msg());
                int32_t *out = calloc((size_t)r.fx.n_greedy, sizeof *out);
                ASSERT(generate_tree(&r, budgets[k], out, r.fx.n_greedy) == 0, "%s", fd_error_msg());
                int same = 0;
                while (same < r.fx.n_greedy && out[same] == r.fx.greedy[same]) same++;
                EXPECT(same == r.fx.n_greedy, "%s block %d budget %d: differs from greedy at token %d", d2[f].name,
                       blocks[b], budgets[k], same);
                EXPECT(r.s.st.tree_rounds == r.s.st.rounds && r.s.st.rounds >= 1);
                cases++;
                free(out);
                spec_rig_close(&r);
            }
    printf("    %d DFlash2 cases (2 drafters x blocks 4/8/16 x budgets 1..40): tree greedy == plain greedy\n", cases);
}

// The general builder with children that depend on the parent's token: log-softmax rows z[d] + w[parent] against
// every path enumerated, as tree_build_is_best_first does for parent-free rows.
enum { PB_V = 4, PB_ROWS = 3 };
typedef struct {
    float z[PB_ROWS][PB_V], w[PB_V][PB_V];
} pb_rows;
static void pb_lp(const pb_rows *m, int d, int x, double *lp) {
    double s = 0;
    for (int v = 0; v < PB_V; v++) s += exp((double)m->z[d][v] + m->w[x][v]);
    for (int v = 0; v < PB_V; v++) lp[v] = (double)m->z[d][v] + m->w[x][v] - log(s);
}
static void pb_rank(void *ctx, int depth, int32_t pred, int32_t *top, float *lp) {
    double l[PB_V];
    pb_lp(ctx, depth, pred, l);
    int order[PB_V];
    for (int i = 0; i < PB_V; i++) { // best first, the lower id on ties
        int j = i;
        while (j > 0 && l[i] > l[order[j - 1]]) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    for (int r = 0; r < PB_V; r++) top[r] = order[r], lp[r] = (float)l[order[r]];
}
TEST(tree_build_by_parent_is_best_first) {
    pb_rows m;
    uint64_t seed = 5;
    test_fill_uniform(&m.z[0][0], PB_ROWS * PB_V, -2.0f, 2.0f, &seed);
    test_fill_uniform(&m.w[0][0], PB_V * PB_V, -2.0f, 2.0f, &seed);
    const int anchor = 2;
    enum { N_PATHS = PB_V + PB_V * PB_V + PB_V * PB_V * PB_V };
    double score[N_PATHS];
    int code[N_PATHS], np = 0;
    for (int d = 1; d <= PB_ROWS; d++) {
        int count = 1;
        for (int i = 0; i < d; i++) count *= PB_V;
        for (int c = 0; c < count; c++) {
            double s = 0, l[PB_V];
            int prev = anchor;
            for (int i = 0, x = c; i < d; i++, x /= PB_V) {
                pb_lp(&m, i, prev, l);
                s += l[x % PB_V];
                prev = x % PB_V;
            }
            score[np] = s;
            code[np++] = d * 1000 + c;
        }
    }
    const int budgets[] = {1, 4, 9, 30};
    for (int b = 0; b < 4; b++) {
        fd_spec_tree t;
        ASSERT(spec_tree_build_by_parent(&t, anchor, PB_ROWS, PB_V, budgets[b], pb_rank, &m) == 0, "%s",
               fd_error_msg());
        EXPECT(t.n == budgets[b] + 1 && t.token[0] == anchor);
        int ok = 1;
        for (int k = 1; k < t.n; k++) {
            int32_t path[FD_SPEC_MAX_BLOCK];
            const int len = path_of(t.parent, k, path);
            int c = 0; // the path's tokens, depth 1 in the lowest digit
            for (int i = len - 1; i >= 1; i--) c = c * PB_V + t.token[path[i]];
            const int want = (len - 1) * 1000 + c;
            double s = NAN;
            int above = 0;
            for (int p = 0; p < np; p++)
                if (code[p] == want) s = score[p];
            for (int p = 0; p < np; p++) above += score[p] > s + 1e-6;
            ok &= above < budgets[b] && t.depth[k] == len - 1 && t.parent[k] < k && fabs(t.logq[k] - s) < 1e-4;
        }
        EXPECT(ok, "budget %d: a node outside the best paths (parent-dependent children)", budgets[b]);
    }
}

TEST(tree_refusals) {
    spec_rig r;
    ASSERT(spec_rig_open(&r, cpu(), k_fx[0].target, k_fx[0].name, 0, 0) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&r.e, r.fx.ids, r.fx.n_ids, 64, NULL, 0) == 0);
    const int32_t ids[3] = {1, 2, 3}, bad1[3] = {0, 0, 1}, bad2[3] = {-1, 0, 2};
    const int64_t n0 = r.e.n_past;
    EXPECT(engine_verify_tree(&r.e, ids, bad1, 3, NULL) != 0 && strstr(fd_error_msg(), "node 0"), "%s", fd_error_msg());
    EXPECT(engine_verify_tree(&r.e, ids, bad2, 3, NULL) != 0 && strstr(fd_error_msg(), "node 2"), "%s", fd_error_msg());
    EXPECT(r.e.n_past == n0);
    // a backend without the tree ops is refused with the route named
    fd_backend saved = *r.e.be;
    r.e.be->attention_tree = NULL;
    const int32_t ok[3] = {-1, 0, 0};
    EXPECT(engine_verify_tree(&r.e, ids, ok, 3, NULL) != 0 && strstr(fd_error_msg(), "spec_verify=chain"), "%s",
           fd_error_msg());
    *r.e.be = saved;
    spec_rig_close(&r);
}

// Synthetic target rows at every node of a fixed tree: the first emitted token must follow the root's p, and the
// second, in rounds whose first token is a child's (accepted or resampled), that child's p, or (a token outside the
// tree) nothing.
TEST(tree_sampling_accept_math) {
    enum { V = 8, N = 200000 };
    fd_spec_tree t = {.n = 5, .token = {0, 5, 2, 7, 3}, .parent = {-1, 0, 0, 0, 1}, .depth = {0, 1, 1, 1, 2}};
    float tl[5 * V], p[5][V], scratch[V];
    uint64_t seed = 11;
    test_fill_uniform(tl, 5 * V, -1.5f, 1.5f, &seed);
    tl[5] += 1.5f; // the root favours its first child a little
    fd_sampler smp;
    sampler_init(&smp, 1.0f, 0, 1.0f, 777);
    for (int u = 0; u < 5; u++) sampler_probs(&smp, tl + u * V, V, p[u]);
    int first[V] = {0}, after5[V] = {0}, n5 = 0, depth_hist[3] = {0};
    for (int i = 0; i < N; i++) {
        int32_t path[FD_SPEC_MAX_BLOCK], next;
        const int len = spec_tree_accept_sampled(&smp, &t, tl, V, scratch, path, &next);
        depth_hist[len - 1]++;
        const int32_t x0 = len > 1 ? t.token[path[1]] : next;
        first[x0]++;
        if (len > 1 && path[1] == 1) { // the second token after an accepted 5: node 1's p
            after5[len > 2 ? t.token[path[2]] : next]++;
            n5++;
        }
    }
    int d1, d2;
    const double c1 = test_chi2(first, p[0], V, N, &d1), c2 = test_chi2(after5, p[1], V, n5, &d2);
    printf("    accepted depth 0/1/2: %d/%d/%d; first token chi2 %.1f (dof %d), after node 1 %.1f (dof %d)\n",
           depth_hist[0], depth_hist[1], depth_hist[2], c1, d1, c2, d2);
    EXPECT(c1 < test_chi2_crit(d1) && c2 < test_chi2_crit(d2));
    EXPECT(depth_hist[0] > N / 20 && depth_hist[1] > N / 20 && depth_hist[2] > N / 50, "every depth exercised");
}

// End to end at T > 0: the token after the anchor of a tree round follows the target's sampling distribution.
static void sampling_is_lossless(const char *drafter) {
    spec_rig r;
    ASSERT(spec_rig_open(&r, cpu(), "qwen35_dense_tied", drafter, 0, 0) == 0, "%s", fd_error_msg());
    const int n = 24, V = r.m.cfg.vocab_size, trials = 800;
    fd_sampler smp;
    sampler_init(&smp, 1.5f, 0, 1.0f, 4321);
    int32_t anchor;
    ASSERT(dflash_prefill(&r.s, r.fx.ids, n, 32, NULL, &anchor) == 0);
    fd_engine ref;
    fd_engine_opts o = r.e.opt;
    ASSERT(engine_init(&ref, &r.m, cpu(), &o) == 0);
    int32_t seq[64];
    memcpy(seq, r.fx.ids, sizeof(int32_t) * n);
    seq[n] = anchor;
    float *logits = malloc(sizeof(float) * V), *p = malloc(sizeof(float) * V);
    ASSERT(engine_prefill(&ref, seq, n + 1, 32, logits, 0) == 0);
    sampler_probs(&smp, logits, V, p);
    int *counts = calloc((size_t)V, sizeof(int)), accepted = 0;
    r.e.spec_verify_sel = 1;
    r.s.tree_budget = 24;
    for (int i = 0; i < trials; i++) {
        engine_reset(&r.e);
        dflash_reset(&r.s);
        int32_t a, emitted[FD_SPEC_MAX_BLOCK];
        int got;
        ASSERT(dflash_prefill(&r.s, r.fx.ids, n, 32, NULL, &a) == 0 && a == anchor);
        ASSERT(dflash_round(&r.s, anchor, r.s.B, &smp, 1, emitted, &got) == 0, "%s", fd_error_msg());
        counts[emitted[0]]++;
        accepted += got > 1;
    }
    int dof;
    const double stat = test_chi2(counts, p, V, trials, &dof);
    printf("    %s T=1.5 budget 24: chi2 %.1f (dof %d, 0.1%% crit %.1f), rounds with an accepted draft %d of %d\n",
           drafter, stat, dof, test_chi2_crit(dof), accepted, trials);
    EXPECT(dof >= 3 && stat < test_chi2_crit(dof), "%s: tree sampling is not distributed like the target: chi2 %.1f",
           drafter, stat);
    free(counts);
    free(logits);
    free(p);
    engine_free(&ref);
    spec_rig_close(&r);
}

TEST(tree_sampling_is_lossless) {
    sampling_is_lossless("qwen35_dense_tied_b8");
    sampling_is_lossless("qwen35_dense_tied_d2_b8"); // DFlash2: children from the selector
}

TEST(tree_cli_generate_stats_and_refusal) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    char *csv = test_ids_csv(fx.ids, fx.n_ids), *plain = NULL, *tree = NULL, *stats = NULL, *bad = NULL;
    char *cmd = fd_sprintf("%s generate %s --ids %s -n 24 2>/dev/null", test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &plain) == 0);
    free(cmd);
    cmd = fd_sprintf("%s generate %s --ids %s -n 24 --draft tests/data/dflash/qwen35_dense_tied_b8 --route "
                     "spec_verify=tree --tree-budget 12 2>/dev/null",
                     test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &tree) == 0);
    EXPECT(plain && tree && !strcmp(plain, tree), "tree output differs:\n%s%s", plain, tree);
    free(cmd);
    cmd = fd_sprintf("%s generate %s --ids %s -n 8 --draft tests/data/dflash/qwen35_dense_tied_b8 --route "
                     "spec_verify=tree --tree-budget 12 --stats 2>&1 >/dev/null",
                     test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &stats) == 0);
    EXPECT(stats && strstr(stats, "tree verify (budget 12)") && strstr(stats, "nodes verified/round") &&
               strstr(stats, "emitted tokens/round"),
           "%s", stats ? stats : "");
    // whole trees up to the depth the last rounds allow: the context has room for a tree past the last new token
    // (with a capacity of exactly prompt + new the rounds' trees shrank to 4.9 nodes here; now 11.3 of 13)
    const char *nv = stats ? strstr(stats, "nodes verified/round ") : NULL;
    EXPECT(nv && atof(nv + strlen("nodes verified/round ")) > 10.0, "%s", stats ? stats : "");
    free(cmd);
    cmd = fd_sprintf("%s generate %s --ids %s -n 8 --tree-budget 12 2>&1", test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &bad) != 0);
    EXPECT(bad && strstr(bad, "--tree-budget") && strstr(bad, "--draft"), "%s", bad ? bad : "");
    free(cmd);
    free(plain);
    free(tree);
    free(stats);
    free(bad);
    free(csv);
    fixture_free(&fx);
}

// The oracle drafter's tree (the bench's tree rounds): the reference continuation (plain greedy) is the tree's
// spine. Genuine acceptance must then take the whole spine every full round, and forced acceptance exactly the
// schedule's count; either way the output is plain greedy's, with tree rounds of budget + 1 nodes.
static void count_accept(void *ctx, const fd_dflash *s, int accepted) {
    int *seen = ctx;
    seen[s->st.rounds < 16 ? s->st.rounds : 15] = accepted;
}

TEST(tree_oracle_spine_is_the_reference) {
    for (int force = 0; force <= 1; force++) {
        spec_rig r;
        ASSERT(spec_rig_open(&r, cpu(), "qwen35_dense_tied", "qwen35_dense_tied_b8", 0, 0) == 0, "%s", fd_error_msg());
        const int B = r.s.B, n_new = r.fx.n_greedy;
        int sched[] = {0, 5, 2, 7, 1};
        fd_spec_oracle orc = {r.fx.greedy, r.fx.n_greedy, sched, 5, force};
        int seen[16];
        for (int i = 0; i < 16; i++) seen[i] = -1;
        r.s.oracle = &orc;
        r.s.on_commit = count_accept;
        r.s.on_commit_ctx = seen;
        r.e.spec_verify_sel = 1;
        r.s.tree_budget = 12;
        int32_t *out = calloc((size_t)n_new, sizeof *out);
        ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, n_new, NULL, out) == 0, "%s", fd_error_msg());
        EXPECT(!memcmp(out, r.fx.greedy, sizeof(int32_t) * (size_t)n_new), "force %d: differs from greedy", force);
        EXPECT(r.s.st.tree_rounds == r.s.st.rounds && r.s.st.draft_tokens == 12 * r.s.st.rounds,
               "force %d: %lld tree rounds of %lld, %lld nodes", force, (long long)r.s.st.tree_rounds,
               (long long)r.s.st.rounds, (long long)r.s.st.draft_tokens);
        int ok = 1;
        for (int i = 0; i + 1 < r.s.st.rounds && i < 15; i++) // the last round may be cut short by n_new
            ok &= seen[i] == (force ? sched[i % 5] : B - 1);
        EXPECT(ok, "force %d: accepted %d %d %d %d ... per round", force, seen[0], seen[1], seen[2], seen[3]);
        printf("    oracle tree force=%d: %lld rounds, accepted %d %d %d %d %d, output = greedy\n", force,
               (long long)r.s.st.rounds, seen[0], seen[1], seen[2], seen[3], seen[4]);
        free(out);
        spec_rig_close(&r);
    }
}

// `bench --route spec_verify=tree --tree-budget N`: the tree rounds' columns, rows verified per round = N + 1, and
// emitted tokens/round the oracle's tau, as in the chain's run at the same tau.
TEST(tree_cli_bench_columns) {
    double emitted[2] = {0, 0}, rows[2] = {0, 0};
    for (int tree = 0; tree <= 1; tree++) {
        char js[] = "/tmp/fd_tree_benchXXXXXX";
        int fd = mkstemp(js);
        ASSERT(fd >= 0);
        close(fd);
        char *cmd = fd_sprintf("%s bench --random-weights bench/configs/tiny.json --draft-random "
                               "bench/configs/tiny-dflash.json --contexts 64 --decode 24 --oracle-tau 3.5 %s --json %s "
                               "2>/dev/null",
                               test_bin(), tree ? "--route spec_verify=tree --tree-budget 12" : "", js),
             *out = NULL;
        EXPECT(test_run(cmd, &out) == 0);
        const char *want = tree ? "verify a tree (spec_verify=tree, budget 12" : "verify the chain";
        EXPECT(out && strstr(out, "rows/rnd") && strstr(out, want) && strstr(out, "route check: every counted"), "%s",
               out ? out : "");
        json_error_t je;
        json_t *root = json_load_file(js, 0, &je), *row = json_array_get(json_object_get(root, "rows"), 0);
        const char *sv = json_string_value(json_object_get(row, "spec_verify"));
        EXPECT(sv && !strcmp(sv, tree ? "tree" : "chain"), "%s", sv ? sv : "(none)");
        emitted[tree] = json_real_value(json_object_get(row, "emitted_tokens_per_round"));
        rows[tree] = json_real_value(json_object_get(row, "verified_rows_per_round"));
        json_decref(root);
        unlink(js);
        free(cmd);
        free(out);
    }
    EXPECT(rows[0] == 8 && rows[1] == 13, "rows verified per round: chain %g, tree %g", rows[0], rows[1]);
    EXPECT(emitted[1] == emitted[0] && emitted[0] > 3, "emitted tokens/round: chain %g, tree %g", emitted[0],
           emitted[1]);
}

// A traced run (--trace) wraps the tree ops like every other op: the same output as plain greedy, and the trace
// names them.
TEST(tree_cli_traced_generate) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    char tr[] = "/tmp/fd_tree_traceXXXXXX";
    int fd = mkstemp(tr);
    ASSERT(fd >= 0);
    close(fd);
    char *csv = test_ids_csv(fx.ids, fx.n_ids), *plain = NULL, *traced = NULL;
    char *cmd = fd_sprintf("%s generate %s --ids %s -n 16 2>/dev/null", test_bin(), fx.dir, csv);
    EXPECT(test_run(cmd, &plain) == 0);
    free(cmd);
    cmd = fd_sprintf("%s generate %s --ids %s -n 16 --draft tests/data/dflash/qwen35_dense_tied_b8 --route "
                     "spec_verify=tree --tree-budget 6 --trace %s 2>/dev/null",
                     test_bin(), fx.dir, csv, tr);
    EXPECT(test_run(cmd, &traced) == 0);
    EXPECT(plain && traced && !strcmp(plain, traced), "traced tree output differs:\n%s%s", plain, traced);
    size_t len;
    char *t = fd_read_file(tr, &len);
    EXPECT(t && strstr(t, "gdn_core[tree]") && strstr(t, "attention[tree]") && strstr(t, "conv1d_silu[tree]") &&
               strstr(t, "qk_norm_rope[tree]"),
           "the trace does not name the tree ops");
    free(t);
    unlink(tr);
    free(cmd);
    free(plain);
    free(traced);
    free(csv);
    fixture_free(&fx);
}
