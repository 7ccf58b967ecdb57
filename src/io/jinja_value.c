// Jinja values: the arena they live in, Python's str()/repr() of them, transformers' tojson, equality and ordering.
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/jinja_internal.h"

struct jj_chunk {
    jj_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void jj_fail(jj_arena *a, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(a->err);
    a->err = a->line > 0 ? fd_sprintf("line %d: %s", a->line, msg) : fd_strdup(msg);
    longjmp(*a->jb, 1);
}

void *jj_alloc(jj_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->used + n > a->head->size) {
        size_t size = n > 65536 ? n : 65536;
        if (a->used + size > a->limit) jj_fail(a, "the template needs more than %zu MiB of memory", a->limit >> 20);
        jj_chunk *c = fd_malloc(sizeof *c + size);
        c->next = a->head;
        c->size = size;
        c->used = 0;
        a->head = c;
        a->used += size;
    }
    void *p = (char *)a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *jj_strndup(jj_arena *a, const char *s, size_t n) {
    char *p = jj_alloc(a, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

void jj_arena_free(jj_arena *a) {
    for (jj_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
    free(a->err);
    a->err = NULL;
}

// ---- constructors ----
jv jv_undef = {.k = JV_UNDEF}, jv_none = {.k = JV_NONE}, jv_true = {.k = JV_BOOL, .b = 1}, jv_false = {.k = JV_BOOL};

jv *jv_bool(int b) { return b ? &jv_true : &jv_false; }
// Small integers are shared constants: loops make many (loop.index ...), and values are never mutated.
static jv small_ints[1024];
static pthread_once_t small_once = PTHREAD_ONCE_INIT;
static void small_init(void) {
    for (int i = 0; i < 1024; i++) small_ints[i] = (jv){.k = JV_INT, .i = i};
}
jv *jv_int(jj_arena *a, long long i) {
    if (i >= 0 && i < 1024) {
        pthread_once(&small_once, small_init);
        return &small_ints[i];
    }
    jv *v = jj_alloc(a, sizeof *v);
    v->k = JV_INT;
    v->i = i;
    return v;
}
jv *jv_float(jj_arena *a, double f) {
    jv *v = jj_alloc(a, sizeof *v);
    v->k = JV_FLOAT;
    v->f = f;
    return v;
}
jv *jv_str_owned(jj_arena *a, const char *s, size_t n) {
    jv *v = jj_alloc(a, sizeof *v);
    v->k = JV_STR;
    v->str.s = s;
    v->str.n = n;
    return v;
}
jv *jv_strn(jj_arena *a, const char *s, size_t n) { return jv_str_owned(a, jj_strndup(a, s, n), n); }
jv *jv_list(jj_arena *a, size_t cap) {
    jv *v = jj_alloc(a, sizeof *v);
    v->k = JV_LIST;
    v->list.cap = cap ? cap : 4;
    v->list.a = jj_alloc(a, v->list.cap * sizeof(jv *));
    return v;
}
void jv_list_push(jj_arena *a, jv *l, jv *x) {
    if (l->list.n == l->list.cap) {
        jv **na = jj_alloc(a, l->list.cap * 2 * sizeof(jv *));
        memcpy(na, l->list.a, l->list.n * sizeof(jv *));
        l->list.a = na;
        l->list.cap *= 2;
    }
    l->list.a[l->list.n++] = x;
}
jv *jv_dict(jj_arena *a) {
    jv *v = jj_alloc(a, sizeof *v);
    v->k = JV_DICT;
    return v;
}
jv *jv_dict_get(const jv *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->dict.n; i++) {
        const jv *k = d->dict.keys[i];
        if (k->k == JV_STR && k->str.n == n && !memcmp(k->str.s, key, n)) return d->dict.vals[i];
    }
    return NULL;
}
void jv_dict_set(jj_arena *a, jv *d, jv *key, jv *val) {
    for (size_t i = 0; i < d->dict.n; i++)
        if (jv_equal(d->dict.keys[i], key)) {
            d->dict.vals[i] = val;
            return;
        }
    if (d->dict.n == d->dict.cap) {
        size_t cap = d->dict.cap ? d->dict.cap * 2 : 8;
        jv **nk = jj_alloc(a, cap * sizeof(jv *)), **nv = jj_alloc(a, cap * sizeof(jv *));
        if (d->dict.n) {
            memcpy(nk, d->dict.keys, d->dict.n * sizeof(jv *));
            memcpy(nv, d->dict.vals, d->dict.n * sizeof(jv *));
        }
        d->dict.keys = nk;
        d->dict.vals = nv;
        d->dict.cap = cap;
    }
    d->dict.keys[d->dict.n] = key;
    d->dict.vals[d->dict.n++] = val;
}

jv *jv_from_json(jj_arena *a, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv *d = jv_dict(a);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) jv_dict_set(a, d, jv_strn(a, k, strlen(k)), jv_from_json(a, v));
        return d;
    }
    case JSON_ARRAY: {
        jv *l = jv_list(a, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j); i++) jv_list_push(a, l, jv_from_json(a, json_array_get(j, i)));
        return l;
    }
    case JSON_STRING: return jv_strn(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int(a, json_integer_value(j));
    case JSON_REAL: return jv_float(a, json_real_value(j));
    case JSON_TRUE: return &jv_true;
    case JSON_FALSE: return &jv_false;
    default: return &jv_none;
    }
}

