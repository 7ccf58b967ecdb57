// DFlash round on top of the target engine (see dflash.h). The draft forward is the model's
// (model/draft_forward.h); DFlash2's selector walk is engine/dflash2.h's.
#include "engine/dflash.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dflash2.h"
#include "engine/trace.h"
#include "engine/dflash_tree.h"
#include "engine/engine_tp.h"
#include "engine/routes.h"

static int propose_dflash(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q);
static int propose_dflash2(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q);

int dflash_init(fd_dflash *s, fd_engine *tgt, fd_drafter *dr, int block_size) {
    memset(s, 0, sizeof *s);
    s->tgt = tgt;
    s->dr = dr;
    s->be = tgt->be;
    s->B = block_size > 0 ? block_size : dr->block_size;
    s->tree_budget = FD_TREE_BUDGET_DEFAULT;
    if (s->B < 2 || s->B > FD_SPEC_MAX_BLOCK)
        return fd_error_set("block size %d: must be 2..%d", s->B, FD_SPEC_MAX_BLOCK);
    if (s->B > tgt->opt.max_batch)
        return fd_error_set("block size %d exceeds the prefill token budget %d", s->B, tgt->opt.max_batch);
    FD_TRY(engine_set_taps(tgt, dr->target_layer_ids, dr->n_taps));
    FD_TRY(engine_enable_slots(tgt, s->B));
    fd_backend *be = s->be;
    s->capacity = tgt->opt.capacity + s->B;
    s->kv = fd_calloc((size_t)dr->num_layers, sizeof(void *));
    for (int i = 0; i < dr->num_layers; i++)
        s->kv[i] = be->alloc(be, be->kv_bytes_per_token(be, dr->num_kv_heads, dr->head_dim) * (size_t)s->capacity);
    s->ids_dev = be->alloc(be, (size_t)s->B * sizeof(int32_t));
    s->h_logits = fd_malloc((size_t)s->B * dr->vocab_size * sizeof(float));
    s->h_q = fd_malloc((size_t)s->B * dr->vocab_size * sizeof(float));
    s->h_p = fd_malloc((size_t)dr->vocab_size * sizeof(float));
    s->h_ids = fd_malloc((size_t)s->B * sizeof(int32_t));
    if (draft_scratch_init(&s->ds, dr, be, s->B, tgt->opt.max_batch)) {
        dflash_free(s);
        return -1;
    }
    s->variant = draft_variant(dr);
    s->propose = propose_dflash;
    if (dr->v2) {
        s->sel = fd_calloc(1, sizeof *s->sel);
        dflash2_selector_init(s->sel, be, dr, s->ds.h, s->B);
        s->propose = propose_dflash2;
    }
    return 0;
}

void dflash_free(fd_dflash *s) {
    fd_backend *be = s->be;
    if (!be) return;
    if (s->sel) dflash2_selector_free(s->sel);
    free(s->sel);
    draft_scratch_free(&s->ds, be);
    for (int i = 0; s->kv && i < s->dr->num_layers; i++) be->free(be, s->kv[i]);
    free(s->kv);
    if (s->ids_dev) be->free(be, s->ids_dev);
    free(s->h_logits);
    free(s->h_q);
    free(s->h_p);
    free(s->h_ids);
    free(s->h_tree_logits);
    memset(s, 0, sizeof *s);
}

void dflash_reset(fd_dflash *s) {
    s->n_ctx = 0; // stale draft K/V past n_ctx is never read
    memset(&s->st, 0, sizeof s->st);
}

void dflash_context_append(fd_dflash *s, int m) {
    FD_CHECK(m >= 1 && s->n_ctx + m <= s->capacity, "context append of %d at %lld", m, (long long)s->n_ctx);
    // context feature: concat(taps) -> fc -> hidden_norm (plain RMSNorm), then every layer's own K/V
    const fd_draft_caches caches = {s->kv, s->capacity};
    draft_forward_context(s->dr, s->be, &s->ds, s->tgt->taps, m, &caches, s->n_ctx);
    s->n_ctx += m;
}

