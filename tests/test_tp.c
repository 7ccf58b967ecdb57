// Tensor parallelism on the CPU (engine_tp.h, model/shard.c): --tp 2, 4 and 8 against --tp 1 and against HF's
// fp32 references. Logits are compared by relative L2 over every row (test_rel_l2), bound 1e-5 against tp 1 (the
// ranks' partial sums change only the fp32 summation order) and 1e-4 against HF (the bound test_models uses);
// greedy ids must be identical. Fixtures whose heads do not split at N must be refused, naming the field.
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"
#include "engine/engine_tp.h"
#include "engine/routes.h"
#include "engine/sampling.h"
#include "engine/tp_sample.h"
#include "fixture.h"
#include "test.h"

#define TP_VS_TP1 1e-5
#define TP_VS_HF 1e-4

// A model (from a fixture dir, or random weights from a config) at tp 1 and its shards over tp ranks.
typedef struct {
    fd_model full;
    fd_backend *bes[FD_TP_MAX];
    fd_tp_set set;
    int tp;
    int group; // a group even at tp 1 (an explicit --tp 1)
} tp_rig;

static fd_backend *cpu0(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

// 0, or -1 with fd_error set (the shard refusal included). random_cfg: random weights from that config.
static int rig_open_as(tp_rig *r, const char *dir, const char *random_cfg, int quantize_fp8, int tp, int group) {
    memset(r, 0, sizeof *r);
    r->group = group;
    const fd_load_opts lo = {.quantize_fp8 = quantize_fp8};
    if (random_cfg ? model_random_with(random_cfg, 7, &lo, &r->full) : model_load(dir, &r->full)) return -1;
    r->tp = tp;
    r->bes[0] = fd_backend_cpu_create(0); // a backend of its own: it joins a group
    for (int i = 1; i < tp; i++) r->bes[i] = fd_backend_cpu_create(0);
    model_upload(&r->full, r->bes[0]);
    if ((tp > 1 || group) && tp_set_init(&r->set, &r->full, r->bes, tp)) return -1;
    return 0;
}
static int rig_open(tp_rig *r, const char *dir, const char *random_cfg, int quantize_fp8, int tp) {
    return rig_open_as(r, dir, random_cfg, quantize_fp8, tp, 0);
}

static void rig_close(tp_rig *r) {
    if (r->set.tp) tp_set_free(&r->set);
    if (r->bes[0]) model_release(&r->full, r->bes[0]);
    model_free(&r->full);
    for (int i = 0; i < r->tp; i++)
        if (r->bes[i]) r->bes[i]->destroy(r->bes[i]);
    memset(r, 0, sizeof *r);
}

static int rig_engine(tp_rig *r, fd_engine *e, int budget, int64_t cap) {
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = budget;
    o.capacity = cap;
    return r->set.tp ? engine_init_tp(e, &r->full, &r->set, &o) : engine_init(e, &r->full, r->bes[0], &o);
}

// Prefill of `ids` in chunks of `chunk` with every row's logits, then `steps` greedy decode steps (their logits
// too): [n + steps, V] into out, the greedy ids into gen.
static void run_logits(tp_rig *r, const int32_t *ids, int n, int chunk, int steps, float *out, int32_t *gen) {
    fd_engine e;
    ASSERT(rig_engine(r, &e, chunk, n + steps + 1) == 0, "%s", fd_error_msg());
    const int V = r->full.cfg.vocab_size;
    ASSERT(engine_prefill(&e, ids, n, chunk, out, 1) == 0, "%s", fd_error_msg());
    int32_t tok = engine_argmax(out + (int64_t)(n - 1) * V, V);
    for (int s = 0; s < steps; s++) {
        gen[s] = tok;
        float *row = out + (int64_t)(n + s) * V;
        ASSERT(engine_forward(&e, &tok, 1, row, 0) == 0, "%s", fd_error_msg());
        tok = engine_argmax(row, V);
    }
    engine_free(&e);
}

static void ids_of(int32_t *ids, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((seed >> 33) % (uint64_t)V);
    }
}

