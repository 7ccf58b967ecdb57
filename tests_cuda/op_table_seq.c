// Rows of the op harness (op_harness.h), second half: the ops with per-sequence state or a cache (conv1d_silu,
// gdn_core, attention, the DFlash2 drafter's dyn_conv and windowed attention), the MoE FFN, argmax_rows and topk_rows,
// and the tree verify ops (conv1d_silu_tree, gdn_core_tree, attention_tree, qk_norm_rope_tree, logsumexp_rows). The GDN
// core is also checked against an fp64 recurrence in test_cuda_gdn.c (route by route, state across calls, every
// chunk tail); here it is one call from a random state against the CPU, and its perf rows.
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "op_harness.h"

#define ROW       OH_ROW
#define TEST_ONLY OH_TEST_ONLY
#define BOTH      OH_BOTH

// ---- conv1d_silu: s = C, n, K, with per-token state slots ----
static void b_conv(oh_case *c, const int *s) {
    const int C = s[0], n = s[1], K = s[2];
    snprintf(c->what, sizeof c->what, "conv1d_silu C=%d n=%d K=%d%s", C, n, K, s[3] ? " state slots" : "");
    oh_weight(c, "conv", C, K, FD_BF16, -0.7f, 0.7f);
    oh_buf_f32(c, "x", OH_IN, (size_t)n * C, -2, 2, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * C, 0, 0, TOL_F32);
    oh_buf_f32(c, "state", OH_INOUT, (size_t)C * (K - 1), -1, 1, TOL_F32);
    if (s[3]) oh_buf_f32(c, "slots", OH_OUT, (size_t)n * C * (K - 1), 0, 0, TOL_F32);
    memcpy(c->i, s, 4 * sizeof(int));
}
static void r_conv(fd_backend *be, oh_case *c, int side) {
    be->conv1d_silu(be, oh_p(c, 1, side), oh_p(c, 0, side), oh_w(c, 0, side), oh_p(c, 2, side), c->i[1], c->i[0],
                    c->i[2], c->i[3] ? oh_p(c, 3, side) : NULL);
}

// What gdn_core and gdn_core_tree share, in their order: weights 0, 1 = A_log, dt_bias; buffers 0..3 = qkv, b, a
// and the output o (the state and the slots follow, with each op's own bounds).
static void gdn_operands(oh_case *c, int n, int Hk, int Hv, int dk, int dv) {
    oh_weight(c, "A_log", Hv, 1, FD_F32, -1.0f, 1.5f);
    oh_weight(c, "dt_bias", Hv, 1, FD_F32, -1, 1);
    oh_buf_f32(c, "qkv", OH_IN, (size_t)n * (2 * Hk * dk + Hv * dv), -1, 1, 0);
    oh_buf_f32(c, "b", OH_IN, (size_t)n * Hv, -3, 3, 0);
    oh_buf_f32(c, "a", OH_IN, (size_t)n * Hv, -3, 3, 0);
    oh_buf_f32(c, "o", OH_OUT, (size_t)n * Hv * dv, 0, 0, TOL_GDN);
}

// ---- gdn_core: s = n, Hk, Hv, dk, dv, route (FD_GDN_*), with per-token state slots (the CPU then runs serial,
// as the engine does) ----
static void b_gdn(oh_case *c, const int *s) {
    const int n = s[0], Hk = s[1], Hv = s[2], dk = s[3], dv = s[4];
    snprintf(c->what, sizeof c->what, "gdn_core %s n=%d Hk=%d Hv=%d dk=%d dv=%d%s", s[5] ? "serial" : "chunked", n, Hk,
             Hv, dk, dv, s[6] ? " state slots" : "");
    gdn_operands(c, n, Hk, Hv, dk, dv);
    oh_buf_f32(c, "state", OH_INOUT, (size_t)Hv * dk * dv, -0.3f, 0.3f, TOL_GDN);
    if (s[6]) oh_buf_f32(c, "slots", OH_OUT, (size_t)n * Hv * dk * dv, 0, 0, TOL_GDN);
    memcpy(c->i, s, 7 * sizeof(int));
    if (!s[5]) { // the chunked form's MACs per 64-token chunk and value head (bench_cuda_27b_ops says which)
        const double mac = 64.0 * 64 * (3 * dk + 2 * dv) + 3.0 * 64 * dk * dv;
        c->flop = 2.0 * mac * Hv * ((n + 63) / 64);
    }
}
static void r_gdn(fd_backend *be, oh_case *c, int side) {
    const fd_gdn_route route = side == OH_CPU && c->i[6] ? FD_GDN_SERIAL : (fd_gdn_route)c->i[5];
    be->gdn_core(be, route, oh_p(c, 3, side), oh_p(c, 0, side), oh_p(c, 1, side), oh_p(c, 2, side), oh_w(c, 0, side),
                 oh_w(c, 1, side), oh_p(c, 4, side), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4],
                 c->i[6] ? oh_p(c, 5, side) : NULL);
}

