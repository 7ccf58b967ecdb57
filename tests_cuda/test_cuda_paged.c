// Paged KV cache on the GPU (fd_kv_view with a device page table; src/cuda/attention*.cu, dflash2.cu): the cache
// is written through a *shuffled* page table of FD_KV_PAGE_TOKENS-token pages (stores of uneven lengths that start
// mid-page and straddle pages, one of them at a device position), and every kernel that reads it is checked
//  - against the CPU reference over the same paged cache (rel-L2 <= 1e-2; bf16 GPU vs f32 CPU, e4m3 vs e4m3, whose
//    stored bytes must also be identical), and
//  - bitwise against the same call on a contiguous cache holding the same rows (paging may not change one bit):
// tensor-core prefill (mma), CUDA-core prefill (simt), split-K decode/verify n = 1 and 16 (both attn_decode
// kernels) with pos_dev around the page and 512-key chunk boundaries, the drafter's window attention, and
// kv_copy paged -> snapshot -> paged.
// GPU outputs are NaN-poisoned before every call.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/fixture.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/engine.h"
#include "engine/kv_pool.h"
#include "engine/routes.h"

#define PG          FD_KV_PAGE_TOKENS
#define POOL_PAGES  11
#define TABLE_PAGES 6 // positions [0, 1536)

typedef struct {
    fd_backend *c, *g;
    const char *kv;
    int Hkv, hd;
    int64_t tot;           // stored positions
    int32_t *pages_h;      // [TABLE_PAGES] shuffled pages of the pool
    void *pages_d;         // its device copy
    void *pool_c, *pool_g; // CPU / GPU pools of POOL_PAGES pages
    void *flat_g;          // GPU contiguous cache of the same rows
    fd_kv_view pc, pg, fg; // CPU paged, GPU paged, GPU contiguous
} prig;

// A seeded permutation of the pool's `of` pages; a table uses its first entries.
static int32_t *shuffled(int of, uint64_t seed) {
    int32_t *all = malloc(sizeof(int32_t) * (size_t)of);
    for (int i = 0; i < of; i++) all[i] = i;
    for (int i = of - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        const int32_t t = all[i];
        all[i] = all[j], all[j] = t;
    }
    return all;
}

static prig mkrig(int e4, int Hkv, int hd, int64_t tot, uint64_t *seed) {
    prig r;
    memset(&r, 0, sizeof r);
    r.kv = e4 ? "e4m3" : "bf16", r.Hkv = Hkv, r.hd = hd, r.tot = tot;
    cuda_rig_pair(r.kv, &r.c, &r.g);
    r.pages_h = shuffled(POOL_PAGES, *seed);
    r.pages_d = cuda_rig_up(r.g, r.pages_h, sizeof(int32_t) * TABLE_PAGES);
    const int64_t slots = (int64_t)POOL_PAGES * PG, cap = (int64_t)TABLE_PAGES * PG;
    r.pool_c = r.c->alloc(r.c, r.c->kv_bytes_per_token(r.c, Hkv, hd) * (size_t)slots);
    r.pool_g = r.g->alloc(r.g, r.g->kv_bytes_per_token(r.g, Hkv, hd) * (size_t)slots);
    r.flat_g = r.g->alloc(r.g, r.g->kv_bytes_per_token(r.g, Hkv, hd) * (size_t)cap);
    r.pc = (fd_kv_view){r.pool_c, r.pages_h, PG, slots, cap};
    r.pg = (fd_kv_view){r.pool_g, r.pages_d, PG, slots, cap};
    r.fg = fd_kv_flat(r.flat_g, cap);
    const size_t row = (size_t)Hkv * hd;
    float *k = malloc(sizeof(float) * tot * row), *v = malloc(sizeof(float) * tot * row);
    test_fill_uniform(k, (size_t)tot * row, -2, 2, seed);
    test_fill_uniform(v, (size_t)tot * row, -1, 1, seed);
    void *dk = cuda_rig_up(r.g, k, sizeof(float) * tot * row), *dv = cuda_rig_up(r.g, v, sizeof(float) * tot * row);
    // uneven stores: mid-page starts, page-straddling spans; the one at 300 reads its position on the device
    const int64_t cuts[] = {0, 100, 300, 301, 700, 1024, tot};
    for (int i = 0; i + 1 < 7; i++) { // cuts past tot are clipped: a store never reads beyond the tot k/v rows
        const int64_t p0 = cuts[i], m = (cuts[i + 1] < tot ? cuts[i + 1] : tot) - p0;
        if (m <= 0) continue;
        const float *hk = k + p0 * row, *hv = v + p0 * row;
        const float *gk = (const float *)dk + p0 * row, *gv = (const float *)dv + p0 * row;
        void *pd = cuda_rig_up(r.g, &p0, sizeof p0);
        const int dev = p0 == 300;
        r.c->kv_store(r.c, &r.pc, hk, hv, p0, NULL, (int)m, Hkv, hd);
        r.g->kv_store(r.g, &r.pg, gk, gv, dev ? 0 : p0, dev ? (const int64_t *)pd : NULL, (int)m, Hkv, hd);
        r.g->kv_store(r.g, &r.fg, gk, gv, p0, NULL, (int)m, Hkv, hd);
        r.g->free(r.g, pd);
    }
    r.g->free(r.g, dk), r.g->free(r.g, dv);
    free(k), free(v);
    if (e4) { // same quantiser on both sides: the pools must match byte for byte (all slots, live or not)
        const size_t bytes = r.g->kv_bytes_per_token(r.g, Hkv, hd) * (size_t)slots;
        unsigned char *gb = malloc(bytes);
        r.g->to_host(r.g, gb, r.pool_g, bytes);
        EXPECT(!memcmp(gb, r.pool_c, bytes), "e4m3 hd=%d: the GPU paged pool differs from the CPU one", hd);
        free(gb);
    }
    return r;
}

