// CPU reference ops checked against independent straightforward implementations written in the test
// (fp64 where it matters): GDN chunked vs serial vs an fp64 recurrence, conv state carried across calls,
// attention across calls, MoE routing.
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test.h"

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static fd_weight wvec(const float *data, int64_t rows, int64_t cols) {
    fd_weight w = {.name = "test", .dtype = FD_F32, .rows = rows, .cols = cols, .data = data, .dev = (void *)data};
    return w;
}

// fp64 gated delta rule, straight from the definition (DESIGN.md §3), for one sequence.
static void gdn_ref64(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
                      const float *dt_bias, int n, int Hk, int Hv, int dk, int dv) {
    const int conv_dim = 2 * Hk * dk + Hv * dv, r = Hv / Hk;
    double *q = malloc(sizeof(double) * dk), *k = malloc(sizeof(double) * dk), *kv = malloc(sizeof(double) * dv);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++) {
            const float *row = qkv + (int64_t)t * conv_dim;
            const float *qs = row + (h / r) * dk, *ks = row + Hk * dk + (h / r) * dk, *vs = row + 2 * Hk * dk + h * dv;
            double nq = 0, nk = 0;
            for (int x = 0; x < dk; x++) nq += (double)qs[x] * qs[x], nk += (double)ks[x] * ks[x];
            for (int x = 0; x < dk; x++) {
                q[x] = qs[x] / sqrt(nq + 1e-6) / sqrt((double)dk);
                k[x] = ks[x] / sqrt(nk + 1e-6);
            }
            double ax = (double)a[t * Hv + h] + dt_bias[h];
            double g = -exp((double)A_log[h]) * (ax > 20 ? ax : log1p(exp(ax)));
            double beta = 1.0 / (1.0 + exp(-(double)b[t * Hv + h]));
            double *Sh = S + (int64_t)h * dk * dv;
            for (int i = 0; i < dk * dv; i++) Sh[i] *= exp(g);
            for (int j = 0; j < dv; j++) {
                kv[j] = 0;
                for (int i = 0; i < dk; i++) kv[j] += Sh[i * dv + j] * k[i];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) Sh[i * dv + j] += beta * k[i] * (vs[j] - kv[j]);
            for (int j = 0; j < dv; j++) {
                double s = 0;
                for (int i = 0; i < dk; i++) s += Sh[i * dv + j] * q[i];
                o[((int64_t)t * Hv + h) * dv + j] = s;
            }
        }
    free(q);
    free(k);
    free(kv);
}

