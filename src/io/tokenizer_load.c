// Loading tokenizer.json into the tables that encode/decode use. Every part of the file we do not understand is
// refused with a message naming it: a tokenizer that loads must give HF's ids, not an approximation.
#include <jansson.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "io/tokenizer_internal.h"

// Ids beyond this are refused: no real vocabulary is near it, and it bounds what a hostile file can allocate.
#define TOK_MAX_ID (1 << 24)

uint64_t tok_hash(const void *s, size_t n) {
    const uint8_t *p = s;
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    return h | 1; // 0 marks an empty slot
}

static uint32_t pow2_at_least(uint64_t n) {
    uint32_t c = 16;
    while (c < n) c *= 2;
    return c;
}

int32_t tok_str_map_get(const tok_str_map *m, const char *s, size_t n, const char *const *keys,
                        const uint32_t *key_lens) {
    uint64_t h = tok_hash(s, n);
    uint32_t mask = m->cap - 1, i = (uint32_t)h & mask;
    for (;;) {
        if (m->hash[i] == 0) return -1;
        int32_t id = m->id[i];
        if (m->hash[i] == h && key_lens[id] == n && memcmp(keys[id], s, n) == 0) return id;
        i = (i + 1) & mask;
    }
}

// The GPT-2 byte <-> char table: printable Latin-1 bytes stand for themselves, the rest map to U+0100.. in order.
static void bytelevel_table(uint32_t byte_to_cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

// ---- JSON helpers ----
static const char *json_str(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}
static int json_flag(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int load_normalizer(tok_tokenizer *t, json_t *n) {
    if (!n || json_is_null(n)) return 0;
    const char *type = json_str(n, "type");
    if (!type) return fd_error_set("normalizer: missing \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) return fd_error_set("normalizer: Sequence without a \"normalizers\" list");
        for (size_t i = 0; i < json_array_size(list); i++) FD_TRY(load_normalizer(t, json_array_get(list, i)));
        return 0;
    }
    int opt, form;
    if (!strcmp(type, "NFC")) opt = UTF8PROC_COMPOSE, form = TOK_NFC;
    else if (!strcmp(type, "NFKC")) opt = UTF8PROC_COMPOSE | UTF8PROC_COMPAT, form = TOK_NFKC;
    else if (!strcmp(type, "NFD")) opt = UTF8PROC_DECOMPOSE, form = TOK_NFD;
    else if (!strcmp(type, "NFKD")) opt = UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, form = TOK_NFKD;
    else return fd_error_set("normalizer type \"%s\" is not supported (only NFC/NFD/NFKC/NFKD and Sequence)", type);
    if (t->norm_options) return fd_error_set("normalizer: two Unicode normal forms in one Sequence are not supported");
    t->norm_options = opt | UTF8PROC_STABLE;
    t->norm_form = form;
    return 0;
}

// HF compiles Split patterns with Oniguruma, whose \s is Unicode White_Space. PCRE2's \s also matches U+180E
// (an old Zs char, now Cf), which changed Qwen3's ids on real text. So \s and \S are spelled out as the exact
// White_Space set before compiling. (\x{20}, not a space, so that (?x) patterns keep it.)
#define TOK_WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static char *onig_compat(const char *pat) {
    size_t n = strlen(pat), o = 0;
    char *out = fd_malloc(n * 64 + 1);
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[++i];
            const char *rep = NULL;
            if (e == 's') rep = in_class ? TOK_WS : "[" TOK_WS "]";
            else if (e == 'S' && !in_class) rep = "[^" TOK_WS "]";
            if (rep) {
                memcpy(out + o, rep, strlen(rep));
                o += strlen(rep);
            } else {
                out[o++] = c;
                out[o++] = e;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
            out[o++] = c;
            if (i + 1 < n && pat[i + 1] == '^') out[o++] = pat[++i];
            if (i + 1 < n && pat[i + 1] == ']') out[o++] = pat[++i]; // a leading ']' is a literal
            continue;
        }
        if (c == ']' && in_class) in_class = 0;
        out[o++] = c;
    }
    out[o] = 0;
    return out;
}

static pcre2_code *compile_re(const char *pat_in, int literal) {
    int err;
    PCRE2_SIZE off;
    char *pat = literal ? fd_strdup(pat_in) : onig_compat(pat_in);
    uint32_t opts = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP; // LITERAL refuses UCP
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(err, buf, sizeof buf);
        fd_error_set("regex /%s/ does not compile at offset %zu: %s", pat_in, (size_t)off, (char *)buf);
        free(pat);
        return NULL;
    }
    free(pat);
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // if JIT is unavailable pcre2_match interprets: slower, same result
    return re;
}

