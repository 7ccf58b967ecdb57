// Tree verification of DFlash drafts (see dflash_tree.h).
#include "engine/dflash_tree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dflash2.h"
#include "engine/routes.h"
#include "engine/trace.h"

// A candidate node: the rank-th best token of its depth's row under parent.
typedef struct {
    float score; // the path's log-probability with this token
    int parent, depth, rank;
} tree_cand;

int spec_tree_build(fd_spec_tree *t, int32_t anchor, const float *logits, int rows, int V, int budget) {
    if (budget < 0 || budget > FD_SPEC_MAX_BLOCK - 1 || rows < 0 || V < 1)
        return fd_error_set("draft tree: budget %d (0..%d), %d rows", budget, FD_SPEC_MAX_BLOCK - 1, rows);
    const int k = spec_tree_ranks(budget, V);
    if (k == 0 || rows == 0) return spec_tree_build_ranked(t, anchor, NULL, NULL, 0, 0, budget);
    int32_t *top = fd_malloc(sizeof(int32_t) * (size_t)rows * k);
    float *lp = fd_malloc(sizeof(float) * (size_t)rows * k);
    for (int r = 0; r < rows; r++) spec_tree_rank_row(logits + (int64_t)r * V, V, k, top + r * k, lp + r * k);
    const int rc = spec_tree_build_ranked(t, anchor, top, lp, rows, k, budget);
    free(top);
    free(lp);
    return rc;
}

int spec_tree_ranks(int budget, int V) {
    return budget < V ? budget : V;
}

void spec_tree_rank_row(const float *z, int V, int k, int32_t *top, float *lp) {
    top_k_row(z, V, k, top, lp);
    const float lse = (float)sample_logsumexp(z, V); // as the cpu backend's logsumexp_rows: the same bits either way
    for (int i = 0; i < k; i++) lp[i] -= lse;
}

int spec_tree_build_by_parent(fd_spec_tree *t, int32_t anchor, int rows, int k, int budget, spec_tree_rank_fn rank,
                              void *ctx) {
    if (budget < 0 || budget > FD_SPEC_MAX_BLOCK - 1 || rows < 0 || (rows > 0 && budget > 0 && k < 1))
        return fd_error_set("draft tree: budget %d (0..%d), %d rows of %d ranks", budget, FD_SPEC_MAX_BLOCK - 1, rows,
                            k);
    t->n = 1;
    t->token[0] = anchor;
    t->parent[0] = -1;
    t->depth[0] = 0;
    t->logq[0] = 0;
    if (budget == 0 || rows == 0) return 0;
    // Each node's children, ranked once when the node is made (they are drawn from the row below it).
    int32_t *top = fd_malloc(sizeof(int32_t) * (size_t)(budget + 1) * k);
    float *lp = fd_malloc(sizeof(float) * (size_t)(budget + 1) * k);
    rank(ctx, 0, anchor, top, lp);
    // Best-first: popping a candidate adds it as a node and offers its next sibling (rank + 1) and its first child
    // (rank 0 of its own ranking); scores only fall along either, so the pops are the budget best paths. Each pop
    // removes one candidate and adds at most two: 2 * budget + 1 bounds the live set.
    tree_cand cand[2 * FD_SPEC_MAX_BLOCK + 1];
    int n_cand = 1;
    cand[0] = (tree_cand){lp[0], 0, 1, 0};
    while (t->n < budget + 1 && n_cand > 0) {
        int best = 0;
        for (int i = 1; i < n_cand; i++) // the earliest candidate wins ties (deterministic)
            if (cand[i].score > cand[best].score) best = i;
        const tree_cand c = cand[best];
        memmove(cand + best, cand + best + 1, sizeof *cand * (size_t)(n_cand - best - 1));
        n_cand--;
        const int node = t->n++;
        const int32_t *ptop = top + (size_t)c.parent * k;
        const float *plp = lp + (size_t)c.parent * k;
        t->token[node] = ptop[c.rank];
        t->parent[node] = c.parent;
        t->depth[node] = c.depth;
        t->logq[node] = c.score;
        if (c.rank + 1 < k) cand[n_cand++] = (tree_cand){t->logq[c.parent] + plp[c.rank + 1], c.parent, c.depth, c.rank + 1};
        if (c.depth < rows && t->n < budget + 1) {
            rank(ctx, c.depth, t->token[node], top + (size_t)node * k, lp + (size_t)node * k);
            cand[n_cand++] = (tree_cand){c.score + lp[(size_t)node * k], node, c.depth + 1, 0};
        }
    }
    free(top);
    free(lp);
    return 0;
}

