// The fused ops of the decoder layer (src/cuda/norm_rope.cu) against the CPU reference on fresh random inputs,
// GPU outputs poisoned with NaN before each call (test_rel_l2 returns INFINITY on any NaN):
//  - add_rmsnorm: x += y then out = rmsnorm(x) * (1+w | w). The updated residual must equal the CPU's exactly (an
//    fp32 add either way), the norm within TOL_F32; and the GPU result must be bitwise the GPU's add then rmsnorm
//    (the claim of backend.h, and why the engine's outputs did not move when it switched);
//  - qk_norm_rope: split of q|gate, zero-centred q/k norms and partial NeoX RoPE in one op. gate exact, q and k
//    within TOL_F32; pos_dev (with a wrong host pos0) bitwise the host-position call;
//  - both: row invariance, bitwise: the last row of an n-row call == a 1-row call on that row alone (at its own
//    position), which is what keeps a 1-token decode step and a verify block in agreement.
// Shapes: n = 1, 16, 4096 at the 27B geometry (hidden 5120; 24 q / 4 kv heads x 256, rot 64) and small ones
// (the fixtures' hidden 64 / head_dim 16, rot 4; full rotary; no rotary).
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

CUDA_RIG(0x5eed5eedull)

static float *dup(const float *x, size_t n) {
    float *y = fd_malloc(n * sizeof(float) + 4);
    memcpy(y, x, n * sizeof(float));
    return y;
}
// A norm weight vector (fp32 as published by the fixtures; vectors are fp32 on the device in any case).
static tw mkvec(int64_t n) {
    return mkw("norm", n, 1, FD_F32, -0.5f, 0.5f);
}

static void same(const char *what, const float *a, const float *b, size_t n) {
    EXPECT(!memcmp(a, b, n * sizeof(float)), "%s: not bitwise equal", what);
}

static void check_add_rmsnorm(const int (*shapes)[2], size_t n_shapes) {
    for (size_t s = 0; s < n_shapes; s++)
        for (int plus_one = 1; plus_one >= 0; plus_one--) {
            const int n = shapes[s][0], d = shapes[s][1];
            if (!plus_one && n == 4096) continue; // plus_one only switches the weight term; small shapes cover it
            const size_t cnt = (size_t)n * d;
            tw w = mkvec(d);
            float *x = rnd(cnt, -2, 2), *y = rnd(cnt, -2, 2);
            // CPU reference
            float *xc = dup(x, cnt), *hc = fd_malloc(cnt * 4 + 4);
            cpu()->add_rmsnorm(cpu(), hc, xc, y, &w.c, n, d, 1e-6f, plus_one);
            // GPU fused
            void *dx = up(x, cnt), *dy = up(y, cnt), *dh = poisoned(cnt);
            gpu()->add_rmsnorm(gpu(), dh, dx, dy, &w.g, n, d, 1e-6f, plus_one);
            float *xg = down(dx, cnt), *hg = down(dh, cnt);
            char what[112];
            snprintf(what, sizeof what, "add_rmsnorm n=%d d=%d plus_one=%d (x += y)", n, d, plus_one);
            cmp(what, xg, xc, cnt, TOL_EXACT);
            snprintf(what, sizeof what, "add_rmsnorm n=%d d=%d plus_one=%d (norm)", n, d, plus_one);
            cmp(what, hg, hc, cnt, TOL_F32);
            // GPU unfused: add then rmsnorm, bitwise the fused op
            void *dx2 = up(x, cnt), *dh2 = poisoned(cnt);
            gpu()->add(gpu(), dx2, dy, (int64_t)cnt);
            gpu()->rmsnorm(gpu(), dh2, dx2, &w.g, n, d, 1e-6f, plus_one);
            float *xg2 = down(dx2, cnt), *hg2 = down(dh2, cnt);
            snprintf(what, sizeof what, "add_rmsnorm n=%d d=%d plus_one=%d vs add + rmsnorm on the GPU", n, d,
                     plus_one);
            same(what, xg2, xg, cnt);
            same(what, hg2, hg, cnt);
            // the last row alone
            if (n > 1) {
                const size_t off = (size_t)(n - 1) * d;
                void *dx1 = up(x + off, (size_t)d), *dy1 = up(y + off, (size_t)d), *dh1 = poisoned((size_t)d);
                gpu()->add_rmsnorm(gpu(), dh1, dx1, dy1, &w.g, 1, d, 1e-6f, plus_one);
                float *x1 = down(dx1, (size_t)d), *h1 = down(dh1, (size_t)d);
                snprintf(what, sizeof what, "add_rmsnorm n=%d d=%d: last row vs a 1-row call", n, d);
                same(what, x1, xg + off, (size_t)d);
                same(what, h1, hg + off, (size_t)d);
                free(x1), free(h1), dfree(dx1), dfree(dy1), dfree(dh1);
            }
            free(x), free(y), free(xc), free(hc), free(xg), free(hg), free(xg2), free(hg2);
            dfree(dx), dfree(dy), dfree(dh), dfree(dx2), dfree(dh2), freew(&w);
        }
}

TEST(cuda_add_rmsnorm) {
    const int shapes[][2] = {{1, 5120}, {16, 5120}, {4096, 5120}, {1, 64}, {16, 64}, {4096, 64}, {7, 1000}, {3, 96}};
    check_add_rmsnorm(shapes, sizeof shapes / sizeof shapes[0]);
}

