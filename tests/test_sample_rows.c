// The sample_rows backend op on the CPU and the engine's backend-sampling entries: the ids must be bitwise those of
// the host sampler (sampler_sample) for the same seed, with the generator's stream unchanged.
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "engine/engine.h"
#include "engine/sampling.h"
#include "fixture.h"
#include "model/model.h"
#include "test.h"

static const float k_temps[] = {0.0f, 0.7f, 1.0f, 1.5f};
static const int k_topk[] = {0, 1, 20, 5000};
static const float k_topp[] = {1.0f, 0.9f, 0.5f};

// Logits rows of three kinds: uniform, one peaked token, and integer-quantised (many exact ties).
static void fill_row(float *x, int V, int kind, uint64_t *seed) {
    test_fill_uniform(x, (size_t)V, -8.0f, 8.0f, seed);
    if (kind == 1) x[V / 3] += 12.0f;
    if (kind == 2)
        for (int i = 0; i < V; i++) x[i] = (float)(int)(x[i] * 0.5f);
}

TEST(sample_rows_cpu_matches_sampler) {
    fd_backend *be = fd_backend_cpu_create(1);
    const int Vs[] = {7, 1000, 3001};
    uint64_t seed = 99;
    int checked = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        float *logits = malloc(sizeof(float) * (size_t)V * 3), *scratch = malloc(sizeof(float) * (size_t)V);
        for (int kind = 0; kind < 3; kind++) fill_row(logits + (size_t)kind * V, V, kind, &seed);
        for (int t = 0; t < 4; t++)
            for (int k = 0; k < 4; k++)
                for (int p = 0; p < 3; p++)
                    for (int kind = 0; kind < 3; kind++)
                        for (uint64_t s = 1; s <= 6; s++) {
                            const float *row = logits + (size_t)kind * V;
                            fd_sampler host, dev;
                            sampler_init(&host, k_temps[t], k_topk[k], k_topp[p], s * 7919 + (uint64_t)kind);
                            dev = host;
                            const int32_t want = sampler_sample(&host, row, V, scratch);
                            // the engine's recipe: params from the sampler, one uniform unless greedy
                            const fd_sample_params prm = sampler_params(&dev);
                            const double u = sampler_is_greedy(&dev) ? 0 : sampler_uniform(&dev);
                            int32_t got = -1;
                            be->sample_rows(be, &got, row, 1, V, &prm, &u);
                            EXPECT(got == want, "V %d T %g k %d p %g kind %d seed %llu: op %d, sampler %d", V,
                                   k_temps[t], k_topk[k], k_topp[p], kind, (unsigned long long)s, got, want);
                            EXPECT(host.state == dev.state, "generator streams diverged");
                            checked++;
                        }
        // several rows with their own params in one call
        fd_sample_params prm[3] = {{0.7f, 20, 0.9f}, {0.0f, 0, 1.0f}, {1.5f, 0, 0.5f}};
        double u[3] = {0.25, 0.0, 0.75};
        int32_t got[3];
        be->sample_rows(be, got, logits, 3, V, prm, u);
        for (int r = 0; r < 3; r++)
            EXPECT(got[r] == sample_row(&prm[r], logits + (size_t)r * V, V, u[r], scratch), "multi-row %d", r);
        free(logits);
        free(scratch);
    }
    printf("    %d single-row draws identical to sampler_sample\n", checked);
    be->destroy(be);
}

// engine_generate with a sampler (sampled on the backend) vs the host path it replaced (logits to the host,
// sampler_sample), on a reference fixture; and engine_decode_batch_sample vs engine_decode_batch + sampler_sample.
TEST(engine_backend_sampling_matches_host_path) {
    fd_backend *be = fd_backend_cpu_create(0);
    fixture fx;
    ASSERT(fixture_load(k_fixture_names[0], &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, be);
    const int V = m.cfg.vocab_size, n_new = 12;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = fx.n_ids + n_new + 1;
    o.max_batch = 64;
    fd_engine e[2];
    ASSERT(engine_init(&e[0], &m, be, &o) == 0 && engine_init(&e[1], &m, be, &o) == 0, "%s", fd_error_msg());
    float *logits = malloc(sizeof(float) * (size_t)V * 2), *scratch = malloc(sizeof(float) * (size_t)V);
    const fd_sample_params cases[] = {{0.8f, 20, 0.9f}, {1.0f, 0, 1.0f}, {0.0f, 0, 1.0f}};
    for (int c = 0; c < 3; c++) {
        int32_t want[12], got[12];
        fd_sampler hs, ds;
        sampler_init(&hs, cases[c].temperature, cases[c].top_k, cases[c].top_p, 1234 + (uint64_t)c);
        ds = hs;
        engine_reset(&e[0]);
        ASSERT(engine_prefill(&e[0], fx.ids, fx.n_ids, 5, logits, 0) == 0, "%s", fd_error_msg());
        for (int i = 0; i < n_new; i++) {
            want[i] = sampler_sample(&hs, logits, V, scratch);
            if (i + 1 < n_new) ASSERT(engine_forward(&e[0], &want[i], 1, logits, 0) == 0, "%s", fd_error_msg());
        }
        engine_reset(&e[0]);
        ASSERT(engine_generate(&e[0], fx.ids, fx.n_ids, 5, n_new, &ds, got) == 0, "%s", fd_error_msg());
        for (int i = 0; i < n_new; i++) EXPECT(got[i] == want[i], "case %d token %d: %d vs %d", c, i, got[i], want[i]);
        EXPECT(hs.state == ds.state, "case %d: generator streams diverged", c);
        if (cases[c].temperature == 0 && fx.n_greedy >= n_new)
            for (int i = 0; i < n_new; i++) EXPECT(got[i] == fx.greedy[i], "greedy token %d vs HF", i);
    }
    // batched decode: two sequences, each with its own sampler; host path first, then the backend path replayed
    fd_sampler init[2];
    sampler_init(&init[0], 0.7f, 20, 0.95f, 5);
    sampler_init(&init[1], 1.2f, 0, 1.0f, 6);
    fd_engine *es[2] = {&e[0], &e[1]};
    enum { STEPS = 4 };
    int32_t ids[2][STEPS + 1];
    for (int pass = 0; pass < 2; pass++) {
        fd_sampler smp[2] = {init[0], init[1]};
        fd_sampler *sp[2] = {&smp[0], &smp[1]};
        int32_t next[2];
        for (int s = 0; s < 2; s++) {
            engine_reset(&e[s]);
            ASSERT(engine_prefill(&e[s], fx.ids, fx.n_ids - s, 64, logits, 0) == 0, "%s", fd_error_msg());
            next[s] = engine_argmax(logits, V);
        }
        for (int step = 0; step < STEPS; step++) {
            int32_t got[2];
            if (pass == 0) {
                ASSERT(engine_decode_batch(es, next, 2, logits) == 0, "%s", fd_error_msg());
                for (int s = 0; s < 2; s++) got[s] = sampler_sample(sp[s], logits + (size_t)s * V, V, scratch);
            } else {
                ASSERT(engine_decode_batch_sample(es, next, 2, sp, got) == 0, "%s", fd_error_msg());
            }
            for (int s = 0; s < 2; s++) {
                if (pass == 0) ids[s][step] = got[s];
                else EXPECT(got[s] == ids[s][step], "batch seq %d step %d: %d vs host %d", s, step, got[s], ids[s][step]);
                next[s] = got[s];
            }
        }
    }
    free(logits);
    free(scratch);
    engine_free(&e[0]);
    engine_free(&e[1]);
    model_free(&m);
    fixture_free(&fx);
    be->destroy(be);
}
