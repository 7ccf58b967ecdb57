// The target's side of a speculative round (engine.h): hidden-state taps the drafter reads, per-token GDN / conv
// state slots, the verify forward of a drafted block and the commit of its accepted prefix. The tree's verify
// forward and commit are engine_tree.c; the round itself is dflash.c.
//
// Route gdn_verify: with `slots` a chain verify writes the GDN state after every token to slot t and updates the
// live state; the commit copies slot keep - 1 (nothing when every token is kept). With `replay` (the default where
// the backend has gdn_core_readonly) the verify's GDN core only reads the live state S0 and leaves its inputs (the
// post-conv qkv, b and a rows) in gdn_keep; the commit runs gdn_core's recurrence over the first `keep` of them
// from S0, in place. That is the verify's own per-token arithmetic (backend.h: gdn_core_readonly), so the state is
// bitwise the slot's, and the verify writes no per-token GDN states (8 x 3.1 MB a layer for the 27B at block 8).
// The conv state (K - 1 floats a channel) keeps its slots under both values; a tree verify always takes slots.
#include "engine/engine.h"

#include "engine/engine_graphs.h"
#include "engine/engine_tp.h"

int engine_set_taps(fd_engine *e, const int *layers, int n) {
    const fd_config *c = &e->m->cfg;
    if (n < 1 || n > c->num_layers) return fd_error_set("%d tap layers for a %d-layer target", n, c->num_layers);
    if (e->tp) return engine_tp_set_taps(e, layers, n);
    for (int i = 0; i < FD_MAX_LAYERS; i++) e->tap_col[i] = -1;
    for (int j = 0; j < n; j++) {
        if (layers[j] < 0 || layers[j] >= c->num_layers)
            return fd_error_set("tap layer %d is outside the target's layers 0..%d", layers[j], c->num_layers - 1);
        if (e->tap_col[layers[j]] >= 0) return fd_error_set("tap layer %d is listed twice", layers[j]);
        e->tap_col[layers[j]] = j;
    }
    e->n_taps = n;
    engine_graphs_drop(e); // recorded forwards copy to the old taps columns
    if (e->taps) e->be->free(e->be, e->taps);
    e->taps = e->be->alloc(e->be, (size_t)e->opt.max_batch * n * e->m->plan.hidden * e->be->act_bytes);
    return 0;
}

int engine_enable_slots(fd_engine *e, int block) {
    const fd_rank_plan *p = &e->m->plan;
    fd_backend *be = e->be;
    if (block < 1 || block > e->opt.max_batch)
        return fd_error_set("verify block of %d tokens: must be 1..%d (the prefill token budget)", block,
                            e->opt.max_batch);
    if (e->tp) return engine_tp_enable_slots(e, block);
    if (e->gdn_slots && block <= e->spec_block) return 0;
    engine_graphs_drop(e); // recorded verify forwards point at the old slots
    if (!e->gdn_slots) {
        e->gdn_slots = fd_calloc((size_t)p->num_layers, sizeof(float *));
        e->conv_slots = fd_calloc((size_t)p->num_layers, sizeof(float *));
        e->gdn_keep = fd_calloc((size_t)p->num_layers, sizeof(void *));
    }
    // a replay verify's kept rows per GDN layer: post-conv qkv, b, a (forward.h: fd_fwd_seg.gdn_keep)
    const size_t keep_row = (size_t)(p->conv_channels + 2 * p->gdn_v_heads) * (size_t)be->act_bytes;
    if (e->tree_parent_dev) be->free(be, e->tree_parent_dev);
    e->tree_parent_dev = be->alloc(be, (size_t)2 * block * sizeof(int32_t)); // a tree's parents, then its depths
    for (int i = 0; i < p->num_layers; i++)
        if (p->layers[i].kind == FD_LAYER_GDN) {
            if (e->gdn_slots[i]) be->free(be, e->gdn_slots[i]);
            if (e->conv_slots[i]) be->free(be, e->conv_slots[i]);
            if (e->gdn_keep[i]) be->free(be, e->gdn_keep[i]);
            e->gdn_slots[i] = be->alloc(be, (size_t)plan_gdn_state_bytes(p) * (size_t)block);
            e->conv_slots[i] = be->alloc(be, (size_t)plan_conv_state_bytes(p) * (size_t)block);
            e->gdn_keep[i] = be->alloc(be, keep_row * (size_t)block);
        }
    e->spec_block = block;
    return 0;
}

int engine_verify(fd_engine *e, const int32_t *ids, int n, float *logits) {
    if (n < 1 || n > e->spec_block)
        return fd_error_set("verify of %d tokens: state slots hold %d", n, e->spec_block);
    e->use_slots = 1;
    int rc = engine_forward(e, ids, n, logits, 1);
    e->use_slots = 0;
    return rc;
}

