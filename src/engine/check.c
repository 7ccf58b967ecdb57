// `flashdelta check` screens (see check.h). The float64 references follow backend.h's contracts and HF's formulas:
// the GEMM as sum_k x W; the gated delta rule token by token (torch_recurrent_gated_delta_rule: decay, delta
// update, readout); softmax attention over every visible key. Inputs are drawn here (xorshift), so a run is
// reproducible and the screens need no files.
#include "engine/check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    fd_backend *be;
    FILE *out;
    const char *inject;
    uint64_t seed;
    int screens, failed, nondet;
} ck;

static float rnd(ck *c, float lo, float hi) {
    c->seed ^= c->seed << 13, c->seed ^= c->seed >> 7, c->seed ^= c->seed << 17;
    return lo + (hi - lo) * (float)((c->seed >> 40) * (1.0 / 16777216.0));
}
static float *rnd_vec(ck *c, size_t n, float lo, float hi) {
    float *x = fd_malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) x[i] = rnd(c, lo, hi);
    return x;
}

// A device copy of host data, and a host copy of device data.
static void *up(ck *c, const void *h, size_t bytes) {
    void *d = c->be->alloc(c->be, bytes + 16);
    c->be->to_device(c->be, d, h, bytes);
    return d;
}
static float *down(ck *c, const void *d, size_t n) {
    float *h = fd_malloc(n * sizeof(float) + 4);
    c->be->to_host(c->be, h, d, n * sizeof(float));
    return h;
}

// The selected value of a backend route, or NULL when the backend has no route of that name.
static const char *route_value(const fd_backend *be, const char *name) {
    for (int i = 0; i < be->n_routes; i++)
        if (!strcmp(be->routes[i].name, name)) return be->routes[i].values[*be->routes[i].sel];
    return NULL;
}