static double rel_l2_d(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

// Runs both routes over `n` tokens split into calls of `step` tokens, from a random initial state.
static void check_gdn(int n, int step, int Hk, int Hv, int dk, int dv, uint64_t seed) {
    fd_backend *be = cpu();
    const int conv_dim = 2 * Hk * dk + Hv * dv;
    float *qkv = malloc(sizeof(float) * n * conv_dim), *b = malloc(sizeof(float) * n * Hv);
    float *a = malloc(sizeof(float) * n * Hv), A_log[64], dt[64];
    test_fill_uniform(qkv, (size_t)n * conv_dim, -1, 1, &seed);
    test_fill_uniform(b, (size_t)n * Hv, -3, 3, &seed);
    test_fill_uniform(a, (size_t)n * Hv, -3, 3, &seed);
    test_fill_uniform(A_log, (size_t)Hv, -1.0f, 1.5f, &seed);
    test_fill_uniform(dt, (size_t)Hv, 0.5f, 1.5f, &seed);
    fd_weight wA = wvec(A_log, Hv, 1), wdt = wvec(dt, Hv, 1);
    const size_t ssz = (size_t)Hv * dk * dv;
    float *s0 = malloc(sizeof(float) * ssz);
    test_fill_uniform(s0, ssz, -0.5f, 0.5f, &seed);
    double *S64 = malloc(sizeof(double) * ssz), *o64 = malloc(sizeof(double) * n * Hv * dv);
    for (size_t i = 0; i < ssz; i++) S64[i] = s0[i];
    gdn_ref64(o64, S64, qkv, b, a, A_log, dt, n, Hk, Hv, dk, dv);
    for (int route = 0; route < 2; route++) {
        float *S = malloc(sizeof(float) * ssz), *o = malloc(sizeof(float) * n * Hv * dv);
        memcpy(S, s0, sizeof(float) * ssz);
        for (int i = 0; i < n * Hv * dv; i++) o[i] = NAN; // poison
        for (int t = 0; t < n; t += step) {
            int len = n - t < step ? n - t : step;
            be->gdn_core(be, (fd_gdn_route)route, o + (int64_t)t * Hv * dv, qkv + (int64_t)t * conv_dim, b + t * Hv,
                         a + t * Hv, &wA, &wdt, S, len, Hk, Hv, dk, dv, NULL);
        }
        double eo = rel_l2_d(o, o64, (size_t)n * Hv * dv);
        double es = 0, den = 0;
        for (size_t i = 0; i < ssz; i++) es += (S[i] - S64[i]) * (S[i] - S64[i]), den += S64[i] * S64[i];
        es = sqrt(es / den);
        EXPECT(eo <= 1e-5 && es <= 1e-5, "%s n=%d step=%d Hk=%d Hv=%d: out rel-L2 %.3g, state rel-L2 %.3g vs fp64",
               route ? "serial" : "chunked", n, step, Hk, Hv, eo, es);
        free(S);
        free(o);
    }
    free(qkv);
    free(b);
    free(a);
    free(s0);
    free(S64);
    free(o64);
}

TEST(cpu_gdn_chunked_and_serial_match_fp64) {
    check_gdn(200, 200, 2, 6, 16, 16, 1);  // r = 3, several chunks + partial last chunk
    check_gdn(130, 7, 2, 4, 16, 24, 2);    // carried across calls of 7 tokens
    check_gdn(64, 64, 1, 1, 32, 32, 3);    // exactly one chunk
    check_gdn(3, 1, 2, 2, 8, 8, 4);        // decode steps
    check_gdn(100, 33, 4, 12, 16, 16, 5);  // calls that straddle chunk boundaries
}

TEST(cpu_conv1d_state_carries_across_calls) {
    fd_backend *be = cpu();
    const int n = 23, C = 10, K = 4;
    uint64_t seed = 9;
    float x[23 * 10], w[40], out1[230], out2[230], st1[30] = {0}, st2[30] = {0};
    test_fill_uniform(x, sizeof x / 4, -1, 1, &seed);
    test_fill_uniform(w, 40, -1, 1, &seed);
    fd_weight W = wvec(w, C, K);
    be->conv1d_silu(be, out1, x, &W, st1, n, C, K, NULL);
    be->conv1d_silu(be, out2, x, &W, st2, 5, C, K, NULL);
    be->conv1d_silu(be, out2 + 5 * C, x + 5 * C, &W, st2, n - 5, C, K, NULL);
    EXPECT(test_rel_l2(out2, out1, (size_t)n * C) == 0.0);
    EXPECT(test_rel_l2(st2, st1, 30) == 0.0);
    // independent check of one output: silu(sum_j w[c][j] x[t-3+j][c]) with zeros before the start
    for (int t = 0; t < n; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                int tt = t - (K - 1) + j;
                if (tt >= 0) s += (double)w[c * K + j] * x[tt * C + c];
            }
            double ref = s / (1 + exp(-s));
            EXPECT(fabs(out1[t * C + c] - ref) < 1e-5, "t=%d c=%d %g vs %g", t, c, out1[t * C + c], ref);
        }
    // the state holds the last K-1 inputs, oldest first
    for (int c = 0; c < C; c++)
        for (int j = 0; j < K - 1; j++) EXPECT(st1[c * (K - 1) + j] == x[(n - (K - 1) + j) * C + c]);
}