int engine_verify_greedy(fd_engine *e, const int32_t *ids, int n, int32_t *argmax) {
    if (n < 1 || n > e->spec_block)
        return fd_error_set("verify of %d tokens: state slots hold %d", n, e->spec_block);
    e->use_slots = 1;
    int rc = engine_forward_greedy(e, ids, n, argmax);
    e->use_slots = 0;
    return rc;
}

void engine_commit(fd_engine *e, int64_t n_past_before_verify, int keep) {
    FD_CHECK(keep >= 1 && n_past_before_verify + keep <= e->n_past, "commit %d of %lld verified tokens", keep,
             (long long)(e->n_past - n_past_before_verify));
    if (e->tp) {
        engine_tp_commit(e, n_past_before_verify, keep);
        return;
    }
    const int n_verified = (int)(e->n_past - n_past_before_verify);
    e->n_past = n_past_before_verify + keep; // attention KV past n_past is stale and never read
    if (e->replay_pending) {
        FD_CHECK(e->replay_pending == n_verified, "commit after a replay verify of %d tokens: %d verified",
                 e->replay_pending, n_verified);
        e->replay_pending = 0;
        engine_commit_replay(e, n_verified, keep);
        return;
    }
    if (keep == n_verified) return; // the live state is already the state after the last token
    engine_commit_slot(e, keep - 1);
}

// State copies gathered into calls of copy_batch (at most BATCH a call), or one at a time where the backend has
// none: the 27B's 48 GDN layers commit 96 copies in two calls.
enum { BATCH = 64 };
typedef struct {
    fd_backend *be;
    void *dst[BATCH];
    const void *src[BATCH];
    size_t bytes[BATCH];
    int count;
} copy_batcher;

static void batch_flush(copy_batcher *cb) {
    if (cb->be->copy_batch && cb->count)
        cb->be->copy_batch(cb->be, cb->dst, cb->src, cb->bytes, cb->count);
    else
        for (int j = 0; j < cb->count; j++) cb->be->copy(cb->be, cb->dst[j], cb->src[j], cb->bytes[j]);
    cb->count = 0;
}

static void batch_add(copy_batcher *cb, void *dst, const void *src, size_t bytes) {
    if (cb->count == BATCH) batch_flush(cb);
    cb->dst[cb->count] = dst, cb->src[cb->count] = src, cb->bytes[cb->count++] = bytes;
}

void engine_commit_replay(fd_engine *e, int n_verified, int keep) {
    const fd_rank_plan *p = &e->m->plan;
    fd_backend *be = e->be;
    const int C = p->conv_channels, Hv = p->gdn_v_heads, ab = be->act_bytes;
    const size_t conv_bytes = (size_t)plan_conv_state_bytes(p);
    copy_batcher cb = {.be = be};
    for (int i = 0; i < p->num_layers; i++) {
        if (p->layers[i].kind != FD_LAYER_GDN) continue;
        const fd_layer *L = &e->m->layers[i];
        // the rows as the verify laid them out: qkv [n_verified, C], b [n_verified, Hv], a [n_verified, Hv]
        const char *qkv = e->gdn_keep[i], *b = qkv + (size_t)n_verified * C * ab, *a = b + (size_t)n_verified * Hv * ab;
        // o goes to the scratch's core-output rows, free between forwards (only the state is wanted)
        be->gdn_core(be, FD_GDN_SERIAL, e->scratch.t[5], qkv, b, a, &L->A_log, &L->dt_bias, e->gdn_state[i], keep,
                     p->gdn_k_heads, Hv, p->gdn_k_dim, p->gdn_v_dim, NULL);
        if (keep == n_verified) continue; // the verify left the conv state after its last token
        batch_add(&cb, e->conv_state[i], (char *)e->conv_slots[i] + conv_bytes * (size_t)(keep - 1), conv_bytes);
    }
    batch_flush(&cb);
}

void engine_commit_slot(fd_engine *e, int slot) {
    const fd_rank_plan *p = &e->m->plan;
    const size_t gdn_bytes = (size_t)plan_gdn_state_bytes(p), conv_bytes = (size_t)plan_conv_state_bytes(p);
    copy_batcher cb = {.be = e->be};
    for (int i = 0; i < p->num_layers; i++) {
        if (p->layers[i].kind != FD_LAYER_GDN) continue;
        batch_add(&cb, e->gdn_state[i], (char *)e->gdn_slots[i] + gdn_bytes * (size_t)slot, gdn_bytes);
        batch_add(&cb, e->conv_state[i], (char *)e->conv_slots[i] + conv_bytes * (size_t)slot, conv_bytes);
    }
    batch_flush(&cb);
}
