// Recorded forwards (see engine_graphs.h).
#include "engine/engine_graphs.h"

#include <stdlib.h>
#include <string.h>

#include "engine/engine_tp.h"
#include "engine/routes.h"

// Counters a forward's host code bumps: every route's calls and tokens per value, and the GDN forms.
typedef struct {
    int64_t calls[FD_MAX_ROUTES][FD_ROUTE_MAX_VALUES], tokens[FD_MAX_ROUTES][FD_ROUTE_MAX_VALUES];
    fd_route_count chunked, serial;
} counters;

typedef struct {
    void *graph;            // NULL until recorded
    uint64_t gen;           // backend graph generation at the last call of this shape
    int seen;               // eager runs since the last change: recording starts at the second call
    int failures;           // discarded recordings; after two the shape stays eager
    int sel[FD_MAX_ROUTES]; // every route's selected value at the last call (a graph bakes in the kernels chosen)
    counters counted;       // what one run of the recorded ops counts
} graph_slot;

#define SLOTS (FD_GRAPH_MAX_N * 2 * 3)
struct fd_engine_graphs {
    graph_slot slot[SLOTS];
};

static void counters_read(fd_engine *e, counters *c) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n; i++)
        for (int v = 0; v < FD_ROUTE_MAX_VALUES; v++)
            c->calls[i][v] = r[i]->calls[v], c->tokens[i][v] = r[i]->tokens[v];
    c->chunked = e->gdn_chunked;
    c->serial = e->gdn_serial;
}

// sign +1: add c to the engine's counters; -1: subtract it.
static void counters_apply(fd_engine *e, const counters *c, int sign) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    for (int i = 0; i < n; i++)
        for (int v = 0; v < FD_ROUTE_MAX_VALUES; v++) {
            r[i]->calls[v] += sign * c->calls[i][v];
            r[i]->tokens[v] += sign * c->tokens[i][v];
        }
    e->gdn_chunked.calls += sign * c->chunked.calls;
    e->gdn_chunked.tokens += sign * c->chunked.tokens;
    e->gdn_serial.calls += sign * c->serial.calls;
    e->gdn_serial.tokens += sign * c->serial.tokens;
}

// after - before, into d
static void counters_delta(const counters *after, const counters *before, counters *d) {
    for (int i = 0; i < FD_MAX_ROUTES; i++)
        for (int v = 0; v < FD_ROUTE_MAX_VALUES; v++) {
            d->calls[i][v] = after->calls[i][v] - before->calls[i][v];
            d->tokens[i][v] = after->tokens[i][v] - before->tokens[i][v];
        }
    d->chunked.calls = after->chunked.calls - before->chunked.calls;
    d->chunked.tokens = after->chunked.tokens - before->chunked.tokens;
    d->serial.calls = after->serial.calls - before->serial.calls;
    d->serial.tokens = after->serial.tokens - before->serial.tokens;
}

// The selected value of every route; returns 1 when it differs from sel (then updated).
static int routes_changed(fd_engine *e, int *sel) {
    fd_route *r[FD_MAX_ROUTES];
    const int n = routes_list(e, r);
    int changed = 0;
    for (int i = 0; i < n; i++) {
        changed |= sel[i] != *r[i]->sel;
        sel[i] = *r[i]->sel;
    }
    return changed;
}

void engine_graphs_run(fd_engine *e, int n, int use_slots, int head, void (*body)(void *ctx), void *ctx) {
    fd_backend *be = e->be;
    FD_CHECK(n >= 1 && n <= FD_GRAPH_MAX_N && head >= 0 && head <= 2, "graph of %d rows, head %d", n, head);
    if (!e->graphs) e->graphs = fd_calloc(1, sizeof *e->graphs);
    graph_slot *s = &e->graphs->slot[((n - 1) * 2 + (use_slots ? 1 : 0)) * 3 + head];
    // A buffer it points at was reallocated, or a route now selects other kernels: record again, after one
    // eager run (the new buffers or kernels may need scratch of other sizes, which a recording cannot grow).
    const uint64_t gen = be->graph_generation(be);
    const int moved = routes_changed(e, s->sel) | (s->gen != gen);
    s->gen = gen;
    if (moved) {
        if (s->graph) {
            be->graph_free(be, s->graph);
            s->graph = NULL;
            e->graph_stats.stale++;
        }
        s->seen = 0;
    }
    if (s->graph) {
        be->graph_launch(be, s->graph);
        counters_apply(e, &s->counted, +1);
        e->graph_stats.replayed++;
        return;
    }
    // The first call runs eagerly so every scratch buffer it needs reaches its size before a recording.
    if (s->seen < 1 || s->failures >= 2 || be->graph_begin(be)) {
        body(ctx);
        s->seen++;
        e->graph_stats.eager++;
        return;
    }
    counters before, after;
    counters_read(e, &before);
    body(ctx); // recorded, not run
    void *g = be->graph_end(be);
    counters_read(e, &after);
    counters_delta(&after, &before, &s->counted);
    if (!g) { // nothing of the recording ran: take back its counts and run the ops for real
        counters_apply(e, &s->counted, -1);
        memset(&s->counted, 0, sizeof s->counted);
        s->failures++;
        e->graph_stats.failed++;
        body(ctx);
        return;
    }
    s->graph = g;
    be->graph_launch(be, g);
    e->graph_stats.recorded++;
}

void engine_graphs_drop(fd_engine *e) {
    if (!e->graphs) return;
    for (int i = 0; i < SLOTS; i++) {
        graph_slot *s = &e->graphs->slot[i];
        if (s->graph) e->be->graph_free(e->be, s->graph);
        memset(s, 0, sizeof *s);
    }
}

void engine_graphs_free(fd_engine *e) {
    engine_graphs_drop(e);
    free(e->graphs);
    e->graphs = NULL;
}

void engine_graphs_print(const fd_engine *leader, FILE *f) {
    // under --tp the ranks' engines record and replay (rank 0's counts stand for all: every rank runs the same steps)
    const fd_engine *e = engine_tp_rank((fd_engine *)leader, 0);
    const fd_route *r = &e->routes[FD_ROUTE_GRAPHS];
    const char *sel = r->values[*r->sel];
    const fd_graph_stats *g = &e->graph_stats;
    fprintf(f, "graphs: route %s%s; %lld replays, %lld recordings, %lld discarded, %lld stale, %lld eager (eligible)\n",
            sel, !strcmp(sel, "on") && !e->graphs_capable ? " (unused: MoE layers)" : "", (long long)g->replayed,
            (long long)g->recorded, (long long)g->failed, (long long)g->stale, (long long)g->eager);
}
