// Engine: sequences, their caches and states, and the forwards over them (prefill, decode, batched decode; the
// verify of a drafted block, its state slots and its commit are engine_verify.c).
// The decoder itself is the model's (model/forward.h): a forward here builds the batch description, picks and
// counts the GDN route, and sends the outputs where the caller wants them.
#include "engine/engine.h"

#include "engine/engine_graphs.h"
#include "engine/engine_tp.h"
#include "engine/routes.h"
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void engine_default_opts(fd_engine_opts *o) {
    o->max_batch = 4096;
    o->capacity = 262144;
    o->gdn_prefill = FD_GDN_CHUNKED;
    o->pool = NULL;
    o->kv_tokens = 0;
    o->rank_pools = NULL;
}

// Logits are computed in blocks of this many rows so a long all-positions request needs no [n, V] buffer
// on the device.

int engine_init(fd_engine *e, fd_model *m, fd_backend *be, const fd_engine_opts *opt) {
    memset(e, 0, sizeof *e);
    e->m = m;
    e->be = be;
    e->opt = *opt;
    const fd_rank_plan *p = &m->plan;
    if (opt->max_batch < 1) return fd_error_set("prefill token budget must be >= 1 (got %d)", opt->max_batch);
    if (opt->capacity < 1) return fd_error_set("context capacity must be >= 1 (got %lld)", (long long)opt->capacity);
    if (opt->rank_pools) return fd_error_set("per-rank KV pools are a tensor-parallel leader's (engine_init_tp)");
    const int64_t B = opt->max_batch;
    fwd_scratch_init(&e->scratch, m, be, opt->max_batch);
    e->logits_dev = be->alloc(be, (size_t)ENGINE_LOGIT_ROWS * (p->vocab_end - p->vocab_begin) * sizeof(float));
    const size_t step_bytes = sizeof(int64_t) + (size_t)B * sizeof(int32_t);
    e->step_dev = be->alloc(be, step_bytes);
    e->pos_dev = (int64_t *)e->step_dev;
    e->ids_dev = (int32_t *)((char *)e->step_dev + sizeof(int64_t));
    e->step_host = fd_calloc(1, step_bytes);
    for (int i = 0; i < FD_MAX_LAYERS; i++) e->tap_col[i] = -1;
    e->gdn_prefill_sel = opt->gdn_prefill == FD_GDN_SERIAL ? 1 : 0;
    e->routes[FD_ROUTE_GDN_PREFILL] = (fd_route){.name = "gdn_prefill",
                                                 .values = {"chunked", "serial"},
                                                 .sel = &e->gdn_prefill_sel,
                                                 .help = "GDN over a prompt chunk: UT/WY chunk-64 form or recurrence"};
    e->routes[FD_ROUTE_GDN_DECODE] = (fd_route){.name = "gdn_decode",
                                                .values = {"serial"},
                                                .sel = &e->gdn_decode_sel,
                                                .help = "GDN for decode steps and verify blocks (per-token states)"};
    e->routes[FD_ROUTE_SPEC_VERIFY] = (fd_route){
        .name = "spec_verify",
        .values = {"chain", "tree"},
        .sel = &e->spec_verify_sel,
        .help = "a DFlash round verifies the drafter's argmax chain, or a best-first tree of its likeliest "
                "continuations under --tree-budget nodes (cpu and cuda; not under --tp)"};
    // replay (the default) where the backend has the read-only core; a tree verify always takes slots (by shape)
    e->gdn_verify_sel = be->gdn_core_readonly ? FD_GDN_VERIFY_REPLAY : FD_GDN_VERIFY_SLOTS;
    if (be->gdn_core_readonly)
        e->routes[FD_ROUTE_GDN_VERIFY] = (fd_route){
            .name = "gdn_verify",
            .values = {"slots", "replay"},
            .sel = &e->gdn_verify_sel,
            .by_shape = "a tree verify takes slots",
            .help = "a chain verify writes every token's GDN state to a slot and the commit copies one, or it "
                    "writes no GDN state and the commit replays the accepted tokens from the kept inputs"};
    else
        e->routes[FD_ROUTE_GDN_VERIFY] = (fd_route){
            .name = "gdn_verify",
            .values = {"slots"},
            .sel = &e->gdn_verify_sel,
            .help = "GDN state of a verify: per-token slots (replay needs the backend's gdn_core_readonly)"};
    // Graphs need the backend's recording entry points (cuda, not under --trace / FD_CUDA_SYNC / FD_CUDA_PROFILE);
    // a MoE layer copies its routing to the host mid-forward, which a recording cannot hold.
    e->graphs_capable = be->graph_begin && be->graph_end && be->graph_launch && be->graph_free &&
                        be->graph_generation && !p->has_moe;
    e->graphs_sel = 0;
    if (be->graph_begin)
        e->routes[FD_ROUTE_GRAPHS] = (fd_route){
            .name = "graphs",
            .values = {"on", "off"},
            .sel = &e->graphs_sel,
            .help = "decode steps and verify blocks (<= 16 rows of one sequence) recorded once as a CUDA graph and "
                    "replayed (MoE models, batched decode and prefill always run op by op, uncounted)"};
    else
        e->routes[FD_ROUTE_GRAPHS] = (fd_route){
            .name = "graphs",
            .values = {"off"},
            .sel = &e->graphs_sel,
            .help = "forwards recorded as CUDA graphs: not on this backend (cpu, or cuda under --trace, "
                    "FD_CUDA_SYNC=1 or FD_CUDA_PROFILE=1, which need every op run as it is issued)"};
    if (opt->pool) {
        FD_CHECK(opt->pool->be == be && opt->pool->num_layers == p->num_layers && opt->pool->Hkv == p->kv_heads &&
                     opt->pool->hd == p->head_dim,
                 "shared KV pool of another model or backend");
        e->pool = opt->pool;
    } else {
        // A lone sequence never uses more than its capacity, so a larger budget is capped there.
        const int64_t tokens = opt->kv_tokens > 0 && opt->kv_tokens < opt->capacity ? opt->kv_tokens : opt->capacity;
        if (kv_pool_init(&e->own_pool, be, p, tokens, 0)) {
            engine_free(e); // keeps the error
            return -1;
        }
        e->pool = &e->own_pool;
    }
    kv_pages_init(&e->pages, e->pool, opt->capacity);
    e->conv_state = fd_calloc((size_t)p->num_layers, sizeof(float *));
    e->gdn_state = fd_calloc((size_t)p->num_layers, sizeof(float *));
    for (int i = 0; i < p->num_layers; i++) {
        if (p->layers[i].kind == FD_LAYER_GDN) {
            e->conv_state[i] = be->alloc(be, (size_t)plan_conv_state_bytes(p));
            e->gdn_state[i] = be->alloc(be, (size_t)plan_gdn_state_bytes(p));
        }
    }
    return 0;
}

