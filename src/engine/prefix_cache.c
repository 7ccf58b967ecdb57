// Hybrid prefix cache (see prefix_cache.h).
#include "engine/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

typedef struct pc_node {
    uint64_t hash;                  // of (parent hash, this block's tokens); a first block's "parent" is the salt
    uint64_t salt;                  // the tenant (pc_set_salt) that cached it: first blocks match only their own
    struct pc_node *parent, *hnext; // tree parent; hash-bucket chain
    struct pc_node *newer, *older;  // LRU list (head = most recent)
    int n_children;
    int32_t *tokens; // [block]
    es_parts kv;     // rank r: [its n_attn][K block | V block] of its KV heads; rank 0 then [drafter layers][K | V]
    es_parts state;  // every rank's state snapshot after this block, or empty (n == 0)
} pc_node;

// The index (tree, hashes, LRU, salts, counts) is one; what a node holds is per rank (engine_state.h: es_parts).
// Bytes count every rank's parts: the budget is the cache's memory over all devices together.
struct pc_cache {
    fd_backend *be; // where the drafter runs (rank 0's backend under --tp)
    int ranks;
    es_geom g[FD_TP_MAX];             // rank r's geometry (a plain engine: g[0])
    int block;
    size_t budget, bytes, node_bytes; // node_bytes: KV of one block over all ranks (+ its tokens)
    size_t kv_bytes[FD_TP_MAX];       // a node's KV part on rank r
    size_t state_bytes;               // a snapshot over all ranks
    int n_draft;                      // drafter layers cached with each block (0: none)
    int draft_Hkv, draft_hd;          // their geometry
    pc_node **buckets;
    size_t n_buckets;
    pc_node *lru_head, *lru_tail;
    int64_t nodes, snapshots, evictions, inserted;
    uint64_t salt; // of the sequence being looked up / inserted now (pc_set_salt)
};

static uint64_t mix64(uint64_t x) { // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// A node's bytes: its KV parts over all ranks and its tokens.
static void pc_size_nodes(pc_cache *pc) {
    pc->node_bytes = (size_t)pc->block * sizeof(int32_t);
    for (int r = 0; r < pc->ranks; r++) pc->node_bytes += pc->kv_bytes[r];
}

static uint64_t block_hash(uint64_t parent, const int32_t *t, int n) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < n; i++) h = mix64(h ^ (uint32_t)t[i]);
    return h;
}

pc_cache *pc_create(fd_engine *e, int block, size_t budget_bytes) {
    FD_CHECK(block >= 1);
    pc_cache *pc = fd_calloc(1, sizeof *pc);
    pc->be = e->be;
    pc->ranks = engine_tp_size(e);
    pc->block = block;
    pc->budget = budget_bytes;
    for (int r = 0; r < pc->ranks; r++) {
        es_geom_init(&pc->g[r], engine_tp_rank(e, r));
        pc->kv_bytes[r] = es_kv_bytes(&pc->g[r], block);
        pc->state_bytes += pc->g[r].state_bytes;
    }
    pc_size_nodes(pc);
    pc->n_buckets = 1024;
    pc->buckets = fd_calloc(pc->n_buckets, sizeof *pc->buckets);
    return pc;
}

void pc_attach_drafter(pc_cache *pc, const fd_dflash *s) {
    FD_CHECK(pc->nodes == 0, "attach the drafter before caching anything");
    const fd_drafter *d = s->dr;
    pc->n_draft = d->num_layers;
    pc->draft_Hkv = d->num_kv_heads;
    pc->draft_hd = d->head_dim;
    // the drafter is not sharded: its context caches live on pc->be, rank 0's backend, so rank 0's part holds them
    pc->kv_bytes[0] += (size_t)pc->n_draft * pc->be->kv_bytes_per_token(pc->be, d->num_kv_heads, d->head_dim) *
                       (size_t)pc->block;
    pc_size_nodes(pc);
}

// e is an engine of the cache's ranks (every leader of one tensor-parallel set shares the ranks' backends).
static void check_engine(const pc_cache *pc, fd_engine *e) {
    FD_CHECK(engine_tp_size(e) == pc->ranks && engine_tp_rank(e, 0)->be == pc->be,
             "prefix cache of %d rank(s) used with an engine of %d", pc->ranks, engine_tp_size(e));
}

// One block's KV (each rank's target attention layers into its own part, then the drafter's layers into rank 0's)
// between a node and the sequence.
static void block_kv(pc_cache *pc, fd_engine *e, fd_dflash *spec, es_parts *buf, int64_t pos0, int save) {
    for (int r = 0; r < pc->ranks; r++) {
        fd_engine *q = engine_tp_rank(e, r);
        if (save) es_kv_save(q, &pc->g[r], buf->part[r], pos0, pc->block);
        else es_kv_load(q, &pc->g[r], buf->part[r], pos0, pc->block);
    }
    char *p = (char *)buf->part[0] + es_kv_bytes(&pc->g[0], pc->block);
    for (int l = 0; l < pc->n_draft; l++) {
        const fd_kv_view kv = fd_kv_flat(spec->kv[l], spec->capacity);
        p += es_cache_rows(pc->be, &kv, pc->draft_Hkv, pc->draft_hd, p, pos0, pc->block, save);
    }
}

