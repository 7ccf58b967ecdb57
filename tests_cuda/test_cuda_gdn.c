// The GDN core on the GPU against an fp64 recurrence written here from the definition (DESIGN.md section 3) and
// against the CPU reference, both routes: the state carried across consecutive calls of uneven sizes, every chunk
// tail (n = 1..200), calls longer than one 4096-token pass of the chunked route, and per-token state slots. GPU
// outputs are poisoned with NaN before each call (test_rel_l2 returns INFINITY on any NaN); bound TOL_GDN
// (cuda_rig.h). Every other op (and gdn_core's perf rows) is in the op table: op_harness.h.
// Built only in CUDA builds (make test-cuda); needs a GPU.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x9e3779b97f4a7c15ull)

// ---- GDN: fp64 recurrence from the definition (DESIGN.md §3), gates and norms in fp64 too ----
static void gdn_ref64(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
                      const float *dt_bias, int n, int Hk, int Hv, int dk, int dv) {
    int cq = 2 * Hk * dk + Hv * dv, r = Hv / Hk;
    double *q = fd_malloc(sizeof(double) * dk), *k = fd_malloc(sizeof(double) * dk);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++) {
            const float *row = qkv + (int64_t)t * cq;
            const float *qs = row + (h / r) * dk, *ks = row + Hk * dk + (h / r) * dk, *vs = row + 2 * Hk * dk + h * dv;
            double nq = 0, nk = 0;
            for (int i = 0; i < dk; i++) nq += (double)qs[i] * qs[i], nk += (double)ks[i] * ks[i];
            for (int i = 0; i < dk; i++)
                q[i] = qs[i] / sqrt(nq + 1e-6) / sqrt((double)dk), k[i] = ks[i] / sqrt(nk + 1e-6);
            double x = (double)a[t * Hv + h] + dt_bias[h];
            double g = -exp((double)A_log[h]) * (x > 20 ? x : log1p(exp(x)));
            double beta = 1 / (1 + exp(-(double)b[t * Hv + h]));
            double *Sh = S + (int64_t)h * dk * dv;
            for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(g);
            for (int j = 0; j < dv; j++) {
                double kv = 0;
                for (int i = 0; i < dk; i++) kv += Sh[i * dv + j] * k[i];
                double u = beta * (vs[j] - kv);
                for (int i = 0; i < dk; i++) Sh[i * dv + j] += k[i] * u;
            }
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += Sh[i * dv + j] * q[i];
                o[((int64_t)t * Hv + h) * dv + j] = s;
            }
        }
    free(q), free(k);
}

