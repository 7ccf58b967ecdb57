// sample_rows on the GPU (src/cuda/sampling.cu) against the host sampler (engine/sampling.c):
//   cuda_sample_greedy_argmax    T = 0: the CPU argmax (lowest index on ties), V = 7, 1000, 248320
//   cuda_sample_kept_set         the distribution drawn from (fd_cuda_sample_probs, NaN-poisoned output) vs
//                                sample_probs: the same kept set (top-k / top-p, ties by index) and values. Allowed
//                                and counted: rows whose CPU top-p prefix sum lies within 1e-6 of top_p, and sets
//                                that differ only in tokens within 2 ulp of the cut (exp's last bit can differ)
//   cuda_sample_ids_vs_cpu       2000 uniforms per case: the CPU's ids except where u * total falls within 1e-6
//                                (relative) of a CDF boundary (counted and printed)
//   cuda_sample_smoke            small (V = 300, ties): every parameter set; quick enough for compute-sanitizer
//   cuda_sample_chi2             GPU draws vs the CPU probabilities (chi-square, 0.1 % level)
//   cuda_sample_engine_generate  a fixture on the GPU: engine_generate with a sampler (sampled on the device) ==
//                                the host path on the same GPU logits (copy + sampler_sample), same seed
//   bench_cuda_sampling          (FD_CUDA_BENCH=1) us per row at V = 248320 vs the logits copy + host sampler
// Logits rows: uniform, one peaked token, integer-quantised (exact ties everywhere, also at the top-k / top-p cut).
#include <stdlib.h>
#include <string.h>

#include "../tests/fixture.h"
#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/engine.h"
#include "engine/sampling.h"

CUDA_RIG(0) // the backend only: this file draws its inputs from its own stream

static uint64_t g_seed = 0x5eed5a3b1e5ull;
enum { KIND_UNIFORM = 0, KIND_PEAKED = 1, KIND_TIES = 2, KIND_FLAT = 3, N_KINDS = 4 };
static const char *const k_kind_name[] = {"uniform", "peaked", "ties", "flat"};

static void fill_row(float *x, int V, int kind) {
    test_fill_uniform(x, (size_t)V, -6.0f, 6.0f, &g_seed);
    if (kind == KIND_PEAKED) x[(V * 2) / 3] += 14.0f;
    if (kind == KIND_TIES) {
        for (int i = 0; i < V; i++) x[i] = (float)(int)(x[i] * 0.5f);
        x[V - 1] = x[V / 2] = 4.0f; // a tied maximum (2 is the largest quantised value otherwise)
    }
    if (kind == KIND_FLAT)
        for (int i = 0; i < V; i++) x[i] *= 1e-3f;
}

// `rows` copies of one logits row on the device.
static float *up_rows(const float *row, int V, int rows) {
    float *d = gpu()->alloc(gpu(), sizeof(float) * (size_t)V * rows);
    for (int r = 0; r < rows; r++) gpu()->to_device(gpu(), d + (size_t)r * V, row, sizeof(float) * (size_t)V);
    return d;
}

static double next_uniform(void) {
    g_seed ^= g_seed << 13, g_seed ^= g_seed >> 7, g_seed ^= g_seed << 17;
    return (double)(g_seed >> 11) * (1.0 / 9007199254740992.0);
}

TEST(cuda_sample_greedy_argmax) {
    const int Vs[] = {7, 1000, 248320};
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi], rows = N_KINDS;
        float *h = malloc(sizeof(float) * (size_t)V * rows);
        for (int k = 0; k < N_KINDS; k++) fill_row(h + (size_t)k * V, V, k);
        float *d = gpu()->alloc(gpu(), sizeof(float) * (size_t)V * rows);
        gpu()->to_device(gpu(), d, h, sizeof(float) * (size_t)V * rows);
        fd_sample_params prm[N_KINDS];
        int32_t got[N_KINDS];
        for (int k = 0; k < rows; k++) prm[k] = (fd_sample_params){0.0f, 20, 0.5f}, got[k] = -1;
        gpu()->sample_rows(gpu(), got, d, rows, V, prm, NULL); // greedy rows need no uniforms
        for (int k = 0; k < rows; k++) {
            int32_t want = 0;
            for (int i = 1; i < V; i++)
                if (h[(size_t)k * V + i] > h[(size_t)k * V + want]) want = i;
            EXPECT(got[k] == want, "V %d %s: GPU argmax %d, CPU %d", V, k_kind_name[k], got[k], want);
        }
        gpu()->free(gpu(), d);
        free(h);
    }
}

