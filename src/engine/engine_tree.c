// Tree verify on the engine (engine.h: engine_verify_tree / engine_commit_tree): one forward over the nodes of a
// draft tree, each node's GDN / conv state in its own slot (computed from its parent's), and the commit of one
// root-to-node path. The forward's tree shape is model/forward.h's fd_fwd_tree.
#include <stdlib.h>

#include "engine/engine.h"

int engine_tree_supported(const fd_engine *e) {
    const fd_backend *be = e->be;
    if (e->tp) return fd_error_set("spec_verify=tree does not run under --tp yet (its ops are per rank): use spec_verify=chain");
    if (be->conv1d_silu_tree && be->gdn_core_tree && be->attention_tree) return 0;
    return fd_error_set("spec_verify=tree: backend %s has no tree verify ops yet (conv1d_silu_tree, gdn_core_tree, "
                        "attention_tree; the cpu backend has them): use spec_verify=chain",
                        be->name);
}

// The forward of engine_verify_tree / engine_verify_tree_greedy: logits of every node to the host, or (argmax not
// NULL) only each node's argmax id (backend argmax_rows).
static int verify_tree(fd_engine *e, const int32_t *ids, const int32_t *parent, int n, float *logits,
                       int32_t *argmax) {
    FD_TRY(engine_tree_supported(e));
    if (n < 1 || n > e->spec_block)
        return fd_error_set("tree verify of %d nodes: state slots hold %d", n, e->spec_block);
    // the parents and the depths, one copy to the device: [parent 0..n | depth 0..n]
    int32_t *tree_host = fd_malloc(sizeof(int32_t) * 2 * (size_t)n), *depth = tree_host + n;
    for (int t = 0; t < n; t++) {
        const int ok = t == 0 ? parent[0] == -1 : parent[t] >= 0 && parent[t] < t;
        if (!ok) {
            free(tree_host);
            return fd_error_set("tree verify: node %d has parent %d (the root's must be -1, every other node's an "
                                "earlier node)",
                                t, parent[t]);
        }
        tree_host[t] = parent[t];
        depth[t] = t == 0 ? 0 : depth[parent[t]] + 1;
    }
    fd_backend *be = e->be;
    be->to_device(be, e->tree_parent_dev, tree_host, sizeof(int32_t) * 2 * (size_t)n);
    const fd_fwd_tree tree = {parent, depth, e->tree_parent_dev, e->tree_parent_dev + n};
    e->tree = &tree;
    e->use_slots = 1;
    const int rc = argmax ? engine_forward_greedy(e, ids, n, argmax) : engine_forward(e, ids, n, logits, 1);
    e->use_slots = 0;
    e->tree = NULL;
    free(tree_host);
    return rc;
}

int engine_verify_tree(fd_engine *e, const int32_t *ids, const int32_t *parent, int n, float *logits) {
    return verify_tree(e, ids, parent, n, logits, NULL);
}

int engine_verify_tree_greedy(fd_engine *e, const int32_t *ids, const int32_t *parent, int n, int32_t *argmax) {
    return verify_tree(e, ids, parent, n, NULL, argmax);
}

void engine_commit_tree(fd_engine *e, int64_t n_past_before_verify, const int32_t *path, int keep) {
    const fd_rank_plan *p = &e->m->plan;
    fd_backend *be = e->be;
    const int64_t n0 = n_past_before_verify, n_verified = e->n_past - n0;
    FD_CHECK(keep >= 1 && keep <= n_verified && path[0] == 0, "tree commit of %d of %lld verified nodes", keep,
             (long long)n_verified);
    // Node path[d] sits at position n0 + path[d] and row path[d]; it belongs at n0 + d. path[d] >= d (a node's
    // index is at least its depth) and the sources of later depths lie beyond d, so moving in depth order never
    // overwrites a source still to be read.
    const size_t tap_row = (size_t)e->n_taps * p->hidden * be->act_bytes;
    for (int d = 1; d < keep; d++) {
        FD_CHECK(path[d] >= d && path[d] < n_verified && path[d] > path[d - 1], "tree commit: path node %d at depth %d",
                 path[d], d);
        if (path[d] == d) continue;
        for (int i = 0; i < p->num_layers; i++)
            if (p->layers[i].kind != FD_LAYER_GDN) {
                const fd_kv_view kv = engine_kv_view(e, i);
                be->kv_copy(be, &kv, n0 + d, &kv, n0 + path[d], 1, p->kv_heads, p->head_dim);
            }
        if (e->taps)
            be->copy_rows(be, (char *)e->taps + tap_row * (size_t)d, tap_row,
                          (char *)e->taps + tap_row * (size_t)path[d], tap_row, 1, tap_row);
    }
    e->n_past = n0 + keep; // K/V past n_past is stale and never read
    // the tree left the committed state as it was: the accepted node's slot is the state after the path
    engine_commit_slot(e, path[keep - 1]);
}
