// DFlash2's candidate selector: turns the draft logits of a block into the round's proposal. (The DFlash2 draft
// forward itself, with its dynamic convs and windowed attention, is the model's: model/draft_forward.h.)
//
// Selector (per block, positions i = 0..n-1 after the anchor): keep the top-k draft logits of position i as
// candidates c_k with unary scores u_k (the logits after output_multiplier / softcap, as dflash_draft returns
// them), then walk from pred = anchor:
//   score_k = u_k + < A[pred] * (W_h h_i), B[c_k] >        (A, B: predecessor / successor codebooks [V, R])
// greedy: pick argmax_k; T > 0: pick k ~ softmax(score / T), which is the draft distribution q of that position
// (zero outside the candidates) for the lossless rejection sampling. pred = the pick.
// The walk runs on the host: per position it touches only top_k candidates of rank-R codebook rows, and the
// codebooks ([V, R], the largest DFlash2 tensors) are read from the mmap, never uploaded.
#ifndef FD_DFLASH2_H
#define FD_DFLASH2_H
#include "engine/sampling.h"
#include "model/dflash2.h"

typedef struct fd_dflash2_selector {
    fd_backend *be;
    const fd_drafter *dr;
    const void *hidden; // backend act [B-1, d]: the final-normed draft hidden rows the last draft forward left
    float *gate_dev;    // backend f32 [B, R]: W_h h of the draft positions
    float *gate;        // host [B, R]
    float *a, *b;       // host [R]: one codebook row each
    int32_t *cand;      // host [B, top_k]: the candidates of each position (dflash2_candidates or topk_rows)
    float *unary;       // host [B, top_k]: their draft logits, descending
} fd_dflash2_selector;

// A selector for blocks of up to B for DFlash2 drafter dr (dr->v2 set), reading the hidden rows at `hidden`.
void dflash2_selector_init(fd_dflash2_selector *sel, fd_backend *be, const fd_drafter *dr, const void *hidden, int B);
void dflash2_selector_free(fd_dflash2_selector *sel);

// Candidates and scores of n positions for given predecessors preds[0..n) (preds[0] = the anchor), from the
// draft logits [n, V] of the last draft forward: cand, scores [n, top_k], candidates in descending logit order.
void dflash2_scores(fd_dflash2_selector *sel, const float *logits, const int32_t *preds, int n, int32_t *cand,
                    float *scores);
// The walk over n positions after a draft forward produced `logits` [n.., V]. smp NULL or greedy: argmax path.
// Otherwise samples each step at smp's temperature and, if q is not NULL, writes q [n, V] (the step's softmax on
// its candidates, 0 elsewhere).
void dflash2_walk(fd_dflash2_selector *sel, int32_t anchor, const float *logits, int n, fd_sampler *smp,
                  int32_t *path, float *q);
// sel->cand / sel->unary from host draft logits [n, V]: each row's top_k by top_k_row (what topk_rows gives on a
// backend).
void dflash2_candidates(fd_dflash2_selector *sel, const float *logits, int n);
// The same walk from the candidates already in sel->cand / sel->unary ([n, top_k], each row as top_k_row orders
// it): what a backend's topk_rows gives without the [n, V] logits crossing to the host.
// For trees (dflash_tree.c): the gate of the first n rows (W_h h_i, once per draft), then the selector's score of
// every candidate of row i after predecessor pred (scores [top_k], in sel->cand's order).
void dflash2_prepare(fd_dflash2_selector *sel, int n);
void dflash2_child_scores(fd_dflash2_selector *sel, int i, int32_t pred, float *scores);
void dflash2_walk_candidates(fd_dflash2_selector *sel, int32_t anchor, int n, fd_sampler *smp, int32_t *path,
                             float *q);
#endif