int pc_block(const pc_cache *pc) { return pc->block; }

static void lru_unlink(pc_cache *pc, pc_node *n) {
    if (n->newer) n->newer->older = n->older;
    else pc->lru_head = n->older;
    if (n->older) n->older->newer = n->newer;
    else pc->lru_tail = n->newer;
    n->newer = n->older = NULL;
}

static void lru_push_front(pc_cache *pc, pc_node *n) {
    n->older = pc->lru_head;
    n->newer = NULL;
    if (pc->lru_head) pc->lru_head->newer = n;
    pc->lru_head = n;
    if (!pc->lru_tail) pc->lru_tail = n;
}

// Marks path[0..k) used, leaf first, so each parent ends up more recent than its children.
static void touch_path(pc_cache *pc, pc_node **path, int64_t k) {
    for (int64_t i = k - 1; i >= 0; i--) {
        lru_unlink(pc, path[i]);
        lru_push_front(pc, path[i]);
    }
}

// A tree per salt: a first block matches only under the current salt, and every deeper node hangs from one of
// those, so no lookup ever reaches another tenant's blocks (a hash collision cannot either: the salt is compared).
static pc_node *find_child(pc_cache *pc, pc_node *parent, const int32_t *t) {
    const uint64_t h = block_hash(parent ? parent->hash : pc->salt, t, pc->block);
    for (pc_node *n = pc->buckets[h % pc->n_buckets]; n; n = n->hnext)
        if (n->hash == h && n->parent == parent && (parent || n->salt == pc->salt) &&
            !memcmp(n->tokens, t, (size_t)pc->block * sizeof *t))
            return n;
    return NULL;
}

void pc_set_salt(pc_cache *pc, uint64_t salt) { pc->salt = salt; }

static void rehash(pc_cache *pc) {
    size_t nb = pc->n_buckets * 2;
    pc_node **b = fd_calloc(nb, sizeof *b);
    for (size_t i = 0; i < pc->n_buckets; i++)
        for (pc_node *n = pc->buckets[i], *next; n; n = next) {
            next = n->hnext;
            n->hnext = b[n->hash % nb];
            b[n->hash % nb] = n;
        }
    free(pc->buckets);
    pc->buckets = b;
    pc->n_buckets = nb;
}

static void drop_state(pc_cache *pc, pc_node *n) {
    if (!n->state.n) return;
    es_parts_free(&n->state);
    pc->bytes -= pc->state_bytes;
    pc->snapshots--;
}

static void node_free(pc_cache *pc, pc_node *n) {
    pc_node **pp = &pc->buckets[n->hash % pc->n_buckets];
    while (*pp != n) pp = &(*pp)->hnext;
    *pp = n->hnext;
    lru_unlink(pc, n);
    if (n->parent) n->parent->n_children--;
    drop_state(pc, n);
    es_parts_free(&n->kv);
    free(n->tokens);
    pc->bytes -= pc->node_bytes;
    pc->nodes--;
    free(n);
}

int64_t pc_restore(pc_cache *pc, fd_engine *e, fd_dflash *spec, const int32_t *ids, int64_t n, int64_t max_len) {
    check_engine(pc, e);
    FD_CHECK(e->n_past == 0, "prefix restore into a sequence that is not empty");
    FD_CHECK(!pc->n_draft || (spec && spec->n_ctx == 0), "prefix restore: the drafter's context must be empty");
    if (max_len > n) max_len = n;
    const int64_t nb = max_len / pc->block;
    if (nb < 1) return 0;
    pc_node **path = fd_malloc((size_t)nb * sizeof *path);
    int64_t depth = 0, usable = 0;
    pc_node *cur = NULL;
    while (depth < nb) {
        pc_node *c = find_child(pc, cur, ids + depth * pc->block);
        if (!c) break;
        path[depth++] = cur = c;
        if (c->state.n) usable = depth;
    }
    touch_path(pc, path, depth);
    // Pages for the restored positions; a short pool restores nothing (the request's own prefill then reports the
    // pool as full, or fits once the pages it needs are there).
    if (usable && engine_reserve(e, usable * pc->block)) {
        fd_error_clear();
        usable = 0;
    }
    for (int64_t i = 0; i < usable; i++) block_kv(pc, e, spec, &path[i]->kv, i * pc->block, 0);
    if (usable) {
        es_snap_load(e, &path[usable - 1]->state);
        for (int r = 0; r < pc->ranks; r++) engine_tp_rank(e, r)->n_past = usable * pc->block; // e itself when plain
        e->n_past = usable * pc->block;
        if (pc->n_draft) spec->n_ctx = usable * pc->block;
    }
    free(path);
    return usable * pc->block;
}

