// CUDA backend op tests: every entry point of backend.h run on fresh random inputs at several shapes on the
// CPU reference backend and on the CUDA backend, compared by rel-L2. GPU outputs are poisoned with NaN before
// each call, so an unwritten element fails (test_rel_l2 returns INFINITY on any NaN). The GDN routes are also
// checked against an fp64 recurrence written here, and their output/state errors are printed.
//
// Thresholds (rel-L2 vs the fp32 CPU reference): the table in cuda_rig.h, by what the GPU path rounds (TOL_EXACT
// layout-only ops, TOL_F32 fp32 in another order, TOL_GDN, TOL_ATTN bf16 KV cache, TOL_BF16 GEMMs and MoE).
// Built only in CUDA builds (make test-cuda); needs a GPU.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x9e3779b97f4a7c15ull)

// ---------------------------------------------------------------------------------------------------------
TEST(cuda_matmul) {
    // n, k, m, published dtype. [1, k] (a single-row gate) and fp32/fp16 matrices are fp32 on the device.
    int shapes[][4] = {{1, 64, 48, FD_BF16},      {7, 200, 130, FD_BF16}, {64, 512, 384, FD_BF16},
                       {200, 1024, 515, FD_BF16}, {3, 2048, 1, FD_BF16},  {7, 200, 130, FD_F32},
                       {64, 96, 33, FD_F16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], k = shapes[s][1], m = shapes[s][2];
        tw W = mkw("W", m, k, (fd_dtype)shapes[s][3], -0.1f, 0.1f);
        float *x = rnd((size_t)n * k, -1, 1), *oc = fd_malloc((size_t)n * m * 4);
        void *dx = up(x, (size_t)n * k), *dout = dalloc((size_t)n * m);
        poison(dout, (size_t)n * m);
        gpu()->matmul(gpu(), dout, dx, &W.g, n, 1);
        cpu()->matmul(cpu(), oc, x, &W.c, n, 1);
        float *og = down(dout, (size_t)n * m);
        char what[96];
        snprintf(what, sizeof what, "matmul n=%d k=%d m=%d (%s -> %s)", n, k, m, fd_dtype_name(W.c.dtype),
                 fd_dtype_name(W.g.dev_dtype));
        cmp(what, og, oc, (size_t)n * m, W.g.dev_dtype == FD_F32 ? TOL_F32 : TOL_BF16);
        free(x), free(oc), free(og), dfree(dx), dfree(dout), freew(&W);
    }
}

TEST(cuda_rmsnorm_both_kinds) {
    int shapes[][2] = {{1, 64}, {7, 1000}, {200, 2048}, {64, 5120}};
    for (size_t s = 0; s < 4; s++)
        for (int plus_one = 0; plus_one < 2; plus_one++)
            for (int alias = 0; alias < 2; alias++) {
                int n = shapes[s][0], d = shapes[s][1];
                tw w = mkw("norm", d, 1, FD_F32, -0.5f, 0.5f);
                float *x = rnd((size_t)n * d, -2, 2), *oc = fd_malloc((size_t)n * d * 4);
                void *dx = up(x, (size_t)n * d), *dout = alias ? dx : dalloc((size_t)n * d);
                if (!alias) poison(dout, (size_t)n * d);
                gpu()->rmsnorm(gpu(), dout, dx, &w.g, n, d, 1e-6f, plus_one);
                cpu()->rmsnorm(cpu(), oc, x, &w.c, n, d, 1e-6f, plus_one);
                float *og = down(dout, (size_t)n * d);
                char what[96];
                snprintf(what, sizeof what, "rmsnorm n=%d d=%d plus_one=%d alias=%d", n, d, plus_one, alias);
                cmp(what, og, oc, (size_t)n * d, TOL_F32);
                free(x), free(oc), free(og), dfree(dx), freew(&w);
                if (!alias) dfree(dout);
            }
}