void engine_reset(fd_engine *e) {
    if (e->tp) {
        engine_tp_reset(e);
        return;
    }
    const fd_rank_plan *p = &e->m->plan;
    fd_backend *be = e->be;
    for (int i = 0; i < p->num_layers; i++)
        if (p->layers[i].kind == FD_LAYER_GDN) {
            be->zero(be, e->conv_state[i], (size_t)plan_conv_state_bytes(p));
            be->zero(be, e->gdn_state[i], (size_t)plan_gdn_state_bytes(p));
        }
    e->n_past = 0;
    e->prompt_total = 0;
    e->replay_pending = 0;
    kv_pages_release(&e->pages, e->pool);
}

int engine_reserve(fd_engine *e, int64_t positions) {
    if (positions > e->opt.capacity)
        return fd_error_set("sequence of %lld tokens does not fit the context capacity of %lld tokens",
                            (long long)positions, (long long)e->opt.capacity);
    if (e->tp) return engine_tp_reserve(e, positions);
    return kv_pages_reserve(&e->pages, e->pool, positions);
}

fd_kv_view engine_kv_view(const fd_engine *e, int li) {
    FD_CHECK(!e->tp, "KV view of a tensor-parallel leader (its ranks hold the caches)");
    return kv_pages_view(&e->pages, e->pool, li);
}

