// DFlash2 draft-forward hooks and the candidate selector (see dflash2.h). The forward goes through the backend;
// the selector walk runs on the host: per position it touches only top_k candidates of rank-R codebook rows,
// and the codebooks ([V, R], the largest DFlash2 tensors) are read from the mmap, never uploaded.
#include "engine/dflash2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fd_dflash2_state {
    float *dyn;      // backend f32 [B, 2 K G]: the current sublayer's dynamic taps (pre | post)
    void *tmp;       // backend act [B, d]: conv output
    float *gate_dev; // backend f32 [B, R]: W_h h of the draft positions
    float *gate;     // host [B, R]
    float *a, *b;    // host [R]: one codebook row each
} fd_dflash2_state;

int dflash2_init(fd_dflash *s) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const fd_dflash2 *m = d->v2;
    if (!be->dyn_conv || !be->attention_window)
        return fd_error_set("the %s backend does not implement the DFlash2 drafter ops (dyn_conv, attention_window); "
                            "run DFlash2 drafters with --backend cpu", be->name);
    fd_dflash2_state *st = s->v2 = fd_calloc(1, sizeof *s->v2);
    const int64_t G = d->hidden_size / m->conv_group;
    st->dyn = be->alloc(be, (size_t)s->B * 2 * m->conv_kernel * G * sizeof(float));
    st->tmp = be->alloc(be, (size_t)s->B * d->hidden_size * be->act_bytes);
    st->gate_dev = be->alloc(be, (size_t)s->B * m->rank * sizeof(float));
    st->gate = fd_malloc((size_t)s->B * m->rank * sizeof(float));
    st->a = fd_malloc((size_t)m->rank * sizeof(float));
    st->b = fd_malloc((size_t)m->rank * sizeof(float));
    return 0;
}

void dflash2_release(fd_dflash *s) {
    fd_dflash2_state *st = s->v2;
    if (!st) return;
    s->be->free(s->be, st->dyn);
    s->be->free(s->be, st->tmp);
    s->be->free(s->be, st->gate_dev);
    free(st->gate);
    free(st->a);
    free(st->b);
    free(st);
    s->v2 = NULL;
}

static const fd_dflash2_conv *conv_of(const fd_dflash *s, int l, int mlp) {
    const fd_dflash2 *m = s->dr->v2;
    return mlp ? &m->mlp_conv[l] : &m->attn_conv[l];
}

void dflash2_conv_in(fd_dflash *s, int l, int mlp, void *h) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const fd_dflash2 *m = d->v2;
    const fd_dflash2_conv *c = conv_of(s, l, mlp);
    const int K = m->conv_kernel, G = d->hidden_size / m->conv_group;
    // One projection of the sublayer input gives the taps for both sides of the sublayer; keep the post half
    // in st->dyn for dflash2_conv_out.
    be->matmul(be, s->v2->dyn, h, &c->proj, s->B, 1);
    be->dyn_conv(be, s->v2->tmp, h, s->v2->dyn, 2 * K * G, &c->base, 0, s->B, d->hidden_size, m->conv_group, K);
    be->copy(be, h, s->v2->tmp, (size_t)s->B * d->hidden_size * be->act_bytes);
}

void dflash2_conv_out(fd_dflash *s, int l, int mlp, void *y) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const fd_dflash2 *m = d->v2;
    const int K = m->conv_kernel, G = d->hidden_size / m->conv_group;
    be->dyn_conv(be, s->v2->tmp, y, s->v2->dyn + (size_t)K * G, 2 * K * G, &conv_of(s, l, mlp)->base, 1, s->B,
                 d->hidden_size, m->conv_group, K);
    be->copy(be, y, s->v2->tmp, (size_t)s->B * d->hidden_size * be->act_bytes);
}

void dflash2_attention(fd_dflash *s, int l) {
    fd_backend *be = s->be;
    const fd_drafter *d = s->dr;
    const int w = d->v2->window[l];
    const float scale = 1.0f / sqrtf((float)d->head_dim);
    // Keys run from position 0 to the block's last query (n_ctx + B - 1 apart at most): a window wider than that
    // masks nothing, and the plain attention is the same computation.
    const fd_kv_view kv = fd_kv_flat(s->kv[l], s->capacity);
    if (!w || s->n_ctx + s->B <= w)
        be->attention(be, s->att, s->q, &kv, s->n_ctx, NULL, s->B, d->num_heads, d->num_kv_heads, d->head_dim, scale,
                      0);
    else
        be->attention_window(be, s->att, s->q, &kv, s->n_ctx, s->B, d->num_heads, d->num_kv_heads, d->head_dim, scale,
                             w);
}

