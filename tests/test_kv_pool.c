// Paged KV cache (src/engine/kv_pool.c and the fd_kv_view of backend.h) on the CPU backend:
//  - kv_store / attention / attention_window / kv_copy through a shuffled page table give bitwise the contiguous
//    cache's results (both kv layouts, pages smaller than a call, stores that straddle pages);
//  - an engine on a shared pool whose free list is shuffled (so its pages are scattered and out of order) gives
//    bitwise the logits of an engine with its own contiguous-order pool, with a second sequence interleaved;
//  - a short pool refuses a forward with the "KV cache full" error and leaves the sequence and the pool as they
//    were; reset returns the pages and the refused request then runs;
//  - a server whose pool is smaller than slots x ctx answers 503 kv_cache_full, not a crash, and serves again.
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/routes.h"
#include "fixture.h"
#include "test.h"

// A seeded permutation of the pool's pages [0, pool_pages); a table uses its first entries.
static int32_t *shuffled_pages(int pool_pages, uint64_t seed) {
    int32_t *all = malloc(sizeof(int32_t) * (size_t)pool_pages);
    for (int i = 0; i < pool_pages; i++) all[i] = i;
    for (int i = pool_pages - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        const int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        const int32_t t = all[i];
        all[i] = all[j], all[j] = t;
    }
    return all;
}

