// The normalizer (NFC/NFD/NFKC/NFKD through utf8proc), made to agree with HF, whose normalization crate has
// Unicode 11 tables: characters newer than that which normalization would change are left alone and, like the
// unassigned characters they are to HF, split the text into runs normalized on their own.
//
// A fast path, since Qwen normalizes every input (NFC): a character that is a starter (combining class 0), is its
// own normal form, and (for NFC/NFKC) never comes second in a composition cannot be changed by normalization nor
// change its neighbours. Runs of such "safe" characters are copied; only the stretch from the last safe character
// before an unsafe one to the next safe character goes through utf8proc. Most text (CJK, Cyrillic, Arabic, code)
// is then a plain copy.
#include <pthread.h>
#include <string.h>
#include <utf8proc.h>

#include "base/base.h"
#include "io/tokenizer_internal.h"

#define TOK_NCP 0x110000
static uint8_t *g_safe[4];  // per normal form (tok_norm_form): bitmap over all code points
static pthread_once_t g_once[4] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};
static const int k_form_options[4] = {UTF8PROC_COMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT, UTF8PROC_DECOMPOSE,
                                      UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};

static int has_canonical_decomp(const utf8proc_property_t *p) {
    return p->decomp_type == 0 && p->decomp_seqindex != UINT16_MAX;
}

// safe = a starter that the form maps to itself and that (for composing forms) never comes second in a composition.
static void build_safe(int form) {
    int compose = form < 2, options = k_form_options[form] | UTF8PROC_STABLE;
    uint8_t *second = fd_calloc(TOK_NCP / 8, 1);
    uint8_t *safe = fd_calloc(TOK_NCP / 8, 1);
    // Every char after the first in a canonical decomposition may be the second of a composition pair.
    for (utf8proc_int32_t cp = 0; cp < TOK_NCP && compose; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        if (!has_canonical_decomp(utf8proc_get_property(cp))) continue;
        utf8proc_int32_t buf[16];
        int last = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char(cp, buf, 16, UTF8PROC_DECOMPOSE, &last);
        for (utf8proc_ssize_t i = 1; i < k && i < 16; i++) second[buf[i] >> 3] |= (uint8_t)(1 << (buf[i] & 7));
    }
    for (int cp = 0x1161; cp <= 0x1175 && compose; cp++) second[cp >> 3] |= (uint8_t)(1 << (cp & 7)); // Hangul V
    for (int cp = 0x11A8; cp <= 0x11C2 && compose; cp++) second[cp >> 3] |= (uint8_t)(1 << (cp & 7)); // Hangul T
    for (utf8proc_int32_t cp = 0; cp < TOK_NCP; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        const utf8proc_property_t *p = utf8proc_get_property(cp);
        int ok = tok_is_new_char((uint32_t)cp) ||
                 (p->combining_class == 0 && !(second[cp >> 3] & (1 << (cp & 7))));
        int hangul = cp >= 0xAC00 && cp <= 0xD7A3; // decomposed by algorithm, not by table
        if (ok && !tok_is_new_char((uint32_t)cp) && (p->decomp_seqindex != UINT16_MAX || hangul)) {
            utf8proc_uint8_t in[4], *out = NULL; // e.g. U+00E9 stays in NFC; U+212B (Angstrom) does not
            utf8proc_ssize_t n = utf8proc_encode_char(cp, in);
            utf8proc_ssize_t r = utf8proc_map(in, n, &out, options);
            ok = r == n && !memcmp(in, out, (size_t)n);
            free(out);
        }
        if (ok) safe[cp >> 3] |= (uint8_t)(1 << (cp & 7));
    }
    free(second);
    g_safe[form] = safe;
}
static void build_safe_nfc(void) { build_safe(0); }
static void build_safe_nfkc(void) { build_safe(1); }
static void build_safe_nfd(void) { build_safe(2); }
static void build_safe_nfkd(void) { build_safe(3); }

void tok_normalize_init(const tok_tokenizer *t) {
    static void (*const builders[4])(void) = {build_safe_nfc, build_safe_nfkc, build_safe_nfd, build_safe_nfkd};
    if (t->norm_options) pthread_once(&g_once[t->norm_form], builders[t->norm_form]);
}

static void append(char **buf, size_t *n, size_t *cap, const void *s, size_t k) {
    if (*n + k + 1 > *cap) *buf = fd_realloc(*buf, *cap = (*n + k + 1) * 2);
    memcpy(*buf + *n, s, k);
    *n += k;
}

// Stable sort of a run of non-starters by combining class (canonical ordering). utf8proc's own ordering swaps
// neighbours and is quadratic on long runs of mixed marks (100 KB of them took seconds); this is linear.
static void order_marks(utf8proc_int32_t *d, size_t n, utf8proc_int32_t *tmp) {
    if (n < 2) return;
    if (n <= 16) { // insertion sort: stable, and the usual run is one or two marks
        for (size_t i = 1; i < n; i++) {
            utf8proc_int32_t x = d[i];
            int cx = utf8proc_get_property(x)->combining_class;
            size_t j = i;
            while (j > 0 && utf8proc_get_property(d[j - 1])->combining_class > cx) {
                d[j] = d[j - 1];
                j--;
            }
            d[j] = x;
        }
        return;
    }
    size_t count[257] = {0};
    for (size_t i = 0; i < n; i++) count[utf8proc_get_property(d[i])->combining_class + 1]++;
    for (int c = 1; c < 257; c++) count[c] += count[c - 1];
    for (size_t i = 0; i < n; i++) tmp[count[utf8proc_get_property(d[i])->combining_class]++] = d[i];
    memcpy(d, tmp, n * sizeof *d);
}

