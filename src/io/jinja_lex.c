// The Jinja lexer, with Jinja2's whitespace rules as transformers configures them:
//  - "\r\n" and "\r" read as "\n", and one trailing newline of the source is dropped (keep_trailing_newline=False);
//  - trim_blocks: the first newline after a block tag or comment is removed ("+%}" keeps it);
//  - lstrip_blocks: spaces and tabs from the start of a line up to a block tag or comment are removed ("{%+" keeps);
//  - "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" / "-}}" / "-#}" all whitespace after it.
// Inside a tag, "}}" or "%}" ends it only outside brackets, so a dict literal like {{ {'a': {'b': 1}} }} lexes.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja_internal.h"

typedef struct {
    jj_arena *a;
    jj_tok *t;
    size_t n, cap;
    const char *s;
    size_t len, pos;
    int line;
} lexer;

static jj_tok *emit(lexer *L, jj_tok_kind k, const char *s, size_t n) {
    if (L->n + 1 >= L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jj_tok *nt = jj_alloc(L->a, cap * sizeof *nt);
        if (L->n) memcpy(nt, L->t, L->n * sizeof *nt);
        L->t = nt;
        L->cap = cap;
    }
    jj_tok *t = &L->t[L->n++];
    t->k = k;
    t->s = s;
    t->n = n;
    t->line = L->line;
    return t;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void put_cp(char *o, size_t *k, unsigned cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD; // a lone surrogate has no UTF-8 form
    if (cp > 0x10FFFF) cp = 0xFFFD;
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | cp >> 6);
        o[(*k)++] = (char)(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | cp >> 12);
        o[(*k)++] = (char)(0x80 | (cp >> 6 & 63));
        o[(*k)++] = (char)(0x80 | (cp & 63));
    } else {
        o[(*k)++] = (char)(0xF0 | cp >> 18);
        o[(*k)++] = (char)(0x80 | (cp >> 12 & 63));
        o[(*k)++] = (char)(0x80 | (cp >> 6 & 63));
        o[(*k)++] = (char)(0x80 | (cp & 63));
    }
}

// A string literal at L->pos (the quote), unescaped as Python's "unicode-escape" does; unknown escapes stay.
static void lex_string(lexer *L) {
    const char q = L->s[L->pos];
    size_t start = ++L->pos, end = start;
    while (end < L->len && L->s[end] != q) end += L->s[end] == '\\' ? 2 : 1;
    if (end >= L->len) jj_fail(L->a, "unterminated string literal");
    char *o = jj_alloc(L->a, end - start + 1);
    size_t k = 0;
    for (size_t i = start; i < end; i++) {
        char c = L->s[i];
        if (c == '\n') L->line++;
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char e = L->s[++i];
        const char *simple = strchr("\\'\"abfnrtv", e);
        if (e && simple) {
            static const char map[] = "\\'\"\a\b\f\n\r\t\v";
            o[k++] = map[simple - "\\'\"abfnrtv"];
        } else if (e == '\n') {
            L->line++;
        } else if (e >= '0' && e <= '7') {
            unsigned cp = 0;
            int d = 0;
            while (d < 3 && i < end && L->s[i] >= '0' && L->s[i] <= '7') cp = cp * 8 + (unsigned)(L->s[i++] - '0'), d++;
            i--;
            put_cp(o, &k, cp);
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int want = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            unsigned cp = 0;
            for (int d = 0; d < want; d++) {
                int h = i + 1 + (size_t)d < end ? hexval(L->s[i + 1 + d]) : -1;
                if (h < 0) jj_fail(L->a, "truncated \\%cXX escape in a string literal", e);
                cp = cp * 16 + (unsigned)h;
            }
            i += (size_t)want;
            put_cp(o, &k, cp);
        } else {
            o[k++] = '\\';
            i--;
        }
    }
    o[k] = 0;
    L->pos = end + 1;
    emit(L, TK_STRING, o, k);
}