static int load_split(tok_tokenizer *t, json_t *p) {
    if (t->n_steps == TOK_MAX_STEPS) return fd_error_set("pre_tokenizer: more than %d Split steps", TOK_MAX_STEPS);
    json_t *pat = json_object_get(p, "pattern");
    const char *re_s = json_is_object(pat) ? json_str(pat, "Regex") : NULL;
    const char *lit_s = json_is_object(pat) ? json_str(pat, "String") : NULL;
    if (!re_s && !lit_s) return fd_error_set("pre_tokenizer Split: \"pattern\" needs a \"Regex\" or \"String\"");
    const char *beh = json_str(p, "behavior");
    tok_split_behavior b;
    if (!beh || !strcmp(beh, "Isolated")) b = TOK_SPLIT_ISOLATED;
    else if (!strcmp(beh, "Removed")) b = TOK_SPLIT_REMOVED;
    else if (!strcmp(beh, "MergedWithPrevious")) b = TOK_SPLIT_PREV;
    else if (!strcmp(beh, "MergedWithNext")) b = TOK_SPLIT_NEXT;
    else if (!strcmp(beh, "Contiguous")) b = TOK_SPLIT_CONTIGUOUS;
    else return fd_error_set("pre_tokenizer Split: unknown behavior \"%s\"", beh);
    pcre2_code *re = compile_re(re_s ? re_s : lit_s, !re_s);
    if (!re) return fd_error_prefix("pre_tokenizer Split");
    t->steps[t->n_steps++] = (tok_split){re, b, json_flag(p, "invert", 0)};
    return 0;
}

static int load_pre_tokenizer(tok_tokenizer *t, json_t *p) {
    if (!json_is_object(p)) return fd_error_set("pre_tokenizer: missing (a byte-level BPE needs ByteLevel)");
    const char *type = json_str(p, "type");
    json_t *list = NULL;
    if (type && !strcmp(type, "Sequence")) {
        list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list) || json_array_size(list) == 0)
            return fd_error_set("pre_tokenizer: Sequence without a \"pretokenizers\" list");
    }
    size_t n = list ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *s = list ? json_array_get(list, i) : p;
        const char *st = json_is_object(s) ? json_str(s, "type") : NULL;
        if (!st) return fd_error_set("pre_tokenizer step %zu: missing \"type\"", i);
        if (!strcmp(st, "Split")) {
            if (i == n - 1) return fd_error_set("pre_tokenizer: the last step must be ByteLevel (byte-level BPE)");
            FD_TRY(load_split(t, s));
        } else if (!strcmp(st, "ByteLevel")) {
            // ByteLevel maps bytes to printable chars; a step after it would see those chars, which we do not model.
            if (i != n - 1) return fd_error_set("pre_tokenizer: ByteLevel must be the last step");
            t->prefix_space = json_flag(s, "add_prefix_space", 1);
            if (json_flag(s, "use_regex", 1)) {
                t->bytelevel_re = compile_re("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", 0);
                FD_CHECK(t->bytelevel_re != NULL, "the GPT-2 pattern must compile");
            }
        } else {
            return fd_error_set("pre_tokenizer type \"%s\" is not supported (only Split and ByteLevel)", st);
        }
    }
    return 0;
}

static int load_decoder(json_t *d) {
    const char *type = json_is_object(d) ? json_str(d, "type") : NULL;
    if (type && !strcmp(type, "Sequence")) {
        json_t *list = json_object_get(d, "decoders");
        if (json_array_size(list) == 1) return load_decoder(json_array_get(list, 0));
    }
    if (!type || strcmp(type, "ByteLevel"))
        return fd_error_set("decoder: only ByteLevel is supported (found %s)", type ? type : "none");
    return 0;
}

static void set_id_text(tok_tokenizer *t, int32_t id, const char *s, size_t n) {
    free(t->id_text[id]);
    t->id_text[id] = fd_malloc(n + 1);
    memcpy(t->id_text[id], s, n);
    t->id_text[id][n] = 0;
    t->id_text_len[id] = (uint32_t)n;
}

static int parse_id(json_t *v, int32_t *id) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0 || x >= TOK_MAX_ID) return -1;
    *id = (int32_t)x;
    return 0;
}

