// Encoding, in HF's order: added tokens on the raw text -> normalize the rest -> added tokens that match
// normalized text -> Split steps -> ByteLevel -> BPE of each piece (tokenizer_bpe.c, with a per-call word cache).
#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "io/tokenizer_internal.h"

typedef struct {
    size_t *v; // triples: start, end, is_match
    size_t n, cap;
} span_vec;

typedef struct {
    const tok_tokenizer *t;
    tok_ids *out;
    pcre2_match_data *md;     // from the thread's re_tls
    pcre2_match_context *mctx;
    int failed; // a regex returned an error: the whole call fails rather than giving wrong ids
    // special added tokens: matched only with parse_special, and never inside a plain span of the input text
    const char *text;
    size_t text_len;
    int parse_special;
    const tok_span *plain;
    int n_plain;
    tok_bpe bpe; // the BPE model's word cache and scratch
    char *qbuf; // a piece with the prefix space added
    size_t qcap;
    span_vec spans[TOK_MAX_STEPS];
} enc_ctx;

void tok_ids_push(tok_ids *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->ids = fd_realloc(v->ids, v->cap * sizeof(int32_t));
    }
    v->ids[v->n++] = id;
}

void tok_ids_free(tok_ids *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

int tok_utf8_decode(const uint8_t *s, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if (s[0] < 0xE0) { *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if (s[0] < 0xF0) { *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); return 3; }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

int tok_is_whitespace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// HF tests single_word boundaries with the Rust regex \w: Alphabetic, marks, Nd, Pc and the joiners. Alphabetic is
// the letters and Nl plus Other_Alphabetic, whose few non-mark members are the circled/squared Latin letters.
static int is_alnum(uint32_t cp) {
    if (cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
        (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
        return 1;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_ND) || c == UTF8PROC_CATEGORY_NL ||
           c == UTF8PROC_CATEGORY_PC;
}

static size_t char_start_before(const char *s, size_t i) { // start of the char that ends at i
    do i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    return i;
}

// ---- pre-tokenization ----
// The next regex match in s at or after from: 1 and its span, or 0 (none, or an error that fails the call).
static int re_next(enc_ctx *c, pcre2_code *re, const char *s, size_t n, size_t from, size_t *ms, size_t *me) {
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, c->md, c->mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR buf[200];
        pcre2_get_error_message(rc, buf, sizeof buf);
        fd_error_set("pre-tokenizer regex failed: %s", (char *)buf);
        c->failed = 1;
        return 0;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

static void bytelevel(enc_ctx *c, const char *s, size_t n) {
    const tok_tokenizer *t = c->t;
    if (t->prefix_space && s[0] != ' ') { // HF prepends to every piece that does not start with a space
        if (c->qcap < n + 2) c->qbuf = fd_realloc(c->qbuf, c->qcap = n * 2 + 16);
        c->qbuf[0] = ' ';
        memcpy(c->qbuf + 1, s, n);
        s = c->qbuf;
        n++;
    }
    if (!t->bytelevel_re) {
        tok_bpe_word(&c->bpe, t, s, n, c->out);
        return;
    }
    size_t pos = 0, ms, me, prev = 0;
    while (pos < n && re_next(c, t->bytelevel_re, s, n, pos, &ms, &me)) {
        if (ms > prev) tok_bpe_word(&c->bpe, t, s + prev, ms - prev, c->out);
        if (me > ms) tok_bpe_word(&c->bpe, t, s + ms, me - ms, c->out);
        prev = me;
        if (me > ms) pos = me; // the GPT-2 pattern has no empty matches; step a whole char if one comes anyway
        else if (me < n) pos = me + (size_t)tok_utf8_decode((const uint8_t *)s + me, &(uint32_t){0});
        else break;
    }
    if (prev < n) tok_bpe_word(&c->bpe, t, s + prev, n - prev, c->out);
}

static void pretok(enc_ctx *c, int level, const char *s, size_t n);

static void span_push(span_vec *v, size_t a, size_t b, size_t m) {
    if (v->n + 3 > v->cap) {
        v->cap = v->cap ? v->cap * 2 : 192;
        v->v = fd_realloc(v->v, v->cap * sizeof(size_t));
    }
    v->v[v->n++] = a;
    v->v[v->n++] = b;
    v->v[v->n++] = m;
}

// One Split step. Isolated (what every Qwen/GPT tokenizer uses) streams pieces straight down; the other
// behaviours first collect HF's (span, is_match) list and fold it the way HF does.
static void split_step(enc_ctx *c, int level, const char *s, size_t n) {
    const tok_split *sp = &c->t->steps[level];
    size_t pos = 0, prev = 0, ms, me;
    if (sp->behavior == TOK_SPLIT_ISOLATED) {
        while (pos <= n && re_next(c, sp->re, s, n, pos, &ms, &me)) {
            if (ms > prev) pretok(c, level + 1, s + prev, ms - prev);
            if (me > ms) pretok(c, level + 1, s + ms, me - ms);
            prev = me;
            if (me > ms) pos = me;
            else if (me < n) pos = me + (size_t)tok_utf8_decode((const uint8_t *)s + me, &(uint32_t){0});
            else break;
        }
        if (prev < n) pretok(c, level + 1, s + prev, n - prev);
        return;
    }
    span_vec *v = &c->spans[level];
    v->n = 0;
    while (pos <= n && re_next(c, sp->re, s, n, pos, &ms, &me)) {
        if (ms > prev) span_push(v, prev, ms, sp->invert);
        span_push(v, ms, me, !sp->invert);
        prev = me;
        if (me > ms) pos = me;
        else if (me < n) pos = me + (size_t)tok_utf8_decode((const uint8_t *)s + me, &(uint32_t){0});
        else break;
    }
    if (prev < n) span_push(v, prev, n, sp->invert);
    // Fold in place: out[k] pieces (start, end), kept only where keep.
    size_t k = 0;
    int prev_match = 0;
    if (sp->behavior == TOK_SPLIT_NEXT) { // HF folds from the right
        size_t cnt = v->n / 3;
        for (size_t j = cnt; j-- > 0;) {
            size_t a = v->v[3 * j], b = v->v[3 * j + 1], m = v->v[3 * j + 2];
            if (m && !prev_match && k > 0) v->v[3 * (cnt - k)] = a; // extend the piece to the right of it
            else {
                k++;
                v->v[3 * (cnt - k)] = a;
                v->v[3 * (cnt - k) + 1] = b;
                v->v[3 * (cnt - k) + 2] = 0;
            }
            prev_match = (int)m;
        }
        for (size_t j = cnt - k; j < cnt; j++) {
            size_t a = v->v[3 * j], b = v->v[3 * j + 1];
            if (b > a) pretok(c, level + 1, s + a, b - a);
        }
        return;
    }
    for (size_t j = 0; j < v->n / 3; j++) {
        size_t a = v->v[3 * j], b = v->v[3 * j + 1], m = v->v[3 * j + 2];
        int merge = sp->behavior == TOK_SPLIT_PREV ? (m && !prev_match && k > 0)
                  : sp->behavior == TOK_SPLIT_CONTIGUOUS ? ((int)m == prev_match && k > 0) : 0;
        if (sp->behavior == TOK_SPLIT_REMOVED && m) continue;
        if (merge) v->v[3 * (k - 1) + 1] = b;
        else {
            v->v[3 * k] = a;
            v->v[3 * k + 1] = b;
            k++;
        }
        prev_match = (int)m;
    }
    for (size_t j = 0; j < k; j++) {
        size_t a = v->v[3 * j], b = v->v[3 * j + 1];
        if (b > a) pretok(c, level + 1, s + a, b - a);
    }
}

static void pretok(enc_ctx *c, int level, const char *s, size_t n) {
    if (c->failed || n == 0) return;
    if (level == c->t->n_steps) bytelevel(c, s, n);
    else split_step(c, level, s, n);
}

// ---- added tokens ----
typedef void (*gap_fn)(enc_ctx *c, const char *s, size_t n);

// May a special token match s[0..n)? Not when special parsing is off, nor when it touches a plain span (text a user
// wrote: a chat message's content). Offsets are known only while s points into the caller's text; normalized text
// (a copy) can hold a special token only when nothing is plain.
static int special_ok(const enc_ctx *c, const char *s, size_t n) {
    if (!c->parse_special) return 0;
    if (c->n_plain == 0) return 1;
    if (s < c->text || s + n > c->text + c->text_len) return 0;
    const size_t a = (size_t)(s - c->text), b = a + n;
    for (int i = 0; i < c->n_plain; i++)
        if (a < c->plain[i].off + c->plain[i].len && c->plain[i].off < b) return 0;
    return 1;
}

// HF's AddedVocabulary::find_matches: leftmost-longest, non-overlapping; single_word may veto a match; lstrip /
// rstrip widen it over whitespace (never back into what an earlier match took). A special token special_ok refuses
// is not a candidate, so the text is encoded as if it were not in the vocabulary's added tokens (HF's
// split_special_tokens).
static void added_split(enc_ctx *c, const tok_added_set *set, const char *s, size_t n, gap_fn gap) {
    if (set->n == 0) {
        gap(c, s, n);
        return;
    }
    size_t pos = 0, done = 0;
    while (pos < n && !c->failed) {
        const tok_added *hit = NULL;
        size_t p = pos;
        for (; p < n && !hit; p++) {
            uint8_t b = (uint8_t)s[p];
            for (int j = set->first[b]; j < set->first[b + 1]; j++) {
                const tok_added *a = set->tok[j];
                if (a->len <= n - p && !memcmp(s + p, a->content, a->len) &&
                    (!a->special || special_ok(c, s + p, a->len))) {
                    hit = a;
                    break;
                }
            }
        }
        if (!hit) break;
        size_t start = p - 1, stop = start + hit->len;
        pos = stop;
        uint32_t cp;
        if (hit->single_word) {
            int left_word = start > 0 && (tok_utf8_decode((const uint8_t *)s + char_start_before(s, start), &cp), is_alnum(cp));
            int right_word = stop < n && (tok_utf8_decode((const uint8_t *)s + stop, &cp), is_alnum(cp));
            if (left_word || right_word) continue;
        }
        if (hit->lstrip) {
            size_t ns = start;
            while (ns > done) { // HF never strips back into an earlier match
                size_t q = char_start_before(s, ns);
                tok_utf8_decode((const uint8_t *)s + q, &cp);
                if (!tok_is_whitespace(cp)) break;
                ns = q;
            }
            start = ns;
        }
        if (hit->rstrip)
            while (stop < n && (tok_utf8_decode((const uint8_t *)s + stop, &cp), tok_is_whitespace(cp)))
                stop += (size_t)tok_utf8_decode((const uint8_t *)s + stop, &cp);
        if (start > done) gap(c, s + done, start - done);
        tok_ids_push(c->out, hit->id);
        done = stop > done ? stop : done;
    }
    if (done < n) gap(c, s + done, n - done);
}

static void norm_gap(enc_ctx *c, const char *s, size_t n) { pretok(c, 0, s, n); }

static void raw_gap(enc_ctx *c, const char *s, size_t n) {
    const tok_tokenizer *t = c->t;
    int need = 0;
    if (t->norm_options) {
        // Text below U+0300 is already NFC (lead bytes from 0xCC start U+0300); the other forms change Latin-1.
        uint8_t lim = t->norm_form == TOK_NFC ? 0xCC : 0x80;
        for (size_t i = 0; i < n && !need; i++) need = (uint8_t)s[i] >= lim;
    }
    if (!need) {
        added_split(c, &t->norm_set, s, n, norm_gap);
        return;
    }
    size_t nn;
    char *d = tok_normalize(t, s, n, &nn);
    added_split(c, &t->norm_set, d, nn, norm_gap);
    free(d);
}

// PCRE2 match state and encode scratch, one per thread and reused across calls: creating the JIT stack maps
// memory, which cost ~40 us per call and dominated short prompts; fresh scratch buffers cost a few more.
typedef struct {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;
    enc_ctx ctx; // scratch buffers kept between calls (trimmed after big inputs, see ctx_release)
} re_tls;
static pthread_key_t g_re_key;
static pthread_once_t g_re_once = PTHREAD_ONCE_INIT;

static void ctx_free_buffers(enc_ctx *c, int all) {
    // Small buffers are kept for the next call; big ones (a long input) are given back.
    tok_bpe_trim(&c->bpe, all);
    if (all || c->qcap > 4096) free(c->qbuf), c->qbuf = NULL, c->qcap = 0;
    for (int i = 0; i < TOK_MAX_STEPS; i++)
        if (all || c->spans[i].cap > 4096) free(c->spans[i].v), c->spans[i] = (span_vec){0};
}

static void re_tls_free(void *p) {
    re_tls *r = p;
    ctx_free_buffers(&r->ctx, 1);
    pcre2_match_data_free(r->md);
    pcre2_match_context_free(r->mctx);
    pcre2_jit_stack_free(r->jstack);
    free(r);
}
static void re_key_make(void) { FD_CHECK(pthread_key_create(&g_re_key, re_tls_free) == 0); }

static re_tls *get_re_tls(void) {
    pthread_once(&g_re_once, re_key_make);
    re_tls *r = pthread_getspecific(g_re_key);
    if (r) return r;
    r = fd_calloc(1, sizeof *r);
    r->md = pcre2_match_data_create(1, NULL);
    r->mctx = pcre2_match_context_create(NULL);
    r->jstack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    FD_CHECK(r->md && r->mctx && r->jstack, "out of memory");
    pcre2_jit_stack_assign(r->mctx, NULL, r->jstack);
    // A tokenizer.json can hold any regex; a catastrophic one must fail the call, not hang it. Real pre-tokenizer
    // patterns stay orders of magnitude below this.
    pcre2_set_match_limit(r->mctx, 20 * 1000 * 1000);
    FD_CHECK(pthread_setspecific(g_re_key, r) == 0);
    return r;
}

size_t tok_utf8_invalid_at(const char *text, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < len) {
        uint8_t lo, hi;
        const int lead = tok_utf8_lead(s[i], &lo, &hi);
        if (lead == 0) {
            i++;
            continue;
        }
        if (lead < 0) return i;
        const size_t need = (size_t)lead;
        if (i + need >= len) return i; // truncated
        if (s[i + 1] < lo || s[i + 1] > hi) return i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += need + 1;
    }
    return len;
}

int tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out) {
    const tok_enc_opts o = {.parse_special = 1};
    return tok_encode_opts(t, text, len, &o, out);
}

int tok_encode_opts(const tok_tokenizer *t, const char *text, size_t len, const tok_enc_opts *o, tok_ids *out) {
    // The word cache keeps 32-bit offsets; no prompt comes near this.
    if (len >= ((size_t)1 << 31)) return fd_error_set("tokenize: input of %zu bytes is over the 2 GiB limit", len);
    size_t bad = tok_utf8_invalid_at(text, len);
    if (bad < len) return fd_error_set("tokenize: input is not valid UTF-8 at byte %zu", bad);
    size_t n0 = out->n;
    re_tls *r = get_re_tls();
    enc_ctx *c = &r->ctx;
    c->t = t;
    c->out = out;
    c->md = r->md;
    c->mctx = r->mctx;
    c->failed = 0;
    c->text = text;
    c->text_len = len;
    c->parse_special = o->parse_special;
    c->plain = o->plain;
    c->n_plain = o->n_plain;
    tok_bpe_begin(&c->bpe, len);
    if (len > 0) added_split(c, &t->raw_set, text, len, raw_gap);
    int failed = c->failed;
    ctx_free_buffers(c, 0);
    if (failed) {
        out->n = n0;
        return -1;
    }
    return 0;
}
