// The GDN core checks (gdn_rig.h): the fp64 recurrence and the multi-call comparison, moved here from
// test_cuda_gdn.c so the bf16 chunk kernels' tests use the same ones.
#include "gdn_rig.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "base/base.h"

void gdn_rig_ref64(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
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

double gdn_rig_rel_l2_64(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

double gdn_rig_check_calls(cuda_rig *rig, fd_gdn_route route, const char *chunk, double tol, const int *calls,
                           int ncalls, int Hk, int Hv, int dk, int dv, int slots, int quiet) {
    fd_backend *g = cuda_rig_gpu(rig), *c = cuda_rig_cpu(rig);
    char rn[40];
    snprintf(rn, sizeof rn, "%s", route == FD_GDN_SERIAL ? "serial" : "chunked");
    if (route == FD_GDN_CHUNKED && chunk) snprintf(rn, sizeof rn, "chunked/%s", chunk);
    int cq = 2 * Hk * dk + Hv * dv, n = 0;
    for (int i = 0; i < ncalls; i++) n += calls[i];
    size_t ns = (size_t)Hv * dk * dv;
    cuda_rig_weight A_log = cuda_rig_weight_rand(rig, "A_log", Hv, 1, FD_F32, -1.0f, 1.5f),
                    dt_bias = cuda_rig_weight_rand(rig, "dt_bias", Hv, 1, FD_F32, -1, 1);
    float *qkv = cuda_rig_rnd(rig, (size_t)n * cq, -1, 1), *b = cuda_rig_rnd(rig, (size_t)n * Hv, -3, 3),
          *a = cuda_rig_rnd(rig, (size_t)n * Hv, -3, 3);
    float *S0 = cuda_rig_rnd(rig, ns, -0.3f, 0.3f), *Sc = fd_malloc(ns * 4);
    memcpy(Sc, S0, ns * 4);
    double *S64 = fd_malloc(ns * 8), *o64 = fd_malloc((size_t)n * Hv * dv * 8);
    for (size_t i = 0; i < ns; i++) S64[i] = S0[i];
    gdn_rig_ref64(o64, S64, qkv, b, a, (const float *)A_log.c.data, (const float *)dt_bias.c.data, n, Hk, Hv, dk, dv);
    void *dS = cuda_rig_up(g, S0, ns * 4);
    float *og = fd_malloc((size_t)n * Hv * dv * 4), *oc = fd_malloc((size_t)n * Hv * dv * 4);
    int t0 = 0;
    for (int call = 0; call < ncalls; call++) {
        int m = calls[call];
        if (!m) continue;
        size_t no = (size_t)m * Hv * dv;
        void *dqkv = cuda_rig_up(g, qkv + (size_t)t0 * cq, (size_t)m * cq * 4),
             *db = cuda_rig_up(g, b + (size_t)t0 * Hv, (size_t)m * Hv * 4);
        void *da = cuda_rig_up(g, a + (size_t)t0 * Hv, (size_t)m * Hv * 4), *dout = cuda_rig_poisoned(g, no);
        // slots (last call only): the state after every token; the CPU computes them with the serial route
        int use_slots = slots && call > 0 && call == ncalls - 1;
        size_t nsl = (size_t)m * ns;
        void *dsl = use_slots ? cuda_rig_poisoned(g, nsl) : NULL;
        float *slc = use_slots ? fd_malloc(nsl * 4) : NULL;
        g->gdn_core(g, route, dout, dqkv, db, da, &A_log.g, &dt_bias.g, dS, m, Hk, Hv, dk, dv, dsl);
        c->gdn_core(c, use_slots ? FD_GDN_SERIAL : route, oc + (size_t)t0 * Hv * dv, qkv + (size_t)t0 * cq,
                    b + (size_t)t0 * Hv, a + (size_t)t0 * Hv, &A_log.c, &dt_bias.c, Sc, m, Hk, Hv, dk, dv, slc);
        if (dsl) {
            float *slg = cuda_rig_down(g, dsl, nsl);
            double e = test_rel_l2(slg, slc, nsl), elast = test_rel_l2(slg + (m - 1) * ns, slc + (m - 1) * ns, ns);
            printf("    gdn %s n=%d state slots vs cpu %.3g (last slot %.3g)\n", rn, m, e, elast);
            EXPECT(e <= tol, "gdn state slots vs cpu: %.3g", e);
            free(slg), free(slc), g->free(g, dsl);
        }
        g->to_host(g, og + (size_t)t0 * Hv * dv, dout, no * 4);
        g->free(g, dqkv), g->free(g, db), g->free(g, da), g->free(g, dout);
        t0 += m;
    }
    float *Sg = cuda_rig_down(g, dS, ns);
    size_t no = (size_t)n * Hv * dv;
    double eo = gdn_rig_rel_l2_64(og, o64, no), es = gdn_rig_rel_l2_64(Sg, S64, ns);
    double eoc = test_rel_l2(og, oc, no), esc = test_rel_l2(Sg, Sc, ns);
    double cpu_o = gdn_rig_rel_l2_64(oc, o64, no);
    char split[96];
    int len = 0;
    split[0] = 0;
    for (int i = 0; i < ncalls && len < (int)sizeof split - 12; i++)
        len += snprintf(split + len, sizeof split - (size_t)len, i ? "+%d" : "%d", calls[i]);
    int bad = !(eo <= tol && es <= tol && eoc <= tol && esc <= tol);
    if (!quiet || bad)
        printf("    gdn %s n=%s Hk=%d Hv=%d dk=%d dv=%d: vs fp64 out %.3g state %.3g | vs cpu out %.3g state %.3g "
               "| cpu vs fp64 out %.3g\n",
               rn, split, Hk, Hv, dk, dv, eo, es, eoc, esc, cpu_o);
    EXPECT(eo <= tol && es <= tol, "gdn %s n=%s vs fp64: out %.3g state %.3g", rn, split, eo, es);
    EXPECT(eoc <= tol && esc <= tol, "gdn %s n=%s vs cpu: out %.3g state %.3g", rn, split, eoc, esc);
    free(qkv), free(b), free(a), free(S0), free(Sc), free(S64), free(o64), free(og), free(oc), free(Sg);
    g->free(g, dS), cuda_rig_weight_free(rig, &A_log), cuda_rig_weight_free(rig, &dt_bias);
    double worst = eo > es ? eo : es;
    if (eoc > worst) worst = eoc;
    if (esc > worst) worst = esc;
    return isfinite(worst) ? worst : INFINITY;
}

const int gdn_rig_shapes[GDN_RIG_N_SHAPES][6] = {
    // n1, n2, Hk, Hv, dk, dv
    {1, 0, 2, 6, 128, 128},
    {7, 0, 2, 6, 128, 128},
    {64, 0, 2, 6, 128, 128},
    {200, 0, 2, 6, 128, 128},
    {64, 1, 2, 6, 128, 128},
    {130, 70, 2, 4, 96, 48},
    {7, 200, 1, 3, 64, 32},
    {3, 5, 2, 2, 256, 256},
    // Hv / Hk = 1, 2, 3 at the 27B head size; n not a multiple of 64; odd dv (scalar tile loads); head sizes
    // that are not multiples of 32 (zero-padded tiles in the chunked kernels; the fixtures use 16)
    {129, 63, 3, 3, 128, 128},
    {191, 0, 2, 4, 128, 128},
    {65, 127, 1, 3, 128, 128},
    {100, 28, 2, 6, 64, 37},
    {150, 0, 1, 2, 256, 128},
    {70, 3, 1, 2, 48, 40},
    {90, 40, 2, 4, 16, 16},
    {66, 0, 1, 1, 24, 20},
};

void gdn_rig_sweep_n(cuda_rig *r, const char *label, const char *chunk, double tol) {
    double worst = 0;
    int worst_n = 0;
    for (int n = 1; n <= 200; n++) {
        const int ratio = 1 + n % 3, Hk = 1 + n % 2, big = n % 5 == 0;
        const int calls[1] = {n};
        const double e = gdn_rig_check_calls(r, FD_GDN_CHUNKED, chunk, tol, calls, 1, Hk, Hk * ratio, big ? 128 : 64,
                                             big ? 128 : 48, 0, 1);
        if (!(e <= worst)) worst = e, worst_n = n;
    }
    printf("    gdn %s n=1..200 (Hv/Hk 1..3): worst rel-L2 (out/state vs fp64 and cpu) %.3g at n=%d\n", label, worst,
           worst_n);
    EXPECT(worst <= tol, "gdn %s sweep worst %.3g at n=%d", label, worst, worst_n);
}
