// Paged KV cache: one pool of fixed-size pages shared by every sequence of a model on a backend, and the page
// table of one sequence.
//
// The pool holds, per attention layer, one backend buffer of n_pages * page_tokens token slots in the
// backend's cache layout. Page i is the same slot range in every layer, so one page table per sequence serves all
// of its layers. Free pages are a host stack; a sequence takes pages before a forward (host side, outside any graph
// recording) and gives them all back on reset. The pool's token capacity is the --kv-tokens budget; a sequence's
// own maximum stays its context capacity.
#ifndef FD_KV_POOL_H
#define FD_KV_POOL_H
#include <stdint.h>

#include "backend.h"
#include "model/plan.h"

// Tokens per page: a power of two and a multiple of every kernel's key tile (attention_mma 64, attention_decode and
// the SIMT kernels 32), so a key tile never straddles pages and a kernel reads the page table once per tile; the
// decode kernel's absolute 512-key chunks are two pages each, so its chunk logic (and its bitwise batch
// invariance) is untouched. 256 keeps the waste per sequence under 256 tokens and a 262144-token pool at 1024
// pages (a 4 KB page table at the 262144 context).
#define FD_KV_PAGE_TOKENS 256

// Default token capacity of a pool (--kv-tokens): 27B = 64 KB per token (bf16, 16 attention layers) -> 16 GiB.
#define FD_KV_TOKENS_DEFAULT 262144

typedef struct fd_kv_pool {
    fd_backend *be;
    int page_tokens; // FD_KV_PAGE_TOKENS unless a test asks for smaller pages (cpu only: no key tiles there)
    int num_layers;
    void **layer; // [num_layers] backend buffers (NULL for GDN layers)
    int Hkv, hd;
    int64_t n_pages;
    int32_t *free_pages; // stack: free_pages[0 .. n_free) (the top is taken first)
    int64_t n_free;
} fd_kv_pool;

// A pool of at least `tokens` token slots (rounded up to whole pages) for the attention layers of rank plan p (its
// local KV heads).
// page_tokens: 0 = FD_KV_PAGE_TOKENS; else a power of two (the CUDA kernels also need a multiple of 64).
int kv_pool_init(fd_kv_pool *p, fd_backend *be, const fd_rank_plan *plan, int64_t tokens, int page_tokens);
void kv_pool_free(fd_kv_pool *p);
static inline int64_t kv_pool_tokens(const fd_kv_pool *p) {
    return p->n_pages * p->page_tokens;
}
static inline int64_t kv_pool_free_tokens(const fd_kv_pool *p) {
    return p->n_free * p->page_tokens;
}
// Reorders the free stack pseudo-randomly from `seed` (tests: sequences get scattered, non-monotonic pages).
void kv_pool_shuffle(fd_kv_pool *p, uint64_t seed);

// One sequence's page table: host entries and their backend copy, both sized for the sequence's maximum context
// once (ceil(capacity / P) entries) so a recorded CUDA graph that reads the backend copy stays valid. Entries past
// `held` are 0 (a valid page: a stray read stays inside the pool).
typedef struct {
    int32_t *host;
    int32_t *dev;
    int max_pages, held;
} fd_kv_pages;

// A table for a sequence of up to `capacity` positions in pool p's pages.
void kv_pages_init(fd_kv_pages *t, const fd_kv_pool *p, int64_t capacity);
void kv_pages_free(fd_kv_pages *t, fd_backend *be);
// Makes positions [0, positions) addressable: takes the missing pages from the pool and uploads only the new
// entries. When the pool is short nothing changes and the error says how many tokens of KV are missing.
int kv_pages_reserve(fd_kv_pages *t, fd_kv_pool *p, int64_t positions);
// Returns every page to the pool (the sequence keeps its table, all entries 0 again).
void kv_pages_release(fd_kv_pages *t, fd_kv_pool *p);
// Attention layer `layer` of the sequence as the cache ops see it.
fd_kv_view kv_pages_view(const fd_kv_pages *t, const fd_kv_pool *p, int layer);
#endif