static int cmp_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Rank position where the CPU's top-p loop stops is ambiguous when a normalised prefix sum lies within 1e-6 of
// top_p (the GPU sums in another order): then the kept sets may differ by that one tie-free boundary token.
static int topp_ambiguous(const float *p_full, int V, const fd_sample_params *prm) {
    if (!(prm->top_p > 0 && prm->top_p < 1)) return 0;
    float *s = malloc(sizeof(float) * (size_t)V);
    memcpy(s, p_full, sizeof(float) * (size_t)V);
    qsort(s, (size_t)V, sizeof(float), cmp_desc);
    const int keep = prm->top_k > 0 && prm->top_k < V ? prm->top_k : V;
    double kept = 0, cum = 0;
    for (int i = 0; i < keep; i++) kept += s[i];
    int amb = 0;
    for (int i = 0; i < keep && !amb; i++) {
        cum += s[i] / kept;
        amb = fabs(cum - prm->top_p) < 1e-6;
        if (cum > prm->top_p + 1e-6) break;
    }
    free(s);
    return amb;
}

static const float k_T[] = {0.7f, 1.0f, 1.5f};
static const int k_K[] = {0, 1, 20};
static const float k_P[] = {1.0f, 0.9f, 0.5f};

// The GPU's distribution of one row under prm (fd_cuda_sample_probs into a NaN-poisoned buffer), to host.
static void gpu_probs(float *out, const float *d_logits, int V, const fd_sample_params *prm) {
    float *dp = gpu()->alloc(gpu(), sizeof(float) * (size_t)V);
    for (int i = 0; i < V; i++) out[i] = NAN;
    gpu()->to_device(gpu(), dp, out, sizeof(float) * (size_t)V);
    fd_cuda_sample_probs(gpu(), dp, d_logits, 1, V, prm);
    gpu()->to_host(gpu(), out, dp, sizeof(float) * (size_t)V);
    gpu()->free(gpu(), dp);
}

// Compares the GPU's kept set with the CPU's (want = sample_probs, full = the unfiltered p the tokens are ranked
// by). Returns 0 when equal, 1 when they differ only in tokens whose p lies within 2 ulp of the CPU's cut value
// (exp rounded differently in the last bit on the two sides can break or make such a tie), 2 otherwise.
static int compare_sets(const float *got, const float *want, const float *full, int V, int *n_diff) {
    float cut = INFINITY;
    for (int i = 0; i < V; i++)
        if (want[i] > 0 && full[i] < cut) cut = full[i];
    const float lo = nextafterf(nextafterf(cut, 0), 0), hi = nextafterf(nextafterf(cut, 1), 1);
    int diff = 0, far = 0;
    for (int i = 0; i < V; i++)
        if ((got[i] > 0) != (want[i] > 0) || got[i] != got[i]) {
            diff++;
            far += got[i] != got[i] || !(full[i] >= lo && full[i] <= hi); // NaN (unwritten) never passes
        }
    *n_diff = diff;
    return diff == 0 ? 0 : far == 0 ? 1 : 2;
}

