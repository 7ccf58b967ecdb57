// Jinja builtins: global functions (raise_exception, namespace, range, dict, strftime_now), attribute and item
// lookup with Jinja2's rules (an attribute finds a dict method before a key, a subscript a key before a method),
// and the Python str/dict methods templates call. Filters and tests are in jinja_filters.c.
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#include "io/jinja_builtins.h"

// ---- UTF-8 and Python's notion of whitespace ----
size_t jb_cp_at(const char *s, size_t n, size_t i, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &c);
    if (k <= 0) {
        *cp = (unsigned char)s[i];
        return 1;
    }
    *cp = c;
    return (size_t)k;
}

int jb_py_space(int32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static int in_chars(int32_t c, const jv *chars) {
    for (size_t i = 0; i < chars->str.n;) {
        int32_t d;
        i += jb_cp_at(chars->str.s, chars->str.n, i, &d);
        if (d == c) return 1;
    }
    return 0;
}

// str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both); chars NULL or None = whitespace
jv *jb_strip(jj_arena *a, const jv *s, const jv *chars, int which) {
    if (chars && chars->k != JV_NONE && chars->k != JV_STR) jj_fail(a, "strip arg must be None or str");
    if (chars && chars->k == JV_NONE) chars = NULL;
    size_t lo = 0, hi = s->str.n;
    if (which & 1)
        while (lo < hi) {
            int32_t c;
            size_t k = jb_cp_at(s->str.s, hi, lo, &c);
            if (chars ? !in_chars(c, chars) : !jb_py_space(c)) break;
            lo += k;
        }
    if (which & 2)
        while (hi > lo) {
            size_t st = hi - 1;
            while (st > lo && ((unsigned char)s->str.s[st] & 0xC0) == 0x80) st--;
            int32_t c;
            jb_cp_at(s->str.s, hi, st, &c);
            if (chars ? !in_chars(c, chars) : !jb_py_space(c)) break;
            hi = st;
        }
    return jv_strn(a, s->str.s + lo, hi - lo);
}

// Case mapping per code point (mode 0 lower, 1 upper, 2 title: upper after a non-letter, lower otherwise,
// 3 capitalize: first upper, rest lower).
jv *jb_case(jj_arena *a, const jv *s, int mode) {
    jj_buf b = {0};
    int prev_letter = 0, first = 1;
    for (size_t i = 0; i < s->str.n;) {
        int32_t c;
        i += jb_cp_at(s->str.s, s->str.n, i, &c);
        int up = mode == 1 || (mode == 2 && !prev_letter) || (mode == 3 && first);
        int32_t m = up ? utf8proc_toupper(c) : utf8proc_tolower(c);
        const utf8proc_category_t cat = utf8proc_category(c);
        prev_letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        first = 0;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = utf8proc_encode_char(m, enc);
        jj_put(a, &b, (const char *)enc, (size_t)k);
    }
    return b.p ? jv_str_owned(a, b.p, b.n) : jv_strn(a, "", 0);
}

static int is_str(const jv *v) { return v && v->k == JV_STR; }

jv *jb_replace(jj_arena *a, const jv *s, const jv *old, const jv *new_, long long count) {
    if (!is_str(old) || !is_str(new_)) jj_fail(a, "replace() arguments must be str");
    jj_buf b = {0};
    size_t i = 0;
    long long done = 0;
    if (old->str.n == 0) { // Python inserts `new` between every character (and at both ends)
        for (;;) {
            if (count < 0 || done < count) jj_put(a, &b, new_->str.s, new_->str.n), done++;
            if (i >= s->str.n) break;
            int32_t c;
            size_t k = jb_cp_at(s->str.s, s->str.n, i, &c);
            jj_put(a, &b, s->str.s + i, k);
            i += k;
        }
    } else {
        while (i < s->str.n) {
            const char *hit = (count < 0 || done < count) ? memmem(s->str.s + i, s->str.n - i, old->str.s, old->str.n)
                                                          : NULL;
            if (!hit) break;
            jj_put(a, &b, s->str.s + i, (size_t)(hit - (s->str.s + i)));
            jj_put(a, &b, new_->str.s, new_->str.n);
            i = (size_t)(hit - s->str.s) + old->str.n;
            done++;
        }
        jj_put(a, &b, s->str.s + i, s->str.n - i);
    }
    return b.p ? jv_str_owned(a, b.p, b.n) : jv_strn(a, "", 0);
}

// str.split(sep=None, maxsplit=-1); from the right when rsplit (only differs with a maxsplit)
static jv *split(jj_arena *a, const jv *s, const jv *sep, long long maxsplit, int rsplit) {
    jv *l = jv_list(a, 0);
    const char *p = s->str.s;
    const size_t n = s->str.n;
    if (!sep || sep->k == JV_NONE) { // runs of whitespace; no empty strings
        size_t i = 0;
        long long splits = 0;
        if (rsplit && maxsplit >= 0) jj_fail(a, "rsplit(None, maxsplit) is not supported");
        while (i < n) {
            int32_t c;
            size_t k;
            while (i < n && (k = jb_cp_at(p, n, i, &c), jb_py_space(c))) i += k;
            if (i >= n) break;
            if (maxsplit >= 0 && splits >= maxsplit) {
                size_t e = n;
                while (e > i) {
                    size_t st = e - 1;
                    while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
                    jb_cp_at(p, n, st, &c);
                    if (!jb_py_space(c)) break;
                    e = st;
                }
                jv_list_push(a, l, jv_strn(a, p + i, e - i));
                break;
            }
            size_t st = i;
            while (i < n && (k = jb_cp_at(p, n, i, &c), !jb_py_space(c))) i += k;
            jv_list_push(a, l, jv_strn(a, p + st, i - st));
            splits++;
        }
        return l;
    }
    if (!is_str(sep)) jj_fail(a, "must be str or None, not %s", jv_kind_name(sep));
    if (sep->str.n == 0) jj_fail(a, "empty separator");
    if (rsplit && maxsplit >= 0) {
        jv *rev = jv_list(a, 0);
        size_t end = n;
        long long splits = 0;
        while (splits < maxsplit && end >= sep->str.n) {
            size_t at = end - sep->str.n;
            int found = 0;
            for (;; at--) {
                if (!memcmp(p + at, sep->str.s, sep->str.n)) {
                    found = 1;
                    break;
                }
                if (at == 0) break;
            }
            if (!found) break;
            jv_list_push(a, rev, jv_strn(a, p + at + sep->str.n, end - at - sep->str.n));
            end = at;
            splits++;
        }
        jv_list_push(a, l, jv_strn(a, p, end));
        for (size_t i = rev->list.n; i > 0; i--) jv_list_push(a, l, rev->list.a[i - 1]);
        return l;
    }
    size_t i = 0;
    long long splits = 0;
    for (;;) {
        const char *hit = maxsplit < 0 || splits < maxsplit ? memmem(p + i, n - i, sep->str.s, sep->str.n) : NULL;
        if (!hit) {
            jv_list_push(a, l, jv_strn(a, p + i, n - i));
            return l;
        }
        jv_list_push(a, l, jv_strn(a, p + i, (size_t)(hit - (p + i))));
        i = (size_t)(hit - p) + sep->str.n;
        splits++;
    }
}

// ---- argument access ----
jv *jb_arg(jv **args, int nargs, const char **kw, jv **kwv, int nkw, int i, const char *name) {
    for (int k = 0; k < nkw; k++)
        if (name && !strcmp(kw[k], name)) return kwv[k];
    return i >= 0 && i < nargs ? args[i] : NULL;
}
long long jb_int_arg(jj_arena *a, const jv *v, long long dflt, const char *what) {
    if (!v || v->k == JV_NONE) return dflt;
    if (v->k == JV_INT) return v->i;
    if (v->k == JV_BOOL) return v->b;
    jj_fail(a, "%s must be an integer, not %s", what, jv_kind_name(v));
}

// ---- functions ----
enum {
    F_RAISE = 1, F_RANGE, F_NAMESPACE, F_DICT, F_STRFTIME,
    M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_UPPER, M_LOWER, M_TITLE,
    M_CAPITALIZE, M_REPLACE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_SPLITLINES, M_ISDIGIT, M_ISALPHA, M_ISSPACE,
    M_ISALNUM, M_ITEMS, M_KEYS, M_VALUES, M_GET,
};

typedef struct {
    const char *name;
    int id;
} named;

static const named GLOBALS[] = {{"raise_exception", F_RAISE}, {"range", F_RANGE},   {"namespace", F_NAMESPACE},
                                {"dict", F_DICT},             {"strftime_now", F_STRFTIME}, {NULL, 0}};
static const named STR_METHODS[] = {
    {"startswith", M_STARTSWITH}, {"endswith", M_ENDSWITH}, {"strip", M_STRIP},     {"lstrip", M_LSTRIP},
    {"rstrip", M_RSTRIP},         {"split", M_SPLIT},       {"rsplit", M_RSPLIT},   {"upper", M_UPPER},
    {"lower", M_LOWER},           {"title", M_TITLE},       {"capitalize", M_CAPITALIZE}, {"replace", M_REPLACE},
    {"find", M_FIND},             {"rfind", M_RFIND},       {"count", M_COUNT},     {"join", M_JOIN},
    {"splitlines", M_SPLITLINES}, {"isdigit", M_ISDIGIT},   {"isalpha", M_ISALPHA}, {"isspace", M_ISSPACE},
    {"isalnum", M_ISALNUM},       {NULL, 0}};
static const named DICT_METHODS[] = {{"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"get", M_GET},
                                     {NULL, 0}};

static int find_named(const named *t, const char *name, size_t n) {
    for (int i = 0; t[i].name; i++)
        if (strlen(t[i].name) == n && !memcmp(t[i].name, name, n)) return t[i].id;
    return 0;
}

static jv *fn_value(jj_arena *a, int id, jv *self) {
    jv *f = jj_alloc(a, sizeof *f);
    f->k = JV_FUNC;
    f->fn.id = id;
    f->fn.self = self;
    return f;
}

jv *jj_global(jj_arena *a, const char *name, size_t n) {
    int id = find_named(GLOBALS, name, n);
    return id ? fn_value(a, id, NULL) : NULL;
}

jv *jj_method(jj_arena *a, jv *self, const char *name, size_t n) {
    int id = self->k == JV_STR ? find_named(STR_METHODS, name, n)
           : self->k == JV_DICT && !self->ns ? find_named(DICT_METHODS, name, n) : 0;
    return id ? fn_value(a, id, self) : NULL;
}

jv *jj_getattr(jj_eval *E, jv *obj, const char *name, size_t n) {
    if (obj->k == JV_UNDEF) jj_fail(E->a, "undefined value has no attribute '%.*s'", (int)(n > 60 ? 60 : n), name);
    jv *m = jj_method(E->a, obj, name, n);
    if (m) return m;
    if (obj->k == JV_DICT) {
        jv *v = jv_dict_get(obj, name, n);
        return v ? v : &jv_undef;
    }
    return &jv_undef;
}

jv *jj_getitem(jj_eval *E, jv *obj, jv *key) {
    if (obj->k == JV_UNDEF) jj_fail(E->a, "undefined value is not subscriptable");
    if (obj->k == JV_DICT) {
        for (size_t i = 0; i < obj->dict.n; i++)
            if (jv_equal(obj->dict.keys[i], key)) return obj->dict.vals[i];
    } else if ((obj->k == JV_LIST || obj->k == JV_STR) && (key->k == JV_INT || key->k == JV_BOOL)) {
        long long i = key->k == JV_INT ? key->i : key->b;
        if (obj->k == JV_LIST) {
            if (i < 0) i += (long long)obj->list.n;
            return i >= 0 && i < (long long)obj->list.n ? obj->list.a[i] : &jv_undef;
        }
        const long long len = (long long)jv_utf8_len(obj->str.s, obj->str.n);
        if (i < 0) i += len;
        if (i < 0 || i >= len) return &jv_undef;
        size_t at = 0;
        for (long long c = 0; c < i; c++) {
            int32_t cp;
            at += jb_cp_at(obj->str.s, obj->str.n, at, &cp);
        }
        int32_t cp;
        return jv_strn(E->a, obj->str.s + at, jb_cp_at(obj->str.s, obj->str.n, at, &cp));
    }
    if (key->k == JV_STR) {
        jv *m = jj_method(E->a, obj, key->str.s, key->str.n);
        if (m) return m;
    }
    return &jv_undef;
}

static int has_prefix(jj_arena *a, const jv *s, const jv *p, int suffix) {
    if (p->k == JV_LIST && p->tuple) {
        for (size_t i = 0; i < p->list.n; i++)
            if (has_prefix(a, s, p->list.a[i], suffix)) return 1;
        return 0;
    }
    if (!is_str(p)) jj_fail(a, "%s first arg must be str or a tuple of str", suffix ? "endswith" : "startswith");
    if (p->str.n > s->str.n) return 0;
    return !memcmp(s->str.s + (suffix ? s->str.n - p->str.n : 0), p->str.s, p->str.n);
}

static jv *str_method(jj_eval *E, int id, jv *s, jv **args, int nargs, const char **kw, jv **kwv, int nkw) {
    jj_arena *a = E->a;
    jv *a0 = jb_arg(args, nargs, kw, kwv, nkw, 0, NULL), *a1 = jb_arg(args, nargs, kw, kwv, nkw, 1, NULL);
    switch (id) {
    case M_STARTSWITH:
    case M_ENDSWITH:
        if (!a0) jj_fail(a, "startswith/endswith takes one argument");
        return jv_bool(has_prefix(a, s, a0, id == M_ENDSWITH));
    case M_STRIP: return jb_strip(a, s, a0, 3);
    case M_LSTRIP: return jb_strip(a, s, a0, 1);
    case M_RSTRIP: return jb_strip(a, s, a0, 2);
    case M_SPLIT:
    case M_RSPLIT: {
        jv *sep = jb_arg(args, nargs, kw, kwv, nkw, 0, "sep"), *ms = jb_arg(args, nargs, kw, kwv, nkw, 1, "maxsplit");
        return split(a, s, sep, jb_int_arg(a, ms, -1, "maxsplit"), id == M_RSPLIT);
    }
    case M_UPPER: return jb_case(a, s, 1);
    case M_LOWER: return jb_case(a, s, 0);
    case M_TITLE: return jb_case(a, s, 2);
    case M_CAPITALIZE: return jb_case(a, s, 3);
    case M_REPLACE:
        if (!a0 || !a1) jj_fail(a, "replace() takes at least 2 arguments");
        return jb_replace(a, s, a0, a1, jb_int_arg(a, jb_arg(args, nargs, kw, kwv, nkw, 2, "count"), -1, "count"));
    case M_FIND:
    case M_RFIND:
    case M_COUNT: {
        if (!is_str(a0)) jj_fail(a, "must be str");
        long long cnt = 0, pos = -1;
        for (size_t i = 0; i + a0->str.n <= s->str.n;) {
            if (!memcmp(s->str.s + i, a0->str.s, a0->str.n)) {
                if (pos < 0 || id == M_RFIND) pos = (long long)jv_utf8_len(s->str.s, i);
                cnt++;
                if (id == M_FIND) break;
                i += a0->str.n ? a0->str.n : 1;
            } else i++;
        }
        return jv_int(a, id == M_COUNT ? cnt : pos);
    }
    case M_JOIN: {
        if (!a0 || a0->k != JV_LIST) jj_fail(a, "join() takes a list");
        jj_buf b = {0};
        for (size_t i = 0; i < a0->list.n; i++) {
            if (!is_str(a0->list.a[i])) jj_fail(a, "sequence item %zu: expected str instance", i);
            if (i) jj_put(a, &b, s->str.s, s->str.n);
            jj_put(a, &b, a0->list.a[i]->str.s, a0->list.a[i]->str.n);
        }
        return b.p ? jv_str_owned(a, b.p, b.n) : jv_strn(a, "", 0);
    }
    case M_SPLITLINES: {
        jv *l = jv_list(a, 0);
        size_t st = 0;
        for (size_t i = 0; i < s->str.n; i++)
            if (s->str.s[i] == '\n' || s->str.s[i] == '\r') {
                jv_list_push(a, l, jv_strn(a, s->str.s + st, i - st));
                if (s->str.s[i] == '\r' && i + 1 < s->str.n && s->str.s[i + 1] == '\n') i++;
                st = i + 1;
            }
        if (st < s->str.n) jv_list_push(a, l, jv_strn(a, s->str.s + st, s->str.n - st));
        return l;
    }
    default: { // isdigit / isalpha / isspace / isalnum: every character, and at least one
        int ok = s->str.n > 0;
        for (size_t i = 0; i < s->str.n && ok;) {
            int32_t c;
            i += jb_cp_at(s->str.s, s->str.n, i, &c);
            const utf8proc_category_t cat = utf8proc_category(c);
            const int alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
            const int digit = cat == UTF8PROC_CATEGORY_ND;
            ok = id == M_ISDIGIT ? digit : id == M_ISALPHA ? alpha : id == M_ISSPACE ? jb_py_space(c) : alpha || digit;
        }
        return jv_bool(ok);
    }
    }
}

static jv *dict_method(jj_eval *E, int id, jv *d, jv **args, int nargs) {
    jj_arena *a = E->a;
    if (id == M_GET) {
        if (nargs < 1) jj_fail(a, "get expected at least 1 argument");
        for (size_t i = 0; i < d->dict.n; i++)
            if (jv_equal(d->dict.keys[i], args[0])) return d->dict.vals[i];
        return nargs > 1 ? args[1] : &jv_none;
    }
    jv *l = jv_list(a, d->dict.n);
    for (size_t i = 0; i < d->dict.n; i++) {
        if (id == M_KEYS) jv_list_push(a, l, d->dict.keys[i]);
        else if (id == M_VALUES) jv_list_push(a, l, d->dict.vals[i]);
        else {
            jv *t = jv_list(a, 2);
            t->tuple = 1;
            jv_list_push(a, t, d->dict.keys[i]);
            jv_list_push(a, t, d->dict.vals[i]);
            jv_list_push(a, l, t);
        }
    }
    return l;
}

jv *jj_call_builtin(jj_eval *E, jv *fn, jv **args, int nargs, const char **kw, jv **kwv, int nkw) {
    jj_arena *a = E->a;
    const int id = fn->fn.id;
    if (fn->fn.self) {
        if (fn->fn.self->k == JV_STR) return str_method(E, id, fn->fn.self, args, nargs, kw, kwv, nkw);
        return dict_method(E, id, fn->fn.self, args, nargs);
    }
    switch (id) {
    case F_RAISE: {
        jv *m = nargs > 0 ? jv_to_str(a, args[0]) : jv_strn(a, "", 0);
        a->line = 0; // the template's own message, as transformers reports it
        jj_fail(a, "raise_exception: %.*s", (int)(m->str.n > 300 ? 300 : m->str.n), m->str.s);
    }
    case F_RANGE: {
        long long lo = 0, hi, st = 1;
        if (nargs < 1 || nargs > 3) jj_fail(a, "range expected 1 to 3 arguments");
        if (nargs == 1) hi = jb_int_arg(a, args[0], 0, "range()");
        else {
            lo = jb_int_arg(a, args[0], 0, "range()");
            hi = jb_int_arg(a, args[1], 0, "range()");
            if (nargs == 3) st = jb_int_arg(a, args[2], 1, "range()");
        }
        if (st == 0) jj_fail(a, "range() arg 3 must not be zero");
        jv *l = jv_list(a, 0);
        for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) {
            if (l->list.n >= 100000) jj_fail(a, "range() too large");
            jv_list_push(a, l, jv_int(a, i));
        }
        return l;
    }
    case F_NAMESPACE:
    case F_DICT: {
        jv *d = jv_dict(a);
        d->ns = id == F_NAMESPACE;
        for (int i = 0; i < nargs; i++) {
            if (args[i]->k != JV_DICT) jj_fail(a, "%s() takes keyword arguments or a dict", id == F_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < args[i]->dict.n; k++) jv_dict_set(a, d, args[i]->dict.keys[k], args[i]->dict.vals[k]);
        }
        for (int k = 0; k < nkw; k++) jv_dict_set(a, d, jv_strn(a, kw[k], strlen(kw[k])), kwv[k]);
        return d;
    }
    case F_STRFTIME: {
        if (nargs < 1 || !is_str(args[0])) jj_fail(a, "strftime_now takes a format string");
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        char out[256];
        char *fmt = jj_strndup(a, args[0]->str.s, args[0]->str.n);
        size_t k = strftime(out, sizeof out, fmt, &tm);
        return jv_strn(a, out, k);
    }
    }
    jj_fail(a, "not callable");
}
