// Rows of the op harness (op_harness.h), first half: embed, the norms, the GEMMs, elementwise ops, copies, the
// GDN input split and the attention input preparation. Shapes: those of the per-op tests they replaced (odd sizes,
// one row, partial tiles), the fixtures' small heads, and the Qwen3.5-27B geometry (hidden 5120, FFN 17408, GDN
// 16k / 48v x 128, attention 24q / 4kv x 256) for perf mode.
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "op_harness.h"

#define ROW       OH_ROW
#define TEST_ONLY OH_TEST_ONLY
#define BOTH      OH_BOTH
#define PERF_ONLY OH_PERF_ONLY

// A device-side position for the ops that take pos_dev: one int64 stored as two int32 (little-endian).
static int pos_buf(oh_case *c, int64_t pos) {
    int32_t v[2];
    memcpy(v, &pos, sizeof pos);
    return oh_buf_i32(c, "pos", OH_IN, 2, v);
}

// ---- embed: s = V, d, n, table dtype ----
static void b_embed(oh_case *c, const int *s) {
    const int V = s[0], d = s[1], n = s[2];
    int32_t *ids = fd_malloc((size_t)n * 4);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919u + 13u) % (unsigned)V);
    ids[0] = V - 1;
    snprintf(c->what, sizeof c->what, "embed %s table V=%d d=%d n=%d", fd_dtype_name((fd_dtype)s[3]), V, d, n);
    oh_weight(c, "table", V, d, (fd_dtype)s[3], -1, 1);
    oh_buf_i32(c, "ids", OH_IN, (size_t)n, ids);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * d, 0, 0, TOL_EXACT);
    c->i[0] = n;
    c->bytes = (double)n * d * (2 + 4);
    free(ids);
}
static void r_embed(fd_backend *be, oh_case *c, int side) {
    be->embed(be, oh_p(c, 1, side), oh_w(c, 0, side), oh_p(c, 0, side), c->i[0]);
}

// ---- rmsnorm: s = n, d, plus_one, alias (out = x) ----
static void b_rmsnorm(oh_case *c, const int *s) {
    const int n = s[0], d = s[1];
    snprintf(c->what, sizeof c->what, "rmsnorm n=%d d=%d plus_one=%d alias=%d", n, d, s[2], s[3]);
    oh_weight(c, "norm", d, 1, FD_F32, -0.5f, 0.5f);
    oh_buf_f32(c, "x", s[3] ? OH_INOUT : OH_IN, (size_t)n * d, -2, 2, TOL_F32);
    if (!s[3]) oh_buf_f32(c, "out", OH_OUT, (size_t)n * d, 0, 0, TOL_F32);
    memcpy(c->i, s, 4 * sizeof(int));
}
static void r_rmsnorm(fd_backend *be, oh_case *c, int side) {
    void *x = oh_p(c, 0, side), *out = c->i[3] ? x : oh_p(c, 1, side);
    be->rmsnorm(be, out, x, oh_w(c, 0, side), c->i[0], c->i[1], 1e-6f, c->i[2]);
}

// ---- matmul: s = n, k, m, dtype (-1: FP8 blocks of 128 x 128), expect_bf16x2 (the row's route) ----
static void b_matmul(oh_case *c, const int *s) {
    const int n = s[0], k = s[1], m = s[2];
    const int w =
        s[3] < 0 ? oh_weight_fp8(c, "W", m, k, 128, 128) : oh_weight(c, "W", m, k, (fd_dtype)s[3], -0.1f, 0.1f);
    const fd_weight *g = oh_w(c, w, OH_GPU);
    const double tol = g->dev_dtype == FD_F32 ? TOL_F32 : s[4] ? TOL_BF16X2 : TOL_BF16;
    snprintf(c->what, sizeof c->what, "matmul n=%d k=%d m=%d (%s %s -> %s)", n, k, m, fd_wfmt_name(g->fmt),
             fd_dtype_name(g->dtype), fd_dtype_name(g->dev_dtype));
    oh_buf_f32(c, "x", OH_IN, (size_t)n * k, -1, 1, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * m, 0, 0, tol);
    c->i[0] = n;
    c->flop = 2.0 * n * k * m;
}
static void r_matmul(fd_backend *be, oh_case *c, int side) {
    be->matmul(be, oh_p(c, 1, side), oh_p(c, 0, side), oh_w(c, 0, side), c->i[0], 1);
}

