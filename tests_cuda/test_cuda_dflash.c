// DFlash speculative decoding on the CUDA backend (gemm_act=bf16x2): greedy output identical to HF's plain greedy
// continuation at several block sizes. Exercises what only the verify/draft path uses: per-token conv and GDN
// state slots, the non-causal drafter attention and copy_rows.
#include <stdlib.h>
#include <string.h>

#include "../tests/fixture.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "engine/dflash.h"

static fd_backend *gpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cuda_create(0);
    return be;
}

static const struct {
    const char *name, *target;
} k_drafts[] = {
    {"qwen35_dense_tied_b8", "qwen35_dense_tied"},
    {"qwen3_next_moe_b4", "qwen3_next_moe"},
    {"qwen35_moe_b16", "qwen35_moe"},
};

TEST(cuda_dflash_greedy_identical_at_block_sizes) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "bf16x2") == 0, "%s", fd_error_msg());
    const int blocks[] = {4, 8, 16};
    for (size_t i = 0; i < sizeof k_drafts / sizeof k_drafts[0]; i++)
        for (int b = 0; b < 3; b++) {
            fixture fx;
            fd_model m;
            fd_drafter d;
            fd_engine e;
            fd_dflash s;
            memset(&m, 0, sizeof m), memset(&d, 0, sizeof d), memset(&e, 0, sizeof e), memset(&s, 0, sizeof s);
            ASSERT(fixture_load(k_drafts[i].target, &fx) == 0, "%s", fd_error_msg());
            ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
            model_upload(&m, gpu());
            char *dir = fd_sprintf("tests/data/dflash/%s", k_drafts[i].name);
            ASSERT(drafter_load(dir, &m, &d) == 0, "%s", fd_error_msg());
            free(dir);
            drafter_upload(&d, gpu());
            fd_engine_opts o;
            engine_default_opts(&o);
            o.capacity = fx.n_ids + 64;
            o.max_batch = 64;
            ASSERT(engine_init(&e, &m, gpu(), &o) == 0, "%s", fd_error_msg());
            ASSERT(dflash_init(&s, &e, &d, blocks[b]) == 0, "%s", fd_error_msg());
            int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
            ASSERT(dflash_generate(&s, fx.ids, fx.n_ids, 64, fx.n_greedy, NULL, out) == 0, "%s", fd_error_msg());
            int same = 0;
            while (same < fx.n_greedy && out[same] == fx.greedy[same]) same++;
            printf("    %-22s block %2d: %d/%d greedy tokens identical, %lld rounds, %.2f accepted drafts/round\n",
                   k_drafts[i].name, blocks[b], same, fx.n_greedy, (long long)s.st.rounds,
                   s.st.rounds ? (double)s.st.accepted / (double)s.st.rounds : 0.0);
            EXPECT(same == fx.n_greedy, "%s block %d: differs from greedy at token %d", k_drafts[i].name, blocks[b],
                   same);
            free(out);
            dflash_free(&s);
            engine_free(&e);
            drafter_free(&d);
            model_free(&m);
            fixture_free(&fx);
        }
}

// Draft logits on the GPU against the z-lab reference (issue 5: rel-L2 <= 2e-2 on the GPU), both rounds, with the
// default GEMM route.
TEST(cuda_dflash_draft_logits_match_reference) {
    ASSERT(fd_cuda_set_route(gpu(), "gemm_act", "bf16") == 0, "%s", fd_error_msg());
    static const int commits[] = {3, 2, 5};
    for (size_t i = 0; i < sizeof k_drafts / sizeof k_drafts[0]; i++) {
        fixture fx;
        fd_model m;
        fd_drafter d;
        fd_engine e;
        fd_dflash s;
        memset(&m, 0, sizeof m), memset(&d, 0, sizeof d), memset(&e, 0, sizeof e), memset(&s, 0, sizeof s);
        ASSERT(fixture_load(k_drafts[i].target, &fx) == 0, "%s", fd_error_msg());
        ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
        model_upload(&m, gpu());
        char *dir = fd_sprintf("tests/data/dflash/%s", k_drafts[i].name);
        ASSERT(drafter_load(dir, &m, &d) == 0, "%s", fd_error_msg());
        drafter_upload(&d, gpu());
        fd_engine_opts o;
        engine_default_opts(&o);
        o.capacity = fx.n_ids + 64;
        o.max_batch = 64;
        ASSERT(engine_init(&e, &m, gpu(), &o) == 0 && dflash_init(&s, &e, &d, 0) == 0, "%s", fd_error_msg());
        const int B = s.B, V = m.cfg.vocab_size;
        float *got = malloc(sizeof(float) * (B - 1) * V);
        int32_t anchor, draft[FD_SPEC_MAX_BLOCK];
        for (int round = 0; round < 2; round++) {
            if (round == 0) {
                ASSERT(dflash_prefill(&s, fx.ids, fx.n_ids, 64, NULL, &anchor) == 0, "%s", fd_error_msg());
            } else { // the target consumes HF's greedy g0..g(k-1); their taps extend the context; anchor g(k)
                ASSERT(engine_forward(&e, fx.greedy, commits[i], NULL, 0) == 0, "%s", fd_error_msg());
                dflash_context_append(&s, commits[i]);
                anchor = fx.greedy[commits[i]];
            }
            ASSERT(dflash_draft(&s, anchor, draft, got) == 0, "%s", fd_error_msg());
            char *path = fd_sprintf("%s/%s", dir, round ? "draft_logits2.f32" : "draft_logits.f32");
            size_t len = 0;
            float *want = (float *)fd_read_file(path, &len);
            ASSERT(want && len == sizeof(float) * (B - 1) * V, "%s", path);
            const double err = test_rel_l2(got, want, (size_t)(B - 1) * V);
            printf("    %-22s round %d: draft logits rel-L2 vs the z-lab reference %.2e\n", k_drafts[i].name, round + 1,
                   err);
            EXPECT(err <= 2e-2, "%s round %d: %.3g", k_drafts[i].name, round + 1, err);
            free(want);
            free(path);
        }
        free(got);
        free(dir);
        dflash_free(&s);
        engine_free(&e);
        drafter_release(&d, gpu());
        drafter_free(&d);
        model_release(&m, gpu());
        model_free(&m);
        fixture_free(&fx);
    }
}