TEST(cuda_sample_kept_set) {
    const int Vs[] = {7, 1000, 248320};
    int cases = 0, ambiguous = 0, ulp_ties = 0;
    double worst = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        float *h = malloc(sizeof(float) * (size_t)V), *want = malloc(sizeof(float) * (size_t)V);
        float *full = malloc(sizeof(float) * (size_t)V), *got = malloc(sizeof(float) * (size_t)V);
        for (int kind = 0; kind < N_KINDS; kind++) {
            fill_row(h, V, kind);
            float *d = up_rows(h, V, 1);
            for (int t = 0; t < 3; t++)
                for (int k = 0; k < 3; k++)
                    for (int p = 0; p < 3; p++) {
                        const fd_sample_params prm = {k_T[t], k_K[k], k_P[p]};
                        sample_probs(&prm, h, V, want);
                        gpu_probs(got, d, V, &prm);
                        const fd_sample_params nofilter = {k_T[t], 0, 1.0f};
                        sample_probs(&nofilter, h, V, full);
                        const int amb = topp_ambiguous(full, V, &prm);
                        int n_diff;
                        const int sets = compare_sets(got, want, full, V, &n_diff);
                        cases++;
                        ambiguous += amb;
                        ulp_ties += sets == 1;
                        if (amb) continue;
                        EXPECT(sets < 2, "V %d %s T %g k %d p %g: kept sets differ in %d tokens", V,
                               k_kind_name[kind], prm.temperature, prm.top_k, prm.top_p, n_diff);
                        if (sets == 0) {
                            const double err = test_rel_l2(got, want, (size_t)V);
                            EXPECT(err < 1e-6, "V %d %s T %g k %d p %g: probs rel-L2 %.3g", V, k_kind_name[kind],
                                   prm.temperature, prm.top_k, prm.top_p, err);
                            if (err > worst) worst = err;
                        }
                    }
            gpu()->free(gpu(), d);
        }
        free(h), free(want), free(full), free(got);
    }
    printf("    %d cases: %d with an ambiguous top-p boundary (skipped), %d differing only in last-bit ties at the cut; "
           "worst probs rel-L2 %.2e\n",
           cases, ambiguous, ulp_ties, worst);
}

// The CPU's inverse-CDF draw (sample_draw_u) by binary search over its cumulative sums, plus whether u * total lies
// within tol * total of the boundary on either side of the chosen token.
typedef struct {
    int *idx;    // tokens with mass, in index order
    double *cum; // the host's running sum after each of them
    int n;
    double total;
} cpu_cdf;
static void cdf_build(cpu_cdf *c, const float *probs, int V) {
    c->idx = malloc(sizeof(int) * (size_t)V), c->cum = malloc(sizeof(double) * (size_t)V);
    c->total = 0;
    for (int i = 0; i < V; i++) c->total += probs[i];
    double cum = 0;
    c->n = 0;
    for (int i = 0; i < V; i++)
        if (probs[i] > 0) cum += probs[i], c->idx[c->n] = i, c->cum[c->n++] = cum;
}
static int cdf_draw(const cpu_cdf *c, double u, double tol, int *near) {
    const double x = u * c->total;
    int lo = 0, hi = c->n - 1;
    if (!(x < c->cum[hi])) lo = hi; // past the end: the last token with mass
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (x < c->cum[mid]) hi = mid;
        else lo = mid + 1;
    }
    const double below = lo ? c->cum[lo - 1] : 0;
    *near = fabs(x - c->cum[lo]) < tol * c->total || (lo && fabs(x - below) < tol * c->total);
    return c->idx[lo];
}