// ---- predicates ----
int jv_truthy(const jv *v) {
    switch (v->k) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0;
    case JV_STR: return v->str.n > 0;
    case JV_LIST: return v->list.n > 0;
    case JV_DICT: return v->ns || v->dict.n > 0; // a namespace object is always true, as in Python
    default: return 1;
    }
}

static int is_num(const jv *v) { return v->k == JV_INT || v->k == JV_FLOAT || v->k == JV_BOOL; }
static double num(const jv *v) { return v->k == JV_FLOAT ? v->f : v->k == JV_INT ? (double)v->i : v->b; }

int jv_equal(const jv *x, const jv *y) {
    if (is_num(x) && is_num(y)) {
        if (x->k != JV_FLOAT && y->k != JV_FLOAT) return (x->k == JV_INT ? x->i : x->b) == (y->k == JV_INT ? y->i : y->b);
        return num(x) == num(y);
    }
    if (x->k != y->k) return 0;
    switch (x->k) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR: return x->str.n == y->str.n && !memcmp(x->str.s, y->str.s, x->str.n);
    case JV_LIST:
        if (x->list.n != y->list.n) return 0;
        for (size_t i = 0; i < x->list.n; i++)
            if (!jv_equal(x->list.a[i], y->list.a[i])) return 0;
        return 1;
    case JV_DICT:
        if (x->ns || y->ns) return x == y;
        if (x->dict.n != y->dict.n) return 0;
        for (size_t i = 0; i < x->dict.n; i++) {
            const jv *k = x->dict.keys[i], *other = NULL;
            for (size_t j = 0; j < y->dict.n && !other; j++)
                if (jv_equal(k, y->dict.keys[j])) other = y->dict.vals[j];
            if (!other || !jv_equal(x->dict.vals[i], other)) return 0;
        }
        return 1;
    default: return x == y;
    }
}

const char *jv_kind_name(const jv *v) {
    static const char *const n[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
                                    "macro", "function"};
    if (v->k == JV_LIST && v->tuple) return "tuple";
    if (v->k == JV_DICT && v->ns) return "Namespace";
    return n[v->k];
}

int jv_compare(jj_arena *a, const jv *x, const jv *y) {
    if (is_num(x) && is_num(y)) {
        double p = num(x), q = num(y);
        return p < q ? -1 : p > q;
    }
    if (x->k == JV_STR && y->k == JV_STR) { // UTF-8 byte order is code point order, as Python compares
        size_t n = x->str.n < y->str.n ? x->str.n : y->str.n;
        int c = n ? memcmp(x->str.s, y->str.s, n) : 0;
        return c ? c : (x->str.n > y->str.n) - (x->str.n < y->str.n);
    }
    if (x->k == JV_LIST && y->k == JV_LIST) {
        for (size_t i = 0; i < x->list.n && i < y->list.n; i++) {
            int c = jv_compare(a, x->list.a[i], y->list.a[i]);
            if (c) return c;
        }
        return (x->list.n > y->list.n) - (x->list.n < y->list.n);
    }
    jj_fail(a, "'<' not supported between instances of '%s' and '%s'", jv_kind_name(x), jv_kind_name(y));
}