TEST(cuda_elementwise) {
    int64_t counts[] = {1, 7, 4097, 200 * 1000 + 3};
    for (size_t s = 0; s < 4; s++) {
        int64_t n = counts[s];
        float *a = rnd((size_t)n, -4, 4), *b = rnd((size_t)n, -4, 4), *oc = fd_malloc((size_t)n * 4);
        void *da = up(a, (size_t)n), *db = up(b, (size_t)n), *dout = dalloc((size_t)n);
        char what[96];
        poison(dout, (size_t)n);
        gpu()->silu_mul(gpu(), dout, da, db, n);
        cpu()->silu_mul(cpu(), oc, a, b, n);
        float *og = down(dout, (size_t)n);
        snprintf(what, sizeof what, "silu_mul count=%lld", (long long)n);
        cmp(what, og, oc, (size_t)n, TOL_F32);
        free(og);
        memcpy(oc, a, (size_t)n * 4);
        gpu()->add(gpu(), da, db, n);
        cpu()->add(cpu(), oc, b, n);
        og = down(da, (size_t)n);
        snprintf(what, sizeof what, "add count=%lld", (long long)n);
        cmp(what, og, oc, (size_t)n, TOL_F32);
        free(og);
        gpu()->sigmoid_mul(gpu(), da, db, n);
        cpu()->sigmoid_mul(cpu(), oc, b, n);
        og = down(da, (size_t)n);
        snprintf(what, sizeof what, "sigmoid_mul count=%lld", (long long)n);
        cmp(what, og, oc, (size_t)n, TOL_F32);
        float *h = fd_malloc((size_t)n * 4 + 4);
        gpu()->to_f32(gpu(), h, da, n);
        EXPECT(!memcmp(h, og, (size_t)n * 4), "to_f32 differs from to_host");
        free(h), free(og), free(a), free(b), free(oc), dfree(da), dfree(db), dfree(dout);
    }
}

TEST(cuda_embed) {
    int V = 1001, d = 333, n = 64;
    tw table = mkw("embed", V, d, FD_BF16, -1, 1);
    int32_t ids[64];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    ids[0] = V - 1;
    float *oc = fd_malloc((size_t)n * d * 4);
    void *dout = dalloc((size_t)n * d);
    poison(dout, (size_t)n * d);
    int32_t *dids = gpu()->alloc(gpu(), sizeof ids); // embed reads the ids from device memory
    gpu()->to_device(gpu(), dids, ids, sizeof ids);
    gpu()->embed(gpu(), dout, &table.g, dids, n);
    cpu()->embed(cpu(), oc, &table.c, ids, n);
    float *og = down(dout, (size_t)n * d);
    cmp("embed bf16 table V=1001 d=333 n=64", og, oc, (size_t)n * d, TOL_EXACT);
    free(oc), free(og), dfree(dout), dfree(dids), freew(&table);
}

TEST(cuda_split_q_gate_and_rope) {
    int cfg[][4] = {{6, 256, 64, 0}, {4, 128, 128, 1}, {3, 64, 32, 2}}; // H, hd, rot_dim, pos-case
    int ns[] = {1, 7, 64, 200};
    int64_t pos0s[] = {0, 1000, 200000};
    for (size_t c = 0; c < 3; c++)
        for (size_t s = 0; s < 4; s++) {
            int H = cfg[c][0], hd = cfg[c][1], rot = cfg[c][2], n = ns[s];
            int64_t pos0 = pos0s[cfg[c][3]];
            size_t cnt = (size_t)n * H * hd;
            float *qg = rnd(cnt * 2, -1, 1), *qc = fd_malloc(cnt * 4), *gc = fd_malloc(cnt * 4);
            void *dqg = up(qg, cnt * 2), *dq = dalloc(cnt), *dg = dalloc(cnt);
            poison(dq, cnt), poison(dg, cnt);
            gpu()->split_q_gate(gpu(), dq, dg, dqg, n, H, hd);
            cpu()->split_q_gate(cpu(), qc, gc, qg, n, H, hd);
            float *qgpu = down(dq, cnt), *ggpu = down(dg, cnt);
            char what[96];
            snprintf(what, sizeof what, "split_q_gate n=%d H=%d hd=%d (q)", n, H, hd);
            cmp(what, qgpu, qc, cnt, TOL_EXACT);
            snprintf(what, sizeof what, "split_q_gate n=%d H=%d hd=%d (gate)", n, H, hd);
            cmp(what, ggpu, gc, cnt, TOL_EXACT);
            // the same rotation with the position read on the device (a wrong host pos0 must not matter)
            void *dq2 = dalloc(cnt);
            gpu()->copy(gpu(), dq2, dq, cnt * 4);
            int64_t *dpos = gpu()->alloc(gpu(), sizeof(int64_t));
            gpu()->to_device(gpu(), dpos, &pos0, sizeof pos0);
            gpu()->rope(gpu(), dq, n, H, hd, rot, 1e7f, pos0, NULL);
            gpu()->rope(gpu(), dq2, n, H, hd, rot, 1e7f, pos0 + 12345, dpos);
            cpu()->rope(cpu(), qc, n, H, hd, rot, 1e7f, pos0, NULL);
            free(qgpu);
            qgpu = down(dq, cnt);
            snprintf(what, sizeof what, "rope n=%d H=%d hd=%d rot=%d pos0=%lld", n, H, hd, rot, (long long)pos0);
            cmp(what, qgpu, qc, cnt, TOL_F32);
            float *q2 = down(dq2, cnt);
            EXPECT(!memcmp(q2, qgpu, cnt * 4), "rope with pos_dev differs from rope with pos0 (%s)", what);
            free(q2), dfree(dq2), dfree(dpos);
            free(qg), free(qc), free(gc), free(qgpu), free(ggpu), dfree(dqg), dfree(dq), dfree(dg);
        }
}