static void freerig(prig *r) {
    r->g->free(r->g, r->pages_d), r->g->free(r->g, r->pool_g), r->g->free(r->g, r->flat_g);
    r->c->free(r->c, r->pool_c);
    free(r->pages_h);
    r->c->destroy(r->c);
    r->g->destroy(r->g);
}

typedef enum { OP_ATTN, OP_WINDOW } op_kind;

// One call on the paged GPU cache (pos_dev when dev), the contiguous GPU cache and the paged CPU cache.
static void check(prig *r, op_kind op, const char *kernel, int64_t pos0, int n, int G, int causal, int dev, int window,
                  uint64_t *seed) {
    fd_backend *g = r->g, *c = r->c;
    if (kernel) ASSERT(fd_cuda_set_route(g, "attn_kernel", kernel) == 0, "%s", fd_error_msg());
    const int H = G * r->Hkv, hd = r->hd;
    const size_t qn = (size_t)n * H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float *q = malloc(qn * sizeof(float)), *oc = malloc(qn * sizeof(float));
    float *opg = malloc(qn * sizeof(float)), *of = malloc(qn * sizeof(float));
    test_fill_uniform(q, qn, -2, 2, seed);
    void *dq = cuda_rig_up(g, q, qn * sizeof(float)), *dout = g->alloc(g, qn * sizeof(float)),
         *pd = cuda_rig_up(g, &pos0, sizeof pos0);
    const int64_t *pdev = dev ? (const int64_t *)pd : NULL;
    for (int paged = 1; paged >= 0; paged--) {
        cuda_rig_poison(g, dout, qn);
        const fd_kv_view *kv = paged ? &r->pg : &r->fg;
        if (op == OP_ATTN)
            g->attention(g, dout, dq, kv, dev ? 0 : pos0, pdev, n, H, r->Hkv, hd, scale, causal);
        else
            g->attention_window(g, dout, dq, kv, pos0, n, H, r->Hkv, hd, scale, window);
        g->to_host(g, paged ? opg : of, dout, qn * sizeof(float));
    }
    if (op == OP_ATTN)
        c->attention(c, oc, q, &r->pc, pos0, NULL, n, H, r->Hkv, hd, scale, causal);
    else
        c->attention_window(c, oc, q, &r->pc, pos0, n, H, r->Hkv, hd, scale, window);
    const double e = test_rel_l2(opg, oc, qn);
    const int same = !memcmp(opg, of, qn * sizeof(float));
    char what[160];
    snprintf(what, sizeof what, "%s kv=%s hd=%d G=%d pos0=%lld n=%d%s%s", op == OP_ATTN ? "attention" : "window", r->kv,
             hd, G, (long long)pos0, n, causal ? "" : " noncausal", dev ? " pos_dev" : "");
    if (op == OP_WINDOW) snprintf(what + strlen(what), sizeof what - strlen(what), " window=%d", window);
    if (op == OP_ATTN && n <= 16)
        snprintf(what + strlen(what), sizeof what - strlen(what), " [attn_decode=%s]", fd_cuda_route(g, "attn_decode"));
    if (kernel) snprintf(what + strlen(what), sizeof what - strlen(what), " [%s]", kernel);
    printf("    paged %s: rel-L2 vs CPU %.3g, vs contiguous %s\n", what, e, same ? "bitwise" : "DIFFERENT");
    EXPECT(e <= TOL_ATTN, "paged %s: rel-L2 %.3g", what, e);
    EXPECT(same, "paged %s: differs from the contiguous cache", what);
    g->free(g, dq), g->free(g, dout), g->free(g, pd);
    free(q), free(oc), free(opg), free(of);
}

