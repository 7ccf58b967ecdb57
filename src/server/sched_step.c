// One scheduler step: a decode token (or a DFlash round) for every decoding slot, batched, then what is left of the
// token budget spent on prompt chunks, oldest request first (see sched.c for the whole picture).
#include <stdlib.h>
#include <string.h>

#include "engine/routes.h"
#include "server/sched_internal.h"

// A prompt of more than 8 prefill budgets logs its progress every 5 s and at its end, so a long prefill is visible
// in the log (short ones, nearly all, say nothing).
static void log_prefill(srv_sched *s, slot *sl, int64_t end, int final) {
    const int64_t todo = sl->job->n_prompt - sl->prefill_from;
    const double now = fd_time_s();
    if (todo <= 8 * (int64_t)s->cfg->prefill_chunk || (!final && now - sl->t_prefill_log < 5)) return;
    sl->t_prefill_log = now;
    const int64_t done = end - sl->prefill_from;
    const double dt = now - sl->t_prefill, rate = dt > 0 ? (double)done / dt : 0;
    if (final)
        FD_INFO("prefill %s: %lld tokens in %.2f s (%.0f tok/s)", sl->job->id, (long long)done, dt, rate);
    else
        FD_INFO("prefill %s: %lld / %lld tokens, %.0f tok/s, ETA %.1f s", sl->job->id, (long long)done,
                (long long)todo, rate, rate > 0 ? (double)(todo - done) / rate : 0.0);
}

static void decode_finish(srv_sched *s, slot *sl, int32_t tok);

// Host sampling from the slot's logits row (engine_forward wrote it): the token, and its logprobs entry.
static int32_t host_sample(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    fd_token_logprobs lp;
    int32_t t = host_pick(&sl->smp, &j->hp, &sl->hs, sl->row, s->m->cfg.vocab_size, sl->scratch, j->top_logprobs,
                          j->logprobs ? &lp : NULL);
    if (j->logprobs && !(sched_is_eos(s, t) && !j->ignore_eos)) { // the end-of-sequence token is not part of the text
        json_t *e = srv_logprob_entry(s->tok, &lp);
        pthread_mutex_lock(&j->mu);
        json_t **dst = j->stream ? &j->ch[sl->choice].lp_pending : &j->ch[sl->choice].lp_all;
        if (!*dst) *dst = json_array();
        json_array_append_new(*dst, e);
        pthread_mutex_unlock(&j->mu);
    }
    return t;
}

// A host-sampled slot's decode step: its own forward with the logits row (no batching, no speculation).
static void host_decode(srv_sched *s, slot *sl) {
    if (engine_reserve(&sl->e, sl->e.n_past + 1)) {
        slot_fail_forward(s, sl);
        return;
    }
    slot_seq_push(sl, &sl->next, 1);
    if (engine_forward(&sl->e, &sl->next, 1, sl->row, 0)) {
        slot_fail_forward(s, sl);
        return;
    }
    const int32_t t = host_sample(s, sl);
    if (s->dr) { // no decode snapshots with a drafter (see the top of the file)
        pthread_mutex_lock(&s->met->mu);
        s->met->decode_steps++;
        pthread_mutex_unlock(&s->met->mu);
        slot_take_token(s, sl, t);
    } else {
        decode_finish(s, sl, t);
    }
}

// One DFlash round from the newest token: emits 1..B tokens (never more than max_tokens still allows).
static void spec_round(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    int32_t em[FD_SPEC_MAX_BLOCK];
    int ne = 0;
    const int left = j->max_tokens - sl->n_gen;
    const int L = left < sl->spec.B ? left : sl->spec.B;
    if (dflash_round(&sl->spec, sl->next, L, sampler_is_greedy(&sl->smp) ? NULL : &sl->smp, sl->n_gen, em, &ne)) {
        slot_fail_forward(s, sl);
        return;
    }
    pthread_mutex_lock(&s->met->mu);
    s->met->decode_steps++;
    s->met->spec_drafts++;
    s->met->spec_draft_tokens += L - 1;
    s->met->spec_accepted += ne - 1;
    for (int i = 0; i < ne - 1 && i < SRV_SPEC_POS_MAX; i++) s->met->spec_accepted_pos[i]++;
    pthread_mutex_unlock(&s->met->mu);
    for (int i = 0; i < ne && sl->job == j; i++) slot_take_token(s, sl, em[i]); // stops when the request ends
}

