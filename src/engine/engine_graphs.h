// Recorded forwards (route graphs): a forward of at most FD_GRAPH_MAX_N rows of one sequence runs its ops once
// eagerly, is recorded on its second call (backend graph_begin / graph_end) and from then on is replayed as one
// graph launch. The cache is keyed by the forward's shape: rows n, verify state slots on/off, and which LM-head rows
// it computes; everything that varies between steps of one shape (position, ids, caches, states) lives in backend
// memory that the replayed kernels read when they run.
//
// Route hit counters: a replay runs no host code, so the counts a recording made (routes, GDN forms) are stored
// with the graph and added again on every replay; routes_verify therefore sees the same counts as an eager run.
// Stale graphs: the backend's graph_generation changes when memory a graph may reference is reallocated (scratch
// growth, weight release), and a graph holds the kernels its routes chose: on either change it is freed, the shape
// runs eagerly once more and is then recorded again. The engine's own buffers change only in engine_set_taps /
// engine_enable_slots, which drop every graph.
#ifndef FD_ENGINE_GRAPHS_H
#define FD_ENGINE_GRAPHS_H
#include <stdio.h>

#include "engine/engine.h"

// LM-head rows a forward computes into logits_dev: none, the last row, every row.
enum { FD_HEAD_NONE = 0, FD_HEAD_LAST = 1, FD_HEAD_ALL = 2 };

// Runs body(ctx) (the forward's ops) for a forward of this shape: replays its graph, records it, or runs it eagerly.
// Only for eligible forwards (engine_graphs_on, one sequence, n <= FD_GRAPH_MAX_N).
void engine_graphs_run(fd_engine *e, int n, int use_slots, int head, void (*body)(void *ctx), void *ctx);
// Frees every recorded graph (the engine's buffers they point at are about to change).
void engine_graphs_drop(fd_engine *e);
void engine_graphs_free(fd_engine *e);
// One line: "graphs: route R; N replays, N recordings, ..." (bench and generate --stats).
void engine_graphs_print(const fd_engine *e, FILE *f);
#endif
