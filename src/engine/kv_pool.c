// Paged KV cache pool and per-sequence page tables (see kv_pool.h).
#include "engine/kv_pool.h"

#include <stdlib.h>
#include <string.h>

int kv_pool_init(fd_kv_pool *p, fd_backend *be, const fd_rank_plan *plan, int64_t tokens, int page_tokens) {
    memset(p, 0, sizeof *p);
    if (tokens < 1) return fd_error_set("KV pool of %lld tokens: must be >= 1 (--kv-tokens)", (long long)tokens);
    if (page_tokens <= 0) page_tokens = FD_KV_PAGE_TOKENS;
    FD_CHECK((page_tokens & (page_tokens - 1)) == 0, "KV page of %d tokens: not a power of two", page_tokens);
    p->page_tokens = page_tokens;
    p->be = be;
    p->num_layers = plan->num_layers;
    p->Hkv = plan->kv_heads;
    p->hd = plan->head_dim;
    p->n_pages = (tokens + page_tokens - 1) / page_tokens;
    if (p->n_pages > INT32_MAX) return fd_error_set("KV pool of %lld tokens is too large", (long long)tokens);
    const size_t slots = (size_t)p->n_pages * page_tokens;
    p->layer = fd_calloc((size_t)plan->num_layers, sizeof(void *));
    for (int i = 0; i < plan->num_layers; i++)
        if (plan->layers[i].kind == FD_LAYER_ATTN)
            p->layer[i] = be->alloc(be, be->kv_bytes_per_token(be, p->Hkv, p->hd) * slots);
    p->free_pages = fd_malloc(sizeof(int32_t) * (size_t)p->n_pages);
    // Page 0 on top: a lone sequence gets pages 0, 1, 2, ... (its slots are then its positions).
    for (int64_t i = 0; i < p->n_pages; i++) p->free_pages[i] = (int32_t)(p->n_pages - 1 - i);
    p->n_free = p->n_pages;
    return 0;
}

void kv_pool_free(fd_kv_pool *p) {
    if (!p->be) return;
    for (int i = 0; p->layer && i < p->num_layers; i++)
        if (p->layer[i]) p->be->free(p->be, p->layer[i]);
    free(p->layer);
    free(p->free_pages);
    memset(p, 0, sizeof *p);
}

void kv_pool_shuffle(fd_kv_pool *p, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int64_t i = p->n_free - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; // xorshift64
        const int64_t j = (int64_t)(x % (uint64_t)(i + 1));
        const int32_t t = p->free_pages[i];
        p->free_pages[i] = p->free_pages[j];
        p->free_pages[j] = t;
    }
}

void kv_pages_init(fd_kv_pages *t, const fd_kv_pool *p, int64_t capacity) {
    memset(t, 0, sizeof *t);
    fd_backend *be = p->be;
    const int64_t n = (capacity + p->page_tokens - 1) / p->page_tokens;
    FD_CHECK(n >= 1 && n <= INT32_MAX, "page table for a context of %lld tokens", (long long)capacity);
    t->max_pages = (int)n;
    t->host = fd_calloc((size_t)n, sizeof(int32_t));
    t->dev = be->alloc(be, (size_t)n * sizeof(int32_t)); // zero-filled: every entry a valid page
}

void kv_pages_free(fd_kv_pages *t, fd_backend *be) {
    if (t->dev) be->free(be, t->dev);
    free(t->host);
    memset(t, 0, sizeof *t);
}

int kv_pages_reserve(fd_kv_pages *t, fd_kv_pool *p, int64_t positions) {
    const int64_t need = (positions + p->page_tokens - 1) / p->page_tokens;
    if (need <= t->held) return 0;
    FD_CHECK(need <= t->max_pages, "reserve of %lld positions beyond the page table (%d pages)", (long long)positions,
             t->max_pages);
    const int64_t more = need - t->held;
    if (more > p->n_free)
        return fd_error_set_code(FD_ERR_KV_FULL,
                                 "KV cache full: this request needs %lld more tokens of KV, %lld of %lld tokens free "
                                 "(--kv-tokens)",
                                 (long long)(more * p->page_tokens), (long long)kv_pool_free_tokens(p),
                                 (long long)kv_pool_tokens(p));
    const int first = t->held;
    for (int64_t i = 0; i < more; i++) t->host[t->held++] = p->free_pages[--p->n_free];
    p->be->to_device(p->be, t->dev + first, t->host + first, (size_t)more * sizeof(int32_t));
    return 0;
}

void kv_pages_release(fd_kv_pages *t, fd_kv_pool *p) {
    if (!t->held) return;
    // Pushed back in reverse, so the next taker gets them in the order this sequence had them.
    for (int i = t->held - 1; i >= 0; i--) p->free_pages[p->n_free++] = t->host[i];
    memset(t->host, 0, sizeof(int32_t) * (size_t)t->held);
    // The zeroing is ordered after every queued op that still reads these entries (same stream).
    p->be->zero(p->be, t->dev, sizeof(int32_t) * (size_t)t->held);
    t->held = 0;
}

fd_kv_view kv_pages_view(const fd_kv_pages *t, const fd_kv_pool *p, int layer) {
    fd_kv_view v = {p->layer[layer], t->dev, p->page_tokens, kv_pool_tokens(p), (int64_t)t->max_pages * p->page_tokens};
    return v;
}
