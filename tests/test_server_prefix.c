// Hybrid prefix cache and engine state snapshots (src/engine/prefix_cache.c, engine_state.c), in process on the
// HF fixtures: a restored prefix + the tail must give the cold run's logits and greedy tokens, on every fixture
// architecture; the LRU budget, reset and the "usable only where a snapshot exists" rule.
#include <stdlib.h>
#include <string.h>

#include "engine/prefix_cache.h"
#include "fixture.h"
#include "test.h"

typedef struct {
    fd_model m;
    fd_backend *be;
    fd_engine e;
} pc_loaded;

static fd_backend *pc_cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static int pc_open(pc_loaded *L, const char *dir, int64_t cap) {
    memset(L, 0, sizeof *L);
    if (model_load(dir, &L->m)) return -1;
    L->be = pc_cpu();
    model_upload(&L->m, L->be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = cap;
    return engine_init(&L->e, &L->m, L->be, &o);
}

static void pc_close(pc_loaded *L) {
    engine_free(&L->e);
    model_free(&L->m);
}

// Cold: prefill everything, caching a snapshot every 64 tokens. Warm (second engine of the same model): restore, then
// prefill only the tail. Logits of the last position and 16 greedy tokens must agree.
TEST(server_prefix_restore_matches_cold_every_fixture) {
    for (int f = 0; k_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        pc_loaded L;
        ASSERT(pc_open(&L, fx.dir, 512) == 0, "%s", fd_error_msg());
        fd_engine warm;
        fd_engine_opts o = L.e.opt;
        ASSERT(engine_init(&warm, &L.m, L.be, &o) == 0);
        const int V = fx.vocab, n = fx.n_ids, B = 16;
        pc_cache *pc = pc_create(&L.e, B, (size_t)64 << 20);
        float *cold = malloc(sizeof(float) * V), *hot = malloc(sizeof(float) * V);
        int64_t done = 0;
        while (done < n) { // cut at multiples of 64 so each boundary can be snapshot
            int64_t len = n - done < 64 ? n - done : 64;
            ASSERT(engine_forward(&L.e, fx.ids + done, (int)len, cold, 0) == 0, "%s", fd_error_msg());
            done += len;
            if (done % 64 == 0) pc_insert(pc, &L.e, NULL, fx.ids, done, NULL);
        }
        pc_stats st;
        pc_get_stats(pc, &st);
        EXPECT(st.snapshots == n / 64 && st.nodes == (n / 64) * 64 / B, "%lld snapshots, %lld nodes",
               (long long)st.snapshots, (long long)st.nodes);
        int64_t got = pc_restore(pc, &warm, NULL, fx.ids, n, n - 1);
        EXPECT(got == ((n - 1) / 64) * 64, "%s: restored %lld", fx.dir, (long long)got);
        EXPECT(warm.n_past == got);
        ASSERT(engine_prefill(&warm, fx.ids + got, n - got, 0, hot, 0) == 0, "%s", fd_error_msg());
        double err = test_rel_l2(hot, cold, (size_t)V);
        EXPECT(err < 1e-5, "%s: last-position logits rel-L2 %.3g", fx.dir, err);
        int32_t a = engine_argmax(cold, V), b = engine_argmax(hot, V);
        int same = 0;
        for (int i = 0; i < B; i++) {
            same += a == b;
            ASSERT(engine_forward(&L.e, &a, 1, cold, 0) == 0);
            ASSERT(engine_forward(&warm, &b, 1, hot, 0) == 0);
            a = engine_argmax(cold, V);
            b = engine_argmax(hot, V);
        }
        EXPECT(same == B, "%s: %d of %d greedy tokens equal", fx.dir, same, B);
        EXPECT(fx.n_greedy > 0 && same == B);
        pc_free(pc);
        free(cold);
        free(hot);
        engine_free(&warm);
        pc_close(&L);
        fixture_free(&fx);
    }
}

TEST(server_prefix_snapshot_rule_budget_and_reset) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    pc_loaded L;
    ASSERT(pc_open(&L, fx.dir, 512) == 0, "%s", fd_error_msg());
    const int B = 16;
    pc_cache *pc = pc_create(&L.e, B, (size_t)64 << 20);
    ASSERT(engine_prefill(&L.e, fx.ids, 64, 0, NULL, 0) == 0);
    pc_insert(pc, &L.e, NULL, fx.ids, 64, NULL);
    EXPECT(pc_has_snapshot(pc, fx.ids, 64) && !pc_has_snapshot(pc, fx.ids, 48) && !pc_has_snapshot(pc, fx.ids, 80));
    fd_engine w;
    fd_engine_opts o = L.e.opt;
    ASSERT(engine_init(&w, &L.m, L.be, &o) == 0);
    // blocks at 16..48 exist but carry no snapshot: a 60-token limit finds nothing usable
    EXPECT(pc_restore(pc, &w, NULL, fx.ids, fx.n_ids, 60) == 0 && w.n_past == 0);
    EXPECT(pc_restore(pc, &w, NULL, fx.ids, fx.n_ids, 64) == 64);
    engine_reset(&w);
    // a different token in block 2 ends the match before the snapshot
    int32_t *alt = malloc(sizeof(int32_t) * fx.n_ids);
    memcpy(alt, fx.ids, sizeof(int32_t) * fx.n_ids);
    alt[40] ^= 1;
    EXPECT(pc_restore(pc, &w, NULL, alt, fx.n_ids, fx.n_ids) == 0);
    // the budget: room for exactly one 64-token path with its snapshot; a second path evicts the first
    pc_stats st;
    pc_get_stats(pc, &st);
    pc_free(pc);
    pc = pc_create(&L.e, B, st.bytes);
    pc_insert(pc, &L.e, NULL, fx.ids, 64, NULL);
    engine_reset(&L.e);
    ASSERT(engine_prefill(&L.e, alt, 64, 0, NULL, 0) == 0);
    pc_insert(pc, &L.e, NULL, alt, 64, NULL);
    pc_get_stats(pc, &st);
    EXPECT(st.bytes <= st.budget && st.evictions >= 2, "bytes %zu budget %zu evictions %lld", st.bytes, st.budget,
           (long long)st.evictions);
    EXPECT(pc_has_snapshot(pc, alt, 64) && !pc_has_snapshot(pc, fx.ids, 64));
    // a snapshot handed over is owned by the cache (freed if not needed: no leak under LSan)
    es_parts snap = {0};
    es_snap_save(&L.e, &snap);
    pc_insert(pc, &L.e, NULL, alt, 64, &snap); // already cached: dropped
    EXPECT(snap.n == 0, "the handed-over snapshot is left to the caller");
    pc_reset(pc);
    pc_get_stats(pc, &st);
    EXPECT(st.nodes == 0 && st.snapshots == 0 && st.bytes == 0);
    EXPECT(pc_restore(pc, &w, NULL, alt, fx.n_ids, fx.n_ids) == 0);
    free(alt);
    pc_free(pc);
    engine_free(&w);
    pc_close(&L);
    fixture_free(&fx);
}

