// Tensor parallelism in one process (see engine_tp.h).
#include "engine/engine_tp.h"
#include "engine/tp_sample.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct fd_engine_tp {
    int tp;
    fd_engine ranks[FD_TP_MAX];
};

int tp_set_init(fd_tp_set *t, const fd_model *full, fd_backend *const *bes, int tp) {
    memset(t, 0, sizeof *t);
    if (tp < 1 || tp > FD_TP_MAX) return fd_error_set("--tp %d: 1..%d ranks", tp, FD_TP_MAX);
    if (!bes[0]->group_join)
        return fd_error_set("--tp %d: backend %s has no in-process tensor-parallel group", tp, bes[0]->name);
    for (int r = 0; r < tp; r++) {
        if (model_shard(full, r, tp, &t->shards[r])) {
            for (int q = 0; q < r; q++) model_free(&t->shards[q]);
            return -1;
        }
    }
    if (bes[0]->group_join(bes[0], bes, tp)) {
        for (int r = 0; r < tp; r++) model_free(&t->shards[r]);
        return -1;
    }
    for (int r = 0; r < tp; r++) {
        model_upload(&t->shards[r], bes[r]);
        t->bes[r] = bes[r];
    }
    t->tp = tp;
    return 0;
}

void tp_set_free(fd_tp_set *t) {
    for (int r = 0; r < t->tp; r++) {
        model_release(&t->shards[r], t->bes[r]);
        model_free(&t->shards[r]);
    }
    memset(t, 0, sizeof *t);
}

int engine_init_tp(fd_engine *e, fd_model *full, const fd_tp_set *t, const fd_engine_opts *opt) {
    memset(e, 0, sizeof *e);
    if (t->tp < 1) return fd_error_set("tensor-parallel engine over an empty set of ranks");
    if (opt->pool)
        return fd_error_set("a tensor-parallel engine takes a KV pool per rank (rank_pools), not one shared pool");
    struct fd_engine_tp *g = fd_calloc(1, sizeof *g);
    for (int r = 0; r < t->tp; r++) {
        fd_engine_opts ro = *opt;
        ro.pool = opt->rank_pools ? opt->rank_pools[r] : NULL;
        ro.rank_pools = NULL;
        if (engine_init(&g->ranks[r], (fd_model *)&t->shards[r], t->bes[r], &ro)) {
            for (int q = 0; q < r; q++) engine_free(&g->ranks[q]);
            free(g);
            return fd_error_prefix("tensor parallelism, rank %d of %d", r, t->tp);
        }
        g->tp = r + 1;
    }
    e->m = full;
    e->be = t->bes[0];
    e->opt = *opt;
    e->opt.rank_pools = NULL; // the ranks hold them; the caller's array need not outlive this call
    e->tp = g;
    e->pool = g->ranks[0].pool; // for what callers print; the leader holds no pages
    // Rank 0's route table, selections shared (they point into rank 0; the other ranks follow them each forward);
    // its counters stay the ranks' own (engine_tp_rank).
    memcpy(e->routes, g->ranks[0].routes, sizeof e->routes);
    e->graphs_sel = g->ranks[0].graphs_sel;
    for (int i = 0; i < FD_MAX_LAYERS; i++) e->tap_col[i] = -1;
    return 0;
}

int engine_tp_size(const fd_engine *e) { return e->tp ? e->tp->tp : 1; }
fd_engine *engine_tp_rank(fd_engine *e, int r) { return e->tp ? &e->tp->ranks[r] : e; }

void engine_tp_free(fd_engine *e) {
    for (int r = 0; r < e->tp->tp; r++) engine_free(&e->tp->ranks[r]);
    free(e->tp);
    memset(e, 0, sizeof *e);
}

int engine_tp_reserve(fd_engine *e, int64_t positions) {
    // Every rank's pool has the same pages, so they all grant or all refuse.
    for (int r = 0; r < e->tp->tp; r++) FD_TRY(engine_reserve(&e->tp->ranks[r], positions));
    return 0;
}

void engine_tp_reset(fd_engine *e) {
    for (int r = 0; r < e->tp->tp; r++) engine_reset(&e->tp->ranks[r]);
    e->n_past = 0;
    e->prompt_total = 0;
}

int engine_tp_set_taps(fd_engine *e, const int *layers, int n) {
    for (int r = 0; r < e->tp->tp; r++) FD_TRY(engine_set_taps(&e->tp->ranks[r], layers, n));
    const fd_engine *r0 = &e->tp->ranks[0];
    memcpy(e->tap_col, r0->tap_col, sizeof e->tap_col);
    e->n_taps = r0->n_taps;
    e->taps = r0->taps; // the residual stream after each layer is the same on every rank (all-reduced)
    return 0;
}

int engine_tp_enable_slots(fd_engine *e, int block) {
    for (int r = 0; r < e->tp->tp; r++) FD_TRY(engine_enable_slots(&e->tp->ranks[r], block));
    e->spec_block = e->tp->ranks[0].spec_block;
    return 0;
}

void engine_tp_commit(fd_engine *e, int64_t n_past_before_verify, int keep) {
    for (int r = 0; r < e->tp->tp; r++) engine_commit(&e->tp->ranks[r], n_past_before_verify, keep);
    e->n_past = n_past_before_verify + keep;
}

