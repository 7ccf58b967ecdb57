// The tree verify ops against their chain counterparts at the 27B's layer shapes (FD_CUDA_BENCH=1), one
// "BENCH | ... | us" line per shape (CUDA events around `calls` back-to-back calls, L2 flushed before each timed
// run, median of 11):
//   - gdn_core: the chain with slots at n = 8 and 33 vs the tree (gdn_core_tree) of 33 and 64 nodes shaped like a
//     confident drafter's (a spine of depth 7, the rest branching off it: the bench's oracle tree);
//   - conv1d_silu with slots (n = 8, 33) vs conv1d_silu_tree (33, 64);
//   - attention over 1K and 8K of bf16 context: causal n = 8 vs attention_tree of 33 and 64 nodes;
//   - q/k norm + RoPE of a 33-node tree: qk_norm_rope_tree vs 33 one-row calls (what the forward did before);
//   - the tree build's ranked rows (topk_rows + logsumexp_rows) of 7 draft rows of the 248320 vocabulary at k = 32 vs
//     copying the rows to the host.
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

typedef struct {
    fd_weight *A_log, *dt_bias, *conv_w, *qn, *kn;
    void *qkv, *b, *a, *o, *slots, *state, *conv_state, *conv_slots, *spacer, *par, *dep, *q, *kv, *qg, *g, *k;
    void *logits;
    float *host;
    int32_t *ids;
    int n, calls, what;
    int64_t ctx;
} tree_ctx;

enum {
    W_GDN_CHAIN,
    W_GDN_TREE,
    W_CONV_CHAIN,
    W_CONV_TREE,
    W_ATT_CHAIN,
    W_ATT_TREE,
    W_ROPE_ROWS,
    W_ROPE_TREE,
    W_TOPK,
    W_ROWS_TO_HOST
};

static void run(void *p) {
    tree_ctx *c = p;
    fd_backend *be = B();
    const int Hk = 16, Hv = 48, d = 128, C = 10240, H = 24, Hkv = 4, hd = 256, V = 248320;
    const fd_kv_view kv = fd_kv_flat(c->kv, c->ctx + 64);
    switch (c->what) {
    case W_GDN_CHAIN:
        be->gdn_core(be, FD_GDN_SERIAL, c->o, c->qkv, c->b, c->a, c->A_log, c->dt_bias, c->state, c->n, Hk, Hv, d, d,
                     c->slots);
        break;
    case W_GDN_TREE:
        be->gdn_core_tree(be, c->o, c->qkv, c->b, c->a, c->A_log, c->dt_bias, c->state, c->n, Hk, Hv, d, d, c->slots,
                          c->par);
        break;
    case W_CONV_CHAIN:
        be->conv1d_silu(be, c->o, c->qkv, c->conv_w, c->conv_state, c->n, C, 4, c->conv_slots);
        break;
    case W_CONV_TREE:
        be->conv1d_silu_tree(be, c->o, c->qkv, c->conv_w, c->conv_state, c->n, C, 4, c->conv_slots, c->par);
        break;
    case W_ATT_CHAIN:
        be->attention(be, c->o, c->q, &kv, c->ctx, NULL, c->n, H, Hkv, hd, 0.0625f, 1);
        break;
    case W_ATT_TREE:
        be->attention_tree(be, c->o, c->q, &kv, c->ctx, c->n, H, Hkv, hd, 0.0625f, c->par);
        break;
    case W_ROPE_ROWS:
        for (int t = 0; t < c->n; t++)
            be->qk_norm_rope(be, (float *)c->q + (size_t)t * H * hd, (float *)c->g + (size_t)t * H * hd,
                             (float *)c->k + (size_t)t * Hkv * hd, (const float *)c->qg + (size_t)t * 2 * H * hd, c->qn,
                             c->kn, 1, H, Hkv, hd, 64, 1e7f, 1e-6f, 1000 + t % 8, NULL);
        break;
    case W_ROPE_TREE:
        be->qk_norm_rope_tree(be, c->q, c->g, c->k, c->qg, c->qn, c->kn, c->n, H, Hkv, hd, 64, 1e7f, 1e-6f, 1000,
                              c->dep);
        break;
    case W_TOPK: // the tree build's ranked rows: ids and values, then each row's logsumexp
        be->topk_rows(be, c->ids, c->host, c->logits, 7, V, 32);
        be->logsumexp_rows(be, c->host + 7 * 32, c->logits, 7, V);
        break;
    default:
        be->to_host(be, c->host, c->logits, (size_t)7 * V * sizeof(float));
        break;
    }
}

// The spacer memset before each sample: the state and the cache come from memory, as in a round.
static void line(const char *what, tree_ctx *c) {
    printf("BENCH | %-52s | %9.2f us\n", what, bench_event_us(run, c, c->calls, c->spacer));
}