// tp ranks against tp 1 on one model: logits of a chunked prefill (chunk 7: several chunks, both GDN forms) and
// decode steps, greedy ids of engine_generate (the rank-argmax combine), the HF reference where there is one.
static void check_model(const char *what, const char *dir, const char *random_cfg, int fp8, int tp, const fixture *fx) {
    int32_t rnd[24];
    tp_rig r1, rt;
    ASSERT(rig_open(&r1, dir, random_cfg, fp8, 1) == 0, "%s: %s", what, fd_error_msg());
    const int V = r1.full.cfg.vocab_size, steps = 6;
    const int32_t *ids = fx ? fx->ids : rnd;
    const int n = fx ? fx->n_ids : 24;
    if (!fx) ids_of(rnd, n, V, 11);
    float *l1 = malloc(sizeof(float) * (size_t)(n + steps) * V), *lt = malloc(sizeof(float) * (size_t)(n + steps) * V);
    int32_t g1[8], gt[8];
    run_logits(&r1, ids, n, 7, steps, l1, g1);
    ASSERT(rig_open(&rt, dir, random_cfg, fp8, tp) == 0, "%s --tp %d: %s", what, tp, fd_error_msg());
    for (size_t i = 0; i < (size_t)(n + steps) * V; i++) lt[i] = NAN;
    run_logits(&rt, ids, n, 7, steps, lt, gt);
    const double err = test_rel_l2(lt, l1, (size_t)(n + steps) * V);
    const double hf = fx ? test_rel_l2(lt, fx->logits, (size_t)n * V) : 0;
    printf("    %-22s --tp %d: logits rel-L2 vs tp 1 %.2e%s", what, tp, err, fx ? "" : "\n");
    if (fx) printf(", vs HF %.2e\n", hf);
    EXPECT(err <= TP_VS_TP1, "%s --tp %d: rel-L2 %.3g vs tp 1", what, tp, err);
    EXPECT(hf <= TP_VS_HF, "%s --tp %d: rel-L2 %.3g vs HF", what, tp, hf);
    EXPECT(!memcmp(g1, gt, sizeof(int32_t) * steps), "%s --tp %d: greedy decode ids differ", what, tp);
    // greedy through the backend argmax: every rank's best of its vocabulary slice, combined
    const int n_new = fx ? fx->n_greedy : 8;
    int32_t *want = malloc(sizeof(int32_t) * (size_t)n_new), *got = malloc(sizeof(int32_t) * (size_t)n_new);
    fd_engine e1, et;
    ASSERT(rig_engine(&r1, &e1, 5, n + n_new + 1) == 0 && rig_engine(&rt, &et, 5, n + n_new + 1) == 0, "%s",
           fd_error_msg());
    ASSERT(engine_generate_greedy(&e1, ids, n, 5, n_new, want) == 0, "%s", fd_error_msg());
    ASSERT(engine_generate_greedy(&et, ids, n, 5, n_new, got) == 0, "%s", fd_error_msg());
    EXPECT(!memcmp(want, got, sizeof(int32_t) * (size_t)n_new), "%s --tp %d: engine_generate_greedy differs", what, tp);
    if (fx) EXPECT(!memcmp(fx->greedy, got, sizeof(int32_t) * (size_t)n_new), "%s --tp %d: greedy differs from HF", what, tp);
    engine_free(&e1);
    engine_free(&et);
    free(want);
    free(got);
    free(l1);
    free(lt);
    rig_close(&rt);
    rig_close(&r1);
}

// Every fixture at tp 2 and 4: run where the heads split, refused (naming a config field) where they do not.
TEST(tp_fixtures_match_tp1_and_hf) {
    int ran = 0, refused = 0;
    for (int f = 0; k_all_fixture_names[f]; f++)
        for (int tp = 2; tp <= 4; tp *= 2) {
            fixture fx;
            ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
            fd_model m;
            ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
            fd_rank_plan p;
            const int splits = plan_init(&p, &m.cfg, 0, tp) == 0;
            model_free(&m);
            if (splits) {
                check_model(k_all_fixture_names[f], fx.dir, NULL, 0, tp, &fx);
                ran++;
            } else {
                tp_rig r;
                EXPECT(rig_open(&r, fx.dir, NULL, 0, tp) != 0, "%s --tp %d: not refused", fx.dir, tp);
                const char *msg = fd_error_msg();
                printf("    %-22s --tp %d: refused: %s\n", k_all_fixture_names[f], tp, msg);
                EXPECT(strstr(msg, "is not a multiple of") && strstr(msg, "tensor parallelism"), "%s", msg);
                rig_close(&r);
                refused++;
            }
            fixture_free(&fx);
        }
    EXPECT(ran >= 5 && refused >= 1, "%d fixtures ran, %d refused", ran, refused);
}

