// Sampling over vocabulary slices without a gather (engine/tp_sample.h) on CPU backends: the ids must be
// sample_row's over the whole row for the same uniforms, at 2, 3 (uneven slices) and 4 ranks, with top-k only,
// top-p only, both and neither, temperatures 0 .. 1.5, over random rows (flat, peaked, many exact ties) and the
// fixtures' HF logits; and rows whose candidates settle them gather nothing to the host.
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base/sample_math.h"
#include "engine/tp_sample.h"
#include "fixture.h"
#include "test.h"

static const float k_temps[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f};
static const int k_topk[] = {0, 1, 20, 40, 300, 5000};
static const float k_topp[] = {1.0f, 0.95f, 0.9f, 0.5f};
#define N_PARAMS (5 * 6 * 4)

static fd_sample_params params_of(int j) {
    return (fd_sample_params){k_temps[j % 5], k_topk[(j / 5) % 6], k_topp[j / 30]};
}

// `rows` logits rows [rows, V] split over tp CPU backends (slice r: [r V / tp + skew, ...), skew making the slices
// uneven), every row sampled with params[i] at uniforms[i] by tp_sample_rows and by sample_row; the number of rows
// whose ids differ.
static int compare_rows(fd_backend **bes, int tp, const float *logits, int rows, int V, int skew,
                        const fd_sample_params *params, const double *uniforms) {
    tp_slice sl[8] = {0};
    for (int r = 0; r < tp; r++) {
        const int b = r ? (int)((int64_t)r * V / tp) + skew : 0, e = r + 1 < tp ? (int)((int64_t)(r + 1) * V / tp) + skew : V;
        float *dev = bes[r]->alloc(bes[r], sizeof(float) * (size_t)rows * (e - b));
        for (int i = 0; i < rows; i++)
            bes[r]->to_device(bes[r], dev + (size_t)i * (e - b), logits + (size_t)i * V + b, sizeof(float) * (e - b));
        sl[r] = (tp_slice){bes[r], dev, b, e};
    }
    int32_t *got = malloc(sizeof(int32_t) * rows);
    float *scratch = malloc(sizeof(float) * V);
    tp_sample_rows(sl, tp, rows, V, params, uniforms, got);
    int differ = 0;
    for (int i = 0; i < rows; i++) {
        const int32_t want = sample_row(&params[i], logits + (size_t)i * V, V, uniforms[i], scratch);
        if (got[i] != want && differ++ < 5)
            fprintf(stderr, "      tp %d V %d row %d (T %.2f k %d p %.2f u %.4f): %d, sample_row %d\n", tp, V, i,
                    params[i].temperature, params[i].top_k, params[i].top_p, uniforms[i], got[i], want);
    }
    for (int r = 0; r < tp; r++) bes[r]->free(bes[r], (void *)sl[r].logits_dev);
    free(got);
    free(scratch);
    return differ;
}

// Random rows of four kinds: flat, one peaked token, integer-quantised (many exact ties), and an LLM-like spread
// (a few large logits over a wide low tail).
static void fill_row(float *x, int V, int kind, uint64_t *seed) {
    test_fill_uniform(x, (size_t)V, -8.0f, 8.0f, seed);
    if (kind == 1) x[V / 3] += 12.0f;
    if (kind == 2)
        for (int i = 0; i < V; i++) x[i] = (float)(int)(x[i] * 0.5f);
    if (kind == 3)
        for (int i = 0; i < V; i++) x[i] = x[i] * 1.5f + (i % 97 == 5 ? 14.0f : 0.0f);
}

TEST(tp_sample_random_rows_match_sample_row) {
    fd_backend *bes[4];
    for (int r = 0; r < 4; r++) bes[r] = fd_backend_cpu_create(1);
    const int Vs[] = {7, 1000, 3001};
    const int tps[] = {2, 3, 4};
    uint64_t seed = 7;
    int checked = 0, differ = 0;
    const int rows = N_PARAMS;
    fd_sample_params params[N_PARAMS];
    double uniforms[N_PARAMS];
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        float *logits = malloc(sizeof(float) * (size_t)V * rows);
        for (int kind = 0; kind < 4; kind++)
            for (int rep = 0; rep < 3; rep++) {
                for (int i = 0; i < rows; i++) {
                    fill_row(logits + (size_t)i * V, V, kind, &seed);
                    params[i] = params_of(i);
                    float u;
                    test_fill_uniform(&u, 1, 0, 1, &seed);
                    uniforms[i] = u;
                }
                for (int t = 0; t < 3; t++) {
                    if (tps[t] > V) continue;
                    differ += compare_rows(bes, tps[t], logits, rows, V, rep == 1 && V > 100 ? 3 : 0, params, uniforms);
                    checked += rows;
                }
            }
        free(logits);
    }
    EXPECT(differ == 0, "%d of %d sampled rows differ from sample_row", differ, checked);
    for (int r = 0; r < 4; r++) bes[r]->destroy(bes[r]);
}

