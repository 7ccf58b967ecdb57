// Whole-model checks against HF transformers fp32 on every fixture (CPU backend): logits for every prompt
// position, greedy continuation, chunked-prefill budgets, GDN routes.
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/routes.h"
#include "fixture.h"
#include "test.h"

typedef struct {
    fd_model m;
    fd_backend *be;
    fd_engine e;
} loaded;

static fd_backend *cpu(void) {
    static fd_backend *be;
    if (!be) be = fd_backend_cpu_create(0);
    return be;
}

static int open_model(loaded *L, const char *dir, int budget, fd_gdn_route route, int64_t cap) {
    memset(L, 0, sizeof *L);
    if (model_load(dir, &L->m)) return -1;
    L->be = cpu();
    model_upload(&L->m, L->be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = budget;
    o.capacity = cap;
    o.gdn_prefill = route;
    return engine_init(&L->e, &L->m, L->be, &o);
}

static void close_model(loaded *L) {
    engine_free(&L->e);
    model_free(&L->m);
}

TEST(models_logits_match_hf_fp32) {
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        loaded L;
        ASSERT(open_model(&L, fx.dir, 512, FD_GDN_CHUNKED, 1024) == 0, "%s: %s", fx.dir, fd_error_msg());
        EXPECT(L.m.cfg.vocab_size == fx.vocab);
        float *lg = malloc(sizeof(float) * fx.n_ids * fx.vocab);
        for (int i = 0; i < fx.n_ids * fx.vocab; i++) lg[i] = NAN;
        ASSERT(engine_prefill(&L.e, fx.ids, fx.n_ids, 0, lg, 1) == 0, "%s", fd_error_msg());
        double err = test_rel_l2(lg, fx.logits, (size_t)fx.n_ids * fx.vocab);
        double worst = 0;
        for (int t = 0; t < fx.n_ids; t++) {
            double e = test_rel_l2(lg + (size_t)t * fx.vocab, fx.logits + (size_t)t * fx.vocab, (size_t)fx.vocab);
            if (e > worst) worst = e;
        }
        printf("    %-20s logits rel-L2 %.2e (worst position %.2e)\n", k_all_fixture_names[f], err, worst);
        EXPECT(err <= 1e-4 && worst <= 1e-4, "%s: logits rel-L2 %.3g, worst row %.3g", k_all_fixture_names[f], err,
               worst);
        free(lg);
        close_model(&L);
        fixture_free(&fx);
    }
}

// Greedy ids identical to HF for every prefill budget (1, 7, 64, full) and both GDN prefill routes.
TEST(models_greedy_matches_hf_all_budgets_and_routes) {
    const int budgets[] = {0, 64, 7, 1};
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        for (int r = 0; r < 2; r++)
            for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
                if (r == 1 && budgets[b] != 0) continue; // serial route: one budget is enough
                loaded L;
                const int budget = budgets[b] ? budgets[b] : fx.n_ids;
                ASSERT(open_model(&L, fx.dir, budget, (fd_gdn_route)r, fx.n_ids + fx.n_greedy + 1) == 0, "%s",
                       fd_error_msg());
                int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
                ASSERT(engine_generate_greedy(&L.e, fx.ids, fx.n_ids, budget, fx.n_greedy, out) == 0, "%s",
                       fd_error_msg());
                int first_diff = -1;
                for (int i = 0; i < fx.n_greedy && first_diff < 0; i++)
                    if (out[i] != fx.greedy[i]) first_diff = i;
                EXPECT(first_diff < 0, "%s budget %d route %s: greedy differs from HF at new token %d (%d vs %d)",
                       k_all_fixture_names[f], budget, r ? "serial" : "chunked", first_diff,
                       first_diff >= 0 ? out[first_diff] : 0, first_diff >= 0 ? fx.greedy[first_diff] : 0);
                free(out);
                close_model(&L);
            }
        fixture_free(&fx);
    }
}