// ---- matmul_multi: s = n, k, count, m[0..count); twin: one matmul per weight, bitwise (backend.h) ----
static void b_matmul_multi(oh_case *c, const int *s) {
    const int n = s[0], k = s[1], count = s[2];
    int len = snprintf(c->what, sizeof c->what, "matmul_multi n=%d k=%d m=", n, k);
    for (int i = 0; i < count; i++) {
        oh_weight(c, "W", s[3 + i], k, FD_BF16, -0.1f, 0.1f);
        len += snprintf(c->what + len, sizeof c->what - (size_t)len, i ? "|%d" : "%d", s[3 + i]);
        c->flop += 2.0 * n * k * s[3 + i];
    }
    oh_buf_f32(c, "x", OH_IN, (size_t)n * k, -1, 1, 0);
    for (int i = 0; i < count; i++) oh_buf_f32(c, "out", OH_OUT, (size_t)n * s[3 + i], 0, 0, TOL_BF16);
    c->i[0] = n, c->i[1] = count;
}
static void r_matmul_multi(fd_backend *be, oh_case *c, int side) {
    void *outs[4];
    const fd_weight *Ws[4];
    for (int i = 0; i < c->i[1]; i++) outs[i] = oh_p(c, 1 + i, side), Ws[i] = oh_w(c, i, side);
    be->matmul_multi(be, outs, Ws, c->i[1], oh_p(c, 0, side), c->i[0]);
}
static void t_matmul_multi(fd_backend *be, oh_case *c) {
    for (int i = 0; i < c->i[1]; i++)
        be->matmul(be, oh_p(c, 1 + i, OH_GPU), oh_p(c, 0, OH_GPU), oh_w(c, i, OH_GPU), c->i[0], 0);
}

// ---- elementwise: s = count ----
static void b_two(oh_case *c, const char *op, int count, int inout) {
    snprintf(c->what, sizeof c->what, "%s count=%d", op, count);
    oh_buf_f32(c, "x", inout ? OH_INOUT : OH_IN, (size_t)count, -4, 4, TOL_F32);
    oh_buf_f32(c, "y", OH_IN, (size_t)count, -4, 4, 0);
    if (!inout) oh_buf_f32(c, "out", OH_OUT, (size_t)count, 0, 0, TOL_F32);
    c->i[0] = count;
}
static void b_add(oh_case *c, const int *s) {
    b_two(c, "add", s[0], 1);
}
static void r_add(fd_backend *be, oh_case *c, int side) {
    be->add(be, oh_p(c, 0, side), oh_p(c, 1, side), c->i[0]);
}
static void b_sigmoid_mul(oh_case *c, const int *s) {
    b_two(c, "sigmoid_mul", s[0], 1);
}
static void r_sigmoid_mul(fd_backend *be, oh_case *c, int side) {
    be->sigmoid_mul(be, oh_p(c, 0, side), oh_p(c, 1, side), c->i[0]);
}
static void b_silu_mul(oh_case *c, const int *s) {
    b_two(c, "silu_mul", s[0], 0);
}
static void r_silu_mul(fd_backend *be, oh_case *c, int side) {
    be->silu_mul(be, oh_p(c, 2, side), oh_p(c, 0, side), oh_p(c, 1, side), c->i[0]);
}
static void b_to_f32(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "to_f32 count=%d", s[0]);
    oh_buf_f32(c, "x", OH_IN, (size_t)s[0], -4, 4, 0);
    oh_buf_f32(c, "host", OH_HOST_OUT, (size_t)s[0], 0, 0, TOL_EXACT);
    c->i[0] = s[0];
}
static void r_to_f32(fd_backend *be, oh_case *c, int side) {
    be->to_f32(be, oh_p(c, 1, side), oh_p(c, 0, side), c->i[0]);
}

