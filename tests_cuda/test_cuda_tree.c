// Tree verify of DFlash drafts (route spec_verify=tree) end to end on the CUDA backend:
//   - cuda_tree_greedy_identical_on_fixtures: on every DFlash fixture (the CPU tests' three DFlash and two DFlash2) at blocks 4/8/16 and
//     budgets 1/3/8/16/40, tree greedy output identical to plain greedy on the GPU, with gemm_act=bf16x2 and with
//     the default route; each case prints "identical" or the first differing position, and a difference fails
//     unless plain greedy's own logits there make it a near tie (below). Why a tie can turn on the GPU and not on
//     the CPU: a tree node's ancestors sit at other cache positions than its path's tokens would in a chain, so the
//     attention kernels meet them in other key tiles: the online softmax rescales in another order (fp32) and the
//     split-K kernel rounds some weights to bf16 against another running max (~1e-3 of a logit at most). The
//     chain's verify is bitwise its decode by construction; the tree's cannot be without giving up the K/V tile
//     that all the nodes share;
//   - cuda_trained_tree_greedy_identical: the trained pair (models/tiny-qwen35 + -dflash) on the 8 held-out prompts,
//     48 new tokens at block 8: tree greedy (budgets 4/16/32) identical to plain greedy (or parting at a near tie,
//     as above), and emitted tokens/round against the chain's (the CPU measured 3.837 at budget 32 vs 2.938 =
//     1.31x; issue 22 asks >= 1.3x), with the host clock per round (launch-bound at this size: not the 27B's cost).
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
    {"qwen35_dense_tied_d2_b8", "qwen35_dense_tied"}, // DFlash2: children from the selector's candidates
    {"qwen35_moe_d2_b16", "qwen35_moe"},
};
#define N_FX (int)(sizeof k_fx / sizeof k_fx[0])

// Where the tree's output leaves plain greedy's (ref) at new token s, plain greedy's own pick there must beat the
// tree's token by a near tie: the bound TOL_ATTN (cuda_rig_greedy_parts_at_near_tie), the attention rounding above.
static void greedy_identical(const char *gemm_act) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    const int budgets[] = {1, 3, 8, 16, 40}, blocks[] = {4, 8, 16};
    int diffs = 0, ties = 0, cases = 0;
    for (int f = 0; f < N_FX; f++)
        for (int b = 0; b < 3; b++) {
            spec_rig r;
            ASSERT(spec_rig_open(&r, gpu(), k_fx[f].target, k_fx[f].name, blocks[b], 0) == 0, "%s", fd_error_msg());
            const int n_new = r.fx.n_greedy;
            fd_engine plain;
            int32_t *ref = calloc((size_t)n_new, sizeof *ref), *out = calloc((size_t)n_new, sizeof *out);
            ASSERT(spec_rig_plain_greedy(&r, gpu(), &plain, ref) == 0, "%s", fd_error_msg());
            for (int k = 0; k < 5; k++) {
                engine_reset(&r.e);
                dflash_reset(&r.s);
                memset(&r.s.st, 0, sizeof r.s.st);
                r.e.spec_verify_sel = 1;
                r.s.tree_budget = budgets[k];
                ASSERT(dflash_generate(&r.s, r.fx.ids, r.fx.n_ids, 64, n_new, NULL, out) == 0, "%s", fd_error_msg());
                int same = 0, tie = 0;
                while (same < n_new && out[same] == ref[same]) same++;
                char verdict[160];
                if (same == n_new) {
                    snprintf(verdict, sizeof verdict, "identical");
                } else {
                    double gap, bound;
                    tie = cuda_rig_greedy_parts_at_near_tie(gpu(), &r.m, &r.e.opt, r.fx.ids, r.fx.n_ids, ref, same,
                                                            ref[same], out[same], TOL_ATTN, &gap, &bound);
                    snprintf(verdict, sizeof verdict,
                             "DIFFERS at token %d (tree %d, plain %d): plain's logit gap %.4f, "
                             "near-tie bound %.4f%s",
                             same, out[same], ref[same], gap, bound, tie ? ", a near tie" : "");
                }
                const double rounds = (double)r.s.st.rounds;
                printf("    gemm_act=%-6s %-22s block %2d budget %2d: %s over %d tokens; %lld tree rounds, %.2f "
                       "emitted tokens/round, %.1f nodes/round\n",
                       gemm_act, k_fx[f].name, blocks[b], budgets[k], verdict, n_new, (long long)r.s.st.tree_rounds,
                       rounds ? (double)r.s.st.emitted / rounds : 0.0,
                       rounds ? (double)r.s.st.draft_tokens / rounds + 1 : 0.0);
                EXPECT(same == n_new || tie, "gemm_act=%s %s block %d budget %d: tree differs from plain greedy at %d",
                       gemm_act, k_fx[f].name, blocks[b], budgets[k], same);
                EXPECT(r.s.st.tree_rounds == r.s.st.rounds && r.s.st.rounds >= 1, "no tree rounds ran");
                diffs += same != n_new && !tie;
                ties += tie;
                cases++;
            }
            free(ref);
            free(out);
            engine_free(&plain);
            spec_rig_release_close(&r, gpu());
        }
    printf("    gemm_act=%s: %d of %d cases differ (%d more part at a near tie)\n", gemm_act, diffs, cases, ties);
}

TEST(cuda_tree_greedy_identical_on_fixtures) {
    gpu();
    char def[32];
    snprintf(def, sizeof def, "%s", g_rig.gemm_act_at_start);
    greedy_identical("bf16x2");
    greedy_identical(def);
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", def) == 0, "%s", fd_error_msg());
}

TEST(cuda_trained_tree_greedy_identical) {
    json_t *prompts = held_out_prompts();
    ASSERT(prompts, "%s", fd_error_msg());
    fd_model m;
    fd_drafter d;
    ASSERT(trained_pair_load(gpu(), NULL, &m, &d) == 0, "%s", fd_error_msg());
    const int n_new = 48, budgets[] = {0, 4, 16, 32}; // 0: the chain
    enum { N_B = 4 };
    const int np = (int)json_array_size(prompts);
    int64_t rounds[N_B] = {0}, emitted[N_B] = {0}, nodes[N_B] = {0};
    double secs[N_B] = {0};
    int mismatches = 0, ties = 0;
    for (int i = 0; i < np; i++) {
        int n;
        int32_t *ids = held_out_ids(prompts, (size_t)i, &n);
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
            int same = 0, tie = 0;
            while (same < n_new && spec[same] == plain[same]) same++;
            if (same < n_new) {
                double gap = 0, bound = 0;
                // the chain's verify is bitwise its decode: only a tree may part, and only at a near tie
                tie =
                    budgets[b] > 0 && cuda_rig_greedy_parts_at_near_tie(gpu(), &m, &o, ids, n, plain, same, plain[same],
                                                                        spec[same], TOL_ATTN, &gap, &bound);
                printf("    prompt %d %s %d: DIFFERS from plain greedy at token %d (logit gap %.4f, near-tie bound "
                       "%.4f%s)\n",
                       i, budgets[b] ? "budget" : "chain", budgets[b], same, gap, bound, tie ? ", a near tie" : "");
            }
            EXPECT(same == n_new || tie, "prompt %d budget %d: speculative output differs from greedy at %d", i,
                   budgets[b], same);
            mismatches += same < n_new && !tie;
            ties += tie;
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
    printf("    %d of %d generations differ from plain greedy (%d more part at a near tie)\n", mismatches, np * N_B,
           ties);
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
