// Jinja filters and tests: Jinja2's builtin ones that chat templates use, and transformers' tojson (json.dumps with
// ensure_ascii=False, so non-ASCII text stays as it is, and Python's separators).
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/jinja_builtins.h"

#define ARG(i, name) jb_arg(args, nargs, kw, kwv, nkw, i, name)

static jv *buf_str(jj_arena *a, jj_buf *b) { return b->p ? jv_str_owned(a, b->p, b->n) : jv_strn(a, "", 0); }

static jv *need_str(jj_eval *E, jv *x, const char *filter) {
    if (x->k == JV_UNDEF) return jv_strn(E->a, "", 0);
    if (x->k != JV_STR) jj_fail(E->a, "filter '%s' needs a string, not %s", filter, jv_kind_name(x));
    return x;
}

// The items of something iterable, as a list (dict: keys; string: characters; undefined: nothing).
static jv *as_list(jj_eval *E, jv *x) {
    if (x->k == JV_LIST) return x;
    jv *l = jv_list(E->a, 0);
    if (x->k == JV_DICT)
        for (size_t i = 0; i < x->dict.n; i++) jv_list_push(E->a, l, x->dict.keys[i]);
    else if (x->k == JV_STR)
        for (size_t i = 0; i < x->str.n;) {
            int32_t c;
            size_t k = jb_cp_at(x->str.s, x->str.n, i, &c);
            jv_list_push(E->a, l, jv_strn(E->a, x->str.s + i, k));
            i += k;
        }
    else if (x->k != JV_UNDEF)
        jj_fail(E->a, "'%s' object is not iterable", jv_kind_name(x));
    return l;
}

// A dotted attribute path ("a.b") or an integer index, as Jinja's attribute= arguments take.
static jv *attr_path(jj_eval *E, jv *x, jv *attr) {
    if (attr->k == JV_INT) return jj_getitem(E, x, attr);
    if (attr->k != JV_STR) jj_fail(E->a, "attribute must be a string");
    const char *p = attr->str.s, *end = p + attr->str.n;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot) dot = end;
        jv *key = jv_strn(E->a, p, (size_t)(dot - p));
        x = x->k == JV_UNDEF ? x : jj_getitem(E, x, key);
        p = dot + 1;
    }
    return x;
}

static void sort_list(jj_eval *E, jv *l, jv *attr, int reverse, int case_sensitive) {
    // insertion sort, stable like Python's sort; keys compared case-insensitively unless asked
    jv **keys = jj_alloc(E->a, (l->list.n + 1) * sizeof(jv *));
    for (size_t i = 0; i < l->list.n; i++) {
        jv *k = attr ? attr_path(E, l->list.a[i], attr) : l->list.a[i];
        if (!case_sensitive && k->k == JV_STR) k = jb_case(E->a, k, 0);
        keys[i] = k;
    }
    for (size_t i = 1; i < l->list.n; i++)
        for (size_t j = i; j > 0; j--) {
            int c = jv_compare(E->a, keys[j - 1], keys[j]);
            if (reverse ? c >= 0 : c <= 0) break;
            jv *t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
            t = l->list.a[j];
            l->list.a[j] = l->list.a[j - 1];
            l->list.a[j - 1] = t;
        }
}

static jv *copy_list(jj_eval *E, jv *x) {
    jv *src = as_list(E, x), *l = jv_list(E->a, src->list.n);
    for (size_t i = 0; i < src->list.n; i++) jv_list_push(E->a, l, src->list.a[i]);
    return l;
}

static jv *to_int(jj_eval *E, jv *x, jv *dflt) {
    if (x->k == JV_INT) return x;
    if (x->k == JV_BOOL) return jv_int(E->a, x->b);
    if (x->k == JV_FLOAT && isfinite(x->f)) return jv_int(E->a, (long long)x->f);
    if (x->k == JV_STR) {
        jv *t = jb_strip(E->a, x, NULL, 3);
        char *s = jj_strndup(E->a, t->str.s, t->str.n), *end;
        long long v = strtoll(s, &end, 10);
        if (*s && !*end) return jv_int(E->a, v);
        double f = strtod(s, &end);
        if (*s && !*end && isfinite(f)) return jv_int(E->a, (long long)f);
    }
    return dflt ? dflt : jv_int(E->a, 0);
}