// ---- attention and attention_window over a cache of n0 context rows and the n rows of the call ----
// s = n0, n, H, Hkv, hd, causal (attention) or window (attention_window). Buffers: 0 cache (each backend's layout),
// 1 k, 2 v [(n0 + n), Hkv, hd], 3 q, 4 out, 5 the device position n0.
static void b_attn_common(oh_case *c, const int *s, const char *op, const char *mode) {
    const int n0 = s[0], n = s[1], H = s[2], Hkv = s[3], hd = s[4];
    const int64_t cap = n0 + n + 5;
    fd_backend *cpu = oh_be(c, OH_CPU), *gpu = oh_be(c, OH_GPU);
    snprintf(c->what, sizeof c->what, "%s%s pos0=%d n=%d H=%d Hkv=%d hd=%d", op, mode, n0, n, H, Hkv, hd);
    const size_t kvb_c = cpu->kv_bytes_per_token(cpu, Hkv, hd), kvb_g = gpu->kv_bytes_per_token(gpu, Hkv, hd);
    oh_scratch(c, "cache", (size_t)cap * kvb_c, (size_t)cap * kvb_g);
    oh_buf_f32(c, "k", OH_IN, (size_t)(n0 + n) * Hkv * hd, -2, 2, 0);
    oh_buf_f32(c, "v", OH_IN, (size_t)(n0 + n) * Hkv * hd, -1, 1, 0);
    oh_buf_f32(c, "q", OH_IN, (size_t)n * H * hd, -2, 2, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * H * hd, 0, 0, TOL_ATTN);
    int32_t pos[2];
    const int64_t p = n0;
    memcpy(pos, &p, sizeof p);
    oh_buf_i32(c, "pos", OH_IN, 2, pos);
    memcpy(c->i, s, 6 * sizeof(int));
    c->i[6] = (int)cap;
    // a call reads the cache once and q, writes out (the cache fill is prepare, untimed)
    c->bytes = (double)(n0 + n) * kvb_g + 2.0 * n * H * hd * 4;
}
// Stores the context rows at pos0 0, then the call's rows at n0; the GPU reads that second position from the
// device with a wrong host pos0 (a kernel that ignored pos_dev would overwrite the context and fail the compare).
static void p_attn(fd_backend *be, oh_case *c, int side) {
    const int n0 = c->i[0], n = c->i[1], Hkv = c->i[3], hd = c->i[4];
    const fd_kv_view *kv = FD_KV_FLAT(oh_p(c, 0, side), c->i[6]);
    const float *k = oh_p(c, 1, side), *v = oh_p(c, 2, side);
    if (n0) be->kv_store(be, kv, k, v, 0, NULL, n0, Hkv, hd);
    const size_t off = (size_t)n0 * Hkv * hd;
    be->kv_store(be, kv, k + off, v + off, side ? 0 : n0, side ? oh_p(c, 5, side) : NULL, n, Hkv, hd);
}
static void b_attn(oh_case *c, const int *s) {
    b_attn_common(c, s, "attention", s[5] ? "" : "_noncausal");
    const double keys = s[5] ? s[0] + (s[1] + 1) / 2.0 : s[0] + s[1]; // per query, on average
    c->flop = 4.0 * s[1] * s[2] * s[4] * keys;
}
static void r_attn(fd_backend *be, oh_case *c, int side) {
    be->attention(be, oh_p(c, 4, side), oh_p(c, 3, side), FD_KV_FLAT(oh_p(c, 0, side), c->i[6]), c->i[0], NULL, c->i[1],
                  c->i[2], c->i[3], c->i[4], 1.0f / sqrtf((float)c->i[4]), c->i[5]);
}
static void b_window(oh_case *c, const int *s) {
    char mode[32];
    snprintf(mode, sizeof mode, " window=%d", s[5]);
    b_attn_common(c, s, "attention_window", mode);
}
static void p_window(fd_backend *be, oh_case *c, int side) {
    const int Hkv = c->i[3], hd = c->i[4];
    be->kv_store(be, FD_KV_FLAT(oh_p(c, 0, side), c->i[6]), oh_p(c, 1, side), oh_p(c, 2, side), 0, NULL,
                 c->i[0] + c->i[1], Hkv, hd);
}
static void r_window(fd_backend *be, oh_case *c, int side) {
    be->attention_window(be, oh_p(c, 4, side), oh_p(c, 3, side), FD_KV_FLAT(oh_p(c, 0, side), c->i[6]), c->i[0],
                         c->i[1], c->i[2], c->i[3], c->i[4], 1.0f / sqrtf((float)c->i[4]), c->i[5]);
}

