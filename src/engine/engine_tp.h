// Tensor parallelism in one process (issue 17): a group-leader engine drives one engine per rank, each on its own
// backend and shard of the model (model_shard), one host thread per rank per forward. The ranks' decoders meet in
// the backend's all_reduce after every mixer and FFN (model/decoder.c); the leader keeps no cache of its own, only
// the sequence's position (every rank follows it), and combines the vocabulary-parallel LM head's outputs:
//   logits    every rank writes its vocabulary columns of the caller's [rows, V] rows (a gather: the caller asked
//             for the whole row);
//   greedy    every rank's argmax of its slice and that logit (4 + 4 bytes a row), then the largest over the ranks
//             in rank order (ties: the lowest id, as engine_argmax) — no logits row is gathered;
//   sampling  not yet without a gather: the rows are gathered to the host and sampled by rank 0's sample_rows.
// A one-rank group (an explicit --tp 1) holds the whole vocabulary: its rank takes the caller's outputs as a plain
// engine does (no gather, no combine), so it costs what the plain engine costs beyond the one-rank all-reduces.
// Every engine entry point takes a leader where it takes an engine, except the KV snapshots (engine_state.h:
// es_kv_save / es_kv_load) and a shared KV pool, which are refused.
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

// A leader over the ranks of t for the sequences of `full` (t's source); opt as engine_init (opt->pool must be
// NULL: every rank has a pool of its own). e->be is t->bes[0] (where a drafter runs; e->taps are rank 0's).
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
typedef struct {
    float *logits;
    int32_t *ids;
    const fd_sample_params *params;
    const double *uniforms;
    float *best;
} engine_sink;
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