static double rel_l2(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        num += d * d, den += want[i] * want[i];
    }
    if (isnan(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// FD_CHECK_INJECT names a screen (prefix): its output is made wrong by 25 % before the comparison.
static void inject(ck *c, const char *screen, float *got, size_t n) {
    if (!c->inject || strncmp(screen, c->inject, strlen(c->inject))) return;
    for (size_t i = 0; i < n; i++) got[i] = got[i] * 1.25f + (i == 0);
}

// One row of the table; `same`: the op's second run gave the same bits.
static void report(ck *c, const char *screen, const char *shape, double err, double bound, int same) {
    const int ok = err <= bound && same;
    c->screens++;
    c->failed += !ok;
    c->nondet += !same;
    fprintf(c->out, "%-22s %-38s %10.2e %10.1e  %s%s\n", screen, shape, err, bound, ok ? "ok" : "FAIL",
            same ? "" : " (two runs differ)");
}

// ---- GEMM: out[n, m] f32 = x[n, k] W[m, k]^T with bf16 W, at n = 1, 16 (the small-n route) and 64 ----
static void screen_gemm(ck *c, const char *what, int m, int k) {
    fd_backend *be = c->be;
    const char *act = route_value(be, "gemm_act");
    // bf16 activations (8 significant bits) ~3e-3 expected; bf16x2 ~1e-5; fp32 (cpu) ~1e-6
    const double bound = !act ? 1e-5 : !strcmp(act, "bf16x2") ? 1e-4 : 2e-2;
    uint16_t *w16 = fd_malloc((size_t)m * k * 2);
    for (size_t i = 0; i < (size_t)m * k; i++) w16[i] = fd_f32_to_bf16(rnd(c, -0.05f, 0.05f));
    fd_weight W;
    memset(&W, 0, sizeof W);
    W.name = "check.W", W.fmt = FD_WFMT_DENSE, W.dtype = FD_BF16, W.rows = m, W.cols = k, W.data = w16;
    be->upload_weight(be, &W);
    const int step = m > 256 ? m / 256 : 1; // the reference takes every step-th output column
    static const int ns[] = {1, 16, 64};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        float *x = rnd_vec(c, (size_t)n * k, -1.f, 1.f);
        void *dx = up(c, x, (size_t)n * k * 4), *dout = be->alloc(be, (size_t)n * m * 4);
        be->matmul(be, dout, dx, &W, n, 1);
        float *got = down(c, dout, (size_t)n * m);
        be->matmul(be, dout, dx, &W, n, 1);
        float *again = down(c, dout, (size_t)n * m);
        const int same = !memcmp(got, again, (size_t)n * m * 4);
        inject(c, what, got, (size_t)n * m);
        size_t cnt = 0;
        double *want = fd_malloc(sizeof(double) * (size_t)n * (size_t)(m / step + 1));
        float *sel = fd_malloc(sizeof(float) * (size_t)n * (size_t)(m / step + 1));
        for (int t = 0; t < n; t++)
            for (int r = 0; r < m; r += step) {
                double s = 0;
                for (int i = 0; i < k; i++) s += (double)x[(size_t)t * k + i] * fd_bf16_to_f32(w16[(size_t)r * k + i]);
                want[cnt] = s, sel[cnt++] = got[(size_t)t * m + r];
            }
        char name[48], shape[64];
        snprintf(name, sizeof name, "%s n=%d", what, n);
        snprintf(shape, sizeof shape, "%d x %d bf16, act %s", m, k, act ? act : "f32");
        report(c, name, shape, rel_l2(sel, want, cnt), bound, same);
        free(want), free(sel), free(x), free(got), free(again);
        be->free(be, dx), be->free(be, dout);
    }
    be->release_weight(be, &W);
    free(w16);
}

// ---- GDN core: the gated delta rule over n tokens from a random state, both routes ----
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

// o [n, Hv, dv] and S [Hv, dk, dv] (in place) in float64, from the op's inputs.
static void gdn_ref(double *o, double *S, const float *qkv, const float *b, const float *a, const float *A_log,
                    const float *dt_bias, int n, int Hk, int Hv, int dk, int dv) {
    const int conv_dim = 2 * Hk * dk + Hv * dv, r = Hv / Hk;
    double *q = fd_malloc(sizeof(double) * dk), *kk = fd_malloc(sizeof(double) * dk), *kv = fd_malloc(sizeof(double) * dv);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++) {
            const float *row = qkv + (size_t)t * conv_dim, *qs = row + (h / r) * dk, *ks = row + Hk * dk + (h / r) * dk;
            const float *v = row + 2 * Hk * dk + (size_t)h * dv;
            double sq = 0, sk = 0;
            for (int i = 0; i < dk; i++) sq += (double)qs[i] * qs[i], sk += (double)ks[i] * ks[i];
            for (int i = 0; i < dk; i++) {
                q[i] = qs[i] / sqrt(sq + 1e-6) / sqrt((double)dk);
                kk[i] = ks[i] / sqrt(sk + 1e-6);
            }
            const size_t bi = (size_t)t * Hv + h;
            const double beta = 1 / (1 + exp(-(double)b[bi])), g = -exp((double)A_log[h]) * softplus(a[bi] + dt_bias[h]);
            double *Sh = S + (size_t)h * dk * dv;
            for (size_t i = 0; i < (size_t)dk * dv; i++) Sh[i] *= exp(g);
            for (int j = 0; j < dv; j++) kv[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) kv[j] += Sh[(size_t)i * dv + j] * kk[i];
            for (int j = 0; j < dv; j++) kv[j] = beta * (v[j] - kv[j]);
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) Sh[(size_t)i * dv + j] += kk[i] * kv[j];
            double *oh = o + bi * dv;
            for (int j = 0; j < dv; j++) oh[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) oh[j] += Sh[(size_t)i * dv + j] * q[i];
        }
    free(q), free(kk), free(kv);
}

static fd_weight vec_weight(fd_backend *be, const char *name, const float *data, int n) {
    fd_weight w;
    memset(&w, 0, sizeof w);
    w.name = name, w.fmt = FD_WFMT_DENSE, w.dtype = FD_F32, w.rows = n, w.cols = 1, w.data = data;
    be->upload_weight(be, &w);
    return w;
}