// One normalization of valid UTF-8 s[0..n), appended to out: full decomposition of each char, canonical ordering,
// then utf8proc's composition (linear) and re-encoding.
static void normalize_run(const tok_tokenizer *t, const char *s, size_t n, char **out, size_t *on, size_t *cap) {
    int compat = t->norm_options & UTF8PROC_COMPAT, compose = t->norm_options & UTF8PROC_COMPOSE;
    size_t dn = 0, dcap = n + 16;
    utf8proc_int32_t *d = fd_malloc(dcap * sizeof *d);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += (size_t)tok_utf8_decode((const uint8_t *)s + i, &cp);
        if (dn + 32 > dcap) d = fd_realloc(d, (dcap = dcap * 2 + 32) * sizeof *d);
        int last = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char((utf8proc_int32_t)cp, d + dn, 32,
                                                     UTF8PROC_DECOMPOSE | UTF8PROC_STABLE | (compat ? UTF8PROC_COMPAT : 0),
                                                     &last);
        FD_CHECK(k > 0 && k <= 32, "decomposition of U+%04X: %zd", cp, (ssize_t)k);
        dn += (size_t)k;
    }
    utf8proc_int32_t *tmp = fd_malloc((dn + 1) * sizeof *tmp);
    for (size_t i = 0; i < dn;) { // each maximal run of non-starters
        if (utf8proc_get_property(d[i])->combining_class == 0) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < dn && utf8proc_get_property(d[j])->combining_class != 0) j++;
        order_marks(d + i, j - i, tmp);
        i = j;
    }
    free(tmp);
    // utf8proc_reencode composes (no reordering) and writes UTF-8 over the same buffer (4 bytes per code point).
    utf8proc_ssize_t r = utf8proc_reencode(d, (utf8proc_ssize_t)dn, compose ? UTF8PROC_COMPOSE | UTF8PROC_STABLE : UTF8PROC_STABLE);
    FD_CHECK(r >= 0, "utf8proc_reencode: %s", utf8proc_errmsg(r));
    append(out, on, cap, d, (size_t)r);
    free(d);
}

// Normalizes s[0..n) with the new-character splitting described above; appends to out.
static void normalize_general(const tok_tokenizer *t, const char *s, size_t n, char **out, size_t *on, size_t *cap) {
    size_t seg = 0, i = 0;
    for (;;) {
        size_t next = i;
        int is_new = 0;
        if (i < n) {
            uint32_t cp;
            next = i + (size_t)tok_utf8_decode((const uint8_t *)s + i, &cp);
            is_new = cp >= 0x800 && tok_is_new_char(cp);
        }
        if (i == n || is_new) {
            if (i > seg) normalize_run(t, s + seg, i - seg, out, on, cap);
            if (i == n) break;
            append(out, on, cap, s + i, next - i);
            seg = next;
        }
        i = next;
    }
}

char *tok_normalize(const tok_tokenizer *t, const char *s, size_t n, size_t *out_n) {
    char *out = NULL;
    size_t on = 0, cap = 0;
    const uint8_t *safe = g_safe[t->norm_form];
    if (!safe) {
        normalize_general(t, s, n, &out, &on, &cap);
    } else {
        size_t copied = 0, i = 0, last_safe = SIZE_MAX;
        int last_safe_new = 0;
        while (i < n) {
            uint32_t cp;
            size_t len = (size_t)tok_utf8_decode((const uint8_t *)s + i, &cp);
            if ((safe[cp >> 3] >> (cp & 7)) & 1) {
                last_safe = i;
                last_safe_new = cp >= 0x800 && tok_is_new_char(cp);
                i += len;
                continue;
            }
            // The unsafe stretch, with the starter before it (it may compose with what follows) unless that starter
            // is one HF does not know.
            size_t start = (last_safe != SIZE_MAX && !last_safe_new) ? last_safe : i, j = i;
            while (j < n && (j += (size_t)tok_utf8_decode((const uint8_t *)s + j, &cp), 1) &&
                   (j >= n || (tok_utf8_decode((const uint8_t *)s + j, &cp), !((safe[cp >> 3] >> (cp & 7)) & 1))))
                ;
            append(&out, &on, &cap, s + copied, start - copied);
            normalize_general(t, s + start, j - start, &out, &on, &cap);
            copied = i = j;
            last_safe = SIZE_MAX;
        }
        append(&out, &on, &cap, s + copied, n - copied);
    }
    if (!out) out = fd_calloc(1, 1);
    out[on] = 0;
    *out_n = on;
    return out;
}