size_t jv_utf8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

// ---- text ----
void jj_put(jj_arena *a, jj_buf *b, const char *s, size_t n) {
    if (!n) return;
    if (b->limit && b->n + n > b->limit) jj_fail(a, "the rendered text exceeds %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = jj_alloc(a, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jj_puts(jj_arena *a, jj_buf *b, const char *s) { jj_put(a, b, s, strlen(s)); }

// repr() of a float: the shortest digits that read back to the same double, laid out as Python does (fixed
// notation for exponents in [-4, 16), a ".0" on integral values, "1e+16" style otherwise).
static void write_float(jj_arena *a, jj_buf *b, double f) {
    if (isnan(f)) return jj_puts(a, b, "nan");
    if (isinf(f)) return jj_puts(a, b, f < 0 ? "-inf" : "inf");
    if (f == 0) return jj_puts(a, b, signbit(f) ? "-0.0" : "0.0");
    char e[40];
    for (int p = 0; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p, f);
        if (strtod(e, NULL) == f) break;
    }
    // e = [-]d[.ddd]e[+-]XX
    const int neg = e[0] == '-';
    char digits[24];
    int nd = 0;
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    const int exp = atoi(p + 1);
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    jj_puts(a, b, out);
}

static void write_str_repr(jj_arena *a, jj_buf *b, const char *s, size_t n) {
    const int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    const char q = has_sq && !has_dq ? '"' : '\'';
    jj_put(a, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '\\') jj_puts(a, b, "\\\\");
        else if (c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            jj_put(a, b, esc, 2);
        } else if (c == '\n') jj_puts(a, b, "\\n");
        else if (c == '\r') jj_puts(a, b, "\\r");
        else if (c == '\t') jj_puts(a, b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            jj_puts(a, b, esc);
        } else jj_put(a, b, (const char *)&s[i], 1);
    }
    jj_put(a, b, &q, 1);
}

void jv_write_repr(jj_arena *a, jj_buf *b, const jv *v) {
    if (v->k == JV_STR) return write_str_repr(a, b, v->str.s, v->str.n);
    if (v->k == JV_LIST) {
        jj_puts(a, b, v->tuple ? "(" : "[");
        for (size_t i = 0; i < v->list.n; i++) {
            if (i) jj_puts(a, b, ", ");
            jv_write_repr(a, b, v->list.a[i]);
        }
        jj_puts(a, b, v->tuple ? (v->list.n == 1 ? ",)" : ")") : "]");
        return;
    }
    if (v->k == JV_DICT) {
        jj_puts(a, b, v->ns ? "<Namespace {" : "{");
        for (size_t i = 0; i < v->dict.n; i++) {
            if (i) jj_puts(a, b, ", ");
            jv_write_repr(a, b, v->dict.keys[i]);
            jj_puts(a, b, ": ");
            jv_write_repr(a, b, v->dict.vals[i]);
        }
        jj_puts(a, b, v->ns ? "}>" : "}");
        return;
    }
    jv_write_str(a, b, v);
}

void jv_write_str(jj_arena *a, jj_buf *b, const jv *v) {
    char t[32];
    switch (v->k) {
    case JV_UNDEF: return;
    case JV_NONE: return jj_puts(a, b, "None");
    case JV_BOOL: return jj_puts(a, b, v->b ? "True" : "False");
    case JV_INT:
        snprintf(t, sizeof t, "%lld", v->i);
        return jj_puts(a, b, t);
    case JV_FLOAT: return write_float(a, b, v->f);
    case JV_STR: return jj_put(a, b, v->str.s, v->str.n);
    case JV_MACRO:
    case JV_FUNC: return jj_puts(a, b, "<function>");
    default: return jv_write_repr(a, b, v);
    }
}

jv *jv_to_str(jj_arena *a, const jv *v) {
    if (v->k == JV_STR) return (jv *)v;
    jj_buf b = {0};
    jv_write_str(a, &b, v);
    return b.p ? jv_str_owned(a, b.p, b.n) : jv_strn(a, "", 0);
}