static void lex_number(lexer *L) {
    size_t i = L->pos;
    int is_float = 0;
    char buf[64];
    size_t k = 0;
    while (i < L->len && (is_digit(L->s[i]) || L->s[i] == '_')) {
        if (L->s[i] != '_' && k < 60) buf[k++] = L->s[i];
        i++;
    }
    if (i + 1 < L->len && L->s[i] == '.' && is_digit(L->s[i + 1])) {
        is_float = 1;
        buf[k++] = '.';
        for (i++; i < L->len && (is_digit(L->s[i]) || L->s[i] == '_'); i++)
            if (L->s[i] != '_' && k < 60) buf[k++] = L->s[i];
    }
    if (i < L->len && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->len && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->len && is_digit(L->s[j])) {
            is_float = 1;
            buf[k++] = 'e';
            for (i++; i < L->len && (is_digit(L->s[i]) || L->s[i] == '+' || L->s[i] == '-'); i++)
                if (k < 62) buf[k++] = L->s[i];
        }
    }
    buf[k] = 0;
    jj_tok *t = emit(L, is_float ? TK_FLOAT : TK_INT, L->s + L->pos, i - L->pos);
    if (is_float) t->f = strtod(buf, NULL);
    else {
        errno = 0;
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) jj_fail(L->a, "integer literal too large");
    }
    L->pos = i;
}

static int starts(const lexer *L, size_t at, const char *p) {
    size_t n = strlen(p);
    return at + n <= L->len && !memcmp(L->s + at, p, n);
}

// The inside of a {{ }} or {% %} tag; returns at the end delimiter's last character + 1 and applies its strip flag.
static void lex_tag(lexer *L, int block) {
    int depth = 0;
    for (;;) {
        while (L->pos < L->len && is_ws(L->s[L->pos])) L->line += L->s[L->pos++] == '\n';
        if (L->pos >= L->len) jj_fail(L->a, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
        const char *close = block ? "%}" : "}}";
        if (depth == 0) {
            int strip = 0, keep = 0;
            size_t at = L->pos;
            if ((L->s[at] == '-' || (block && L->s[at] == '+')) && starts(L, at + 1, close)) {
                strip = L->s[at] == '-';
                keep = L->s[at] == '+';
                at++;
            }
            if (starts(L, at, close)) {
                emit(L, block ? TK_BLOCK_END : TK_VAR_END, NULL, 0);
                L->pos = at + 2;
                if (strip)
                    while (L->pos < L->len && is_ws(L->s[L->pos])) L->line += L->s[L->pos++] == '\n';
                else if (block && !keep && L->pos < L->len && L->s[L->pos] == '\n') L->pos++, L->line++;
                return;
            }
        }
        char c = L->s[L->pos];
        if (is_name0(c)) {
            size_t i = L->pos;
            while (i < L->len && (is_name0(L->s[i]) || is_digit(L->s[i]))) i++;
            emit(L, TK_NAME, L->s + L->pos, i - L->pos);
            L->pos = i;
        } else if (is_digit(c)) {
            lex_number(L);
        } else if (c == '\'' || c == '"') {
            lex_string(L);
        } else {
            static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">=", NULL};
            size_t k = 0;
            for (int i = 0; ops2[i]; i++)
                if (starts(L, L->pos, ops2[i])) k = 2;
            if (!k && strchr("+-*/%~<>=()[]{},.:|", c)) k = 1;
            if (!k) jj_fail(L->a, "unexpected character '%c' in a tag", c);
            if (k == 1 && strchr("([{", c)) depth++;
            if (k == 1 && strchr(")]}", c) && depth > 0) depth--;
            emit(L, TK_OP, L->s + L->pos, k);
            L->pos += k;
        }
    }
}