// Rows ranked once for every parent (a DFlash drafter's rows do not depend on the tokens above them).
typedef struct {
    const int32_t *top;
    const float *lp;
    int k;
} ranked_rows;
static void rank_from_rows(void *ctx, int depth, int32_t pred, int32_t *top, float *lp) {
    (void)pred;
    const ranked_rows *r = ctx;
    memcpy(top, r->top + (size_t)depth * r->k, sizeof(int32_t) * (size_t)r->k);
    memcpy(lp, r->lp + (size_t)depth * r->k, sizeof(float) * (size_t)r->k);
}

int spec_tree_build_ranked(fd_spec_tree *t, int32_t anchor, const int32_t *top, const float *lp, int rows, int k,
                           int budget) {
    ranked_rows r = {top, lp, k};
    return spec_tree_build_by_parent(t, anchor, rows, k, budget, rank_from_rows, &r);
}

int spec_tree_accept_greedy(const fd_spec_tree *t, const int32_t *argmax, int32_t *path, int32_t *next) {
    int u = 0, len = 1;
    path[0] = 0;
    for (;;) {
        const int32_t y = argmax[u];
        int child = -1;
        for (int c = u + 1; c < t->n && child < 0; c++)
            if (t->parent[c] == u && t->token[c] == y) child = c;
        if (child < 0) {
            *next = y;
            return len;
        }
        path[len++] = u = child;
    }
}

int spec_tree_accept_sampled(fd_sampler *smp, const fd_spec_tree *t, const float *tl, int V, float *p, int32_t *path,
                             int32_t *next) {
    int u = 0, len = 1;
    path[0] = 0;
    for (;;) {
        sampler_probs(smp, tl + (int64_t)u * V, V, p);
        double rest = 0; // the residual's mass: r = p / rest over the tokens not yet rejected
        for (int v = 0; v < V; v++) rest += p[v];
        int child = -1;
        for (int c = u + 1; c < t->n && child < 0; c++) {
            if (t->parent[c] != u) continue;
            const int32_t x = t->token[c];
            if (p[x] <= 0) continue; // r(x) = 0: rejected without a draw
            if (sampler_uniform(smp) * rest < p[x])
                child = c;
            else {
                rest -= p[x];
                p[x] = 0;
            }
        }
        if (child < 0) {
            double mass = 0;
            for (int v = 0; v < V; v++) mass += p[v];
            // all of p's mass on rejected children happens only by rounding: any draw from p is then exact
            if (!(mass > 0)) sampler_probs(smp, tl + (int64_t)u * V, V, p);
            *next = sampler_draw(smp, p, V);
            return len;
        }
        path[len++] = u = child;
    }
}

// The draft forward and each row's k best tokens with their log-softmax values: ranked on the device where the
// backend can (only rows x k ids and values cross: the rows are V floats each, 7.9 MB per round at the 27B's
// vocabulary and block 8), else from the logits copied to the host.
static int draft_ranked(fd_dflash *s, int32_t anchor, int rows, int k, int32_t *top, float *lp) {
    fd_backend *be = s->be;
    const int V = s->dr->vocab_size;
    if (be->topk_rows && be->logsumexp_rows && dflash_draft_logits_raw(s) && k <= FD_TOPK_ROWS_MAX) {
        FD_TRY(dflash_draft_forward(s, anchor));
        if (rows == 0) return 0;
        float lse[FD_SPEC_MAX_BLOCK];
        be->topk_rows(be, top, lp, s->ds.logits_dev, rows, V, k);
        be->logsumexp_rows(be, lse, s->ds.logits_dev, rows, V);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < k; i++) lp[r * k + i] -= lse[r];
        return 0;
    }
    int32_t draft[FD_SPEC_MAX_BLOCK];
    FD_TRY(dflash_draft(s, anchor, draft, s->h_q));
    for (int r = 0; r < rows; r++) spec_tree_rank_row(s->h_q + (int64_t)r * V, V, k, top + r * k, lp + r * k);
    return 0;
}

