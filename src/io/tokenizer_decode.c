// Decoding as HF's TokenizerImpl::decode does it: runs of model tokens go through the ByteLevel decoder (bytes,
// then UTF-8 with invalid sequences replaced by U+FFFD the way Rust's String::from_utf8_lossy does: one per
// maximal invalid subpart); an added token ends the run and is emitted as its content, untouched.
#include <string.h>

#include "base/base.h"
#include "io/tokenizer_internal.h"

typedef struct {
    char *p;
    size_t n, cap;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = fd_realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, s, n); // s may be NULL when n is 0
    b->n += n;
    b->p[b->n] = 0;
}

int tok_utf8_lead(uint8_t b, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (b < 0x80) return 0;
    if (b >= 0xC2 && b <= 0xDF) return 1;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F; // no surrogates
        return 2;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F; // nothing past U+10FFFF
        return 3;
    }
    return -1;
}

// Length of the valid UTF-8 prefix of the char at s[0..n): returns the char length if whole and valid; else sets
// *incomplete when s ends inside a char that could still become valid, and returns the length of the maximal
// invalid subpart (>= 1) to replace by U+FFFD.
static size_t utf8_step(const uint8_t *s, size_t n, int *incomplete) {
    *incomplete = 0;
    uint8_t lo, hi;
    const int lead = tok_utf8_lead(s[0], &lo, &hi);
    if (lead <= 0) return 1; // ASCII, or not a lead byte: invalid on its own
    const size_t need = (size_t)lead;
    for (size_t k = 1; k <= need; k++) {
        if (k >= n) {
            *incomplete = 1;
            return k;
        }
        uint8_t c = s[k];
        if (k == 1 ? (c < lo || c > hi) : (c & 0xC0) != 0x80) return k; // bytes so far form the invalid subpart
    }
    return need + 1;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

// Appends s[0..n) to out with invalid parts replaced. When final is 0, an incomplete char at the end is not
// written; returns how many bytes were consumed.
static size_t lossy_append(buf_t *out, const uint8_t *s, size_t n, int final) {
    size_t i = 0, run = 0; // run: start of the current stretch of valid bytes, copied in one go
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int inc;
        size_t k = utf8_step(s + i, n - i, &inc);
        uint8_t b = s[i];
        if (!inc && k == (size_t)(b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2)) { // a whole, valid char
            i += k;
            continue;
        }
        buf_put(out, s + run, i - run);
        if (inc && !final) return i;
        buf_put(out, REPLACEMENT, 3);
        i += k;
        run = i;
    }
    buf_put(out, s + run, i - run);
    return n;
}

int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out, size_t *out_len) {
    buf_t raw = {0}, res = {0};
    buf_put(&res, "", 0);
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->id_bytes[id]) {
            free(raw.p);
            free(res.p);
            return fd_error_set("decode: unknown token id %d (vocab has %d)", id, t->n_ids);
        }
        if (skip_special && t->id_special[id]) continue;
        if (t->id_added[id]) { // ends the current run of model tokens
            lossy_append(&res, (const uint8_t *)raw.p, raw.n, 1);
            raw.n = 0;
            buf_put(&res, t->id_bytes[id], t->id_bytes_len[id]);
        } else {
            buf_put(&raw, t->id_bytes[id], t->id_bytes_len[id]);
        }
    }
    lossy_append(&res, (const uint8_t *)raw.p, raw.n, 1);
    free(raw.p);
    *out = res.p;
    if (out_len) *out_len = res.n;
    return 0;
}

const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_ids || !t->id_bytes[id]) return NULL;
    *len = t->id_bytes_len[id];
    return t->id_bytes[id];
}

struct tok_stream {
    const tok_tokenizer *t;
    int skip_special;
    uint8_t held[8]; // bytes of a char not yet complete (at most 3)
    size_t n_held;
    buf_t in, out;
};

tok_stream *tok_stream_new(const tok_tokenizer *t, int skip_special) {
    tok_stream *s = fd_calloc(1, sizeof *s);
    s->t = t;
    s->skip_special = skip_special;
    return s;
}

const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len) {
    const tok_tokenizer *t = s->t;
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->id_bytes[id]) {
        fd_error_set("decode: unknown token id %d (vocab has %d)", id, t->n_ids);
        return NULL;
    }
    s->out.n = 0;
    buf_put(&s->out, "", 0);
    if (s->skip_special && t->id_special[id]) return s->out.p;
    if (t->id_added[id]) { // what is held can no longer be completed: as in tok_decode, it ends here
        lossy_append(&s->out, s->held, s->n_held, 1);
        s->n_held = 0;
        buf_put(&s->out, t->id_bytes[id], t->id_bytes_len[id]);
        *len = s->out.n;
        return s->out.p;
    }
    s->in.n = 0;
    buf_put(&s->in, s->held, s->n_held);
    buf_put(&s->in, t->id_bytes[id], t->id_bytes_len[id]);
    size_t used = lossy_append(&s->out, (const uint8_t *)s->in.p, s->in.n, 0);
    s->n_held = s->in.n - used;
    FD_CHECK(s->n_held < sizeof s->held, "held %zu bytes", s->n_held);
    memcpy(s->held, s->in.p + used, s->n_held);
    *len = s->out.n;
    return s->out.p;
}

const char *tok_stream_flush(tok_stream *s, size_t *len) {
    s->out.n = 0;
    buf_put(&s->out, "", 0);
    if (s->n_held) lossy_append(&s->out, s->held, s->n_held, 1);
    s->n_held = 0;
    *len = s->out.n;
    return s->out.p;
}

void tok_stream_free(tok_stream *s) {
    if (!s) return;
    free(s->in.p);
    free(s->out.p);
    free(s);
}