// GPU ids for DRAWS uniforms per case against the CPU's draw (a) over the GPU's own distribution (checks the
// draw alone) and (b) over the CPU's distribution where the kept sets agree (checks everything end to end).
TEST(cuda_sample_ids_vs_cpu) {
    const int Vs[] = {7, 1000, 248320};
    enum { DRAWS = 2000, ROWS = 64 };
    long total = 0, near_total = 0, mismatches = 0, near_mismatches = 0, skipped_cases = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int V = Vs[vi];
        float *h = malloc(sizeof(float) * (size_t)V), *pc = malloc(sizeof(float) * (size_t)V);
        float *pg = malloc(sizeof(float) * (size_t)V), *full = malloc(sizeof(float) * (size_t)V);
        for (int kind = 0; kind < N_KINDS; kind++) {
            fill_row(h, V, kind);
            float *d = up_rows(h, V, ROWS);
            for (int t = 0; t < 3; t++)
                for (int k = 0; k < 3; k++)
                    for (int p = 0; p < 3; p++) {
                        const fd_sample_params prm = {k_T[t], k_K[k], k_P[p]};
                        sample_probs(&prm, h, V, pc);
                        gpu_probs(pg, d, V, &prm);
                        const fd_sample_params nofilter = {k_T[t], 0, 1.0f};
                        sample_probs(&nofilter, h, V, full);
                        int n_diff;
                        const int cpu_too = compare_sets(pg, pc, full, V, &n_diff) == 0;
                        skipped_cases += !cpu_too;
                        cpu_cdf cdf[2];
                        cdf_build(&cdf[0], pg, V);
                        if (cpu_too) cdf_build(&cdf[1], pc, V);
                        fd_sample_params prms[ROWS];
                        for (int r = 0; r < ROWS; r++) prms[r] = prm;
                        for (int b = 0; b < DRAWS; b += ROWS) {
                            const int n = DRAWS - b < ROWS ? DRAWS - b : ROWS;
                            double u[ROWS];
                            int32_t got[ROWS];
                            for (int r = 0; r < n; r++) u[r] = next_uniform(), got[r] = -1;
                            if (b == 0) u[0] = 0.0, u[1] = 0.9999999999999999; // the two ends
                            gpu()->sample_rows(gpu(), got, d, n, V, prms, u);
                            for (int r = 0; r < n; r++)
                                for (int c = 0; c < 1 + cpu_too; c++) {
                                    int near;
                                    const int want = cdf_draw(&cdf[c], u[r], 1e-6, &near);
                                    if (b == 0 && r < 8) // the fast CPU draw is the host's draw
                                        EXPECT(want == sample_draw_u(c ? pc : pg, V, u[r]), "cdf_draw vs host");
                                    total++, near_total += near;
                                    if (got[r] == want) continue;
                                    if (near) near_mismatches++;
                                    else if (++mismatches <= 10)
                                        test_fail(__FILE__, __LINE__, "id mismatch",
                                                  " V %d %s T %g k %d p %g u %.17g: GPU %d, CPU (%s probs) %d", V,
                                                  k_kind_name[kind], prm.temperature, prm.top_k, prm.top_p, u[r],
                                                  got[r], c ? "CPU" : "GPU", want);
                                }
                        }
                        for (int c = 0; c < 1 + cpu_too; c++) free(cdf[c].idx), free(cdf[c].cum);
                    }
            gpu()->free(gpu(), d);
        }
        free(h), free(pc), free(pg), free(full);
    }
    printf("    %ld comparisons: %ld mismatches away from boundaries; %ld within 1e-6 of a CDF boundary (%ld of them "
           "differ); %ld cases compared against the GPU's distribution only (kept sets differ: see "
           "cuda_sample_kept_set)\n",
           total, mismatches, near_total, near_mismatches, skipped_cases);
    EXPECT(mismatches == 0, "%ld ids differ away from CDF boundaries", mismatches);
}