// Geometries that split at 4 and 8 (random weights): qwen3_5 dense with tied embeddings and an uneven vocabulary
// slice (509 rows), KV heads replicated past 2 ranks; qwen3_next MoE; the dense one again in FP8 (quantized at
// load: its 128 x 128 blocks do not fall on the rank cuts, so the copies are the decoded f32 values).
TEST(tp_random_geometries_at_4_and_8) {
    check_model("dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 0, 4, NULL);
    check_model("dense_tp8", NULL, "tests/data/tp/dense_tp8.json", 0, 8, NULL);
    check_model("next_moe_tp4", NULL, "tests/data/tp/next_moe_tp4.json", 0, 2, NULL);
    check_model("next_moe_tp4", NULL, "tests/data/tp/next_moe_tp4.json", 0, 4, NULL);
    check_model("dense_tp8 fp8", NULL, "tests/data/tp/dense_tp8.json", 1, 2, NULL);
}

// A batched decode step of three sequences at tp 2 gives tp 1's logits.
TEST(tp_batched_decode_matches_tp1) {
    fixture fx;
    ASSERT(fixture_load("qwen3_next_moe", &fx) == 0, "%s", fd_error_msg());
    const int V = fx.vocab, B = 3;
    float *want = malloc(sizeof(float) * B * V), *got = malloc(sizeof(float) * B * V);
    for (int tp = 1; tp <= 2; tp++) {
        tp_rig r;
        ASSERT(rig_open(&r, fx.dir, NULL, 0, tp) == 0, "%s", fd_error_msg());
        fd_engine e[3], *seqs[3];
        int32_t next[3];
        for (int s = 0; s < B; s++) {
            ASSERT(rig_engine(&r, &e[s], 16, 64) == 0, "%s", fd_error_msg());
            seqs[s] = &e[s];
            ASSERT(engine_prefill(&e[s], fx.ids + s, 6 + 3 * s, 4, NULL, 0) == 0, "%s", fd_error_msg());
            next[s] = fx.ids[10 + s];
        }
        ASSERT(engine_decode_batch(seqs, next, B, tp == 1 ? want : got) == 0, "%s", fd_error_msg());
        for (int s = 0; s < B; s++) engine_free(&e[s]);
        rig_close(&r);
    }
    const double err = test_rel_l2(got, want, (size_t)B * V);
    EXPECT(err <= TP_VS_TP1, "batched decode at tp 2: rel-L2 %.3g", err);
    for (int s = 0; s < B; s++)
        EXPECT(engine_argmax(got + s * V, V) == engine_argmax(want + s * V, V), "sequence %d: argmax differs", s);
    free(want);
    free(got);
    fixture_free(&fx);
}

// Three sequences sharing KV pages (the server's slots; a page each): on one pool (tp 1), or on one pool per rank
// shared by three leaders. Prompts of 5, 9 and 13 tokens, then batched decode steps whose rows are sampled (two
// seeds) or greedy (temperature 0: the argmax combine) in one forward; their ids into out. Every rank's pool lends
// the same pages, and has them all back at the end.
static void shared_pools_run(tp_rig *r, int32_t out[3][8]) {
    const int ranks = r->set.tp ? r->set.tp : 1;
    fd_kv_pool pools[FD_TP_MAX], *ptrs[FD_TP_MAX];
    for (int q = 0; q < ranks; q++) {
        ASSERT(kv_pool_init(&pools[q], r->bes[q], &(r->set.tp ? &r->set.shards[q] : &r->full)->plan, 3 * 256, 0) == 0,
               "%s", fd_error_msg());
        ptrs[q] = &pools[q];
    }
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 16;
    o.capacity = 64;
    if (r->set.tp) o.rank_pools = ptrs;
    else o.pool = &pools[0];
    fd_engine e[3], *seqs[3];
    fd_sampler smp[3], *smps[3];
    int32_t ids[13], next[3];
    sampler_init(&smp[0], 0, 0, 1, 0);
    sampler_init(&smp[1], 0.9f, 40, 0.9f, 5);
    sampler_init(&smp[2], 1.0f, 0, 1, 9);
    for (int s = 0; s < 3; s++) {
        ASSERT((r->set.tp ? engine_init_tp(&e[s], &r->full, &r->set, &o) : engine_init(&e[s], &r->full, r->bes[0], &o)) == 0,
               "%s", fd_error_msg());
        ids_of(ids, 5 + 4 * s, r->full.cfg.vocab_size, 21 + (uint64_t)s);
        ASSERT(engine_prefill_sample(&e[s], ids, 5 + 4 * s, 4, &smp[s], &next[s]) == 0, "%s", fd_error_msg());
        seqs[s] = &e[s];
        smps[s] = &smp[s];
    }
    for (int k = 0; k < 8; k++) {
        ASSERT(engine_decode_batch_sample(seqs, next, 3, smps, next) == 0, "%s", fd_error_msg());
        for (int s = 0; s < 3; s++) out[s][k] = next[s];
        for (int q = 1; q < ranks; q++)
            EXPECT(kv_pool_free_tokens(&pools[q]) == kv_pool_free_tokens(&pools[0]), "rank %d lent other pages", q);
    }
    EXPECT(kv_pool_free_tokens(&pools[0]) < kv_pool_tokens(&pools[0]), "the sequences hold no page of the pool");
    for (int s = 0; s < 3; s++) engine_free(&e[s]);
    for (int q = 0; q < ranks; q++) {
        EXPECT(kv_pool_free_tokens(&pools[q]) == kv_pool_tokens(&pools[q]), "rank %d: pages not returned", q);
        kv_pool_free(&pools[q]);
    }
}

// Shared per-rank pools and the batched step over leaders give the plain server's ids: the fixture at tp 2, a
// geometry that splits at 4 and 8 (KV heads replicated past 2 ranks). A plain engine refuses per-rank pools and
// a leader one shared pool.
TEST(tp_shared_rank_pools_batched_decode) {
    const struct {
        const char *dir, *cfg;
        int tp;
    } k[] = {{"tests/data/fixtures/qwen35_dense_tied", NULL, 2},
             {NULL, "tests/data/tp/dense_tp8.json", 4},
             {NULL, "tests/data/tp/dense_tp8.json", 8}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        int32_t want[3][8], got[3][8];
        tp_rig r1, rt;
        ASSERT(rig_open(&r1, k[i].dir, k[i].cfg, 0, 1) == 0, "%s", fd_error_msg());
        shared_pools_run(&r1, want);
        rig_close(&r1);
        ASSERT(rig_open(&rt, k[i].dir, k[i].cfg, 0, k[i].tp) == 0, "%s", fd_error_msg());
        shared_pools_run(&rt, got);
        for (int s = 0; s < 3; s++)
            EXPECT(!memcmp(want[s], got[s], sizeof want[s]), "%s --tp %d: sequence %d's ids differ from tp 1",
                   k[i].dir ? k[i].dir : k[i].cfg, k[i].tp, s);
        if (i == 0) {
            fd_kv_pool pool, *ptrs[1] = {&pool};
            ASSERT(kv_pool_init(&pool, rt.bes[0], &rt.full.plan, 64, 0) == 0, "%s", fd_error_msg());
            fd_engine_opts o;
            engine_default_opts(&o);
            o.capacity = 64;
            o.pool = &pool;
            fd_engine e;
            EXPECT(engine_init_tp(&e, &rt.full, &rt.set, &o) != 0 && strstr(fd_error_msg(), "a KV pool per rank"), "%s",
                   fd_error_msg());
            o.pool = NULL;
            o.rank_pools = ptrs;
            EXPECT(engine_init(&e, &rt.full, rt.bes[0], &o) != 0 && strstr(fd_error_msg(), "per-rank KV pools"), "%s",
                   fd_error_msg());
            engine_free(&e);
            kv_pool_free(&pool);
        }
        rig_close(&rt);
    }
}

// Sampling over the vocabulary-parallel head (per-rank summaries, no logits row gathered: tp_sample.h) draws the ids tp 1 draws for one seed; so
// does a one-rank group (an explicit --tp 1: its rank samples as the plain engine does).
TEST(tp_sampling_matches_tp1) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    int32_t out[3][12];
    for (int run = 0; run < 3; run++) {
        const int tp = run == 1 ? 2 : 1;
        tp_rig r;
        ASSERT(rig_open_as(&r, fx.dir, NULL, 0, tp, run == 2) == 0, "%s", fd_error_msg());
        fd_engine e;
        ASSERT(rig_engine(&r, &e, 64, fx.n_ids + 16) == 0, "%s", fd_error_msg());
        fd_sampler smp;
        sampler_init(&smp, 0.9f, 40, 0.9f, 1234);
        const int64_t gathered = tp_sample_gathered_bytes();
        ASSERT(engine_generate(&e, fx.ids, fx.n_ids, 0, 12, &smp, out[run]) == 0, "%s", fd_error_msg());
        EXPECT(tp_sample_gathered_bytes() == gathered, "tp %d gathered logits rows to sample", tp);
        engine_free(&e);
        rig_close(&r);
    }
    EXPECT(!memcmp(out[0], out[1], sizeof out[0]), "top-k/top-p sampled ids differ at tp 2");
    EXPECT(!memcmp(out[0], out[2], sizeof out[0]), "top-k/top-p sampled ids differ at an explicit tp 1");
    fixture_free(&fx);
}

