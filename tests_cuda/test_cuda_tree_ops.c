// The tree verify ops on the CUDA backend (backend.h: conv1d_silu_tree, gdn_core_tree, attention_tree; route
// spec_verify=tree) against the CPU reference on fresh random inputs, GPU outputs NaN-poisoned, over tree shapes
// that take every branch of the kernels: a chain-shaped tree, a wide one (every node a child of the root), a
// branching one, and random trees of 33 and 64 nodes (budgets 32 and 63):
//   - cuda_tree_conv_gdn_vs_cpu: conv outputs (TOL_F32), conv slots (exact: they are copies of inputs), GDN
//     outputs and slots (TOL_GDN) at the 27B head and at shapes that take the other code paths of k_gdn_rec; the
//     committed states must come back unchanged (exact);
//   - cuda_tree_gdn_path_equals_chain: every node of the GPU tree, bitwise the GPU chain op (gdn_core with slots)
//     run over that node's root-to-node path (the reload-from-parent logic must not change a bit);
//   - cuda_tree_attention_vs_cpu: bf16 and e4m3 KV (the same layout on both sides), head_dim 64/128/256 (the
//     split-K decode kernel, both attn_decode values) and 32/96 (the CUDA-core kernel), GQA groups 1 and 6, contexts 0..5000 (trees that
//     straddle a 512-key chunk boundary), TOL_ATTN, with the route counted; and a chain-shaped tree of <= 16 nodes
//     bitwise the causal attention op (the same kernel, the tree mask reduced to the causal one);
//   - cuda_tree_qk_norm_rope_rows: the one-launch RoPE at the nodes' depths, bitwise the per-row qk_norm_rope calls
//     at those positions (what the forward did before the op), and within TOL_F32 of the CPU;
//   - cuda_tree_ranked_rows: the tree build's ranked draft rows from the GPU (topk_rows + logsumexp_rows) vs the
//     host's (spec_tree_rank_row): ids exact (value desc, index asc), log-softmax values and logsumexp within 1e-4
//     (fp32 vs double sums) at the 27B vocabulary, k 1..63, and rows of ties (more ties than places at the k-th
//     value, every value equal) and of -inf entries.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/dflash_tree.h"

CUDA_RIG(0x7ee5eed5ull)

#define MAX_NODES 64

typedef struct {
    char name[24];
    int n;
    int32_t parent[MAX_NODES];
} tree_shape;

// The shapes every test runs: chain, wide, branching (the CPU test's tree), random of 33 and 64 nodes.
static int make_shapes(tree_shape *s) {
    static const int32_t branching[] = {-1, 0, 0, 1, 1, 2, 3, 5, 0, 6, 3};
    int k = 0;
    s[k] = (tree_shape){"chain 12", 12, {0}};
    for (int t = 0; t < 12; t++) s[k].parent[t] = t - 1;
    k++;
    s[k] = (tree_shape){"wide 17", 17, {0}};
    for (int t = 0; t < 17; t++) s[k].parent[t] = t ? 0 : -1;
    k++;
    s[k] = (tree_shape){"branching 11", 11, {0}};
    memcpy(s[k].parent, branching, sizeof branching);
    k++;
    uint64_t seed = 99;
    for (int n = 33; n <= 64; n += 31, k++) { // random trees: each node hangs off one of the 6 nodes before it
        snprintf(s[k].name, sizeof s[k].name, "random %d", n);
        s[k].n = n;
        s[k].parent[0] = -1;
        for (int t = 1; t < n; t++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const int lo = t > 6 ? t - 6 : 0;
            s[k].parent[t] = lo + (int)((seed >> 33) % (uint64_t)(t - lo));
        }
    }
    return k;
}

static void *up_i32(const int32_t *h, int n) {
    return cuda_rig_up(gpu(), h, sizeof(int32_t) * (size_t)n);
}

static int same_bits(const void *a, const void *b, size_t floats) {
    return !memcmp(a, b, floats * sizeof(float));
}