// Small and quick (for compute-sanitizer): V = 300 with exact ties, every parameter combination plus greedy, 4 rows
// with different uniforms per call; ids must be kept tokens of the CPU's distribution and the GPU's own draw.
TEST(cuda_sample_smoke) {
    const int V = 300, ROWS = 4;
    float h[300], pc[300], pg[300], full[300];
    fill_row(h, V, KIND_TIES);
    float *d = up_rows(h, V, ROWS);
    for (int t = -1; t < 3; t++)
        for (int k = 0; k < 3; k++)
            for (int p = 0; p < 3; p++) {
                const fd_sample_params prm = {t < 0 ? 0.0f : k_T[t], k_K[k], k_P[p]};
                fd_sample_params prms[4] = {prm, prm, prm, prm};
                double u[4] = {0.0, 0.3, 0.7, 0.9999999999999999};
                int32_t got[4] = {-1, -1, -1, -1};
                sample_probs(&prm, h, V, pc);
                gpu_probs(pg, d, V, &prm);
                const fd_sample_params nofilter = {prm.temperature, 0, 1.0f};
                sample_probs(&nofilter, h, V, full);
                int n_diff;
                EXPECT(compare_sets(pg, pc, full, V, &n_diff) == 0 || topp_ambiguous(full, V, &prm),
                       "T %g k %d p %g: kept sets differ in %d tokens", prm.temperature, prm.top_k, prm.top_p, n_diff);
                gpu()->sample_rows(gpu(), got, d, ROWS, V, prms, u);
                for (int r = 0; r < ROWS; r++) {
                    ASSERT(got[r] >= 0 && got[r] < V, "id %d", got[r]);
                    EXPECT(pg[got[r]] > 0, "T %g k %d p %g u %g: id %d has no mass", prm.temperature, prm.top_k,
                           prm.top_p, u[r], got[r]);
                    const int32_t want = prm.temperature > 0 ? sample_draw_u(pg, V, u[r]) : sample_row(&prm, h, V, 0, pc);
                    EXPECT(got[r] == want, "T %g k %d p %g u %g: GPU %d, CPU draw %d", prm.temperature, prm.top_k,
                           prm.top_p, u[r], got[r], want);
                }
            }
    gpu()->free(gpu(), d);
}

TEST(cuda_sample_chi2) {
    const int V = 50, N = 40000, ROWS = 256;
    const fd_sample_params cases[] = {{1.0f, 0, 1.0f}, {0.7f, 20, 0.9f}, {1.5f, 0, 0.8f}};
    float h[50], pc[50];
    test_fill_uniform(h, V, -2.0f, 2.0f, &g_seed);
    float *d = up_rows(h, V, ROWS);
    for (int c = 0; c < 3; c++) {
        sample_probs(&cases[c], h, V, pc);
        int counts[50] = {0};
        fd_sample_params prms[256];
        for (int r = 0; r < ROWS; r++) prms[r] = cases[c];
        for (int b = 0; b < N; b += ROWS) {
            double u[256];
            int32_t got[256];
            for (int r = 0; r < ROWS; r++) u[r] = next_uniform(), got[r] = -1;
            gpu()->sample_rows(gpu(), got, d, ROWS, V, prms, u);
            for (int r = 0; r < ROWS && b + r < N; r++) {
                ASSERT(got[r] >= 0 && got[r] < V, "id %d out of range", got[r]);
                counts[got[r]]++;
            }
        }
        int dof;
        const double chi2 = test_chi2(counts, pc, V, N, &dof);
        printf("    T %g k %d p %g: chi2 %.1f, dof %d, critical %.1f\n", cases[c].temperature, cases[c].top_k,
               cases[c].top_p, chi2, dof, test_chi2_crit(dof));
        EXPECT(chi2 < test_chi2_crit(dof), "case %d: chi2 %.1f over %.1f", c, chi2, test_chi2_crit(dof));
    }
    gpu()->free(gpu(), d);
}

