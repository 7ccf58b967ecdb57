// The seeded host sampler (see sampling.h); the distribution and the draw are base/sample_math.c. The generator
// is splitmix64: small, fast, and good enough for sampling.
#include "engine/sampling.h"

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

fd_sample_params sampler_params(const fd_sampler *s) {
    return (fd_sample_params){.temperature = s->temperature, .top_k = s->top_k, .top_p = s->top_p};
}

void sampler_probs(const fd_sampler *s, const float *logits, int V, float *probs) {
    const fd_sample_params p = sampler_params(s);
    sample_probs(&p, logits, V, probs);
}

int32_t sampler_draw(fd_sampler *s, const float *probs, int V) { return sample_draw_u(probs, V, sampler_uniform(s)); }

int32_t sampler_sample(fd_sampler *s, const float *logits, int V, float *scratch) {
    const fd_sample_params p = sampler_params(s);
    return sample_row(&p, logits, V, sampler_is_greedy(s) ? 0 : sampler_uniform(s), scratch);
}
