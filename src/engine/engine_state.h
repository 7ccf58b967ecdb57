// Snapshot and restore of an engine's per-sequence state, for the prefix cache: the recurrent state (GDN conv window
// and fp32 GDN state of every GDN layer) and ranges of token positions of the attention KV caches. Everything stays
// in backend memory and moves through the backend's copy(), so on a GPU nothing crosses to the host.
//
// The recurrent state of a hybrid model cannot be rebuilt from the KV cache, so a cached prefix is usable only where a
// state snapshot was taken: at position p the snapshot is exactly the engine's state after p tokens.
#ifndef FD_ENGINE_STATE_H
#define FD_ENGINE_STATE_H
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct {
    int n_gdn, n_attn;    // layer counts by kind
    size_t conv_bytes;    // per GDN layer: f32 [conv_dim, K-1]
    size_t gdn_bytes;     // per GDN layer: f32 [Hv, dk, dv]
    size_t state_bytes;   // a whole snapshot: every GDN layer's conv window then GDN state
    size_t kv_token_bytes; // bytes of one token of one attention layer's cache (K, V and any scales)
    int Hkv, hd;
} es_geom;

void es_geom_init(es_geom *g, const fd_engine *e);
// Bytes of a KV range buffer holding n tokens of every attention layer.
size_t es_kv_bytes(const es_geom *g, int64_t n);

// Recurrent-state snapshot: a backend buffer of g->state_bytes (allocate with be->alloc).
void es_state_save(fd_engine *e, const es_geom *g, void *dst);
void es_state_load(fd_engine *e, const es_geom *g, const void *src);

// KV of positions [pos0, pos0+n) of every attention layer <-> a buffer of es_kv_bytes(g, n): one cache of capacity
// n per attention layer, in the backend's layout. Positions must lie below e->opt.capacity, and a load's positions
// must be reserved first (engine_reserve).
void es_kv_save(fd_engine *e, const es_geom *g, void *dst, int64_t pos0, int64_t n);
void es_kv_load(fd_engine *e, const es_geom *g, const void *src, int64_t pos0, int64_t n);

// Positions [pos0, pos0+n) of one attention-style cache (Hkv heads of hd; paged or contiguous) to (save) or from
// buf, which holds them as a contiguous cache of capacity n (be->kv_copy). Returns the bytes of buf used. The DFlash
// drafter's context caches are caches of the same kind (both come from be->kv_store).
size_t es_cache_rows(fd_backend *be, const fd_kv_view *cache, int Hkv, int hd, void *buf, int64_t pos0, int64_t n,
                     int save);
#endif