TEST(cuda_gated_rmsnorm) {
    int shapes[][2] = {{1, 128}, {7 * 6, 128}, {200 * 6, 128}, {13, 96}};
    for (size_t s = 0; s < 4; s++) {
        int rows = shapes[s][0], dv = shapes[s][1];
        tw w = mkw("gdn_norm", dv, 1, FD_F32, 0.5f, 1.5f);
        size_t cnt = (size_t)rows * dv;
        float *x = rnd(cnt, -2, 2), *z = rnd(cnt, -3, 3), *oc = fd_malloc(cnt * 4);
        void *dx = up(x, cnt), *dz = up(z, cnt), *dout = dalloc(cnt);
        poison(dout, cnt);
        gpu()->gated_rmsnorm(gpu(), dout, dx, dz, &w.g, rows, dv, 1e-6f);
        cpu()->gated_rmsnorm(cpu(), oc, x, z, &w.c, rows, dv, 1e-6f);
        float *og = down(dout, cnt);
        char what[96];
        snprintf(what, sizeof what, "gated_rmsnorm rows=%d dv=%d", rows, dv);
        cmp(what, og, oc, cnt, TOL_F32);
        free(x), free(z), free(oc), free(og), dfree(dx), dfree(dz), dfree(dout), freew(&w);
    }
}

TEST(cuda_conv1d_silu_state_across_calls) {
    int Cs[] = {777, 8192};
    int ns[][2] = {{1, 1}, {7, 1}, {64, 200}, {200, 7}, {2, 3}}; // two consecutive calls
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t s = 0; s < 5; s++) {
            int C = Cs[ci], K = 4;
            tw w = mkw("conv", C, K, FD_BF16, -0.7f, 0.7f);
            float *st = rnd((size_t)C * (K - 1), -1, 1);
            void *dst = up(st, (size_t)C * (K - 1));
            for (int call = 0; call < 2; call++) {
                int n = ns[s][call], use_slots = call == 1; // second call: per-token state slots (verify)
                size_t cnt = (size_t)n * C, ns_ = (size_t)n * C * (K - 1);
                float *x = rnd(cnt, -2, 2), *oc = fd_malloc(cnt * 4), *slc = use_slots ? fd_malloc(ns_ * 4) : NULL;
                void *dx = up(x, cnt), *dout = dalloc(cnt), *dsl = use_slots ? dalloc(ns_) : NULL;
                poison(dout, cnt);
                if (dsl) poison(dsl, ns_);
                gpu()->conv1d_silu(gpu(), dout, dx, &w.g, dst, n, C, K, dsl);
                cpu()->conv1d_silu(cpu(), oc, x, &w.c, st, n, C, K, slc);
                float *og = down(dout, cnt), *sg = down(dst, (size_t)C * (K - 1));
                char what[96];
                snprintf(what, sizeof what, "conv1d_silu C=%d n=%d call %d (out)", C, n, call);
                cmp(what, og, oc, cnt, TOL_F32);
                snprintf(what, sizeof what, "conv1d_silu C=%d n=%d call %d (state)", C, n, call);
                cmp(what, sg, st, (size_t)C * (K - 1), TOL_F32);
                if (dsl) {
                    float *slg = down(dsl, ns_);
                    snprintf(what, sizeof what, "conv1d_silu C=%d n=%d call %d (state slots)", C, n, call);
                    cmp(what, slg, slc, ns_, TOL_F32);
                    free(slg), free(slc), dfree(dsl);
                }
                free(x), free(oc), free(og), free(sg), dfree(dx), dfree(dout);
            }
            free(st), dfree(dst), freew(&w);
        }
}