int dflash_draft_forward(fd_dflash *s, int32_t anchor) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const int B = s->B;
    if (s->n_ctx + B > s->capacity) return fd_error_set("draft block beyond the draft cache capacity");
    int32_t ids[FD_SPEC_MAX_BLOCK];
    ids[0] = anchor;
    for (int i = 1; i < B; i++) ids[i] = d->mask_token_id;
    // embed reads the ids on the device, unchecked: check them here
    const int64_t vocab = s->tgt->m->embed.rows;
    if (anchor < 0 || anchor >= vocab || d->mask_token_id < 0 || d->mask_token_id >= vocab)
        return fd_error_set("draft block ids (anchor %d, mask %d) outside the vocabulary [0, %lld)", anchor,
                            d->mask_token_id, (long long)vocab);
    be->to_device(be, s->ids_dev, ids, (size_t)B * sizeof(int32_t));
    const fd_draft_caches caches = {s->kv, s->capacity};
    draft_forward_block(d, s->tgt->m, be, &s->ds, s->ids_dev, &caches, s->n_ctx);
    return 0;
}

int dflash_draft_logits_raw(const fd_dflash *s) {
    return s->dr->output_multiplier == 1.0f && !(s->dr->final_logit_softcap > 0);
}

int dflash_draft(fd_dflash *s, int32_t anchor, int32_t *draft_ids, float *logits) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const int B = s->B, V = d->vocab_size;
    FD_TRY(dflash_draft_forward(s, anchor));
    // Greedy, no multiplier and no softcap (the host loop below would leave the logits as they are): the device
    // picks (lowest index on ties, as engine_argmax) and B - 1 ids cross instead of (B - 1) x V floats.
    if (!logits && be->argmax_rows && dflash_draft_logits_raw(s)) {
        be->argmax_rows(be, draft_ids, s->ds.logits_dev, B - 1, V);
        return 0;
    }
    float *host = logits ? logits : fd_malloc((size_t)(B - 1) * V * sizeof(float));
    be->to_host(be, host, s->ds.logits_dev, (size_t)(B - 1) * V * sizeof(float));
    for (int64_t i = 0; i < (int64_t)(B - 1) * V; i++) {
        float z = host[i] * d->output_multiplier;
        if (d->final_logit_softcap > 0) z = tanhf(z / d->final_logit_softcap) * d->final_logit_softcap;
        host[i] = z;
    }
    for (int i = 0; i < B - 1; i++) draft_ids[i] = engine_argmax(host + (int64_t)i * V, V);
    if (!logits) free(host);
    return 0;
}

int dflash_prefill(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, fd_sampler *smp, int32_t *anchor) {
    fd_engine *t = s->tgt;
    const int V = t->m->cfg.vocab_size;
    FD_TRY(engine_prompt_begin(t, n, &chunk));
    float *logits = fd_malloc((size_t)V * sizeof(float));
    int rc = 0;
    for (int64_t i = 0; rc == 0 && i < n; i += chunk) {
        const int len = (int)(n - i < chunk ? n - i : chunk);
        rc = engine_forward(t, ids + i, len, i + len == n ? logits : NULL, 0);
        if (!rc) dflash_context_append(s, len);
    }
    if (!rc) {
        if (smp && !sampler_is_greedy(smp)) {
            float *scratch = fd_malloc((size_t)V * sizeof(float));
            *anchor = sampler_sample(smp, logits, V, scratch);
            free(scratch);
        } else {
            *anchor = engine_argmax(logits, V);
        }
    }
    free(logits);
    return rc;
}

// DFlash: the draft rows themselves; sampled (smp set, q = s->h_q), each row becomes q_i, the distribution its
// draft is drawn from.
static int propose_dflash(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q) {
    FD_TRY(dflash_draft(s, anchor, draft, q));
    const int V = s->dr->vocab_size;
    for (int i = 0; smp && i < n; i++) {
        float *row = q + (int64_t)i * V;
        sampler_probs(smp, row, V, s->h_p);
        memcpy(row, s->h_p, sizeof(float) * (size_t)V);
        draft[i] = sampler_draw(smp, row, V);
    }
    return 0;
}