void engine_free(fd_engine *e) {
    fd_backend *be = e->be;
    if (!be) return;
    if (e->tp) {
        engine_tp_free(e);
        return;
    }
    engine_graphs_free(e); // before the buffers they point at
    const int num_layers = e->m->plan.num_layers;
    if (e->pages.host) kv_pages_release(&e->pages, e->pool); // a shared pool outlives this engine
    kv_pages_free(&e->pages, be);
    if (e->own_pool.be) kv_pool_free(&e->own_pool);
    for (int i = 0; e->conv_state && i < num_layers; i++) {
        if (e->conv_state[i]) be->free(be, e->conv_state[i]);
        if (e->gdn_state[i]) be->free(be, e->gdn_state[i]);
    }
    for (int i = 0; e->gdn_slots && i < num_layers; i++) {
        if (e->gdn_slots[i]) be->free(be, e->gdn_slots[i]);
        if (e->conv_slots[i]) be->free(be, e->conv_slots[i]);
        if (e->gdn_keep[i]) be->free(be, e->gdn_keep[i]);
    }
    free(e->gdn_slots);
    free(e->gdn_keep);
    free(e->conv_slots);
    if (e->tree_parent_dev) be->free(be, e->tree_parent_dev);
    if (e->taps) be->free(be, e->taps);
    free(e->conv_state);
    free(e->gdn_state);
    fwd_scratch_free(&e->scratch, be);
    void *bufs[] = {e->logits_dev, e->step_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    free(e->step_host);
    memset(e, 0, sizeof *e);
}

static fd_kv_view seq_kv_view(const void *seq, int layer) { return engine_kv_view(seq, layer); }

// Decode steps and verify blocks (which record per-token states) take the GDN recurrence (route gdn_decode); prompt
// chunks take the gdn_prefill route.
static int gdn_decode_rows(const fd_engine *q, int n) { return n == 1 || q->use_slots; }

// A chain verify under gdn_verify=replay: the GDN core only reads the state and keeps its inputs (forward.h).
static int verify_replays(const fd_engine *q) {
    return q->use_slots && !q->tree && q->gdn_verify_sel == FD_GDN_VERIFY_REPLAY;
}

// Rows [row0, row0 + n) of a forward for sequence q, as the model's forward reads them.
static fd_fwd_seg seg_of(fd_engine *q, int row0, int n) {
    const int decode = gdn_decode_rows(q, n);
    return (fd_fwd_seg){.row0 = row0,
                        .n = n,
                        .pos = q->n_past,
                        .gdn_route = decode || q->gdn_prefill_sel == 1 ? FD_GDN_SERIAL : FD_GDN_CHUNKED,
                        .conv_state = q->conv_state,
                        .gdn_state = q->gdn_state,
                        .conv_slots = q->use_slots ? q->conv_slots : NULL,
                        .gdn_slots = q->use_slots && !verify_replays(q) ? q->gdn_slots : NULL,
                        .gdn_keep = verify_replays(q) ? q->gdn_keep : NULL,
                        .kv_view = seq_kv_view,
                        .seq = q,
                        .tree = q->tree};
}

static int check_ids(const fd_config *c, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size)
            return fd_error_set("token id %d at position %d is outside the vocabulary [0, %d)", ids[i], i,
                                c->vocab_size);
    return 0;
}

// One forward: the model's batch and the engines whose sequences its segments are (seqs[k] for segment k).
typedef struct {
    fd_engine *e; // whose scratch
    fd_engine *const *seqs;
    fd_fwd_batch batch;
} fwd_body;

