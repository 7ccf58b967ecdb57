// Shared between the tokenizer's files (load, encode, decode); not part of the public API.
#ifndef FD_TOKENIZER_INTERNAL_H
#define FD_TOKENIZER_INTERNAL_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include "io/tokenizer.h"

enum { TOK_MAX_STEPS = 8 };
enum tok_norm_form { TOK_NFC = 0, TOK_NFKC = 1, TOK_NFD = 2, TOK_NFKD = 3 };

typedef enum { TOK_SPLIT_ISOLATED, TOK_SPLIT_REMOVED, TOK_SPLIT_PREV, TOK_SPLIT_NEXT, TOK_SPLIT_CONTIGUOUS } tok_split_behavior;

typedef struct {
    pcre2_code *re;          // compiled with UTF+UCP and JIT
    tok_split_behavior behavior;
    int invert;
} tok_split;

typedef struct {
    char *content; // as matched: the token text, NFC'd first when `normalized`
    uint32_t len;
    int32_t id;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

// One set of added tokens matched together (HF keeps two: on raw text, and on normalized text).
typedef struct {
    tok_added **tok;     // sorted by first byte, then longest first
    int n;
    int first[257];      // tok[first[b] .. first[b+1]) start with byte b
} tok_added_set;

typedef struct {
    uint64_t key; // (left << 32 | right) + 1; 0 = empty
    uint64_t val; // rank << 32 | merged id
} tok_merge_slot;

// Open-addressing hash table from a byte string to an id (the model vocab).
typedef struct {
    uint64_t *hash; // [cap] 0 = empty
    int32_t *id;    // [cap]
    uint32_t cap;
} tok_str_map;

struct tok_tokenizer {
    int32_t n_ids;   // largest id + 1
    int32_t n_vocab_entries; // entries in model.vocab (HF's vocab size, where added ids start)
    char **id_text;  // [n_ids] token as written in tokenizer.json (NULL for unused ids)
    uint32_t *id_text_len;
    char **id_bytes; // [n_ids] the bytes the ByteLevel decoder gives for the token
    uint32_t *id_bytes_len;
    uint8_t *id_special; // [n_ids]
    uint8_t *id_added;   // [n_ids] 1 for added tokens: decoded as their raw content, outside the ByteLevel decoder

    tok_str_map vocab;          // model vocab (byte-level strings) -> id
    tok_merge_slot *merges;     // [merge_cap] key and value side by side: one cache miss per lookup
    uint32_t merge_cap;
    int32_t byte_id[256];       // id of the one-byte token for each byte, -1 if absent
    char byte_str[256][2];      // UTF-8 of each byte's ByteLevel char (1 or 2 bytes)
    uint8_t byte_str_len[256];
    int32_t unk_id;             // -1 if none
    int fuse_unk, ignore_merges;

    int norm_options;           // utf8proc options for the normalizer; 0 = none
    int norm_form;              // tok_norm_form, when norm_options != 0

    tok_split steps[TOK_MAX_STEPS]; // Split steps before the final ByteLevel
    int n_steps;
    int prefix_space;               // ByteLevel add_prefix_space
    pcre2_code *bytelevel_re;       // ByteLevel use_regex (the GPT-2 pattern), or NULL

    tok_added *added;
    int n_added;
    tok_added_set raw_set, norm_set;
};

uint64_t tok_hash(const void *s, size_t n);
int32_t tok_str_map_get(const tok_str_map *m, const char *s, size_t n, const char *const *keys,
                        const uint32_t *key_lens);
// Merge lookup: returns 1 and rank/merged id if (a, b) merges.
static inline int tok_merge_find(const tok_tokenizer *t, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint32_t mask = t->merge_cap - 1, i = (uint32_t)(h >> 32) & mask;
    for (;;) {
        uint64_t k = t->merges[i].key;
        if (k == key) {
            *rank = (uint32_t)(t->merges[i].val >> 32);
            *id = (int32_t)(uint32_t)t->merges[i].val;
            return 1;
        }
        if (k == 0) return 0;
        i = (i + 1) & mask;
    }
}
// Decodes one code point at s (valid UTF-8 assumed); returns its length.
int tok_utf8_decode(const uint8_t *s, uint32_t *cp);
// A UTF-8 lead byte b: how many continuation bytes follow it (0: b is ASCII; -1: b cannot lead a valid char), and
// the range [*lo, *hi] the first of them must fall in (no overlong forms, surrogates or code points past
// U+10FFFF); the others are 0x80..0xBF.
int tok_utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi);
int tok_is_whitespace(uint32_t cp); // Unicode White_Space, as Rust's char::is_whitespace
int tok_is_new_char(uint32_t cp);   // newer than Unicode 11 and changed by normalization (tokenizer_newchars.c)
char *tok_normalize(const tok_tokenizer *t, const char *s, size_t n, size_t *out_n); // t's normalizer; malloc'ed
void tok_normalize_init(const tok_tokenizer *t); // builds the shared NFC tables once

// ---- the BPE model (tokenizer_bpe.c): its word cache and scratch, kept per thread between encode calls ----
typedef struct {
    uint64_t hash;
    uint32_t key_off, key_len, ids_off, n_ids;
} tok_bpe_cache_ent;
typedef struct {
    tok_bpe_cache_ent *ce; // word cache: piece bytes -> ids
    uint32_t ccap, ccount;
    char *ckeys;
    size_t ckeys_n, ckeys_cap;
    tok_ids cids;
    int32_t *sym, *nid, *prev, *next; // merge scratch
    uint32_t *rank;
    uint64_t *heap;
    size_t scap;
    char *pbuf; // byte-level string of a word (ignore_merges)
    size_t pcap;
} tok_bpe;
// Empties the word cache, sized for an input of len bytes; at the start of every encode call.
void tok_bpe_begin(tok_bpe *b, size_t len);
// Appends the ids of one pre-tokenized piece s[0..n) to out.
void tok_bpe_word(tok_bpe *b, const tok_tokenizer *t, const char *s, size_t n, tok_ids *out);
// Gives back big buffers after a call (all: every buffer).
void tok_bpe_trim(tok_bpe *b, int all);
#endif
