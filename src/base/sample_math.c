// The stateless steps of token sampling (see sample_math.h), shared by the host sampler (engine/sampling.c) and
// the CPU backend's sample_rows, so both give bitwise the same ids.
#include "base/sample_math.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static int by_value_desc(const void *a, const void *b, void *vals) {
    const float x = ((const float *)vals)[*(const int *)a], y = ((const float *)vals)[*(const int *)b];
    if (x != y) return x < y ? 1 : -1;
    return *(const int *)a - *(const int *)b; // ties: lower index first, like argmax
}

void sample_probs(const fd_sample_params *p, const float *logits, int V, float *probs) {
    // out-of-range values mean "off", as in sampler_init
    const struct {
        float temperature;
        int top_k;
        float top_p;
    } n = {p->temperature > 0 ? p->temperature : 0, p->top_k > 0 ? p->top_k : 0,
           p->top_p > 0 && p->top_p < 1 ? p->top_p : 1},
      *s = &n;
    if (s->temperature <= 0) {
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

int32_t sample_row(const fd_sample_params *p, const float *logits, int V, double u, float *scratch) {
    sample_probs(p, logits, V, scratch);
    if (!(p->temperature > 0)) {
        for (int i = 0; i < V; i++)
            if (scratch[i] > 0) return i;
    }
    return sample_draw_u(scratch, V, u);
}

void top_k_row(const float *row, int V, int K, int32_t *ids, float *vals) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        const float x = row[v];
        if (n == K && !(x > vals[K - 1])) continue; // NaN and values not above the K-th: out
        if (x != x) continue;
        int j = n < K ? n++ : K - 1;
        while (j > 0 && x > vals[j - 1]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = x;
        ids[j] = v;
    }
    for (; n < K; n++) {
        vals[n] = -INFINITY;
        ids[n] = n;
    }
}

double sample_logsumexp(const float *z, int V) {
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)z[v] - mx);
    return mx + log(sum);
}