static void w_row(const fd_weight *w, int64_t row, float *out) { fd_weight_f32(w, row * w->cols, w->cols, out); }

// The K largest entries of row [V] in descending order (the earlier index first among equals).
static void top_k(const float *row, int V, int K, int32_t *cand, float *unary) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        const float x = row[v];
        if (n == K && !(x > unary[K - 1])) continue;
        int j = n < K ? n++ : K - 1;
        while (j > 0 && x > unary[j - 1]) {
            unary[j] = unary[j - 1];
            cand[j] = cand[j - 1];
            j--;
        }
        unary[j] = x;
        cand[j] = v;
    }
    for (; n < K; n++) { // only when NaNs fill the row: keep every candidate a valid token id
        unary[n] = -INFINITY;
        cand[n] = n;
    }
}

// W_h h for the first n draft rows (s->h holds the final-normed hidden of the B-1 draft positions).
static void selector_gate(fd_dflash *s, int n) {
    fd_backend *be = s->be;
    const fd_dflash2 *m = s->dr->v2;
    be->matmul(be, s->v2->gate_dev, s->h, &m->hidden_proj, n, 1);
    be->to_host(be, s->v2->gate, s->v2->gate_dev, (size_t)n * m->rank * sizeof(float));
}

// score_k = unary_k + <A[pred] * gate, B[cand_k]>
static void pair_scores(fd_dflash *s, int32_t pred, const float *gate, const int32_t *cand, const float *unary,
                        float *scores) {
    const fd_dflash2 *m = s->dr->v2;
    fd_dflash2_state *st = s->v2;
    const int R = m->rank;
    w_row(&m->pred_codebook, pred, st->a);
    for (int r = 0; r < R; r++) st->a[r] *= gate[r];
    for (int k = 0; k < m->top_k; k++) {
        w_row(&m->succ_codebook, cand[k], st->b);
        float dot = 0;
        for (int r = 0; r < R; r++) dot += st->a[r] * st->b[r];
        scores[k] = unary[k] + dot;
    }
}

void dflash2_scores(fd_dflash *s, const float *logits, const int32_t *preds, int n, int32_t *cand, float *scores) {
    const fd_dflash2 *m = s->dr->v2;
    const int V = s->dr->vocab_size, K = m->top_k;
    float unary[FD_DFLASH2_MAX_TOPK];
    selector_gate(s, n);
    for (int i = 0; i < n; i++) {
        top_k(logits + (int64_t)i * V, V, K, cand + i * K, unary);
        pair_scores(s, preds[i], s->v2->gate + (int64_t)i * m->rank, cand + i * K, unary, scores + i * K);
    }
}

void dflash2_walk(fd_dflash *s, int32_t anchor, const float *logits, int n, fd_sampler *smp, int32_t *path,
                  float *q) {
    const fd_dflash2 *m = s->dr->v2;
    const int V = s->dr->vocab_size, K = m->top_k;
    const int sampled = smp && !sampler_is_greedy(smp);
    int32_t cand[FD_DFLASH2_MAX_TOPK];
    float unary[FD_DFLASH2_MAX_TOPK], score[FD_DFLASH2_MAX_TOPK], prob[FD_DFLASH2_MAX_TOPK];
    if (n < 1) return;
    selector_gate(s, n);
    int32_t pred = anchor;
    for (int i = 0; i < n; i++) {
        // row i of logits is read here, before row i of q (which may alias it) is written
        top_k(logits + (int64_t)i * V, V, K, cand, unary);
        pair_scores(s, pred, s->v2->gate + (int64_t)i * m->rank, cand, unary, score);
        int pick = 0;
        if (sampled) {
            float mx = score[0];
            for (int k = 1; k < K; k++) mx = score[k] > mx ? score[k] : mx;
            double sum = 0;
            for (int k = 0; k < K; k++) sum += prob[k] = expf((score[k] - mx) / smp->temperature);
            for (int k = 0; k < K; k++) prob[k] = (float)(prob[k] / sum);
            pick = sampler_draw(smp, prob, K);
            if (q) {
                float *row = q + (int64_t)i * V;
                memset(row, 0, sizeof(float) * (size_t)V);
                for (int k = 0; k < K; k++) row[cand[k]] = prob[k];
            }
        } else {
            for (int k = 1; k < K; k++)
                if (score[k] > score[pick]) pick = k;
        }
        path[i] = pred = cand[pick];
    }
}

int dflash2_propose(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q) {
    // the walk needs the logits even when greedy; s->h_q ([B, V] host) holds them, and q may be that buffer
    FD_TRY(dflash_draft(s, anchor, draft, s->h_q));
    dflash2_walk(s, anchor, s->h_q, n, smp, draft, q);
    return 0;
}