// The forward's ops (model_forward) and its route counters. Host-side effects other than the counters stay
// outside: a recorded forward replays only what the backend ops do. Route hits count forwards, not layers: each
// segment counts once under its GDN route; the GDN core calls are counted by form, one per GDN layer.
static void forward_body(void *ctx) {
    const fwd_body *f = ctx;
    const fd_rank_plan *p = &f->e->m->plan;
    for (int k = 0; p->n_gdn_layers > 0 && k < f->batch.n_segs; k++) {
        fd_engine *q = f->seqs[k];
        const fd_fwd_seg *g = &f->batch.segs[k];
        const int decode = gdn_decode_rows(q, g->n);
        routes_count(&q->routes[decode ? FD_ROUTE_GDN_DECODE : FD_ROUTE_GDN_PREFILL], decode ? 0 : q->gdn_prefill_sel,
                     g->n);
        if (q->use_slots) // a verify: how its GDN states are kept (a tree's always in slots)
            routes_count(&q->routes[FD_ROUTE_GDN_VERIFY], verify_replays(q) ? FD_GDN_VERIFY_REPLAY : FD_GDN_VERIFY_SLOTS,
                         g->n);
        fd_route_count *rc = g->gdn_route == FD_GDN_CHUNKED ? &q->gdn_chunked : &q->gdn_serial;
        rc->calls += p->n_gdn_layers;
        rc->tokens += (int64_t)g->n * p->n_gdn_layers;
    }
    model_forward(f->e->m, f->e->be, &f->e->scratch, &f->batch);
}

int engine_graphs_on(const fd_engine *e) {
    const fd_route *r = &e->routes[FD_ROUTE_GRAPHS];
    return e->graphs_capable && !strcmp(r->values[*r->sel], "on");
}

// Where the outputs go: engine_sink (engine_tp.h).

// The prompt announced by engine_prompt_begin advanced: tell on_progress (ends the announcement when complete).
static void report_progress(fd_engine *e) {
    const int64_t done = e->n_past - e->prompt_base;
    if (e->on_progress) {
        if (e->be->sync) e->be->sync(e->be);
        e->on_progress(e->progress_ud, done < e->prompt_total ? done : e->prompt_total, e->prompt_total);
    }
    if (done >= e->prompt_total || done < 0) e->prompt_total = 0;
}

// The forward over n rows of e's scratch, outputs to the sink: one segment of all n rows for seqs[0] (n_segs 1),
// or one row each for n_segs = n sequences (a batched decode step). A tensor-parallel leader runs it on its ranks.
static void forward_rows(fd_engine *e, const int32_t *ids, int n, fd_engine *const *seqs, int n_segs,
                         const engine_sink *sink, int first) {
    if (!e->tp) {
        engine_forward_rows(e, ids, n, seqs, n_segs, sink, first);
        return;
    }
    engine_tp_forward(e, ids, n, seqs, n_segs, sink, first);
    for (int k = 0; k < n_segs; k++) {
        const int rows = n_segs == 1 ? n : 1;
        seqs[k]->n_past += rows;
        seqs[k]->tokens_computed += rows;
    }
    if (n_segs == 1 && e->prompt_total > 0) report_progress(e);
}