TEST(cpu_attention_matches_naive_and_chunks) {
    fd_backend *be = cpu();
    const int n = 37, H = 6, Hkv = 2, hd = 32;
    const int64_t cap = 64;
    uint64_t seed = 11;
    float *q = malloc(sizeof(float) * n * H * hd), *k = malloc(sizeof(float) * n * Hkv * hd);
    float *v = malloc(sizeof(float) * n * Hkv * hd), *o1 = malloc(sizeof(float) * n * H * hd);
    float *o2 = malloc(sizeof(float) * n * H * hd);
    test_fill_uniform(q, (size_t)n * H * hd, -1, 1, &seed);
    test_fill_uniform(k, (size_t)n * Hkv * hd, -1, 1, &seed);
    test_fill_uniform(v, (size_t)n * Hkv * hd, -1, 1, &seed);
    void *buf = be->alloc(be, be->kv_bytes_per_token(be, Hkv, hd) * cap);
    const fd_kv_view kv = fd_kv_flat(buf, cap), *cache = &kv;
    be->kv_store(be, cache, k, v, 0, NULL, n, Hkv, hd);
    be->attention(be, o1, q, cache, 0, NULL, n, H, Hkv, hd, 0.2f, 1);
    be->attention(be, o2, q, cache, 0, NULL, 10, H, Hkv, hd, 0.2f, 1); // first 10 queries as their own call
    be->attention(be, o2 + 10 * H * hd, q + 10 * H * hd, cache, 10, NULL, n - 10, H, Hkv, hd, 0.2f, 1);
    EXPECT(test_rel_l2(o2, o1, (size_t)n * H * hd) < 1e-6);
    // pos_dev (the position read when the op runs; here host memory) replaces the pos0 argument exactly
    const int64_t at = 10;
    be->attention(be, o2 + 10 * H * hd, q + 10 * H * hd, cache, 999, &at, n - 10, H, Hkv, hd, 0.2f, 1);
    EXPECT(!memcmp(o2, o1, sizeof(float) * n * H * hd), "pos_dev differs from pos0");
    double num = 0, den = 0;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            int g = h / (H / Hkv);
            double sc[64], mx = -1e30, sum = 0;
            for (int j = 0; j <= t; j++) {
                double d = 0;
                for (int x = 0; x < hd; x++) d += (double)q[(t * H + h) * hd + x] * k[(j * Hkv + g) * hd + x];
                sc[j] = d * 0.2;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= t; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int x = 0; x < hd; x++) {
                double r = 0;
                for (int j = 0; j <= t; j++) r += sc[j] / sum * v[(j * Hkv + g) * hd + x];
                double e = o1[(t * H + h) * hd + x] - r;
                num += e * e;
                den += r * r;
            }
        }
    EXPECT(sqrt(num / den) < 1e-5, "attention rel-L2 vs fp64 %.3g", sqrt(num / den));
    be->free(be, buf);
    free(q);
    free(k);
    free(v);
    free(o1);
    free(o2);
}

TEST(cpu_rope_is_neox_partial) {
    fd_backend *be = cpu();
    const int hd = 16, rot = 8;
    float x[16], y[16];
    uint64_t seed = 5;
    test_fill_uniform(x, 16, -1, 1, &seed);
    memcpy(y, x, sizeof y);
    be->rope(be, y, 1, 1, hd, rot, 10000.0f, 7, NULL);
    for (int i = 0; i < rot / 2; i++) {
        double f = 7.0 / pow(10000.0, 2.0 * i / rot);
        EXPECT(fabs(y[i] - (x[i] * cos(f) - x[i + 4] * sin(f))) < 1e-5);
        EXPECT(fabs(y[i + 4] - (x[i + 4] * cos(f) + x[i] * sin(f))) < 1e-5);
    }
    for (int i = rot; i < hd; i++) EXPECT(y[i] == x[i], "dim %d beyond the rotary part changed", i);
}

