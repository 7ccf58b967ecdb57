// CPU Gated DeltaNet ops: qwen3_next projection split, causal conv1d + SiLU, the delta-rule core in its
// serial (token recurrence) and chunked (UT/WY, chunk 64) forms, and the gated RMSNorm.
// Everything is fp32; the chunked form keeps every intermediate (the triangular solve, W, U, Vnew) in fp32
// so it agrees with the serial form to rounding.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

#define GDN_CHUNK 64

static void cpu_gdn_split_qkvz(fd_backend *be, void *qkv, void *z, void *b, void *a, const void *qkvz, const void *ba,
                               int n, int Hk, int Hv, int dk, int dv) {
    (void)be;
    const int r = Hv / Hk, group = 2 * dk + 2 * r * dv, conv_dim = 2 * Hk * dk + Hv * dv;
    float *QKV = qkv, *Z = z, *B = b, *A = a;
    const float *src = qkvz, *bsrc = ba;
    for (int t = 0; t < n; t++) {
        const float *row = src + (int64_t)t * Hk * group;
        float *q = QKV + (int64_t)t * conv_dim, *k = q + Hk * dk, *v = k + Hk * dk;
        for (int g = 0; g < Hk; g++) {
            const float *gp = row + (int64_t)g * group;
            memcpy(q + g * dk, gp, (size_t)dk * 4);
            memcpy(k + g * dk, gp + dk, (size_t)dk * 4);
            memcpy(v + g * r * dv, gp + 2 * dk, (size_t)r * dv * 4);
            memcpy(Z + (int64_t)t * Hv * dv + g * r * dv, gp + 2 * dk + r * dv, (size_t)r * dv * 4);
            const float *bp = bsrc + (int64_t)t * 2 * Hv + g * 2 * r;
            memcpy(B + (int64_t)t * Hv + g * r, bp, (size_t)r * 4);
            memcpy(A + (int64_t)t * Hv + g * r, bp + r, (size_t)r * 4);
        }
    }
}

typedef struct {
    float *out;
    const float *x;
    const fd_weight *w;
    float *state;
    float *slots; // [n, C, K-1] or NULL
    int n, C, K;
    const int32_t *parent; // a verify tree (backend.h): node t starts from its parent's slot; NULL: a chain
} conv_ctx;

static void conv_channels(void *p, int64_t c0, int64_t c1) {
    conv_ctx *c = p;
    const int K = c->K, n = c->n, C = c->C;
    float win[16], w[16];
    for (int64_t ch = c0; ch < c1; ch++) {
        cpu_w_row(c->w, ch * K, K, w);
        float *st = c->state + ch * (K - 1);
        for (int j = 0; j < K - 1; j++) win[j] = st[j];
        for (int t = 0; t < n; t++) {
            if (c->parent) { // the window left by the parent (the chain's is the one left by token t - 1)
                const int pa = c->parent[t];
                const float *from = pa < 0 ? st : c->slots + ((int64_t)pa * C + ch) * (K - 1);
                for (int j = 0; j < K - 1; j++) win[j] = from[j];
            }
            win[K - 1] = c->x[(int64_t)t * C + ch];
            float s = 0;
            for (int j = 0; j < K; j++) s += w[j] * win[j];
            c->out[(int64_t)t * C + ch] = cpu_silu(s);
            for (int j = 0; j < K - 1; j++) win[j] = win[j + 1];
            if (c->slots)
                for (int j = 0; j < K - 1; j++) c->slots[((int64_t)t * C + ch) * (K - 1) + j] = win[j];
        }
        if (!c->parent) // a tree leaves the committed state alone
            for (int j = 0; j < K - 1; j++) st[j] = win[j];
    }
}

static void cpu_conv1d_silu(fd_backend *be, void *out, const void *x, const fd_weight *w, float *conv_state, int n,
                            int C, int K, float *state_slots) {
    (void)be;
    FD_CHECK(K >= 1 && K <= 16, "conv kernel %d", K);
    conv_ctx c = {out, x, w, conv_state, state_slots, n, C, K, NULL};
    fd_parallel_for(C, 64, conv_channels, &c);
}

static void cpu_conv1d_silu_tree(fd_backend *be, void *out, const void *x, const fd_weight *w,
                                 const float *conv_state, int n, int C, int K, float *state_slots,
                                 const int32_t *parent_dev) {
    (void)be;
    FD_CHECK(K >= 1 && K <= 16 && state_slots && parent_dev, "conv tree: kernel %d, slots and parents required", K);
    conv_ctx c = {out, x, w, (float *)conv_state, state_slots, n, C, K, parent_dev}; // state only read
    fd_parallel_for(C, 64, conv_channels, &c);
}