// ---- moe: s = n, d, E, top-k, inter, shared inter, renorm, with the shared expert ----
// Weights: 0 router, then gate / up / down of each expert, then the shared expert's gate, up, down and gate vector.
static void b_moe(oh_case *c, const int *s) {
    const int n = s[0], d = s[1], E = s[2], inter = s[4], sh = s[5];
    snprintf(c->what, sizeof c->what, "moe n=%d d=%d E=%d k=%d I=%d renorm=%d shared=%d", n, d, E, s[3], inter, s[6],
             s[7]);
    FD_CHECK(3 * E + 5 <= OH_MAX_WEIGHTS, "moe row: %d experts is more than the harness holds", E);
    oh_weight(c, "router", E, d, FD_BF16, -0.2f, 0.2f);
    for (int e = 0; e < E; e++) {
        oh_weight(c, "gate", inter, d, FD_BF16, -0.1f, 0.1f);
        oh_weight(c, "up", inter, d, FD_BF16, -0.1f, 0.1f);
        oh_weight(c, "down", d, inter, FD_BF16, -0.1f, 0.1f);
    }
    oh_weight(c, "sh_gate", sh, d, FD_BF16, -0.1f, 0.1f);
    oh_weight(c, "sh_up", sh, d, FD_BF16, -0.1f, 0.1f);
    oh_weight(c, "sh_down", d, sh, FD_BF16, -0.1f, 0.1f);
    oh_weight(c, "sh_gate_w", 1, d, FD_BF16, -0.1f, 0.1f);
    oh_buf_f32(c, "x", OH_IN, (size_t)n * d, -1, 1, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * d, 0, 0, TOL_BF16);
    memcpy(c->i, s, 8 * sizeof(int));
}
static void r_moe(fd_backend *be, oh_case *c, int side) {
    enum { MAX_E = (OH_MAX_WEIGHTS - 5) / 3 };
    fd_weight gate[MAX_E], up[MAX_E], down[MAX_E]; // the experts as arrays, as the model binds them
    const int E = c->i[2], sh = 1 + 3 * E;
    for (int e = 0; e < E; e++)
        gate[e] = *oh_w(c, 1 + 3 * e, side), up[e] = *oh_w(c, 2 + 3 * e, side), down[e] = *oh_w(c, 3 + 3 * e, side);
    fd_moe_weights mw = {oh_w(c, 0, side), gate,    up,      down,   NULL, NULL, NULL, NULL, E,
                         c->i[3],          c->i[4], c->i[5], c->i[6]};
    if (c->i[7])
        mw.sh_gate = oh_w(c, sh, side), mw.sh_up = oh_w(c, sh + 1, side), mw.sh_down = oh_w(c, sh + 2, side),
        mw.sh_gate_w = oh_w(c, sh + 3, side);
    be->moe(be, oh_p(c, 1, side), oh_p(c, 0, side), &mw, c->i[0], c->i[1]);
}

// ---- dyn_conv: s = n, d, group, K, base kernel dtype, half (0 pre, 1 post taps); the same fp32 operations in
// the same order on both sides, so exact ----
static void b_dyn_conv(oh_case *c, const int *s) {
    const int n = s[0], d = s[1], group = s[2], K = s[3], stride = 2 * K * (d / group);
    snprintf(c->what, sizeof c->what, "dyn_conv n=%d d=%d group=%d K=%d base %s half %d", n, d, group, K,
             fd_dtype_name((fd_dtype)s[4]), s[5]);
    oh_buf_f32(c, "x", OH_IN, (size_t)n * d, -2, 2, 0);
    oh_buf_f32(c, "dyn", OH_IN, (size_t)n * stride, -1, 1, 0);
    oh_weight(c, "base_kernel", 2, (int64_t)K * d, (fd_dtype)s[4], -1, 1);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * d, 0, 0, TOL_EXACT);
    memcpy(c->i, s, 6 * sizeof(int));
    c->i[6] = stride;
}
static void r_dyn_conv(fd_backend *be, oh_case *c, int side) {
    const int K = c->i[3], G = c->i[1] / c->i[2], half = c->i[5];
    const float *dyn = (const float *)oh_p(c, 1, side) + (size_t)half * K * G;
    be->dyn_conv(be, oh_p(c, 2, side), oh_p(c, 0, side), dyn, c->i[6], oh_w(c, 0, side), half, c->i[0], c->i[1],
                 c->i[2], K);
}

// ---- argmax_rows: s = rows, V (ids to the host, exact) ----
static void b_argmax(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "argmax_rows rows=%d V=%d", s[0], s[1]);
    oh_buf_f32(c, "logits", OH_IN, (size_t)s[0] * s[1], -30, 30, 0);
    oh_buf_i32(c, "ids", OH_HOST_OUT, (size_t)s[0], NULL);
    c->i[0] = s[0], c->i[1] = s[1];
}
static void r_argmax(fd_backend *be, oh_case *c, int side) {
    be->argmax_rows(be, oh_p(c, 1, side), oh_p(c, 0, side), c->i[0], c->i[1]);
}

