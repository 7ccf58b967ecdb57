// Tree verify of DFlash drafts (route spec_verify=tree) end to end on the CUDA backend:
//   - cuda_tree_greedy_identical_on_fixtures: on every DFlash fixture (the CPU test's three) at blocks 4/8/16 and
//     budgets 1/3/8/16/40, tree greedy output identical to plain greedy on the GPU, with gemm_act=bf16x2 and with
//     the default route; each case prints "identical" or the first differing position, and a difference fails;
//   - cuda_trained_tree_greedy_identical: the trained pair (models/tiny-qwen35 + -dflash) on the 8 held-out prompts,
//     48 new tokens at block 8: tree greedy (budgets 4/16/32) identical to plain greedy, and emitted tokens/round
//     against the chain's (the CPU measured 3.837 at budget 32 vs 2.938 = 1.31x; issue 22 asks >= 1.3x), with the
//     host clock per round (launch-bound at this size: not the 27B's cost).
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/spec_rig.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/dflash_tree.h"

CUDA_RIG(0) // the backend only; g_rig.gemm_act_at_start is the default route (or the environment's)

typedef struct {
    const char *name, *target;
} tree_fx;

static const tree_fx k_fx[] = {
    {"qwen35_dense_tied_b8", "qwen35_dense_tied"},
    {"qwen3_next_moe_b4", "qwen3_next_moe"},
    {"qwen35_moe_b16", "qwen35_moe"},
};
#define N_FX (int)(sizeof k_fx / sizeof k_fx[0])

static void rig_close(spec_rig *r) {
    drafter_release(&r->d, gpu());
    model_release(&r->m, gpu());
    spec_rig_close(r);
}

static void greedy_identical(const char *gemm_act) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    const int budgets[] = {1, 3, 8, 16, 40}, blocks[] = {4, 8, 16};
    int diffs = 0, cases = 0;
    for (int f = 0; f < N_FX; f++)
        for (int b = 0; b < 3; b++) {
            spec_rig r;
            ASSERT(spec_rig_open(&r, gpu(), k_fx[f].target, k_fx[f].name, blocks[b], 0) == 0, "%s", fd_error_msg());
            const int n_new = r.fx.n_greedy;
            fd_engine plain;
            fd_engine_opts o = r.e.opt;
            ASSERT(engine_init(&plain, &r.m, gpu(), &o) == 0, "%s", fd_error_msg());
            int32_t *ref = calloc((size_t)n_new, sizeof *ref), *out = calloc((size_t)n_new, sizeof *out);
            ASSERT(engine_generate_greedy(&plain, r.fx.ids, r.fx.n_ids, 64, n_new, ref) == 0, "%s", fd_error_msg());
            for (int k = 0; k < 5; k++) {
                engine_reset(&r.e);
                dflash_reset(&r.s);
                memset(&r.s.st, 0, sizeof r.s.st);
                r.e.spec_verify_sel = 1;
                r.s.tree_budget = budgets[k];
                ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, n_new, NULL, out) == 0, "%s", fd_error_msg());
                int same = 0;
                while (same < n_new && out[same] == ref[same]) same++;
                char verdict[96];
                if (same == n_new)
                    snprintf(verdict, sizeof verdict, "identical");
                else
                    snprintf(verdict, sizeof verdict, "DIFFERS at token %d (tree %d, plain %d)", same, out[same],
                             ref[same]);
                const double rounds = (double)r.s.st.rounds;
                printf("    gemm_act=%-6s %-22s block %2d budget %2d: %s over %d tokens; %lld tree rounds, %.2f "
                       "emitted tokens/round, %.1f nodes/round\n",
                       gemm_act, k_fx[f].name, blocks[b], budgets[k], verdict, n_new, (long long)r.s.st.tree_rounds,
                       rounds ? (double)r.s.st.emitted / rounds : 0.0,
                       rounds ? (double)r.s.st.draft_tokens / rounds + 1 : 0.0);
                EXPECT(same == n_new, "gemm_act=%s %s block %d budget %d: tree differs from plain greedy at %d",
                       gemm_act, k_fx[f].name, blocks[b], budgets[k], same);
                EXPECT(r.s.st.tree_rounds == r.s.st.rounds && r.s.st.rounds >= 1, "no tree rounds ran");
                diffs += same != n_new;
                cases++;
            }
            free(ref);
            free(out);
            engine_free(&plain);
            rig_close(&r);
        }
    printf("    gemm_act=%s: %d of %d cases differ\n", gemm_act, diffs, cases);
}

