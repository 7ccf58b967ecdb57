// Whole-model checks of the CUDA backend against HF transformers fp32 on every committed fixture: logits at every
// prompt position (rel-L2 <= 2e-2, DESIGN.md §7), greedy continuation identical, for both GDN prefill routes
// and a prefill budget of 7 tokens (chunk boundaries inside GDN chunks and attention tiles), and with the GDN chunk
// kernels in bf16 (cuda route gdn_chunk=bf16).
// Asserted with the default route (gemm_act=auto: every fixture GEMM has k <= 256, so it runs bf16x2) and with
// gemm_act=bf16x2 (activations enter the bf16 GEMMs at ~fp32 accuracy). With gemm_act=bf16 (activations rounded
// to bf16 at every GEMM, what auto does on real geometries) the numbers are printed and only a loose bound asserted:
// on qwen35_dense_tied (wide residual projections, tied embeddings) bf16 rounding alone moves the logits by ~3e-2
// and flips a greedy token (run 1, docs/perf-notes.md; HF's own bf16 is 4.7e-2 there). That is a property of the
// route, reported, not hidden.
#include <stdlib.h>
#include <string.h>

#include "../tests/fixture.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/engine.h"

CUDA_RIG(0) // the backend only; g_rig.gemm_act_at_start is the default route (or the environment's)

typedef struct {
    fd_model m;
    fd_engine e;
} loaded;

static int open_model(loaded *L, const char *dir, int budget, fd_gdn_route route, int64_t cap) {
    memset(L, 0, sizeof *L);
    if (model_load(dir, &L->m)) return -1;
    model_upload(&L->m, gpu());
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = budget;
    o.capacity = cap;
    o.gdn_prefill = route;
    return engine_init(&L->e, &L->m, gpu(), &o);
}

static void close_model(loaded *L) {
    engine_free(&L->e);
    model_free(&L->m); // device copies of the weights are not freed: backend.h has no weight-free entry yet
}

static void logits_vs_hf(const char *gemm_act, double tol, double worst_tol) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        for (int r = 0; r < 2; r++) {
            loaded L;
            ASSERT(open_model(&L, fx.dir, fx.n_ids, (fd_gdn_route)r, fx.n_ids + 1) == 0, "%s", fd_error_msg());
            size_t n = (size_t)fx.n_ids * fx.vocab;
            float *lg = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) lg[i] = NAN;
            ASSERT(engine_prefill(&L.e, fx.ids, fx.n_ids, 0, lg, 1) == 0, "%s", fd_error_msg());
            double err = test_rel_l2(lg, fx.logits, n), worst = 0;
            int argmax_same = 0;
            for (int t = 0; t < fx.n_ids; t++) {
                const float *a = lg + (size_t)t * fx.vocab, *b = fx.logits + (size_t)t * fx.vocab;
                double e = test_rel_l2(a, b, (size_t)fx.vocab);
                if (e > worst) worst = e;
                argmax_same += engine_argmax(a, fx.vocab) == engine_argmax(b, fx.vocab);
            }
            printf("    %-20s %-7s gemm_act=%-6s logits rel-L2 %.2e (worst position %.2e), argmax equal at %d/%d\n",
                   k_all_fixture_names[f], r ? "serial" : "chunked", gemm_act, err, worst, argmax_same, fx.n_ids);
            // The FP8 fixtures' k = 384 GEMMs (down_proj, the qwen3_next dense layer) run with bf16 activations
            // and a bf16-rounded dequantized weight under gemm_act=auto (k > 256), as published geometries do:
            // their single positions get the bf16 bound (H200, session 6: worst position 1.3e-2 / 2.1e-2 / 2.5e-3,
            // whole-prompt rel-L2 <= 4.6e-3), the whole prompt keeps the tight one.
            const double wt = !strncmp(k_all_fixture_names[f], "fp8_", 4) && worst_tol < TOL_MODEL_BF16_ACT
                                  ? TOL_MODEL_BF16_ACT
                                  : worst_tol;
            EXPECT(err <= tol && worst <= wt, "%s gemm_act=%s: logits rel-L2 %.3g, worst row %.3g",
                   k_all_fixture_names[f], gemm_act, err, worst);
            free(lg);
            close_model(&L);
        }
        fixture_free(&fx);
    }
}

