// Snapshot and restore of an engine's per-sequence state, for the prefix cache: the recurrent state (GDN conv window
// and fp32 GDN state of every GDN layer) and ranges of token positions of the attention KV caches. Everything stays
// in backend memory and moves through the backend's copy(), so on a GPU nothing crosses to the host.
//
// The recurrent state of a hybrid model cannot be rebuilt from the KV cache, so a cached prefix is usable only where a
// state snapshot was taken: at position p the snapshot is exactly the engine's state after p tokens.
//
// A tensor-parallel leader (engine_tp.h) holds no state of its own: rank r holds its shard's GDN heads, conv channels
// and KV heads on its own backend. Its snapshots are es_parts, one backend buffer per rank in that rank's memory, so
// a save or a restore copies within each device and never between devices. The one-engine functions (es_geom_init,
// es_state_*, es_kv_*) take a plain engine or one rank (engine_tp_rank); the es_snap_* ones take either.
#ifndef FD_ENGINE_STATE_H
#define FD_ENGINE_STATE_H
#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/engine_tp.h"

typedef struct {
    int n_gdn, n_attn;    // layer counts by kind
    size_t conv_bytes;    // per GDN layer: f32 [conv_dim, K-1]
    size_t gdn_bytes;     // per GDN layer: f32 [Hv, dk, dv]
    size_t state_bytes;   // a whole snapshot: every GDN layer's conv window then GDN state
    size_t kv_token_bytes; // bytes of one token of one attention layer's cache (K, V and any scales)
    int Hkv, hd;
} es_geom;

// One engine's geometry (a plain engine or one rank; a leader is refused: its ranks' shapes differ from its own).
void es_geom_init(es_geom *g, const fd_engine *e);
// Bytes of a KV range buffer holding n tokens of every attention layer.
size_t es_kv_bytes(const es_geom *g, int64_t n);

// Recurrent-state snapshot of one engine: a backend buffer of g->state_bytes (allocate with be->alloc).
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

// ---- per-rank buffers (any engine, a leader included) ----
// part[r] lives in be[r], the backend of rank r of the engine it was made for (a plain engine: one part, on e->be).
// The engines of one tensor-parallel set share their ranks' backends, so parts made for one leader serve another.
typedef struct {
    int n;                     // parts; 0: empty (nothing allocated)
    fd_backend *be[FD_TP_MAX]; // where part[r] lives
    void *part[FD_TP_MAX];
    size_t bytes[FD_TP_MAX];
} es_parts;

// A part of bytes[r] on every rank r of e (p must be empty).
void es_parts_alloc(es_parts *p, fd_engine *e, const size_t *bytes);
void es_parts_free(es_parts *p);          // every part; p is empty afterwards (a no-op on an empty one)
size_t es_parts_bytes(const es_parts *p); // all parts together

// The recurrent state of e as a whole (a leader: each rank's own state into its own part). A save into an empty dst
// allocates it first; a load needs a snapshot of an engine of the same model and ranks.
void es_snap_save(fd_engine *e, es_parts *dst);
void es_snap_load(fd_engine *e, const es_parts *src);
#endif
