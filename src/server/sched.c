// The scheduler: the one thread that calls the engine (the CPU thread pool is not reentrant, and a GPU stream wants
// one owner anyway). Each slot is an engine holding one sequence. A step runs one decode token for every decoding
// slot (round-robin), then spends what is left of the token budget on prompt chunks, oldest request first, so a
// long prompt advances by at most one budget per step and never stalls running streams for longer.
//
// Continuous batching: sequences join and leave between steps, and a step's decode tokens of all decoding slots run
// as one batched forward (engine_decode_batch_sample: weights read once, state and KV per sequence, each slot's
// token sampled on the backend with its own parameters); prompt chunks run per sequence.
//
// Speculative decoding (--draft): each slot also holds a DFlash state over its engine; a decode step is then one
// draft -> verify -> accept round that emits 1..B tokens. The prompt chunks feed the drafter's context as they run.
// The prefix cache then also holds the drafter's context K/V of each block. Decode-time snapshots are skipped in
// that mode: a round moves the sequence by 1..B tokens, past block boundaries, so only prompt checkpoints are cached.
//
// Prefix cache: on admission the longest cached prefix (ending at a state snapshot, at most prompt-1 tokens: the last
// prompt token must run to give logits) is restored into the slot. Prompt chunks are cut at snapshot points (every
// pc_checkpoint tokens and the last block boundary before the final prompt token) so that the state exists there.
// During decode the state is snapshot at each block boundary into a per-slot buffer (overwritten), and the last one
// is cached when the request ends: the next chat turn, which repeats this turn's prompt and answer, then hits it.
// Under --tp the cache's index is this thread's one structure and each node holds every rank's KV and state in that
// rank's memory (prefix_cache.h); a slot's decode snapshot is every rank's too (es_parts).
#include <stdlib.h>
#include <string.h>

#include "engine/routes.h"
#include "engine/tp_agree.h"
#include "server/sched_internal.h"

// The KV tokens (whole pages) a job's prompt takes.
static int64_t kv_prompt_tokens(const srv_sched *s, const srv_job *j) {
    const int64_t P = s->pools[0].page_tokens;
    return ((int64_t)j->n_prompt + P - 1) / P * P;
}

static int n_active(const srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].st != SLOT_FREE;
    return n;
}

static srv_job *q_pop(srv_sched *s) {
    srv_job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->cfg->max_queue;
    s->q_len--;
    return j;
}

// Under s->mu: one pass over the queue, in order. Admitted jobs (free slots for all their choices and the KV pages
// of their prompts) go to s->admitted, expired or cancelled ones to s->expired, the rest back into the queue.
// KV pages: a prompt waits in the queue (FIFO) until the pool has its pages free; one the whole pool could never
// hold is admitted and refused at once (503 kv_cache_full, slot_start).
static void admit_from_queue(srv_sched *s, int *n_admitted, int *n_expired) {
    int n_adm = 0, n_exp = 0, free_slots = s->n_slots - n_active(s);
    const double now = fd_time_s();
    int64_t kv_free = kv_pool_free_tokens(&s->pools[0]), kv_blocked = 0;
    for (int k = s->q_len; k > 0; k--) {
        srv_job *j = q_pop(s);
        const int64_t need = kv_prompt_tokens(s, j) * j->n; // n > 1: one sequence per choice
        const int kv_fits = need <= kv_free || need > kv_pool_tokens(&s->pools[0]);
        if (now - j->t_arrival > s->cfg->queue_timeout || atomic_load(&j->cancelled)) {
            s->expired[n_exp++] = j;
        } else if (free_slots >= j->n && kv_fits && !kv_blocked) { // each takes >= 1 slot: n_adm <= n_slots
            s->admitted[n_adm++] = j;
            free_slots -= j->n;
            if (need <= kv_free) kv_free -= need;
        } else {
            // later requests may not overtake it (nor one waiting for its n slots)
            kv_blocked |= free_slots > 0 && (!kv_fits || free_slots < j->n);
            s->queue[(s->q_head + s->q_len) % s->cfg->max_queue] = j;
            s->q_len++;
        }
    }
    pthread_mutex_lock(&s->met->mu);
    s->met->waiting = s->q_len;
    pthread_mutex_unlock(&s->met->mu);
    *n_admitted = n_adm;
    *n_expired = n_exp;
}