// With a DFlash drafter attached, a cached block also carries the drafter's context K/V: after a restore the drafter
// proposes what it proposes after a cold prefill (same draft ids, same draft logits).
TEST(server_prefix_restores_drafter_context) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    pc_loaded L;
    ASSERT(pc_open(&L, fx.dir, 512) == 0, "%s", fd_error_msg());
    fd_drafter dr;
    ASSERT(drafter_load("tests/data/dflash/qwen35_dense_tied_b8", &L.m, &dr) == 0, "%s", fd_error_msg());
    drafter_upload(&dr, L.be);
    fd_engine warm;
    fd_engine_opts o = L.e.opt;
    ASSERT(engine_init(&warm, &L.m, L.be, &o) == 0);
    fd_dflash a, b;
    ASSERT(dflash_init(&a, &L.e, &dr, 0) == 0 && dflash_init(&b, &warm, &dr, 0) == 0, "%s", fd_error_msg());
    pc_cache *pc = pc_create(&L.e, 16, (size_t)64 << 20);
    pc_attach_drafter(pc, &a);
    const int V = fx.vocab, n = fx.n_ids, B = a.B;
    float *la = malloc(sizeof(float) * (size_t)V * B), *lb = malloc(sizeof(float) * (size_t)V * B);
    for (int64_t done = 0; done < n;) {
        const int len = n - done < 64 ? (int)(n - done) : 64;
        ASSERT(engine_forward(&L.e, fx.ids + done, len, la, 0) == 0, "%s", fd_error_msg());
        dflash_context_append(&a, len);
        done += len;
        if (done % 64 == 0) pc_insert(pc, &L.e, &a, fx.ids, done, NULL);
    }
    const int64_t got = pc_restore(pc, &warm, &b, fx.ids, n, n - 1);
    EXPECT(got == ((n - 1) / 64) * 64 && b.n_ctx == got, "restored %lld, drafter context %lld", (long long)got,
           (long long)b.n_ctx);
    ASSERT(engine_forward(&warm, fx.ids + got, (int)(n - got), lb, 0) == 0, "%s", fd_error_msg());
    dflash_context_append(&b, (int)(n - got));
    EXPECT(a.n_ctx == b.n_ctx && a.n_ctx == n);
    const int32_t anchor = engine_argmax(la, V);
    EXPECT(anchor == engine_argmax(lb, V));
    int32_t da[FD_SPEC_MAX_BLOCK], db[FD_SPEC_MAX_BLOCK];
    ASSERT(dflash_draft(&a, anchor, da, la) == 0 && dflash_draft(&b, anchor, db, lb) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(da, db, sizeof(int32_t) * (size_t)(B - 1)), "draft ids differ after a restore");
    const double err = test_rel_l2(lb, la, (size_t)(B - 1) * V);
    EXPECT(err < 1e-5, "draft logits rel-L2 %.3g", err);
    printf("    block %d: drafts equal after restoring %lld tokens; draft logits rel-L2 %.2e\n", B, (long long)got,
           err);
    free(la);
    free(lb);
    pc_free(pc);
    dflash_free(&a);
    dflash_free(&b);
    engine_free(&warm);
    drafter_free(&dr);
    pc_close(&L);
    fixture_free(&fx);
}

