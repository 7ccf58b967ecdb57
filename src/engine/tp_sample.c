// Sampling over vocabulary slices without a gather (see tp_sample.h). Every step below mirrors one of sample_probs'
// or sample_draw_u's (base/sample_math.c): the same float expressions and the same double sums in the same order,
// so the combined pick is sample_row's.
#include "engine/tp_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/engine_tp.h"

#define TOPP_FIRST_K 64 // a top-p-only row's first request per rank: a peaked nucleus fits, a flat one asks again

static int64_t gathered_bytes;

int64_t tp_sample_gathered_bytes(void) { return __atomic_load_n(&gathered_bytes, __ATOMIC_RELAXED); }

typedef struct {
    float T, P; // temperature (0: greedy), top-p (1: off)
    int K;      // top-k (0: off, as top_k >= V)
    double u;
} row_params;

// sample_probs' reading of the parameters: out-of-range values mean "off".
static row_params norm_params(const fd_sample_params *p, int V, double u) {
    return (row_params){p->temperature > 0 ? p->temperature : 0, p->top_p > 0 && p->top_p < 1 ? p->top_p : 1,
                        p->top_k > 0 && p->top_k < V ? p->top_k : 0, u};
}

typedef struct {
    int32_t id;
    float logit, q; // q: the token's probability as sample_probs holds it before top-k / top-p
} cand;

static int by_prob_desc(const void *a, const void *b) { // sample_probs' ranking: ties to the lower index
    const cand *x = a, *y = b;
    if (x->q != y->q) return x->q < y->q ? 1 : -1;
    return x->id - y->id;
}
static int by_id(const void *a, const void *b) { return ((const cand *)a)->id - ((const cand *)b)->id; }

// What one row's candidates are: n pairs from the ranks, and per rank whether it sent its whole slice and, if not,
// the probability of its last sent pair (every unsent token of that rank is at most that likely).
typedef struct {
    cand *c;
    int n;
    int exhausted[FD_TP_MAX];
    float bound[FD_TP_MAX];
} cand_set;

// Whether no unsent token can rank before candidate x (sample_probs' order: probability, then the lower index).
// A zero probability is settled either way: such tokens add exact zeros to every sum and are never drawn.
static int settled(const cand_set *cs, const tp_slice *sl, int tp, const cand *x) {
    if (!(x->q > 0)) return 1;
    for (int r = 0; r < tp; r++)
        if (!cs->exhausted[r] && !(cs->bound[r] < x->q || (cs->bound[r] == x->q && sl[r].vocab_begin > x->id)))
            return 0;
    return 1;
}

// sample_probs' top-k / top-p tail and sample_draw_u over the candidates: the pick, or -1 when the candidates do not
// settle the kept set. mass_all: the row's total probability (top-p alone; tp_sample.h says how it is summed).
static int32_t draw_candidates(cand_set *cs, const tp_slice *sl, int tp, int V, const row_params *rp, float mx,
                               double sum, double mass_all) {
    for (int j = 0; j < cs->n; j++) {
        const float e = expf((cs->c[j].logit - mx) / rp->T);
        cs->c[j].q = (float)(e / sum);
    }
    qsort(cs->c, (size_t)cs->n, sizeof(cand), by_prob_desc);
    int settled_n = 0; // the settled prefix of the ranking (settled is monotone along it)
    while (settled_n < cs->n && settled(cs, sl, tp, &cs->c[settled_n])) settled_n++;
    int keep;
    if (rp->K) {
        if (settled_n < rp->K) return -1;
        keep = rp->K;
        if (rp->P < 1) {
            double kept = 0;
            for (int j = 0; j < keep; j++) kept += cs->c[j].q;
            double cum = 0;
            int n = 0;
            while (n < keep) {
                cum += cs->c[n++].q / kept;
                if (cum >= rp->P) break;
            }
            keep = n;
        }
    } else { // top-p alone: the nucleus over the whole row's mass
        double cum = 0;
        int n = 0, reached = 0;
        while (n < settled_n && !reached) {
            cum += cs->c[n++].q / mass_all;
            reached = cum >= rp->P;
        }
        if (!reached && settled_n < V) return -1; // the nucleus may go on past what the ranks sent
        keep = n;
    }
    double kept = 0;
    for (int j = 0; j < keep; j++) kept += cs->c[j].q;
    for (int j = 0; j < keep; j++) cs->c[j].q = (float)(cs->c[j].q / kept);
    qsort(cs->c, (size_t)keep, sizeof(cand), by_id); // sample_draw_u walks in index order; the rest are exact zeros
    double total = 0;
    for (int j = 0; j < keep; j++) total += cs->c[j].q;
    const double u = rp->u * total;
    double cum = 0;
    int32_t last = 0;
    for (int j = 0; j < keep; j++) {
        if (cs->c[j].q <= 0) continue;
        cum += cs->c[j].q;
        last = cs->c[j].id;
        if (u < cum) return cs->c[j].id;
    }
    return last;
}

