// Engine state snapshots (see engine_state.h).
//
// KV layout: private to the backend. A snapshot buffer of n tokens is itself a contiguous cache of capacity n, filled
// and read back with the backend's kv_copy through the sequence's page table, so any layout (fp32, bf16, e4m3 with
// scales) and any page placement snapshots the same way.
#include "engine/engine_state.h"

#include "engine/engine_tp.h"

#include <string.h>

void es_geom_init(es_geom *g, const fd_engine *e) {
    FD_CHECK(!e->tp, "engine state geometry of a tensor-parallel leader: take its ranks' (engine_tp_rank)");
    const fd_rank_plan *p = &e->m->plan;
    memset(g, 0, sizeof *g);
    g->n_gdn = p->n_gdn_layers;
    g->n_attn = p->num_layers - p->n_gdn_layers;
    g->conv_bytes = (size_t)plan_conv_state_bytes(p);
    g->gdn_bytes = (size_t)plan_gdn_state_bytes(p);
    g->state_bytes = (size_t)g->n_gdn * (g->conv_bytes + g->gdn_bytes);
    g->Hkv = p->kv_heads;
    g->hd = p->head_dim;
    g->kv_token_bytes = e->be->kv_bytes_per_token(e->be, p->kv_heads, p->head_dim);
}

size_t es_kv_bytes(const es_geom *g, int64_t n) { return (size_t)g->n_attn * g->kv_token_bytes * (size_t)n; }

void es_state_save(fd_engine *e, const es_geom *g, void *dst) {
    FD_CHECK(!e->tp, "a tensor-parallel leader's state is its ranks': es_snap_save");
    const fd_rank_plan *plan = &e->m->plan;
    char *p = dst;
    for (int i = 0; i < plan->num_layers; i++) {
        if (plan->layers[i].kind != FD_LAYER_GDN) continue;
        e->be->copy(e->be, p, e->conv_state[i], g->conv_bytes);
        p += g->conv_bytes;
        e->be->copy(e->be, p, e->gdn_state[i], g->gdn_bytes);
        p += g->gdn_bytes;
    }
}

void es_state_load(fd_engine *e, const es_geom *g, const void *src) {
    FD_CHECK(!e->tp, "a tensor-parallel leader's state is its ranks': es_snap_load");
    const fd_rank_plan *plan = &e->m->plan;
    const char *p = src;
    for (int i = 0; i < plan->num_layers; i++) {
        if (plan->layers[i].kind != FD_LAYER_GDN) continue;
        e->be->copy(e->be, e->conv_state[i], p, g->conv_bytes);
        p += g->conv_bytes;
        e->be->copy(e->be, e->gdn_state[i], p, g->gdn_bytes);
        p += g->gdn_bytes;
    }
}

size_t es_cache_rows(fd_backend *be, const fd_kv_view *cache, int Hkv, int hd, void *buf, int64_t pos0, int64_t n,
                     int save) {
    FD_CHECK(pos0 >= 0 && n >= 0 && pos0 + n <= cache->capacity, "KV range [%lld, %lld) beyond capacity %lld",
             (long long)pos0, (long long)(pos0 + n), (long long)cache->capacity);
    const fd_kv_view snap = fd_kv_flat(buf, n);
    if (save)
        be->kv_copy(be, &snap, 0, cache, pos0, n, Hkv, hd);
    else
        be->kv_copy(be, cache, pos0, &snap, 0, n, Hkv, hd);
    return be->kv_bytes_per_token(be, Hkv, hd) * (size_t)n;
}

static void kv_move(fd_engine *e, const es_geom *g, char *buf, int64_t pos0, int64_t n, int save) {
    FD_CHECK(!e->tp, "a tensor-parallel leader's KV is its ranks': save or load each rank's (engine_tp_rank)");
    const fd_rank_plan *p = &e->m->plan;
    for (int i = 0; i < p->num_layers; i++)
        if (p->layers[i].kind == FD_LAYER_ATTN) {
            const fd_kv_view kv = engine_kv_view(e, i);
            buf += es_cache_rows(e->be, &kv, g->Hkv, g->hd, buf, pos0, n, save);
        }
}

void es_kv_save(fd_engine *e, const es_geom *g, void *dst, int64_t pos0, int64_t n) { kv_move(e, g, dst, pos0, n, 1); }

void es_kv_load(fd_engine *e, const es_geom *g, const void *src, int64_t pos0, int64_t n) {
    kv_move(e, g, (char *)src, pos0, n, 0);
}

// ---- per-rank buffers ----

void es_parts_alloc(es_parts *p, fd_engine *e, const size_t *bytes) {
    FD_CHECK(p->n == 0, "per-rank buffers allocated twice");
    const int n = engine_tp_size(e);
    for (int r = 0; r < n; r++) {
        fd_backend *be = engine_tp_rank(e, r)->be;
        p->be[r] = be;
        p->bytes[r] = bytes[r];
        p->part[r] = be->alloc(be, bytes[r] ? bytes[r] : 1); // a model without GDN layers has no state: 1 byte
    }
    p->n = n;
}

void es_parts_free(es_parts *p) {
    for (int r = 0; r < p->n; r++) p->be[r]->free(p->be[r], p->part[r]);
    memset(p, 0, sizeof *p);
}

size_t es_parts_bytes(const es_parts *p) {
    size_t b = 0;
    for (int r = 0; r < p->n; r++) b += p->bytes[r];
    return b;
}

// Part r of a snapshot of e: rank r's state, in rank r's memory.
static void snap_check(fd_engine *e, const es_parts *s, int r, const es_geom *g) {
    FD_CHECK(s->n == engine_tp_size(e) && s->be[r] == engine_tp_rank(e, r)->be && s->bytes[r] == g->state_bytes,
             "state snapshot of another engine (%d parts for %d ranks)", s->n, engine_tp_size(e));
}

void es_snap_save(fd_engine *e, es_parts *dst) {
    es_geom g[FD_TP_MAX] = {0};
    size_t bytes[FD_TP_MAX] = {0};
    const int n = engine_tp_size(e);
    for (int r = 0; r < n; r++) {
        es_geom_init(&g[r], engine_tp_rank(e, r));
        bytes[r] = g[r].state_bytes;
    }
    if (!dst->n) es_parts_alloc(dst, e, bytes);
    for (int r = 0; r < n; r++) {
        snap_check(e, dst, r, &g[r]);
        es_state_save(engine_tp_rank(e, r), &g[r], dst->part[r]);
    }
}

void es_snap_load(fd_engine *e, const es_parts *src) {
    for (int r = 0; r < engine_tp_size(e); r++) {
        fd_engine *q = engine_tp_rank(e, r);
        es_geom g;
        es_geom_init(&g, q);
        snap_check(e, src, r, &g);
        es_state_load(q, &g, src->part[r]);
    }
}
