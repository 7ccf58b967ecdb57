// The stateless steps of token sampling from fp32 logits: temperature, then top-k, then top-p (HF's order) over
// the kept mass (ties ranked by lower index), renormalised, and the inverse-CDF draw at a given uniform in index
// order; greedy (temperature 0) is the argmax, lowest index on ties. Below the engine and the backends: the host
// sampler (engine/sampling.h) adds a seeded generator; the CPU backend's sample_rows calls sample_row directly.
#ifndef FD_SAMPLE_MATH_H
#define FD_SAMPLE_MATH_H
#include <stdint.h>

// Sampling parameters of one logits row: temperature 0 = greedy argmax; top_k 0 = off; top_p >= 1 = off
// (out-of-range values mean "off").
typedef struct {
    float temperature;
    int top_k;
    float top_p;
} fd_sample_params;

// The distribution of p over logits [V] into probs [V] (zero outside the top-k / top-p set).
void sample_probs(const fd_sample_params *p, const float *logits, int V, float *probs);
// The inverse-CDF draw of probs [V] (which need not sum exactly to 1) at uniform u in [0, 1).
int32_t sample_draw_u(const float *probs, int V, double u);
// sample_probs + the draw (the argmax for greedy p, u unused); scratch holds V floats.
int32_t sample_row(const fd_sample_params *p, const float *logits, int V, double u, float *scratch);
// The K largest of row [V] in descending order, the lower index first among equals (NaNs never taken; when fewer
// than K values are not NaN the rest of the slots hold -inf and their own slot number as the id).
void top_k_row(const float *row, int V, int K, int32_t *ids, float *vals);
// log sum_v exp(row[v]) over row [V] (max + log of the sum of exp(x - max) in double): a row's log-softmax is
// row[v] minus this. A DFlash tree ranks its paths by sums of these (engine/dflash_tree.h).
double sample_logsumexp(const float *row, int V);
#endif