// ---- the delta-rule core ----
typedef struct {
    float *o;             // [n, Hv, dv]
    const float *q, *k;   // [n, Hk, dk], normalised (q also scaled)
    const float *v;       // rows of the qkv buffer: v at qkv + t*conv_dim + 2*Hk*dk
    const float *g, *beta; // [n, Hv]
    float *state;         // [Hv, dk, dv]
    float *slots;         // [n, Hv, dk, dv] or NULL: the state after every token
    int n, Hk, Hv, dk, dv, conv_dim;
    const int32_t *parent; // a verify tree (backend.h): node t starts from its parent's slot; NULL: a chain
    int readonly;          // a chain that leaves `state` as it was (gdn_core_readonly): the recurrence on a copy
} gdn_ctx;

static inline const float *gdn_v(const gdn_ctx *c, int t, int h) {
    return c->v + (int64_t)t * c->conv_dim + 2 * c->Hk * c->dk + (int64_t)h * c->dv;
}

static void gdn_serial_heads(void *p, int64_t h0, int64_t h1) {
    gdn_ctx *c = p;
    const int dk = c->dk, dv = c->dv, r = c->Hv / c->Hk;
    float *kv = fd_malloc((size_t)dv * 4);
    float *work = c->parent || c->readonly ? fd_malloc((size_t)dk * dv * 4) : NULL;
    for (int64_t h = h0; h < h1; h++) {
        // a chain updates the committed state in place (a read-only one a copy of it, the same arithmetic); a tree
        // updates a copy of its parent's state per node
        float *S = work ? work : c->state + h * dk * dv;
        const int kh = (int)(h / r);
        if (c->readonly) memcpy(S, c->state + h * dk * dv, (size_t)dk * dv * sizeof(float));
        for (int t = 0; t < c->n; t++) {
            if (c->parent) {
                const int pa = c->parent[t];
                const float *from = pa < 0 ? c->state + h * dk * dv : c->slots + ((int64_t)pa * c->Hv + h) * dk * dv;
                memcpy(S, from, (size_t)dk * dv * sizeof(float));
            }
            const float *q = c->q + ((int64_t)t * c->Hk + kh) * dk, *k = c->k + ((int64_t)t * c->Hk + kh) * dk;
            const float *v = gdn_v(c, t, (int)h);
            const float decay = expf(c->g[(int64_t)t * c->Hv + h]), beta = c->beta[(int64_t)t * c->Hv + h];
            for (int64_t i = 0; i < (int64_t)dk * dv; i++) S[i] *= decay;
            for (int j = 0; j < dv; j++) kv[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) kv[j] += S[i * dv + j] * k[i];
            for (int j = 0; j < dv; j++) kv[j] = beta * (v[j] - kv[j]);
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) S[i * dv + j] += k[i] * kv[j];
            float *o = c->o + ((int64_t)t * c->Hv + h) * dv;
            for (int j = 0; j < dv; j++) o[j] = 0;
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) o[j] += S[i * dv + j] * q[i];
            if (c->slots) memcpy(c->slots + ((int64_t)t * c->Hv + h) * dk * dv, S, (size_t)dk * dv * sizeof(float));
        }
    }
    free(kv);
    free(work);
}