// DFlash over a tp 2 target (the drafter replicated on rank 0's backend, reading rank 0's taps): the greedy
// continuation is plain greedy's (HF's) under both gdn_verify values.
TEST(tp_dflash_greedy_matches_plain) {
    const struct {
        const char *drafter, *target;
    } k[] = {{"qwen35_dense_tied_b8", "qwen35_dense_tied"}, {"qwen3_next_moe_b4", "qwen3_next_moe"}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        fixture fx;
        ASSERT(fixture_load(k[i].target, &fx) == 0, "%s", fd_error_msg());
        tp_rig r;
        ASSERT(rig_open(&r, fx.dir, NULL, 0, 2) == 0, "%s", fd_error_msg());
        fd_drafter d;
        char *dir = fd_sprintf("tests/data/dflash/%s", k[i].drafter);
        ASSERT(drafter_load(dir, &r.full, &d) == 0, "%s", fd_error_msg());
        free(dir);
        drafter_upload(&d, r.bes[0]);
        // under both gdn_verify values (set on the leader, whose table is rank 0's; the ranks follow it), ending in
        // bitwise the same rank states
        fd_engine e[2];
        for (int v = 0; v < 2; v++) {
            ASSERT(rig_engine(&r, &e[v], 64, fx.n_ids + 64) == 0, "%s", fd_error_msg());
            ASSERT(routes_set(&e[v], v ? "gdn_verify=replay" : "gdn_verify=slots") == 0, "%s", fd_error_msg());
            fd_dflash s;
            ASSERT(dflash_init(&s, &e[v], &d, 0) == 0, "%s", fd_error_msg());
            int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
            ASSERT(dflash_generate(&s, fx.ids, fx.n_ids, 64, fx.n_greedy, NULL, out) == 0, "%s", fd_error_msg());
            int same = 0;
            while (same < fx.n_greedy && out[same] == fx.greedy[same]) same++;
            EXPECT(same == fx.n_greedy, "%s at tp 2, gdn_verify %d: differs from greedy at token %d", k[i].drafter, v,
                   same);
            EXPECT(s.st.rounds >= 1);
            for (int q = 0; q < 2; q++) // every rank verified by the value asked for
                EXPECT(engine_tp_rank(&e[v], q)->routes[FD_ROUTE_GDN_VERIFY].calls[v] == s.st.rounds);
            free(out);
            dflash_free(&s);
        }
        for (int q = 0; q < 2; q++) {
            const fd_engine *a = engine_tp_rank(&e[0], q), *b = engine_tp_rank(&e[1], q);
            const fd_rank_plan *p = &a->m->plan;
            for (int l = 0; l < p->num_layers; l++)
                if (p->layers[l].kind == FD_LAYER_GDN)
                    EXPECT(!memcmp(a->gdn_state[l], b->gdn_state[l], (size_t)plan_gdn_state_bytes(p)) &&
                               !memcmp(a->conv_state[l], b->conv_state[l], (size_t)plan_conv_state_bytes(p)),
                           "%s rank %d layer %d: state differs between slots and replay", k[i].drafter, q, l);
        }
        for (int v = 0; v < 2; v++) engine_free(&e[v]);
        drafter_release(&d, r.bes[0]);
        drafter_free(&d);
        rig_close(&r);
        fixture_free(&fx);
    }
}