// The fused ops the engine runs (add_rmsnorm, qk_norm_rope) are bitwise the sequences of ops they replace, so the
// fixture results did not move when the engine switched to them. The positions come once from the host and once
// from "device" memory (host memory on the cpu backend).
TEST(cpu_fused_ops_equal_unfused) {
    fd_backend *be = cpu();
    uint64_t seed = 77;
    const int n = 5, d = 48, H = 3, Hkv = 2, hd = 16, rot = 4;
    float wv[48], qw[16], kw[16];
    test_fill_uniform(wv, 48, -0.5f, 0.5f, &seed);
    test_fill_uniform(qw, 16, -0.5f, 0.5f, &seed);
    test_fill_uniform(kw, 16, -0.5f, 0.5f, &seed);
    fd_weight w = wvec(wv, d, 1), qn = wvec(qw, hd, 1), kn = wvec(kw, hd, 1);
    float x1[5 * 48], x2[5 * 48], y[5 * 48], h1[5 * 48], h2[5 * 48];
    test_fill_uniform(x1, n * d, -2, 2, &seed);
    test_fill_uniform(y, n * d, -2, 2, &seed);
    memcpy(x2, x1, sizeof x1);
    for (int plus_one = 0; plus_one < 2; plus_one++) {
        be->add(be, x1, y, (int64_t)n * d);
        be->rmsnorm(be, h1, x1, &w, n, d, 1e-6f, plus_one);
        be->add_rmsnorm(be, h2, x2, y, &w, n, d, 1e-6f, plus_one);
        EXPECT(!memcmp(x1, x2, sizeof x1) && !memcmp(h1, h2, sizeof h1), "add_rmsnorm plus_one=%d", plus_one);
    }
    float qg[5 * 3 * 32], k1[5 * 2 * 16], k2[5 * 2 * 16], q1[5 * 3 * 16], q2[5 * 3 * 16], g1[5 * 3 * 16],
        g2[5 * 3 * 16];
    test_fill_uniform(qg, n * H * 2 * hd, -2, 2, &seed);
    test_fill_uniform(k1, n * Hkv * hd, -2, 2, &seed);
    memcpy(k2, k1, sizeof k1);
    const int64_t pos0 = 1234;
    be->split_q_gate(be, q1, g1, qg, n, H, hd);
    be->rmsnorm(be, q1, q1, &qn, (int64_t)n * H, hd, 1e-6f, 1);
    be->rmsnorm(be, k1, k1, &kn, (int64_t)n * Hkv, hd, 1e-6f, 1);
    be->rope(be, q1, n, H, hd, rot, 1e7f, pos0, NULL);
    be->rope(be, k1, n, Hkv, hd, rot, 1e7f, pos0, NULL);
    be->qk_norm_rope(be, q2, g2, k2, qg, &qn, &kn, n, H, Hkv, hd, rot, 1e7f, 1e-6f, 0, &pos0);
    EXPECT(!memcmp(q1, q2, sizeof q1) && !memcmp(g1, g2, sizeof g1) && !memcmp(k1, k2, sizeof k1),
           "qk_norm_rope differs from split_q_gate + rmsnorm + rope");
}

