// Speculative sampling at T > 0 is lossless: the token that follows the anchor in a DFlash round must be
// distributed exactly as the target's sampling distribution p (same temperature / top-k / top-p). Checked with
// a chi-square test over many rounds from the same state (fixed seeds, so the test is deterministic), with both
// the accept path and the resample path exercised. Also unit checks of the sampler itself.
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"
#include "fixture.h"
#include "test.h"


static void check_lossless(float T, int top_k, float top_p, int block, int trials) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_backend *be = fd_backend_cpu_create(0);
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, be);
    fd_drafter d;
    ASSERT(drafter_load("tests/data/dflash/qwen35_dense_tied_b8", &m, &d) == 0, "%s", fd_error_msg());
    drafter_upload(&d, be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = 64;
    o.max_batch = 32;
    fd_engine e, ref;
    ASSERT(engine_init(&e, &m, be, &o) == 0 && engine_init(&ref, &m, be, &o) == 0);
    fd_dflash s;
    ASSERT(dflash_init(&s, &e, &d, block) == 0, "%s", fd_error_msg());
    const int n = 24, V = m.cfg.vocab_size;
    fd_sampler smp;
    sampler_init(&smp, T, top_k, top_p, 12345);
    // p: the target's distribution for the token after [prompt, anchor]
    int32_t anchor;
    ASSERT(dflash_prefill(&s, fx.ids, n, 32, NULL, &anchor) == 0);
    int32_t *seq = malloc(sizeof(int32_t) * (n + 1));
    memcpy(seq, fx.ids, sizeof(int32_t) * n);
    seq[n] = anchor;
    float *logits = malloc(sizeof(float) * V), *p = malloc(sizeof(float) * V);
    ASSERT(engine_prefill(&ref, seq, n + 1, 32, logits, 0) == 0);
    sampler_probs(&smp, logits, V, p);
    int *counts = calloc((size_t)V, sizeof(int)), accepted_rounds = 0;
    for (int t = 0; t < trials; t++) {
        engine_reset(&e);
        dflash_reset(&s);
        int32_t a, emitted[FD_SPEC_MAX_BLOCK];
        int got;
        ASSERT(dflash_prefill(&s, fx.ids, n, 32, NULL, &a) == 0 && a == anchor);
        ASSERT(dflash_round(&s, anchor, block, &smp, 1, emitted, &got) == 0, "%s", fd_error_msg());
        counts[emitted[0]]++;
        accepted_rounds += got > 1;
    }
    int dof;
    double stat = test_chi2(counts, p, V, trials, &dof);
    printf("    T=%.1f top_k=%d top_p=%.2f block %d: chi2 %.1f (dof %d, 0.1%% crit %.1f), rounds with an accepted "
           "draft %d of %d\n",
           (double)T, top_k, (double)top_p, block, stat, dof, test_chi2_crit(dof), accepted_rounds, trials);
    EXPECT(dof >= 3, "too few bins for a meaningful test");
    EXPECT(stat < test_chi2_crit(dof), "speculative sampling is not distributed like the target: chi2 %.1f", stat);
    // This random drafter almost never agrees with the target (it favours the mask token), so this end-to-end
    // run mostly covers the resample path; spec_sampling_accept_math covers acceptance.
    (void)accepted_rounds;
    free(counts);
    free(seq);
    free(logits);
    free(p);
    dflash_free(&s);
    engine_free(&e);
    engine_free(&ref);
    drafter_free(&d);
    model_free(&m);
    be->destroy(be);
    fixture_free(&fx);
}

TEST(spec_sampling_is_lossless) {
    check_lossless(1.5f, 0, 1.0f, 4, 800);
    check_lossless(2.0f, 40, 0.9f, 4, 800);
}

// The acceptance math on synthetic distributions that overlap: the first emitted token must follow p0, and
// the second (in rounds that accepted the first draft) must follow p1.
TEST(spec_sampling_accept_math) {
    enum { V = 8, L = 3, N = 200000 };
    float tl[L * V], q[(L - 1) * V], p0[V], p1[V], scratch[V];
    uint64_t seed = 99;
    test_fill_uniform(tl, L * V, -1.5f, 1.5f, &seed);
    fd_sampler smp;
    sampler_init(&smp, 1.0f, 0, 1.0f, 4242);
    sampler_probs(&smp, tl, V, p0);
    sampler_probs(&smp, tl + V, V, p1);
    for (int i = 0; i < L - 1; i++) { // q: a blurred, shifted version of p, so it overlaps but differs
        float z[V];
        test_fill_uniform(z, V, -1.0f, 1.0f, &seed);
        for (int v = 0; v < V; v++) z[v] = 0.5f * tl[i * V + v] + z[v];
        sampler_probs(&smp, z, V, q + i * V);
    }
    int first[V] = {0}, second[V] = {0}, n_second = 0, acc_hist[L] = {0};
    for (int t = 0; t < N; t++) {
        int32_t block[L] = {0}, next;
        for (int i = 0; i < L - 1; i++) block[i + 1] = sampler_draw(&smp, q + i * V, V);
        const int acc = spec_accept_sampled(&smp, block, L, q, tl, V, scratch, &next);
        acc_hist[acc]++;
        first[acc >= 1 ? block[1] : next]++;
        if (acc >= 1) {
            second[acc >= 2 ? block[2] : next]++;
            n_second++;
        }
    }
    int d1, d2;
    double c1 = test_chi2(first, p0, V, N, &d1), c2 = test_chi2(second, p1, V, n_second, &d2);
    printf("    accepted 0/1/2: %d/%d/%d; first token chi2 %.1f (dof %d), second %.1f (dof %d)\n", acc_hist[0],
           acc_hist[1], acc_hist[2], c1, d1, c2, d2);
    EXPECT(c1 < test_chi2_crit(d1) && c2 < test_chi2_crit(d2));
    EXPECT(acc_hist[0] > N / 20 && acc_hist[2] > N / 20, "both paths must be exercised");
}

TEST(sampler_filters_and_draws) {
    const int V = 6;
    float logits[6] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 3.0f}, p[6];
    fd_sampler s;
    sampler_init(&s, 1.0f, 2, 1.0f, 1);
    sampler_probs(&s, logits, V, p);
    EXPECT(p[5] > 0 && p[0] > 0 && p[1] == 0 && p[2] == 0 && p[3] == 0 && p[4] == 0);
    EXPECT(fabsf(p[5] + p[0] - 1) < 1e-6f && fabsf(p[5] / p[0] - expf(1.0f)) < 1e-4f);
    sampler_init(&s, 1.0f, 0, 0.5f, 1); // the top token alone has e^3/sum ~ 0.63 >= 0.5
    sampler_probs(&s, logits, V, p);
    EXPECT(p[5] == 1.0f);
    sampler_init(&s, 0.0f, 0, 1.0f, 1); // greedy
    EXPECT(sampler_sample(&s, logits, V, p) == 5);
    sampler_init(&s, 1.0f, 0, 1.0f, 7);
    int counts[6] = {0};
    float q[6];
    sampler_probs(&s, logits, V, q);
    for (int i = 0; i < 60000; i++) counts[sampler_draw(&s, q, V)]++;
    int dof;
    EXPECT(test_chi2(counts, q, V, 60000, &dof) < test_chi2_crit(dof));
}