// The oracle drafter's tree (the bench; dflash.h: fd_spec_oracle): each ranked row gets the reference
// continuation's token at rank 0 with log-probability 0 and the others ORACLE_TREE_MARGIN lower (what raising its
// logit that far above the row's best would give), so the tree's best path (its spine) is the reference to depth
// `rows` and the rest of the budget branches off the spine where the drafter's own rows rank it, the shape of a
// confident drafter's tree. With `force` the round accepts exactly the schedule's count along the spine.
#define ORACLE_TREE_MARGIN 30.0f
static void oracle_rank_row(int32_t *ids, float *l, int k, int32_t right) {
    int at = k - 1; // where the reference sits, or the last rank (it drops out)
    for (int i = 0; i < k; i++)
        if (ids[i] == right) at = i;
    for (int i = at; i > 0; i--) ids[i] = ids[i - 1], l[i] = l[i - 1] - ORACLE_TREE_MARGIN;
    for (int i = at + 1; i < k; i++) l[i] -= ORACLE_TREE_MARGIN;
    ids[0] = right;
    l[0] = 0.0f;
}
static int32_t oracle_token(const fd_spec_oracle *o, int64_t j) {
    return j < o->ref_len ? o->ref[j] : 0;
}
static void oracle_tree_ranks(const fd_dflash *s, int64_t produced, int32_t *top, float *lp, int rows, int k) {
    for (int r = 0; r < rows; r++) oracle_rank_row(top + r * k, lp + r * k, k, oracle_token(s->oracle, produced + r));
}

// DFlash2: a node's children are its row's selector candidates, scored after the node's own token (the walk's
// score_k = u_k + <A[pred] * W_h h_d, B[c_k]>), ranked by their log-softmax over the candidates (ties: the earlier
// candidate, i.e. the larger draft logit, then the lower id).
typedef struct {
    fd_dflash *s;
    int k;            // children kept per node
    int64_t produced; // the oracle's position of row 0 (bench)
} d2_rank_ctx;
static void rank_dflash2(void *ctx, int depth, int32_t pred, int32_t *top, float *lp) {
    const d2_rank_ctx *c = ctx;
    fd_dflash2_selector *sel = c->s->sel;
    const int K = sel->dr->v2->top_k;
    float sc[FD_DFLASH2_MAX_TOPK];
    int order[FD_DFLASH2_MAX_TOPK];
    dflash2_child_scores(sel, depth, pred, sc);
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < K; i++) mx = sc[i] > mx ? sc[i] : mx;
    for (int i = 0; i < K; i++) sum += exp((double)sc[i] - mx);
    const float lse = isfinite(mx) ? (float)(mx + log(sum)) : 0.0f;
    for (int i = 0; i < K; i++) { // stable insertion sort, best first
        int j = i;
        while (j > 0 && sc[i] > sc[order[j - 1]]) order[j] = order[j - 1], j--;
        order[j] = i;
    }
    for (int r = 0; r < c->k; r++) {
        top[r] = sel->cand[depth * K + order[r]];
        lp[r] = sc[order[r]] - lse;
    }
    if (c->s->oracle) oracle_rank_row(top, lp, c->k, oracle_token(c->s->oracle, c->produced + depth));
}

// The forced acceptance of the oracle's tree: `a` drafts down the spine (each node's first child: the spine
// token is its row's best), then the target's argmax.
static int oracle_tree_accept(const fd_spec_tree *t, int a, const int32_t *argmax, int32_t *path, int32_t *next) {
    int len = 1;
    path[0] = 0;
    for (int c = 1; c < t->n && len <= a; c++)
        if (t->parent[c] == path[len - 1]) path[len++] = c; // the first child in best-first order
    *next = argmax[path[len - 1]];
    return len;
}