// ---- add_rmsnorm: s = n, d, plus_one; twin: add then rmsnorm, bitwise (backend.h) ----
static void b_add_rmsnorm(oh_case *c, const int *s) {
    const int n = s[0], d = s[1];
    snprintf(c->what, sizeof c->what, "add_rmsnorm n=%d d=%d plus_one=%d", n, d, s[2]);
    oh_weight(c, "norm", d, 1, FD_F32, -0.5f, 0.5f);
    oh_buf_f32(c, "x", OH_INOUT, (size_t)n * d, -2, 2, TOL_EXACT); // x += y: one fp32 add on either side
    oh_buf_f32(c, "y", OH_IN, (size_t)n * d, -2, 2, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * d, 0, 0, TOL_F32);
    memcpy(c->i, s, 3 * sizeof(int));
}
static void r_add_rmsnorm(fd_backend *be, oh_case *c, int side) {
    be->add_rmsnorm(be, oh_p(c, 2, side), oh_p(c, 0, side), oh_p(c, 1, side), oh_w(c, 0, side), c->i[0], c->i[1], 1e-6f,
                    c->i[2]);
}
static void t_add_rmsnorm(fd_backend *be, oh_case *c) {
    be->add(be, oh_p(c, 0, OH_GPU), oh_p(c, 1, OH_GPU), (int64_t)c->i[0] * c->i[1]);
    be->rmsnorm(be, oh_p(c, 2, OH_GPU), oh_p(c, 0, OH_GPU), oh_w(c, 0, OH_GPU), c->i[0], c->i[1], 1e-6f, c->i[2]);
}

// ---- copy_rows: s = rows, row floats, source stride, destination stride (floats) ----
static void b_copy_rows(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "copy_rows %d rows x %d floats, strides %d -> %d", s[0], s[1], s[2], s[3]);
    oh_buf_f32(c, "src", OH_IN, (size_t)s[0] * s[2], -1, 1, 0);
    oh_buf_f32(c, "dst", OH_INOUT, (size_t)s[0] * s[3], -1, 1, TOL_EXACT); // the gaps between rows stay as they were
    memcpy(c->i, s, 4 * sizeof(int));
    c->bytes = 2.0 * s[0] * s[1] * 4;
}
static void r_copy_rows(fd_backend *be, oh_case *c, int side) {
    be->copy_rows(be, oh_p(c, 1, side), (size_t)c->i[3] * 4, oh_p(c, 0, side), (size_t)c->i[2] * 4, c->i[0],
                  (size_t)c->i[1] * 4);
}

// ---- gdn_split_qkvz: s = n, Hk, Hv, dk, dv ----
static void b_split_qkvz(oh_case *c, const int *s) {
    const int n = s[0], Hk = s[1], Hv = s[2], dk = s[3], dv = s[4], r = Hv / Hk;
    snprintf(c->what, sizeof c->what, "gdn_split_qkvz n=%d Hk=%d Hv=%d dk=%d dv=%d", n, Hk, Hv, dk, dv);
    oh_buf_f32(c, "qkvz", OH_IN, (size_t)n * Hk * (2 * dk + 2 * r * dv), -1, 1, 0);
    oh_buf_f32(c, "ba", OH_IN, (size_t)n * 2 * Hv, -1, 1, 0);
    oh_buf_f32(c, "qkv", OH_OUT, (size_t)n * (2 * Hk * dk + Hv * dv), 0, 0, TOL_EXACT);
    oh_buf_f32(c, "z", OH_OUT, (size_t)n * Hv * dv, 0, 0, TOL_EXACT);
    oh_buf_f32(c, "b", OH_OUT, (size_t)n * Hv, 0, 0, TOL_EXACT);
    oh_buf_f32(c, "a", OH_OUT, (size_t)n * Hv, 0, 0, TOL_EXACT);
    memcpy(c->i, s, 5 * sizeof(int));
}
static void r_split_qkvz(fd_backend *be, oh_case *c, int side) {
    be->gdn_split_qkvz(be, oh_p(c, 2, side), oh_p(c, 3, side), oh_p(c, 4, side), oh_p(c, 5, side), oh_p(c, 0, side),
                       oh_p(c, 1, side), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4]);
}