// DFlash2: the candidate selector's walk over the draft logits proposes (q: its softmax over each step's
// candidates). The walk needs the logits even when greedy; s->h_q ([B, V] host) holds them, and q may be that
// buffer.
int dflash2_draft_candidates(fd_dflash *s, int32_t anchor, int n) {
    fd_backend *be = s->be;
    const int V = s->dr->vocab_size, K = s->dr->v2->top_k;
    if (be->topk_rows && dflash_draft_logits_raw(s)) { // the backend's top-k: only the candidates cross
        FD_TRY(dflash_draft_forward(s, anchor));
        be->topk_rows(be, s->sel->cand, s->sel->unary, s->ds.logits_dev, n, V, K);
        return 0;
    }
    int32_t draft[FD_SPEC_MAX_BLOCK];
    FD_TRY(dflash_draft(s, anchor, draft, s->h_q));
    dflash2_candidates(s->sel, s->h_q, n);
    return 0;
}

static int propose_dflash2(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q) {
    FD_TRY(dflash2_draft_candidates(s, anchor, n));
    dflash2_walk_candidates(s->sel, anchor, n, smp, draft, q);
    return 0;
}

// Draft ids for the oracle: the reference continuation for the first a positions, then wrong tokens.
static void oracle_propose(const fd_dflash *s, int64_t produced, int32_t *draft) {
    const fd_spec_oracle *o = s->oracle;
    const int a = o->accept[s->st.rounds % o->n_accept];
    const int V = s->dr->vocab_size;
    for (int i = 0; i < s->B - 1; i++) {
        const int64_t j = produced + i;
        const int32_t right = j < o->ref_len ? o->ref[j] : 0;
        draft[i] = i < a ? right : (right + 1) % V;
    }
}

int spec_accept_sampled(fd_sampler *smp, const int32_t *block, int L, const float *q, const float *tl, int V,
                        float *p, int32_t *next) {
    for (int i = 0; i < L - 1; i++) {
        sampler_probs(smp, tl + (int64_t)i * V, V, p);
        const float *qi = q + (int64_t)i * V;
        const int32_t x = block[i + 1];
        if (sampler_uniform(smp) * qi[x] < p[x]) continue; // accepted with probability min(1, p/q)
        double mass = 0;
        for (int v = 0; v < V; v++) mass += p[v] = p[v] > qi[v] ? p[v] - qi[v] : 0.0f;
        if (mass <= 0) sampler_probs(smp, tl + (int64_t)i * V, V, p); // p == q: any draw from p is exact
        *next = sampler_draw(smp, p, V);
        return i;
    }
    sampler_probs(smp, tl + (int64_t)(L - 1) * V, V, p);
    *next = sampler_draw(smp, p, V);
    return L - 1;
}

int dflash_round(fd_dflash *s, int32_t anchor, int L, fd_sampler *smp, int64_t produced, int32_t *emitted,
                 int *n_emitted) {
    fd_engine *t = s->tgt;
    const int V = t->m->cfg.vocab_size;
    const int sampled = smp && !sampler_is_greedy(smp);
    if (L < 1 || L > s->B) return fd_error_set("verify length %d: must be 1..%d", L, s->B);
    if (sampled && s->oracle) return fd_error_set("the oracle drafter is greedy only");
    // the route table users see and set: a tensor-parallel leader's is rank 0's (routes.c)
    fd_engine *rt = t->tp ? engine_tp_rank(t, 0) : t;
    if (rt->spec_verify_sel == 1) return dflash_round_tree(s, anchor, L, smp, produced, emitted, n_emitted);
    int32_t block[FD_SPEC_MAX_BLOCK], draft[FD_SPEC_MAX_BLOCK];
    double t0 = fd_time_s();
    FD_TRY(s->propose(s, anchor, L - 1, sampled ? smp : NULL, draft, sampled ? s->h_q : NULL));
    if (s->oracle) oracle_propose(s, produced, draft);
    double t1 = fd_time_s();
    block[0] = anchor;
    for (int i = 1; i < L; i++) block[i] = draft[i - 1];
    const int64_t n0 = t->n_past;
    // T > 0 needs the target's distributions on the host; greedy only each row's argmax (the same ids as
    // engine_argmax over the logits: lowest index on ties), so B ids cross instead of B x V floats.
    if (sampled)
        FD_TRY(engine_verify(t, block, L, s->h_logits));
    else
        FD_TRY(engine_verify_greedy(t, block, L, s->h_ids));
    routes_count(&rt->routes[FD_ROUTE_SPEC_VERIFY], 0, L);
    double t2 = fd_time_s();
    int acc = 0;
    int32_t next;
    if (sampled) {
        acc = spec_accept_sampled(smp, block, L, s->h_q, s->h_logits, V, s->h_p, &next);
    } else if (s->oracle && s->oracle->force) {
        const int a = s->oracle->accept[s->st.rounds % s->oracle->n_accept];
        acc = a < L - 1 ? a : L - 1;
        next = s->h_ids[acc];
    } else {
        while (acc < L - 1 && s->h_ids[acc] == block[acc + 1]) acc++;
        next = s->h_ids[acc];
    }
    double t3 = fd_time_s();
    engine_commit(t, n0, acc + 1);
    dflash_context_append(s, acc + 1);
    if (s->on_commit) s->on_commit(s->on_commit_ctx, s, acc);
    if (s->phase_sync && t->be->sync) t->be->sync(t->be);
    for (int i = 0; i < acc; i++) emitted[i] = block[i + 1];
    emitted[acc] = next;
    *n_emitted = acc + 1;
    double t4 = fd_time_s();
    s->st.rounds++;
    s->st.draft_tokens += L - 1;
    s->st.accepted += acc;
    s->st.emitted += acc + 1;
    for (int i = 0; i < acc; i++) s->st.accepted_per_pos[i]++;
    s->st.draft_s += t1 - t0;
    s->st.verify_s += t2 - t1;
    s->st.accept_s += t3 - t2;
    s->st.commit_s += t4 - t3;
    s->st.round_s += t4 - t0;
    trace_span(t->be, "round: draft", t0, t1);
    trace_span(t->be, "round: verify", t1, t2);
    trace_span(t->be, "round: accept", t2, t3);
    trace_span(t->be, "round: commit", t3, t4);
    return 0;
}