// Refusals: a rank count outside 1..8, a split the heads do not allow (message names the field), a backend
// already in a group.
TEST(tp_refusals) {
    tp_rig r;
    EXPECT(rig_open(&r, "tests/data/fixtures/qwen35_dense_tied", NULL, 0, 3) != 0);
    EXPECT(strstr(fd_error_msg(), "num_attention_heads = 4 is not a multiple of 3"), "%s", fd_error_msg());
    rig_close(&r);
    EXPECT(rig_open(&r, "tests/data/fixtures/fp8_qwen35_dense", NULL, 0, 2) != 0);
    EXPECT(strstr(fd_error_msg(), "linear_num_key_heads = 1 is not a multiple of 2"), "%s", fd_error_msg());
    rig_close(&r);
    fd_model m;
    ASSERT(model_load("tests/data/fixtures/qwen35_dense_tied", &m) == 0, "%s", fd_error_msg());
    fd_tp_set t;
    fd_backend *bes[FD_TP_MAX + 1] = {cpu0()};
    EXPECT(tp_set_init(&t, &m, bes, FD_TP_MAX + 1) != 0 && strstr(fd_error_msg(), "1..8"), "%s", fd_error_msg());
    fd_backend *pair[2] = {cpu0(), cpu0()};
    EXPECT(tp_set_init(&t, &m, pair, 2) != 0 && strstr(fd_error_msg(), "one backend"), "%s", fd_error_msg());
    model_free(&m);
}