// ---- gated_rmsnorm: s = rows, dv ----
static void b_gated_rmsnorm(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "gated_rmsnorm rows=%d dv=%d", s[0], s[1]);
    oh_weight(c, "gdn_norm", s[1], 1, FD_F32, 0.5f, 1.5f);
    oh_buf_f32(c, "x", OH_IN, (size_t)s[0] * s[1], -2, 2, 0);
    oh_buf_f32(c, "z", OH_IN, (size_t)s[0] * s[1], -3, 3, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)s[0] * s[1], 0, 0, TOL_F32);
    c->i[0] = s[0], c->i[1] = s[1];
}
static void r_gated_rmsnorm(fd_backend *be, oh_case *c, int side) {
    be->gated_rmsnorm(be, oh_p(c, 2, side), oh_p(c, 0, side), oh_p(c, 1, side), oh_w(c, 0, side), c->i[0], c->i[1],
                      1e-6f);
}

// ---- split_q_gate: s = n, H, hd ----
static void b_split_q_gate(oh_case *c, const int *s) {
    const size_t cnt = (size_t)s[0] * s[1] * s[2];
    snprintf(c->what, sizeof c->what, "split_q_gate n=%d H=%d hd=%d", s[0], s[1], s[2]);
    oh_buf_f32(c, "qg", OH_IN, cnt * 2, -1, 1, 0);
    oh_buf_f32(c, "q", OH_OUT, cnt, 0, 0, TOL_EXACT);
    oh_buf_f32(c, "gate", OH_OUT, cnt, 0, 0, TOL_EXACT);
    memcpy(c->i, s, 3 * sizeof(int));
}
static void r_split_q_gate(fd_backend *be, oh_case *c, int side) {
    be->split_q_gate(be, oh_p(c, 1, side), oh_p(c, 2, side), oh_p(c, 0, side), c->i[0], c->i[1], c->i[2]);
}

// ---- rope: s = n, H, hd, rot_dim, pos0; twin: the position read on the device (host pos0 wrong), bitwise ----
static void b_rope(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "rope n=%d H=%d hd=%d rot=%d pos0=%d", s[0], s[1], s[2], s[3], s[4]);
    oh_buf_f32(c, "x", OH_INOUT, (size_t)s[0] * s[1] * s[2], -1, 1, TOL_F32);
    pos_buf(c, s[4]);
    memcpy(c->i, s, 5 * sizeof(int));
}
static void r_rope(fd_backend *be, oh_case *c, int side) {
    be->rope(be, oh_p(c, 0, side), c->i[0], c->i[1], c->i[2], c->i[3], 1e7f, c->i[4], NULL);
}
static void t_rope(fd_backend *be, oh_case *c) {
    be->rope(be, oh_p(c, 0, OH_GPU), c->i[0], c->i[1], c->i[2], c->i[3], 1e7f, c->i[4] + 12345, oh_p(c, 1, OH_GPU));
}