void engine_forward_rows(fd_engine *e, const int32_t *ids, int n, fd_engine *const *seqs, int n_segs,
                         const engine_sink *sink, int first) {
    const fd_config *c = &e->m->cfg;
    const fd_rank_plan *p = &e->m->plan;
    fd_backend *be = e->be;
    // the LM head's rows of this rank: all V at tp 1
    const int V = c->vocab_size, vb = p->vocab_begin, Vl = p->vocab_end - p->vocab_begin;
    // Step inputs to the device in one copy: the position (one sequence) and the ids.
    int64_t pos = seqs[0]->n_past;
    memcpy(e->step_host, &pos, sizeof pos);
    memcpy((char *)e->step_host + sizeof(int64_t), ids, (size_t)n * sizeof(int32_t));
    be->to_device(be, e->step_dev, e->step_host, sizeof(int64_t) + (size_t)n * sizeof(int32_t));
    fd_fwd_seg one, *segs = n_segs == 1 ? &one : fd_malloc(sizeof *segs * (size_t)n_segs);
    for (int k = 0; k < n_segs; k++) segs[k] = n_segs == 1 ? seg_of(seqs[0], 0, n) : seg_of(seqs[k], k, 1);
    const int want = sink->logits || sink->ids || sink->keep_dev;
    const int head_in_body = want && n - first <= ENGINE_LOGIT_ROWS;
    // taps exist only on engines that drive a drafter (never batched)
    const fwd_body body = {e, seqs,
                           (fd_fwd_batch){.n = n,
                                          .ids_dev = e->ids_dev,
                                          .segs = segs,
                                          .n_segs = n_segs,
                                          .head_first = head_in_body ? first : -1,
                                          .logits_dev = e->logits_dev,
                                          .tap_col = e->tap_col,
                                          .n_taps = e->n_taps,
                                          .taps = e->taps}};
    // a tree verify is not recorded: its shape (the parents) changes every round
    const int eligible = e->graphs_capable && n_segs == 1 && n <= FD_GRAPH_MAX_N && !seqs[0]->tree;
    if (eligible) routes_count(&e->routes[FD_ROUTE_GRAPHS], e->graphs_sel, n); // under the selected value
    if (eligible && engine_graphs_on(e)) {
        // The position is read on the device (attention then sizes its grid from the capacity: one launch shape
        // for every step). With graphs off it stays a host argument, as before graphs existed; both give the same
        // bits (backend.h), which tests_cuda/test_cuda_graphs.c checks.
        segs[0].pos_dev = e->pos_dev;
        const int head = !head_in_body ? FD_HEAD_NONE : first == 0 ? FD_HEAD_ALL : FD_HEAD_LAST;
        engine_graphs_run(e, n, e->use_slots, head, forward_body, (void *)&body);
    } else {
        forward_body((void *)&body);
    }
    for (int k = 0; k < n_segs; k++) {
        seqs[k]->n_past += segs[k].n;
        seqs[k]->tokens_computed += segs[k].n;
        // a replay verify left the GDN state before its rows: the commit must replay them (engine_verify.c)
        seqs[k]->replay_pending = segs[k].gdn_keep ? segs[k].n : 0;
    }
    if (segs != &one) free(segs);
    if (n_segs == 1 && e->prompt_total > 0) report_progress(e);
    if (!want) return;
    for (int r0 = first; r0 < n; r0 += ENGINE_LOGIT_ROWS) {
        const int rows = n - r0 < ENGINE_LOGIT_ROWS ? n - r0 : ENGINE_LOGIT_ROWS;
        if (!head_in_body) model_lm_head(e->m, be, &e->scratch, r0, rows, e->logits_dev); // final norm left in h
        const int k = r0 - first;
        if (sink->logits && Vl == V) {
            be->to_host(be, sink->logits + (int64_t)k * V, e->logits_dev, (size_t)rows * V * sizeof(float));
        } else if (sink->logits) { // a rank's columns of the caller's full rows
            for (int i = 0; i < rows; i++)
                be->to_host(be, sink->logits + (int64_t)(k + i) * V + vb, e->logits_dev + (int64_t)i * Vl,
                            (size_t)Vl * sizeof(float));
        } else if (sink->keep_dev) { // the leader samples from the ranks' slices (tp_sample.c)
            if (sink->keep_dev != e->logits_dev)
                be->copy(be, sink->keep_dev + (int64_t)k * Vl, e->logits_dev, (size_t)rows * Vl * sizeof(float));
        } else if (sink->params) {
            be->sample_rows(be, sink->ids + k, e->logits_dev, rows, V, sink->params + k,
                            sink->uniforms ? sink->uniforms + k : NULL);
        } else {
            be->argmax_rows(be, sink->ids + k, e->logits_dev, rows, Vl);
            for (int i = 0; sink->best && i < rows; i++) { // a rank's pick: its logit, and the id made global
                be->to_host(be, &sink->best[k + i], e->logits_dev + (int64_t)i * Vl + sink->ids[k + i], sizeof(float));
                sink->ids[k + i] += vb;
            }
        }
    }
}

static int check_forward(fd_engine *e, const int32_t *ids, int n) {
    if (n < 1 || n > e->opt.max_batch)
        return fd_error_set("forward of %d tokens: must be 1..%d (the prefill token budget)", n, e->opt.max_batch);
    if (e->n_past < 0 || e->n_past + n > e->opt.capacity)
        return fd_error_set("sequence of %lld tokens does not fit the context capacity of %lld tokens",
                            (long long)(e->n_past + n), (long long)e->opt.capacity);
    FD_TRY(check_ids(&e->m->cfg, ids, n));
    return engine_reserve(e, e->n_past + n); // last: a refused forward leaves the sequence (and its pages) as it was
}