TEST(cuda_tree_greedy_identical_on_fixtures) {
    gpu();
    char def[32];
    snprintf(def, sizeof def, "%s", g_rig.gemm_act_at_start);
    greedy_identical("bf16x2");
    greedy_identical(def);
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", def) == 0, "%s", fd_error_msg());
}

#define TARGET_DIR "models/tiny-qwen35"
#define DRAFT_DIR  "models/tiny-qwen35-dflash"

static int32_t *json_ids(json_t *list, int *n) {
    *n = (int)json_array_size(list);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(list, (size_t)i));
    return ids;
}

TEST(cuda_trained_tree_greedy_identical) {
    json_error_t err;
    json_t *prompts = json_load_file("tests/data/trained/val_prompts.json", 0, &err);
    ASSERT(json_is_array(prompts) && json_array_size(prompts) >= 1, "tests/data/trained/val_prompts.json: %s",
           err.text);
    fd_model m;
    fd_drafter d;
    ASSERT(model_load(TARGET_DIR, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, gpu());
    ASSERT(drafter_load(DRAFT_DIR, &m, &d) == 0, "%s", fd_error_msg());
    drafter_upload(&d, gpu());
    const int n_new = 48, budgets[] = {0, 4, 16, 32}; // 0: the chain
    enum { N_B = 4 };
    const int np = (int)json_array_size(prompts);
    int64_t rounds[N_B] = {0}, emitted[N_B] = {0}, nodes[N_B] = {0};
    double secs[N_B] = {0};
    int mismatches = 0;
    for (int i = 0; i < np; i++) {
        int n;
        int32_t *ids = json_ids(json_object_get(json_array_get(prompts, (size_t)i), "ids"), &n);
        fd_engine e;
        fd_engine_opts o;
        engine_default_opts(&o);
        o.capacity = n + n_new + 64;
        o.max_batch = 64;
        ASSERT(engine_init(&e, &m, gpu(), &o) == 0, "%s", fd_error_msg());
        int32_t plain[64], spec[64];
        ASSERT(engine_generate_greedy(&e, ids, n, 0, n_new, plain) == 0, "%s", fd_error_msg());
        for (int b = 0; b < N_B; b++) {
            fd_dflash s;
            engine_reset(&e);
            ASSERT(dflash_init(&s, &e, &d, 8) == 0, "%s", fd_error_msg());
            e.spec_verify_sel = budgets[b] > 0;
            s.tree_budget = budgets[b];
            gpu()->sync(gpu());
            const double t0 = fd_time_s();
            ASSERT(dflash_generate(&s, ids, n, 64, n_new, NULL, spec) == 0, "%s", fd_error_msg());
            gpu()->sync(gpu());
            secs[b] += fd_time_s() - t0;
            int same = 0;
            while (same < n_new && spec[same] == plain[same]) same++;
            if (same < n_new)
                printf("    prompt %d %s %d: DIFFERS from plain greedy at token %d\n", i,
                       budgets[b] ? "budget" : "chain", budgets[b], same);
            EXPECT(same == n_new, "prompt %d budget %d: speculative output differs from greedy at %d", i, budgets[b],
                   same);
            mismatches += same < n_new;
            rounds[b] += s.st.rounds;
            emitted[b] += s.st.emitted;
            nodes[b] += s.st.draft_tokens;
            dflash_free(&s);
        }
        free(ids);
        engine_free(&e);
    }
    const double chain = (double)emitted[0] / (double)rounds[0];
    for (int b = 0; b < N_B; b++) {
        const double tau = (double)emitted[b] / (double)rounds[b];
        char what[32];
        snprintf(what, sizeof what, budgets[b] ? "budget %d" : "chain", budgets[b]);
        printf("    %d prompts, block 8, %-9s: %.3f emitted tokens/round (%.2fx chain), %.1f draft nodes/round, "
               "%.2f ms/round (cuda, host clock)\n",
               np, what, tau, tau / chain, (double)nodes[b] / (double)rounds[b], 1e3 * secs[b] / (double)rounds[b]);
    }
    printf("    %d of %d generations differ from plain greedy\n", mismatches, np * N_B);
    EXPECT(mismatches == 0);
    const double tau_default = (double)emitted[3] / (double)rounds[3];
    EXPECT(budgets[3] == FD_TREE_BUDGET_DEFAULT && tau_default >= 1.3 * chain,
           "tree (budget %d) %.3f vs chain %.3f emitted tokens/round", budgets[3], tau_default, chain);
    drafter_release(&d, gpu());
    drafter_free(&d);
    model_release(&m, gpu());
    model_free(&m);
    json_decref(prompts);
}