// Row i's k best pairs of every rank into cs (ids made global); the per-rank lists come from ids/vals laid out
// [rank][row][kc] when given (the batch's first request), else from one topk_rows call per rank for this row.
static void collect(cand_set *cs, const tp_slice *sl, int tp, int i, int kc, const int32_t *ids, const float *vals,
                    int rows, int32_t *tmp_ids, float *tmp_vals) {
    cs->n = 0;
    for (int r = 0; r < tp; r++) {
        const int Vl = sl[r].vocab_end - sl[r].vocab_begin, k = kc < Vl ? kc : Vl;
        const int32_t *ri = tmp_ids;
        const float *rv = tmp_vals;
        if (ids) {
            ri = ids + ((size_t)r * rows + i) * kc;
            rv = vals + ((size_t)r * rows + i) * kc;
        } else {
            sl[r].be->topk_rows(sl[r].be, tmp_ids, tmp_vals, sl[r].logits_dev + (size_t)i * Vl, 1, Vl, k);
        }
        for (int j = 0; j < k; j++) cs->c[cs->n++] = (cand){ri[j] + sl[r].vocab_begin, rv[j], 0};
        cs->exhausted[r] = k == Vl;
        cs->bound[r] = rv[k - 1]; // a logit here; draw_candidates turns it into a probability
    }
}

// The fallback: row i's slices to the host, sampled there by sample_row itself.
static int32_t gather_row(const tp_slice *sl, int tp, int i, int V, const fd_sample_params *p, double u) {
    float *row = fd_malloc(sizeof(float) * (size_t)V * 2);
    for (int r = 0; r < tp; r++) {
        const int Vl = sl[r].vocab_end - sl[r].vocab_begin;
        sl[r].be->to_host(sl[r].be, row + sl[r].vocab_begin, sl[r].logits_dev + (size_t)i * Vl,
                          sizeof(float) * (size_t)Vl);
    }
    __atomic_fetch_add(&gathered_bytes, (int64_t)sizeof(float) * V, __ATOMIC_RELAXED);
    const int32_t id = sample_row(p, row, V, u, row + V);
    free(row);
    return id;
}

// One softmax_scan_rows over every rank in order, acc chained from 0: rank_acc[r * rows + i] = the sum after rank r,
// last[r * rows + i] its pick code (NULL: not wanted). Rows whose temp is 0 are skipped.
static void chained_scan(const tp_slice *sl, int tp, int rows, const float *mx, const float *temp, const double *div,
                         double *acc, double *rank_acc, int32_t *last) {
    for (int i = 0; i < rows; i++) acc[i] = 0;
    for (int r = 0; r < tp; r++) {
        const int Vl = sl[r].vocab_end - sl[r].vocab_begin;
        sl[r].be->softmax_scan_rows(sl[r].be, acc, last ? last + (size_t)r * rows : NULL, sl[r].logits_dev, rows, Vl,
                                    mx, temp, div, NULL);
        if (rank_acc) memcpy(rank_acc + (size_t)r * rows, acc, sizeof(double) * (size_t)rows);
    }
}

