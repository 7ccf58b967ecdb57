// The BPE model: a piece's bytes -> ids by the tokenizer's merges (lowest rank first, leftmost on ties, as HF),
// with a word cache that lives for one encode call. tokenizer_encode.c cuts the text into pieces.
#include <string.h>

#include "base/base.h"
#include "io/tokenizer_internal.h"

enum {
    CACHE_MAX_WORD = 64, // longer pieces are rare and cheap to recompute relative to their length
    NAIVE_MAX = 48,      // below this many symbols a linear scan beats the heap
};

static void grow_scratch(tok_bpe *c, size_t n) {
    if (n <= c->scap) return;
    c->scap = n * 2;
    c->sym = fd_realloc(c->sym, c->scap * sizeof(int32_t));
    c->nid = fd_realloc(c->nid, c->scap * sizeof(int32_t));
    c->prev = fd_realloc(c->prev, c->scap * sizeof(int32_t));
    c->next = fd_realloc(c->next, c->scap * sizeof(int32_t));
    c->rank = fd_realloc(c->rank, c->scap * sizeof(uint32_t));
    c->heap = fd_realloc(c->heap, c->scap * sizeof(uint64_t));
}

// Short words: repeatedly merge the lowest-ranked pair, leftmost first (HF's heap order), by linear scans.
static size_t bpe_naive(tok_bpe *c, const tok_tokenizer *t, size_t n) {
    int32_t *s = c->sym, *nid = c->nid;
    uint32_t *r = c->rank;
    for (size_t i = 0; i + 1 < n; i++)
        if (!tok_merge_find(t, s[i], s[i + 1], &r[i], &nid[i])) r[i] = UINT32_MAX;
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (r[i] < r[best]) best = i;
        if (r[best] == UINT32_MAX) break;
        s[best] = nid[best];
        memmove(s + best + 1, s + best + 2, (n - best - 2) * sizeof(int32_t));
        memmove(r + best + 1, r + best + 2, (n - best - 2) * sizeof(uint32_t));
        memmove(nid + best + 1, nid + best + 2, (n - best - 2) * sizeof(int32_t));
        n--;
        if (best > 0 && !tok_merge_find(t, s[best - 1], s[best], &r[best - 1], &nid[best - 1])) r[best - 1] = UINT32_MAX;
        if (best + 1 < n && !tok_merge_find(t, s[best], s[best + 1], &r[best], &nid[best])) r[best] = UINT32_MAX;
    }
    return n;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > v) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= *n) break;
        if (l + 1 < *n && h[l + 1] < h[l]) l++;
        if (h[l] >= v) break;
        h[i] = h[l];
        i = l;
    }
    h[i] = v;
    return top;
}

// Long words: the same order with a min-heap keyed (rank, position) over a linked list: O(n log n), so 100 KB of
// one letter stays linear-ish. Stale entries are dropped on pop by re-checking the pair.
static size_t bpe_heap(tok_bpe *c, const tok_tokenizer *t, size_t n) {
    int32_t *s = c->sym, *prev = c->prev, *next = c->next;
    uint64_t *h = c->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    uint32_t r;
    int32_t m;
    for (size_t i = 0; i + 1 < n; i++)
        if (tok_merge_find(t, s[i], s[i + 1], &r, &m)) heap_push(h, &hn, ((uint64_t)r << 32) | i);
    while (hn > 0) {
        uint64_t e = heap_pop(h, &hn);
        uint32_t pos = (uint32_t)e, er = (uint32_t)(e >> 32);
        if (s[pos] < 0 || next[pos] < 0) continue;
        int32_t nx = next[pos];
        if (!tok_merge_find(t, s[pos], s[nx], &r, &m) || r != er) continue;
        s[pos] = m;
        s[nx] = -1; // dead
        next[pos] = next[nx];
        if (next[nx] >= 0) prev[next[nx]] = (int32_t)pos;
        if (prev[pos] >= 0 && tok_merge_find(t, s[prev[pos]], s[pos], &r, &m))
            heap_push(h, &hn, ((uint64_t)r << 32) | (uint32_t)prev[pos]);
        if (next[pos] >= 0 && tok_merge_find(t, s[pos], s[next[pos]], &r, &m))
            heap_push(h, &hn, ((uint64_t)r << 32) | pos);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] >= 0) s[k++] = s[i];
    return k;
}

