// DFlash2's candidate selector (see dflash2.h).
#include "engine/dflash2.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/sample_math.h"

void dflash2_selector_init(fd_dflash2_selector *sel, fd_backend *be, const fd_drafter *dr, const void *hidden, int B) {
    const int R = dr->v2->rank;
    sel->be = be;
    sel->dr = dr;
    sel->hidden = hidden;
    sel->gate_dev = be->alloc(be, (size_t)B * R * sizeof(float));
    sel->gate = fd_malloc((size_t)B * R * sizeof(float));
    sel->a = fd_malloc((size_t)R * sizeof(float));
    sel->b = fd_malloc((size_t)R * sizeof(float));
    sel->cand = fd_malloc((size_t)B * dr->v2->top_k * sizeof(int32_t));
    sel->unary = fd_malloc((size_t)B * dr->v2->top_k * sizeof(float));
}

void dflash2_selector_free(fd_dflash2_selector *sel) {
    if (!sel->be) return;
    sel->be->free(sel->be, sel->gate_dev);
    free(sel->gate);
    free(sel->a);
    free(sel->b);
    free(sel->cand);
    free(sel->unary);
    memset(sel, 0, sizeof *sel);
}

static void w_row(const fd_weight *w, int64_t row, float *out) { fd_weight_f32(w, row * w->cols, w->cols, out); }

// W_h h for the first n draft rows (s->hidden holds the final-normed hidden of the B-1 draft positions).
static void selector_gate(fd_dflash2_selector *s, int n) {
    fd_backend *be = s->be;
    const fd_dflash2 *m = s->dr->v2;
    be->matmul(be, s->gate_dev, s->hidden, &m->hidden_proj, n, 1);
    be->to_host(be, s->gate, s->gate_dev, (size_t)n * m->rank * sizeof(float));
}

// score_k = unary_k + <A[pred] * gate, B[cand_k]>
static void pair_scores(fd_dflash2_selector *st, int32_t pred, const float *gate, const int32_t *cand,
                        const float *unary, float *scores) {
    const fd_dflash2 *m = st->dr->v2;
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

void dflash2_scores(fd_dflash2_selector *s, const float *logits, const int32_t *preds, int n, int32_t *cand,
                    float *scores) {
    const fd_dflash2 *m = s->dr->v2;
    const int V = s->dr->vocab_size, K = m->top_k;
    float unary[FD_DFLASH2_MAX_TOPK];
    selector_gate(s, n);
    for (int i = 0; i < n; i++) {
        top_k_row(logits + (int64_t)i * V, V, K, cand + i * K, unary);
        pair_scores(s, preds[i], s->gate + (int64_t)i * m->rank, cand + i * K, unary, scores + i * K);
    }
}

void dflash2_prepare(fd_dflash2_selector *s, int n) {
    selector_gate(s, n);
}

void dflash2_child_scores(fd_dflash2_selector *s, int i, int32_t pred, float *scores) {
    const fd_dflash2 *m = s->dr->v2;
    pair_scores(s, pred, s->gate + (int64_t)i * m->rank, s->cand + i * m->top_k, s->unary + i * m->top_k, scores);
}

void dflash2_candidates(fd_dflash2_selector *s, const float *logits, int n) {
    const int V = s->dr->vocab_size, K = s->dr->v2->top_k;
    for (int i = 0; i < n; i++) top_k_row(logits + (int64_t)i * V, V, K, s->cand + i * K, s->unary + i * K);
}

void dflash2_walk(fd_dflash2_selector *s, int32_t anchor, const float *logits, int n, fd_sampler *smp,
                  int32_t *path, float *q) {
    dflash2_candidates(s, logits, n);
    dflash2_walk_candidates(s, anchor, n, smp, path, q); // logits are read above, so q may alias them
}

void dflash2_walk_candidates(fd_dflash2_selector *s, int32_t anchor, int n, fd_sampler *smp, int32_t *path,
                             float *q) {
    const fd_dflash2 *m = s->dr->v2;
    const int V = s->dr->vocab_size, K = m->top_k;
    const int sampled = smp && !sampler_is_greedy(smp);
    float score[FD_DFLASH2_MAX_TOPK], prob[FD_DFLASH2_MAX_TOPK];
    if (n < 1) return;
    selector_gate(s, n);
    int32_t pred = anchor;
    for (int i = 0; i < n; i++) {
        const int32_t *cand = s->cand + i * K;
        pair_scores(s, pred, s->gate + (int64_t)i * m->rank, cand, s->unary + i * K, score);
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