static double rel_l2_64(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

// Consecutive calls of calls[0], calls[1], ... tokens from a random initial state, so the state carries across
// calls; the whole sequence is compared with the fp64 recurrence and the CPU reference. With `slots`, the last call
// (if not the first) also writes per-token state slots. Returns the worst of the four errors; `quiet` prints
// nothing unless a check fails (sweeps print their own summary).
static double check_gdn_calls(fd_gdn_route route, const int *calls, int ncalls, int Hk, int Hv, int dk, int dv,
                              int slots, int quiet) {
    int cq = 2 * Hk * dk + Hv * dv, n = 0;
    for (int i = 0; i < ncalls; i++) n += calls[i];
    size_t ns = (size_t)Hv * dk * dv;
    tw A_log = mkw("A_log", Hv, 1, FD_F32, -1.0f, 1.5f), dt_bias = mkw("dt_bias", Hv, 1, FD_F32, -1, 1);
    float *qkv = rnd((size_t)n * cq, -1, 1), *b = rnd((size_t)n * Hv, -3, 3), *a = rnd((size_t)n * Hv, -3, 3);
    float *S0 = rnd(ns, -0.3f, 0.3f), *Sc = fd_malloc(ns * 4);
    memcpy(Sc, S0, ns * 4);
    double *S64 = fd_malloc(ns * 8), *o64 = fd_malloc((size_t)n * Hv * dv * 8);
    for (size_t i = 0; i < ns; i++) S64[i] = S0[i];
    gdn_ref64(o64, S64, qkv, b, a, (const float *)A_log.c.data, (const float *)dt_bias.c.data, n, Hk, Hv, dk, dv);
    void *dS = up(S0, ns);
    float *og = fd_malloc((size_t)n * Hv * dv * 4), *oc = fd_malloc((size_t)n * Hv * dv * 4);
    int t0 = 0;
    for (int call = 0; call < ncalls; call++) {
        int m = calls[call];
        if (!m) continue;
        size_t no = (size_t)m * Hv * dv;
        void *dqkv = up(qkv + (size_t)t0 * cq, (size_t)m * cq), *db = up(b + (size_t)t0 * Hv, (size_t)m * Hv);
        void *da = up(a + (size_t)t0 * Hv, (size_t)m * Hv), *dout = dalloc(no);
        poison(dout, no);
        // slots (last call only): the state after every token; the CPU computes them with the serial route
        int use_slots = slots && call > 0 && call == ncalls - 1;
        size_t nsl = (size_t)m * ns;
        void *dsl = use_slots ? dalloc(nsl) : NULL;
        float *slc = use_slots ? fd_malloc(nsl * 4) : NULL;
        if (dsl) poison(dsl, nsl);
        gpu()->gdn_core(gpu(), route, dout, dqkv, db, da, &A_log.g, &dt_bias.g, dS, m, Hk, Hv, dk, dv, dsl);
        cpu()->gdn_core(cpu(), use_slots ? FD_GDN_SERIAL : route, oc + (size_t)t0 * Hv * dv, qkv + (size_t)t0 * cq,
                        b + (size_t)t0 * Hv, a + (size_t)t0 * Hv, &A_log.c, &dt_bias.c, Sc, m, Hk, Hv, dk, dv, slc);
        if (dsl) {
            float *slg = down(dsl, nsl);
            double e = test_rel_l2(slg, slc, nsl), elast = test_rel_l2(slg + (m - 1) * ns, slc + (m - 1) * ns, ns);
            printf("    gdn %s n=%d state slots vs cpu %.3g (last slot %.3g)\n",
                   route == FD_GDN_SERIAL ? "serial " : "chunked", m, e, elast);
            EXPECT(e <= TOL_GDN, "gdn state slots vs cpu: %.3g", e);
            free(slg), free(slc), dfree(dsl);
        }
        gpu()->to_host(gpu(), og + (size_t)t0 * Hv * dv, dout, no * 4);
        dfree(dqkv), dfree(db), dfree(da), dfree(dout);
        t0 += m;
    }
    float *Sg = down(dS, ns);
    const char *rn = route == FD_GDN_SERIAL ? "serial " : "chunked";
    size_t no = (size_t)n * Hv * dv;
    double eo = rel_l2_64(og, o64, no), es = rel_l2_64(Sg, S64, ns);
    double eoc = test_rel_l2(og, oc, no), esc = test_rel_l2(Sg, Sc, ns);
    double cpu_o = rel_l2_64(oc, o64, no);
    char split[96];
    int len = 0;
    split[0] = 0;
    for (int i = 0; i < ncalls && len < (int)sizeof split - 12; i++)
        len += snprintf(split + len, sizeof split - (size_t)len, i ? "+%d" : "%d", calls[i]);
    int bad = !(eo <= TOL_GDN && es <= TOL_GDN && eoc <= TOL_GDN && esc <= TOL_GDN);
    if (!quiet || bad)
        printf("    gdn %s n=%s Hk=%d Hv=%d dk=%d dv=%d: vs fp64 out %.3g state %.3g | vs cpu out %.3g state %.3g "
               "| cpu vs fp64 out %.3g\n",
               rn, split, Hk, Hv, dk, dv, eo, es, eoc, esc, cpu_o);
    EXPECT(eo <= TOL_GDN && es <= TOL_GDN, "gdn %s n=%s vs fp64: out %.3g state %.3g", rn, split, eo, es);
    EXPECT(eoc <= TOL_GDN && esc <= TOL_GDN, "gdn %s n=%s vs cpu: out %.3g state %.3g", rn, split, eoc, esc);
    free(qkv), free(b), free(a), free(S0), free(Sc), free(S64), free(o64), free(og), free(oc), free(Sg);
    dfree(dS), freew(&A_log), freew(&dt_bias);
    double worst = eo > es ? eo : es;
    if (eoc > worst) worst = eoc;
    if (esc > worst) worst = esc;
    return isfinite(worst) ? worst : INFINITY;
}

// Two consecutive calls (n1 then n2 tokens).
static void check_gdn(fd_gdn_route route, int n1, int n2, int Hk, int Hv, int dk, int dv, int slots) {
    int calls[2] = {n1, n2};
    check_gdn_calls(route, calls, 2, Hk, Hv, dk, dv, slots, 0);
}

static const int gdn_shapes[][6] = {
    // n1, n2, Hk, Hv, dk, dv
    {1, 0, 2, 6, 128, 128},  {7, 0, 2, 6, 128, 128},  {64, 0, 2, 6, 128, 128}, {200, 0, 2, 6, 128, 128},
    {64, 1, 2, 6, 128, 128}, {130, 70, 2, 4, 96, 48}, {7, 200, 1, 3, 64, 32},  {3, 5, 2, 2, 256, 256},
    // Hv / Hk = 1, 2, 3 at the 27B head size; n not a multiple of 64; odd dv (scalar tile loads); head sizes
    // that are not multiples of 32 (zero-padded tiles in the chunked kernels; the fixtures use 16)
    {129, 63, 3, 3, 128, 128}, {191, 0, 2, 4, 128, 128}, {65, 127, 1, 3, 128, 128}, {100, 28, 2, 6, 64, 37},
    {150, 0, 1, 2, 256, 128},  {70, 3, 1, 2, 48, 40},     {90, 40, 2, 4, 16, 16},    {66, 0, 1, 1, 24, 20},
};

TEST(cuda_gdn_serial_vs_cpu_and_fp64) {
    for (size_t s = 0; s < sizeof gdn_shapes / sizeof gdn_shapes[0]; s++) {
        const int *c = gdn_shapes[s];
        check_gdn(FD_GDN_SERIAL, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

TEST(cuda_gdn_chunked_vs_cpu_and_fp64) {
    for (size_t s = 0; s < sizeof gdn_shapes / sizeof gdn_shapes[0]; s++) {
        const int *c = gdn_shapes[s];
        check_gdn(FD_GDN_CHUNKED, c[0], c[1], c[2], c[3], c[4], c[5], 0);
    }
}

// Every n from 1 to 200 (all chunk tails), Hv / Hk cycling through 1, 2, 3, one call each from a random state;
// every 5th n at the 27B head size 128/128, the others at 64/48. One summary line with the worst error.
TEST(cuda_gdn_chunked_sweep_n) {
    double worst = 0;
    int worst_n = 0;
    for (int n = 1; n <= 200; n++) {
        int r = 1 + n % 3, Hk = 1 + n % 2, big = n % 5 == 0;
        int calls[1] = {n};
        double e = check_gdn_calls(FD_GDN_CHUNKED, calls, 1, Hk, Hk * r, big ? 128 : 64, big ? 128 : 48, 0, 1);
        if (!(e <= worst)) worst = e, worst_n = n;
    }
    printf("    gdn chunked n=1..200 (Hv/Hk 1..3): worst rel-L2 (out/state vs fp64 and cpu) %.3g at n=%d\n", worst,
           worst_n);
    EXPECT(worst <= TOL_GDN, "gdn chunked sweep worst %.3g at n=%d", worst, worst_n);
}

// The state carried over several calls of uneven sizes, one of them longer than a 4096-token pass of the
// chunked route (so it is split into passes internally).
TEST(cuda_gdn_chunked_multi_call) {
    const int c1[] = {100, 64, 1, 137, 4200, 33};
    check_gdn_calls(FD_GDN_CHUNKED, c1, 6, 1, 2, 64, 64, 0, 0);
    const int c2[] = {63, 65, 1, 129, 2};
    check_gdn_calls(FD_GDN_CHUNKED, c2, 5, 2, 6, 128, 128, 0, 0);
    check_gdn_calls(FD_GDN_SERIAL, c2, 5, 2, 6, 128, 128, 0, 0);
}

// Verify-style calls: a prefill of 30 tokens, then 16 (and 1) tokens that write per-token state slots. Both routes
// take the recurrence when slots are asked for.
TEST(cuda_gdn_state_slots) {
    for (int r = 0; r < 2; r++) {
        check_gdn((fd_gdn_route)r, 30, 16, 2, 6, 128, 128, 1);
        check_gdn((fd_gdn_route)r, 70, 1, 1, 3, 64, 32, 1);
    }
}