// Every fixture's HF logits rows at tp 2 and 4 with every parameter set: sample_row's ids; the rows with top-k
// (the server's default) or neither gather nothing.
TEST(tp_sample_fixture_rows_match_sample_row) {
    fd_backend *bes[4];
    for (int r = 0; r < 4; r++) bes[r] = fd_backend_cpu_create(1);
    int checked = 0, differ = 0;
    uint64_t seed = 11;
    for (int f = 0; k_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        const int V = fx.vocab, rows = fx.n_ids < 16 ? fx.n_ids : 16;
        fd_sample_params params[16];
        double uniforms[16];
        for (int j = 0; j < N_PARAMS; j++) {
            for (int i = 0; i < rows; i++) {
                params[i] = params_of(j);
                float u;
                test_fill_uniform(&u, 1, 0, 1, &seed);
                uniforms[i] = u;
            }
            const int64_t before = tp_sample_gathered_bytes();
            for (int tp = 2; tp <= 4; tp += 2) differ += compare_rows(bes, tp, fx.logits, rows, V, 0, params, uniforms);
            checked += 2 * rows;
            const int topk_or_neither = (params[0].top_k > 0 && params[0].top_k <= 40) || params[0].top_p >= 1;
            EXPECT(!topk_or_neither || tp_sample_gathered_bytes() == before, "%s: T %.2f k %d p %.2f gathered rows",
                   k_fixture_names[f], params[0].temperature, params[0].top_k, params[0].top_p);
        }
        fixture_free(&fx);
    }
    EXPECT(differ == 0, "%d of %d fixture rows differ from sample_row", differ, checked);
    for (int r = 0; r < 4; r++) bes[r]->destroy(bes[r]);
}

// A batch of sampled rows with top-k, neither, and top-p alone over a nucleus of ~30 tokens (settled by the first 64
// candidates of each rank) moves no logits row to the host; a backend without the ops gathers every row.
TEST(tp_sample_gathers_no_rows) {
    fd_backend *bes[2] = {fd_backend_cpu_create(1), fd_backend_cpu_create(1)};
    const int V = 20000, rows = 8;
    float *logits = malloc(sizeof(float) * (size_t)V * rows);
    uint64_t seed = 3;
    fd_sample_params params[8];
    double uniforms[8];
    for (int i = 0; i < rows; i++) {
        fill_row(logits + (size_t)i * V, V, 1, &seed);
        for (int j = 0; j < 30; j++) logits[(size_t)i * V + 17 + 611 * j] += 14.0f; // a nucleus of ~30 tokens
        params[i] = (fd_sample_params){0.3f + 0.15f * i, i % 3 == 0 ? 40 : 0, i % 3 == 1 ? 0.9f : 1.0f};
        uniforms[i] = (i + 0.5) / rows;
    }
    int64_t before = tp_sample_gathered_bytes();
    EXPECT(compare_rows(bes, 2, logits, rows, V, 0, params, uniforms) == 0, "ids differ from sample_row");
    EXPECT(tp_sample_gathered_bytes() == before, "%lld bytes of logits gathered",
           (long long)(tp_sample_gathered_bytes() - before));
    void (*scan)(fd_backend *, double *, int32_t *, const float *, int, int, const float *, const float *,
                 const double *, const double *) = bes[1]->softmax_scan_rows;
    bes[1]->softmax_scan_rows = NULL; // the fallback: each row's [V] to the host, sample_row there
    before = tp_sample_gathered_bytes();
    EXPECT(compare_rows(bes, 2, logits, rows, V, 0, params, uniforms) == 0, "the fallback's ids differ");
    EXPECT(tp_sample_gathered_bytes() - before == (int64_t)sizeof(float) * V * rows, "the fallback gathered %lld",
           (long long)(tp_sample_gathered_bytes() - before));
    bes[1]->softmax_scan_rows = scan;
    free(logits);
    for (int r = 0; r < 2; r++) bes[r]->destroy(bes[r]);
}
