// Synthetic (random) weights for benchmarks: any published geometry without a checkpoint. Values are
// deterministic in (seed, tensor name, index), bf16, scaled so activations stay O(1) through many layers.
#ifndef FD_SYNTH_H
#define FD_SYNTH_H
#include "backend.h"

// Allocates and fills a bf16 host tensor of rows x cols for `name`; the caller owns w->data (free()).
void synth_weight(fd_weight *w, const char *name, int64_t rows, int64_t cols, uint64_t seed);
#endif