static void conv_case(const tree_shape *ts, int C, int K) {
    const int n = ts->n;
    const size_t cnt = (size_t)n * C, ns = (size_t)C * (K - 1);
    float *wf = rnd((size_t)C * K, -0.7f, 0.7f), *st = rnd(ns, -1, 1), *x = rnd(cnt, -2, 2);
    fd_weight wc = cuda_rig_f32_weight(cpu(), "conv", wf, C, K), wg = cuda_rig_f32_weight(gpu(), "conv", wf, C, K);
    float *oc = fd_malloc(cnt * 4), *slc = fd_malloc(cnt * (K - 1) * 4 + 4);
    cpu()->conv1d_silu_tree(cpu(), oc, x, &wc, st, n, C, K, slc, ts->parent);
    void *dx = up(x, cnt), *dst = up(st, ns), *dout = poisoned(cnt), *dsl = poisoned(cnt * (K - 1));
    void *dpar = up_i32(ts->parent, n);
    gpu()->conv1d_silu_tree(gpu(), dout, dx, &wg, dst, n, C, K, dsl, dpar);
    float *og = down(dout, cnt), *slg = down(dsl, cnt * (K - 1)), *stg = down(dst, ns);
    char what[96];
    snprintf(what, sizeof what, "conv tree %s C=%d K=%d: out", ts->name, C, K);
    cmp(what, og, oc, cnt, TOL_F32);
    const int slots_exact = same_bits(slg, slc, cnt * (K - 1)), state_kept = same_bits(stg, st, ns);
    printf("    conv tree %s C=%d K=%d: slots %s, committed state %s\n", ts->name, C, K,
           slots_exact ? "exact" : "DIFFER", state_kept ? "unchanged" : "CHANGED");
    EXPECT(slots_exact && state_kept, "conv tree %s K=%d: slots %d, state %d", ts->name, K, slots_exact, state_kept);
    dfree(dx), dfree(dst), dfree(dout), dfree(dsl), dfree(dpar);
    gpu()->release_weight(gpu(), &wg), cpu()->release_weight(cpu(), &wc);
    free(wf), free(st), free(x), free(oc), free(slc), free(og), free(slg), free(stg);
}