jv *jj_filter(jj_eval *E, const char *name, jv *x, jv **args, int nargs, const char **kw, jv **kwv, int nkw) {
    jj_arena *a = E->a;
#define IS(s) (!strcmp(name, s))
    if (IS("tojson")) {
        // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
        jv *asc = ARG(0, "ensure_ascii"), *ind = ARG(1, "indent"), *sep = ARG(2, "separators"), *sk = ARG(3, "sort_keys");
        const char *item_sep = NULL, *key_sep = NULL;
        if (sep && sep->k == JV_LIST && sep->list.n == 2 && sep->list.a[0]->k == JV_STR &&
            sep->list.a[1]->k == JV_STR) {
            item_sep = sep->list.a[0]->str.s;
            key_sep = sep->list.a[1]->str.s;
        }
        jj_buf b = {.limit = E->out->limit};
        jv_write_json(a, &b, x, ind && ind->k != JV_NONE ? (int)jb_int_arg(a, ind, -1, "indent") : -1, item_sep,
                      key_sep, (sk && jv_truthy(sk)) | (asc && jv_truthy(asc)) << 1, 0);
        return buf_str(a, &b);
    }
    if (IS("safe") || (IS("list") && x->k == JV_LIST)) return x;
    if (IS("list")) return copy_list(E, x);
    if (IS("string")) return jv_to_str(a, x);
    if (IS("trim")) return jb_strip(a, need_str(E, x, name), ARG(0, "chars"), 3);
    if (IS("upper")) return jb_case(a, need_str(E, x, name), 1);
    if (IS("lower")) return jb_case(a, need_str(E, x, name), 0);
    if (IS("title")) return jb_case(a, need_str(E, x, name), 2);
    if (IS("capitalize")) return jb_case(a, need_str(E, x, name), 3);
    if (IS("replace")) {
        jv *s = jv_to_str(a, x), *o = ARG(0, "old"), *n = ARG(1, "new");
        if (!o || !n) jj_fail(a, "replace needs two arguments");
        return jb_replace(a, s, o, n, jb_int_arg(a, ARG(2, "count"), -1, "count"));
    }
    if (IS("length") || IS("count")) {
        if (x->k == JV_STR) return jv_int(a, (long long)jv_utf8_len(x->str.s, x->str.n));
        if (x->k == JV_LIST) return jv_int(a, (long long)x->list.n);
        if (x->k == JV_DICT) return jv_int(a, (long long)x->dict.n);
        if (x->k == JV_UNDEF) return jv_int(a, 0);
        jj_fail(a, "object of type '%s' has no len()", jv_kind_name(x));
    }
    if (IS("default") || IS("d")) {
        jv *dv = ARG(0, "default_value"), *boolean = ARG(1, "boolean");
        int use = x->k == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(x));
        return use ? (dv ? dv : jv_strn(a, "", 0)) : x;
    }
    if (IS("first") || IS("last")) {
        jv *l = as_list(E, x);
        if (!l->list.n) return &jv_undef;
        return l->list.a[IS("first") ? 0 : l->list.n - 1];
    }
    if (IS("join")) {
        jv *l = as_list(E, x), *sep = ARG(0, "d"), *attr = ARG(1, "attribute");
        jj_buf b = {.limit = E->out->limit};
        for (size_t i = 0; i < l->list.n; i++) {
            if (i && sep) jv_write_str(a, &b, sep);
            jv_write_str(a, &b, attr ? attr_path(E, l->list.a[i], attr) : l->list.a[i]);
        }
        return buf_str(a, &b);
    }
    if (IS("items")) {
        if (x->k == JV_UNDEF) return jv_list(a, 0);
        if (x->k != JV_DICT) jj_fail(a, "filter 'items' needs a mapping, not %s", jv_kind_name(x));
        jv *l = jv_list(a, x->dict.n);
        for (size_t i = 0; i < x->dict.n; i++) {
            jv *t = jv_list(a, 2);
            t->tuple = 1;
            jv_list_push(a, t, x->dict.keys[i]);
            jv_list_push(a, t, x->dict.vals[i]);
            jv_list_push(a, l, t);
        }
        return l;
    }
    if (IS("dictsort")) {
        jv *items = jj_filter(E, "items", x, NULL, 0, NULL, NULL, 0);
        jv *by = ARG(1, "by");
        jv *idx = jv_int(a, by && by->k == JV_STR && by->str.n == 5 && !memcmp(by->str.s, "value", 5));
        jv *cs = ARG(0, "case_sensitive"), *rev = ARG(2, "reverse");
        sort_list(E, items, idx, rev && jv_truthy(rev), cs && jv_truthy(cs));
        return items;
    }
    if (IS("sort")) {
        jv *l = copy_list(E, x), *rev = ARG(0, "reverse"), *cs = ARG(1, "case_sensitive"), *attr = ARG(2, "attribute");
        sort_list(E, l, attr, rev && jv_truthy(rev), cs && jv_truthy(cs));
        return l;
    }
    if (IS("reverse")) {
        if (x->k == JV_STR) {
            jv *chars = as_list(E, x);
            jj_buf b = {0};
            for (size_t i = chars->list.n; i > 0; i--) jv_write_str(a, &b, chars->list.a[i - 1]);
            return buf_str(a, &b);
        }
        jv *src = as_list(E, x), *l = jv_list(a, src->list.n);
        for (size_t i = src->list.n; i > 0; i--) jv_list_push(a, l, src->list.a[i - 1]);
        return l;
    }
    if (IS("unique")) {
        jv *src = as_list(E, x), *l = jv_list(a, 0);
        for (size_t i = 0; i < src->list.n; i++) {
            int seen = 0;
            for (size_t k = 0; k < l->list.n && !seen; k++) seen = jv_equal(l->list.a[k], src->list.a[i]);
            if (!seen) jv_list_push(a, l, src->list.a[i]);
        }
        return l;
    }
    if (IS("map") || IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr")) {
        jv *src = as_list(E, x), *l = jv_list(a, 0);
        const int is_map = IS("map"), by_attr = IS("selectattr") || IS("rejectattr");
        const int want = IS("select") || IS("selectattr");
        jv *attr = is_map ? ARG(-1, "attribute") : by_attr ? ARG(0, NULL) : NULL;
        const int first_arg = by_attr ? 1 : 0; // the filter / test name
        jv *fname = first_arg < nargs ? args[first_arg] : NULL;
        if (fname && fname->k != JV_STR) jj_fail(a, "filter '%s': the name must be a string", name);
        char fn[48] = "";
        if (fname) snprintf(fn, sizeof fn, "%.*s", (int)fname->str.n, fname->str.s);
        const int rest = nargs - first_arg - 1 > 0 ? nargs - first_arg - 1 : 0;
        for (size_t i = 0; i < src->list.n; i++) {
            jv *item = src->list.a[i], *v = item;
            if (is_map) {
                if (attr) {
                    v = attr_path(E, item, attr);
                    jv *dflt = ARG(-1, "default");
                    if (v->k == JV_UNDEF && dflt) v = dflt;
                } else if (fname) v = jj_filter(E, fn, item, args + 1, rest, NULL, NULL, 0);
                jv_list_push(a, l, v);
                continue;
            }
            if (by_attr) {
                if (!attr) jj_fail(a, "filter '%s' needs an attribute name", name);
                v = attr_path(E, item, attr);
            }
            int ok = fname ? jj_test(E, fn, v, args + first_arg + 1, rest) : jv_truthy(v);
            if (ok == want) jv_list_push(a, l, item);
        }
        return l;
    }
    if (IS("int")) return to_int(E, x, ARG(0, "default"));
    if (IS("float")) {
        if (x->k == JV_FLOAT) return x;
        if (x->k == JV_INT || x->k == JV_BOOL) return jv_float(a, x->k == JV_INT ? (double)x->i : x->b);
        if (x->k == JV_STR) {
            char *s = jj_strndup(a, x->str.s, x->str.n), *end;
            double f = strtod(s, &end);
            if (*s && !*end) return jv_float(a, f);
        }
        jv *d = ARG(0, "default");
        return d ? d : jv_float(a, 0);
    }
    if (IS("abs")) {
        if (x->k == JV_FLOAT) return jv_float(a, fabs(x->f));
        if (x->k == JV_INT) return x->i == LLONG_MIN ? (jj_fail(a, "integer overflow"), x) : jv_int(a, llabs(x->i));
        jj_fail(a, "bad operand type for abs(): '%s'", jv_kind_name(x));
    }
    if (IS("sum")) {
        jv *l = as_list(E, x), *attr = ARG(0, "attribute"), *acc = ARG(1, "start");
        if (!acc) acc = jv_int(a, 0);
        for (size_t i = 0; i < l->list.n; i++) {
            jv *v = attr ? attr_path(E, l->list.a[i], attr) : l->list.a[i];
            if (acc->k == JV_INT && v->k == JV_INT) {
                long long r;
                if (__builtin_add_overflow(acc->i, v->i, &r)) jj_fail(a, "integer overflow");
                acc = jv_int(a, r);
            } else if ((acc->k == JV_INT || acc->k == JV_FLOAT) && (v->k == JV_INT || v->k == JV_FLOAT)) {
                acc = jv_float(a, (acc->k == JV_INT ? (double)acc->i : acc->f) + (v->k == JV_INT ? (double)v->i : v->f));
            } else jj_fail(a, "sum: unsupported operand types");
        }
        return acc;
    }
    if (IS("min") || IS("max")) {
        jv *l = as_list(E, x), *best = NULL;
        for (size_t i = 0; i < l->list.n; i++) {
            jv *v = l->list.a[i];
            if (!best) best = v;
            else {
                jv *p = v->k == JV_STR ? jb_case(a, v, 0) : v, *q = best->k == JV_STR ? jb_case(a, best, 0) : best;
                int c = jv_compare(a, p, q);
                if (IS("min") ? c < 0 : c > 0) best = v;
            }
        }
        return best ? best : &jv_undef;
    }
    if (IS("round")) {
        int prec = (int)jb_int_arg(a, ARG(0, "precision"), 0, "precision");
        jv *m = ARG(1, "method");
        double f = x->k == JV_FLOAT ? x->f : x->k == JV_INT ? (double)x->i : 0, p = pow(10, prec), r = f * p;
        const char *how = m && m->k == JV_STR ? m->str.s : "common";
        r = !strcmp(how, "floor") ? floor(r) : !strcmp(how, "ceil") ? ceil(r) : round(r);
        return jv_float(a, r / p);
    }
    if (IS("indent")) {
        jv *s = jv_to_str(a, x), *w = ARG(0, "width"), *first = ARG(1, "first"), *blank = ARG(2, "blank");
        jj_buf ind = {0}, b = {.limit = E->out->limit};
        if (w && w->k == JV_STR) jj_put(a, &ind, w->str.s, w->str.n);
        else
            for (long long i = jb_int_arg(a, w, 4, "width"); i > 0 && i < 1000; i--) jj_put(a, &ind, " ", 1);
        jv *lines = jj_filter(E, "__lines", s, NULL, 0, NULL, NULL, 0);
        for (size_t i = 0; i < lines->list.n; i++) {
            jv *ln = lines->list.a[i];
            if (i) jj_put(a, &b, "\n", 1);
            if ((i > 0 || (first && jv_truthy(first))) && (ln->str.n || (blank && jv_truthy(blank))))
                jj_put(a, &b, ind.p, ind.n);
            jj_put(a, &b, ln->str.s, ln->str.n);
        }
        return buf_str(a, &b);
    }
    if (IS("__lines")) { // str.splitlines() of s + "\n" (the quirk Jinja's indent relies on)
        jv *l = jv_list(a, 0);
        size_t st = 0;
        for (size_t i = 0; i < x->str.n; i++)
            if (x->str.s[i] == '\n') {
                jv_list_push(a, l, jv_strn(a, x->str.s + st, i - st));
                st = i + 1;
            }
        jv_list_push(a, l, jv_strn(a, x->str.s + st, x->str.n - st));
        return l;
    }
    if (IS("escape") || IS("e") || IS("forceescape")) {
        jv *s = jv_to_str(a, x);
        jj_buf b = {0};
        for (size_t i = 0; i < s->str.n; i++) {
            char c = s->str.s[i];
            const char *r = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;"
                          : c == '\'' ? "&#39;" : NULL;
            if (r) jj_puts(a, &b, r);
            else jj_put(a, &b, &c, 1);
        }
        return buf_str(a, &b);
    }
    if (IS("wordcount")) {
        jv *w = jj_call_builtin(E, jj_method(a, jv_to_str(a, x), "split", 5), NULL, 0, NULL, NULL, 0);
        return jv_int(a, (long long)w->list.n);
    }
    if (IS("center")) {
        jv *s = jv_to_str(a, x);
        long long width = jb_int_arg(a, ARG(0, "width"), 80, "width"), len = (long long)jv_utf8_len(s->str.s, s->str.n);
        if (width > 100000) jj_fail(a, "center: width too large");
        long long pad = width - len, left = pad / 2 + (pad & width & 1);
        jj_buf b = {0};
        for (long long i = 0; i < left; i++) jj_put(a, &b, " ", 1);
        jj_put(a, &b, s->str.s, s->str.n);
        for (long long i = left; i < pad; i++) jj_put(a, &b, " ", 1);
        return buf_str(a, &b);
    }
    if (IS("attr")) {
        jv *n = ARG(0, NULL);
        if (!n || n->k != JV_STR) jj_fail(a, "attr needs a name");
        return jj_getattr(E, x, n->str.s, n->str.n);
    }
    jj_fail(a, "unknown filter '%s'", name);