static void cache_put(tok_bpe *c, uint64_t h, uint32_t slot, const char *s, size_t n, const int32_t *ids, size_t k) {
    if (c->ccount * 4 >= c->ccap * 3) return; // full enough: stop caching rather than probe long chains
    if (c->ckeys_n + n > c->ckeys_cap) {
        c->ckeys_cap = (c->ckeys_n + n) * 2;
        c->ckeys = fd_realloc(c->ckeys, c->ckeys_cap);
    }
    memcpy(c->ckeys + c->ckeys_n, s, n);
    tok_bpe_cache_ent *e = &c->ce[slot];
    *e = (tok_bpe_cache_ent){h, (uint32_t)c->ckeys_n, (uint32_t)n, (uint32_t)c->cids.n, (uint32_t)k};
    c->ckeys_n += n;
    for (size_t i = 0; i < k; i++) tok_ids_push(&c->cids, ids[i]);
    c->ccount++;
}

void tok_bpe_word(tok_bpe *c, const tok_tokenizer *t, const char *s, size_t n, tok_ids *out) {
    uint64_t h = 0;
    uint32_t slot = 0;
    if (n <= CACHE_MAX_WORD) {
        h = tok_hash(s, n);
        uint32_t mask = c->ccap - 1;
        for (slot = (uint32_t)h & mask; c->ce[slot].hash; slot = (slot + 1) & mask) {
            tok_bpe_cache_ent *e = &c->ce[slot];
            if (e->hash == h && e->key_len == n && !memcmp(c->ckeys + e->key_off, s, n)) {
                for (uint32_t i = 0; i < e->n_ids; i++) tok_ids_push(out, c->cids.ids[e->ids_off + i]);
                return;
            }
        }
    }
    grow_scratch(c, n + 1);
    size_t k = 0;
    if (t->ignore_merges) { // a word that is itself in the vocab is one token (Llama-3 style)
        if (c->pcap < n * 2 + 1) c->pbuf = fd_realloc(c->pbuf, c->pcap = n * 2 + 16);
        size_t bl = 0;
        for (size_t i = 0; i < n; i++) { // byte-level string of the piece
            uint8_t b = (uint8_t)s[i];
            memcpy(c->pbuf + bl, t->byte_str[b], t->byte_str_len[b]);
            bl += t->byte_str_len[b];
        }
        int32_t whole = bl ? tok_str_map_get(&t->vocab, c->pbuf, bl, (const char *const *)t->id_text, t->id_text_len) : -1;
        if (whole >= 0) {
            c->sym[0] = whole;
            k = 1;
            goto emit;
        }
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[(uint8_t)s[i]];
        if (id < 0) { // no token for this byte: HF uses unk if there is one (fused if asked), else drops it
            if (t->unk_id < 0 || (t->fuse_unk && k > 0 && c->sym[k - 1] == t->unk_id)) continue;
            id = t->unk_id;
        }
        c->sym[k++] = id;
    }
    k = k <= NAIVE_MAX ? bpe_naive(c, t, k) : bpe_heap(c, t, k);
emit:
    for (size_t i = 0; i < k; i++) tok_ids_push(out, c->sym[i]);
    if (n <= CACHE_MAX_WORD) cache_put(c, h, slot, s, n, c->sym, k);
}

void tok_bpe_begin(tok_bpe *c, size_t len) {
    uint32_t want = len / 8 < 64 ? 64 : len / 8 > (1u << 16) ? (1u << 16) : (uint32_t)(len / 8), cap = 64;
    while (cap < want) cap *= 2;
    if (cap != c->ccap) {
        free(c->ce);
        c->ce = fd_malloc(cap * sizeof(tok_bpe_cache_ent));
        c->ccap = cap;
    }
    memset(c->ce, 0, cap * sizeof(tok_bpe_cache_ent)); // the cache lives for one call (it is per tokenizer)
    c->ccount = 0;
    c->ckeys_n = 0;
    c->cids.n = 0;
}

void tok_bpe_trim(tok_bpe *c, int all) {
    if (all || c->ccap > 4096) {
        free(c->ce);
        c->ce = NULL;
        c->ccap = 0;
    }
    if (all || c->ckeys_cap > (1 << 16)) {
        free(c->ckeys);
        c->ckeys = NULL;
        c->ckeys_cap = 0;
    }
    if (all || c->cids.cap > (1 << 14)) tok_ids_free(&c->cids);
    if (all || c->scap > 4096) {
        free(c->sym), free(c->nid), free(c->prev), free(c->next), free(c->rank), free(c->heap);
        c->sym = c->nid = c->prev = c->next = NULL;
        c->rank = NULL;
        c->heap = NULL;
        c->scap = 0;
    }
    if (all || c->pcap > 4096) free(c->pbuf), c->pbuf = NULL, c->pcap = 0;
}