// {% raw %}...{% endraw %}: the text between is literal. L->pos is just past "{%" (and a '-' or '+').
static int try_raw(lexer *L) {
    size_t i = L->pos;
    while (i < L->len && is_ws(L->s[i])) i++;
    if (!starts(L, i, "raw")) return 0;
    i += 3;
    while (i < L->len && is_ws(L->s[i])) i++;
    int strip_after = 0;
    if (i < L->len && L->s[i] == '-') strip_after = 1, i++;
    if (!starts(L, i, "%}")) return 0;
    i += 2;
    if (strip_after)
        while (i < L->len && is_ws(L->s[i])) i++;
    for (size_t j = i; j + 1 < L->len; j++) {
        if (L->s[j] != '{' || L->s[j + 1] != '%') continue;
        size_t k = j + 2, text_end = j;
        if (k < L->len && L->s[k] == '-') {
            k++;
            while (text_end > i && is_ws(L->s[text_end - 1])) text_end--;
        }
        while (k < L->len && is_ws(L->s[k])) k++;
        if (!starts(L, k, "endraw")) continue;
        k += 6;
        while (k < L->len && is_ws(L->s[k])) k++;
        int strip = 0;
        if (k < L->len && L->s[k] == '-') strip = 1, k++;
        if (!starts(L, k, "%}")) continue;
        for (size_t x = L->pos; x < text_end; x++) L->line += L->s[x] == '\n';
        if (text_end > i) emit(L, TK_TEXT, L->s + i, text_end - i);
        L->pos = k + 2;
        if (strip)
            while (L->pos < L->len && is_ws(L->s[L->pos])) L->pos++;
        else if (L->pos < L->len && L->s[L->pos] == '\n') L->pos++;
        return 1;
    }
    jj_fail(L->a, "missing {%% endraw %%}");
}

jj_tok *jj_lex(jj_arena *a, const char *src, size_t n, size_t *count) {
    // newlines normalized, one trailing newline dropped
    char *s = jj_alloc(a, n + 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[m++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else s[m++] = src[i];
    }
    if (m && s[m - 1] == '\n') m--;
    s[m] = 0;
    lexer L = {.a = a, .s = s, .len = m, .line = 1};
    while (L.pos < L.len) {
        size_t k = L.pos;
        while (k + 1 < L.len && !(L.s[k] == '{' && (L.s[k + 1] == '{' || L.s[k + 1] == '%' || L.s[k + 1] == '#')))
            k++;
        if (k + 1 >= L.len) k = L.len;
        size_t text_end = k;
        const char kind = k < L.len ? L.s[k + 1] : 0;
        const char mod = k + 2 < L.len ? L.s[k + 2] : 0;
        if (kind && mod == '-') {
            while (text_end > L.pos && is_ws(L.s[text_end - 1])) text_end--;
        } else if ((kind == '%' || kind == '#') && mod != '+') { // lstrip_blocks
            size_t l = text_end;
            while (l > L.pos && (L.s[l - 1] == ' ' || L.s[l - 1] == '\t')) l--;
            const int line_start = l == 0 || L.s[l - 1] == '\n';
            if (line_start) text_end = l;
        }
        if (text_end > L.pos) emit(&L, TK_TEXT, L.s + L.pos, text_end - L.pos);
        for (size_t i = L.pos; i < k; i++) L.line += L.s[i] == '\n';
        if (!kind) break;
        L.pos = k + 2 + (mod == '-' || mod == '+');
        if (kind == '#') {
            size_t e = L.pos;
            while (e + 1 < L.len && !(L.s[e] == '#' && L.s[e + 1] == '}')) e++;
            if (e + 1 >= L.len) jj_fail(a, "missing end of comment tag");
            for (size_t i = L.pos; i < e; i++) L.line += L.s[i] == '\n';
            const int strip = e > L.pos && L.s[e - 1] == '-', keep = e > L.pos && L.s[e - 1] == '+';
            L.pos = e + 2;
            if (strip)
                while (L.pos < L.len && is_ws(L.s[L.pos])) L.line += L.s[L.pos++] == '\n';
            else if (!keep && L.pos < L.len && L.s[L.pos] == '\n') L.pos++, L.line++;
        } else if (kind == '%' && try_raw(&L)) {
        } else {
            emit(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, NULL, 0);
            lex_tag(&L, kind == '%');
        }
    }
    emit(&L, TK_EOF, NULL, 0);
    *count = L.n;
    return L.t;
}