// ---- qk_norm_rope: s = n, H, Hkv, hd, rot_dim, pos0; twin: pos_dev with a wrong host pos0, bitwise ----
static void b_qk_norm_rope(oh_case *c, const int *s) {
    const int n = s[0], H = s[1], Hkv = s[2], hd = s[3];
    snprintf(c->what, sizeof c->what, "qk_norm_rope n=%d H=%d Hkv=%d hd=%d rot=%d pos0=%d", n, H, Hkv, hd, s[4], s[5]);
    oh_weight(c, "q_norm", hd, 1, FD_F32, -0.5f, 0.5f);
    oh_weight(c, "k_norm", hd, 1, FD_F32, -0.5f, 0.5f);
    oh_buf_f32(c, "qg", OH_IN, (size_t)n * H * hd * 2, -2, 2, 0);
    oh_buf_f32(c, "q", OH_OUT, (size_t)n * H * hd, 0, 0, TOL_F32);
    oh_buf_f32(c, "gate", OH_OUT, (size_t)n * H * hd, 0, 0, TOL_EXACT);
    oh_buf_f32(c, "k", OH_INOUT, (size_t)n * Hkv * hd, -2, 2, TOL_F32);
    pos_buf(c, s[5]);
    memcpy(c->i, s, 6 * sizeof(int));
}
static void qk_norm_rope_at(fd_backend *be, oh_case *c, int side, int64_t pos0, const int64_t *pos_dev) {
    be->qk_norm_rope(be, oh_p(c, 1, side), oh_p(c, 2, side), oh_p(c, 3, side), oh_p(c, 0, side), oh_w(c, 0, side),
                     oh_w(c, 1, side), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4], 1e7f, 1e-6f, pos0, pos_dev);
}
static void r_qk_norm_rope(fd_backend *be, oh_case *c, int side) {
    qk_norm_rope_at(be, c, side, c->i[5], NULL);
}
static void t_qk_norm_rope(fd_backend *be, oh_case *c) {
    qk_norm_rope_at(be, c, OH_GPU, c->i[5] + 777, oh_p(c, 4, OH_GPU));
}

// ---- the rows ----
#define EMBED(V, d, n, dt, p)   ROW(embed, b_embed, r_embed, .s = {V, d, n, dt}, .perf = p)
#define RMS(n, d, p1, alias, p) ROW(rmsnorm, b_rmsnorm, r_rmsnorm, .s = {n, d, p1, alias}, .perf = p)
#define MM(n, k, m, dt, p)      ROW(matmul, b_matmul, r_matmul, .s = {n, k, m, dt}, .perf = p)
#define MM_ROUTE(n, k, m, dt, x2, route_spec)                                                                          \
    ROW(matmul, b_matmul, r_matmul, .s = {n, k, m, dt, x2}, .route = route_spec, .perf = BOTH)
#define MMM(n, k, count, ...)                                                                                          \
    ROW(matmul_multi, b_matmul_multi, r_matmul_multi, .twin = t_matmul_multi, .s = {n, k, count, __VA_ARGS__},         \
        .perf = BOTH)
#define ELEMENTWISE(count, p)                                                                                          \
    ROW(add, b_add, r_add, .s = {count}, .perf = p), ROW(silu_mul, b_silu_mul, r_silu_mul, .s = {count}, .perf = p),   \
        ROW(sigmoid_mul, b_sigmoid_mul, r_sigmoid_mul, .s = {count}, .perf = p),                                       \
        ROW(to_f32, b_to_f32, r_to_f32, .s = {count}, .perf = p)
#define ADD_RMS(n, d, p1, p)                                                                                           \
    ROW(add_rmsnorm, b_add_rmsnorm, r_add_rmsnorm, .twin = t_add_rmsnorm, .s = {n, d, p1}, .perf = p)
