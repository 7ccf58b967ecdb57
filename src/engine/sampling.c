// Sampling (see sampling.h). The generator is splitmix64: small, fast, and good enough for sampling.
#include "engine/sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

void sampler_init(fd_sampler *s, float temperature, int top_k, float top_p, uint64_t seed) {
    s->temperature = temperature > 0 ? temperature : 0;
    s->top_k = top_k > 0 ? top_k : 0;
    s->top_p = top_p > 0 && top_p < 1 ? top_p : 1;
    s->state = seed ^ 0x9e3779b97f4a7c15ull;
}

int sampler_is_greedy(const fd_sampler *s) { return s->temperature <= 0; }

static uint64_t next_u64(fd_sampler *s) {
    uint64_t z = (s->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double sampler_uniform(fd_sampler *s) { return (double)(next_u64(s) >> 11) * (1.0 / 9007199254740992.0); }

static int by_value_desc(const void *a, const void *b, void *vals) {
    const float x = ((const float *)vals)[*(const int *)a], y = ((const float *)vals)[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b; // ties: lower index first, like argmax
}

fd_sample_params sampler_params(const fd_sampler *s) {
    return (fd_sample_params){.temperature = s->temperature, .top_k = s->top_k, .top_p = s->top_p};
}

void sampler_probs(const fd_sampler *s, const float *logits, int V, float *probs) {
    const fd_sample_params p = sampler_params(s);
    sample_probs(&p, logits, V, probs);
}

void sample_probs(const fd_sample_params *p, const float *logits, int V, float *probs) {
    fd_sampler norm; // the values sampler_init would keep (the generator is not used here)
    sampler_init(&norm, p->temperature, p->top_k, p->top_p, 0);
    const fd_sampler *s = &norm;
    if (sampler_is_greedy(s)) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        memset(probs, 0, sizeof(float) * (size_t)V);
        probs[best] = 1;
        return;
    }
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += probs[i] = expf((logits[i] - mx) / s->temperature);
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    if (!s->top_k && s->top_p >= 1) return;
    // Rank tokens once; keep the top-k, then the smallest prefix whose mass reaches top_p.
    int *order = fd_malloc(sizeof(int) * (size_t)V);
    for (int i = 0; i < V; i++) order[i] = i;
    qsort_r(order, (size_t)V, sizeof(int), by_value_desc, probs);
    int keep = s->top_k && s->top_k < V ? s->top_k : V;
    if (s->top_p < 1) {
        double kept = 0;
        for (int i = 0; i < keep; i++) kept += probs[order[i]];
        double cum = 0;
        int n = 0;
        while (n < keep) {
            cum += probs[order[n++]] / kept;
            if (cum >= s->top_p) break;
        }
        keep = n;
    }
    double kept = 0;
    for (int i = 0; i < keep; i++) kept += probs[order[i]];
    for (int i = keep; i < V; i++) probs[order[i]] = 0;
    for (int i = 0; i < keep; i++) probs[order[i]] = (float)(probs[order[i]] / kept);
    free(order);
}

int32_t sampler_draw(fd_sampler *s, const float *probs, int V) { return sample_draw_u(probs, V, sampler_uniform(s)); }

int32_t sample_draw_u(const float *probs, int V, double uniform) {
    double total = 0;
    for (int i = 0; i < V; i++) total += probs[i];
    double u = uniform * total, cum = 0;
    int last = 0;
    for (int i = 0; i < V; i++) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last = i;
        if (u < cum) return i;
    }
    return last; // rounding: u landed past the final cumulative sum
}

int32_t sampler_sample(fd_sampler *s, const float *logits, int V, float *scratch) {
    const fd_sample_params p = sampler_params(s);
    return sample_row(&p, logits, V, sampler_is_greedy(s) ? 0 : sampler_uniform(s), scratch);
}

int32_t sample_row(const fd_sample_params *p, const float *logits, int V, double u, float *scratch) {
    sample_probs(p, logits, V, scratch);
    if (!(p->temperature > 0)) {
        for (int i = 0; i < V; i++)
            if (scratch[i] > 0) return i;
    }
    return sample_draw_u(scratch, V, u);
}