// One GDN tree on both backends; with `paths`, also every node against the GPU chain op over its path.
static void gdn_case(const tree_shape *ts, int Hk, int Hv, int dk, int dv, int paths) {
    const int n = ts->n, cq = 2 * Hk * dk + Hv * dv;
    const size_t ns = (size_t)Hv * dk * dv, no = (size_t)Hv * dv;
    float *qkv = rnd((size_t)n * cq, -1, 1), *b = rnd((size_t)n * Hv, -3, 3), *a = rnd((size_t)n * Hv, -3, 3);
    float *S0 = rnd(ns, -0.3f, 0.3f), *Al = rnd((size_t)Hv, -1, 1.5f), *dtb = rnd((size_t)Hv, -1, 1);
    fd_weight Ac = cuda_rig_f32_weight(cpu(), "A_log", Al, Hv, 1),
              dc = cuda_rig_f32_weight(cpu(), "dt_bias", dtb, Hv, 1);
    fd_weight Ag = cuda_rig_f32_weight(gpu(), "A_log", Al, Hv, 1),
              dg = cuda_rig_f32_weight(gpu(), "dt_bias", dtb, Hv, 1);
    float *oc = fd_malloc((size_t)n * no * 4), *slc = fd_malloc((size_t)n * ns * 4);
    cpu()->gdn_core_tree(cpu(), oc, qkv, b, a, &Ac, &dc, S0, n, Hk, Hv, dk, dv, slc, ts->parent);
    void *dq = up(qkv, (size_t)n * cq), *db = up(b, (size_t)n * Hv), *da = up(a, (size_t)n * Hv), *dS = up(S0, ns);
    void *dout = poisoned((size_t)n * no), *dsl = poisoned((size_t)n * ns), *dpar = up_i32(ts->parent, n);
    gpu()->gdn_core_tree(gpu(), dout, dq, db, da, &Ag, &dg, dS, n, Hk, Hv, dk, dv, dsl, dpar);
    float *og = down(dout, (size_t)n * no), *slg = down(dsl, (size_t)n * ns), *Sg = down(dS, ns);
    char what[96];
    snprintf(what, sizeof what, "gdn tree %s Hk=%d Hv=%d dk=%d dv=%d: out", ts->name, Hk, Hv, dk, dv);
    cmp(what, og, oc, (size_t)n * no, TOL_GDN);
    snprintf(what, sizeof what, "gdn tree %s Hk=%d Hv=%d dk=%d dv=%d: slots", ts->name, Hk, Hv, dk, dv);
    cmp(what, slg, slc, (size_t)n * ns, TOL_GDN);
    EXPECT(same_bits(Sg, S0, ns), "gdn tree %s: the committed state changed", ts->name);
    int paths_same = 1, checked = 0;
    for (int t = 0; paths && t < n; t++) { // the chain op over node t's path: its last row and slot are node t's
        int32_t path[MAX_NODES];
        int len = 0;
        for (int u = t; u >= 0; u = ts->parent[u]) len++;
        for (int u = t, i = len - 1; u >= 0; u = ts->parent[u], i--) path[i] = u;
        float *pq = fd_malloc((size_t)len * cq * 4), *pb = fd_malloc((size_t)len * Hv * 4),
              *pa = fd_malloc((size_t)len * Hv * 4);
        for (int i = 0; i < len; i++) {
            memcpy(pq + (size_t)i * cq, qkv + (size_t)path[i] * cq, (size_t)cq * 4);
            memcpy(pb + (size_t)i * Hv, b + (size_t)path[i] * Hv, (size_t)Hv * 4);
            memcpy(pa + (size_t)i * Hv, a + (size_t)path[i] * Hv, (size_t)Hv * 4);
        }
        void *cq_d = up(pq, (size_t)len * cq), *cb = up(pb, (size_t)len * Hv), *ca = up(pa, (size_t)len * Hv);
        void *cS = up(S0, ns), *co = poisoned((size_t)len * no), *csl = poisoned((size_t)len * ns);
        gpu()->gdn_core(gpu(), FD_GDN_SERIAL, co, cq_d, cb, ca, &Ag, &dg, cS, len, Hk, Hv, dk, dv, csl);
        float *ho = down(co, (size_t)len * no), *hsl = down(csl, (size_t)len * ns);
        paths_same &= same_bits(ho + (size_t)(len - 1) * no, og + (size_t)t * no, no) &&
                      same_bits(hsl + (size_t)(len - 1) * ns, slg + (size_t)t * ns, ns);
        checked++;
        dfree(cq_d), dfree(cb), dfree(ca), dfree(cS), dfree(co), dfree(csl);
        free(pq), free(pb), free(pa), free(ho), free(hsl);
    }
    if (paths) {
        printf("    gdn tree %s Hk=%d Hv=%d dk=%d dv=%d: %d nodes vs the chain over their paths: %s\n", ts->name, Hk,
               Hv, dk, dv, checked, paths_same ? "bitwise" : "DIFFER");
        EXPECT(paths_same, "gdn tree %s: a node differs from the chain over its path", ts->name);
    }
    dfree(dq), dfree(db), dfree(da), dfree(dS), dfree(dout), dfree(dsl), dfree(dpar);
    gpu()->release_weight(gpu(), &Ag), gpu()->release_weight(gpu(), &dg);
    cpu()->release_weight(cpu(), &Ac), cpu()->release_weight(cpu(), &dc);
    free(qkv), free(b), free(a), free(S0), free(Al), free(dtb), free(oc), free(slc), free(og), free(slg), free(Sg);
}

TEST(cuda_tree_conv_gdn_vs_cpu) {
    tree_shape shapes[8];
    const int ns = make_shapes(shapes);
    // Hk, Hv, dk, dv: the 27B head (rows per lane 16, vector loads, state prefetch); 256/128 (32 rows per lane: no
    // prefetch, the parent state loaded in place); odd dv (scalar loads, a partial column group); dk 6
    static const int gdn[][4] = {{2, 6, 128, 128}, {1, 2, 256, 128}, {2, 2, 48, 37}, {1, 2, 6, 10}};
    for (int s = 0; s < ns; s++) {
        conv_case(&shapes[s], 1000, 4);
        if (s == ns - 1) conv_case(&shapes[s], 10240, 4), conv_case(&shapes[s], 300, 2);
        for (int g = 0; g < 4; g++) gdn_case(&shapes[s], gdn[g][0], gdn[g][1], gdn[g][2], gdn[g][3], 0);
    }
}

TEST(cuda_tree_gdn_path_equals_chain) {
    tree_shape shapes[8];
    const int ns = make_shapes(shapes);
    for (int s = 0; s < ns; s++) {
        gdn_case(&shapes[s], 2, 6, 128, 128, 1);
        if (s == 2 || s == ns - 1) gdn_case(&shapes[s], 1, 2, 256, 128, 1), gdn_case(&shapes[s], 2, 2, 48, 37, 1);
    }
}

