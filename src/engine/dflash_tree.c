// Tree verification of DFlash drafts (see dflash_tree.h).
#include "engine/dflash_tree.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/routes.h"
#include "engine/trace.h"

// The k largest logits of one row, best first (ties: the lower id first), and their log-softmax values.
static void row_top_k(const float *z, int V, int k, int32_t *ids, float *logp) {
    int have = 0;
    for (int v = 0; v < V; v++) {
        if (have == k && !(z[v] > z[ids[k - 1]])) continue;
        int at = have < k ? have++ : k - 1; // the slot it takes, then moved up past every smaller logit
        while (at > 0 && z[v] > z[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = v;
    }
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = z[v] > mx ? z[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)z[v] - mx);
    const double lse = mx + log(sum);
    for (int i = 0; i < k; i++) logp[i] = (float)((double)z[ids[i]] - lse);
}

// A candidate node: the rank-th best token of its depth's row under parent.
typedef struct {
    float score; // the path's log-probability with this token
    int parent, depth, rank;
} tree_cand;

int spec_tree_build(fd_spec_tree *t, int32_t anchor, const float *logits, int rows, int V, int budget) {
    if (budget < 0 || budget > FD_SPEC_MAX_BLOCK - 1 || rows < 0 || V < 1)
        return fd_error_set("draft tree: budget %d (0..%d), %d rows", budget, FD_SPEC_MAX_BLOCK - 1, rows);
    t->n = 1;
    t->token[0] = anchor;
    t->parent[0] = -1;
    t->depth[0] = 0;
    t->logq[0] = 0;
    if (budget == 0 || rows == 0) return 0;
    // a node's children take at most `budget` distinct ranks of its row
    const int k = budget < V ? budget : V;
    int32_t *top = fd_malloc(sizeof(int32_t) * (size_t)rows * k);
    float *lp = fd_malloc(sizeof(float) * (size_t)rows * k);
    for (int r = 0; r < rows; r++) row_top_k(logits + (int64_t)r * V, V, k, top + r * k, lp + r * k);
    // Best-first: popping a candidate adds it as a node and offers its next sibling (rank + 1) and its first child
    // (rank 0 one depth down); scores only fall along either, so the pops are the budget best paths. Each pop
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
        t->token[node] = top[(c.depth - 1) * k + c.rank];
        t->parent[node] = c.parent;
        t->depth[node] = c.depth;
        t->logq[node] = c.score;
        if (c.rank + 1 < k)
            cand[n_cand++] =
                (tree_cand){t->logq[c.parent] + lp[(c.depth - 1) * k + c.rank + 1], c.parent, c.depth, c.rank + 1};
        if (c.depth < rows) cand[n_cand++] = (tree_cand){c.score + lp[c.depth * k], node, c.depth + 1, 0};
    }
    free(top);
    free(lp);
    return 0;
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

// The oracle drafter's tree (the bench; dflash.h: fd_spec_oracle): each draft row gets the reference
// continuation's token raised far above its best logit, so the tree's best path (its spine) is the reference to
// depth `rows` and the rest of the budget branches off the spine where the drafter's own rows rank it, the shape
// of a confident drafter's tree. With `force` the round accepts exactly the schedule's count along the spine.
#define ORACLE_TREE_MARGIN 30.0f
static void oracle_tree_rows(const fd_dflash *s, int64_t produced, float *rows, int n_rows, int V) {
    const fd_spec_oracle *o = s->oracle;
    for (int i = 0; i < n_rows; i++) {
        float *z = rows + (int64_t)i * V, mx = z[0];
        for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        const int64_t j = produced + i;
        z[j < o->ref_len ? o->ref[j] : 0] = mx + ORACLE_TREE_MARGIN;
    }
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
    if (s->dr->v2) return fd_error_set("spec_verify=tree: DFlash2 drafters verify chains only for now");
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
    int32_t draft[FD_SPEC_MAX_BLOCK];
    FD_TRY(dflash_draft(s, anchor, draft, s->h_q));
    if (s->oracle) oracle_tree_rows(s, produced, s->h_q, L - 1, V);
    fd_spec_tree tree;
    FD_TRY(spec_tree_build(&tree, anchor, s->h_q, L - 1, V, (int)nodes - 1));
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