TEST(cuda_paged_kv_attention) {
    const int cfg[][4] = {{0, 2, 128, 4}, {1, 2, 128, 4}, {0, 4, 256, 6}, {1, 4, 256, 6}}; // e4m3, Hkv, hd, G
    uint64_t seed = 31;
    for (int ci = 0; ci < 4; ci++) {
        const int64_t tot = 1300;
        prig r = mkrig(cfg[ci][0], cfg[ci][1], cfg[ci][2], tot, &seed);
        const int G = cfg[ci][3];
        // prefill: the tensor-core kernel (64-key tiles) and the CUDA-core one (32-key tiles, split-K)
        check(&r, OP_ATTN, "mma", 0, 300, G, 1, 0, 0, &seed);
        check(&r, OP_ATTN, "mma", 1100, 200, G, 1, 0, 0, &seed);
        check(&r, OP_ATTN, "mma", 1100, 200, G, 1, 1, 0, &seed); // pos_dev
        check(&r, OP_ATTN, "mma", 1200, 100, G, 0, 0, 0, &seed);
        // the wgmma kernel (head_dim 256 over bf16 or e4m3; other head dims run the mma kernel under this route)
        const int64_t wg_before = cuda_rig_route_value_calls(r.g, "attn_kernel", "wgmma");
        check(&r, OP_ATTN, "wgmma", 0, 300, G, 1, 0, 0, &seed);
        check(&r, OP_ATTN, "wgmma", 1100, 200, G, 1, 1, 0, &seed); // pos_dev
        check(&r, OP_ATTN, "wgmma", 1200, 100, G, 0, 0, 0, &seed);
        const int64_t wg_ran = cuda_rig_route_value_calls(r.g, "attn_kernel", "wgmma") - wg_before;
        const int wg_expected = cfg[ci][2] == 256 ? 6 : 0; // 3 checks x (paged, contiguous)
        EXPECT(wg_ran == wg_expected, "attn_kernel=wgmma ran %lld times, expected %d", (long long)wg_ran, wg_expected);
        check(&r, OP_ATTN, "simt", 1000, 70, G, 1, 0, 0, &seed);
        check(&r, OP_ATTN, "simt", 1230, 70, G, 0, 1, 0, &seed);
        // decode / verify (split-K, <= 16 rows): pos_dev, around page (256) and chunk (512) boundaries, both
        // decode kernels (route attn_decode)
        const int64_t pos0s[] = {0, 255, 256, 511, 512, 767, 1000, tot - 16};
        const char *decoders[] = {"blocked", "warp"};
        for (int dk = 0; dk < 2; dk++) {
            ASSERT(fd_cuda_set_route(r.g, "attn_decode", decoders[dk]) == 0, "%s", fd_error_msg());
            for (int pi = 0; pi < 8; pi++)
                for (int ni = 0; ni < 2; ni++) {
                    const int n = ni ? 16 : 1;
                    check(&r, OP_ATTN, NULL, pos0s[pi], n, G, 1, 1, 0, &seed);
                    if (ni) check(&r, OP_ATTN, NULL, pos0s[pi], n, G, 0, 0, 0, &seed); // the drafter's block form
                }
        }
        ASSERT(fd_cuda_set_route(r.g, "attn_decode", "warp") == 0, "%s", fd_error_msg());
        // the drafter's window attention: windows that start mid-page and cross pages
        check(&r, OP_WINDOW, NULL, tot - 16, 16, G, 0, 0, 300, &seed);
        check(&r, OP_WINDOW, NULL, 600, 16, G, 0, 0, 64, &seed);
        check(&r, OP_WINDOW, NULL, 500, 8, G, 0, 0, 2048, &seed);
        freerig(&r);
    }
}