int dflash_generate(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, int n_new, fd_sampler *smp,
                    int32_t *out) {
    fd_engine *t = s->tgt;
    if (n_new < 1) return 0;
    int32_t anchor, emitted[FD_SPEC_MAX_BLOCK];
    FD_TRY(dflash_prefill(s, ids, n, chunk, smp, &anchor));
    out[0] = anchor;
    int64_t produced = 1;
    while (produced < n_new) {
        // Verify no more tokens than are still wanted (and never past the capacity): with L tokens the round
        // emits at most L.
        int64_t L = s->B;
        if (L > n_new - produced) L = n_new - produced;
        if (L > t->opt.capacity - t->n_past) L = t->opt.capacity - t->n_past;
        if (L < 1) return fd_error_set("context capacity of %lld tokens reached", (long long)t->opt.capacity);
        int got;
        FD_TRY(dflash_round(s, anchor, (int)L, smp, produced, emitted, &got));
        for (int i = 0; i < got && produced < n_new; i++) out[produced++] = emitted[i];
        anchor = emitted[got - 1];
    }
    return 0;
}

void dflash_print_stats(const fd_dflash *s, FILE *f) {
    const fd_spec_stats *st = &s->st;
    const double r = st->rounds ? (double)st->rounds : 1.0;
    fprintf(f, "spec: %s drafter, block %d: %lld rounds, %lld draft tokens, %lld accepted\n",
            s->oracle ? "ORACLE" : s->variant->name, s->B, (long long)st->rounds, (long long)st->draft_tokens,
            (long long)st->accepted);
    fprintf(f,
            "spec: accepted drafts/round %.3f, emitted tokens/round %.3f, round %.3f ms (draft %.3f, verify %.3f, "
            "accept %.3f, commit %.3f)\n",
            (double)st->accepted / r, (double)st->emitted / r, 1e3 * st->round_s / r, 1e3 * st->draft_s / r,
            1e3 * st->verify_s / r, 1e3 * st->accept_s / r, 1e3 * st->commit_s / r);
    if (st->tree_rounds)
        fprintf(f, "spec: tree verify (budget %d): %lld tree rounds, nodes verified/round %.3f, accepted depth/round "
                   "%.3f\n",
                s->tree_budget, (long long)st->tree_rounds, (double)st->draft_tokens / r + 1.0,
                (double)st->accepted / r);
    fprintf(f, "spec: accepted per position:");
    for (int i = 0; i < s->B - 1; i++) fprintf(f, " %lld", (long long)st->accepted_per_pos[i]);
    fprintf(f, "\n");
}
