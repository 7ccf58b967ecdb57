// Tree verification of DFlash drafts (route spec_verify=tree; DDTree, Ringel & Romano, arXiv 2604.12989): the
// drafter gives a distribution at every position of its block; instead of verifying only the argmax chain, a round
// verifies the likeliest continuations as a tree in one target forward (engine_verify_tree) and commits the longest
// path the target accepts (engine_commit_tree). Greedy output is plain greedy's; sampled output follows the
// target's sampling distribution exactly (spec_tree_accept_sampled).
#ifndef FD_DFLASH_TREE_H
#define FD_DFLASH_TREE_H
#include "engine/dflash.h"

// Default node budget (draft nodes, the root not counted): the smallest that gave >= 1.3x the chain's emitted
// tokens/round at block 8 on the trained pair's held-out prompts (test trained_tree_*; docs/dflash-tree.md).
#define FD_TREE_BUDGET_DEFAULT 32

// A draft tree: node 0 is the root (the round's anchor); the other nodes are in best-first order, so a node's
// parent is an earlier node and siblings come in order of their drafter probability.
typedef struct {
    int n; // nodes, the root included
    int32_t token[FD_SPEC_MAX_BLOCK], parent[FD_SPEC_MAX_BLOCK], depth[FD_SPEC_MAX_BLOCK];
    float logq[FD_SPEC_MAX_BLOCK]; // the path's log-probability under the drafter (root: 0)
} fd_spec_tree;

// Best-first tree from draft logits [rows, V] (row i: the drafter's logits for depth i + 1): the `budget` nodes
// (budget <= FD_SPEC_MAX_BLOCK - 1) of greatest path log-probability sum_d log softmax(row d-1)[token_d] among
// paths of depth <= rows, each node's children drawn from its depth's row (the drafter's rows do not depend on the
// tokens above them). Ties go to the lower token id, then the earlier candidate. Returns 0 or -1 (bad arguments).
int spec_tree_build(fd_spec_tree *t, int32_t anchor, const float *logits, int rows, int V, int budget);
// The ranks of each row a tree of `budget` nodes can use (a node's children take at most `budget` distinct ranks
// of its row): min(budget, V).
int spec_tree_ranks(int budget, int V);
// One row's k best tokens, best first (top_k_row: ties to the lower index), and their log-softmax values z - lse
// (sample_logsumexp: the sum in double, rounded to float as the cpu backend's logsumexp_rows).
void spec_tree_rank_row(const float *logits, int V, int k, int32_t *top, float *lp);
// The same tree from each row's ranked tokens alone: top / lp [rows, k], row r's k best tokens best first and their
// log-softmax values (spec_tree_rank_row, or backend topk_rows + logsumexp_rows), k = spec_tree_ranks(budget, V).
int spec_tree_build_ranked(fd_spec_tree *t, int32_t anchor, const int32_t *top, const float *lp, int rows, int k,
                           int budget);
// The general best-first tree, for drafters whose rows depend on the tokens above (DFlash2's selector): rank(ctx,
// d, pred, top, lp) writes the k best children of a node of token pred at depth d (drawn from draft row d), best
// first, and their log-probabilities given that parent. Ranked once per node as it is made. The ranked build is
// this with one ranking per depth (same trees, bit for bit).
typedef void (*spec_tree_rank_fn)(void *ctx, int depth, int32_t pred, int32_t *top, float *lp);
int spec_tree_build_by_parent(fd_spec_tree *t, int32_t anchor, int rows, int k, int budget, spec_tree_rank_fn rank,
                              void *ctx);
// Greedy acceptance over the target's argmax after every node (argmax[u]: engine_verify_tree_greedy's ids): from
// the root, follow the child whose token is the argmax, while there is one. Writes the path's nodes (path[0] = 0)
// and the target's argmax after its last node to *next; returns the path's length (accepted drafts + 1).
int spec_tree_accept_greedy(const fd_spec_tree *t, const int32_t *argmax, int32_t *path, int32_t *next);
// Lossless sampled acceptance (recursive rejection over siblings): at node u with target distribution p (the
// sampler's, from tl row u), child tokens x1, x2, ... (fixed by the tree, i.e. drafts from point masses) are tried
// in order: x_i is accepted with probability r(x_i), r the residual p with x1..x_{i-1} removed and renormalised;
// an accepted child becomes u; when every child is rejected the next token is drawn from the residual. Each step
// emits a token distributed exactly as p (P(x_i) = prod_j<i (1 - r_j(x_j)) r_i(x_i) = p(x_i)). p is scratch [V].
int spec_tree_accept_sampled(fd_sampler *smp, const fd_spec_tree *t, const float *tl, int V, float *p, int32_t *path,
                             int32_t *next);
// One tree round (dflash_round when spec_verify=tree): draft, build the tree of at most s->tree_budget draft nodes
// and depth L-1, verify (greedy: only every node's argmax comes back), accept, commit. Emits at most L tokens, as
// a chain round does; its phases are timed as a chain round's (fd_spec_stats). With the oracle drafter (the
// bench; `produced` positions it) the tree's best path is the reference continuation (dflash_tree.c).
int dflash_round_tree(fd_dflash *s, int32_t anchor, int L, fd_sampler *smp, int64_t produced, int32_t *emitted,
                      int *n_emitted);
#endif