#define QKVZ(n, Hk, Hv, dk, dv, p)   ROW(gdn_split_qkvz, b_split_qkvz, r_split_qkvz, .s = {n, Hk, Hv, dk, dv}, .perf = p)
#define GRMS(rows, dv, p)            ROW(gated_rmsnorm, b_gated_rmsnorm, r_gated_rmsnorm, .s = {rows, dv}, .perf = p)
#define SQG(n, H, hd, p)             ROW(split_q_gate, b_split_q_gate, r_split_q_gate, .s = {n, H, hd}, .perf = p)
#define ROPE(n, H, hd, rot, pos0, p) ROW(rope, b_rope, r_rope, .twin = t_rope, .s = {n, H, hd, rot, pos0}, .perf = p)
#define QKNR(n, H, Hkv, hd, rot, pos0, p)                                                                              \
    ROW(qk_norm_rope, b_qk_norm_rope, r_qk_norm_rope, .twin = t_qk_norm_rope, .s = {n, H, Hkv, hd, rot, pos0},         \
        .perf = p)
// split_q_gate and rope over the same head configurations (H, hd, rot_dim, pos0) at n = 1, 7, 64, 200
#define HEADS_AT(n, p)                                                                                                 \
    SQG(n, 6, 256, p), SQG(n, 4, 128, p), SQG(n, 3, 64, p), ROPE(n, 6, 256, 64, 0, p), ROPE(n, 4, 128, 128, 1000, p),  \
        ROPE(n, 3, 64, 32, 200000, p)

