// Decode-step benches of the small ops (FD_CUDA_BENCH=1): the fused row norms and q/k norm + RoPE against the ops
// they replace, and the GDN recurrence (both kernels) and conv at the 27B layer.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/kv_pool.h"
#include "engine/routes.h"

// ---- the fused decoder-layer ops vs the op sequences they replace (norm_rope.cu), 27B shapes ----
// One timed call runs the op `reps` times back to back (stream launches, not a graph), so at n = 1 the per-call
// time is mostly launch gap + ramp + tail: what fusing saves. GB/s counts the fused op's bytes for both rows
// (the useful traffic), so the two rows of a pair compare directly.
typedef struct {
    void *x, *y, *h, *qg, *q, *g, *k;
    fd_weight *w, *qn, *kn;
    int n, reps, fused;
} fuse_t;

static void f_add_norm(void *p) {
    fuse_t *c = p;
    for (int r = 0; r < c->reps; r++) {
        if (c->fused) {
            B()->add_rmsnorm(B(), c->h, c->x, c->y, c->w, c->n, 5120, 1e-6f, 1);
        } else {
            B()->add(B(), c->x, c->y, (int64_t)c->n * 5120);
            B()->rmsnorm(B(), c->h, c->x, c->w, c->n, 5120, 1e-6f, 1);
        }
    }
}
static void f_qk_prep(void *p) {
    fuse_t *c = p;
    const int H = 24, Hkv = 4, hd = 256, rot = 64;
    for (int r = 0; r < c->reps; r++) {
        if (c->fused) {
            B()->qk_norm_rope(B(), c->q, c->g, c->k, c->qg, c->qn, c->kn, c->n, H, Hkv, hd, rot, 1e7f, 1e-6f, 1000,
                              NULL);
        } else {
            B()->split_q_gate(B(), c->q, c->g, c->qg, c->n, H, hd);
            B()->rmsnorm(B(), c->q, c->q, c->qn, (int64_t)c->n * H, hd, 1e-6f, 1);
            B()->rmsnorm(B(), c->k, c->k, c->kn, (int64_t)c->n * Hkv, hd, 1e-6f, 1);
            B()->rope(B(), c->q, c->n, H, hd, rot, 1e7f, 1000, NULL);
            B()->rope(B(), c->k, c->n, Hkv, hd, rot, 1e7f, 1000, NULL);
        }
    }
}

TEST(bench_cuda_fused_norms) {
    if (cuda_rig_bench_skipped()) return;
    const int d = 5120, N = 4096, H = 24, Hkv = 4, hd = 256;
    fd_weight w = wrand(d, 1, -0.2f, 0.2f), qn = wrand(hd, 1, -0.2f, 0.2f), kn = wrand(hd, 1, -0.2f, 0.2f);
    fuse_t c = {.w = &w, .qn = &qn, .kn = &kn};
    c.x = dev_rand((size_t)N * d, -1, 1), c.y = dev_rand((size_t)N * d, -1e-3f, 1e-3f);
    c.h = B()->alloc(B(), (size_t)N * d * 4);
    c.qg = dev_rand((size_t)N * H * 2 * hd, -1, 1), c.k = dev_rand((size_t)N * Hkv * hd, -1, 1);
    c.q = B()->alloc(B(), (size_t)N * H * hd * 4), c.g = B()->alloc(B(), (size_t)N * H * hd * 4);
    const int ns[] = {1, 16, N};
    for (int i = 0; i < 3; i++) {
        c.n = ns[i], c.reps = c.n == N ? 10 : 200;
        const double an_bytes = 4.0 * c.n * d * 4, qk_bytes = (4.0 * H + 2.0 * Hkv) * c.n * hd * 4;
        for (c.fused = 0; c.fused < 2; c.fused++) {
            char what[80];
            snprintf(what, sizeof what, "%s n=%d d=%d", c.fused ? "add_rmsnorm (1 launch)" : "add + rmsnorm (2)", c.n,
                     d);
            row(what, time_ms(f_add_norm, &c) / c.reps, 0, an_bytes);
        }
        for (c.fused = 0; c.fused < 2; c.fused++) {
            char what[80];
            snprintf(what, sizeof what, "%s n=%d", c.fused ? "qk_norm_rope (1 launch)" : "split+2 norms+2 ropes (5)",
                     c.n);
            row(what, time_ms(f_qk_prep, &c) / c.reps, 0, qk_bytes);
        }
    }
    void *bufs[] = {c.x, c.y, c.h, c.qg, c.k, c.q, c.g, w.dev, qn.dev, kn.dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) B()->free(B(), bufs[i]);
}