TEST(cuda_models_logits_match_hf) {
    gpu();
    logits_vs_hf(g_rig.gemm_act_at_start, TOL_MODEL, TOL_MODEL);
    logits_vs_hf("bf16x2", TOL_MODEL, TOL_MODEL);
}

// Report of the default route (see the file comment): a loose bound on the whole, none per position.
TEST(cuda_models_logits_bf16_act) {
    logits_vs_hf("bf16", TOL_MODEL_BF16_ACT, INFINITY);
}

// exempt: a fixture whose greedy is printed, not required (NULL: none)
static void greedy_vs_hf(const char *gemm_act, const char *exempt) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", gemm_act) == 0, "%s", fd_error_msg());
    const int budgets[] = {0, 7};
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        for (int r = 0; r < 2; r++)
            for (int b = 0; b < 2; b++) {
                loaded L;
                int budget = budgets[b] ? budgets[b] : fx.n_ids;
                ASSERT(open_model(&L, fx.dir, budget, (fd_gdn_route)r, fx.n_ids + fx.n_greedy + 1) == 0, "%s",
                       fd_error_msg());
                int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
                ASSERT(engine_generate_greedy(&L.e, fx.ids, fx.n_ids, budget, fx.n_greedy, out) == 0, "%s",
                       fd_error_msg());
                int first_diff = -1;
                for (int i = 0; i < fx.n_greedy && first_diff < 0; i++)
                    if (out[i] != fx.greedy[i]) first_diff = i;
                printf("    %-20s %-7s gemm_act=%-6s budget %3d: greedy %s (%d tokens)\n", k_all_fixture_names[f],
                       r ? "serial" : "chunked", gemm_act, budget, first_diff < 0 ? "identical" : "DIFFERS",
                       fx.n_greedy);
                const int required = !exempt || strcmp(exempt, k_all_fixture_names[f]);
                EXPECT(first_diff < 0 || !required,
                       "%s gemm_act=%s budget %d route %s: greedy differs from HF at new token %d (%d vs %d)",
                       k_all_fixture_names[f], gemm_act, budget, r ? "serial" : "chunked", first_diff,
                       first_diff >= 0 ? out[first_diff] : 0, first_diff >= 0 ? fx.greedy[first_diff] : 0);
                free(out);
                close_model(&L);
            }
        fixture_free(&fx);
    }
}

TEST(cuda_models_greedy_matches_hf) {
    gpu();
    greedy_vs_hf(g_rig.gemm_act_at_start, NULL);
    greedy_vs_hf("bf16x2", NULL);
}

// The same fixtures with the chunked GDN route on its bf16 kernel set (cuda route gdn_chunk=bf16) and GEMM
// activations at ~fp32 (bf16x2), so the GDN rounding is the only bf16 step. Its bound is HF's own bf16 noise on
// these fixtures (TOL_MODEL_BF16_ACT on the whole prompt, none per position), not the fp32 kernels' TOL_MODEL:
// measured on the H200 (session 8) whole-prompt rel-L2 2.7e-3 .. 1.4e-2, and 4.4e-2 on qwen35_dense_tied, whose
// worst position reaches 0.38 and whose greedy parts from HF at token 44 (it is the fixture that also flips under
// bf16 activations); every other fixture's greedy is identical and must stay so. The route is not the default.
TEST(cuda_models_gdn_chunk_bf16) {
    ASSERT(fd_cuda_set_route(gpu(), "gdn_chunk", "bf16") == 0, "%s", fd_error_msg());
    printf("    gdn_chunk=bf16:\n");
    logits_vs_hf("bf16x2", TOL_MODEL_BF16_ACT, INFINITY);
    greedy_vs_hf("bf16x2", "qwen35_dense_tied");
    ASSERT(fd_cuda_set_route(gpu(), "gdn_chunk", "tf32x3") == 0, "%s", fd_error_msg());
}