// One qk_norm_rope call on the GPU at rows [t0, t0 + m) of the inputs; outputs downloaded into q, g, k.
typedef struct {
    int H, Hkv, hd, rot;
} qk_geo;
static void gpu_qk(const qk_geo *G, const float *qg, const float *k_in, int t0, int m, const tw *qn, const tw *kn,
                   int64_t pos0, const int64_t *pos_dev, float **q, float **g, float **k) {
    const size_t nq = (size_t)m * G->H * G->hd, nk = (size_t)m * G->Hkv * G->hd;
    void *dqg = up(qg + (size_t)t0 * G->H * 2 * G->hd, 2 * nq), *dk = up(k_in + (size_t)t0 * G->Hkv * G->hd, nk);
    void *dq = poisoned(nq), *dg = poisoned(nq);
    gpu()->qk_norm_rope(gpu(), dq, dg, dk, dqg, &qn->g, &kn->g, m, G->H, G->Hkv, G->hd, G->rot, 1e7f, 1e-6f, pos0,
                        pos_dev);
    *q = down(dq, nq), *g = down(dg, nq), *k = down(dk, nk);
    dfree(dqg), dfree(dk), dfree(dq), dfree(dg);
}

static const qk_geo qk_geos[] = {{24, 4, 256, 64}, {4, 2, 16, 4}, {6, 2, 128, 128}, {3, 1, 64, 0}, {2, 2, 32, 8}};

static void check_qk_norm_rope(const int *ns, size_t n_ns) {
    const int64_t pos0s[] = {0, 1000, 200000};
    int64_t *dpos = gpu()->alloc(gpu(), sizeof(int64_t));
    for (size_t gi = 0; gi < sizeof qk_geos / sizeof qk_geos[0]; gi++)
        for (size_t s = 0; s < n_ns; s++) {
            const qk_geo *G = &qk_geos[gi];
            const int n = ns[s];
            const int64_t pos0 = pos0s[(gi + s) % 3];
            const size_t nq = (size_t)n * G->H * G->hd, nk = (size_t)n * G->Hkv * G->hd;
            tw qn = mkvec(G->hd), kn = mkvec(G->hd);
            float *qg = rnd(2 * nq, -2, 2), *k = rnd(nk, -2, 2);
            float *qc = fd_malloc(nq * 4 + 4), *gc = fd_malloc(nq * 4 + 4), *kc = dup(k, nk);
            cpu()->qk_norm_rope(cpu(), qc, gc, kc, qg, &qn.c, &kn.c, n, G->H, G->Hkv, G->hd, G->rot, 1e7f, 1e-6f,
                                pos0, NULL);
            float *q1, *g1, *k1;
            gpu_qk(G, qg, k, 0, n, &qn, &kn, pos0, NULL, &q1, &g1, &k1);
            char what[112];
            snprintf(what, sizeof what, "qk_norm_rope n=%d H=%d Hkv=%d hd=%d rot=%d pos0=%lld (q)", n, G->H, G->Hkv,
                     G->hd, G->rot, (long long)pos0);
            cmp(what, q1, qc, nq, TOL_F32);
            snprintf(what, sizeof what, "qk_norm_rope n=%d H=%d hd=%d (gate)", n, G->H, G->hd);
            cmp(what, g1, gc, nq, TOL_EXACT);
            snprintf(what, sizeof what, "qk_norm_rope n=%d Hkv=%d hd=%d rot=%d (k)", n, G->Hkv, G->hd, G->rot);
            cmp(what, k1, kc, nk, TOL_F32);
            // the position read on the device when the op runs; the host pos0 is wrong on purpose
            gpu()->to_device(gpu(), dpos, &pos0, sizeof pos0);
            float *q2, *g2, *k2;
            gpu_qk(G, qg, k, 0, n, &qn, &kn, pos0 + 12345, dpos, &q2, &g2, &k2);
            snprintf(what, sizeof what, "qk_norm_rope n=%d hd=%d: pos_dev vs pos0", n, G->hd);
            same(what, q2, q1, nq), same(what, g2, g1, nq), same(what, k2, k1, nk);
            free(q2), free(g2), free(k2);
            // the last token alone, at its own position
            if (n > 1) {
                float *q3, *g3, *k3;
                gpu_qk(G, qg, k, n - 1, 1, &qn, &kn, pos0 + n - 1, NULL, &q3, &g3, &k3);
                const size_t rq = (size_t)G->H * G->hd, rk = (size_t)G->Hkv * G->hd;
                snprintf(what, sizeof what, "qk_norm_rope n=%d hd=%d: last token vs a 1-token call", n, G->hd);
                same(what, q3, q1 + (size_t)(n - 1) * rq, rq), same(what, g3, g1 + (size_t)(n - 1) * rq, rq);
                same(what, k3, k1 + (size_t)(n - 1) * rk, rk);
                free(q3), free(g3), free(k3);
            }
            free(qg), free(k), free(qc), free(gc), free(kc), free(q1), free(g1), free(k1);
            freew(&qn), freew(&kn);
        }
    dfree(dpos);
}

TEST(cuda_qk_norm_rope) {
    const int ns[] = {1, 16, 4096};
    check_qk_norm_rope(ns, 3);
}

// Small calls of both ops, quick enough for compute-sanitizer (tests_cuda/gpu_run.sh, stage sanit).
TEST(cuda_fused_smoke) {
    const int shapes[][2] = {{1, 5120}, {16, 64}};
    check_add_rmsnorm(shapes, 2);
    const int ns[] = {1, 16};
    check_qk_norm_rope(ns, 2);
}
