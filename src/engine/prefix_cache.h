// Prefix cache for hybrid (GDN + attention) models.
//
// The cache is a tree of token blocks of `block` tokens: a node is keyed by (its parent, its block's tokens) through
// a hash chain, and holds that block's attention KV for every attention layer. Because the GDN recurrent state and the
// conv window cannot be rebuilt from KV, a node may also hold a *state snapshot*: the engine's recurrent state right
// after the node's last token. A prefix is usable only up to the deepest matched node that has a snapshot.
//
// Under tensor parallelism (engine_tp.h) the index is one, on the leader, and every node's KV and snapshot are held
// per rank (engine_state.h: es_parts), each rank's part in its own backend memory: a hit restores every rank from its
// own part, an insert stores every rank's. The drafter's context K/V (not sharded: it runs on rank 0) goes with rank
// 0's part. Every engine given to one cache must lead the same ranks (or, plain, run on the same backend).
//
// Memory (KV blocks + snapshots, all backend memory) stays under a byte budget by evicting least-recently-used leaves.
// The budget counts every rank's bytes together, so a budget holds about as many tokens at --tp N as at --tp 1 (each
// rank holds 1 / N of the KV heads and GDN state; more where KV heads are replicated past their count).
// A lookup touches its path leaf-first, so a parent is always more recent than its children and the LRU tail is always
// a leaf. Not thread-safe: the server's scheduler thread is its only user.
#ifndef FD_PREFIX_CACHE_H
#define FD_PREFIX_CACHE_H
#include <stddef.h>
#include <stdint.h>

#include "engine/dflash.h"
#include "engine/engine_state.h"

typedef struct pc_cache pc_cache;

typedef struct {
    int64_t nodes, snapshots;   // live
    size_t bytes, budget;       // live bytes of KV blocks and snapshots (every rank's); the budget
    int64_t evictions;          // nodes evicted so far
    int64_t inserted_blocks;    // nodes created so far
} pc_stats;

// `e` gives the geometry (any engine of the model/backend the cache will serve; a leader: its ranks'). block >= 1.
pc_cache *pc_create(fd_engine *e, int block, size_t budget_bytes);
void pc_free(pc_cache *pc);
int pc_block(const pc_cache *pc);

// Also caches the DFlash drafter's context K/V (every drafter layer) with each block, so that a restored prefix
// leaves the drafter's context complete as well. s gives the geometry; call before the first insert. Afterwards
// pc_restore and pc_insert need the sequence's fd_dflash.
void pc_attach_drafter(pc_cache *pc, const fd_dflash *s);

// Finds the longest cached prefix of ids[0..n) that ends at a node with a state snapshot and is at most max_len
// tokens, and restores it into e (KV, conv and GDN state, n_past) and into spec (drafter context, n_ctx) when a
// drafter is attached. Returns the restored token count (0: nothing usable; e is then untouched). e (and spec)
// must be reset.
int64_t pc_restore(pc_cache *pc, fd_engine *e, fd_dflash *spec, const int32_t *ids, int64_t n, int64_t max_len);

// Caches ids[0..pos) (pos a multiple of the block size, KV of those positions held in e) with a state snapshot at
// pos. snap: a snapshot of e's ranks at pos (es_snap_save) that the cache takes over, leaving *snap empty (freed
// when not needed), or NULL (or empty) to copy e's current state (then e->n_past must equal pos). With a drafter
// attached, spec must hold the context of [0, pos). Skips what does not fit the budget.
void pc_insert(pc_cache *pc, fd_engine *e, fd_dflash *spec, const int32_t *ids, int64_t pos, es_parts *snap);

// Is a snapshot at pos for ids[0..pos) already cached? (Lets the caller skip taking one.)
int pc_has_snapshot(pc_cache *pc, const int32_t *ids, int64_t pos);

// Tenant isolation: lookups and inserts that follow see only blocks cached under the same salt (0 = the shared,
// unsalted cache). The server sets it per request from cache_salt and, optionally, the API key.
void pc_set_salt(pc_cache *pc, uint64_t salt);

void pc_reset(pc_cache *pc); // drops everything
void pc_get_stats(const pc_cache *pc, pc_stats *s);
#endif
