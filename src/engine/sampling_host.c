// Host sampling with logit_bias, penalties, min_p and logprobs (see sampling_host.h).
#include "engine/sampling_host.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

void host_state_init(fd_host_state *s, int V, const int32_t *prompt, int n_prompt) {
    s->V = V;
    s->counts = fd_calloc((size_t)V, sizeof *s->counts);
    s->seen = fd_calloc((size_t)V, 1);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] >= 0 && prompt[i] < V) s->seen[prompt[i]] = 1;
}

void host_state_free(fd_host_state *s) {
    free(s->counts);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

// log_softmax at the chosen id and the n_top largest, from the raw logits (double accumulation)
static void raw_logprobs(const float *logits, int V, int32_t chosen, int n_top, fd_token_logprobs *lp) {
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    const double lse = mx + log(sum);
    lp->id = chosen;
    lp->logprob = (float)(logits[chosen] - lse);
    if (n_top > FD_MAX_TOP_LOGPROBS) n_top = FD_MAX_TOP_LOGPROBS;
    lp->n_top = 0;
    for (int i = 0; i < V; i++) { // insertion into a short sorted list (ties: lower id first)
        const float x = logits[i];
        int k = lp->n_top;
        if (k == n_top && (k == 0 || x <= logits[lp->top_ids[k - 1]])) continue;
        if (k < n_top) lp->n_top++;
        else k--;
        while (k > 0 && logits[lp->top_ids[k - 1]] < x) {
            lp->top_ids[k] = lp->top_ids[k - 1];
            k--;
        }
        lp->top_ids[k] = i;
    }
    for (int k = 0; k < lp->n_top; k++) lp->top_logprobs[k] = (float)(logits[lp->top_ids[k]] - lse);
}

int32_t host_pick(fd_sampler *smp, const fd_host_params *p, fd_host_state *st, float *logits, int V, float *scratch,
                  int n_top, fd_token_logprobs *lp) {
    float *raw = scratch + V; // the unprocessed row, for the reported logprobs
    if (lp) memcpy(raw, logits, (size_t)V * sizeof *raw);
    for (int b = 0; b < p->n_bias; b++)
        if (p->bias_ids[b] >= 0 && p->bias_ids[b] < V) logits[p->bias_ids[b]] += p->bias[b];
    if (p->presence != 0 || p->frequency != 0 || p->repetition != 1)
        for (int i = 0; i < V; i++) {
            if (p->repetition != 1 && st->seen[i])
                logits[i] = logits[i] > 0 ? logits[i] / p->repetition : logits[i] * p->repetition;
            if (st->counts[i]) logits[i] -= p->presence + p->frequency * (float)st->counts[i];
        }
    int32_t id;
    if (sampler_is_greedy(smp)) {
        id = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[id]) id = i;
    } else {
        sampler_probs(smp, logits, V, scratch);
        if (p->min_p > 0) {
            float top = 0;
            for (int i = 0; i < V; i++) top = scratch[i] > top ? scratch[i] : top;
            for (int i = 0; i < V; i++)
                if (scratch[i] < p->min_p * top) scratch[i] = 0;
        }
        id = sampler_draw(smp, scratch, V);
    }
    if (lp) raw_logprobs(raw, V, id, n_top, lp);
    st->counts[id]++;
    st->seen[id] = 1;
    return id;
}
