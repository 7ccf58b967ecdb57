// Route graphs and greedy ids on the CPU backend: the route exists with the single value off (the CPU backend and
// any traced backend record nothing), graphs=on is refused with the route's help, and engine_forward_greedy /
// engine_generate's greedy path give the ids of the host argmax. Device positions (pos_dev) and ids (ids_dev) are
// plain host memory here: the same logits as before, which test_models checks against HF.
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/routes.h"
#include "engine/trace.h"
#include "fixture.h"
#include "test.h"

TEST(graphs_route_is_off_without_recording) {
    fd_backend *be = fd_backend_cpu_create(0);
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = fx.n_ids + 32;
    for (int traced = 0; traced < 2; traced++) {
        fd_backend *b = traced ? trace_wrap(fd_backend_cpu_create(0)) : be;
        fd_engine e;
        ASSERT(engine_init(&e, &m, b, &o) == 0, "%s", fd_error_msg());
        fd_route *r = routes_find(&e, "graphs");
        ASSERT(r, "no route graphs");
        EXPECT(!strcmp(r->values[*r->sel], "off") && !r->values[1], "graphs route values on %s",
               traced ? "a traced backend" : "cpu");
        EXPECT(routes_set(&e, "graphs=on") != 0, "graphs=on accepted without recording support");
        EXPECT(routes_set(&e, "graphs=off") == 0, "%s", fd_error_msg());
        EXPECT(!engine_graphs_on(&e));
        engine_free(&e);
        if (traced) b->destroy(b);
    }
    model_free(&m);
    fixture_free(&fx);
    be->destroy(be);
}

TEST(graphs_greedy_ids_match_host_argmax) {
    fd_backend *be = fd_backend_cpu_create(0);
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    fd_model m;
    ASSERT(model_load(fx.dir, &m) == 0, "%s", fd_error_msg());
    model_upload(&m, be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.max_batch = 64;
    o.capacity = fx.n_ids + fx.n_greedy + 8;
    fd_engine a, b;
    ASSERT(engine_init(&a, &m, be, &o) == 0 && engine_init(&b, &m, be, &o) == 0, "%s", fd_error_msg());
    const int V = m.cfg.vocab_size, n_new = fx.n_greedy < 12 ? fx.n_greedy : 12;
    // engine_generate's greedy path (argmax_rows) against the fixture's HF greedy continuation
    int32_t *out = calloc((size_t)n_new, sizeof *out);
    ASSERT(engine_generate(&a, fx.ids, fx.n_ids, 5, n_new, NULL, out) == 0, "%s", fd_error_msg());
    int same = 0;
    while (same < n_new && out[same] == fx.greedy[same]) same++;
    EXPECT(same == n_new, "greedy differs from HF at token %d", same);
    // engine_forward_greedy over a 4-row block: every row's id is the host argmax of engine_forward's logits row
    engine_reset(&a);
    float *lg = malloc(sizeof(float) * 4 * (size_t)V);
    ASSERT(engine_prefill(&a, fx.ids, fx.n_ids, 0, NULL, 0) == 0, "%s", fd_error_msg());
    ASSERT(engine_prefill(&b, fx.ids, fx.n_ids, 0, NULL, 0) == 0, "%s", fd_error_msg());
    int32_t ids4[4] = {fx.greedy[0], fx.greedy[1], fx.greedy[2], 3}, g4[4];
    ASSERT(engine_forward_greedy(&a, ids4, 4, g4) == 0, "%s", fd_error_msg());
    ASSERT(engine_forward(&b, ids4, 4, lg, 1) == 0, "%s", fd_error_msg());
    for (int r = 0; r < 4; r++)
        EXPECT(g4[r] == engine_argmax(lg + (size_t)r * V, V), "row %d: %d vs %d", r, g4[r],
               engine_argmax(lg + (size_t)r * V, V));
    EXPECT(a.n_past == b.n_past && a.n_past == fx.n_ids + 4);
    free(lg);
    free(out);
    engine_free(&a);
    engine_free(&b);
    model_free(&m);
    fixture_free(&fx);
    be->destroy(be);
}