TEST(cuda_gdn_split_qkvz) {
    int cfg[][5] = {{1, 2, 6, 128, 128}, {7, 2, 4, 32, 16}, {64, 1, 3, 16, 24}};
    for (size_t s = 0; s < 3; s++) {
        int n = cfg[s][0], Hk = cfg[s][1], Hv = cfg[s][2], dk = cfg[s][3], dv = cfg[s][4], r = Hv / Hk;
        size_t nqkvz = (size_t)n * Hk * (2 * dk + 2 * r * dv), nba = (size_t)n * 2 * Hv;
        size_t nqkv = (size_t)n * (2 * Hk * dk + Hv * dv), nz = (size_t)n * Hv * dv, nb = (size_t)n * Hv;
        float *qkvz = rnd(nqkvz, -1, 1), *ba = rnd(nba, -1, 1);
        float *c[4] = {fd_malloc(nqkv * 4), fd_malloc(nz * 4), fd_malloc(nb * 4), fd_malloc(nb * 4)};
        size_t sz[4] = {nqkv, nz, nb, nb};
        void *d[4];
        for (int i = 0; i < 4; i++) d[i] = dalloc(sz[i]), poison(d[i], sz[i]);
        void *dq = up(qkvz, nqkvz), *dba = up(ba, nba);
        gpu()->gdn_split_qkvz(gpu(), d[0], d[1], d[2], d[3], dq, dba, n, Hk, Hv, dk, dv);
        cpu()->gdn_split_qkvz(cpu(), c[0], c[1], c[2], c[3], qkvz, ba, n, Hk, Hv, dk, dv);
        const char *names[4] = {"qkv", "z", "b", "a"};
        for (int i = 0; i < 4; i++) {
            float *g = down(d[i], sz[i]);
            char what[96];
            snprintf(what, sizeof what, "gdn_split_qkvz n=%d Hk=%d Hv=%d (%s)", n, Hk, Hv, names[i]);
            cmp(what, g, c[i], sz[i], TOL_EXACT);
            free(g), free(c[i]), dfree(d[i]);
        }
        free(qkvz), free(ba), dfree(dq), dfree(dba);
    }
}

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

// ---- attention: store a prefix of n0 tokens, then n more, and attend the n new queries over all ----
static void check_attn(int n0, int n, int H, int Hkv, int hd, int causal) {
    int64_t cap = n0 + n + 5;
    size_t row = (size_t)Hkv * hd, qn = (size_t)n * H * hd;
    size_t kvb_c = cpu()->kv_bytes_per_token(cpu(), Hkv, hd), kvb_g = gpu()->kv_bytes_per_token(gpu(), Hkv, hd);
    float *cc = fd_calloc((size_t)cap, kvb_c);
    void *cg = gpu()->alloc(gpu(), (size_t)cap * kvb_g);
    float scale = 1.0f / sqrtf((float)hd);
    int starts[2] = {0, n0}, lens[2] = {n0, n};
    float *q = NULL, *oc = fd_malloc(qn * 4);
    void *dq = NULL, *dout = NULL;
    for (int call = 0; call < 2; call++) {
        int m = lens[call];
        if (!m) continue;
        float *k = rnd((size_t)m * row, -2, 2), *v = rnd((size_t)m * row, -1, 1);
        void *dk = up(k, (size_t)m * row), *dv = up(v, (size_t)m * row);
        // the second store reads its position on the device (host pos0 0: a kernel ignoring pos_dev would
        // overwrite the first store's rows and the attention below would differ)
        int64_t *dpos = gpu()->alloc(gpu(), sizeof(int64_t)), at = starts[call];
        gpu()->to_device(gpu(), dpos, &at, sizeof at);
        gpu()->kv_store(gpu(), FD_KV_FLAT(cg, cap), dk, dv, call ? 0 : starts[call], call ? dpos : NULL, m, Hkv, hd);
        cpu()->kv_store(cpu(), FD_KV_FLAT(cc, cap), k, v, starts[call], NULL, m, Hkv, hd);
        dfree(dpos);
        free(k), free(v), dfree(dk), dfree(dv);
    }
    q = rnd(qn, -2, 2);
    dq = up(q, qn), dout = dalloc(qn);
    poison(dout, qn);
    gpu()->attention(gpu(), dout, dq, FD_KV_FLAT(cg, cap), n0, NULL, n, H, Hkv, hd, scale, causal);
    cpu()->attention(cpu(), oc, q, FD_KV_FLAT(cc, cap), n0, NULL, n, H, Hkv, hd, scale, causal);
    float *og = down(dout, qn);
    char what[96];
    snprintf(what, sizeof what, "attention%s pos0=%d n=%d H=%d Hkv=%d hd=%d", causal ? "" : "_noncausal", n0, n, H, Hkv,
             hd);
    cmp(what, og, oc, qn, TOL_ATTN);
    free(q), free(oc), free(og), free(cc), dfree(dq), dfree(dout), dfree(cg);
}