int pc_has_snapshot(pc_cache *pc, const int32_t *ids, int64_t pos) {
    pc_node *cur = NULL;
    for (int64_t i = 0; i + pc->block <= pos; i += pc->block)
        if (!(cur = find_child(pc, cur, ids + i))) return 0;
    return cur && cur->state.n;
}

// Evicts LRU leaves until `need` more bytes fit; never a node of `path` (in use). 0 if it fits.
static int make_room(pc_cache *pc, size_t need, pc_node **path, int64_t k) {
    while (pc->bytes + need > pc->budget) {
        pc_node *v = pc->lru_tail;
        if (!v) return -1;
        for (int64_t i = 0; i < k; i++)
            if (path[i] == v) return -1; // only the path itself is left
        FD_CHECK(v->n_children == 0, "prefix cache: LRU tail is not a leaf");
        node_free(pc, v);
        pc->evictions++;
    }
    return 0;
}

void pc_insert(pc_cache *pc, fd_engine *e, fd_dflash *spec, const int32_t *ids, int64_t pos, es_parts *snap) {
    check_engine(pc, e);
    if (snap && !snap->n) snap = NULL; // an empty snapshot: copy e's state
    FD_CHECK(!snap || (snap->n == pc->ranks && es_parts_bytes(snap) == pc->state_bytes),
             "prefix insert: a snapshot of another geometry (%d parts, %zu bytes)", snap->n, es_parts_bytes(snap));
    const int aligned = pos % pc->block == 0; // (a '%' inside FD_CHECK's condition would reach its format string)
    FD_CHECK(aligned && pos <= e->opt.capacity, "prefix insert at %lld", (long long)pos);
    const int64_t nb = pos / pc->block;
    if (nb < 1 || (!snap && e->n_past != pos) || (pc->n_draft && (!spec || spec->n_ctx < pos))) goto drop;
    pc_node **path = fd_malloc((size_t)nb * sizeof *path);
    int64_t have = 0;
    pc_node *cur = NULL;
    while (have < nb && (cur = find_child(pc, have ? path[have - 1] : NULL, ids + have * pc->block)))
        path[have++] = cur;
    const int need_state = !(have == nb && path[nb - 1]->state.n);
    const size_t need = (size_t)(nb - have) * pc->node_bytes + (need_state ? pc->state_bytes : 0);
    touch_path(pc, path, have);
    if (!need_state || need > pc->budget || make_room(pc, need, path, have)) {
        free(path);
        goto drop;
    }
    for (int64_t i = have; i < nb; i++) {
        pc_node *n = fd_calloc(1, sizeof *n);
        n->parent = i ? path[i - 1] : NULL;
        n->tokens = fd_malloc((size_t)pc->block * sizeof(int32_t));
        memcpy(n->tokens, ids + i * pc->block, (size_t)pc->block * sizeof(int32_t));
        n->salt = pc->salt;
        n->hash = block_hash(n->parent ? n->parent->hash : pc->salt, n->tokens, pc->block);
        es_parts_alloc(&n->kv, e, pc->kv_bytes);
        block_kv(pc, e, spec, &n->kv, i * pc->block, 1);
        if (n->parent) n->parent->n_children++;
        if (pc->nodes + 1 > (int64_t)pc->n_buckets) rehash(pc);
        n->hnext = pc->buckets[n->hash % pc->n_buckets];
        pc->buckets[n->hash % pc->n_buckets] = n;
        pc->bytes += pc->node_bytes;
        pc->nodes++;
        pc->inserted++;
        lru_push_front(pc, n);
        path[i] = n;
    }
    touch_path(pc, path, nb);
    pc_node *last = path[nb - 1];
    if (snap) { // taken over: the caller's is left empty
        last->state = *snap;
        memset(snap, 0, sizeof *snap);
    } else {
        es_snap_save(e, &last->state);
    }
    pc->bytes += pc->state_bytes;
    pc->snapshots++;
    free(path);
    return;
drop:
    if (snap) es_parts_free(snap);
}

void pc_reset(pc_cache *pc) {
    while (pc->lru_tail) node_free(pc, pc->lru_tail); // tail is always a leaf
}

void pc_free(pc_cache *pc) {
    if (!pc) return;
    pc_reset(pc);
    free(pc->buckets);
    free(pc);
}

void pc_get_stats(const pc_cache *pc, pc_stats *s) {
    s->nodes = pc->nodes;
    s->snapshots = pc->snapshots;
    s->bytes = pc->bytes;
    s->budget = pc->budget;
    s->evictions = pc->evictions;
    s->inserted_blocks = pc->inserted;
}
