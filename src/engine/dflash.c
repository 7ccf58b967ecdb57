// DFlash round on top of the target engine (see dflash.h). Every op goes through the backend interface.
#include "engine/dflash.h"

#include "engine/dflash2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

int dflash_init(fd_dflash *s, fd_engine *tgt, fd_drafter *dr, int block_size) {
    memset(s, 0, sizeof *s);
    s->tgt = tgt;
    s->dr = dr;
    s->be = tgt->be;
    s->B = block_size > 0 ? block_size : dr->block_size;
    if (s->B < 2 || s->B > FD_SPEC_MAX_BLOCK)
        return fd_error_set("block size %d: must be 2..%d", s->B, FD_SPEC_MAX_BLOCK);
    if (s->B > tgt->opt.max_batch)
        return fd_error_set("block size %d exceeds the prefill token budget %d", s->B, tgt->opt.max_batch);
    FD_TRY(engine_set_taps(tgt, dr->target_layer_ids, dr->n_taps));
    FD_TRY(engine_enable_slots(tgt, s->B));
    fd_backend *be = s->be;
    const int64_t ab = be->act_bytes, D = dr->hidden_size, rows = imax(tgt->opt.max_batch, s->B);
    const int64_t qw = (int64_t)dr->num_heads * dr->head_dim, kw = (int64_t)dr->num_kv_heads * dr->head_dim;
    s->capacity = tgt->opt.capacity + s->B;
    s->kv = fd_calloc((size_t)dr->num_layers, sizeof(void *));
    for (int i = 0; i < dr->num_layers; i++)
        s->kv[i] = be->alloc(be, be->kv_bytes_per_token(be, dr->num_kv_heads, dr->head_dim) * (size_t)s->capacity);
    s->ctx = be->alloc(be, (size_t)(rows * D * ab));
    s->k = be->alloc(be, (size_t)(rows * kw * ab));
    s->v = be->alloc(be, (size_t)(rows * kw * ab));
    s->x = be->alloc(be, (size_t)(s->B * D * ab));
    s->h = be->alloc(be, (size_t)(s->B * D * ab));
    s->y = be->alloc(be, (size_t)(s->B * D * ab));
    s->q = be->alloc(be, (size_t)(s->B * qw * ab));
    s->att = be->alloc(be, (size_t)(s->B * qw * ab));
    s->g = be->alloc(be, (size_t)(s->B * dr->intermediate_size * ab));
    s->u = be->alloc(be, (size_t)(s->B * dr->intermediate_size * ab));
    s->logits_dev = be->alloc(be, (size_t)(s->B - 1) * dr->vocab_size * sizeof(float));
    s->ids_dev = be->alloc(be, (size_t)s->B * sizeof(int32_t));
    s->h_logits = fd_malloc((size_t)s->B * dr->vocab_size * sizeof(float));
    s->h_q = fd_malloc((size_t)s->B * dr->vocab_size * sizeof(float));
    s->h_p = fd_malloc((size_t)dr->vocab_size * sizeof(float));
    if (dr->v2 && dflash2_init(s)) {
        dflash_free(s);
        return -1;
    }
    return 0;
}

void dflash_free(fd_dflash *s) {
    fd_backend *be = s->be;
    if (!be) return;
    dflash2_release(s);
    for (int i = 0; s->kv && i < s->dr->num_layers; i++) be->free(be, s->kv[i]);
    free(s->kv);
    void *bufs[] = {s->ctx, s->k, s->v, s->x, s->h, s->y, s->q, s->att, s->g, s->u, s->logits_dev, s->ids_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    free(s->h_logits);
    free(s->h_q);
    free(s->h_p);
    memset(s, 0, sizeof *s);
}

void dflash_reset(fd_dflash *s) {
    s->n_ctx = 0; // stale draft K/V past n_ctx is never read
    memset(&s->st, 0, sizeof s->st);
}

// K and V projections of `m` rows (in s->k, s->v) for drafter layer l, normed and rotated, stored at positions
// pos0..
static void draft_kv_store(fd_dflash *s, int l, int m, int64_t pos0) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const fd_draft_layer *L = &d->layers[l];
    be->rmsnorm(be, s->k, s->k, &L->k_norm, (int64_t)m * d->num_kv_heads, d->head_dim, d->rms_norm_eps, 0);
    be->rope(be, s->k, m, d->num_kv_heads, d->head_dim, d->rotary_dim, d->rope_theta, pos0, NULL);
    const fd_kv_view kv = fd_kv_flat(s->kv[l], s->capacity);
    be->kv_store(be, &kv, s->k, s->v, pos0, NULL, m, d->num_kv_heads, d->head_dim);
}