// Both attention tests below pin the CUDA-core kernel (the default route sends >= 64 rows to the tensor cores,
// which cuda_attention_mma covers); their calls with <= 16 tokens take the split-K decode kernel whatever the
// route (test_cuda_decode_attn.c covers it in depth).
TEST(cuda_attention_gqa_causal) {
    const char *prev = fd_cuda_route(gpu(), "attn_kernel");
    ASSERT(fd_cuda_set_route(gpu(), "attn_kernel", "simt") == 0, "%s", fd_error_msg());
    int ns[][2] = {{0, 1}, {0, 7}, {0, 64}, {0, 200}, {37, 1}, {100, 7}, {3000, 5}, {500, 64}};
    int heads[][3] = {{6, 2, 256}, {8, 2, 128}, {4, 4, 64}};
    for (size_t h = 0; h < 3; h++)
        for (size_t s = 0; s < 8; s++) check_attn(ns[s][0], ns[s][1], heads[h][0], heads[h][1], heads[h][2], 1);
    fd_cuda_set_route(gpu(), "attn_kernel", prev);
}

// The DFlash drafter's block: every query sees the whole context plus the whole block.
TEST(cuda_attention_noncausal) {
    const char *prev = fd_cuda_route(gpu(), "attn_kernel");
    ASSERT(fd_cuda_set_route(gpu(), "attn_kernel", "simt") == 0, "%s", fd_error_msg());
    int ns[][2] = {{0, 7}, {100, 16}, {3000, 16}, {37, 1}};
    int heads[][3] = {{6, 2, 256}, {8, 2, 128}};
    for (size_t h = 0; h < 2; h++)
        for (size_t s = 0; s < 4; s++) check_attn(ns[s][0], ns[s][1], heads[h][0], heads[h][1], heads[h][2], 0);
    fd_cuda_set_route(gpu(), "attn_kernel", prev);
}