#undef IS
}

int jj_test(jj_eval *E, const char *name, jv *x, jv **args, int nargs) {
    jj_arena *a = E->a;
    jv *y = nargs > 0 ? args[0] : NULL;
#define IS(s) (!strcmp(name, s))
    if (IS("defined")) return x->k != JV_UNDEF;
    if (IS("undefined")) return x->k == JV_UNDEF;
    if (IS("none")) return x->k == JV_NONE;
    if (IS("boolean")) return x->k == JV_BOOL;
    if (IS("true")) return x->k == JV_BOOL && x->b;
    if (IS("false")) return x->k == JV_BOOL && !x->b;
    if (IS("integer")) return x->k == JV_INT;
    if (IS("float")) return x->k == JV_FLOAT;
    if (IS("number")) return x->k == JV_INT || x->k == JV_FLOAT || x->k == JV_BOOL;
    if (IS("string")) return x->k == JV_STR;
    if (IS("mapping")) return x->k == JV_DICT && !x->ns;
    // Python: str, list, dict (and Jinja's Undefined) are iterable and have len + getitem
    if (IS("iterable") || IS("sequence")) return x->k == JV_STR || x->k == JV_LIST || x->k == JV_DICT || x->k == JV_UNDEF;
    if (IS("callable")) return x->k == JV_MACRO || x->k == JV_FUNC;
    if (IS("lower") || IS("upper")) {
        if (x->k != JV_STR) return 0;
        jv *m = jb_case(a, x, IS("upper"));
        int cased = 0;
        for (size_t i = 0; i < x->str.n; i++) cased |= ((x->str.s[i] | 32) >= 'a' && (x->str.s[i] | 32) <= 'z');
        return cased && jv_equal(m, x);
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) {
        if (x->k != JV_INT && x->k != JV_BOOL) jj_fail(a, "test '%s' needs an integer", name);
        long long v = x->k == JV_INT ? x->i : x->b;
        if (IS("divisibleby")) {
            long long d = jb_int_arg(a, y, 0, "divisibleby");
            if (d == 0) jj_fail(a, "integer division or modulo by zero");
            return d == -1 || v % d == 0;
        }
        return (v % 2 != 0) == IS("odd");
    }
    if (!y && !IS("sameas")) jj_fail(a, "test '%s' needs an argument", name);
    if (IS("sameas")) return y && (x == y || (x->k == y->k && (x->k == JV_NONE || x->k == JV_UNDEF ||
                                                                 (x->k == JV_BOOL && x->b == y->b))));
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(x, y);
    if (IS("ne") || IS("!=")) return !jv_equal(x, y);
    if (IS("lt") || IS("lessthan") || IS("<")) return jv_compare(a, x, y) < 0;
    if (IS("le") || IS("<=")) return jv_compare(a, x, y) <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return jv_compare(a, x, y) > 0;
    if (IS("ge") || IS(">=")) return jv_compare(a, x, y) >= 0;
    if (IS("in")) {
        if (y->k == JV_STR && x->k == JV_STR)
            return x->str.n == 0 || (y->str.n >= x->str.n && memmem(y->str.s, y->str.n, x->str.s, x->str.n));
        jv *l = as_list(E, y);
        for (size_t i = 0; i < l->list.n; i++)
            if (jv_equal(x, l->list.a[i])) return 1;
        return 0;
    }
    jj_fail(a, "unknown test '%s'", name);
#undef IS
}
