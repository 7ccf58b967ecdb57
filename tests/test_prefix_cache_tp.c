// The prefix cache under tensor parallelism (prefix_cache.h; engine_state.h: es_parts), in process on the CPU's
// threaded ranks: one index on the leader, every node's KV and snapshot held per rank on that rank's backend. A
// sequence restored from the cache and prefilled only past the hit must give the cold run's logits (rel-L2 <= 1e-5:
// the tail runs as other chunks than the cold prefill's) and greedy ids, and the plain engine's (and HF's, on the
// fixtures) at --tp 1 (a one-rank group), 2 and 4, on dense and MoE hybrids; with a DFlash drafter attached the
// drafts after a restore are the cold ones; a budget that holds one path evicts and still answers the same.
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"
#include "engine/prefix_cache.h"
#include "fixture.h"
#include "test.h"

#define PCTP_TOL   1e-5
#define PCTP_STEPS 8  // greedy decode steps after the prompt
#define PCTP_CHUNK 64 // cold prefill chunk, and where the cold run caches a snapshot

// A model on a plain engine's backend (tp 0) or sharded over tp ranks (1 included: a one-rank group).
typedef struct {
    fd_model full;
    fd_backend *bes[FD_TP_MAX];
    fd_tp_set set;
    int tp;
} pctp_rig;

static int pctp_open(pctp_rig *r, const char *dir, const char *random_cfg, int tp) {
    memset(r, 0, sizeof *r);
    const fd_load_opts lo = {0};
    if (random_cfg ? model_random_with(random_cfg, 7, &lo, &r->full) : model_load(dir, &r->full)) return -1;
    r->tp = tp;
    for (int i = 0; i < (tp ? tp : 1); i++) r->bes[i] = fd_backend_cpu_create(0);
    model_upload(&r->full, r->bes[0]);
    return tp ? tp_set_init(&r->set, &r->full, r->bes, tp) : 0;
}

static void pctp_close(pctp_rig *r) {
    if (r->set.tp) tp_set_free(&r->set);
    model_release(&r->full, r->bes[0]);
    model_free(&r->full);
    for (int i = 0; i < FD_TP_MAX; i++)
        if (r->bes[i]) r->bes[i]->destroy(r->bes[i]);
    memset(r, 0, sizeof *r);
}

static void pctp_engine(pctp_rig *r, fd_engine *e, int64_t cap) {
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = PCTP_CHUNK;
    o.capacity = cap;
    ASSERT((r->set.tp ? engine_init_tp(e, &r->full, &r->set, &o) : engine_init(e, &r->full, r->bes[0], &o)) == 0, "%s",
           fd_error_msg());
}

// A model under test and its prompt: a fixture's (with HF's greedy ids), or random ids for a random-weight config.
typedef struct {
    const char *name, *fixture, *cfg;
    int tp;
} pctp_case;

typedef struct {
    fixture fx;
    int has_fx;
    int32_t *ids;
    int n;
} pctp_prompt;

static void prompt_make(pctp_prompt *p, const pctp_case *c, int V) {
    memset(p, 0, sizeof *p);
    if (c->fixture) {
        ASSERT(fixture_load(c->fixture, &p->fx) == 0, "%s", fd_error_msg());
        p->has_fx = 1;
        p->ids = p->fx.ids;
        p->n = p->fx.n_ids;
        return;
    }
    p->n = 150;
    p->ids = malloc(sizeof(int32_t) * (size_t)p->n);
    uint64_t s = 11;
    for (int i = 0; i < p->n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p->ids[i] = (int32_t)((s >> 33) % (uint64_t)V);
    }
}

static void prompt_free(pctp_prompt *p) {
    if (p->has_fx)
        fixture_free(&p->fx);
    else
        free(p->ids);
}