static void screen_gdn(ck *c, int n, int Hk, int Hv, int dk, int dv) {
    fd_backend *be = c->be;
    const int conv_dim = 2 * Hk * dk + Hv * dv;
    const size_t ns = (size_t)Hv * dk * dv, no = (size_t)n * Hv * dv;
    float *qkv = rnd_vec(c, (size_t)n * conv_dim, -1.f, 1.f), *b = rnd_vec(c, (size_t)n * Hv, -3.f, 3.f);
    float *a = rnd_vec(c, (size_t)n * Hv, -4.f, 2.f), *A_log = rnd_vec(c, Hv, -1.f, 2.f);
    float *dt_bias = rnd_vec(c, Hv, -1.f, 1.f), *S0 = rnd_vec(c, ns, -0.1f, 0.1f);
    double *want_o = fd_malloc(sizeof(double) * no), *want_S = fd_malloc(sizeof(double) * ns);
    for (size_t i = 0; i < ns; i++) want_S[i] = S0[i];
    gdn_ref(want_o, want_S, qkv, b, a, A_log, dt_bias, n, Hk, Hv, dk, dv);
    fd_weight wA = vec_weight(be, "check.A_log", A_log, Hv), wdt = vec_weight(be, "check.dt_bias", dt_bias, Hv);
    void *dqkv = up(c, qkv, (size_t)n * conv_dim * 4), *db = up(c, b, (size_t)n * Hv * 4), *da = up(c, a, (size_t)n * Hv * 4);
    void *dS = be->alloc(be, ns * 4), *dout = be->alloc(be, no * 4);
    static const struct {
        fd_gdn_route route;
        const char *name;
    } routes[] = {{FD_GDN_CHUNKED, "gdn chunked"}, {FD_GDN_SERIAL, "gdn serial"}};
    for (int ri = 0; ri < 2; ri++) {
        float *got_o[2], *got_S[2];
        for (int run = 0; run < 2; run++) {
            be->to_device(be, dS, S0, ns * 4);
            be->gdn_core(be, routes[ri].route, dout, dqkv, db, da, &wA, &wdt, dS, n, Hk, Hv, dk, dv, NULL);
            got_o[run] = down(c, dout, no), got_S[run] = down(c, dS, ns);
        }
        const int same = !memcmp(got_o[0], got_o[1], no * 4) && !memcmp(got_S[0], got_S[1], ns * 4);
        inject(c, routes[ri].name, got_o[0], no);
        char name[48], shape[64];
        snprintf(shape, sizeof shape, "%d tokens, %d/%d heads, %dx%d", n, Hk, Hv, dk, dv);
        // fp32 on both backends; long decays amplify the order differences of the chunked form (~1e-5 expected).
        // The cuda chunk kernels in bf16 (route gdn_chunk=bf16) round where FLA rounds: ~3-5e-3 expected.
        const char *chunk = route_value(be, "gdn_chunk");
        const double bound = routes[ri].route == FD_GDN_CHUNKED && chunk && !strcmp(chunk, "bf16") ? 1e-2 : 2e-4;
        snprintf(name, sizeof name, "%s: output", routes[ri].name);
        report(c, name, shape, rel_l2(got_o[0], want_o, no), bound, same);
        snprintf(name, sizeof name, "%s: state", routes[ri].name);
        report(c, name, shape, rel_l2(got_S[0], want_S, ns), bound, same);
        for (int run = 0; run < 2; run++) free(got_o[run]), free(got_S[run]);
    }
    be->release_weight(be, &wA), be->release_weight(be, &wdt);
    be->free(be, dqkv), be->free(be, db), be->free(be, da), be->free(be, dS), be->free(be, dout);
    free(qkv), free(b), free(a), free(A_log), free(dt_bias), free(S0), free(want_o), free(want_S);
}