// --trace with --tp is one refusal with one message for the model commands and serve (cli_check_trace_tp): a
// usage error (exit 2), before the model is loaded.
TEST(tp_cli_trace_refused_as_serve_does) {
    const char *cmds[] = {"generate tests/data/fixtures/qwen35_dense_tied --ids 1,2,3 -n 2",
                          "logits tests/data/fixtures/qwen35_dense_tied --ids 1,2,3 --out /tmp/fd_tp_trace_logits.f32",
                          "serve tests/data/fixtures/qwen35_dense_tied --tokenizer tests/data/server/tokenizer.json "
                          "--port 0"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out = NULL, *cmd = fd_sprintf("%s %s --tp 2 --trace /tmp/fd_tp_trace.json 2>&1", test_bin(), cmds[i]);
        const int st = test_run(cmd, &out);
        EXPECT(st == 2 && out &&
                   strstr(out, "flashdelta: error: --trace records one backend; it does not run with --tp 2"),
               "%s: exit %d: %s", cmds[i], st, out ? out : "");
        free(out), free(cmd);
    }
}

// The CLI: run --tp 2 prints tp 1's ids; --tp 4 on a fixture whose heads do not split exits 1 naming the field;
// bench --tp 2 prints one route table per rank and passes its route check.
TEST(tp_cli_run_refusal_and_bench) {
    const char *F = "tests/data/fixtures/qwen3_next_moe";
    char *cmd, *out1 = NULL, *out2 = NULL, *err = NULL, *bench = NULL;
    cmd = fd_sprintf("%s run %s --ids 1,2,3,4,5 -n 8 --tp 1 2>/dev/null", test_bin(), F);
    EXPECT(test_run(cmd, &out1) == 0);
    free(cmd);
    cmd = fd_sprintf("%s run %s --ids 1,2,3,4,5 -n 8 --tp 2 2>/dev/null", test_bin(), F);
    EXPECT(test_run(cmd, &out2) == 0);
    free(cmd);
    ASSERT(out1 && out2);
    EXPECT(strstr(out1, "generated ids:") && !strncmp(strstr(out1, "generated ids:"), strstr(out2, "generated ids:"), 40),
           "tp 1: %s / tp 2: %s", out1, out2);
    cmd = fd_sprintf("%s run %s --ids 1,2,3 -n 2 --tp 4 2>&1", test_bin(), F);
    EXPECT(test_run(cmd, &err) == 1);
    free(cmd);
    EXPECT(err && strstr(err, "linear_num_key_heads = 2 is not a multiple of 4"), "%s", err ? err : "");
    cmd = fd_sprintf("%s bench --random-weights tests/data/tp/next_moe_tp4.json --contexts 16 --decode 4 --tp 2 "
                     "2>/dev/null", test_bin());
    EXPECT(test_run(cmd, &bench) == 0);
    free(cmd);
    EXPECT(bench && strstr(bench, "rank 0 of 2: route hits") && strstr(bench, "rank 1 of 2: route hits") &&
               strstr(bench, "route check: every counted call ran its selected route"),
           "%s", bench ? bench : "");
    free(out1);
    free(out2);
    free(err);
    free(bench);
}