// One sequence of e over ids[0..n): restored from pc first when `restore` (returns the tokens restored), then the
// rest in chunks ending at multiples of PCTP_CHUNK, each end cached with a snapshot when pc has none there (as the
// server's checkpoints); then PCTP_STEPS greedy steps. logits: [1 + PCTP_STEPS, V] (the last prompt position, then
// each step's), gen: [PCTP_STEPS].
static int64_t run_seq(fd_engine *e, pc_cache *pc, int restore, const int32_t *ids, int n, float *logits,
                       int32_t *gen) {
    const int V = e->m->cfg.vocab_size;
    engine_reset(e);
    const int64_t got = restore ? pc_restore(pc, e, NULL, ids, n, n - 1) : 0;
    for (int64_t done = got; done < n;) {
        const int64_t to_ck = PCTP_CHUNK - done % PCTP_CHUNK, len = n - done < to_ck ? n - done : to_ck;
        ASSERT(engine_forward(e, ids + done, (int)len, logits, 0) == 0, "%s", fd_error_msg());
        done += len;
        if (pc && done % PCTP_CHUNK == 0 && !pc_has_snapshot(pc, ids, done)) pc_insert(pc, e, NULL, ids, done, NULL);
    }
    for (int s = 0; s < PCTP_STEPS; s++) {
        gen[s] = engine_argmax(logits + (size_t)s * V, V);
        ASSERT(engine_forward(e, &gen[s], 1, logits + (size_t)(s + 1) * V, 0) == 0, "%s", fd_error_msg());
    }
    return got;
}