int engine_forward(fd_engine *e, const int32_t *ids, int n, float *logits, int all_logits) {
    FD_TRY(check_forward(e, ids, n));
    const engine_sink sink = {.logits = logits};
    forward_rows(e, ids, n, &e, 1, &sink, all_logits ? 0 : n - 1);
    return 0;
}

int engine_forward_greedy(fd_engine *e, const int32_t *ids, int n, int32_t *out_ids) {
    FD_TRY(check_forward(e, ids, n));
    const engine_sink sink = {.ids = out_ids};
    forward_rows(e, ids, n, &e, 1, &sink, 0);
    return 0;
}

// The host side of backend sampling: the op's parameters from a sampler, and its one uniform per sampled token
// (none for greedy, exactly as sampler_sample consumes them), so the generator's stream is the host path's.
static double draw_uniform(fd_sampler *smp) { return sampler_is_greedy(smp) ? 0 : sampler_uniform(smp); }

int engine_forward_sample(fd_engine *e, const int32_t *ids, int n, fd_sampler *smp, int32_t *out) {
    FD_CHECK(e->be->sample_rows, "backend %s has no sample_rows", e->be->name);
    FD_TRY(check_forward(e, ids, n));
    const fd_sample_params params = sampler_params(smp);
    const double u = draw_uniform(smp);
    const engine_sink sink = {.ids = out, .params = &params, .uniforms = &u};
    forward_rows(e, ids, n, &e, 1, &sink, n - 1);
    return 0;
}

static int decode_batch(fd_engine **seqs, const int32_t *ids, int n, const engine_sink *sink) {
    if (n < 1) return fd_error_set("decode batch of %d sequences", n);
    fd_engine *e = seqs[0];
    if (n > e->opt.max_batch)
        return fd_error_set("decode batch of %d sequences: the first engine's scratch holds %d rows", n,
                            e->opt.max_batch);
    FD_TRY(check_ids(&e->m->cfg, ids, n));
    for (int i = 0; i < n; i++) {
        fd_engine *q = seqs[i];
        int bad = q->m != e->m || q->be != e->be || q->n_taps || q->use_slots;
        for (int j = 0; j < i && !bad; j++) bad = seqs[j] == q;
        if (bad || q->n_past + 1 > q->opt.capacity)
            return bad ? fd_error_set("decode batch: sequence %d is not a distinct plain sequence of the same model "
                                      "and backend", i)
                       : fd_error_set("decode batch: sequence %d is at its capacity of %lld tokens", i,
                                      (long long)q->opt.capacity);
    }
    // Pages for every sequence's new position. A refusal leaves every n_past as it was (a page one sequence took
    // stays reserved for its next step).
    for (int i = 0; i < n; i++)
        if (engine_reserve(seqs[i], seqs[i]->n_past + 1)) return fd_error_prefix("decode batch: sequence %d", i);
    // Not recorded: the set of sequences (whose caches and states the ops address) changes from step to step.
    forward_rows(e, ids, n, seqs, n, sink, 0);
    return 0;
}

int engine_decode_batch(fd_engine **seqs, const int32_t *ids, int n, float *logits) {
    const engine_sink sink = {.logits = logits};
    return decode_batch(seqs, ids, n, &sink);
}

int engine_decode_batch_sample(fd_engine **seqs, const int32_t *ids, int n, fd_sampler **smps, int32_t *out) {
    if (n < 1) return fd_error_set("decode batch of %d sequences", n);
    FD_CHECK(seqs[0]->be->sample_rows, "backend %s has no sample_rows", seqs[0]->be->name);
    fd_sample_params *params = fd_malloc(sizeof *params * (size_t)n);
    double *u = fd_malloc(sizeof *u * (size_t)n);
    fd_sampler *saved = fd_malloc(sizeof *saved * (size_t)n);
    for (int i = 0; i < n; i++) {
        saved[i] = *smps[i];
        params[i] = sampler_params(smps[i]);
        u[i] = draw_uniform(smps[i]);
    }
    const engine_sink sink = {.ids = out, .params = params, .uniforms = u};
    const int rc = decode_batch(seqs, ids, n, &sink);
    for (int i = 0; rc && i < n; i++) *smps[i] = saved[i]; // a refused step must not consume the uniforms
    free(params);
    free(u);
    free(saved);
    return rc;
}