// ---- topk_rows: s = rows, V, K (pairs to the host, exact; ties, NaNs and zeros: test_cuda_topk.c) ----
static void b_topk(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "topk_rows rows=%d V=%d K=%d", s[0], s[1], s[2]);
    oh_buf_f32(c, "logits", OH_IN, (size_t)s[0] * s[1], -30, 30, 0);
    oh_buf_i32(c, "ids", OH_HOST_OUT, (size_t)s[0] * s[2], NULL);
    oh_buf_f32(c, "vals", OH_HOST_OUT, (size_t)s[0] * s[2], 0, 0, TOL_EXACT);
    c->i[0] = s[0], c->i[1] = s[1], c->i[2] = s[2];
}
static void r_topk(fd_backend *be, oh_case *c, int side) {
    be->topk_rows(be, oh_p(c, 1, side), oh_p(c, 2, side), oh_p(c, 0, side), c->i[0], c->i[1], c->i[2]);
}

// ---- tree verify (spec_verify=tree): s[..] ends with the tree's shape: 0 a chain, 1 wide (every node a child of
// the root), 2 random (each node hangs off one of the 6 nodes before it, a fixed seed) ----
static void tree_parents(int n, int shape, int32_t *parent, int32_t *depth) {
    uint64_t seed = 99;
    for (int t = 0; t < n; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int lo = t > 6 ? t - 6 : 0;
        parent[t] = t == 0 ? -1 : shape == 0 ? t - 1 : shape == 1 ? 0 : lo + (int)((seed >> 33) % (uint64_t)(t - lo));
        if (depth) depth[t] = t == 0 ? 0 : depth[parent[t]] + 1;
    }
}
static const char *tree_shape_name(int shape) {
    return shape == 0 ? "chain" : shape == 1 ? "wide" : "random";
}
// conv1d_silu_tree: s = C, n, K, shape. The committed state is only read: INOUT with an exact bound checks that.
static void b_conv_tree(oh_case *c, const int *s) {
    const int C = s[0], n = s[1], K = s[2];
    int32_t parent[64];
    tree_parents(n, s[3], parent, NULL);
    snprintf(c->what, sizeof c->what, "conv1d_silu_tree C=%d n=%d K=%d %s", C, n, K, tree_shape_name(s[3]));
    oh_weight(c, "conv", C, K, FD_BF16, -0.7f, 0.7f);
    oh_buf_f32(c, "x", OH_IN, (size_t)n * C, -2, 2, 0);
    oh_buf_f32(c, "out", OH_OUT, (size_t)n * C, 0, 0, TOL_F32);
    oh_buf_f32(c, "state", OH_INOUT, (size_t)C * (K - 1), -1, 1, TOL_EXACT);
    oh_buf_f32(c, "slots", OH_OUT, (size_t)n * C * (K - 1), 0, 0, TOL_EXACT); // copies of inputs
    oh_buf_i32(c, "parent", OH_IN, (size_t)n, parent);
    memcpy(c->i, s, 4 * sizeof(int));
}
static void r_conv_tree(fd_backend *be, oh_case *c, int side) {
    be->conv1d_silu_tree(be, oh_p(c, 1, side), oh_p(c, 0, side), oh_w(c, 0, side), oh_p(c, 2, side), c->i[1], c->i[0],
                         c->i[2], oh_p(c, 3, side), oh_p(c, 4, side));
}
// gdn_core_tree: s = n, Hk, Hv, dk, dv, shape.
static void b_gdn_tree(oh_case *c, const int *s) {
    const int n = s[0], Hk = s[1], Hv = s[2], dk = s[3], dv = s[4];
    int32_t parent[64];
    tree_parents(n, s[5], parent, NULL);
    snprintf(c->what, sizeof c->what, "gdn_core_tree n=%d Hk=%d Hv=%d dk=%d dv=%d %s", n, Hk, Hv, dk, dv,
             tree_shape_name(s[5]));
    gdn_operands(c, n, Hk, Hv, dk, dv);
    oh_buf_f32(c, "state", OH_INOUT, (size_t)Hv * dk * dv, -0.3f, 0.3f, TOL_EXACT);
    oh_buf_f32(c, "slots", OH_OUT, (size_t)n * Hv * dk * dv, 0, 0, TOL_GDN);
    oh_buf_i32(c, "parent", OH_IN, (size_t)n, parent);
    memcpy(c->i, s, 6 * sizeof(int));
}
static void r_gdn_tree(fd_backend *be, oh_case *c, int side) {
    be->gdn_core_tree(be, oh_p(c, 3, side), oh_p(c, 0, side), oh_p(c, 1, side), oh_p(c, 2, side), oh_w(c, 0, side),
                      oh_w(c, 1, side), oh_p(c, 4, side), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4], oh_p(c, 5, side),
                      oh_p(c, 6, side));
}
// attention_tree: s = n0, n, H, Hkv, hd, shape; the buffers of attention (b_attn_common), then 6 the parents.
static void b_attn_tree(oh_case *c, const int *s) {
    char mode[32];
    snprintf(mode, sizeof mode, " %s", tree_shape_name(s[5]));
    b_attn_common(c, s, "attention_tree", mode);
    int32_t parent[64];
    tree_parents(s[1], s[5], parent, NULL);
    oh_buf_i32(c, "parent", OH_IN, (size_t)s[1], parent);
}
static void r_attn_tree(fd_backend *be, oh_case *c, int side) {
    be->attention_tree(be, oh_p(c, 4, side), oh_p(c, 3, side), FD_KV_FLAT(oh_p(c, 0, side), c->i[6]), c->i[0], c->i[1],
                       c->i[2], c->i[3], c->i[4], 1.0f / sqrtf((float)c->i[4]), oh_p(c, 6, side));
}
// qk_norm_rope_tree: s = n, H, Hkv, hd, rot_dim, shape (row t at position 1000 + its depth).
static void b_rope_tree(oh_case *c, const int *s) {
    const int n = s[0], H = s[1], Hkv = s[2], hd = s[3];
    int32_t parent[64], depth[64];
    tree_parents(n, s[5], parent, depth);
    snprintf(c->what, sizeof c->what, "qk_norm_rope_tree n=%d H=%d Hkv=%d hd=%d rot=%d %s", n, H, Hkv, hd, s[4],
             tree_shape_name(s[5]));
    oh_weight(c, "q_norm", hd, 1, FD_F32, -0.5f, 0.5f);
    oh_weight(c, "k_norm", hd, 1, FD_F32, -0.5f, 0.5f);
    oh_buf_f32(c, "qg", OH_IN, (size_t)n * H * 2 * hd, -2, 2, 0);
    oh_buf_f32(c, "q", OH_OUT, (size_t)n * H * hd, 0, 0, TOL_F32);
    oh_buf_f32(c, "gate", OH_OUT, (size_t)n * H * hd, 0, 0, TOL_EXACT);
    oh_buf_f32(c, "k", OH_INOUT, (size_t)n * Hkv * hd, -2, 2, TOL_F32);
    oh_buf_i32(c, "depth", OH_IN, (size_t)n, depth);
    memcpy(c->i, s, 6 * sizeof(int));
}
static void r_rope_tree(fd_backend *be, oh_case *c, int side) {
    be->qk_norm_rope_tree(be, oh_p(c, 1, side), oh_p(c, 2, side), oh_p(c, 3, side), oh_p(c, 0, side), oh_w(c, 0, side),
                          oh_w(c, 1, side), c->i[0], c->i[1], c->i[2], c->i[3], c->i[4], 1e7f, 1e-6f, 1000,
                          oh_p(c, 4, side));
}
// logsumexp_rows: s = rows, V (to the host; fp32 partial sums on the GPU vs double on the CPU).
static void b_lse(oh_case *c, const int *s) {
    snprintf(c->what, sizeof c->what, "logsumexp_rows rows=%d V=%d", s[0], s[1]);
    oh_buf_f32(c, "logits", OH_IN, (size_t)s[0] * s[1], -30, 30, 0);
    oh_buf_f32(c, "lse", OH_HOST_OUT, (size_t)s[0], 0, 0, TOL_F32);
    c->i[0] = s[0], c->i[1] = s[1];
}
static void r_lse(fd_backend *be, oh_case *c, int side) {
    be->logsumexp_rows(be, oh_p(c, 1, side), oh_p(c, 0, side), c->i[0], c->i[1]);
}

