// DFlash2 on top of the DFlash round (engine/dflash.h): the dynamic convs and windowed attention inside the
// draft forward, and the candidate selector that turns the draft logits into the proposal.
//
// Selector (per block, positions i = 0..n-1 after the anchor): keep the top-k draft logits of position i as
// candidates c_k with unary scores u_k (the logits after output_multiplier / softcap, as dflash_draft returns
// them), then walk from pred = anchor:
//   score_k = u_k + < A[pred] * (W_h h_i), B[c_k] >        (A, B: predecessor / successor codebooks [V, R])
// greedy: pick argmax_k; T > 0: pick k ~ softmax(score / T), which is the draft distribution q of that position
// (zero outside the candidates) for the lossless rejection sampling. pred = the pick.
#ifndef FD_DFLASH2_H
#define FD_DFLASH2_H
#include "engine/dflash.h"
#include "model/dflash2.h"

// Allocates the DFlash2 scratch of s (s->dr->v2 set); refuses a backend without the DFlash2 ops.
int dflash2_init(fd_dflash *s);
void dflash2_release(fd_dflash *s);

// Draft-forward hooks (dflash_draft). Sublayer `mlp` (0 attention, 1 MLP) of layer l, on act [B, d] in place:
// conv_in takes the sublayer input (and predicts both sets of dynamic taps from it), conv_out its output.
void dflash2_conv_in(fd_dflash *s, int l, int mlp, void *h);
void dflash2_conv_out(fd_dflash *s, int l, int mlp, void *y);
// The block's attention in layer l (s->q over draft cache l), windowed where the layer is sliding.
void dflash2_attention(fd_dflash *s, int l);

// Candidates and scores of n positions for given predecessors preds[0..n) (preds[0] = the anchor), from the
// draft logits [n, V] of the last dflash_draft (whose final-normed hidden rows are still in s->h):
// cand, scores [n, top_k], candidates in descending logit order.
void dflash2_scores(fd_dflash *s, const float *logits, const int32_t *preds, int n, int32_t *cand, float *scores);
// The walk over n positions after dflash_draft produced `logits` [n.., V]. smp NULL or greedy: argmax path.
// Otherwise samples each step at smp's temperature and, if q is not NULL, writes q [n, V] (the step's softmax on
// its candidates, 0 elsewhere).
void dflash2_walk(fd_dflash *s, int32_t anchor, const float *logits, int n, fd_sampler *smp, int32_t *path,
                  float *q);
// The proposal of a round: dflash_draft + the walk over n positions into draft (q as in dflash2_walk).
int dflash2_propose(fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q);
#endif