// kv_copy between paged and contiguous caches (the prefix cache's snapshot and restore): paged -> snapshot ->
// another shuffled table, plus a paged -> paged copy, must give the attention of the original bitwise.
TEST(cuda_paged_kv_copy) {
    uint64_t seed = 77;
    for (int e4 = 0; e4 < 2; e4++) {
        const int Hkv = 2, hd = 128, G = 3, H = G * Hkv, n = 16;
        const int64_t tot = 1000;
        prig r = mkrig(e4, Hkv, hd, tot, &seed);
        fd_backend *g = r.g;
        const size_t tb = g->kv_bytes_per_token(g, Hkv, hd);
        int32_t *pages2 = shuffled(POOL_PAGES, 999);
        void *pages2_d = cuda_rig_up(g, pages2, sizeof(int32_t) * TABLE_PAGES);
        void *pool2 = g->alloc(g, tb * (size_t)POOL_PAGES * PG), *snap = g->alloc(g, tb * 600);
        const fd_kv_view p2 = {pool2, pages2_d, PG, (int64_t)POOL_PAGES * PG, (int64_t)TABLE_PAGES * PG};
        const fd_kv_view vs = fd_kv_flat(snap, 600);
        g->kv_copy(g, &p2, 0, &r.pg, 0, 100, Hkv, hd);     // paged -> paged
        g->kv_copy(g, &vs, 0, &r.pg, 100, 600, Hkv, hd);   // paged -> snapshot
        g->kv_copy(g, &p2, 100, &vs, 0, 600, Hkv, hd);     // snapshot -> paged
        g->kv_copy(g, &p2, 700, &r.pg, 700, 300, Hkv, hd); // paged -> paged
        const size_t qn = (size_t)n * H * hd;
        float *q = malloc(qn * sizeof(float)), *o1 = malloc(qn * sizeof(float)), *o2 = malloc(qn * sizeof(float));
        test_fill_uniform(q, qn, -2, 2, &seed);
        void *dq = cuda_rig_up(g, q, qn * sizeof(float)), *dout = g->alloc(g, qn * sizeof(float));
        cuda_rig_poison(g, dout, qn);
        g->attention(g, dout, dq, &r.pg, tot - n, NULL, n, H, Hkv, hd, 0.088f, 1);
        g->to_host(g, o1, dout, qn * sizeof(float));
        cuda_rig_poison(g, dout, qn);
        g->attention(g, dout, dq, &p2, tot - n, NULL, n, H, Hkv, hd, 0.088f, 1);
        g->to_host(g, o2, dout, qn * sizeof(float));
        EXPECT(test_rel_l2(o1, o1, qn) == 0 && !memcmp(o1, o2, qn * sizeof(float)), // rel-L2 of o1 itself: no NaN
               "kv=%s: attention over the copied pages differs", r.kv);
        printf("    paged kv_copy kv=%s: paged -> snapshot -> shuffled pages: attention %s\n", r.kv,
               !memcmp(o1, o2, qn * sizeof(float)) ? "bitwise" : "DIFFERENT");
        g->free(g, dq), g->free(g, dout), g->free(g, pool2), g->free(g, snap), g->free(g, pages2_d);
        free(q), free(o1), free(o2), free(pages2);
        freerig(&r);
    }
}