static int load_vocab(tok_tokenizer *t, json_t *vocab, json_t *added) {
    if (!json_is_object(vocab)) return fd_error_set("model.vocab: missing or not an object");
    int32_t max_id = -1, id = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (parse_id(v, &id)) return fd_error_set("model.vocab[\"%s\"]: id is not an integer in [0, 2^24)", key);
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        if (!json_is_object(a) || parse_id(json_object_get(a, "id"), &id) || !json_str(a, "content"))
            return fd_error_set("added_tokens[%zu]: needs an integer \"id\" in [0, 2^24) and a string \"content\"", i);
    }
    if (max_id < 0) return fd_error_set("model.vocab: empty");
    // Added tokens get ids from vocab size upwards (see load_added), so leave room for them.
    t->n_vocab_entries = (int32_t)json_object_size(vocab);
    t->n_ids = max_id + 1;
    if (t->n_vocab_entries + (int32_t)json_array_size(added) > t->n_ids)
        t->n_ids = t->n_vocab_entries + (int32_t)json_array_size(added);
    t->id_text = fd_calloc((size_t)t->n_ids, sizeof(char *));
    t->id_text_len = fd_calloc((size_t)t->n_ids, sizeof(uint32_t));
    t->id_special = fd_calloc((size_t)t->n_ids, 1);
    t->id_added = fd_calloc((size_t)t->n_ids, 1);
    size_t nv = json_object_size(vocab);
    t->vocab.cap = pow2_at_least(nv * 2);
    t->vocab.hash = fd_calloc(t->vocab.cap, sizeof(uint64_t));
    t->vocab.id = fd_calloc(t->vocab.cap, sizeof(int32_t));
    // The map's keys live in id_text. Added tokens later overwrite the text of their ids; all lookups that
    // need the model's own strings (merges, byte ids) happen before that.
    json_object_foreach(vocab, key, v) {
        parse_id(v, &id);
        size_t n = strlen(key);
        if (t->id_text[id]) return fd_error_set("model.vocab: id %d is used twice (\"%s\")", id, key);
        set_id_text(t, id, key, n);
        uint64_t h = tok_hash(key, n);
        uint32_t i = (uint32_t)h & (t->vocab.cap - 1);
        while (t->vocab.hash[i]) i = (i + 1) & (t->vocab.cap - 1);
        t->vocab.hash[i] = h;
        t->vocab.id[i] = id;
    }
    return 0;
}

static int32_t vocab_get(const tok_tokenizer *t, const char *s, size_t n) {
    return tok_str_map_get(&t->vocab, s, n, (const char *const *)t->id_text, t->id_text_len);
}

static int load_merges(tok_tokenizer *t, json_t *merges) {
    if (!json_is_array(merges)) return fd_error_set("model.merges: missing or not a list");
    size_t n = json_array_size(merges);
    t->merge_cap = pow2_at_least(n * 2 + 1);
    t->merges = fd_calloc(t->merge_cap, sizeof(tok_merge_slot));
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    for (size_t r = 0; r < n && rc == 0; r++) {
        json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) { // "a b": the two parts around the one space
            a = json_string_value(m);
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                rc = fd_error_set("model.merges[%zu]: \"%s\" is not two tokens separated by one space", r, a);
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            la = strlen(a);
            lb = strlen(b);
        } else {
            rc = fd_error_set("model.merges[%zu]: neither \"a b\" nor [\"a\", \"b\"]", r);
            break;
        }
        int32_t ia = vocab_get(t, a, la), ib = vocab_get(t, b, lb);
        if (buf_cap < la + lb + 1) buf = fd_realloc(buf, buf_cap = (la + lb) * 2 + 16);
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t im = vocab_get(t, buf, la + lb);
        if (ia < 0 || ib < 0 || im < 0) {
            buf[la + lb] = 0;
            rc = fd_error_set("model.merges[%zu]: token \"%s\" is not in the vocab",
                              r, ia < 0 ? "(left part)" : ib < 0 ? "(right part)" : buf);
            break;
        }
        uint64_t key = (((uint64_t)(uint32_t)ia << 32) | (uint32_t)ib) + 1;
        uint64_t h = key * 0x9E3779B97F4A7C15ull;
        uint32_t i = (uint32_t)(h >> 32) & (t->merge_cap - 1);
        while (t->merges[i].key && t->merges[i].key != key) i = (i + 1) & (t->merge_cap - 1);
        t->merges[i].key = key; // a repeated pair takes its later rank, as HF's map does
        t->merges[i].val = ((uint64_t)r << 32) | (uint32_t)im;
    }
    free(buf);
    return rc;
}