// Requests that waited too long get 503 (their clients went away: 499).
static void fail_expired(srv_sched *s, int n_exp) {
    for (int i = 0; i < n_exp; i++) {
        srv_job *j = s->expired[i];
        int gone = atomic_load(&j->cancelled);
        sched_job_fail(j, gone ? 499 : 503, gone ? "cancelled" : "server_overloaded", NULL,
                       gone ? "the client disconnected"
                            : "no sequence slot (or not enough KV cache pages) became free within the queue timeout");
        pthread_mutex_lock(&s->met->mu);
        if (gone) s->met->finished[SRV_FIN_ABORT]++;
        else s->met->rejected_timeout++;
        pthread_mutex_unlock(&s->met->mu);
        srv_job_unref(j);
    }
}

static void start_admitted(srv_sched *s, int n_adm) {
    for (int i = 0, k = 0; i < n_adm; i++) {
        // A choice refused at start (KV pages) fails the job and drops its slot's reference, which may be the
        // last: hold one across the loop, and start no further choice of a failed job.
        srv_job *j = s->admitted[i];
        const int n_choices = j->n;
        srv_job_ref(j);
        for (int c = 0; c < n_choices; c++) {
            pthread_mutex_lock(&j->mu);
            const int failed = j->done; // failed (a choice cannot have finished yet)
            pthread_mutex_unlock(&j->mu);
            if (failed) break;
            while (s->slots[k].st != SLOT_FREE) k++;
            slot_start(s, &s->slots[k], j, c);
        }
        srv_job_unref(j);
    }
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && s->reset_asked == s->reset_done && s->q_len == 0 && !n_active(s))
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (s->reset_asked != s->reset_done) {
            // The cache belongs to this thread. Done before admission, so every request that arrived after the
            // reset was asked for sees the empty cache.
            const int64_t asked = s->reset_asked;
            pthread_mutex_unlock(&s->mu);
            if (s->pc) pc_reset(s->pc);
            sched_sync_route_metrics(s);
            pthread_mutex_lock(&s->met->mu);
            s->met->pc_resets += asked - s->reset_done; // counted when done, so a client can wait for it
            pthread_mutex_unlock(&s->met->mu);
            pthread_mutex_lock(&s->mu);
            s->reset_done = asked;
        }
        int n_adm, n_exp;
        admit_from_queue(s, &n_adm, &n_exp);
        pthread_mutex_unlock(&s->mu);
        fail_expired(s, n_exp);
        start_admitted(s, n_adm);
        sched_step(s);
    }
    return NULL;
}

// ---- public ----

int64_t sched_kv_tokens(const srv_config *cfg) {
    const int64_t page = FD_KV_PAGE_TOKENS, per_slot = (cfg->ctx + page - 1) / page * page;
    const int64_t most = per_slot * cfg->slots; // what the slots could ever hold at once
    return cfg->kv_tokens < most ? cfg->kv_tokens : most;
}

static void free_scratch(srv_sched *s) {
    free(s->slots);
    free(s->eos);
    free(s->decoding);
    free(s->dec_engines);
    free(s->dec_samplers);
    free(s->dec_ids);
    free(s->dec_picked);
    free(s->admitted);
    free(s->expired);
}

// A slot's engine: a plain one on the shared pool, or a leader over the ranks on their pools; the routes from the
// environment, then --route; their combination checked; a tree verify refused where it cannot run (--tp).
static int slot_engine(srv_sched *s, slot *sl, const fd_engine_opts *eo) {
    const srv_config *cfg = s->cfg;
    FD_TRY(s->tp ? engine_init_tp(&sl->e, s->m, s->tp, eo) : engine_init(&sl->e, s->m, s->be, eo));
    FD_TRY(routes_from_env(&sl->e));
    for (int r = 0; r < cfg->n_routes; r++) FD_TRY(routes_set(&sl->e, cfg->route_specs[r]));
    FD_TRY(routes_check(&sl->e));
    const fd_route *sv = routes_find(&sl->e, "spec_verify");
    if (s->dr && sv && !strcmp(sv->values[*sv->sel], "tree")) FD_TRY(engine_tree_supported(&sl->e));
    return s->dr ? dflash_init(&sl->spec, &sl->e, s->dr, cfg->block_size) : 0;
}

