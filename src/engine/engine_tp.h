// Tensor parallelism in one process (issue 17): a group-leader engine drives one engine per rank, each on its own
// backend and shard of the model (model_shard), one host thread per rank per forward. The ranks' decoders meet in
// the backend's all_reduce after every mixer and FFN (model/decoder.c); the leader keeps no cache of its own, only
// the sequence's position (every rank follows it), and combines the vocabulary-parallel LM head's outputs:
//   logits    every rank writes its vocabulary columns of the caller's [rows, V] rows (a gather: the caller asked
//             for the whole row);
//   greedy    every rank's argmax of its slice and that logit (4 + 4 bytes a row), then the largest over the ranks
//             in rank order (ties: the lowest id, as engine_argmax) — no logits row is gathered; sampled rows
//             whose temperature is 0 (greedy requests in a server batch) take this path too;
//   sampling  no logits row is gathered either (tp_sample.h): every rank keeps its slice of the rows on its backend
//             and the leader asks each for small summaries per row — its best (id, logit) pairs through topk_rows
//             (K + 1 of them for top-k, 64 and more while needed for top-p alone, 1 otherwise: 8 bytes a pair) and
//             its sums of the softmax terms chained over the ranks in order through softmax_scan_rows (8 bytes a
//             sum, two sums a row, plus one crossing scan inside one rank for rows with neither top-k nor top-p) —
//             and draws with sample_row's own arithmetic: the ids of tp 1 (tp_sample.h says where top-p alone can
//             differ by rounding). A row the candidates cannot settle (a nucleus wider than 256 tokens of a rank,
//             top-k ties past 255) gathers its own [V] row to the host and is sampled there by sample_row.
// A one-rank group (an explicit --tp 1) holds the whole vocabulary: its rank takes the caller's outputs as a plain
// engine does (no gather, no combine), so it costs what the plain engine costs beyond the one-rank all-reduces.
// Every engine entry point takes a leader where it takes an engine, except the one-engine snapshots
// (engine_state.h: es_geom_init, es_state_*, es_kv_*), which take a rank (engine_tp_rank); es_snap_* and the prefix
// cache take a leader and keep one buffer per rank, each in that rank's backend memory. Sequences share KV pages
// through one pool per rank (the server's slots: fd_engine_opts.rank_pools), never through one pool for all ranks
// (their shards' KV heads differ).
#ifndef FD_ENGINE_TP_H
#define FD_ENGINE_TP_H
#include "engine/engine.h"

#define FD_TP_MAX 8

// The shards and backends of a group: bes[r] runs shards[r]. bes[0] is the one the full model is uploaded to.
typedef struct {
    int tp;
    fd_model shards[FD_TP_MAX];
    fd_backend *bes[FD_TP_MAX];
} fd_tp_set;

// Shards `full` (tp 1, uploaded to bes[0]) over tp ranks (1..FD_TP_MAX; plan_init's refusals), joins bes[0..tp) into
// one group (be->group_join: backends without one are refused) and uploads shard r to bes[r]. The backends stay the
// caller's. 0, or -1 with fd_error set and nothing kept.
int tp_set_init(fd_tp_set *t, const fd_model *full, fd_backend *const *bes, int tp);
void tp_set_free(fd_tp_set *t); // releases and frees the shards (before the backends are destroyed)

// ---- opening a group from a command's settings (tp_group.c: the model commands and the server share it) ----
// The backend `name` ("cpu" | "cuda") for rank `rank` of a group (cuda: device rank; 0 outside a group). NULL with
// fd_error set when this build has no such backend.
fd_backend *tp_backend_create(const char *name, int threads, int rank);
// -1 with fd_error naming both numbers when a cuda group of tp ranks needs more devices than are visible, else 0.
int tp_check_devices(const char *name, int tp);
// A group of tp ranks (1 included: a one-rank group) over be0, rank 0, where `full` is uploaded: a backend per
// further rank made as be0 was (name, threads), the shards (plan_init's refusals name the config field) and the
// group (tp_set_init). Unless keep_full (a drafter reads the full model's embedding and LM head on be0), the full
// model's copy on be0 is released: beside rank 0's shard it would be a second copy of every weight (the 27B at
// --tp 1: ~54 GB). 0, or -1 with fd_error set and nothing kept.
int tp_group_open(fd_tp_set *t, fd_model *full, fd_backend *be0, const char *name, int threads, int tp, int keep_full);
// tp_set_free, then the backends tp_group_open made (ranks 1..; be0 stays the caller's). No-op on an empty set.
void tp_group_close(fd_tp_set *t);

// A leader over the ranks of t for the sequences of `full` (t's source); opt as engine_init, except the pool:
// opt->pool must be NULL, and rank r's engine takes opt->rank_pools[r] when rank_pools is set (shared by the
// leaders of one set: pools made with kv_pool_init on t->bes[r] for t->shards[r].plan), else a pool of its own.
// e->be is t->bes[0] (where a drafter runs; e->taps are rank 0's).
int engine_init_tp(fd_engine *e, fd_model *full, const fd_tp_set *t, const fd_engine_opts *opt);
// Ranks of e (1 for a plain engine) and rank r's engine (e itself for a plain engine).
int engine_tp_size(const fd_engine *e);
// Gives every rank the leader's (rank 0's) route selections now, as each forward does (a no-op on a plain engine):
// the agreement at start (tp_agree.h) compares what the ranks will run.
void engine_tp_sync_routes(fd_engine *e);
fd_engine *engine_tp_rank(fd_engine *e, int r);

// ---- between engine.c and engine_tp.c ----
// Where the outputs of rows [first, n) of a forward go (engine.c forward_rows): host logits [rows, V] (a rank of a
// group writes its vocabulary columns), or one id per row picked on the backend — sampled with params[r] and
// uniforms[r] (sample_rows), or the argmax (argmax_rows) when params is NULL; with `best` set (a rank of a group)
// the argmax is of the rank's slice, its id made global, and best[r] gets its logit. All NULL: nothing.
// keep_dev (a rank of a group whose rows are sampled): the rank's logits of the rows stay on its backend, [rows,
// Vl], for the leader's combine (tp_sample.h); e->logits_dev itself when the rows fit one chunk of the head.
typedef struct {
    float *logits;
    int32_t *ids;
    const fd_sample_params *params;
    const double *uniforms;
    float *best;
    float *keep_dev;
} engine_sink;
#define ENGINE_LOGIT_ROWS 64 // rows of logits a forward's LM head computes at a time (e->logits_dev)
// The forward of one engine (engine.c); a leader's forward_rows calls engine_tp_forward instead.
void engine_forward_rows(fd_engine *e, const int32_t *ids, int n, fd_engine *const *seqs, int n_segs,
                         const engine_sink *sink, int first);
void engine_tp_forward(fd_engine *e, const int32_t *ids, int n, fd_engine *const *seqs, int n_segs,
                       const engine_sink *sink, int first);
// The state entry points' rank loops (engine.c calls them for a leader).
void engine_tp_free(fd_engine *e);
int engine_tp_reserve(fd_engine *e, int64_t positions);
void engine_tp_reset(fd_engine *e);
int engine_tp_set_taps(fd_engine *e, const int *layers, int n);
int engine_tp_enable_slots(fd_engine *e, int block);
void engine_tp_commit(fd_engine *e, int64_t n_past_before_verify, int keep);
#endif