// Under --tp the route table users see and set is rank 0's: a chain round is counted there, and spec_verify=tree
// (whose ops run per sequence, not per rank yet) is refused by name, never run as a chain while printed as a tree.
TEST(tp_spec_verify_route_is_rank0s) {
    const char *F = "tests/data/fixtures/qwen35_dense_tied", *D = "tests/data/dflash/qwen35_dense_tied_b8";
    char *out = NULL, *cmd = fd_sprintf("%s generate %s --ids 1,2,3 -n 8 --tp 2 --draft %s --stats 2>&1", test_bin(), F, D);
    const char *row = NULL;
    EXPECT(test_run(cmd, &out) == 0 && out && (row = strstr(out, "spec_verify    selected chain")) &&
               strncmp(strstr(row, "selected chain") + 14, "     chain 0 / 0", 16),
           "the chain rounds are not counted in the table shown: %s", out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("%s generate %s --ids 1,2,3 -n 8 --tp 2 --draft %s --route spec_verify=tree 2>&1", test_bin(), F, D);
    EXPECT(test_run(cmd, &out) != 0 && out && strstr(out, "spec_verify=tree does not run under --tp"), "%s",
           out ? out : "");
    free(out), free(cmd);
}

// An explicit --tp 1 runs the group path (a one-rank group, its all-reduce the identity, the leader's argmax
// combine): logits bitwise the plain engine's on every fixture, greedy ids identical, DFlash included.
TEST(tp1_group_bitwise_plain) {
    const char *k[] = {"qwen35_dense_tied", "qwen3_next_moe", "qwen35_moe", "fp8_qwen35_dense"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        fixture fx;
        ASSERT(fixture_load(k[i], &fx) == 0, "%s", fd_error_msg());
        tp_rig plain, one;
        ASSERT(rig_open(&plain, fx.dir, NULL, 0, 1) == 0, "%s", fd_error_msg());
        ASSERT(rig_open_as(&one, fx.dir, NULL, 0, 1, 1) == 0, "%s", fd_error_msg());
        EXPECT(one.set.tp == 1 && one.bes[0]->all_reduce, "%s: no one-rank group", k[i]);
        const int V = plain.full.cfg.vocab_size, n = fx.n_ids, steps = 6;
        const size_t cnt = (size_t)(n + steps) * V;
        float *lp = malloc(sizeof(float) * cnt), *lo = malloc(sizeof(float) * cnt);
        int32_t gp[8], go[8];
        run_logits(&plain, fx.ids, n, 7, steps, lp, gp);
        run_logits(&one, fx.ids, n, 7, steps, lo, go);
        EXPECT(!memcmp(lp, lo, sizeof(float) * cnt), "%s: --tp 1 logits are not the plain engine's bitwise", k[i]);
        EXPECT(!memcmp(gp, go, sizeof(int32_t) * steps), "%s: --tp 1 greedy ids differ", k[i]);
        int32_t *want = malloc(sizeof(int32_t) * (size_t)fx.n_greedy), *got = malloc(sizeof(int32_t) * (size_t)fx.n_greedy);
        fd_engine ep, eo;
        ASSERT(rig_engine(&plain, &ep, 5, n + fx.n_greedy + 1) == 0 && rig_engine(&one, &eo, 5, n + fx.n_greedy + 1) == 0,
               "%s", fd_error_msg());
        ASSERT(engine_generate_greedy(&ep, fx.ids, n, 5, fx.n_greedy, want) == 0, "%s", fd_error_msg());
        ASSERT(engine_generate_greedy(&eo, fx.ids, n, 5, fx.n_greedy, got) == 0, "%s", fd_error_msg());
        EXPECT(!memcmp(want, got, sizeof(int32_t) * (size_t)fx.n_greedy), "%s: --tp 1 engine_generate_greedy differs", k[i]);
        engine_free(&ep);
        engine_free(&eo);
        free(want), free(got), free(lp), free(lo);
        rig_close(&one);
        rig_close(&plain);
        fixture_free(&fx);
    }
    // DFlash: the one-rank group's greedy ids are the plain engine's
    const struct {
        const char *drafter, *target;
    } d[] = {{"qwen35_dense_tied_b8", "qwen35_dense_tied"}, {"qwen3_next_moe_b4", "qwen3_next_moe"}};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        fixture fx;
        ASSERT(fixture_load(d[i].target, &fx) == 0, "%s", fd_error_msg());
        int32_t *out[2];
        for (int g = 0; g < 2; g++) {
            tp_rig r;
            ASSERT(rig_open_as(&r, fx.dir, NULL, 0, 1, g) == 0, "%s", fd_error_msg());
            fd_drafter dr;
            char *dir = fd_sprintf("tests/data/dflash/%s", d[i].drafter);
            ASSERT(drafter_load(dir, &r.full, &dr) == 0, "%s", fd_error_msg());
            free(dir);
            drafter_upload(&dr, r.bes[0]);
            fd_engine e;
            ASSERT(rig_engine(&r, &e, 64, fx.n_ids + 64) == 0, "%s", fd_error_msg());
            fd_dflash s;
            ASSERT(dflash_init(&s, &e, &dr, 0) == 0, "%s", fd_error_msg());
            out[g] = calloc((size_t)fx.n_greedy, sizeof(int32_t));
            ASSERT(dflash_generate(&s, fx.ids, fx.n_ids, 64, fx.n_greedy, NULL, out[g]) == 0, "%s", fd_error_msg());
            EXPECT(s.st.rounds >= 1);
            dflash_free(&s);
            engine_free(&e);
            drafter_release(&dr, r.bes[0]);
            drafter_free(&dr);
            rig_close(&r);
        }
        EXPECT(!memcmp(out[0], out[1], sizeof(int32_t) * (size_t)fx.n_greedy), "%s: DFlash ids at --tp 1 differ from plain",
               d[i].drafter);
        free(out[0]), free(out[1]);
        fixture_free(&fx);
    }
}

