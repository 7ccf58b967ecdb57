// Token choice from fp32 logits: greedy (temperature 0: argmax, lowest id on ties, as engine_argmax) or sampling
// with temperature, top-k and top-p from a per-request xorshift stream (the same seed gives the same tokens).
#ifndef FD_SERVER_SAMPLER_H
#define FD_SERVER_SAMPLER_H
#include <stdint.h>

int32_t sampler_pick(const float *logits, int V, double temperature, double top_p, int top_k, uint64_t *rng);
#endif