static int added_cmp(const void *pa, const void *pb) {
    const tok_added *a = *(tok_added *const *)pa, *b = *(tok_added *const *)pb;
    uint8_t ca = (uint8_t)a->content[0], cb = (uint8_t)b->content[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1; // longest first: leftmost-longest matching
    return 0;
}

static void build_added_set(tok_tokenizer *t, tok_added_set *s, int normalized) {
    s->tok = fd_calloc((size_t)t->n_added + 1, sizeof(tok_added *));
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].len > 0) s->tok[s->n++] = &t->added[i];
    qsort(s->tok, (size_t)s->n, sizeof(tok_added *), added_cmp);
    int j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < s->n && (uint8_t)s->tok[j]->content[0] < b) j++;
        s->first[b] = j;
    }
    s->first[256] = s->n;
}

// Ids as HF assigns them when it reads the file (the "id" fields are only checked, with a warning): a token whose
// content is already in the model vocab takes that id; others count up from the vocab size. A repeated content
// is skipped.
static int load_added(tok_tokenizer *t, json_t *added) {
    size_t n = json_array_size(added);
    t->added = fd_calloc(n + 1, sizeof(tok_added));
    int32_t max_added = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(added, i);
        const char *content = json_str(a, "content");
        size_t len = json_string_length(json_object_get(a, "content"));
        if (len == 0) continue; // HF ignores empty added tokens
        if (memchr(content, 0, len)) return fd_error_set("added_tokens[%zu]: content holds a NUL byte", i);
        int dup = 0;
        for (int k = 0; k < t->n_added && !dup; k++) dup = !strcmp(t->id_text[t->added[k].id], content);
        if (dup) continue;
        int32_t json_id = 0, id = vocab_get(t, content, len);
        parse_id(json_object_get(a, "id"), &json_id);
        if (id < 0) id = max_added >= t->n_vocab_entries ? max_added + 1 : t->n_vocab_entries;
        if (id > max_added) max_added = id;
        if (id != json_id)
            FD_WARN("tokenizer: added token \"%s\" has id %d in the file but %d as HF assigns it; using %d", content,
                    json_id, id, id);
        FD_CHECK(id < t->n_ids, "added id %d beyond %d", id, t->n_ids);
        tok_added *d = &t->added[t->n_added];
        d->id = id;
        d->special = (uint8_t)json_flag(a, "special", 0);
        d->lstrip = (uint8_t)json_flag(a, "lstrip", 0);
        d->rstrip = (uint8_t)json_flag(a, "rstrip", 0);
        d->single_word = (uint8_t)json_flag(a, "single_word", 0);
        d->normalized = (uint8_t)json_flag(a, "normalized", !d->special);
        t->id_special[id] = d->special;
        t->id_added[id] = 1;
        size_t nl = len;
        d->content = (d->normalized && t->norm_options) ? tok_normalize(t, content, len, &nl)
                                                        : fd_strdup(content);
        d->len = (uint32_t)nl;
        // Its decode text (overriding the vocab's): the content as matched, i.e. normalized when `normalized`
        // (HF's id_to_token and decode give "fix" for a normalized NFKC token written "\ufb01x").
        set_id_text(t, id, d->content, nl);
        t->n_added++;
        if (nl == 0) d->len = 0; // normalizes to nothing: kept for decode, never matched
    }
    build_added_set(t, &t->raw_set, 0);
    build_added_set(t, &t->norm_set, 1);
    return 0;
}

// The bytes each token decodes to. Added tokens decode to their content as written (HF emits them around the
// decoder); model tokens go through the byte table when every char is in it, else the text itself (what HF's
// ByteLevel decoder does).
static void build_decode_bytes(tok_tokenizer *t) {
    uint32_t b2c[256];
    int16_t c2b[512];
    bytelevel_table(b2c);
    for (int i = 0; i < 512; i++) c2b[i] = -1;
    for (int b = 0; b < 256; b++) c2b[b2c[b]] = (int16_t)b;
    t->id_bytes = fd_calloc((size_t)t->n_ids, sizeof(char *));
    t->id_bytes_len = fd_calloc((size_t)t->n_ids, sizeof(uint32_t));
    for (int32_t id = 0; id < t->n_ids; id++) {
        const char *s = t->id_text[id];
        if (!s) continue;
        uint32_t n = t->id_text_len[id], o = 0, k = 0;
        char *out = fd_malloc(n + 1);
        int ok = !t->id_added[id] && tok_utf8_invalid_at(s, n) == n;
        while (ok && k < n) {
            uint32_t cp;
            k += (uint32_t)tok_utf8_decode((const uint8_t *)s + k, &cp);
            if (cp >= 512 || c2b[cp] < 0) ok = 0;
            else out[o++] = (char)c2b[cp];
        }
        if (!ok) {
            memcpy(out, s, n);
            o = n;
        }
        out[o] = 0;
        t->id_bytes[id] = out;
        t->id_bytes_len[id] = o;
    }
}