TEST(cpu_qwen3_next_split_is_grouped) {
    fd_backend *be = cpu();
    const int Hk = 2, Hv = 6, dk = 2, dv = 3, r = 3, group = 2 * dk + 2 * r * dv;
    float qkvz[2 * 2 * (2 * 2 + 2 * 3 * 3)], ba[2 * 12], qkv[2 * 26], z[2 * 18], b[12], a[12];
    for (int i = 0; i < (int)(sizeof qkvz / 4); i++) qkvz[i] = (float)i;
    for (int i = 0; i < 24; i++) ba[i] = 1000.0f + (float)i;
    be->gdn_split_qkvz(be, qkv, z, b, a, qkvz, ba, 2, Hk, Hv, dk, dv);
    // token 1, key head 1: q at group offset 0, k at dk, v at 2dk, z after v
    const float *g1 = qkvz + 1 * Hk * group + 1 * group;
    EXPECT(qkv[26 + 1 * dk] == g1[0]);
    EXPECT(qkv[26 + Hk * dk + 1 * dk] == g1[dk]);
    EXPECT(qkv[26 + 2 * Hk * dk + 1 * r * dv] == g1[2 * dk]);
    EXPECT(z[18 + 1 * r * dv] == g1[2 * dk + r * dv]);
    EXPECT(b[6 + 1 * r] == ba[12 + 2 * r]); // per group [b (r) | a (r)]
    EXPECT(a[6 + 1 * r] == ba[12 + 2 * r + r]);
}

// kv_copy moves positions between caches of different capacities in both layouts, so a snapshot (a cache of
// capacity n) restores exactly what attention reads.
TEST(cpu_kv_copy_both_layouts) {
    for (int layout = 0; layout < 2; layout++) {
        fd_backend *be = fd_backend_cpu_create(0);
        be->routes[0].sel[0] = layout; // kv = f32 | e4m3, before any cache exists
        const int Hkv = 2, hd = 16, H = 4, n = 20;
        const int64_t cap = 40, snap_cap = 12;
        uint64_t seed = 21 + (uint64_t)layout;
        float k[20 * 2 * 16], v[20 * 2 * 16], q[20 * 4 * 16], o1[20 * 4 * 16], o2[20 * 4 * 16];
        test_fill_uniform(k, sizeof k / 4, -2, 2, &seed);
        test_fill_uniform(v, sizeof v / 4, -2, 2, &seed);
        test_fill_uniform(q, sizeof q / 4, -1, 1, &seed);
        const size_t tb = be->kv_bytes_per_token(be, Hkv, hd);
        void *a = be->alloc(be, tb * cap), *b = be->alloc(be, tb * cap), *snap = be->alloc(be, tb * snap_cap);
        const fd_kv_view va = fd_kv_flat(a, cap), vb = fd_kv_flat(b, cap), vs = fd_kv_flat(snap, snap_cap);
        be->kv_store(be, &va, k, v, 0, NULL, n, Hkv, hd);
        be->attention(be, o1, q, &va, 0, NULL, n, H, Hkv, hd, 0.25f, 1);
        // b gets positions 0..7 directly and 8..19 through a 12-token snapshot
        be->kv_copy(be, &vb, 0, &va, 0, 8, Hkv, hd);
        be->kv_copy(be, &vs, 0, &va, 8, 12, Hkv, hd);
        be->kv_copy(be, &vb, 8, &vs, 0, 12, Hkv, hd);
        be->attention(be, o2, q, &vb, 0, NULL, n, H, Hkv, hd, 0.25f, 1);
        EXPECT(test_rel_l2(o2, o1, sizeof o1 / 4) == 0.0, "layout %d: copied cache differs", layout);
        if (layout == 1) { // and e4m3 attention stays close to the exact fp32 one
            fd_backend *ref = fd_backend_cpu_create(0);
            void *c = ref->alloc(ref, ref->kv_bytes_per_token(ref, Hkv, hd) * cap);
            const fd_kv_view vc = fd_kv_flat(c, cap);
            float o3[20 * 4 * 16];
            ref->kv_store(ref, &vc, k, v, 0, NULL, n, Hkv, hd);
            ref->attention(ref, o3, q, &vc, 0, NULL, n, H, Hkv, hd, 0.25f, 1);
            const double e = test_rel_l2(o1, o3, sizeof o1 / 4);
            EXPECT(e > 0 && e < 3e-2, "e4m3 attention rel-L2 vs fp32 %.3g", e);
            ref->free(ref, c);
            ref->destroy(ref);
        }
        be->free(be, a);
        be->free(be, b);
        be->free(be, snap);
        be->destroy(be);
    }
}