// The KV pools (a pool per rank under --tp) and every slot's engine. The backend routes are set before any cache
// exists (the kv layout is fixed once one is sized). 0, or -1 with fd_error set and nothing kept.
static int create_engines(srv_sched *s) {
    const srv_config *cfg = s->cfg;
    const int ranks = s->tp ? s->tp->tp : 1;
    fd_kv_pool *rank_pools[FD_TP_MAX];
    int err = 0;
    for (int r = 0; r < ranks && !err; r++) {
        fd_backend *be = s->tp ? s->tp->bes[r] : s->be;
        const fd_model *m = s->tp ? &s->tp->shards[r] : s->m;
        err = routes_backend_preset(be, cfg->route_specs, cfg->n_routes) ||
              kv_pool_init(&s->pools[r], be, &m->plan, sched_kv_tokens(cfg), 0);
        if (!err) s->n_pools = r + 1;
        rank_pools[r] = &s->pools[r];
    }
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.capacity = cfg->ctx;
    if (s->tp) eo.rank_pools = rank_pools;
    else eo.pool = &s->pools[0];
    eo.max_batch = cfg->prefill_chunk;
    eo.gdn_prefill = cfg->gdn_prefill;
    int made = 0;
    for (; !err && made < s->n_slots; made++) {
        err = slot_engine(s, &s->slots[made], &eo);
        s->slots[made].ts = tok_stream_new(s->tok, 1);
    }
    // Every rank runs the same build, libraries, routes, configuration and weights, or none runs.
    if (!err && s->tp && tp_agree(&s->slots[0].e, cfg->build, stderr))
        err = fd_error_set_code(FD_ERR_REFUSED, "the tensor-parallel ranks disagree (table above): refusing to start");
    if (!err) return 0;
    for (int k = 0; k < made; k++) {
        if (s->slots[k].spec.tgt) dflash_free(&s->slots[k].spec);
        engine_free(&s->slots[k].e);
        tok_stream_free(s->slots[k].ts);
    }
    for (int r = 0; r < s->n_pools; r++) kv_pool_free(&s->pools[r]);
    return -1;
}

