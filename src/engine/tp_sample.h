// Sampling under tensor parallelism without gathering logits rows (issue 17). Each rank holds its vocabulary slice
// of the rows' logits on its own backend; the leader asks each rank for small per-row summaries (its top candidates
// through topk_rows, its chained softmax sums through softmax_scan_rows), combines them and draws. The ids are those
// of sample_row (base/sample_math.h) over the whole row for the same uniforms:
//   greedy (T = 0)        every rank's best (id, logit); the largest, the lowest id on ties — 8 bytes a row a rank.
//   neither top-k nor -p  max (topk_rows K = 1), then sample_probs' sum of exp and sample_draw_u's total, each chained
//                         over the ranks in order (16 bytes a row a rank), then the draw inside the one rank whose
//                         chained total first passes u * total: bitwise sample_row (the same float steps and the
//                         same double sums in the same order).
//   top-k (with or without top-p)  each rank's K + 1 best (id, logit) pairs and the chained sum of exp; the leader
//                         ranks the union by probability, keeps the top K, applies top-p over their mass, renormalises
//                         and draws in index order with sample_probs' and sample_draw_u's arithmetic: bitwise sample_row.
//   top-p alone           each rank's 64 best pairs (doubled up to FD_TOPK_ROWS_MAX while they do not provably cover
//                         the nucleus: a rank's unsent tokens are at most as likely as its last sent one), the chained
//                         sum of exp and the row's total mass. The one difference from sample_row: the nucleus test
//                         divides by the row's mass summed in index order (chained over the ranks) where sample_row
//                         sums the same V floats in descending order; the two doubles differ by rounding only
//                         (relative error below V * 2^-53 each), so an id can differ only where a cumulative nucleus
//                         mass lies within that of top_p.
// A row falls back to a gather of its own [V] logits to the host (sample_row there, and tp_sample_gathered_bytes
// counts it) when its candidates cannot settle it: top-k above FD_TOPK_ROWS_MAX - 1 with ties at the boundary,
// a nucleus wider than FD_TOPK_ROWS_MAX tokens of some rank, or a backend without topk_rows / softmax_scan_rows.
#ifndef FD_TP_SAMPLE_H
#define FD_TP_SAMPLE_H
#include <stdint.h>

#include "backend.h"
#include "base/sample_math.h"

// One rank's part of the rows: logits_dev [rows, vocab_end - vocab_begin] f32 on be.
typedef struct {
    fd_backend *be;
    const float *logits_dev;
    int vocab_begin, vocab_end;
} tp_slice;

// out[i] = the id sample_row(&params[i], row i, V, uniforms[i]) picks, from the tp slices (in vocabulary order,
// covering [0, V)). uniforms may be NULL when every row is greedy.
void tp_sample_rows(const tp_slice *sl, int tp, int rows, int V, const fd_sample_params *params,
                    const double *uniforms, int32_t *out);

// Bytes of logits rows gathered to the host by the fallback since the process started (tests read it).
int64_t tp_sample_gathered_bytes(void);
#endif