// The serial and chunked GDN routes, and chunked prefill, agree on logits (not just argmax).
TEST(models_routes_and_budgets_agree_on_logits) {
    for (int f = 0; k_all_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_all_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        const size_t n = (size_t)fx.n_ids * fx.vocab;
        float *a = malloc(n * 4), *b = malloc(n * 4);
        loaded L;
        ASSERT(open_model(&L, fx.dir, fx.n_ids, FD_GDN_CHUNKED, fx.n_ids) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&L.e, fx.ids, fx.n_ids, 0, a, 1) == 0, "%s", fd_error_msg());
        close_model(&L);
        ASSERT(open_model(&L, fx.dir, fx.n_ids, FD_GDN_SERIAL, fx.n_ids) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&L.e, fx.ids, fx.n_ids, 0, b, 1) == 0, "%s", fd_error_msg());
        close_model(&L);
        double e1 = test_rel_l2(a, b, n);
        EXPECT(e1 <= 1e-5, "%s: chunked vs serial GDN logits rel-L2 %.3g", k_all_fixture_names[f], e1);
        ASSERT(open_model(&L, fx.dir, 7, FD_GDN_CHUNKED, fx.n_ids) == 0, "%s", fd_error_msg());
        ASSERT(engine_prefill(&L.e, fx.ids, fx.n_ids, 7, b, 1) == 0, "%s", fd_error_msg());
        close_model(&L);
        double e2 = test_rel_l2(b, a, n);
        EXPECT(e2 <= 1e-5, "%s: prefill in chunks of 7 vs one shot: logits rel-L2 %.3g", k_all_fixture_names[f], e2);
        printf("    %-20s chunked vs serial %.2e, budget 7 vs full %.2e\n", k_all_fixture_names[f], e1, e2);
        free(a);
        free(b);
        fixture_free(&fx);
    }
}

// The route table catches a forward that ran something other than the selected route.
TEST(models_route_verify_catches_a_switch) {
    fixture fx;
    ASSERT(fixture_load("qwen3_next_moe", &fx) == 0, "%s", fd_error_msg());
    loaded L;
    ASSERT(open_model(&L, fx.dir, 64, FD_GDN_CHUNKED, fx.n_ids + 4) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&L.e, fx.ids, 64, 32, NULL, 0) == 0);
    EXPECT(routes_verify(&L.e) == 0, "%s", fd_error_msg());
    fd_route *r = routes_find(&L.e, "gdn_prefill");
    ASSERT(r && r->calls[0] == 2 && r->tokens[0] == 64 && r->calls[1] == 0, "chunked calls %lld",
           r ? (long long)r->calls[0] : -1LL);
    ASSERT(routes_set(&L.e, "gdn_prefill=serial") == 0);
    ASSERT(engine_prefill(&L.e, fx.ids + 64, 32, 32, NULL, 0) == 0); // ran serial: now both values have hits
    EXPECT(routes_verify(&L.e) != 0 && strstr(fd_error_msg(), "gdn_prefill"), "%s", fd_error_msg());
    close_model(&L);
    fixture_free(&fx);
}

// A route set to "auto" (FD_ROUTE_AUTO; the cuda backend's gemm_act) picks a value per call and counts the call
// under the value it ran: routes_verify accepts any counted value then, and still refuses them once a fixed
// value is selected. Checked on a stand-in route swapped into the CPU backend's table.
TEST(models_route_verify_accepts_auto) {
    fixture fx;
    ASSERT(fixture_load("qwen3_next_moe", &fx) == 0, "%s", fd_error_msg());
    loaded L;
    ASSERT(open_model(&L, fx.dir, 64, FD_GDN_CHUNKED, fx.n_ids + 4) == 0, "%s", fd_error_msg());
    int sel = 2;
    fd_route stand_in = {.name = "stand_in", .values = {"lo", "hi", FD_ROUTE_AUTO, NULL}, .sel = &sel};
    stand_in.calls[0] = 3, stand_in.calls[1] = 2;
    fd_route *saved = L.e.be->routes;
    const int saved_n = L.e.be->n_routes;
    L.e.be->routes = &stand_in, L.e.be->n_routes = 1;
    EXPECT(routes_verify(&L.e) == 0, "auto with hits on both values: %s", fd_error_msg());
    EXPECT(routes_set(&L.e, "stand_in=lo") == 0, "%s", fd_error_msg());
    EXPECT(routes_verify(&L.e) != 0 && strstr(fd_error_msg(), "stand_in") && strstr(fd_error_msg(), "'hi'"),
           "lo selected, 2 calls ran hi: %s", fd_error_msg());
    EXPECT(routes_set(&L.e, "stand_in=auto") == 0 && sel == 2, "%s", fd_error_msg());
    L.e.be->routes = saved, L.e.be->n_routes = saved_n;
    close_model(&L);
    fixture_free(&fx);
}