// ---- GDN recurrence for decode and verify (serial route, 27B layer: Hk 16, Hv 48, dk dv 128) ----
// GPU time per call from CUDA events (bench_event_us: `calls` back-to-back calls behind a 512 MB memset, median of
// 11). The calls rotate through REC_STATES state buffers (100 MB, one per layer as in a decode step), so every call
// reads its state from DRAM, not L2.
// The serial kernel (k_gdn_rec), n = 1 (decode),
// 8 and 16 (verify; with per-token state slots as DFlash writes them, and without), 4096 (serial prefill).
// GB/s: state read + written, q/k/v rows read, outputs and slots written, over 4250 (copy bandwidth). Also
// conv1d_silu at the same layer (C 10240, K 4).

#define REC_STATES 32

typedef struct {
    fd_weight *A_log, *dt_bias, *conv_w;
    void *qkv, *b, *a, *o, *slots, *conv_state, *conv_slots, *spacer;
    float *states[REC_STATES];
    int n, calls, with_slots, next_state;
} rec_ctx;

static void f_rec(void *p) {
    rec_ctx *c = p;
    float *state = c->states[c->next_state];
    c->next_state = (c->next_state + 1) % REC_STATES;
    B()->gdn_core(B(), FD_GDN_SERIAL, c->o, c->qkv, c->b, c->a, c->A_log, c->dt_bias, state, c->n, 16, 48, 128, 128,
                  c->with_slots ? c->slots : NULL);
}
static void f_conv_rec(void *p) {
    rec_ctx *c = p;
    B()->conv1d_silu(B(), c->o, c->qkv, c->conv_w, c->conv_state, c->n, 10240, 4, c->with_slots ? c->conv_slots : NULL);
}

static void row_us(const char *what, double us, double bytes) {
    printf("BENCH | %-44s | %9.2f us | %7.0f GB/s (%4.1f%% of 4250)\n", what, us, bytes / us / 1e3,
           100.0 * bytes / us / 1e3 / 4250.0);
}

TEST(bench_cuda_gdn_serial) {
    if (cuda_rig_bench_skipped()) return;
    const int Hk = 16, Hv = 48, dk = 128, dv = 128, cq = 2 * Hk * dk + Hv * dv, N = 4096;
    const double state_bytes = (double)Hv * dk * dv * 4;
    fd_weight Al = wrand(Hv, 1, -1, 1.5f), dtb = wrand(Hv, 1, -1, 1), cw = wrand(cq, 4, -0.5f, 0.5f);
    rec_ctx c;
    memset(&c, 0, sizeof c);
    c.A_log = &Al, c.dt_bias = &dtb, c.conv_w = &cw;
    c.qkv = dev_rand((size_t)N * cq, -1, 1);
    c.b = dev_rand((size_t)N * Hv, -3, 3);
    c.a = dev_rand((size_t)N * Hv, -3, 3);
    c.o = B()->alloc(B(), (size_t)N * cq * 4); // also the conv output
    for (int i = 0; i < REC_STATES; i++) c.states[i] = dev_rand((size_t)Hv * dk * dv, -0.1f, 0.1f);
    c.slots = B()->alloc(B(), (size_t)16 * Hv * dk * dv * 4);
    c.conv_state = dev_rand((size_t)cq * 3, -1, 1);
    c.conv_slots = B()->alloc(B(), (size_t)16 * cq * 3 * 4);
    c.spacer = B()->alloc(B(), (size_t)512 << 20);
    static const int cases[][2] = {{1, 0}, {8, 0}, {8, 1}, {16, 0}, {16, 1}, {4096, 0}}; // n, slots
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.n = cases[i][0], c.with_slots = cases[i][1], c.calls = c.n > 16 ? 2 : 20;
        const double bytes =
            2 * state_bytes + (double)c.n * (cq + Hv * dv) * 4 + (c.with_slots ? (double)c.n * state_bytes : 0);
        char what[96];
        snprintf(what, sizeof what, "gdn serial n=%d%s (Hk16 Hv48 128/128)", c.n, c.with_slots ? " slots" : "");
        row_us(what, bench_event_us(f_rec, &c, c.calls, c.spacer), bytes);
    }
    for (int i = 0; i < 3; i++) {
        c.n = i == 0 ? 1 : 16, c.with_slots = i == 2, c.calls = 20;
        // x read, out written, state read + written, slots written
        const double bytes = (double)c.n * cq * 8 + 2.0 * cq * 3 * 4 + (c.with_slots ? (double)c.n * cq * 12 : 0);
        char what[96];
        snprintf(what, sizeof what, "conv1d_silu n=%d%s C=10240 K=4", c.n, c.with_slots ? " slots" : "");
        row_us(what, bench_event_us(f_conv_rec, &c, c.calls, c.spacer), bytes);
    }
    for (int i = 0; i < REC_STATES; i++) B()->free(B(), c.states[i]);
    B()->free(B(), c.qkv), B()->free(B(), c.b), B()->free(B(), c.a), B()->free(B(), c.o);
    B()->free(B(), c.slots), B()->free(B(), c.conv_state), B()->free(B(), c.conv_slots), B()->free(B(), c.spacer);
    B()->free(B(), Al.dev), B()->free(B(), dtb.dev), B()->free(B(), cw.dev);
}