// ---- the rows ----
#define CONV(C, n, slots, p) ROW(conv1d_silu, b_conv, r_conv, .s = {C, n, 4, slots}, .perf = p)
#define GDN(n, Hk, Hv, dk, dv, route, slots, p)                                                                        \
    ROW(gdn_core, b_gdn, r_gdn, .s = {n, Hk, Hv, dk, dv, route, slots}, .perf = p)
#define ATTN(n0, n, H, Hkv, hd, causal, route_spec, p)                                                                 \
    ROW(attention, b_attn, r_attn, .prepare = p_attn, .s = {n0, n, H, Hkv, hd, causal}, .route = route_spec, .perf = p)
#define WINDOW(n0, n, H, Hkv, hd, window, p)                                                                           \
    ROW(attention_window, b_window, r_window, .prepare = p_window, .s = {n0, n, H, Hkv, hd, window}, .perf = p)
#define MOE(n, d, E, k, I, Ish, renorm, shared, p)                                                                     \
    ROW(moe, b_moe, r_moe, .s = {n, d, E, k, I, Ish, renorm, shared}, .perf = p)
#define DYN(n, d, group, K, dt)                                                                                        \
    ROW(dyn_conv, b_dyn_conv, r_dyn_conv, .s = {n, d, group, K, dt, 0}, .perf = TEST_ONLY),                            \
        ROW(dyn_conv, b_dyn_conv, r_dyn_conv, .s = {n, d, group, K, dt, 1}, .perf = BOTH)