// The whole engine on the GPU: a 700-token random prompt (three 256-token pages and a part) and 24 decode steps,
// graphs on, on an engine with its own pool (pages 0, 1, 2, ... in order) and on an engine whose pool it shares
// with a second sequence, free list shuffled, the two sequences taking pages in turn: the logits of every step must
// be bitwise equal. Decode steps replay CUDA graphs that read the device page table when they run.
static fd_backend *gpu_graphs(void) {
    static fd_backend *be;
    if (!be) be = cuda_rig_new_gpu_for_graphs(); // graphs need every op recorded, not run as issued
    return be;
}

TEST(cuda_paged_engine_shuffled_bitwise) {
    fd_backend *g = gpu_graphs();
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, g);
    const int V = m.cfg.vocab_size, L = 700, steps = 24;
    int32_t *ids = malloc(sizeof(int32_t) * L), *ids2 = malloc(sizeof(int32_t) * L);
    uint64_t st = 4242;
    for (int i = 0; i < L; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((st >> 33) % (uint64_t)V);
        ids2[i] = (int32_t)((st >> 40) % (uint64_t)V);
    }
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 128;
    o.capacity = L + steps + 8;
    fd_engine own;
    ASSERT(engine_init(&own, &m, g, &o) == 0, "%s", fd_error_msg());
    fd_kv_pool pool;
    ASSERT(kv_pool_init(&pool, g, &m.plan, 8 * FD_KV_PAGE_TOKENS, 0) == 0, "%s", fd_error_msg());
    kv_pool_shuffle(&pool, 7);
    o.pool = &pool;
    fd_engine a, b;
    ASSERT(engine_init(&a, &m, g, &o) == 0 && engine_init(&b, &m, g, &o) == 0, "%s", fd_error_msg());
    ASSERT(engine_graphs_on(&a) == engine_graphs_on(&own), "graphs differ between the engines");
    float *lo = malloc(sizeof(float) * V), *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    int mismatch = 0;
    for (int i = 0; i < L; i += 100) { // chunks in turn: a's and b's pages interleave in the pool
        const int len = L - i < 100 ? L - i : 100;
        ASSERT(engine_forward(&own, ids + i, len, lo, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_forward(&a, ids + i, len, la, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_forward(&b, ids2 + i, len, lb, 0) == 0, "%s", fd_error_msg());
        mismatch += memcmp(lo, la, sizeof(float) * V) != 0;
    }
    int32_t tok = engine_argmax(lo, V), tok2 = engine_argmax(lb, V);
    for (int s = 0; s < steps; s++) {
        ASSERT(engine_forward(&own, &tok, 1, lo, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_forward(&a, &tok, 1, la, 0) == 0, "%s", fd_error_msg());
        ASSERT(engine_forward(&b, &tok2, 1, lb, 0) == 0, "%s", fd_error_msg());
        mismatch += memcmp(lo, la, sizeof(float) * V) != 0;
        tok = engine_argmax(lo, V), tok2 = engine_argmax(lb, V);
    }
    int scattered = 0;
    for (int i = 1; i < a.pages.held; i++) scattered |= a.pages.host[i] != a.pages.host[i - 1] + 1;
    printf("    paged engine: %d pages [%d %d %d ...], graphs %s (%lld replays): %d of %d logits rows differ\n",
           a.pages.held, a.pages.host[0], a.pages.host[1], a.pages.host[2], engine_graphs_on(&a) ? "on" : "off",
           (long long)a.graph_stats.replayed, mismatch, 7 + steps);
    EXPECT(scattered && a.pages.held == 3, "pages of the shuffled pool: %d, in order %d", a.pages.held, !scattered);
    EXPECT(mismatch == 0, "%d logits rows through shuffled pages differ from the contiguous-order pool", mismatch);
    // reset hands every page back
    engine_reset(&a);
    engine_reset(&b);
    EXPECT(pool.n_free == pool.n_pages, "%lld pages still taken after reset", (long long)(pool.n_pages - pool.n_free));
    engine_free(&a), engine_free(&b), engine_free(&own);
    kv_pool_free(&pool);
    free(ids), free(ids2), free(lo), free(la), free(lb);
    model_free(&m);
    fixture_free(&fx);
}
