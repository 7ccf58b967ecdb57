// Sampling (see sampler.h).
#include "server/sampler.h"

#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "engine/engine.h"

static uint64_t next_u64(uint64_t *s) { // xorshift64*, state never 0
    if (!*s) *s = 0x9e3779b97f4a7c15ULL;
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

typedef struct {
    float p;
    int32_t id;
} cand;

static int by_prob_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

int32_t sampler_pick(const float *logits, int V, double temperature, double top_p, int top_k, uint64_t *rng) {
    if (temperature <= 0) return engine_argmax(logits, V);
    float mx = logits[0];
    for (int i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    cand *c = fd_malloc(sizeof(cand) * (size_t)V);
    for (int i = 0; i < V; i++) {
        c[i].p = (float)exp((logits[i] - mx) / temperature);
        c[i].id = i;
    }
    int n = V;
    if ((top_k > 0 && top_k < V) || top_p < 1.0) {
        qsort(c, (size_t)V, sizeof *c, by_prob_desc);
        if (top_k > 0 && top_k < n) n = top_k;
        if (top_p < 1.0) {
            double tot = 0, acc = 0;
            for (int i = 0; i < n; i++) tot += c[i].p;
            int k = 0;
            while (k < n) { // smallest set whose mass reaches top_p (always at least one token)
                acc += c[k++].p;
                if (acc >= top_p * tot) break;
            }
            n = k;
        }
    }
    double tot = 0;
    for (int i = 0; i < n; i++) tot += c[i].p;
    double u = (double)(next_u64(rng) >> 11) * (1.0 / 9007199254740992.0) * tot;
    int32_t pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        if (u < c[i].p) {
            pick = c[i].id;
            break;
        }
        u -= c[i].p;
    }
    free(c);
    return pick;
}