// The CUDA-core attention kernel (attn_kernel=simt) over the GQA head shapes; calls with <= 16 tokens take the
// split-K decode kernel whatever the route (test_cuda_decode_attn.c covers it in depth).
#define SIMT_AT(n0, n)                                                                                                 \
    ATTN(n0, n, 6, 2, 256, 1, "attn_kernel=simt", TEST_ONLY),                                                          \
        ATTN(n0, n, 8, 2, 128, 1, "attn_kernel=simt", TEST_ONLY),                                                      \
        ATTN(n0, n, 4, 4, 64, 1, "attn_kernel=simt", TEST_ONLY)
#define NONCAUSAL_AT(n0, n)                                                                                            \
    ATTN(n0, n, 6, 2, 256, 0, "attn_kernel=simt", TEST_ONLY), ATTN(n0, n, 8, 2, 128, 0, "attn_kernel=simt", TEST_ONLY)
// The tensor-core kernel (attn_kernel=mma; its block is 128 rows of 8 warps x 16, its key tile 64): one
// half-empty block, row counts no multiple of 128 or 16, warps of padding only, pos0 off the key grid, many tiles,
// blocks across the causal diagonal; calls below 64 rows fall back to the CUDA-core kernel under this route.
#define MMA(n0, n, H, Hkv, hd, causal) ATTN(n0, n, H, Hkv, hd, causal, "attn_kernel=mma", TEST_ONLY)
// The Hopper wgmma kernel (attn_kernel=wgmma; 2 warpgroups x 64 rows, key tile 64; head_dim 256 over bf16 or e4m3,
// other shapes run the mma kernel under this route): the mma rows at head_dim 256, a second warpgroup that is
// partly live (n 40 at G 2: rows 64..79) or barely (n 22 at G 3: 66 rows), one head_dim-128 call (mma fallback).
#define WGMMA(n0, n, H, Hkv, hd, causal) ATTN(n0, n, H, Hkv, hd, causal, "attn_kernel=wgmma", TEST_ONLY)