static const pctp_case k_cases[] = {
    {"qwen35_dense_tied", "qwen35_dense_tied", NULL, 1},
    {"qwen35_dense_tied", "qwen35_dense_tied", NULL, 2},
    {"qwen3_next_moe", "qwen3_next_moe", NULL, 2},
    {"qwen35_moe", "qwen35_moe", NULL, 2},
    {"dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 2},
    {"dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 4},
    {"next_moe_tp4", NULL, "tests/data/tp/next_moe_tp4.json", 4},
};

static void open_case(pctp_rig *r, const pctp_case *c, int tp) {
    char *dir = c->fixture ? fd_sprintf("tests/data/fixtures/%s", c->fixture) : NULL;
    ASSERT(pctp_open(r, dir, c->cfg, tp) == 0, "%s --tp %d: %s", c->name, tp, fd_error_msg());
    free(dir);
}

// Cold (caching) and warm (restored) runs at --tp N against the plain engine's cold run; the cache's bytes against
// the plain cache's: the GDN state splits exactly over the ranks, the KV heads too unless replicated (tp > Hkv).
TEST(prefix_cache_tp_restore_matches_cold_and_plain) {
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const pctp_case *c = &k_cases[i];
        pctp_rig plain, tp;
        open_case(&plain, c, 0);
        const int V = plain.full.cfg.vocab_size, Hkv = plain.full.cfg.num_kv_heads;
        pctp_prompt p;
        prompt_make(&p, c, V);
        const size_t rows = (size_t)(1 + PCTP_STEPS) * V;
        float *want = malloc(sizeof(float) * rows), *cold = malloc(sizeof(float) * rows),
              *warm = malloc(sizeof(float) * rows);
        int32_t g_want[PCTP_STEPS], g_cold[PCTP_STEPS], g_warm[PCTP_STEPS];
        fd_engine ep;
        pctp_engine(&plain, &ep, p.n + PCTP_STEPS + 1);
        pc_cache *pp = pc_create(&ep, 16, (size_t)64 << 20);
        run_seq(&ep, pp, 0, p.ids, p.n, want, g_want);
        pc_stats plain_st;
        pc_get_stats(pp, &plain_st);
        pc_free(pp);
        engine_free(&ep);
        pctp_close(&plain);

        open_case(&tp, c, c->tp);
        fd_engine a, b; // two leaders of one set: the cold one caches, the warm one restores
        pctp_engine(&tp, &a, p.n + PCTP_STEPS + 1);
        pctp_engine(&tp, &b, p.n + PCTP_STEPS + 1);
        pc_cache *pc = pc_create(&a, 16, (size_t)64 << 20);
        run_seq(&a, pc, 0, p.ids, p.n, cold, g_cold);
        pc_stats st;
        pc_get_stats(pc, &st);
        const int64_t got = run_seq(&b, pc, 1, p.ids, p.n, warm, g_warm);
        EXPECT(got == (p.n - 1) / PCTP_CHUNK * PCTP_CHUNK && got > 0, "%s --tp %d: restored %lld of %d", c->name, c->tp,
               (long long)got, p.n);
        EXPECT(st.snapshots == p.n / PCTP_CHUNK && st.nodes == plain_st.nodes, "%s --tp %d: %lld snapshots, %lld nodes",
               c->name, c->tp, (long long)st.snapshots, (long long)st.nodes);
        if (Hkv % c->tp == 0)
            EXPECT(st.bytes == plain_st.bytes, "%s --tp %d: %zu bytes cached, the plain cache %zu", c->name, c->tp,
                   st.bytes, plain_st.bytes);
        else
            EXPECT(st.bytes > plain_st.bytes, "%s --tp %d: replicated KV heads not counted", c->name, c->tp);
        const double e_cold = test_rel_l2(warm, cold, rows), e_plain = test_rel_l2(warm, want, rows);
        EXPECT(e_cold <= PCTP_TOL && e_plain <= PCTP_TOL, "%s --tp %d: warm logits rel-L2 %.3g vs cold, %.3g vs plain",
               c->name, c->tp, e_cold, e_plain);
        EXPECT(!memcmp(g_warm, g_cold, sizeof g_warm) && !memcmp(g_warm, g_want, sizeof g_warm),
               "%s --tp %d: greedy ids differ (warm / cold / plain)", c->name, c->tp);
        if (p.has_fx)
            EXPECT(!memcmp(g_warm, p.fx.greedy, sizeof g_warm), "%s --tp %d: greedy ids are not HF's", c->name, c->tp);
        printf("    %-18s --tp %d: restored %3lld of %d tokens, %zu KiB cached; rel-L2 %.1e vs cold, %.1e vs plain\n",
               c->name, c->tp, (long long)got, p.n, st.bytes >> 10, e_cold, e_plain);
        pc_free(pc);
        engine_free(&a);
        engine_free(&b);
        pctp_close(&tp);
        free(want), free(cold), free(warm);
        prompt_free(&p);
    }
}

// A leader's snapshot is one part per rank, each on its rank's backend, together the plain engine's bytes; handed
// to the cache it is taken over (the caller's left empty), and a restore from it continues as the cold run does.
TEST(prefix_cache_tp_snapshot_parts_per_rank) {
    const pctp_case c = {"dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 4};
    pctp_rig plain, tp;
    open_case(&plain, &c, 0);
    fd_engine ep;
    pctp_engine(&plain, &ep, 128);
    es_parts ps = {0};
    es_snap_save(&ep, &ps);
    EXPECT(ps.n == 1 && ps.be[0] == plain.bes[0]);
    const size_t plain_bytes = es_parts_bytes(&ps);
    es_parts_free(&ps);
    EXPECT(ps.n == 0);
    engine_free(&ep);
    pctp_close(&plain);
    open_case(&tp, &c, c.tp);
    fd_engine a, b;
    pctp_engine(&tp, &a, 128);
    pctp_engine(&tp, &b, 128);
    const int V = tp.full.cfg.vocab_size;
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 37 + 5) % V;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    ASSERT(engine_forward(&a, ids, 64, la, 0) == 0, "%s", fd_error_msg());
    es_parts s = {0};
    es_snap_save(&a, &s);
    EXPECT(s.n == c.tp && es_parts_bytes(&s) == plain_bytes, "%d parts, %zu bytes (plain %zu)", s.n, es_parts_bytes(&s),
           plain_bytes);
    for (int r = 0; r < s.n; r++)
        EXPECT(s.be[r] == tp.bes[r] && s.part[r], "part %d is not on rank %d's backend", r, r);
    pc_cache *pc = pc_create(&a, 16, (size_t)16 << 20);
    pc_insert(pc, &a, NULL, ids, 64, &s);
    EXPECT(s.n == 0 && pc_has_snapshot(pc, ids, 64), "the snapshot was not taken over");
    const int32_t next = engine_argmax(la, V);
    ASSERT(engine_forward(&a, &next, 1, la, 0) == 0, "%s", fd_error_msg());
    EXPECT(pc_restore(pc, &b, NULL, ids, 65, 64) == 64 && b.n_past == 64);
    ASSERT(engine_forward(&b, &next, 1, lb, 0) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(la, lb, sizeof(float) * V), "the step after a restore differs from the cold run's");
    free(la), free(lb);
    pc_free(pc);
    engine_free(&a);
    engine_free(&b);
    pctp_close(&tp);
}

// A budget that holds one prompt's path (blocks and snapshots over all ranks): two prompts that share their first
// blocks take turns, each first turn evicting the other's leaves and each repeat restoring its own path, and every
// answer is still the plain engine's.
TEST(prefix_cache_tp_eviction_keeps_answers) {
    const pctp_case k[] = {{"qwen35_dense_tied", "qwen35_dense_tied", NULL, 2},
                           {"dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 4}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const pctp_case *c = &k[i];
        pctp_rig plain, tp;
        open_case(&plain, c, 0);
        const int V = plain.full.cfg.vocab_size;
        pctp_prompt p;
        prompt_make(&p, c, V);
        int32_t *alt = malloc(sizeof(int32_t) * (size_t)p.n);
        memcpy(alt, p.ids, sizeof(int32_t) * (size_t)p.n);
        alt[40] = (alt[40] + 1) % V; // block 2 differs: blocks 0-1 are shared, the rest of the path is not
        const int32_t *prompts[2] = {p.ids, alt};
        const size_t rows = (size_t)(1 + PCTP_STEPS) * V;
        float *want[2], *got = malloc(sizeof(float) * rows);
        int32_t g_want[2][PCTP_STEPS], g_got[PCTP_STEPS];
        fd_engine ep;
        pctp_engine(&plain, &ep, p.n + PCTP_STEPS + 1);
        for (int w = 0; w < 2; w++) {
            want[w] = malloc(sizeof(float) * rows);
            run_seq(&ep, NULL, 0, prompts[w], p.n, want[w], g_want[w]);
        }
        engine_free(&ep);
        pctp_close(&plain);

        open_case(&tp, c, c->tp);
        fd_engine e;
        pctp_engine(&tp, &e, p.n + PCTP_STEPS + 1);
        pc_cache *big = pc_create(&e, 16, (size_t)64 << 20);
        run_seq(&e, big, 0, p.ids, p.n, got, g_got);
        pc_stats one;
        pc_get_stats(big, &one); // one prompt's path
        pc_free(big);
        pc_cache *pc = pc_create(&e, 16, one.bytes);
        int64_t restored = 0;
        const int order[6] = {0, 1, 1, 0, 0, 1}; // a repeat finds its path; a switch finds only the shared blocks
        for (int turn = 0; turn < 6; turn++) {
            const int w = order[turn], repeat = turn > 0 && order[turn - 1] == w;
            const int64_t r = run_seq(&e, pc, 1, prompts[w], p.n, got, g_got);
            EXPECT(repeat ? r == (p.n - 1) / PCTP_CHUNK * PCTP_CHUNK : r == 0, "%s --tp %d, turn %d: restored %lld",
                   c->name, c->tp, turn, (long long)r);
            restored += r;
            const double err = test_rel_l2(got, want[w], rows);
            EXPECT(err <= PCTP_TOL && !memcmp(g_got, g_want[w], sizeof g_got),
                   "%s --tp %d, turn %d: rel-L2 %.3g against the plain engine, or other greedy ids", c->name, c->tp,
                   turn, err);
        }
        pc_stats st;
        pc_get_stats(pc, &st);
        EXPECT(st.evictions > 0 && st.bytes <= st.budget && restored > 0,
               "%s --tp %d: %lld evictions, %zu of %zu bytes, %lld tokens restored", c->name, c->tp,
               (long long)st.evictions, st.bytes, st.budget, (long long)restored);
        printf("    %-18s --tp %d: budget %zu KiB, %lld evictions, %lld tokens restored in 6 turns\n", c->name, c->tp,
               st.budget >> 10, (long long)st.evictions, (long long)restored);
        pc_free(pc);
        engine_free(&e);
        pctp_close(&tp);
        free(want[0]), free(want[1]), free(got), free(alt);
        prompt_free(&p);
    }
}

// ---- DFlash: the drafter's context K/V travels with rank 0's part ----

#define PCTP_SPEC_NEW 16

// What a speculative sequence gives after its prompt: the first draft block's ids and logits, then PCTP_SPEC_NEW
// tokens of greedy rounds (those after the anchor, the prompt's own greedy token).
typedef struct {
    int32_t drafts[FD_SPEC_MAX_BLOCK];
    float *dlogits; // [B - 1, V]
    int32_t out[PCTP_SPEC_NEW + FD_SPEC_MAX_BLOCK];
    int64_t restored;
} spec_result;

// As run_seq, with the drafter's context fed by every chunk and cached (and restored) with the blocks.
static void spec_seq(fd_dflash *s, pc_cache *pc, int restore, const int32_t *ids, int n, spec_result *res) {
    fd_engine *e = s->tgt;
    const int V = e->m->cfg.vocab_size;
    float *last = malloc(sizeof(float) * V);
    engine_reset(e);
    dflash_reset(s);
    res->restored = restore ? pc_restore(pc, e, s, ids, n, n - 1) : 0;
    for (int64_t done = res->restored; done < n;) {
        const int64_t to_ck = PCTP_CHUNK - done % PCTP_CHUNK, len = n - done < to_ck ? n - done : to_ck;
        ASSERT(engine_forward(e, ids + done, (int)len, last, 0) == 0, "%s", fd_error_msg());
        dflash_context_append(s, (int)len);
        done += len;
        if (pc && done % PCTP_CHUNK == 0 && !pc_has_snapshot(pc, ids, done)) pc_insert(pc, e, s, ids, done, NULL);
    }
    int32_t tok = engine_argmax(last, V);
    ASSERT(dflash_draft(s, tok, res->drafts, res->dlogits) == 0, "%s", fd_error_msg());
    for (int made = 0; made < PCTP_SPEC_NEW;) {
        int got = 0;
        ASSERT(dflash_round(s, tok, s->B, NULL, made, res->out + made, &got) == 0 && got >= 1, "%s", fd_error_msg());
        made += got;
        tok = res->out[made - 1];
    }
    free(last);
}

// A restored target and drafter context (cold leader caches, warm leader restores) draft what the cold sequence
// drafts and what the plain engine drafts, and their greedy rounds emit the same tokens.
TEST(prefix_cache_tp_dflash_restores_drafter_context) {
    const struct {
        pctp_case c;
        const char *drafter, *drafter_cfg;
    } k[] = {
        {{"qwen35_dense_tied", "qwen35_dense_tied", NULL, 2}, "tests/data/dflash/qwen35_dense_tied_b8", NULL},
        {{"qwen3_next_moe", "qwen3_next_moe", NULL, 2}, "tests/data/dflash/qwen3_next_moe_b4", NULL},
        {{"dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 4}, NULL, "tests/data/tp/dense_tp8_dflash_b8.json"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        const pctp_case *c = &k[i].c;
        spec_result res[3]; // plain cold, tp cold, tp warm
        pctp_prompt p = {0};
        int B = 0, V = 0;
        for (int run = 0; run < 2; run++) { // the plain engine, then --tp N
            pctp_rig r;
            open_case(&r, c, run ? c->tp : 0);
            V = r.full.cfg.vocab_size;
            if (!run) prompt_make(&p, c, V);
            fd_drafter d;
            ASSERT((k[i].drafter ? drafter_load(k[i].drafter, &r.full, &d)
                                 : drafter_random(k[i].drafter_cfg, &r.full, 8, &d)) == 0,
                   "%s", fd_error_msg());
            drafter_upload(&d, r.bes[0]);
            fd_engine ea, eb;
            fd_dflash sa, sb;
            pctp_engine(&r, &ea, p.n + 64);
            pctp_engine(&r, &eb, p.n + 64);
            ASSERT(dflash_init(&sa, &ea, &d, 0) == 0 && dflash_init(&sb, &eb, &d, 0) == 0, "%s", fd_error_msg());
            B = sa.B;
            pc_cache *pc = pc_create(&ea, 16, (size_t)64 << 20);
            pc_attach_drafter(pc, &sa);
            for (int j = run ? 1 : 0; j < (run ? 3 : 1); j++) {
                res[j].dlogits = malloc(sizeof(float) * (size_t)(B - 1) * V);
                spec_seq(j == 2 ? &sb : &sa, run ? pc : NULL, j == 2, p.ids, p.n, &res[j]);
            }
            pc_free(pc);
            dflash_free(&sa);
            dflash_free(&sb);
            engine_free(&ea);
            engine_free(&eb);
            drafter_release(&d, r.bes[0]);
            drafter_free(&d);
            pctp_close(&r);
        }
        EXPECT(res[2].restored == (p.n - 1) / PCTP_CHUNK * PCTP_CHUNK && res[2].restored > 0,
               "%s --tp %d: restored %lld", c->name, c->tp, (long long)res[2].restored);
        const size_t nd = (size_t)(B - 1) * V;
        const double e_cold = test_rel_l2(res[2].dlogits, res[1].dlogits, nd),
                     e_plain = test_rel_l2(res[2].dlogits, res[0].dlogits, nd);
        EXPECT(e_cold <= PCTP_TOL && e_plain <= PCTP_TOL, "%s --tp %d: draft logits rel-L2 %.3g vs cold, %.3g vs plain",
               c->name, c->tp, e_cold, e_plain);
        for (int j = 1; j < 3; j++) {
            EXPECT(!memcmp(res[j].drafts, res[0].drafts, sizeof(int32_t) * (size_t)(B - 1)),
                   "%s --tp %d: %s drafts differ from the plain engine's", c->name, c->tp, j == 2 ? "warm" : "cold");
            EXPECT(!memcmp(res[j].out, res[0].out, sizeof(int32_t) * PCTP_SPEC_NEW),
                   "%s --tp %d: %s rounds emit other tokens than the plain engine's", c->name, c->tp,
                   j == 2 ? "warm" : "cold");
        }
        if (p.has_fx)
            EXPECT(!memcmp(res[2].out, p.fx.greedy + 1, sizeof(int32_t) * PCTP_SPEC_NEW), // greedy[0]: the anchor
                   "%s --tp %d: not HF's greedy ids", c->name, c->tp);
        printf("    %-18s --tp %d, block %d: restored %lld tokens; draft logits rel-L2 %.1e vs cold, %.1e vs plain\n",
               c->name, c->tp, B, (long long)res[2].restored, e_cold, e_plain);
        for (int j = 0; j < 3; j++) free(res[j].dlogits);
        prompt_free(&p);
    }
}