// K and V of `m` rows of `src` [m, d] for drafter layer l (draft_kv_store).
static void draft_kv(fd_dflash *s, int l, const void *src, int m, int64_t pos0) {
    const fd_draft_layer *L = &s->dr->layers[l];
    void *const outs[] = {s->k, s->v};
    const fd_weight *const Ws[] = {&L->k_proj, &L->v_proj};
    s->be->matmul_multi(s->be, outs, Ws, 2, src, m);
    draft_kv_store(s, l, m, pos0);
}

void dflash_context_append(fd_dflash *s, int m) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    FD_CHECK(m >= 1 && s->n_ctx + m <= s->capacity, "context append of %d at %lld", m, (long long)s->n_ctx);
    // context feature: concat(taps) -> fc -> hidden_norm (plain RMSNorm), then every layer's own K/V
    be->matmul(be, s->ctx, s->tgt->taps, &d->fc, m, 0);
    be->rmsnorm(be, s->ctx, s->ctx, &d->hidden_norm, m, d->hidden_size, d->rms_norm_eps, 0);
    for (int l = 0; l < d->num_layers; l++) draft_kv(s, l, s->ctx, m, s->n_ctx);
    s->n_ctx += m;
}

int dflash_draft(fd_dflash *s, int32_t anchor, int32_t *draft_ids, float *logits) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const int B = s->B, D = d->hidden_size, V = d->vocab_size, H = d->num_heads, hd = d->head_dim;
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
    be->embed(be, s->x, &s->tgt->m->embed, s->ids_dev, B);
    for (int l = 0; l < d->num_layers; l++) {
        const fd_draft_layer *L = &d->layers[l];
        be->rmsnorm(be, s->h, s->x, &L->input_norm, B, D, d->rms_norm_eps, 0);
        if (s->v2) dflash2_conv_in(s, l, 0, s->h); // DFlash2: dynamic conv before and after each sublayer
        {
            void *const outs[] = {s->q, s->k, s->v};
            const fd_weight *const Ws[] = {&L->q_proj, &L->k_proj, &L->v_proj};
            be->matmul_multi(be, outs, Ws, 3, s->h, B);
        }
        be->rmsnorm(be, s->q, s->q, &L->q_norm, (int64_t)B * H, hd, d->rms_norm_eps, 0);
        be->rope(be, s->q, B, H, hd, d->rotary_dim, d->rope_theta, s->n_ctx, NULL);
        // The block's own K/V go after the context; the next context append overwrites them.
        draft_kv_store(s, l, B, s->n_ctx);
        if (s->v2)
            dflash2_attention(s, l); // sliding-window layers
        else {
            const fd_kv_view kv = fd_kv_flat(s->kv[l], s->capacity);
            be->attention(be, s->att, s->q, &kv, s->n_ctx, NULL, B, H, d->num_kv_heads, hd, 1.0f / sqrtf((float)hd), 0);
        }
        be->matmul(be, s->y, s->att, &L->o_proj, B, 0);
        if (s->v2) dflash2_conv_out(s, l, 0, s->y);
        be->add(be, s->x, s->y, (int64_t)B * D);
        be->rmsnorm(be, s->h, s->x, &L->post_norm, B, D, d->rms_norm_eps, 0);
        if (s->v2) dflash2_conv_in(s, l, 1, s->h);
        {
            void *const outs[] = {s->g, s->u};
            const fd_weight *const Ws[] = {&L->gate_proj, &L->up_proj};
            be->matmul_multi(be, outs, Ws, 2, s->h, B);
        }
        be->silu_mul(be, s->g, s->g, s->u, (int64_t)B * d->intermediate_size);
        be->matmul(be, s->y, s->g, &L->down_proj, B, 0);
        if (s->v2) dflash2_conv_out(s, l, 1, s->y);
        be->add(be, s->x, s->y, (int64_t)B * D);
    }
    // logits of the B-1 positions after the anchor through the target's LM head
    const void *rows = (const char *)s->x + (size_t)D * be->act_bytes;
    be->rmsnorm(be, s->h, rows, &d->norm, B - 1, D, d->rms_norm_eps, 0);
    be->matmul(be, s->logits_dev, s->h, &s->tgt->m->lm_head, B - 1, 1);
    float *host = logits ? logits : fd_malloc((size_t)(B - 1) * V * sizeof(float));
    be->to_host(be, host, s->logits_dev, (size_t)(B - 1) * V * sizeof(float));
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
    int32_t block[FD_SPEC_MAX_BLOCK], draft[FD_SPEC_MAX_BLOCK];
    double t0 = fd_time_s();
    if (s->v2) // DFlash2: the candidate selector's walk proposes (q: its softmax over each step's candidates)
        FD_TRY(dflash2_propose(s, anchor, L - 1, sampled ? smp : NULL, draft, sampled ? s->h_q : NULL));
    else
        FD_TRY(dflash_draft(s, anchor, draft, sampled ? s->h_q : NULL));
    if (sampled && !s->v2) // each row becomes q_i, the distribution its draft is drawn from
        for (int i = 0; i < L - 1; i++) {
            float *row = s->h_q + (int64_t)i * V;
            sampler_probs(smp, row, V, s->h_p);
            memcpy(row, s->h_p, sizeof(float) * (size_t)V);
            draft[i] = sampler_draw(smp, row, V);
        }
    if (s->oracle) oracle_propose(s, produced, draft);
    double t1 = fd_time_s();
    block[0] = anchor;
    for (int i = 1; i < L; i++) block[i] = draft[i - 1];
    const int64_t n0 = t->n_past;
    FD_TRY(engine_verify(t, block, L, s->h_logits));
    int acc = 0;
    int32_t next;
    if (sampled) {
        acc = spec_accept_sampled(smp, block, L, s->h_q, s->h_logits, V, s->h_p, &next);
    } else if (s->oracle && s->oracle->force) {
        const int a = s->oracle->accept[s->st.rounds % s->oracle->n_accept];
        acc = a < L - 1 ? a : L - 1;
        next = engine_argmax(s->h_logits + (int64_t)acc * V, V);
    } else {
        while (acc < L - 1 && engine_argmax(s->h_logits + (int64_t)acc * V, V) == block[acc + 1]) acc++;
        next = engine_argmax(s->h_logits + (int64_t)acc * V, V);
    }
    engine_commit(t, n0, acc + 1);
    dflash_context_append(s, acc + 1);
    if (s->on_commit) s->on_commit(s->on_commit_ctx, s, acc);
    for (int i = 0; i < acc; i++) emitted[i] = block[i + 1];
    emitted[acc] = next;
    *n_emitted = acc + 1;
    double t2 = fd_time_s();
    s->st.rounds++;
    s->st.draft_tokens += L - 1;
    s->st.accepted += acc;
    s->st.emitted += acc + 1;
    for (int i = 0; i < acc; i++) s->st.accepted_per_pos[i]++;
    s->st.draft_s += t1 - t0;
    s->st.verify_s += t2 - t1;
    s->st.round_s += t2 - t0;
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
            s->oracle ? "ORACLE" : s->v2 ? "dflash2" : "dflash", s->B, (long long)st->rounds, (long long)st->draft_tokens,
            (long long)st->accepted);
    fprintf(f, "spec: accepted drafts/round %.3f, emitted tokens/round %.3f, round %.3f ms (draft %.3f, verify %.3f)\n",
            (double)st->accepted / r, (double)st->emitted / r, 1e3 * st->round_s / r, 1e3 * st->draft_s / r,
            1e3 * st->verify_s / r);
    fprintf(f, "spec: accepted per position:");
    for (int i = 0; i < s->B - 1; i++) fprintf(f, " %lld", (long long)st->accepted_per_pos[i]);
    fprintf(f, "\n");
}