int engine_prompt_begin(fd_engine *e, int64_t n, int *chunk) {
    if (*chunk <= 0 || *chunk > e->opt.max_batch) *chunk = e->opt.max_batch;
    if (n < 1) return fd_error_set("empty prompt");
    if (e->n_past + n > e->opt.capacity)
        return fd_error_set("prompt of %lld tokens does not fit the context capacity of %lld tokens",
                            (long long)(e->n_past + n), (long long)e->opt.capacity);
    FD_TRY(engine_reserve(e, e->n_past + n));
    e->prompt_base = e->n_past;
    e->prompt_total = n;
    return 0;
}

int engine_prefill(fd_engine *e, const int32_t *ids, int64_t n, int chunk, float *logits, int all_logits) {
    FD_TRY(engine_prompt_begin(e, n, &chunk));
    const int V = e->m->cfg.vocab_size;
    for (int64_t i = 0; i < n; i += chunk) {
        const int len = (int)(n - i < chunk ? n - i : chunk);
        const int last = i + len == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + i * V;
        else if (logits && last) out = logits;
        FD_TRY(engine_forward(e, ids + i, len, out, all_logits));
    }
    return 0;
}

int32_t engine_argmax(const float *logits, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

// Greedy picks come from the backend (argmax_rows): no [V] logits row crosses to the host per token.
static int generate_greedy(fd_engine *e, const int32_t *ids, int64_t n, int chunk, int n_new, int32_t *out) {
    FD_TRY(engine_prompt_begin(e, n, &chunk));
    if (n_new < 1) return engine_prefill(e, ids, n, chunk, NULL, 0);
    for (int64_t i = 0; i < n; i += chunk) {
        const int len = (int)(n - i < chunk ? n - i : chunk);
        if (i + len < n) {
            FD_TRY(engine_forward(e, ids + i, len, NULL, 0));
        } else { // the last chunk: only its last row's pick
            FD_TRY(check_forward(e, ids + i, len));
            const engine_sink sink = {.ids = out};
            forward_rows(e, ids + i, len, &e, 1, &sink, len - 1);
        }
    }
    for (int i = 1; i < n_new; i++) FD_TRY(engine_forward_greedy(e, &out[i - 1], 1, &out[i]));
    return 0;
}

int engine_prefill_sample(fd_engine *e, const int32_t *ids, int64_t n, int chunk, fd_sampler *smp, int32_t *out) {
    FD_TRY(engine_prompt_begin(e, n, &chunk));
    for (int64_t i = 0; i < n; i += chunk) {
        const int len = (int)(n - i < chunk ? n - i : chunk);
        if (i + len < n) FD_TRY(engine_forward(e, ids + i, len, NULL, 0));
        else FD_TRY(engine_forward_sample(e, ids + i, len, smp, out));
    }
    return 0;
}

// Greedy: argmax_rows on the backend. With a sampler: sample_rows on the backend. Either way only ids come back.
int engine_generate(fd_engine *e, const int32_t *ids, int64_t n, int chunk, int n_new, fd_sampler *smp,
                    int32_t *out) {
    if (!smp || sampler_is_greedy(smp)) return generate_greedy(e, ids, n, chunk, n_new, out);
    if (n_new < 1) return engine_prefill(e, ids, n, chunk, NULL, 0);
    int rc = engine_prefill_sample(e, ids, n, chunk, smp, &out[0]);
    for (int i = 1; rc == 0 && i < n_new; i++) rc = engine_forward_sample(e, &out[i - 1], 1, smp, &out[i]);
    return rc;
}

int engine_generate_greedy(fd_engine *e, const int32_t *ids, int64_t n, int chunk, int n_new, int32_t *out) {
    return engine_generate(e, ids, n, chunk, n_new, NULL, out);
}