// FP8 E4M3 KV cache (route kv=e4m3): greedy ids must not change on any fixture; the logit error against HF
// is reported and bounded (e4m3 keeps 3 mantissa bits, every (token, head) row scaled to its own max).
TEST(models_kv_e4m3_keeps_greedy) {
    fd_backend *be = fd_backend_cpu_create(0);
    const char *spec = "kv=e4m3";
    ASSERT(routes_backend_preset(be, &spec, 1) == 0, "%s", fd_error_msg());
    for (int f = 0; k_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        fd_model m;
        ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
        model_upload(&m, be);
        fd_engine_opts o;
        engine_default_opts(&o);
        o.capacity = fx.n_ids + fx.n_greedy;
        o.max_batch = 64;
        fd_engine e;
        ASSERT(engine_init(&e, &m, be, &o) == 0);
        float *lg = malloc(sizeof(float) * fx.n_ids * fx.vocab);
        ASSERT(engine_prefill(&e, fx.ids, fx.n_ids, 64, lg, 1) == 0);
        const double err = test_rel_l2(lg, fx.logits, (size_t)fx.n_ids * fx.vocab);
        engine_reset(&e);
        int32_t *out = calloc((size_t)fx.n_greedy, sizeof *out);
        ASSERT(engine_generate_greedy(&e, fx.ids, fx.n_ids, 64, fx.n_greedy, out) == 0);
        int same = 0;
        while (same < fx.n_greedy && out[same] == fx.greedy[same]) same++;
        printf("    %-20s kv=e4m3: logits rel-L2 vs HF %.2e, greedy %d/%d identical\n", k_fixture_names[f], err, same,
               fx.n_greedy);
        EXPECT(err < 5e-2, "%s: e4m3 KV logits rel-L2 %.3g", k_fixture_names[f], err);
        EXPECT(same == fx.n_greedy, "%s: e4m3 KV changes greedy at token %d", k_fixture_names[f], same);
        free(out);
        free(lg);
        engine_free(&e);
        model_free(&m);
        fixture_free(&fx);
    }
    const char *back = "kv=f32"; // the layout is fixed once caches exist
    EXPECT(routes_backend_preset(be, &back, 1) != 0 && strstr(fd_error_msg(), "fixed"), "%s", fd_error_msg());
    be->destroy(be);
}

// A batched decode step over several sequences gives each sequence exactly the logits of its own decode step
// (the GEMM rows are independent; state, cache and position stay per sequence).
TEST(models_decode_batch_equals_single) {
    for (int f = 0; k_fixture_names[f]; f++) {
        fixture fx;
        ASSERT(fixture_load(k_fixture_names[f], &fx) == 0, "%s", fd_error_msg());
        enum { S = 3, STEPS = 6 };
        const int lens[S] = {50, 97, 130};
        fd_model m; // one model shared by every sequence, as in the server
        ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
        model_upload(&m, cpu());
        fd_engine_opts o;
        engine_default_opts(&o);
        o.max_batch = 64;
        o.capacity = 256;
        fd_engine one[S], many[S], *batch[S];
        const int V = fx.vocab;
        float *la = malloc(sizeof(float) * S * V), *lb = malloc(sizeof(float) * S * V);
        int32_t tok[S];
        for (int i = 0; i < S; i++) {
            ASSERT(engine_init(&one[i], &m, cpu(), &o) == 0 && engine_init(&many[i], &m, cpu(), &o) == 0);
            const int32_t *p = fx.ids + i * 20; // different prompts
            ASSERT(engine_prefill(&one[i], p, lens[i], 64, la + i * V, 0) == 0);
            ASSERT(engine_prefill(&many[i], p, lens[i], 64, NULL, 0) == 0);
            tok[i] = engine_argmax(la + i * V, V);
            batch[i] = &many[i];
        }
        double worst = 0;
        for (int step = 0; step < STEPS; step++) {
            for (int i = 0; i < S; i++) ASSERT(engine_forward(&one[i], &tok[i], 1, la + i * V, 0) == 0);
            ASSERT(engine_decode_batch(batch, tok, S, lb) == 0, "%s", fd_error_msg());
            for (int i = 0; i < S; i++) {
                const double e = test_rel_l2(lb + i * V, la + i * V, (size_t)V);
                worst = e > worst ? e : worst;
                tok[i] = engine_argmax(la + i * V, V);
            }
        }
        printf("    %-20s batched decode of %d sequences x %d steps: worst logits rel-L2 %.2e\n", k_fixture_names[f], S,
               STEPS, worst);
        EXPECT(worst <= 1e-6, "%s: batched decode differs (%.3g)", k_fixture_names[f], worst);
        for (int i = 0; i < S; i++) EXPECT(many[i].n_past == lens[i] + STEPS);
        fd_engine *dup[2] = {batch[0], batch[0]}; // the same sequence twice is refused
        int32_t two[2] = {tok[0], tok[0]};
        EXPECT(engine_decode_batch(dup, two, 2, lb) != 0 && strstr(fd_error_msg(), "distinct"), "%s", fd_error_msg());
        for (int i = 0; i < S; i++) {
            engine_free(&one[i]);
            engine_free(&many[i]);
        }
        model_free(&m);
        free(la);
        free(lb);
        fixture_free(&fx);
    }
}