// The agreement at start: --tp 1 and --tp 2 say the ranks agree; a disagreement injected on rank 1 refuses to
// start (exit 2) with the table of every rank and the field named.
TEST(tp_agreement_refuses_a_disagreeing_rank) {
    const char *F = "tests/data/fixtures/qwen3_next_moe";
    char *out = NULL, *cmd = fd_sprintf("%s run %s --ids 1,2,3 -n 2 --tp 1 2>&1", test_bin(), F);
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "tensor parallelism: 1 rank, one host thread each; the ranks agree"),
           "%s", out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("%s run %s --ids 1,2,3 -n 2 --tp 2 2>&1", test_bin(), F);
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "2 ranks, one host thread each; the ranks agree"), "%s",
           out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("FD_TP_TEST_DISAGREE=1 %s run %s --ids 1,2,3 -n 2 --tp 2 2>&1", test_bin(), F);
    EXPECT(test_run(cmd, &out) == 2 && out && strstr(out, "tensor-parallel ranks (2): DISAGREE on weights\n") &&
               strstr(out, "  rank 0: build ") && strstr(out, "  rank 1: build ") && strstr(out, "| libraries cpu |") &&
               strstr(out, "refusing to start") && !strstr(out, "generated ids"),
           "%s", out ? out : "");
    free(out), free(cmd);
}

// check --tp 2: the rank agreement and the group's all-reduce are screens of the one table; a disagreement
// injected on rank 1 fails the agreement screen by name (exit 1) and prints the ranks' table.
TEST(tp_check_ranks_screens) {
    char *out = NULL, *cmd = fd_sprintf("%s check --tp 2 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "0 failed") && strstr(out, "rank agreement") &&
               strstr(out, "all_reduce             2 ranks x 4099 act"),
           "%s", out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("FD_TP_TEST_DISAGREE=1 %s check --tp 2 2>&1", test_bin());
    const char *row = NULL;
    EXPECT(test_run(cmd, &out) == 1 && out && (row = strstr(out, "rank agreement")) && strstr(row, "FAIL") &&
               strstr(row, "FAIL") < strchr(row, '\n') && strstr(out, "DISAGREE on routes") && strstr(out, "1 failed"),
           "%s", out ? out : "");
    free(out), free(cmd);
    cmd = fd_sprintf("FD_CHECK_INJECT=all_reduce %s check --tp 2 2>&1", test_bin());
    EXPECT(test_run(cmd, &out) == 1 && out && (row = strstr(out, "all_reduce ")) && strstr(row, "FAIL") &&
               strstr(row, "FAIL") < strchr(row, '\n'),
           "%s", out ? out : "");
    free(out), free(cmd);
}