int dflash_round_tree(fd_dflash *s, int32_t anchor, int L, fd_sampler *smp, int64_t produced, int32_t *emitted,
                      int *n_emitted) {
    fd_engine *t = s->tgt;
    const int V = t->m->cfg.vocab_size;
    const int sampled = smp && !sampler_is_greedy(smp);
    FD_TRY(engine_tree_supported(t));
    // Nodes: the budget and the root, within the scratch and the context left (a tree's K/V take one position per
    // node until the commit); depth L - 1 at most, so a round emits at most L tokens.
    int64_t nodes = s->tree_budget + 1;
    if (nodes > t->opt.max_batch) nodes = t->opt.max_batch;
    if (nodes > t->opt.capacity - t->n_past) nodes = t->opt.capacity - t->n_past;
    if (nodes < 1) return fd_error_set("context capacity of %lld tokens reached", (long long)t->opt.capacity);
    FD_TRY(engine_enable_slots(t, (int)nodes));
    if (sampled && s->h_tree_rows < nodes) { // T > 0 needs every node's distribution on the host
        free(s->h_tree_logits);
        s->h_tree_logits = fd_malloc(sizeof(float) * (size_t)nodes * V);
        s->h_tree_rows = (int)nodes;
    }
    const double t0 = fd_time_s();
    fd_spec_tree tree;
    if (s->dr->v2) { // the selector's candidates, ranked per node after its token
        const int K = s->dr->v2->top_k, k = K < nodes - 1 ? K : (int)nodes - 1, rows = k > 0 ? L - 1 : 0;
        FD_TRY(dflash2_draft_candidates(s, anchor, rows));
        if (rows > 0) dflash2_prepare(s->sel, rows);
        d2_rank_ctx rc = {s, k, produced};
        FD_TRY(spec_tree_build_by_parent(&tree, anchor, rows, k, (int)nodes - 1, rank_dflash2, &rc));
    } else {
        const int k = spec_tree_ranks((int)nodes - 1, V), rows = k > 0 ? L - 1 : 0;
        int32_t top[FD_SPEC_MAX_BLOCK * FD_SPEC_MAX_BLOCK];
        float lp[FD_SPEC_MAX_BLOCK * FD_SPEC_MAX_BLOCK];
        FD_TRY(draft_ranked(s, anchor, rows, k, top, lp));
        if (s->oracle) oracle_tree_ranks(s, produced, top, lp, rows, k);
        FD_TRY(spec_tree_build_ranked(&tree, anchor, top, lp, rows, k, (int)nodes - 1));
    }
    const double t1 = fd_time_s();
    const int64_t n0 = t->n_past;
    // greedy: only each node's argmax crosses to the host (n ids, not n x V floats), as in a chain round
    int32_t argmax[FD_SPEC_MAX_BLOCK];
    if (sampled)
        FD_TRY(engine_verify_tree(t, tree.token, tree.parent, tree.n, s->h_tree_logits));
    else
        FD_TRY(engine_verify_tree_greedy(t, tree.token, tree.parent, tree.n, argmax));
    routes_count(&t->routes[FD_ROUTE_SPEC_VERIFY], 1, tree.n);
    const double t2 = fd_time_s();
    int32_t path[FD_SPEC_MAX_BLOCK], next;
    int keep;
    if (sampled)
        keep = spec_tree_accept_sampled(smp, &tree, s->h_tree_logits, V, s->h_p, path, &next);
    else if (s->oracle && s->oracle->force)
        keep = oracle_tree_accept(&tree, s->oracle->accept[s->st.rounds % s->oracle->n_accept], argmax, path, &next);
    else
        keep = spec_tree_accept_greedy(&tree, argmax, path, &next);
    const double t3 = fd_time_s();
    engine_commit_tree(t, n0, path, keep);
    dflash_context_append(s, keep);
    const int acc = keep - 1;
    if (s->on_commit) s->on_commit(s->on_commit_ctx, s, acc);
    if (s->phase_sync && t->be->sync) t->be->sync(t->be);
    for (int i = 0; i < acc; i++) emitted[i] = tree.token[path[i + 1]];
    emitted[acc] = next;
    *n_emitted = keep;
    const double t4 = fd_time_s();
    fd_spec_stats *st = &s->st;
    st->rounds++;
    st->tree_rounds++;
    st->draft_tokens += tree.n - 1; // the nodes verified besides the root
    st->accepted += acc;
    st->emitted += keep;
    for (int i = 0; i < acc; i++) st->accepted_per_pos[i]++;
    st->draft_s += t1 - t0; // the draft forward and the tree built from its rows
    st->verify_s += t2 - t1;
    st->accept_s += t3 - t2;
    st->commit_s += t4 - t3;
    st->round_s += t4 - t0;
    trace_span(t->be, "round: draft", t0, t1);
    trace_span(t->be, "round: verify", t1, t2);
    trace_span(t->be, "round: accept", t2, t3);
    trace_span(t->be, "round: commit", t3, t4);
    return 0;
}