// After a slot's decode forward (which sampled `tok`): keep the newest block-boundary state for the prefix cache,
// count the step, emit the token.
static void decode_finish(srv_sched *s, slot *sl, int32_t tok) {
    const int B = s->pc ? pc_block(s->pc) : 0;
    if (B && sl->e.n_past % B == 0) {
        es_snap_save(&sl->e, &sl->roll); // allocated (on every rank) by the first save, then overwritten
        sl->roll_pos = sl->e.n_past;
    }
    pthread_mutex_lock(&s->met->mu);
    s->met->decode_steps++;
    pthread_mutex_unlock(&s->met->mu);
    slot_take_token(s, sl, tok);
}

// One decode token for every slot in sls at once (engine_decode_batch: the weights are read once per step, not
// once per sequence). Speculative slots run their own rounds instead.
static void decode_slots(srv_sched *s, slot **sls, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (sls[i]->job->host) host_decode(s, sls[i]);
        else sls[kept++] = sls[i];
    }
    n = kept;
    if (s->dr) {
        for (int i = 0; i < n; i++) spec_round(s, sls[i]);
        return;
    }
    if (n == 0) return;
    fd_engine **es = s->dec_engines;
    fd_sampler **smps = s->dec_samplers;
    int32_t *ids = s->dec_ids, *picked = s->dec_picked;
    // A slot whose next position finds the KV pool full ends with 503; the others go on.
    int live = 0;
    for (int i = 0; i < n; i++) {
        if (engine_reserve(&sls[i]->e, sls[i]->e.n_past + 1))
            slot_fail_forward(s, sls[i]);
        else
            sls[live++] = sls[i];
    }
    n = live;
    if (n == 0) return;
    for (int i = 0; i < n; i++) {
        slot_seq_push(sls[i], &sls[i]->next, 1);
        es[i] = &sls[i]->e;
        smps[i] = &sls[i]->smp;
        ids[i] = sls[i]->next;
    }
    // groups of at most the scratch rows of the group's first engine (the prefill budget)
    for (int g0 = 0; g0 < n;) {
        const int mb = es[g0]->opt.max_batch, g = n - g0 < mb ? n - g0 : mb;
        if (engine_decode_batch_sample(es + g0, ids + g0, g, smps + g0, picked + g0)) {
            for (int i = 0; i < n; i++) slot_fail(s, sls[i], 500, "server_error", NULL, fd_error_msg(), SRV_FIN_ERROR);
            return;
        }
        g0 += g;
    }
    for (int i = 0; i < n; i++) decode_finish(s, sls[i], picked[i]);
}

// Runs up to `budget` prompt tokens; returns how many ran.
static int64_t prefill_some(srv_sched *s, slot *sl, int64_t budget) {
    srv_job *j = sl->job;
    const int64_t pos = sl->e.n_past, n = j->n_prompt;
    int64_t end = pos + budget < n ? pos + budget : n;
    int64_t last_b = 0, ck = 0;
    if (s->pc) {
        const int64_t B = pc_block(s->pc);
        ck = s->cfg->pc_checkpoint;
        last_b = ((n - 1) / B) * B;
        const int64_t next_ck = (pos / ck + 1) * ck;
        if (next_ck < end && next_ck <= last_b) end = next_ck;
        if (last_b > pos && last_b < end) end = last_b;
    }
    const int final = end == n;
    int32_t first = -1; // the first generated token, sampled on the backend by the final chunk (or on the host)
    const int host = final && j->host;
    if (final && !host ? engine_forward_sample(&sl->e, j->prompt + pos, (int)(end - pos), &sl->smp, &first)
                       : engine_forward(&sl->e, j->prompt + pos, (int)(end - pos), host ? sl->row : NULL, 0)) {
        slot_fail_forward(s, sl);
        return end - pos;
    }
    if (host) first = host_sample(s, sl);
    if (s->dr) dflash_context_append(&sl->spec, (int)(end - pos));
    pthread_mutex_lock(&s->met->mu);
    s->met->prefill_computed_tokens += end - pos;
    s->met->prefill_chunks++;
    pthread_mutex_unlock(&s->met->mu);
    log_prefill(s, sl, end, final);
    if (s->pc && end > 0 && (end % ck == 0 || end == last_b) && !pc_has_snapshot(sched_pc_for(s, j), j->prompt, end))
        pc_insert(s->pc, &sl->e, s->dr ? &sl->spec : NULL, j->prompt, end, NULL);
    if (final) {
        sl->st = SLOT_DECODE;
        slot_take_token(s, sl, first);
    }
    return end - pos;
}