// Chunked form per chunk of c tokens (γ = in-chunk cumsum of g, Γ_ij = exp(γ_i − γ_j) for j ≤ i):
//   L = strict_lower((β⊙K) Kᵀ ⊙ Γ);  U = (I+L)⁻¹ (β⊙V);  W = (I+L)⁻¹ (β⊙K⊙exp γ)   (forward substitution)
//   Vnew = U − W S;  O = (Q⊙exp γ) S + lower_incl(Q Kᵀ ⊙ Γ) Vnew;  S ← exp(γ_c) S + (K⊙exp(γ_c − γ))ᵀ Vnew
static void gdn_chunked_heads(void *p, int64_t h0, int64_t h1) {
    gdn_ctx *c = p;
    const int dk = c->dk, dv = c->dv, r = c->Hv / c->Hk, C = GDN_CHUNK;
    float *gam = fd_malloc(C * 4), *L = fd_malloc((size_t)C * C * 4), *U = fd_malloc((size_t)C * dv * 4);
    float *W = fd_malloc((size_t)C * dk * 4), *Vn = fd_malloc((size_t)C * dv * 4);
    for (int64_t h = h0; h < h1; h++) {
        float *S = c->state + h * dk * dv;
        const int kh = (int)(h / r);
        for (int t0 = 0; t0 < c->n; t0 += C) {
            const int cs = c->n - t0 < C ? c->n - t0 : C;
#define QROW(i) (c->q + ((int64_t)(t0 + (i)) * c->Hk + kh) * dk)
#define KROW(i) (c->k + ((int64_t)(t0 + (i)) * c->Hk + kh) * dk)
#define BETA(i) (c->beta[(int64_t)(t0 + (i)) * c->Hv + h])
            float acc = 0;
            for (int i = 0; i < cs; i++) gam[i] = acc += c->g[(int64_t)(t0 + i) * c->Hv + h];
            for (int i = 0; i < cs; i++)
                for (int j = 0; j < i; j++) {
                    float d = 0;
                    const float *ki = KROW(i), *kj = KROW(j);
                    for (int x = 0; x < dk; x++) d += ki[x] * kj[x];
                    L[i * C + j] = BETA(i) * d * expf(gam[i] - gam[j]);
                }
            // forward substitution: row i of U/W = rhs_i − Σ_{j<i} L_ij row_j
            for (int i = 0; i < cs; i++) {
                const float *v = gdn_v(c, t0 + i, (int)h), *k = KROW(i);
                const float b = BETA(i), eg = expf(gam[i]);
                float *u = U + i * dv, *w = W + i * dk;
                for (int j = 0; j < dv; j++) u[j] = b * v[j];
                for (int x = 0; x < dk; x++) w[x] = b * k[x] * eg;
                for (int j = 0; j < i; j++) {
                    const float l = L[i * C + j];
                    for (int y = 0; y < dv; y++) u[y] -= l * U[j * dv + y];
                    for (int x = 0; x < dk; x++) w[x] -= l * W[j * dk + x];
                }
            }
            // Vnew = U − W S
            for (int i = 0; i < cs; i++) {
                float *vn = Vn + i * dv;
                memcpy(vn, U + i * dv, (size_t)dv * 4);
                for (int x = 0; x < dk; x++) {
                    const float wx = W[i * dk + x];
                    for (int y = 0; y < dv; y++) vn[y] -= wx * S[x * dv + y];
                }
            }
            // O = (Q ⊙ exp γ) S + lower_incl(Q Kᵀ ⊙ Γ) Vnew
            for (int i = 0; i < cs; i++) {
                const float *q = QROW(i);
                float *o = c->o + ((int64_t)(t0 + i) * c->Hv + h) * dv;
                const float eg = expf(gam[i]);
                for (int y = 0; y < dv; y++) o[y] = 0;
                for (int x = 0; x < dk; x++) {
                    const float qx = q[x] * eg;
                    for (int y = 0; y < dv; y++) o[y] += qx * S[x * dv + y];
                }
                for (int j = 0; j <= i; j++) {
                    const float *k = KROW(j);
                    float d = 0;
                    for (int x = 0; x < dk; x++) d += q[x] * k[x];
                    d *= expf(gam[i] - gam[j]);
                    for (int y = 0; y < dv; y++) o[y] += d * Vn[j * dv + y];
                }
            }
            // S ← exp(γ_last) S + Σ_i (K_i exp(γ_last − γ_i)) Vnew_iᵀ
            const float glast = gam[cs - 1], el = expf(glast);
            for (int64_t i = 0; i < (int64_t)dk * dv; i++) S[i] *= el;
            for (int i = 0; i < cs; i++) {
                const float *k = KROW(i);
                const float e = expf(glast - gam[i]);
                for (int x = 0; x < dk; x++) {
                    const float kx = k[x] * e;
                    for (int y = 0; y < dv; y++) S[x * dv + y] += kx * Vn[i * dv + y];
                }
            }
#undef QROW
#undef KROW
#undef BETA
        }
    }
    free(gam);
    free(L);
    free(U);
    free(W);
    free(Vn);
}