TEST(bench_cuda_tree_ops) {
    if (cuda_rig_bench_skipped()) return;
    const int Hk = 16, Hv = 48, d = 128, cq = 2 * Hk * d + Hv * d, H = 24, Hkv = 4, hd = 256, V = 248320, N = 64;
    fd_weight Al = wrand(Hv, 1, -1, 1.5f), dtb = wrand(Hv, 1, -1, 1), cw = wrand(cq, 4, -0.5f, 0.5f);
    fd_weight qn = wrand(hd, 1, -0.2f, 0.2f), kn = wrand(hd, 1, -0.2f, 0.2f);
    tree_ctx c;
    memset(&c, 0, sizeof c);
    c.A_log = &Al, c.dt_bias = &dtb, c.conv_w = &cw, c.qn = &qn, c.kn = &kn;
    c.qkv = dev_rand((size_t)N * cq, -1, 1), c.b = dev_rand((size_t)N * Hv, -3, 3),
    c.a = dev_rand((size_t)N * Hv, -3, 3);
    c.o = B()->alloc(B(), (size_t)N * cq * 4);
    c.state = dev_rand((size_t)Hv * d * d, -0.1f, 0.1f);
    c.slots = B()->alloc(B(), (size_t)N * Hv * d * d * 4);
    c.conv_state = dev_rand((size_t)cq * 3, -1, 1);
    c.conv_slots = B()->alloc(B(), (size_t)N * cq * 3 * 4);
    c.spacer = B()->alloc(B(), (size_t)512 << 20);
    // the oracle tree's shape: a spine 0-1-..-7, then nodes hanging off spine nodes 0..6 in turn
    int32_t par[N], dep[N];
    for (int t = 0; t < N; t++) {
        par[t] = t == 0 ? -1 : t <= 7 ? t - 1 : (t - 8) % 7;
        dep[t] = t == 0 ? 0 : dep[par[t]] + 1;
    }
    c.par = cuda_rig_up(B(), par, sizeof(int32_t) * N), c.dep = cuda_rig_up(B(), dep, sizeof(int32_t) * N);
    c.q = dev_rand((size_t)N * H * hd, -1, 1), c.g = B()->alloc(B(), (size_t)N * H * hd * 4);
    c.qg = dev_rand((size_t)N * 2 * H * hd, -1, 1), c.k = dev_rand((size_t)N * Hkv * hd, -1, 1);
    c.kv = B()->alloc(B(), B()->kv_bytes_per_token(B(), Hkv, hd) * (8192 + 64));
    c.logits = dev_rand((size_t)7 * V, -10, 10);
    c.host = malloc((size_t)7 * V * sizeof(float)), c.ids = malloc(sizeof(int32_t) * 7 * 32);
    static const struct {
        int what, n;
        const char *name;
    } cases[] = {
        {W_GDN_CHAIN, 8, "gdn_core chain n=8 slots (Hk16 Hv48 128/128)"},
        {W_GDN_CHAIN, 33, "gdn_core chain n=33 slots"},
        {W_GDN_TREE, 33, "gdn_core_tree 33 nodes (spine 7)"},
        {W_GDN_TREE, 64, "gdn_core_tree 64 nodes (spine 7)"},
        {W_CONV_CHAIN, 8, "conv1d_silu chain n=8 slots (C 10240, K 4)"},
        {W_CONV_CHAIN, 33, "conv1d_silu chain n=33 slots"},
        {W_CONV_TREE, 33, "conv1d_silu_tree 33 nodes"},
        {W_CONV_TREE, 64, "conv1d_silu_tree 64 nodes"},
        {W_ROPE_ROWS, 33, "qk_norm_rope 33 one-row calls (H24 Hkv4 hd256)"},
        {W_ROPE_TREE, 33, "qk_norm_rope_tree 33 nodes"},
        {W_TOPK, 7, "topk_rows + logsumexp_rows 7 x 248320, k 32"},
        {W_ROWS_TO_HOST, 7, "to_host of 7 x 248320 draft logits"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.what = cases[i].what, c.n = cases[i].n, c.calls = c.what >= W_TOPK ? 3 : 10;
        line(cases[i].name, &c);
    }
    const int64_t ctxs[] = {1024, 8192};
    for (int ci = 0; ci < 2; ci++) {
        c.ctx = ctxs[ci], c.calls = 10;
        static const int att[][2] = {{W_ATT_CHAIN, 8}, {W_ATT_TREE, 33}, {W_ATT_TREE, 64}};
        for (int j = 0; j < 3; j++) {
            c.what = att[j][0], c.n = att[j][1];
            char name[96];
            snprintf(name, sizeof name, "%s n=%d ctx %lld (H24 Hkv4 hd256 bf16)",
                     c.what == W_ATT_CHAIN ? "attention causal" : "attention_tree", c.n, (long long)c.ctx);
            line(name, &c);
        }
    }
    void *bufs[] = {c.qkv, c.b, c.a,  c.o, c.state, c.slots,  c.conv_state, c.conv_slots, c.spacer, c.par,  c.dep,
                    c.q,   c.g, c.qg, c.k, c.kv,    c.logits, Al.dev,       dtb.dev,      cw.dev,   qn.dev, kn.dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) B()->free(B(), bufs[i]);
    free(c.host), free(c.ids);
}