void sched_sync_route_metrics(srv_sched *s) {
    // Rank by rank (a plain server: its one table): slot 0's rank-q engine's table names every route; engine routes
    // are summed over the slots' rank-q engines, backend routes (rank q's backend, shared by the slots) counted
    // once. met->route_hits holds every value of every rank (sched_create sized it).
    const int ranks = s->tp ? s->tp->tp : 1;
    pthread_mutex_lock(&s->met->mu);
    int k = 0;
    for (int q = 0; q < ranks; q++) {
        fd_route *r[FD_MAX_ROUTES];
        const int n = s->n_slots ? routes_list(engine_tp_rank(&s->slots[0].e, q), r) : 0;
        for (int i = 0, c = 0; i < n; i++)
            for (int v = 0; r[i]->values[v] && c < s->n_route_values; v++, c++, k++) {
                struct srv_route_hit *h = &s->met->route_hits[k];
                h->route = r[i]->name;
                h->value = r[i]->values[v];
                h->rank = q;
                h->calls = h->tokens = 0;
                if (i >= FD_ENGINE_ROUTES) {
                    h->calls = r[i]->calls[v];
                    h->tokens = r[i]->tokens[v];
                } else {
                    for (int j = 0; j < s->n_slots; j++) {
                        const fd_route *er = &engine_tp_rank(&s->slots[j].e, q)->routes[i];
                        h->calls += er->calls[v];
                        h->tokens += er->tokens[v];
                    }
                }
            }
    }
    s->met->n_route_hits = k;
    const int64_t pool = kv_pool_tokens(&s->pools[0]);
    s->met->kv_usage = pool > 0 ? 1.0 - (double)kv_pool_free_tokens(&s->pools[0]) / (double)pool : 0;
    pthread_mutex_unlock(&s->met->mu);
    pc_stats ps = {0};
    if (s->pc) pc_get_stats(s->pc, &ps);
    pthread_mutex_lock(&s->met->mu);
    s->met->pc_nodes = ps.nodes;
    s->met->pc_snapshots = ps.snapshots;
    s->met->pc_evictions = ps.evictions;
    s->met->pc_bytes = (double)ps.bytes;
    s->met->pc_budget = (double)ps.budget;
    pthread_mutex_unlock(&s->met->mu);
}

void sched_step(srv_sched *s) {
    const double now = fd_time_s();
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->st == SLOT_FREE) continue;
        if (sl->job->done) { // another choice of the request failed: the request is over
            sched_met_finish(s, SRV_FIN_ABORT, sl, now);
            slot_release(s, sl);
            continue;
        }
        if (slot_client_gone(sl, now)) slot_fail(s, sl, 499, "cancelled", NULL, "the client disconnected", SRV_FIN_ABORT);
        else if (now - sl->job->t_arrival > s->cfg->request_timeout)
            slot_fail(s, sl, 504, "timeout_error", "timeout", "the request exceeded the server's request timeout",
                      SRV_FIN_ABORT);
    }
    int64_t budget = s->cfg->prefill_chunk;
    slot **dec = s->decoding;
    int n_dec = 0;
    for (int k = 0; k < s->n_slots; k++) { // one decode token per decoding slot, round-robin order
        slot *sl = &s->slots[(s->rr + k) % s->n_slots];
        if (sl->st == SLOT_DECODE) dec[n_dec++] = sl;
    }
    decode_slots(s, dec, n_dec);
    budget -= n_dec;
    s->rr = (s->rr + 1) % s->n_slots;
    // prompts: oldest first; at least a small chunk per step so prompts progress under a full decode load
    const int64_t min_chunk = s->cfg->prefill_chunk < 32 ? s->cfg->prefill_chunk : 32;
    if (budget < min_chunk) budget = min_chunk;
    while (budget > 0) {
        slot *best = NULL;
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].st == SLOT_PREFILL && (!best || s->slots[i].admitted < best->admitted))
                best = &s->slots[i];
        if (!best) break;
        budget -= prefill_some(s, best, budget);
    }
    sched_sync_route_metrics(s);
}