// What a leader's sequence tells its rank engines before a forward: the position (callers may set n_past freely
// between forwards), whether this is a verify, and rank 0's route selections (the route table a leader shows is
// rank 0's: engine/routes.c), so every rank runs what was asked.
static void follow_leader(fd_engine *leader, fd_engine *q) {
    q->n_past = leader->n_past;
    q->use_slots = leader->use_slots;
    const fd_engine *r0 = &leader->tp->ranks[0];
    q->gdn_prefill_sel = r0->gdn_prefill_sel;
    q->gdn_decode_sel = r0->gdn_decode_sel;
    q->graphs_sel = r0->graphs_sel;
    q->gdn_verify_sel = r0->gdn_verify_sel;
    if (q->be != r0->be)
        for (int i = 0; i < q->be->n_routes && i < r0->be->n_routes; i++) *q->be->routes[i].sel = *r0->be->routes[i].sel;
}

void engine_tp_sync_routes(fd_engine *e) {
    if (!e->tp) return;
    for (int r = 0; r < e->tp->tp; r++) follow_leader(e, &e->tp->ranks[r]);
}

typedef struct {
    fd_engine *e;
    const int32_t *ids;
    int n, n_segs, first;
    fd_engine **seqs;
    engine_sink sink;
} rank_job;

static void *rank_main(void *arg) {
    rank_job *j = arg;
    engine_forward_rows(j->e, j->ids, j->n, j->seqs, j->n_segs, &j->sink, j->first);
    return NULL;
}

void engine_tp_forward(fd_engine *e, const int32_t *ids, int n, fd_engine *const *seqs, int n_segs,
                       const engine_sink *sink, int first) {
    const int tp = e->tp->tp, rows = n - first, V = e->m->cfg.vocab_size;
    // Greedy takes each rank's best id and logit; sampling keeps each rank's slice on its backend for tp_sample_rows
    // (engine_tp.h). A one-rank group's slice is the whole vocabulary: its rank takes the caller's sink as it is.
    const int want = tp > 1 && (sink->logits || sink->ids);
    // Rows sampled at temperature 0 are greedy: the server samples every row of a batch, greedy requests' too,
    // and those take the argmax combine (what sample_rows' argmax would pick) rather than the sampling combine.
    int greedy = 1;
    for (int i = 0; sink->params && i < rows; i++) greedy &= !(sink->params[i].temperature > 0);
    const int sampled = want && !sink->logits && !greedy;
    int32_t *rank_ids = want && !sink->logits && greedy ? fd_malloc(sizeof(int32_t) * (size_t)rows * tp) : NULL;
    float *rank_best = rank_ids ? fd_malloc(sizeof(float) * (size_t)rows * tp) : NULL;
    tp_slice slices[FD_TP_MAX];
    float *kept[FD_TP_MAX] = {0}; // a rank's [rows, Vl] beyond one head chunk: its own buffer
    rank_job jobs[FD_TP_MAX];
    fd_engine **rank_seqs = fd_malloc(sizeof(fd_engine *) * (size_t)n_segs * tp);
    for (int r = 0; r < tp; r++) {
        fd_engine **rs = rank_seqs + (size_t)r * n_segs, *q = &e->tp->ranks[r];
        for (int k = 0; k < n_segs; k++) {
            FD_CHECK(seqs[k]->tp && seqs[k]->tp->tp == tp, "batch of tensor-parallel and plain sequences");
            rs[k] = &seqs[k]->tp->ranks[r];
            follow_leader(seqs[k], rs[k]);
        }
        engine_sink s = {0};
        if (tp == 1) s = *sink;
        else if (sink->logits) s.logits = sink->logits;
        else if (sampled) {
            const fd_rank_plan *p = &q->m->plan;
            const int Vl = p->vocab_end - p->vocab_begin;
            if (rows > ENGINE_LOGIT_ROWS) kept[r] = q->be->alloc(q->be, sizeof(float) * (size_t)rows * Vl);
            s.keep_dev = kept[r] ? kept[r] : q->logits_dev;
            slices[r] = (tp_slice){q->be, s.keep_dev, p->vocab_begin, p->vocab_end};
        } else if (rank_ids) {
            s.ids = rank_ids + (size_t)r * rows;
            s.best = rank_best + (size_t)r * rows;
        }
        jobs[r] = (rank_job){q, ids, n, n_segs, first, rs, s};
    }
    pthread_t tid[FD_TP_MAX];
    for (int r = 1; r < tp; r++) FD_CHECK(pthread_create(&tid[r], NULL, rank_main, &jobs[r]) == 0, "pthread_create");
    rank_main(&jobs[0]);
    for (int r = 1; r < tp; r++) pthread_join(tid[r], NULL);
    if (rank_ids)
        for (int i = 0; i < rows; i++) {
            int best = 0; // strictly larger only: the lower rank (the lower ids) keeps a tie
            for (int r = 1; r < tp; r++)
                if (rank_best[(size_t)r * rows + i] > rank_best[(size_t)best * rows + i]) best = r;
            sink->ids[i] = rank_ids[(size_t)best * rows + i];
        }
    if (sampled) tp_sample_rows(slices, tp, rows, V, sink->params, sink->uniforms, sink->ids);
    for (int r = 0; r < tp; r++)
        if (kept[r]) e->tp->ranks[r].be->free(e->tp->ranks[r].be, kept[r]);
    free(rank_ids);
    free(rank_best);
    free(rank_seqs);
}
