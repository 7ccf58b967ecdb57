// Sampling on the host with what OpenAI / vLLM requests add to temperature, top-k and top-p: logit_bias,
// presence / frequency penalties (over the generated tokens), repetition penalty (HF's: over prompt and generated
// tokens), min_p, and the log-probabilities of the chosen token and its top alternatives. The server takes this path
// for a request that asks for any of them: one row of fp32 logits per token comes to the host, and speculative
// decoding is off for the request (so what is sampled is exactly the processed distribution).
//
// Order (vLLM's): logit_bias, penalties, then temperature / top-k / top-p (sampler_probs), then min_p on those
// probabilities. Greedy (temperature 0) takes the argmax of the biased, penalized logits. Reported logprobs are
// those of the model's raw distribution (log_softmax of the logits before any processing: vLLM's raw_logprobs).
#ifndef FD_SAMPLING_HOST_H
#define FD_SAMPLING_HOST_H
#include <stdint.h>

#include "engine/sampling.h"

#define FD_MAX_TOP_LOGPROBS 20

typedef struct {
    float presence, frequency, repetition, min_p; // 0, 0, 1, 0: off
    int n_bias;
    const int32_t *bias_ids;
    const float *bias;
} fd_host_params;

// Per sequence: how often each id was generated, and which ids the prompt holds (for the repetition penalty).
typedef struct {
    int V;
    int32_t *counts; // [V]
    uint8_t *seen;   // [V]: in the prompt or generated
} fd_host_state;

typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_ids[FD_MAX_TOP_LOGPROBS];
    float top_logprobs[FD_MAX_TOP_LOGPROBS];
} fd_token_logprobs;

void host_state_init(fd_host_state *s, int V, const int32_t *prompt, int n_prompt);
void host_state_free(fd_host_state *s);
// Picks the next token from logits [V] (overwritten) and records it in st. lp (optional): the chosen token's raw
// logprob and the n_top (<= FD_MAX_TOP_LOGPROBS) most likely ids. scratch: 2 V floats.
int32_t host_pick(fd_sampler *smp, const fd_host_params *p, fd_host_state *st, float *logits, int V, float *scratch,
                  int n_top, fd_token_logprobs *lp);
#endif