TEST(kv_paged_ops_bitwise_contiguous_both_layouts) {
    const int H = 4, Hkv = 2, hd = 16, P = 8, pool_pages = 13;
    const int64_t tot = 70, cap = 80; // 10 pages of 8 address 80 positions
    const size_t row = (size_t)Hkv * hd;
    uint64_t seed = 5;
    float *k = malloc(sizeof(float) * tot * row), *v = malloc(sizeof(float) * tot * row);
    float *q = malloc(sizeof(float) * tot * H * hd), *o1 = malloc(sizeof(float) * tot * H * hd);
    float *o2 = malloc(sizeof(float) * tot * H * hd);
    test_fill_uniform(k, (size_t)tot * row, -2, 2, &seed);
    test_fill_uniform(v, (size_t)tot * row, -1, 1, &seed);
    test_fill_uniform(q, (size_t)tot * H * hd, -2, 2, &seed);
    int32_t *pages = shuffled_pages(pool_pages, 77);
    for (int e4 = 0; e4 < 2; e4++) {
        fd_backend *be = fd_backend_cpu_create(0);
        const char *spec = e4 ? "kv=e4m3" : "kv=f32";
        ASSERT(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
        const size_t tb = be->kv_bytes_per_token(be, Hkv, hd);
        void *flat_buf = be->alloc(be, tb * (size_t)cap), *pool_buf = be->alloc(be, tb * (size_t)pool_pages * P);
        const fd_kv_view flat = fd_kv_flat(flat_buf, cap);
        const fd_kv_view paged = {pool_buf, pages, P, (int64_t)pool_pages * P, cap};
        // stores of uneven lengths that start mid-page and straddle pages
        const int64_t cuts[] = {0, 3, 8, 21, 22, 45, tot};
        for (int c = 0; c + 1 < 7; c++) {
            const int64_t p0 = cuts[c], m = cuts[c + 1] - p0;
            be->kv_store(be, &flat, k + p0 * row, v + p0 * row, p0, NULL, (int)m, Hkv, hd);
            be->kv_store(be, &paged, k + p0 * row, v + p0 * row, p0, NULL, (int)m, Hkv, hd);
        }
        if (!e4) { // the rows sit in the slots the table names (f32 layout: K [slots, Hkv, hd], then V)
            const float *K = pool_buf, *V = K + (size_t)pool_pages * P * row;
            int placed = 1;
            for (int64_t p = 0; p < tot; p++) {
                const int64_t slot = (int64_t)pages[p / P] * P + p % P;
                placed &= !memcmp(K + slot * row, k + p * row, row * 4) && !memcmp(V + slot * row, v + p * row, row * 4);
            }
            EXPECT(placed, "kv_store did not put the rows in the page table's slots");
        }
        const int64_t pos0s[] = {0, 7, 8, 33, 60};
        for (int pi = 0; pi < 5; pi++)
            for (int causal = 0; causal < 2; causal++) {
                const int64_t pos0 = pos0s[pi];
                const int n = (int)(tot - pos0);
                const size_t qn = (size_t)n * H * hd;
                memset(o1, 0xff, qn * sizeof(float)), memset(o2, 0xff, qn * sizeof(float));
                be->attention(be, o1, q, &flat, pos0, NULL, n, H, Hkv, hd, 0.25f, causal);
                be->attention(be, o2, q, &paged, pos0, NULL, n, H, Hkv, hd, 0.25f, causal);
                EXPECT(!memcmp(o1, o2, qn * sizeof(float)), "%s pos0=%lld causal=%d: paged attention differs", spec,
                       (long long)pos0, causal);
                const int W = 5;
                be->attention_window(be, o1, q, &flat, pos0, n, H, Hkv, hd, 0.25f, W);
                be->attention_window(be, o2, q, &paged, pos0, n, H, Hkv, hd, 0.25f, W);
                EXPECT(!memcmp(o1, o2, qn * sizeof(float)), "%s pos0=%lld: paged attention_window differs", spec,
                       (long long)pos0);
            }
        // kv_copy: paged positions 13..50 -> a contiguous snapshot -> another shuffled table, then attention
        int32_t *pages2 = shuffled_pages(pool_pages, 1234);
        void *pool2 = be->alloc(be, tb * (size_t)pool_pages * P), *snap = be->alloc(be, tb * 37);
        const fd_kv_view paged2 = {pool2, pages2, P, (int64_t)pool_pages * P, cap};
        const fd_kv_view vsnap = fd_kv_flat(snap, 37);
        be->kv_copy(be, &paged2, 0, &paged, 0, 13, Hkv, hd);
        be->kv_copy(be, &vsnap, 0, &paged, 13, 37, Hkv, hd);
        be->kv_copy(be, &paged2, 13, &vsnap, 0, 37, Hkv, hd);
        be->kv_copy(be, &paged2, 50, &paged, 50, tot - 50, Hkv, hd); // paged -> paged, two tables
        be->attention(be, o1, q, &flat, 0, NULL, (int)tot, H, Hkv, hd, 0.25f, 1);
        be->attention(be, o2, q, &paged2, 0, NULL, (int)tot, H, Hkv, hd, 0.25f, 1);
        EXPECT(!memcmp(o1, o2, sizeof(float) * tot * H * hd), "%s: cache copied through kv_copy differs", spec);
        be->free(be, flat_buf), be->free(be, pool_buf), be->free(be, pool2), be->free(be, snap);
        free(pages2);
        be->destroy(be);
    }
    free(pages), free(k), free(v), free(q), free(o1), free(o2);
}

typedef struct {
    fixture fx;
    fd_model m;
    fd_backend *be;
} rig;

static void rig_open(rig *r) {
    ASSERT(fixture_load("qwen35_dense_tied", &r->fx) == 0, "%s", fd_error_msg());
    ASSERT(model_load(r->fx.dir, &r->m) == 0, "%s", fd_error_msg());
    r->be = fd_backend_cpu_create(0);
    model_upload(&r->m, r->be);
}
static void rig_close(rig *r) {
    model_free(&r->m);
    r->be->destroy(r->be);
    fixture_free(&r->fx);
}
static fd_engine_opts rig_opts(const rig *r, fd_kv_pool *pool) {
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = r->fx.n_ids + 24;
    o.pool = pool;
    return o;
}

// Two sequences, the prompt and the prompt reversed (different KV, so a slot both wrote would show): prefill chunks
// of 5 taken in turn (on a shared pool their pages interleave), then 6 decode steps of both in one batched step; all
// logits rows into out_a / out_b.
static void run_pair(fd_engine *ea, fd_engine *eb, const rig *r, float *out_a, float *out_b) {
    const int V = r->m.cfg.vocab_size, n = r->fx.n_ids;
    int32_t *rev = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) rev[i] = r->fx.ids[n - 1 - i];
    for (int i = 0; i < n; i += 5) {
        const int len = n - i < 5 ? n - i : 5;
        ASSERT(engine_forward(ea, r->fx.ids + i, len, out_a + (size_t)i * V, 1) == 0, "%s", fd_error_msg());
        ASSERT(engine_forward(eb, rev + i, len, out_b + (size_t)i * V, 1) == 0, "%s", fd_error_msg());
    }
    float *lg = malloc(sizeof(float) * 2 * V);
    for (int s = 0; s < 6; s++) {
        fd_engine *seqs[2] = {ea, eb};
        const int32_t ids[2] = {r->fx.greedy[s], r->fx.greedy[5 - s]};
        ASSERT(engine_decode_batch(seqs, ids, 2, lg) == 0, "%s", fd_error_msg());
        memcpy(out_a + (size_t)(n + s) * V, lg, sizeof(float) * V);
        memcpy(out_b + (size_t)(n + s) * V, lg + V, sizeof(float) * V);
    }
    free(lg);
    free(rev);
}