// Tenant isolation (issue 21): a prefix cached under one salt is invisible under any other salt, the unsalted cache
// included, and found again under its own; an identical path under two salts is two separate entries.
TEST(server_prefix_salt_isolates_tenants) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    pc_loaded L;
    ASSERT(pc_open(&L, fx.dir, 512) == 0, "%s", fd_error_msg());
    pc_cache *pc = pc_create(&L.e, 16, (size_t)64 << 20);
    engine_reset(&L.e);
    ASSERT(engine_prefill(&L.e, fx.ids, 64, 0, NULL, 0) == 0);
    pc_set_salt(pc, 0x1234);
    pc_insert(pc, &L.e, NULL, fx.ids, 64, NULL);
    fd_engine w;
    fd_engine_opts o = L.e.opt;
    ASSERT(engine_init(&w, &L.m, L.be, &o) == 0);
    const uint64_t others[] = {0, 0x1235, 0x1234ULL << 32};
    for (int i = 0; i < 3; i++) {
        pc_set_salt(pc, others[i]);
        EXPECT(!pc_has_snapshot(pc, fx.ids, 64) && pc_restore(pc, &w, NULL, fx.ids, fx.n_ids, 64) == 0 &&
                   w.n_past == 0,
               "salt %llx sees salt 0x1234's prefix", (unsigned long long)others[i]);
    }
    pc_set_salt(pc, 0x1234);
    EXPECT(pc_has_snapshot(pc, fx.ids, 64) && pc_restore(pc, &w, NULL, fx.ids, fx.n_ids, 64) == 64);
    engine_reset(&w);
    pc_stats st;
    pc_get_stats(pc, &st);
    pc_set_salt(pc, 0);
    pc_insert(pc, &L.e, NULL, fx.ids, 64, NULL);
    pc_stats st2;
    pc_get_stats(pc, &st2);
    EXPECT(st2.nodes == 2 * st.nodes && st2.snapshots == 2, "%lld -> %lld nodes", (long long)st.nodes,
           (long long)st2.nodes);
    pc_free(pc);
    engine_free(&w);
    pc_close(&L);
    fixture_free(&fx);
}
