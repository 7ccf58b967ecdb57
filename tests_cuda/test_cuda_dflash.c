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