void tp_sample_rows(const tp_slice *sl, int tp, int rows, int V, const fd_sample_params *params,
                    const double *uniforms, int32_t *out) {
    FD_CHECK(tp >= 1 && tp <= FD_TP_MAX && rows >= 0, "tp_sample_rows: %d ranks, %d rows", tp, rows);
    if (rows == 0) return;
    int ops = 1;
    for (int r = 0; r < tp; r++) ops &= sl[r].be->topk_rows && sl[r].be->softmax_scan_rows;
    row_params *rp = fd_malloc(sizeof *rp * (size_t)rows);
    int kc = 1;
    for (int i = 0; i < rows; i++) {
        FD_CHECK(!(params[i].temperature > 0) || uniforms, "tp_sample_rows: row %d samples but has no uniform", i);
        rp[i] = norm_params(&params[i], V, params[i].temperature > 0 ? uniforms[i] : 0);
        const int need = !rp[i].T ? 1 : rp[i].K ? rp[i].K + 1 : rp[i].P < 1 ? TOPP_FIRST_K : 1;
        kc = need > kc ? need : kc;
    }
    if (!ops) {
        for (int i = 0; i < rows; i++) out[i] = gather_row(sl, tp, i, V, &params[i], rp[i].u);
        free(rp);
        return;
    }
    kc = kc < FD_TOPK_ROWS_MAX ? kc : FD_TOPK_ROWS_MAX;
    // 1. Every rank's kc best pairs of every row (k = kc, or the whole slice where smaller): the greedy picks, the
    //    row maxima, the first candidates.
    int32_t *ids = fd_malloc(sizeof(int32_t) * (size_t)tp * rows * kc);
    float *vals = fd_malloc(sizeof(float) * (size_t)tp * rows * kc);
    for (int r = 0; r < tp; r++) {
        const int Vl = sl[r].vocab_end - sl[r].vocab_begin, k = kc < Vl ? kc : Vl;
        int32_t *ri = fd_malloc(sizeof(int32_t) * (size_t)rows * k);
        float *rv = fd_malloc(sizeof(float) * (size_t)rows * k);
        sl[r].be->topk_rows(sl[r].be, ri, rv, sl[r].logits_dev, rows, Vl, k);
        for (int i = 0; i < rows; i++) { // restride [row][k] to [row][kc]
            memcpy(ids + ((size_t)r * rows + i) * kc, ri + (size_t)i * k, sizeof(int32_t) * (size_t)k);
            memcpy(vals + ((size_t)r * rows + i) * kc, rv + (size_t)i * k, sizeof(float) * (size_t)k);
        }
        free(ri);
        free(rv);
    }
    float *mx = fd_malloc(sizeof(float) * (size_t)rows), *temp = fd_malloc(sizeof(float) * (size_t)rows);
    for (int i = 0; i < rows; i++) {
        int best = 0; // strictly larger only: the lower rank (the lower ids) keeps a tie, as argmax
        for (int r = 1; r < tp; r++)
            if (vals[((size_t)r * rows + i) * kc] > vals[((size_t)best * rows + i) * kc]) best = r;
        mx[i] = vals[((size_t)best * rows + i) * kc];
        out[i] = ids[((size_t)best * rows + i) * kc] + sl[best].vocab_begin; // the greedy pick
        temp[i] = rp[i].T;
    }
    // 2. sample_probs' sum of exp((x - max) / T), chained over the ranks in vocabulary order.
    double *sum = fd_malloc(sizeof(double) * (size_t)rows), *div = fd_calloc((size_t)rows, sizeof(double));
    chained_scan(sl, tp, rows, mx, temp, div, sum, NULL, NULL);
    // 3. The probabilities' total (sample_draw_u's for full rows, the nucleus' mass for top-p alone), per rank.
    double *mass = fd_calloc((size_t)rows, sizeof(double)), *rank_acc = fd_malloc(sizeof(double) * (size_t)tp * rows);
    int32_t *last = fd_malloc(sizeof(int32_t) * (size_t)tp * rows);
    float *temp3 = fd_malloc(sizeof(float) * (size_t)rows);
    int any3 = 0;
    for (int i = 0; i < rows; i++) {
        temp3[i] = rp[i].T && !rp[i].K ? rp[i].T : 0;
        any3 |= temp3[i] > 0;
        div[i] = sum[i];
    }
    if (any3) chained_scan(sl, tp, rows, mx, temp3, div, mass, rank_acc, last);
    // 4. Full rows: the draw inside the first rank whose chained total passes u * total.
    for (int r = 0; r < tp; r++) {
        float *temp4 = fd_calloc((size_t)rows, sizeof(float));
        double *acc = fd_calloc((size_t)rows, sizeof(double)), *target = fd_calloc((size_t)rows, sizeof(double));
        int any = 0;
        for (int i = 0; i < rows; i++) {
            if (!rp[i].T || rp[i].K || rp[i].P < 1) continue;
            const double u = rp[i].u * mass[i];
            int first = -1;
            for (int q = 0; q < tp && first < 0; q++)
                if (u < rank_acc[(size_t)q * rows + i]) first = q;
            if (first < 0 && r == 0) { // rounding: u past the final sum, sample_draw_u's last positive token
                out[i] = 0;
                for (int q = 0; q < tp; q++)
                    if (last[(size_t)q * rows + i] <= -2) out[i] = sl[q].vocab_begin + (-2 - last[(size_t)q * rows + i]);
            }
            if (first != r) continue;
            temp4[i] = rp[i].T, acc[i] = r ? rank_acc[(size_t)(r - 1) * rows + i] : 0, target[i] = u, any = 1;
        }
        int32_t *pick = fd_malloc(sizeof(int32_t) * (size_t)rows);
        const int Vl = sl[r].vocab_end - sl[r].vocab_begin;
        if (any) sl[r].be->softmax_scan_rows(sl[r].be, acc, pick, sl[r].logits_dev, rows, Vl, mx, temp4, div, target);
        for (int i = 0; any && i < rows; i++)
            if (temp4[i] > 0) {
                FD_CHECK(pick[i] >= 0, "tp_sample_rows: row %d's draw did not land in rank %d", i, r);
                out[i] = sl[r].vocab_begin + pick[i];
            }
        free(pick);
        free(temp4);
        free(acc);
        free(target);
    }
    // 5. Top-k / top-p rows: their candidates, asked again with twice as many while they do not settle the row.
    cand_set cs = {.c = fd_malloc(sizeof(cand) * (size_t)tp * FD_TOPK_ROWS_MAX)};
    int32_t *tmp_ids = fd_malloc(sizeof(int32_t) * FD_TOPK_ROWS_MAX);
    float *tmp_vals = fd_malloc(sizeof(float) * FD_TOPK_ROWS_MAX);
    for (int i = 0; i < rows; i++) {
        if (!rp[i].T || (!rp[i].K && !(rp[i].P < 1))) continue;
        int k = kc;
        int32_t id = -1;
        for (;;) {
            collect(&cs, sl, tp, i, k, k == kc ? ids : NULL, vals, rows, tmp_ids, tmp_vals);
            for (int r = 0; r < tp; r++) { // the last sent logit's probability, as draw_candidates computes it
                const float e = expf((cs.bound[r] - mx[i]) / rp[i].T);
                cs.bound[r] = (float)(e / sum[i]);
            }
            id = draw_candidates(&cs, sl, tp, V, &rp[i], mx[i], sum[i], mass[i]);
            if (id >= 0 || k >= FD_TOPK_ROWS_MAX) break;
            int more = 0;
            for (int r = 0; r < tp; r++) more |= !cs.exhausted[r];
            if (!more) break;
            k = 2 * k < FD_TOPK_ROWS_MAX ? 2 * k : FD_TOPK_ROWS_MAX;
        }
        out[i] = id >= 0 ? id : gather_row(sl, tp, i, V, &params[i], rp[i].u);
    }
    free(cs.c);
    free(tmp_ids);
    free(tmp_vals);
    free(ids);
    free(vals);
    free(mx);
    free(temp);
    free(temp3);
    free(sum);
    free(div);
    free(mass);
    free(rank_acc);
    free(last);
    free(rp);
}