// ---- attention ----
static int64_t attn_calls(fd_backend *g, int value) {
    return cuda_rig_route_calls(g, "attn_kernel", value);
}

// K/V at positions [0, pos0 + n) on both backends, then the tree's attention; returns the rel-L2. With chain_too
// (a chain-shaped tree of <= 16 nodes) the GPU's causal attention must give the same bits.
static double attn_case(fd_backend *c, fd_backend *g, const tree_shape *ts, int64_t pos0, int hd, int G, int Hkv,
                        int chain_too) {
    const int n = ts->n, H = G * Hkv;
    const int64_t cap = pos0 + n + 5;
    void *cc = c->alloc(c, c->kv_bytes_per_token(c, Hkv, hd) * cap),
         *cg = g->alloc(g, g->kv_bytes_per_token(g, Hkv, hd) * cap);
    const size_t kvn = (size_t)(pos0 + n) * Hkv * hd, qn = (size_t)n * H * hd;
    float *k = rnd(kvn, -2, 2), *v = rnd(kvn, -1, 1), *q = rnd(qn, -2, 2), *oc = fd_malloc(qn * 4);
    void *dk = cuda_rig_up(g, k, kvn * 4), *dv = cuda_rig_up(g, v, kvn * 4), *dq = cuda_rig_up(g, q, qn * 4);
    c->kv_store(c, FD_KV_FLAT(cc, cap), k, v, 0, NULL, (int)(pos0 + n), Hkv, hd);
    g->kv_store(g, FD_KV_FLAT(cg, cap), dk, dv, 0, NULL, (int)(pos0 + n), Hkv, hd);
    void *dout = cuda_rig_poisoned(g, qn), *dpar = cuda_rig_up(g, ts->parent, sizeof(int32_t) * (size_t)n);
    const int fast = hd == 64 || hd == 128 || hd == 256;
    const int64_t before = attn_calls(g, fast ? 2 : 0);
    const float scale = 1.0f / sqrtf((float)hd);
    g->attention_tree(g, dout, dq, FD_KV_FLAT(cg, cap), pos0, n, H, Hkv, hd, scale, dpar);
    c->attention_tree(c, oc, q, FD_KV_FLAT(cc, cap), pos0, n, H, Hkv, hd, scale, ts->parent);
    float *og = cuda_rig_down(g, dout, qn);
    EXPECT(attn_calls(g, fast ? 2 : 0) == before + 1, "hd=%d: the tree call was not counted under %s", hd,
           fast ? "splitk" : "simt");
    const double e = test_rel_l2(og, oc, qn);
    if (chain_too) {
        void *dout2 = cuda_rig_poisoned(g, qn);
        g->attention(g, dout2, dq, FD_KV_FLAT(cg, cap), pos0, NULL, n, H, Hkv, hd, scale, 1);
        float *o2 = cuda_rig_down(g, dout2, qn);
        const int same = same_bits(o2, og, qn);
        printf("    attention tree %s kv=%s hd=%d G=%d pos0=%lld: %s the causal attention op\n", ts->name,
               fd_cuda_route(g, "kv"), hd, G, (long long)pos0, same ? "bitwise" : "DIFFERS from");
        EXPECT(same, "attention tree %s hd=%d: a chain-shaped tree differs from causal attention", ts->name, hd);
        g->free(g, dout2);
        free(o2);
    }
    c->free(c, cc), g->free(g, cg), g->free(g, dk), g->free(g, dv), g->free(g, dq), g->free(g, dout), g->free(g, dpar);
    free(k), free(v), free(q), free(oc), free(og);
    return e;
}