// The tensor-core kernel (route attn_kernel=mma): calls with >= 64 query rows and head_dim 64/128/256; smaller
// calls in the same list check the fallback to the CUDA-core kernel under this route. The kernel's block is 128
// rows (8 warps x 16) and its key tile 64: the cases cover one half-empty block (64 rows), row counts that are
// no multiple of 128 or of 16, warps whose rows are all padding, pos0 off the 64-key grid, a context of many
// tiles (the two-stage cp.async pipeline wraps many times) and a block whose rows span the causal diagonal.
TEST(cuda_attention_mma) {
    const char *prev = fd_cuda_route(gpu(), "attn_kernel");
    ASSERT(fd_cuda_set_route(gpu(), "attn_kernel", "mma") == 0, "%s", fd_error_msg());
    int cases[][6] = {
        // n0, n, H, Hkv, hd, causal
        {0, 64, 6, 2, 256, 1},     {0, 200, 6, 2, 256, 1},  {500, 64, 6, 2, 256, 1},  {0, 300, 8, 2, 128, 1},
        {1000, 130, 8, 2, 128, 1}, {0, 77, 4, 4, 64, 1},    {33, 100, 6, 2, 256, 0},  {0, 70, 8, 2, 128, 0},
        {3000, 5, 6, 2, 256, 1},   {0, 64, 4, 4, 32, 1},    {0, 64, 4, 4, 64, 1},     {4001, 150, 6, 1, 256, 1},
        {130, 211, 8, 2, 64, 0},   {65, 129, 4, 1, 128, 0}, {127, 43, 12, 4, 256, 1}, {1, 257, 2, 2, 64, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        check_attn(cases[i][0], cases[i][1], cases[i][2], cases[i][3], cases[i][4], cases[i][5]);
    fd_cuda_set_route(gpu(), "attn_kernel", prev);
}

TEST(cuda_copy_rows) {
    int rows = 37, row_floats = 29, ss = 41, ds = 33; // strides in floats, both wider than a row
    float *src = rnd((size_t)rows * ss, -1, 1), *dc = rnd((size_t)rows * ds, -1, 1);
    void *dsrc = up(src, (size_t)rows * ss), *ddst = up(dc, (size_t)rows * ds);
    gpu()->copy_rows(gpu(), ddst, (size_t)ds * 4, dsrc, (size_t)ss * 4, rows, (size_t)row_floats * 4);
    cpu()->copy_rows(cpu(), dc, (size_t)ds * 4, src, (size_t)ss * 4, rows, (size_t)row_floats * 4);
    float *g = down(ddst, (size_t)rows * ds);
    cmp("copy_rows 37 rows x 29 floats, strides 41 -> 33", g, dc, (size_t)rows * ds, TOL_EXACT);
    free(src), free(dc), free(g), dfree(dsrc), dfree(ddst);
}

// ---- MoE ----
static void check_moe(int n, int d, int E, int k, int inter, int sh_inter, int renorm, int shared) {
    tw router = mkw("router", E, d, FD_BF16, -0.2f, 0.2f);
    tw *g = fd_malloc(sizeof(tw) * E), *u = fd_malloc(sizeof(tw) * E), *dn = fd_malloc(sizeof(tw) * E);
    fd_weight *gc = fd_malloc(sizeof(fd_weight) * E * 6), *uc = gc + E, *dc = gc + 2 * E;
    fd_weight *gg = gc + 3 * E, *ug = gc + 4 * E, *dg = gc + 5 * E;
    for (int e = 0; e < E; e++) {
        g[e] = mkw("gate", inter, d, FD_BF16, -0.1f, 0.1f), u[e] = mkw("up", inter, d, FD_BF16, -0.1f, 0.1f);
        dn[e] = mkw("down", d, inter, FD_BF16, -0.1f, 0.1f);
        gc[e] = g[e].c, uc[e] = u[e].c, dc[e] = dn[e].c, gg[e] = g[e].g, ug[e] = u[e].g, dg[e] = dn[e].g;
    }
    tw sg = mkw("sh_gate", sh_inter, d, FD_BF16, -0.1f, 0.1f), su = mkw("sh_up", sh_inter, d, FD_BF16, -0.1f, 0.1f);
    tw sd = mkw("sh_down", d, sh_inter, FD_BF16, -0.1f, 0.1f), sw = mkw("sh_gate_w", 1, d, FD_BF16, -0.1f, 0.1f);
    fd_moe_weights mc = {&router.c, gc, uc, dc, NULL, NULL, NULL, NULL, E, k, inter, sh_inter, renorm};
    fd_moe_weights mg = {&router.g, gg, ug, dg, NULL, NULL, NULL, NULL, E, k, inter, sh_inter, renorm};
    if (shared) {
        mc.sh_gate = &sg.c, mc.sh_up = &su.c, mc.sh_down = &sd.c, mc.sh_gate_w = &sw.c;
        mg.sh_gate = &sg.g, mg.sh_up = &su.g, mg.sh_down = &sd.g, mg.sh_gate_w = &sw.g;
    }
    float *x = rnd((size_t)n * d, -1, 1), *oc = fd_malloc((size_t)n * d * 4);
    void *dx = up(x, (size_t)n * d), *dout = dalloc((size_t)n * d);
    poison(dout, (size_t)n * d);
    gpu()->moe(gpu(), dout, dx, &mg, n, d);
    cpu()->moe(cpu(), oc, x, &mc, n, d);
    float *og = down(dout, (size_t)n * d);
    char what[96];
    snprintf(what, sizeof what, "moe n=%d d=%d E=%d k=%d I=%d renorm=%d shared=%d", n, d, E, k, inter, renorm, shared);
    cmp(what, og, oc, (size_t)n * d, TOL_BF16);
    for (int e = 0; e < E; e++) freew(&g[e]), freew(&u[e]), freew(&dn[e]);
    freew(&router), freew(&sg), freew(&su), freew(&sd), freew(&sw);
    free(g), free(u), free(dn), free(gc), free(x), free(oc), free(og), dfree(dx), dfree(dout);
}

TEST(cuda_moe_router_experts_shared) {
    int ns[] = {1, 7, 64, 200};
    for (size_t s = 0; s < 4; s++) {
        check_moe(ns[s], 128, 16, 4, 96, 64, 1, 1);
        check_moe(ns[s], 96, 10, 3, 40, 24, 0, 0);
    }
    check_moe(33, 256, 64, 8, 32, 48, 1, 1);
}