// The id of the one-char token of each byte: where every word's BPE starts.
static void build_byte_ids(tok_tokenizer *t) {
    uint32_t b2c[256];
    bytelevel_table(b2c);
    for (int b = 0; b < 256; b++) {
        char buf[4];
        int n = (int)utf8proc_encode_char((utf8proc_int32_t)b2c[b], (utf8proc_uint8_t *)buf);
        t->byte_id[b] = vocab_get(t, buf, (size_t)n);
        memcpy(t->byte_str[b], buf, (size_t)n); // chars of the table are all below U+0800
        t->byte_str_len[b] = (uint8_t)n;
    }
}

static int load_model(tok_tokenizer *t, json_t *root) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return fd_error_set("\"model\": missing or not an object");
    const char *type = json_str(model, "type");
    if (type && strcmp(type, "BPE")) return fd_error_set("model type \"%s\" is not supported (only BPE)", type);
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0.0)
        return fd_error_set("model: BPE dropout is not supported");
    const char *csp = json_str(model, "continuing_subword_prefix"), *eow = json_str(model, "end_of_word_suffix");
    if ((csp && *csp) || (eow && *eow))
        return fd_error_set("model: continuing_subword_prefix / end_of_word_suffix are not supported");
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added) && !json_is_null(added)) return fd_error_set("added_tokens: not a list");
    FD_TRY(load_vocab(t, json_object_get(model, "vocab"), added));
    FD_TRY(load_merges(t, json_object_get(model, "merges")));
    t->ignore_merges = json_flag(model, "ignore_merges", 0);
    t->fuse_unk = json_flag(model, "fuse_unk", 0);
    const char *unk = json_str(model, "unk_token");
    t->unk_id = unk ? vocab_get(t, unk, strlen(unk)) : -1;
    FD_TRY(load_normalizer(t, json_object_get(root, "normalizer")));
    tok_normalize_init(t);
    FD_TRY(load_pre_tokenizer(t, json_object_get(root, "pre_tokenizer")));
    FD_TRY(load_decoder(json_object_get(root, "decoder")));
    build_byte_ids(t); // before added tokens replace the text of their ids
    FD_TRY(load_added(t, added));
    build_decode_bytes(t);
    return 0;
}

tok_tokenizer *tok_load_json(const char *text, size_t len, const char *name) {
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        fd_error_set("tokenizer %s: invalid JSON at line %d column %d: %s", name, jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    tok_tokenizer *t = fd_calloc(1, sizeof *t);
    t->unk_id = -1;
    int rc = json_is_object(root) ? load_model(t, root) : fd_error_set("top level is not an object");
    json_decref(root);
    if (rc) {
        fd_error_prefix("tokenizer %s", name);
        tok_free(t);
        return NULL;
    }
    return t;
}

tok_tokenizer *tok_load(const char *path) {
    char *file = NULL;
    size_t n = 0;
    char *text = fd_read_file(path, &n);
    if (!text) { // a directory: look for tokenizer.json inside
        file = fd_path_join(path, "tokenizer.json");
        if (!fd_file_exists(file)) {
            fd_error_set("tokenizer %s: no such file, nor a directory holding tokenizer.json", path);
            free(file);
            return NULL;
        }
        text = fd_read_file(file, &n);
        if (!text) {
            fd_error_prefix("tokenizer");
            free(file);
            return NULL;
        }
    }
    tok_tokenizer *t = tok_load_json(text, n, file ? file : path);
    free(text);
    free(file);
    return t;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; t->id_text && i < t->n_ids; i++) free(t->id_text[i]);
    for (int32_t i = 0; t->id_bytes && i < t->n_ids; i++) free(t->id_bytes[i]);
    free(t->id_text);
    free(t->id_text_len);
    free(t->id_bytes);
    free(t->id_bytes_len);
    free(t->id_special);
    free(t->id_added);
    free(t->vocab.hash);
    free(t->vocab.id);
    free(t->merges);
    for (int i = 0; i < t->n_steps; i++) pcre2_code_free(t->steps[i].re);
    pcre2_code_free(t->bytelevel_re);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t->raw_set.tok);
    free(t->norm_set.tok);
    free(t);
}

int32_t tok_n_vocab(const tok_tokenizer *t) { return t->n_ids; }

int tok_is_special(const tok_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_ids && t->id_special[id]; }

int32_t tok_token_id(const tok_tokenizer *t, const char *tok) {
    size_t n = strlen(tok);
    for (int i = 0; i < t->n_added; i++)
        if (t->id_text[t->added[i].id] && !strcmp(t->id_text[t->added[i].id], tok)) return t->added[i].id;
    return vocab_get(t, tok, n);
}