const oh_row oh_rows_dense[] = {
    EMBED(1001, 333, 64, FD_BF16, BOTH),
    EMBED(1000, 96, 7, FD_F32, TEST_ONLY),
    EMBED(32768, 5120, 16, FD_BF16, BOTH),
    // rmsnorm: both weight kinds, in place and not
    RMS(1, 64, 0, 0, TEST_ONLY),
    RMS(1, 64, 1, 0, TEST_ONLY),
    RMS(1, 64, 0, 1, TEST_ONLY),
    RMS(1, 64, 1, 1, TEST_ONLY),
    RMS(7, 1000, 0, 0, TEST_ONLY),
    RMS(7, 1000, 1, 0, TEST_ONLY),
    RMS(7, 1000, 0, 1, TEST_ONLY),
    RMS(7, 1000, 1, 1, TEST_ONLY),
    RMS(200, 2048, 0, 0, TEST_ONLY),
    RMS(200, 2048, 1, 0, TEST_ONLY),
    RMS(200, 2048, 0, 1, TEST_ONLY),
    RMS(200, 2048, 1, 1, TEST_ONLY),
    RMS(64, 5120, 0, 0, TEST_ONLY),
    RMS(64, 5120, 1, 0, TEST_ONLY),
    RMS(64, 5120, 0, 1, TEST_ONLY),
    RMS(64, 5120, 1, 1, TEST_ONLY),
    RMS(1, 5120, 1, 0, BOTH),
    RMS(16, 5120, 1, 0, BOTH),
    RMS(4096, 5120, 1, 0, BOTH),
    // matmul: [1, k] (a single-row gate) and fp32 / fp16 weights are fp32 on the device; FP8 blocks
    MM(1, 64, 48, FD_BF16, TEST_ONLY),
    MM(7, 200, 130, FD_BF16, TEST_ONLY),
    MM(64, 512, 384, FD_BF16, TEST_ONLY),
    MM(200, 1024, 515, FD_BF16, TEST_ONLY),
    MM(3, 2048, 1, FD_BF16, TEST_ONLY),
    MM(7, 200, 130, FD_F32, TEST_ONLY),
    MM(64, 96, 33, FD_F16, TEST_ONLY),
    MM(1, 1024, 1000, -1, TEST_ONLY),
    MM(16, 4096, 96, -1, TEST_ONLY),
    MM(64, 512, 200, -1, TEST_ONLY),
    MM_ROUTE(7, 1024, 130, FD_BF16, 0, "gemm_small=cublas"),
    MM_ROUTE(16, 512, 384, FD_BF16, 1, "gemm_act=bf16x2"),
    MM_ROUTE(100, 512, 384, FD_BF16, 1, "gemm_act=bf16x2"),
    MM(1, 5120, 17408, FD_BF16, BOTH),
    MM(16, 5120, 17408, FD_BF16, BOTH),
    MM(1, 17408, 5120, FD_BF16, BOTH),
    MM(1, 5120, 17408, -1, BOTH),
    MM(16, 5120, 17408, -1, BOTH),
    MM(4096, 5120, 17408, FD_BF16, PERF_ONLY),
    MM_ROUTE(1, 5120, 17408, FD_BF16, 0, "gemm_small=cublas"),
    MM_ROUTE(16, 5120, 17408, FD_BF16, 0, "gemm_small=cublas"),
    // matmul_multi: the 27B groups (GDN qkv|z|b|a, attention q|k|v, FFN gate|up) and odd ones (> 16 rows: unfused)
    MMM(1, 5120, 4, 10240, 6144, 48, 48),
    MMM(16, 5120, 4, 10240, 6144, 48, 48),
    MMM(1, 5120, 3, 12288, 1024, 1024),
    MMM(8, 5120, 2, 17408, 17408),
    MMM(3, 200, 2, 130, 64),
    MMM(32, 256, 2, 100, 60),
    ELEMENTWISE(1, TEST_ONLY),
    ELEMENTWISE(7, TEST_ONLY),
    ELEMENTWISE(4097, TEST_ONLY),
    ELEMENTWISE(200003, TEST_ONLY),
    ELEMENTWISE(4096 * 5120, BOTH),
    ADD_RMS(1, 5120, 1, BOTH),
    ADD_RMS(16, 5120, 1, BOTH),
    ADD_RMS(4096, 5120, 1, BOTH),
    ADD_RMS(7, 64, 0, TEST_ONLY),
    ADD_RMS(3, 1000, 1, TEST_ONLY),
    ADD_RMS(5, 16, 1, TEST_ONLY),
    ROW(copy_rows, b_copy_rows, r_copy_rows, .s = {37, 29, 41, 33}, .perf = TEST_ONLY),
    ROW(copy_rows, b_copy_rows, r_copy_rows, .s = {4096, 5120, 6144, 5120}, .perf = BOTH),
    QKVZ(1, 2, 6, 128, 128, TEST_ONLY),
    QKVZ(7, 2, 4, 32, 16, TEST_ONLY),
    QKVZ(64, 1, 3, 16, 24, TEST_ONLY),
    QKVZ(16, 16, 32, 128, 128, BOTH),
    QKVZ(4096, 16, 32, 128, 128, BOTH),
    GRMS(1, 128, TEST_ONLY),
    GRMS(42, 128, TEST_ONLY),
    GRMS(1200, 128, TEST_ONLY),
    GRMS(13, 96, TEST_ONLY),
    GRMS(48, 128, BOTH),
    GRMS(4096 * 48, 128, BOTH),
    HEADS_AT(1, TEST_ONLY),
    HEADS_AT(7, TEST_ONLY),
    HEADS_AT(64, TEST_ONLY),
    HEADS_AT(200, TEST_ONLY),
    SQG(4096, 24, 256, BOTH),
    ROPE(4096, 24, 256, 64, 0, BOTH),
    QKNR(1, 24, 4, 256, 64, 1000, BOTH),
    QKNR(16, 24, 4, 256, 64, 5000, BOTH),
    QKNR(4096, 24, 4, 256, 64, 0, BOTH),
    QKNR(7, 4, 2, 16, 4, 3, TEST_ONLY),
    QKNR(5, 4, 2, 16, 16, 100, TEST_ONLY),
    QKNR(3, 4, 2, 16, 0, 7, TEST_ONLY),
};
const size_t oh_n_rows_dense = sizeof oh_rows_dense / sizeof oh_rows_dense[0];