TEST(cuda_sample_engine_generate) {
    fixture fx;
    ASSERT(fixture_load(k_fixture_names[0], &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, gpu());
    enum { N_NEW = 16 };
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = fx.n_ids + N_NEW + 1;
    fd_engine e;
    ASSERT(engine_init(&e, &m, gpu(), &o) == 0, "%s", fd_error_msg());
    const int V = m.cfg.vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)V), *scratch = malloc(sizeof(float) * (size_t)V);
    const fd_sample_params cases[] = {{0.8f, 20, 0.9f}, {1.0f, 0, 1.0f}, {1.3f, 0, 0.7f}, {0.0f, 0, 1.0f}};
    for (int c = 0; c < 4; c++) {
        int32_t want[N_NEW], got[N_NEW];
        fd_sampler hs, ds;
        sampler_init(&hs, cases[c].temperature, cases[c].top_k, cases[c].top_p, 777 + (uint64_t)c);
        ds = hs;
        engine_reset(&e);
        ASSERT(engine_prefill(&e, fx.ids, fx.n_ids, 0, logits, 0) == 0, "%s", fd_error_msg());
        for (int i = 0; i < N_NEW; i++) {
            want[i] = sampler_sample(&hs, logits, V, scratch);
            if (i + 1 < N_NEW) ASSERT(engine_forward(&e, &want[i], 1, logits, 0) == 0, "%s", fd_error_msg());
        }
        engine_reset(&e);
        for (int i = 0; i < N_NEW; i++) got[i] = -1;
        ASSERT(engine_generate(&e, fx.ids, fx.n_ids, 0, N_NEW, &ds, got) == 0, "%s", fd_error_msg());
        int same = 0;
        while (same < N_NEW && got[same] == want[same]) same++;
        printf("    T %g k %d p %g: %d/%d ids as the host path\n", cases[c].temperature, cases[c].top_k,
               cases[c].top_p, same, N_NEW);
        EXPECT(same == N_NEW, "case %d: device sampling differs from the host path at token %d", c, same);
        EXPECT(hs.state == ds.state, "case %d: generator streams diverged", c);
    }
    free(logits), free(scratch);
    engine_free(&e);
    model_free(&m);
    fixture_free(&fx);
}

// ---- bench ----
static double now_ms(void) { return fd_time_s() * 1e3; }

TEST(bench_cuda_sampling) {
    if (cuda_rig_bench_skipped()) return;
    const int V = 248320, reps = 20;
    float *h = malloc(sizeof(float) * (size_t)V), *host = malloc(sizeof(float) * (size_t)V * 16);
    float *scratch = malloc(sizeof(float) * (size_t)V);
    fill_row(h, V, KIND_UNIFORM);
    float *d = up_rows(h, V, 16);
    const fd_sample_params cases[] = {{0.0f, 0, 1.0f}, {0.7f, 0, 1.0f}, {0.7f, 20, 0.95f}, {1.0f, 0, 0.9f}};
    const char *names[] = {"greedy", "T=0.7", "T=0.7 top_k=20 top_p=0.95", "T=1 top_p=0.9 (no top-k)"};
    const int rows_list[] = {1, 16};
    for (int c = 0; c < 4; c++)
        for (int ri = 0; ri < 2; ri++) {
            const int rows = rows_list[ri];
            fd_sample_params prms[16];
            double u[16];
            int32_t ids[16];
            for (int r = 0; r < rows; r++) prms[r] = cases[c], u[r] = next_uniform();
            gpu()->sample_rows(gpu(), ids, d, rows, V, prms, u); // warm-up
            double t0 = now_ms();
            for (int i = 0; i < reps; i++) gpu()->sample_rows(gpu(), ids, d, rows, V, prms, u);
            const double gpu_ms = (now_ms() - t0) / reps;
            // what it replaces: the logits rows to the host, then the host sampler per row
            t0 = now_ms();
            for (int i = 0; i < 3; i++) {
                gpu()->to_host(gpu(), host, d, sizeof(float) * (size_t)V * rows);
                for (int r = 0; r < rows; r++) sample_row(&prms[r], host + (size_t)r * V, V, u[r], scratch);
            }
            const double host_ms = (now_ms() - t0) / 3;
            printf("BENCH | sample_rows V=%d rows=%-2d %-28s | GPU %8.1f us (%6.1f us/row) | copy+host %9.1f us\n", V,
                   rows, names[c], gpu_ms * 1e3, gpu_ms * 1e3 / rows, host_ms * 1e3);
        }
    gpu()->free(gpu(), d);
    free(h), free(host), free(scratch);
}
