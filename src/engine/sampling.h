// Token sampling on the host from fp32 logits: temperature, then top-k, then top-p (HF order), with a seeded
// generator so runs are reproducible. temperature 0 means greedy (argmax, lowest index on ties).
#ifndef FD_SAMPLING_H
#define FD_SAMPLING_H
#include <stdint.h>

#include "base/sample_math.h" // fd_sample_params, sample_probs, sample_draw_u, sample_row

typedef struct fd_sampler_s {
    float temperature; // 0 = greedy
    int top_k;         // 0 = off
    float top_p;       // 1 = off
    uint64_t state;    // generator state (seed it with sampler_seed)
} fd_sampler;

void sampler_init(fd_sampler *s, float temperature, int top_k, float top_p, uint64_t seed);
int sampler_is_greedy(const fd_sampler *s);
// The distribution the sampler draws from: probs [V] (zero outside the top-k / top-p set).
void sampler_probs(const fd_sampler *s, const float *logits, int V, float *probs);
// Draws an index from probs [V] (which need not sum exactly to 1).
int32_t sampler_draw(fd_sampler *s, const float *probs, int V);
// Uniform in [0, 1).
double sampler_uniform(fd_sampler *s);
// Convenience: probs + draw (or argmax when greedy). scratch holds V floats.
int32_t sampler_sample(fd_sampler *s, const float *logits, int V, float *scratch);

// The sampler's parameters, for the backends' sample_rows op (the host draws the uniform):
// sample_row(sampler_params(s), logits, V, sampler_uniform(s), scratch) == sampler_sample(s, logits, V, scratch)
// for non-greedy s, bitwise (sampler_sample draws exactly that one uniform).
fd_sample_params sampler_params(const fd_sampler *s);
#endif