TEST(kv_pool_engine_shuffled_pages_bitwise) {
    rig r;
    rig_open(&r);
    const int V = r.m.cfg.vocab_size, rows = r.fx.n_ids + 6;
    const size_t bytes = sizeof(float) * rows * V;
    float *ra = malloc(bytes), *rb = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes);
    // reference: each sequence on a pool of its own (pages 0, 1, 2, ... in order)
    fd_engine_opts o = rig_opts(&r, NULL);
    fd_engine r1, r2;
    ASSERT(engine_init(&r1, &r.m, r.be, &o) == 0 && engine_init(&r2, &r.m, r.be, &o) == 0, "%s", fd_error_msg());
    run_pair(&r1, &r2, &r, ra, rb);
    // a shared pool of 4-token pages with a shuffled free list
    fd_kv_pool pool;
    ASSERT(kv_pool_init(&pool, r.be, &r.m.plan, 4 * (int64_t)rows, 4) == 0, "%s", fd_error_msg());
    kv_pool_shuffle(&pool, 42);
    o = rig_opts(&r, &pool);
    fd_engine e1, e2;
    ASSERT(engine_init(&e1, &r.m, r.be, &o) == 0 && engine_init(&e2, &r.m, r.be, &o) == 0, "%s", fd_error_msg());
    run_pair(&e1, &e2, &r, a, b);
    int scattered = 0;
    for (int i = 1; i < e1.pages.held; i++) scattered |= e1.pages.host[i] != e1.pages.host[i - 1] + 1;
    EXPECT(scattered && e1.pages.held >= 8, "the shuffled pool gave %d pages in order", e1.pages.held);
    EXPECT(!memcmp(a, ra, bytes), "logits through shuffled pages differ from the contiguous run");
    EXPECT(!memcmp(b, rb, bytes), "the interleaved second sequence differs");
    // reset returns the pages
    const int64_t free_before = pool.n_free, held = e1.pages.held;
    engine_reset(&e1);
    EXPECT(pool.n_free == free_before + held && e1.pages.held == 0, "reset returned %lld of %lld pages",
           (long long)(pool.n_free - free_before), (long long)held);
    engine_free(&e1);
    engine_free(&e2);
    EXPECT(pool.n_free == pool.n_pages, "engine_free left %lld pages taken", (long long)(pool.n_pages - pool.n_free));
    kv_pool_free(&pool);
    engine_free(&r1);
    engine_free(&r2);
    free(ra), free(rb), free(a), free(b);
    rig_close(&r);
}

TEST(kv_pool_full_is_a_clean_error) {
    rig r;
    rig_open(&r);
    const int V = r.m.cfg.vocab_size, n = r.fx.n_ids;
    ASSERT(n > 8, "fixture prompt of %d tokens", n);
    float *ref = malloc(sizeof(float) * V), *lg = malloc(sizeof(float) * V);
    fd_engine_opts o = rig_opts(&r, NULL);
    fd_engine e0;
    ASSERT(engine_init(&e0, &r.m, r.be, &o) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&e0, r.fx.ids, n, 0, ref, 0) == 0, "%s", fd_error_msg());
    // a pool of n + 8 tokens in 8-token pages: the first prompt fits, the second finds too few pages
    fd_kv_pool pool;
    ASSERT(kv_pool_init(&pool, r.be, &r.m.plan, n + 8, 8) == 0, "%s", fd_error_msg());
    o = rig_opts(&r, &pool);
    fd_engine e1, e2;
    ASSERT(engine_init(&e1, &r.m, r.be, &o) == 0 && engine_init(&e2, &r.m, r.be, &o) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&e1, r.fx.ids, n, 0, lg, 0) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(lg, ref, sizeof(float) * V), "first sequence on the shared pool");
    const int64_t free_tokens = kv_pool_free_tokens(&pool);
    EXPECT(engine_prefill(&e2, r.fx.ids, n, 4, lg, 0) != 0, "a prompt larger than the free pool was accepted");
    char want[160];
    snprintf(want, sizeof want, "KV cache full: this request needs %lld more tokens of KV, %lld of %lld tokens free",
             (long long)((n + 7) / 8 * 8), (long long)free_tokens, (long long)kv_pool_tokens(&pool));
    EXPECT(strstr(fd_error_msg(), want) && strstr(fd_error_msg(), "--kv-tokens"), "error: %s (want: %s)",
           fd_error_msg(), want);
    EXPECT(e2.n_past == 0 && e2.pages.held == 0 && kv_pool_free_tokens(&pool) == free_tokens,
           "a refused prefill changed the state: n_past %lld, %d pages, %lld free", (long long)e2.n_past,
           e2.pages.held, (long long)kv_pool_free_tokens(&pool));
    // decode on e1 until its pages run out: the refused step leaves n_past where it was
    int steps = 0, rc = 0;
    while (steps < 24 && (rc = engine_forward(&e1, &r.fx.greedy[0], 1, NULL, 0)) == 0) steps++;
    EXPECT(rc != 0 && strstr(fd_error_msg(), "KV cache full"), "decode never hit the full pool (%d steps)", steps);
    EXPECT(e1.n_past == n + steps && e1.n_past == kv_pool_tokens(&pool), "n_past %lld after the refused step",
           (long long)e1.n_past);
    // reset returns e1's pages; the refused request now runs and gives the reference logits
    engine_reset(&e1);
    EXPECT(kv_pool_free_tokens(&pool) == kv_pool_tokens(&pool), "pages left after reset");
    ASSERT(engine_prefill(&e2, r.fx.ids, n, 0, lg, 0) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(lg, ref, sizeof(float) * V), "the retried prompt's logits differ");
    engine_free(&e1);
    engine_free(&e2);
    kv_pool_free(&pool);
    engine_free(&e0);
    free(ref), free(lg);
    rig_close(&r);
}