srv_sched *sched_create(const srv_config *cfg, fd_model *m, fd_backend *be, const fd_tp_set *tp,
                        const tok_tokenizer *tok, fd_drafter *dr, const int32_t *eos, int n_eos, srv_metrics *met) {
    srv_sched *s = fd_calloc(1, sizeof *s);
    s->cfg = cfg;
    s->m = m;
    s->be = be;
    s->tp = tp;
    s->tok = tok;
    s->dr = dr;
    s->met = met;
    s->n_eos = n_eos > 0 ? n_eos : 0;
    s->eos = fd_malloc(sizeof(int32_t) * (size_t)(s->n_eos + 1));
    if (s->n_eos) memcpy(s->eos, eos, sizeof(int32_t) * (size_t)s->n_eos);
    s->n_slots = cfg->slots;
    s->slots = fd_calloc((size_t)s->n_slots, sizeof *s->slots);
    const size_t ns = (size_t)s->n_slots;
    s->decoding = fd_calloc(ns, sizeof *s->decoding);
    s->dec_engines = fd_calloc(ns, sizeof *s->dec_engines);
    s->dec_samplers = fd_calloc(ns, sizeof *s->dec_samplers);
    s->dec_ids = fd_calloc(ns, sizeof *s->dec_ids);
    s->dec_picked = fd_calloc(ns, sizeof *s->dec_picked);
    s->admitted = fd_calloc(ns, sizeof *s->admitted);
    s->expired = fd_calloc((size_t)cfg->max_queue, sizeof *s->expired);
    if (create_engines(s)) {
        free_scratch(s);
        free(s);
        return NULL;
    }
    if (tp)
        FD_INFO("tensor parallelism: %d rank%s, one host thread each; the ranks agree on build, libraries, routes, "
                "configuration and weight sample", tp->tp, tp->tp == 1 ? "" : "s");
    if (cfg->prefix_cache) {
        s->pc = pc_create(&s->slots[0].e, cfg->pc_block, cfg->pc_budget);
        if (dr) pc_attach_drafter(s->pc, &s->slots[0].spec);
    }
    s->queue = fd_calloc((size_t)cfg->max_queue, sizeof *s->queue);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    routes_print(&s->slots[0].e, stderr);
    fd_route *r[FD_MAX_ROUTES];
    const int n_routes = routes_list(&s->slots[0].e, r);
    for (int i = 0; i < n_routes; i++)
        for (int v = 0; r[i]->values[v]; v++) s->n_route_values++;
    pthread_mutex_lock(&met->mu);
    free(met->route_hits);
    met->tp = tp ? tp->tp : 0; // every rank's route table is rank 0's (one backend kind), counted apart
    met->route_hits = fd_calloc((size_t)s->n_route_values * (size_t)(tp ? tp->tp : 1) + 1, sizeof *met->route_hits);
    met->n_route_hits = 0;
    met->spec_block = dr ? s->slots[0].spec.B : 0;
    pthread_mutex_unlock(&met->mu);
    sched_sync_route_metrics(s); // /metrics lists every route from the start
    FD_CHECK(pthread_create(&s->th, NULL, sched_main, s) == 0);
    s->running_thread = 1;
    return s;
}

int sched_submit(srv_sched *s, srv_job *j, srv_err *err) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping) {
        rc = srv_err_set(err, 503, "server_unavailable", NULL, NULL, "the server is shutting down");
    } else if (s->q_len >= s->cfg->max_queue) {
        rc = srv_err_set(err, 429, "rate_limit_exceeded", "queue_full", NULL,
                         "the server is busy: %d requests are already waiting; retry later", s->q_len);
    } else {
        srv_job_ref(j);
        s->queue[(s->q_head + s->q_len) % s->cfg->max_queue] = j;
        s->q_len++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        pthread_mutex_lock(&s->met->mu);
        if (err->status == 429) s->met->rejected_queue_full++;
        pthread_mutex_unlock(&s->met->mu);
    } else {
        pthread_mutex_lock(&s->met->mu);
        s->met->waiting++;
        pthread_mutex_unlock(&s->met->mu);
    }
    return rc;
}

void sched_reset_prefix_cache(srv_sched *s) {
    // Queued, never waited for: an HTTP worker must not sit out a long engine step (any number of calls while one
    // is pending collapse into one reset).
    pthread_mutex_lock(&s->mu);
    ++s->reset_asked;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_stop(srv_sched *s) {
    if (!s || !s->running_thread) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->running_thread = 0;
    // the thread is gone: finish what is left from here
    while (s->q_len) {
        srv_job *j = q_pop(s);
        sched_job_fail(j, 503, "server_unavailable", NULL, "the server is shutting down");
        srv_job_unref(j);
    }
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].st != SLOT_FREE)
            slot_fail(s, &s->slots[i], 503, "server_unavailable", NULL, "the server is shutting down",
                      SRV_FIN_ABORT);
}

void sched_free(srv_sched *s) {
    if (!s) return;
    sched_stop(s);
    pc_free(s->pc);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (s->dr) dflash_free(&sl->spec);
        engine_free(&sl->e);
        free(sl->seq);
        tok_stream_free(sl->ts);
        srv_buf_free(&sl->text);
        es_parts_free(&sl->roll);
        free(sl->row);
        free(sl->scratch);
        host_state_free(&sl->hs);
    }
    for (int r = 0; r < s->n_pools; r++) kv_pool_free(&s->pools[r]); // after the engines, which hand their pages back
    free_scratch(s);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