// ---- attention: n causal queries at positions pos0.. over the keys 0 .. pos0 + n - 1 of a cache ----
static void screen_attention(ck *c, const char *what, int n, int64_t pos0, int H, int Hkv, int hd) {
    fd_backend *be = c->be;
    const char *kv = route_value(be, "kv");
    // f32 cache (cpu) ~1e-6; a bf16 cache and the mma kernel's bf16 Q / P ~3e-3; e4m3 (3 mantissa bits) ~3e-2
    const double bound = !kv || !strcmp(kv, "f32") ? 1e-5 : !strcmp(kv, "e4m3") ? 8e-2 : 1e-2;
    const int64_t T = pos0 + n;
    const size_t nkv = (size_t)T * Hkv * hd, nq = (size_t)n * H * hd;
    float *K = rnd_vec(c, nkv, -1.f, 1.f), *V = rnd_vec(c, nkv, -1.f, 1.f), *q = rnd_vec(c, nq, -1.f, 1.f);
    void *dK = up(c, K, nkv * 4), *dV = up(c, V, nkv * 4), *dq = up(c, q, nq * 4), *dout = be->alloc(be, nq * 4);
    void *cache = be->alloc(be, be->kv_bytes_per_token(be, Hkv, hd) * (size_t)T);
    const fd_kv_view view = fd_kv_flat(cache, T);
    be->kv_store(be, &view, dK, dV, 0, NULL, (int)T, Hkv, hd);
    const float scale = 1.0f / sqrtf((float)hd);
    be->attention(be, dout, dq, &view, pos0, NULL, n, H, Hkv, hd, scale, 1);
    float *got = down(c, dout, nq);
    be->attention(be, dout, dq, &view, pos0, NULL, n, H, Hkv, hd, scale, 1);
    float *again = down(c, dout, nq);
    const int same = !memcmp(got, again, nq * 4);
    inject(c, what, got, nq);
    double *want = fd_malloc(sizeof(double) * nq), *p = fd_malloc(sizeof(double) * (size_t)T);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < H; h++) {
            const int g = h / (H / Hkv);
            const float *qi = q + ((size_t)i * H + h) * hd;
            const int64_t keys = pos0 + i + 1;
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < keys; j++) {
                const float *kj = K + ((size_t)j * Hkv + g) * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += (double)qi[d] * kj[d];
                p[j] = s * scale, mx = p[j] > mx ? p[j] : mx;
            }
            for (int64_t j = 0; j < keys; j++) sum += p[j] = exp(p[j] - mx);
            double *o = want + ((size_t)i * H + h) * hd;
            for (int d = 0; d < hd; d++) o[d] = 0;
            for (int64_t j = 0; j < keys; j++)
                for (int d = 0; d < hd; d++) o[d] += p[j] / sum * V[((size_t)j * Hkv + g) * hd + d];
        }
    char shape[64];
    snprintf(shape, sizeof shape, "%d q at %lld, %d/%d heads x %d, kv %s", n, (long long)pos0, H, Hkv, hd,
             kv ? kv : "f32");
    report(c, what, shape, rel_l2(got, want, nq), bound, same);
    be->free(be, dK), be->free(be, dV), be->free(be, dq), be->free(be, dout), be->free(be, cache);
    free(K), free(V), free(q), free(got), free(again), free(want), free(p);
}

int fd_check_run(fd_backend *be, const fd_config *cfg, FILE *out) { return fd_check_run_ranks(&be, 0, cfg, out); }

int fd_check_run_ranks(fd_backend *const *bes, int tp, const fd_config *cfg, FILE *out) {
    fd_backend *be = bes[0];
    ck c = {be, out, getenv("FD_CHECK_INJECT"), 0x5eed5eedc0ffeeull, 0, 0, 0};
    if (c.inject && !*c.inject) c.inject = NULL;
    fprintf(out, "check: backend %s, routes:", be->name);
    for (int i = 0; i < be->n_routes; i++) fprintf(out, " %s=%s", be->routes[i].name, route_value(be, be->routes[i].name));
    fprintf(out, "%s\n", c.inject ? " (FD_CHECK_INJECT is set: a screen is made wrong on purpose)" : "");
    fprintf(out, "%-22s %-38s %10s %10s  %s\n", "screen", "shape", "rel-L2", "bound", "result");
    // The model's shapes, or small ones; the GEMMs take its FFN (up: hidden -> intermediate, down: back).
    const int d = cfg ? cfg->hidden_size : 512;
    const int inter = cfg ? (cfg->intermediate_size ? cfg->intermediate_size : cfg->moe_intermediate_size) : 1024;
    screen_gemm(&c, "gemm up", inter, d);
    screen_gemm(&c, "gemm down", d, inter);
    if (!cfg || cfg->gdn_num_v_heads)
        screen_gdn(&c, 128, cfg ? cfg->gdn_num_k_heads : 2, cfg ? cfg->gdn_num_v_heads : 4, cfg ? cfg->gdn_k_dim : 64,
                   cfg ? cfg->gdn_v_dim : 64);
    const int H = cfg ? cfg->num_heads : 8, Hkv = cfg ? cfg->num_kv_heads : 2, hd = cfg ? cfg->head_dim : 128;
    screen_attention(&c, "attention prefill", 192, 0, H, Hkv, hd);
    screen_attention(&c, "attention decode", 1, 1023, H, Hkv, hd);
    if (tp > 0) c.failed += fd_check_ranks(bes, tp, out, &c.screens);
    fprintf(out, "%-22s %-38s %10s %10s  %s\n", "determinism", "every screen run twice", "-", "bitwise",
            c.nondet ? "FAIL" : "ok");
    c.screens++;
    c.failed += c.nondet > 0;
    fprintf(out, "check: %d screens, %d failed\n", c.screens, c.failed);
    return c.failed;
}