const oh_row oh_rows_seq[] = {
    // conv1d_silu from a random state; with slots, the state after every token (speculative verify)
    CONV(777, 1, 0, TEST_ONLY),
    CONV(777, 7, 0, TEST_ONLY),
    CONV(777, 64, 0, TEST_ONLY),
    CONV(777, 200, 0, TEST_ONLY),
    CONV(777, 2, 0, TEST_ONLY),
    CONV(777, 1, 1, TEST_ONLY),
    CONV(777, 200, 1, TEST_ONLY),
    CONV(777, 7, 1, TEST_ONLY),
    CONV(777, 3, 1, TEST_ONLY),
    CONV(8192, 1, 0, TEST_ONLY),
    CONV(8192, 7, 0, TEST_ONLY),
    CONV(8192, 64, 0, TEST_ONLY),
    CONV(8192, 200, 0, TEST_ONLY),
    CONV(8192, 2, 0, TEST_ONLY),
    CONV(8192, 1, 1, TEST_ONLY),
    CONV(8192, 200, 1, TEST_ONLY),
    CONV(8192, 7, 1, TEST_ONLY),
    CONV(8192, 3, 1, TEST_ONLY),
    CONV(10240, 1, 0, BOTH),
    CONV(10240, 16, 1, BOTH),
    CONV(10240, 4096, 0, BOTH),
    // gdn_core: both routes, slots, the 27B layer (Hk 16, Hv 48, 128 / 128) at prefill, decode and verify
    GDN(64, 2, 6, 128, 128, FD_GDN_CHUNKED, 0, TEST_ONLY),
    GDN(200, 2, 6, 128, 128, FD_GDN_SERIAL, 0, TEST_ONLY),
    GDN(130, 2, 4, 96, 48, FD_GDN_CHUNKED, 0, TEST_ONLY),
    GDN(16, 2, 6, 128, 128, FD_GDN_CHUNKED, 1, TEST_ONLY),
    GDN(66, 1, 1, 24, 20, FD_GDN_CHUNKED, 0, TEST_ONLY),
    GDN(512, 16, 48, 128, 128, FD_GDN_CHUNKED, 0, BOTH),
    GDN(4096, 16, 48, 128, 128, FD_GDN_CHUNKED, 0, OH_PERF_ONLY),
    GDN(4096, 16, 48, 128, 128, FD_GDN_SERIAL, 0, OH_PERF_ONLY),
    GDN(1, 16, 48, 128, 128, FD_GDN_SERIAL, 0, BOTH),
    GDN(16, 16, 48, 128, 128, FD_GDN_SERIAL, 1, BOTH),
    // attention, CUDA-core kernel: context 0..3000, 1..200 new rows
    SIMT_AT(0, 1),
    SIMT_AT(0, 7),
    SIMT_AT(0, 64),
    SIMT_AT(0, 200),
    SIMT_AT(37, 1),
    SIMT_AT(100, 7),
    SIMT_AT(3000, 5),
    SIMT_AT(500, 64),
    // the DFlash drafter's block: every query sees the whole context and block
    NONCAUSAL_AT(0, 7),
    NONCAUSAL_AT(100, 16),
    NONCAUSAL_AT(3000, 16),
    NONCAUSAL_AT(37, 1),
    MMA(0, 64, 6, 2, 256, 1),
    MMA(0, 200, 6, 2, 256, 1),
    MMA(500, 64, 6, 2, 256, 1),
    MMA(0, 300, 8, 2, 128, 1),
    MMA(1000, 130, 8, 2, 128, 1),
    MMA(0, 77, 4, 4, 64, 1),
    MMA(33, 100, 6, 2, 256, 0),
    MMA(0, 70, 8, 2, 128, 0),
    MMA(3000, 5, 6, 2, 256, 1),
    MMA(0, 64, 4, 4, 32, 1),
    MMA(0, 64, 4, 4, 64, 1),
    MMA(4001, 150, 6, 1, 256, 1),
    MMA(130, 211, 8, 2, 64, 0),
    MMA(65, 129, 4, 1, 128, 0),
    MMA(127, 43, 12, 4, 256, 1),
    MMA(1, 257, 2, 2, 64, 1),
    WGMMA(0, 64, 6, 2, 256, 1),
    WGMMA(0, 200, 6, 2, 256, 1),
    WGMMA(500, 64, 6, 2, 256, 1),
    WGMMA(33, 100, 6, 2, 256, 0),
    WGMMA(4001, 150, 6, 1, 256, 1),
    WGMMA(127, 43, 12, 4, 256, 1),
    WGMMA(0, 40, 4, 2, 256, 1),
    WGMMA(70, 22, 3, 1, 256, 1),
    WGMMA(1000, 130, 8, 2, 128, 1),
    // the 27B attention (24q / 4kv x 256) under the default routes: prefill, verify and decode at 32K
    // (a 4096-token prefill is 0.4 TFLOP: too much for the CPU reference, so perf mode only)
    ATTN(0, 4096, 24, 4, 256, 1, NULL, OH_PERF_ONLY),
    ATTN(32768, 16, 24, 4, 256, 1, NULL, BOTH),
    ATTN(32768, 1, 24, 4, 256, 1, NULL, BOTH),
    ATTN(0, 4096, 24, 4, 256, 1, "attn_kernel=simt", OH_PERF_ONLY),
    ATTN(0, 4096, 24, 4, 256, 1, "attn_kernel=wgmma", OH_PERF_ONLY),
    ATTN(0, 512, 24, 4, 256, 1, NULL, BOTH),
    // the same decode / verify calls on the other decode kernel (route attn_decode=warp), and its row blocks of 8, 16
    // and 32 rows at the smaller head dims, the drafter's non-causal block
    ATTN(32768, 16, 24, 4, 256, 1, "attn_decode=warp", BOTH),
    ATTN(32768, 8, 24, 4, 256, 1, "attn_decode=warp", BOTH),
    ATTN(32768, 1, 24, 4, 256, 1, "attn_decode=warp", BOTH),
    ATTN(3000, 5, 8, 2, 128, 1, "attn_decode=warp", TEST_ONLY),
    ATTN(777, 16, 16, 4, 64, 1, "attn_decode=warp", TEST_ONLY),
    ATTN(3000, 16, 32, 8, 128, 0, "attn_decode=warp", BOTH),
    // the DFlash2 drafter: windowed block attention and the dynamic conv
    WINDOW(100, 16, 4, 2, 16, 64, TEST_ONLY),
    WINDOW(3000, 16, 32, 8, 128, 2048, BOTH),
    WINDOW(50, 8, 4, 2, 16, 5, TEST_ONLY),
    WINDOW(0, 16, 4, 4, 64, 3, TEST_ONLY),
    WINDOW(500, 4, 6, 2, 256, 20, TEST_ONLY),
    WINDOW(40, 16, 8, 1, 64, 100, TEST_ONLY),
    WINDOW(300, 16, 8, 2, 128, 1, TEST_ONLY),
    WINDOW(20000, 8, 16, 4, 128, 4096, BOTH),
    DYN(16, 64, 8, 2, FD_BF16),
    DYN(8, 64, 8, 2, FD_F32),
    DYN(16, 5120, 16, 2, FD_BF16),
    DYN(1, 96, 32, 1, FD_F32),
    DYN(4, 96, 32, 3, FD_BF16),
    DYN(16, 2048, 1, 4, FD_F32),
    DYN(7, 1000, 8, 7, FD_BF16),
    // MoE: router, top-k experts, shared expert
    MOE(1, 128, 16, 4, 96, 64, 1, 1, TEST_ONLY),
    MOE(1, 96, 10, 3, 40, 24, 0, 0, TEST_ONLY),
    MOE(7, 128, 16, 4, 96, 64, 1, 1, TEST_ONLY),
    MOE(7, 96, 10, 3, 40, 24, 0, 0, TEST_ONLY),
    MOE(64, 128, 16, 4, 96, 64, 1, 1, TEST_ONLY),
    MOE(64, 96, 10, 3, 40, 24, 0, 0, TEST_ONLY),
    MOE(200, 128, 16, 4, 96, 64, 1, 1, TEST_ONLY),
    MOE(200, 96, 10, 3, 40, 24, 0, 0, TEST_ONLY),
    MOE(33, 256, 64, 8, 32, 48, 1, 1, TEST_ONLY),
    MOE(16, 2048, 64, 8, 512, 512, 1, 1, BOTH),
    ROW(argmax_rows, b_argmax, r_argmax, .s = {3, 1000}, .perf = TEST_ONLY),
    ROW(argmax_rows, b_argmax, r_argmax, .s = {1, 248320}, .perf = BOTH),
    ROW(argmax_rows, b_argmax, r_argmax, .s = {16, 248320}, .perf = BOTH),
    ROW(topk_rows, b_topk, r_topk, .s = {3, 1000, 1}, .perf = TEST_ONLY),
    ROW(topk_rows, b_topk, r_topk, .s = {2, 300, 256}, .perf = TEST_ONLY),
    ROW(topk_rows, b_topk, r_topk, .s = {7, 248320, 16}, .perf = BOTH),
    // tree verify: chain-shaped, wide and random trees of 12 / 17 / 33 / 64 nodes, the 27B's layer in perf mode
    ROW(conv1d_silu_tree, b_conv_tree, r_conv_tree, .s = {1000, 12, 4, 0}, .perf = TEST_ONLY),
    ROW(conv1d_silu_tree, b_conv_tree, r_conv_tree, .s = {300, 17, 2, 1}, .perf = TEST_ONLY),
    ROW(conv1d_silu_tree, b_conv_tree, r_conv_tree, .s = {10240, 33, 4, 2}, .perf = BOTH),
    ROW(gdn_core_tree, b_gdn_tree, r_gdn_tree, .s = {12, 2, 6, 128, 128, 0}, .perf = TEST_ONLY),
    ROW(gdn_core_tree, b_gdn_tree, r_gdn_tree, .s = {17, 2, 2, 48, 37, 1}, .perf = TEST_ONLY),
    ROW(gdn_core_tree, b_gdn_tree, r_gdn_tree, .s = {64, 1, 2, 256, 128, 2}, .perf = TEST_ONLY),
    ROW(gdn_core_tree, b_gdn_tree, r_gdn_tree, .s = {33, 16, 48, 128, 128, 2}, .perf = BOTH),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {500, 33, 12, 2, 128, 2},
        .perf = TEST_ONLY),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {7, 17, 4, 2, 32, 1}, .perf = TEST_ONLY),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {1000, 64, 6, 2, 256, 2},
        .perf = TEST_ONLY),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {8192, 33, 24, 4, 256, 2}, .perf = BOTH),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {8192, 33, 24, 4, 256, 2},
        .route = "attn_decode=warp", .perf = BOTH),
    ROW(attention_tree, b_attn_tree, r_attn_tree, .prepare = p_window, .s = {500, 33, 12, 2, 128, 2},
        .route = "attn_decode=warp", .perf = TEST_ONLY),
    ROW(qk_norm_rope_tree, b_rope_tree, r_rope_tree, .s = {33, 6, 2, 128, 64, 2}, .perf = TEST_ONLY),
    ROW(qk_norm_rope_tree, b_rope_tree, r_rope_tree, .s = {33, 24, 4, 256, 64, 2}, .perf = BOTH),
    ROW(logsumexp_rows, b_lse, r_lse, .s = {3, 1000}, .perf = TEST_ONLY),
    ROW(logsumexp_rows, b_lse, r_lse, .s = {7, 248320}, .perf = BOTH),
};
const size_t oh_n_rows_seq = sizeof oh_rows_seq / sizeof oh_rows_seq[0];