static void gdn_core_run(fd_gdn_route route, void *o, const void *qkv, const void *b, const void *a,
                         const fd_weight *A_log, const fd_weight *dt_bias, float *state, int n, int Hk, int Hv, int dk,
                         int dv, float *state_slots, const int32_t *parent, int readonly) {
    const int conv_dim = 2 * Hk * dk + Hv * dv;
    const float *X = qkv, *B = b, *A = a;
    float *q = fd_malloc((size_t)n * Hk * dk * 4), *k = fd_malloc((size_t)n * Hk * dk * 4);
    float *g = fd_malloc((size_t)n * Hv * 4), *beta = fd_malloc((size_t)n * Hv * 4);
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < n; t++) {
        for (int hh = 0; hh < Hk; hh++) {
            const float *qs = X + (int64_t)t * conv_dim + hh * dk, *ks = qs + Hk * dk;
            float *qd = q + ((int64_t)t * Hk + hh) * dk, *kd = k + ((int64_t)t * Hk + hh) * dk;
            float sq = 0, sk = 0;
            for (int x = 0; x < dk; x++) {
                sq += qs[x] * qs[x];
                sk += ks[x] * ks[x];
            }
            const float iq = 1.0f / sqrtf(sq + 1e-6f), ik = 1.0f / sqrtf(sk + 1e-6f);
            for (int x = 0; x < dk; x++) {
                qd[x] = qs[x] * iq * qscale;
                kd[x] = ks[x] * ik;
            }
        }
        for (int h = 0; h < Hv; h++) {
            const int64_t i = (int64_t)t * Hv + h;
            const float x = A[i] + cpu_w_at(dt_bias, h);
            const float sp = x > 20.0f ? x : log1pf(expf(x)); // torch softplus, threshold 20
            g[i] = -expf(cpu_w_at(A_log, h)) * sp;
            beta[i] = cpu_sigmoid(B[i]);
        }
    }
    gdn_ctx c = {o, q, k, X, g, beta, state, state_slots, n, Hk, Hv, dk, dv, conv_dim, parent, readonly};
    // Per-token state slots only exist in the recurrence; the engine asks for them with FD_GDN_SERIAL.
    FD_CHECK(!state_slots || route == FD_GDN_SERIAL || n == 1, "GDN state slots need the serial route");
    fd_parallel_for(Hv, 1, route == FD_GDN_SERIAL || n == 1 ? gdn_serial_heads : gdn_chunked_heads, &c);
    free(q);
    free(k);
    free(g);
    free(beta);
}

static void cpu_gdn_core(fd_backend *be, fd_gdn_route route, void *o, const void *qkv, const void *b, const void *a,
                         const fd_weight *A_log, const fd_weight *dt_bias, float *state, int n, int Hk, int Hv, int dk,
                         int dv, float *state_slots) {
    (void)be;
    gdn_core_run(route, o, qkv, b, a, A_log, dt_bias, state, n, Hk, Hv, dk, dv, state_slots, NULL, 0);
}

static void cpu_gdn_core_readonly(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                                  const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk,
                                  int Hv, int dk, int dv) {
    (void)be;
    // the state is only read (gdn_serial_heads runs the recurrence on a copy of it)
    gdn_core_run(FD_GDN_SERIAL, o, qkv, b, a, A_log, dt_bias, (float *)state, n, Hk, Hv, dk, dv, NULL, NULL, 1);
}

static void cpu_gdn_core_tree(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                              const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk,
                              int Hv, int dk, int dv, float *state_slots, const int32_t *parent_dev) {
    (void)be;
    FD_CHECK(state_slots && parent_dev, "GDN tree: slots and parents required");
    // the state is only read (gdn_serial_heads copies it per node)
    gdn_core_run(FD_GDN_SERIAL, o, qkv, b, a, A_log, dt_bias, (float *)state, n, Hk, Hv, dk, dv, state_slots,
                 parent_dev, 0);
}

static void cpu_gated_rmsnorm(fd_backend *be, void *out, const void *x, const void *z, const fd_weight *w,
                              int64_t rows, int dv, float eps) {
    (void)be;
    const float *X = x, *Z = z;
    float *O = out;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = X + r * dv, *zr = Z + r * dv;
        float *orow = O + r * dv;
        double ss = 0;
        for (int i = 0; i < dv; i++) ss += (double)xr[i] * xr[i];
        const float inv = 1.0f / sqrtf((float)(ss / dv) + eps);
        for (int i = 0; i < dv; i++) orow[i] = cpu_w_at(w, i) * (xr[i] * inv) * cpu_silu(zr[i]);
    }
}

void cpu_install_gdn(fd_backend *be) {
    be->gdn_split_qkvz = cpu_gdn_split_qkvz;
    be->conv1d_silu = cpu_conv1d_silu;
    be->gdn_core = cpu_gdn_core;
    be->gdn_core_readonly = cpu_gdn_core_readonly;
    be->conv1d_silu_tree = cpu_conv1d_silu_tree;
    be->gdn_core_tree = cpu_gdn_core_tree;
    be->gated_rmsnorm = cpu_gated_rmsnorm;
}