TEST(cuda_tree_attention_vs_cpu) {
    tree_shape shapes[8];
    const int ns = make_shapes(shapes);
    const char *kvs[] = {"bf16", "e4m3"};
    const int hds[] = {128, 64, 256, 32, 96}, groups[] = {1, 6};
    const int64_t pos0s[] = {0, 7, 500, 5000};    // 500: a 33- or 64-node tree crosses the chunk boundary at 512
    const char *decoders[] = {"blocked", "warp"}; // route attn_decode: both kernels take the tree mask
    for (int kv = 0; kv < 4; kv++) {
        fd_backend *c, *g;
        cuda_rig_pair(kvs[kv % 2], &c, &g);
        ASSERT(fd_cuda_set_route(g, "attn_decode", decoders[kv / 2]) == 0, "%s", fd_error_msg());
        for (int h = 0; h < 5; h++)
            for (int gi = 0; gi < 2; gi++) {
                double worst = 0;
                for (int s = 0; s < ns; s++)
                    for (int p = 0; p < 4; p++) {
                        const int chain_too = s == 0 && gi == 1 && p == 2; // chain 12, G 6, across a chunk
                        const double e = attn_case(c, g, &shapes[s], pos0s[p], hds[h], groups[gi], 2, chain_too);
                        EXPECT(e <= TOL_ATTN, "[%s] kv=%s hd=%d G=%d %s pos0=%lld: rel-L2 %.3g", decoders[kv / 2],
                               kvs[kv % 2], hds[h], groups[gi], shapes[s].name, (long long)pos0s[p], e);
                        if (!(e <= worst)) worst = e; // a NaN becomes the worst
                    }
                printf("    attention tree [%s] kv=%s hd=%-3d G=%d Hkv=2 (%s), %d shapes x pos0 0..5000: worst rel-L2 "
                       "%.3g\n",
                       decoders[kv / 2], kvs[kv % 2], hds[h], groups[gi],
                       hds[h] == 32 || hds[h] == 96 ? "simt" : "splitk", ns, worst);
            }
        c->destroy(c);
        g->destroy(g);
    }
}

// ---- RoPE at the nodes' depths ----
TEST(cuda_tree_qk_norm_rope_rows) {
    tree_shape shapes[8];
    const int ns = make_shapes(shapes);
    const int H = 6, Hkv = 2, hd = 128, rot = 64;
    const int64_t pos0 = 1000;
    for (int s = 0; s < ns; s++) {
        const tree_shape *ts = &shapes[s];
        const int n = ts->n;
        int32_t depth[MAX_NODES];
        for (int t = 0; t < n; t++) depth[t] = ts->parent[t] < 0 ? 0 : depth[ts->parent[t]] + 1;
        const size_t nq = (size_t)n * H * hd, nk = (size_t)n * Hkv * hd;
        float *qg = rnd(2 * nq, -2, 2), *k = rnd(nk, -2, 2), *qw = rnd(hd, -0.5f, 0.5f), *kw = rnd(hd, -0.5f, 0.5f);
        fd_weight qc = cuda_rig_f32_weight(cpu(), "q_norm", qw, hd, 1),
                  kc = cuda_rig_f32_weight(cpu(), "k_norm", kw, hd, 1);
        fd_weight qgw = cuda_rig_f32_weight(gpu(), "q_norm", qw, hd, 1),
                  kgw = cuda_rig_f32_weight(gpu(), "k_norm", kw, hd, 1);
        // the op over the tree
        void *dqg = up(qg, 2 * nq), *dk = up(k, nk), *dq = poisoned(nq), *dgate = poisoned(nq),
             *ddep = up_i32(depth, n);
        gpu()->qk_norm_rope_tree(gpu(), dq, dgate, dk, dqg, &qgw, &kgw, n, H, Hkv, hd, rot, 1e7f, 1e-6f, pos0, ddep);
        float *q1 = down(dq, nq), *g1 = down(dgate, nq), *k1 = down(dk, nk);
        // one qk_norm_rope per row at pos0 + depth
        void *dk2 = up(k, nk), *dq2 = poisoned(nq), *dgate2 = poisoned(nq);
        for (int t = 0; t < n; t++)
            gpu()->qk_norm_rope(gpu(), (float *)dq2 + (size_t)t * H * hd, (float *)dgate2 + (size_t)t * H * hd,
                                (float *)dk2 + (size_t)t * Hkv * hd, (const float *)dqg + (size_t)t * 2 * H * hd, &qgw,
                                &kgw, 1, H, Hkv, hd, rot, 1e7f, 1e-6f, pos0 + depth[t], NULL);
        float *q2 = down(dq2, nq), *g2 = down(dgate2, nq), *k2 = down(dk2, nk);
        const int same = same_bits(q1, q2, nq) && same_bits(g1, g2, nq) && same_bits(k1, k2, nk);
        // and the CPU's op
        float *qc_ = fd_malloc(nq * 4), *gc = fd_malloc(nq * 4), *kc_ = fd_malloc(nk * 4);
        memcpy(kc_, k, nk * 4);
        cpu()->qk_norm_rope_tree(cpu(), qc_, gc, kc_, qg, &qc, &kc, n, H, Hkv, hd, rot, 1e7f, 1e-6f, pos0, depth);
        char what[96];
        snprintf(what, sizeof what, "qk_norm_rope_tree %.23s: q vs cpu", ts->name);
        cmp(what, q1, qc_, nq, TOL_F32);
        snprintf(what, sizeof what, "qk_norm_rope_tree %.23s: k vs cpu", ts->name);
        cmp(what, k1, kc_, nk, TOL_F32);
        printf("    qk_norm_rope_tree %s: %s the per-row calls\n", ts->name, same ? "bitwise" : "DIFFERS from");
        EXPECT(same, "qk_norm_rope_tree %s differs from per-row qk_norm_rope", ts->name);
        dfree(dqg), dfree(dk), dfree(dq), dfree(dgate), dfree(ddep), dfree(dk2), dfree(dq2), dfree(dgate2);
        gpu()->release_weight(gpu(), &qgw), gpu()->release_weight(gpu(), &kgw);
        cpu()->release_weight(cpu(), &qc), cpu()->release_weight(cpu(), &kc);
        free(qg), free(k), free(qw), free(kw), free(q1), free(g1), free(k1), free(q2), free(g2), free(k2);
        free(qc_), free(gc), free(kc_);
    }
}