// ascii: ensure_ascii=True, non-ASCII characters as \uXXXX (surrogate pairs above U+FFFF), as json.dumps writes them
static void write_json_str(jj_arena *a, jj_buf *b, const char *s, size_t n, int ascii) {
    jj_put(a, b, "\"", 1);
    size_t run = 0; // bytes copied as they are (ensure_ascii=False keeps non-ASCII text)
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[16];
        if (ascii && c >= 0x80) {
            unsigned cp = 0;
            int k = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
            cp = k == 3 ? c & 7u : k == 2 ? c & 15u : k == 1 ? c & 31u : 0xFFFDu;
            for (int m = 0; m < k && i + 1 < n; m++) cp = cp << 6 | ((unsigned char)s[++i] & 63u);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(u, sizeof u, "\\u%04x", cp);
            }
            jj_put(a, b, s + i - k - run, run);
            run = 0;
            jj_puts(a, b, u);
            continue;
        }
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        }
        if (esc) {
            jj_put(a, b, s + i - run, run);
            run = 0;
            jj_puts(a, b, esc);
        } else run++;
    }
    jj_put(a, b, s + n - run, run);
    jj_put(a, b, "\"", 1);
}

static void json_newline(jj_arena *a, jj_buf *b, int indent, int depth) {
    jj_put(a, b, "\n", 1);
    for (int i = 0; i < indent * depth; i++) jj_put(a, b, " ", 1);
}

void jv_write_json(jj_arena *a, jj_buf *b, const jv *v, int indent, const char *item_sep, const char *key_sep,
                   int flags, int depth) {
    const int sort_keys = flags & 1;
    if (depth > 200) jj_fail(a, "tojson: nesting too deep");
    if (!item_sep) item_sep = indent >= 0 ? "," : ", ";
    if (!key_sep) key_sep = ": ";
    switch (v->k) {
    case JV_UNDEF:
    case JV_NONE: return jj_puts(a, b, "null");
    case JV_BOOL: return jj_puts(a, b, v->b ? "true" : "false");
    case JV_INT: return jv_write_str(a, b, v);
    case JV_FLOAT:
        if (isnan(v->f)) return jj_puts(a, b, "NaN");
        if (isinf(v->f)) return jj_puts(a, b, v->f < 0 ? "-Infinity" : "Infinity");
        return write_float(a, b, v->f);
    case JV_STR: return write_json_str(a, b, v->str.s, v->str.n, flags & 2);
    case JV_LIST:
        jj_put(a, b, "[", 1);
        for (size_t i = 0; i < v->list.n; i++) {
            if (i) jj_puts(a, b, item_sep);
            if (indent >= 0) json_newline(a, b, indent, depth + 1);
            jv_write_json(a, b, v->list.a[i], indent, item_sep, key_sep, flags, depth + 1);
        }
        if (indent >= 0 && v->list.n) json_newline(a, b, indent, depth);
        jj_put(a, b, "]", 1);
        return;
    case JV_DICT: {
        size_t n = v->dict.n, *order = jj_alloc(a, (n + 1) * sizeof(size_t));
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (sort_keys) // insertion sort: dicts in templates are small
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && jv_compare(a, v->dict.keys[order[j - 1]], v->dict.keys[order[j]]) > 0;
                     j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jj_put(a, b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            const jv *k = v->dict.keys[order[i]];
            if (i) jj_puts(a, b, item_sep);
            if (indent >= 0) json_newline(a, b, indent, depth + 1);
            if (k->k == JV_STR) write_json_str(a, b, k->str.s, k->str.n, flags & 2);
            else if (k->k == JV_NONE || k->k == JV_BOOL || k->k == JV_INT || k->k == JV_FLOAT) {
                jj_buf kb = {0};
                jv_write_json(a, &kb, k, -1, NULL, NULL, 0, depth + 1);
                write_json_str(a, b, kb.p, kb.n, 0);
            } else jj_fail(a, "tojson: keys must be str, int, float, bool or None, not %s", jv_kind_name(k));
            jj_puts(a, b, key_sep);
            jv_write_json(a, b, v->dict.vals[order[i]], indent, item_sep, key_sep, flags, depth + 1);
        }
        if (indent >= 0 && n) json_newline(a, b, indent, depth);
        jj_put(a, b, "}", 1);
        return;
    }
    default: jj_fail(a, "tojson: Object of type %s is not JSON serializable", jv_kind_name(v));
    }
}