// ---- the ranked draft rows of the tree build: topk_rows (its own test: test_cuda_topk.c) + logsumexp_rows ----
static void ranked_case(const char *what, const float *z, int rows, int V, int k) {
    const size_t n = (size_t)rows * k;
    int32_t *ic = fd_malloc(n * 4), *ig = fd_malloc(n * 4);
    float *lc = fd_malloc(n * 4), *lg = fd_malloc(n * 4), lse_c[8], lse_g[8];
    for (int r = 0; r < rows; r++) spec_tree_rank_row(z + (size_t)r * V, V, k, ic + (size_t)r * k, lc + (size_t)r * k);
    cpu()->logsumexp_rows(cpu(), lse_c, z, rows, V);
    void *dz = up(z, (size_t)rows * V);
    for (size_t i = 0; i < n; i++) ig[i] = -7, lg[i] = NAN;
    gpu()->topk_rows(gpu(), ig, lg, dz, rows, V, k);
    gpu()->logsumexp_rows(gpu(), lse_g, dz, rows, V);
    double worst = 0, worst_lse = 0;
    for (int r = 0; r < rows; r++) {
        worst_lse = fmax(worst_lse, isfinite(lse_g[r]) ? fabs((double)lse_g[r] - lse_c[r]) : INFINITY);
        for (int i = 0; i < k; i++) {
            const float l = lg[(size_t)r * k + i] - lse_g[r];
            worst = fmax(worst, isfinite(l) ? fabs((double)l - lc[(size_t)r * k + i]) : INFINITY);
        }
    }
    const int same = !memcmp(ic, ig, n * 4);
    printf("    ranked rows %-26s rows=%d V=%-6d k=%-2d: ids %s, log-softmax max |diff| %.2g (logsumexp %.2g)\n", what,
           rows, V, k, same ? "exact" : "DIFFER", worst, worst_lse);
    EXPECT(same && worst <= 1e-4 && worst_lse <= 1e-4, "ranked rows %s k=%d: ids %s, log-softmax diff %.3g", what, k,
           same ? "same" : "differ", worst);
    dfree(dz);
    free(ic), free(ig), free(lc), free(lg);
}

TEST(cuda_tree_ranked_rows) {
    const int V = 248320, rows = 7, ks[] = {1, 8, 32, 63};
    float *z = rnd((size_t)rows * V, -10, 10);
    for (int i = 0; i < 4; i++) ranked_case("random (27B vocabulary)", z, rows, V, ks[i]);
    free(z);
    // integer values 0..9 over 5000 entries: ~500 share the top value; a row of equal values; a mostly -inf row
    const int Vt = 5000;
    float *t = rnd((size_t)3 * Vt, 0, 10);
    for (int i = 0; i < 3 * Vt; i++) t[i] = floorf(t[i]);
    for (int i = 0; i < Vt; i++) t[Vt + i] = 1.5f;
    for (int i = 0; i < Vt; i++) t[2 * Vt + i] = i % 125 == 7 ? t[2 * Vt + i] : -INFINITY; // 40 finite
    for (int i = 0; i < 4; i++) ranked_case("ties / equal / -inf rows", t, 3, Vt, ks[i] < 40 ? ks[i] : 40);
    free(t);
}
