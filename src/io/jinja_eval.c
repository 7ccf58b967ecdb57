// The Jinja evaluator: statements write to the current output buffer, expressions give values.
//
// Scopes follow Jinja2: a for loop's body (and a macro's) has its own scope, so a `set` inside a loop is not seen
// after it (templates use namespace() for that); `if` has none. Macros are closures over the scope they are defined
// in. Python's arithmetic: int / int is a float, // floors, % takes the divisor's sign, int overflow is an error.
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "io/jinja_internal.h"

static void step(jj_eval *E, const jnode *x) {
    E->a->line = x->line;
    if (++E->steps > E->max_steps) jj_fail(E->a, "the template takes too long to render");
}

jv *jj_lookup(jj_frame *f, const char *name, size_t n) {
    for (; f; f = f->parent) {
        jv *v = jv_dict_get(f->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static void frame_set(jj_eval *E, jj_frame *f, const char *name, size_t n, jv *v) {
    jv *d = f->vars;
    for (size_t i = 0; i < d->dict.n; i++) { // rebinding (every loop iteration) allocates nothing
        const jv *k = d->dict.keys[i];
        if (k->str.n == n && !memcmp(k->str.s, name, n)) {
            d->dict.vals[i] = v;
            return;
        }
    }
    jv_dict_set(E->a, d, jv_strn(E->a, name, n), v);
}

static jj_frame *frame_new(jj_eval *E, jj_frame *parent) {
    jj_frame *f = jj_alloc(E->a, sizeof *f);
    f->parent = parent;
    f->vars = jv_dict(E->a);
    return f;
}

// ---- arithmetic ----
static int is_intlike(const jv *v) { return v->k == JV_INT || v->k == JV_BOOL; }
static long long ival(const jv *v) { return v->k == JV_INT ? v->i : v->b; }
static int is_num(const jv *v) { return is_intlike(v) || v->k == JV_FLOAT; }
static double fval(const jv *v) { return v->k == JV_FLOAT ? v->f : (double)ival(v); }

__attribute__((noreturn)) static void bad_operands(jj_eval *E, const char *op, const jv *x, const jv *y) {
    jj_fail(E->a, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_kind_name(x), jv_kind_name(y));
}

static jv *repeat(jj_eval *E, const jv *seq, long long times) {
    if (times < 0) times = 0;
    const size_t unit = seq->k == JV_STR ? seq->str.n : seq->list.n;
    if (unit && (size_t)times > (E->out->limit ? E->out->limit : ((size_t)1 << 24)) / unit)
        jj_fail(E->a, "sequence repetition too large");
    if (seq->k == JV_STR) {
        jj_buf b = {0};
        for (long long i = 0; i < times; i++) jj_put(E->a, &b, seq->str.s, seq->str.n);
        return b.p ? jv_str_owned(E->a, b.p, b.n) : jv_strn(E->a, "", 0);
    }
    jv *l = jv_list(E->a, unit * (size_t)times);
    for (long long i = 0; i < times; i++)
        for (size_t k = 0; k < unit; k++) jv_list_push(E->a, l, seq->list.a[k]);
    return l;
}

static jv *binop(jj_eval *E, int op, jv *x, jv *y) {
    jj_arena *a = E->a;
    long long r;
    switch (op) {
    case OP_ADD:
        if (is_intlike(x) && is_intlike(y)) {
            if (__builtin_add_overflow(ival(x), ival(y), &r)) jj_fail(a, "integer overflow");
            return jv_int(a, r);
        }
        if (is_num(x) && is_num(y)) return jv_float(a, fval(x) + fval(y));
        if (x->k == JV_STR && y->k == JV_STR) {
            if (E->out->limit && x->str.n + y->str.n > E->out->limit) jj_fail(a, "a string exceeds %zu bytes", E->out->limit);
            char *s = jj_alloc(a, x->str.n + y->str.n + 1);
            memcpy(s, x->str.s, x->str.n);
            memcpy(s + x->str.n, y->str.s, y->str.n);
            return jv_str_owned(a, s, x->str.n + y->str.n);
        }
        if (x->k == JV_LIST && y->k == JV_LIST) {
            jv *l = jv_list(a, x->list.n + y->list.n);
            for (size_t i = 0; i < x->list.n; i++) jv_list_push(a, l, x->list.a[i]);
            for (size_t i = 0; i < y->list.n; i++) jv_list_push(a, l, y->list.a[i]);
            l->tuple = x->tuple;
            return l;
        }
        bad_operands(E, "+", x, y);
    case OP_SUB:
        if (is_intlike(x) && is_intlike(y)) {
            if (__builtin_sub_overflow(ival(x), ival(y), &r)) jj_fail(a, "integer overflow");
            return jv_int(a, r);
        }
        if (is_num(x) && is_num(y)) return jv_float(a, fval(x) - fval(y));
        bad_operands(E, "-", x, y);
    case OP_MUL:
        if (is_intlike(x) && is_intlike(y)) {
            if (__builtin_mul_overflow(ival(x), ival(y), &r)) jj_fail(a, "integer overflow");
            return jv_int(a, r);
        }
        if (is_num(x) && is_num(y)) return jv_float(a, fval(x) * fval(y));
        if ((x->k == JV_STR || x->k == JV_LIST) && is_intlike(y)) return repeat(E, x, ival(y));
        if ((y->k == JV_STR || y->k == JV_LIST) && is_intlike(x)) return repeat(E, y, ival(x));
        bad_operands(E, "*", x, y);
    case OP_DIV:
        if (!is_num(x) || !is_num(y)) bad_operands(E, "/", x, y);
        if (fval(y) == 0) jj_fail(a, "division by zero");
        return jv_float(a, fval(x) / fval(y));
    case OP_FLOORDIV:
    case OP_MOD:
        if (!is_num(x) || !is_num(y)) bad_operands(E, op == OP_MOD ? "%" : "//", x, y);
        if (fval(y) == 0) jj_fail(a, "integer division or modulo by zero");
        if (is_intlike(x) && is_intlike(y)) {
            long long p = ival(x), q = ival(y);
            if (p == LLONG_MIN && q == -1) jj_fail(a, "integer overflow");
            long long d = p / q, m = p % q;
            if (m != 0 && ((m < 0) != (q < 0))) d--, m += q;
            return jv_int(a, op == OP_MOD ? m : d);
        } else {
            double p = fval(x), q = fval(y), m = fmod(p, q);
            if (m != 0 && ((m < 0) != (q < 0))) m += q;
            return jv_float(a, op == OP_MOD ? m : floor(p / q));
        }
    case OP_POW:
        if (!is_num(x) || !is_num(y)) bad_operands(E, "**", x, y);
        if (is_intlike(x) && is_intlike(y) && ival(y) >= 0) {
            long long base = ival(x), e = ival(y), acc = 1;
            while (e--) {
                if (__builtin_mul_overflow(acc, base, &acc)) jj_fail(a, "integer overflow");
                if (acc == 0 || acc == 1) break;
            }
            return jv_int(a, acc);
        }
        return jv_float(a, pow(fval(x), fval(y)));
    case OP_CONCAT: {
        if (x->k == JV_STR && y->k == JV_STR && E->out->limit && x->str.n + y->str.n > E->out->limit)
            jj_fail(a, "a string exceeds %zu bytes", E->out->limit);
        jj_buf b = {.limit = E->out->limit};
        jv_write_str(a, &b, x);
        jv_write_str(a, &b, y);
        return b.p ? jv_str_owned(a, b.p, b.n) : jv_strn(a, "", 0);
    }
    case OP_EQ: return jv_bool(jv_equal(x, y));
    case OP_NE: return jv_bool(!jv_equal(x, y));
    case OP_LT: return jv_bool(jv_compare(a, x, y) < 0);
    case OP_LE: return jv_bool(jv_compare(a, x, y) <= 0);
    case OP_GT: return jv_bool(jv_compare(a, x, y) > 0);
    case OP_GE: return jv_bool(jv_compare(a, x, y) >= 0);
    case OP_IN:
    case OP_NOTIN: {
        int in = 0;
        if (y->k == JV_STR) {
            if (x->k != JV_STR) jj_fail(a, "'in <string>' requires string as left operand, not %s", jv_kind_name(x));
            in = x->str.n == 0 || (y->str.n >= x->str.n && memmem(y->str.s, y->str.n, x->str.s, x->str.n));
        } else if (y->k == JV_LIST) {
            for (size_t i = 0; i < y->list.n && !in; i++) in = jv_equal(x, y->list.a[i]);
        } else if (y->k == JV_DICT) {
            for (size_t i = 0; i < y->dict.n && !in; i++) in = jv_equal(x, y->dict.keys[i]);
        } else if (y->k != JV_UNDEF) {
            jj_fail(a, "argument of type '%s' is not iterable", jv_kind_name(y));
        }
        return jv_bool(op == OP_IN ? in : !in);
    }
    }
    jj_fail(a, "bad operator");
}

// ---- slicing (Python semantics, negative steps included; strings by code point) ----
static long long clamp_index(long long i, long long n, int step_neg, int is_start) {
    if (i < 0) i += n;
    if (step_neg) {
        if (i < -1) i = -1;
        if (i > n - 1) i = n - 1;
    } else {
        if (i < 0) i = 0;
        if (i > n) i = n;
    }
    (void)is_start;
    return i;
}

static jv *slice(jj_eval *E, jv *obj, jv *start, jv *stop, jv *stepv) {
    long long st = 1;
    if (stepv && stepv->k != JV_NONE) {
        if (!is_intlike(stepv)) jj_fail(E->a, "slice indices must be integers");
        st = ival(stepv);
        if (st == 0) jj_fail(E->a, "slice step cannot be zero");
    }
    size_t *offs = NULL; // strings: byte offset of each code point
    long long n;
    if (obj->k == JV_LIST) n = (long long)obj->list.n;
    else if (obj->k == JV_STR) {
        n = (long long)jv_utf8_len(obj->str.s, obj->str.n);
        offs = jj_alloc(E->a, (size_t)(n + 1) * sizeof *offs);
        long long c = 0;
        for (size_t i = 0; i < obj->str.n; i++)
            if (((unsigned char)obj->str.s[i] & 0xC0) != 0x80) offs[c++] = i;
        offs[n] = obj->str.n;
    } else jj_fail(E->a, "'%s' object is not subscriptable", jv_kind_name(obj));
    long long lo, hi;
    if (start && start->k != JV_NONE) {
        if (!is_intlike(start)) jj_fail(E->a, "slice indices must be integers");
        lo = clamp_index(ival(start), n, st < 0, 1);
    } else lo = st < 0 ? n - 1 : 0;
    if (stop && stop->k != JV_NONE) {
        if (!is_intlike(stop)) jj_fail(E->a, "slice indices must be integers");
        hi = clamp_index(ival(stop), n, st < 0, 0);
    } else hi = st < 0 ? -1 : n;
    jv *l = obj->k == JV_LIST ? jv_list(E->a, 0) : NULL;
    jj_buf b = {0};
    for (long long i = lo; st > 0 ? i < hi : i > hi; i += st) {
        if (l) jv_list_push(E->a, l, obj->list.a[i]);
        else jj_put(E->a, &b, obj->str.s + offs[i], offs[i + 1] - offs[i]);
    }
    if (l) {
        l->tuple = obj->tuple;
        return l;
    }
    return b.p ? jv_str_owned(E->a, b.p, b.n) : jv_strn(E->a, "", 0);
}

// ---- calls ----
typedef struct {
    jv *pos[16];
    int npos;
    const char *kw[16];
    jv *kwv[16];
    int nkw;
} argv_t;

static void eval_args(jj_eval *E, jj_frame *f, const jnode *args, argv_t *av) {
    av->npos = av->nkw = 0;
    for (const jnode *x = args; x; x = x->next) {
        if (x->k == E_KWARG) {
            if (av->nkw == 16) jj_fail(E->a, "too many keyword arguments");
            av->kw[av->nkw] = jj_strndup(E->a, x->s, x->n);
            av->kwv[av->nkw++] = jj_eval_expr(E, f, x->a);
        } else {
            if (av->npos == 16) jj_fail(E->a, "too many arguments");
            av->pos[av->npos++] = jj_eval_expr(E, f, x);
        }
    }
}

static jv *call_macro(jj_eval *E, jv *m, jv **args, int nargs, const char **kw, jv **kwv, int nkw) {
    const jnode *def = m->macro.node;
    if (E->depth >= 64) jj_fail(E->a, "macro calls nest too deeply");
    jj_frame *f = frame_new(E, m->macro.closure);
    int i = 0;
    for (const jnode *p = def->b; p; p = p->next, i++) {
        jv *v = i < nargs ? args[i] : NULL;
        for (int k = 0; k < nkw; k++)
            if (strlen(kw[k]) == p->n && !memcmp(kw[k], p->s, p->n)) v = kwv[k];
        if (!v) v = p->a ? jj_eval_expr(E, f, p->a) : &jv_undef;
        frame_set(E, f, p->s, p->n, v);
    }
    if (nargs > i) jj_fail(E->a, "macro '%.*s' takes %d arguments, %d given", (int)def->n, def->s, i, nargs);
    for (int k = 0; k < nkw; k++) {
        int found = 0;
        for (const jnode *p = def->b; p; p = p->next) found |= strlen(kw[k]) == p->n && !memcmp(kw[k], p->s, p->n);
        if (!found) jj_fail(E->a, "macro '%.*s' takes no keyword argument '%s'", (int)def->n, def->s, kw[k]);
    }
    jj_buf out = {.limit = E->out->limit}, *saved = E->out;
    E->out = &out;
    E->depth++;
    jj_exec(E, f, def->c);
    E->depth--;
    E->control = 0;
    E->out = saved;
    return out.p ? jv_str_owned(E->a, out.p, out.n) : jv_strn(E->a, "", 0);
}

jv *jj_call(jj_eval *E, jv *fn, jv **args, int nargs, const char **kw, jv **kwv, int nkw) {
    if (fn->k == JV_MACRO) return call_macro(E, fn, args, nargs, kw, kwv, nkw);
    if (fn->k == JV_FUNC) return jj_call_builtin(E, fn, args, nargs, kw, kwv, nkw);
    jj_fail(E->a, "'%s' object is not callable", jv_kind_name(fn));
}

// ---- expressions ----
// A call, filter or test node (x->a applied to the arguments x->b): evaluates x->a, then the arguments into *av,
// and points the errors that follow at x's line; returns x->a's value.
static jv *eval_applied(jj_eval *E, jj_frame *f, const jnode *x, argv_t *av) {
    jv *v = jj_eval_expr(E, f, x->a);
    eval_args(E, f, x->b, av);
    E->a->line = x->line;
    return v;
}

jv *jj_eval_expr(jj_eval *E, jj_frame *f, const jnode *x) {
    step(E, x);
    jj_arena *a = E->a;
    switch (x->k) {
    case E_LIT: return x->v;
    case E_NAME: {
        jv *v = jj_lookup(f, x->s, x->n);
        if (!v) v = jj_global(a, x->s, x->n);
        return v ? v : &jv_undef;
    }
    case E_ATTR: {
        jv *obj = jj_eval_expr(E, f, x->a);
        a->line = x->line;
        return jj_getattr(E, obj, x->s, x->n);
    }
    case E_INDEX: {
        jv *obj = jj_eval_expr(E, f, x->a), *key = jj_eval_expr(E, f, x->b);
        a->line = x->line;
        return jj_getitem(E, obj, key);
    }
    case E_SLICE: {
        jv *obj = jj_eval_expr(E, f, x->a);
        jv *lo = x->b ? jj_eval_expr(E, f, x->b) : NULL, *hi = x->c ? jj_eval_expr(E, f, x->c) : NULL;
        jv *st = x->d ? jj_eval_expr(E, f, x->d) : NULL;
        return slice(E, obj, lo, hi, st);
    }
    case E_CALL: {
        argv_t av;
        jv *fn = eval_applied(E, f, x, &av);
        if (fn->k == JV_UNDEF) jj_fail(a, "'%.*s' is undefined", x->a->k == E_NAME || x->a->k == E_ATTR ? (int)x->a->n : 0,
                                       x->a->s ? x->a->s : "");
        return jj_call(E, fn, av.pos, av.npos, av.kw, av.kwv, av.nkw);
    }
    case E_FILTER: {
        argv_t av;
        jv *v = eval_applied(E, f, x, &av);
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)x->n, x->s);
        return jj_filter(E, name, v, av.pos, av.npos, av.kw, av.kwv, av.nkw);
    }
    case E_TEST: {
        argv_t av;
        jv *v = eval_applied(E, f, x, &av);
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)x->n, x->s);
        int r = jj_test(E, name, v, av.pos, av.npos);
        return jv_bool(x->op ? !r : r);
    }
    case E_UNARY: {
        jv *v = jj_eval_expr(E, f, x->a);
        if (x->op == '!') return jv_bool(!jv_truthy(v));
        if (!is_num(v)) jj_fail(a, "bad operand type for unary %c: '%s'", x->op, jv_kind_name(v));
        if (x->op == '+') return v->k == JV_BOOL ? jv_int(a, v->b) : v;
        if (v->k == JV_FLOAT) return jv_float(a, -v->f);
        if (ival(v) == LLONG_MIN) jj_fail(a, "integer overflow");
        return jv_int(a, -ival(v));
    }
    case E_BIN: {
        jv *l = jj_eval_expr(E, f, x->a), *r = jj_eval_expr(E, f, x->b);
        a->line = x->line;
        return binop(E, x->op, l, r);
    }
    case E_AND: {
        jv *l = jj_eval_expr(E, f, x->a);
        return jv_truthy(l) ? jj_eval_expr(E, f, x->b) : l;
    }
    case E_OR: {
        jv *l = jj_eval_expr(E, f, x->a);
        return jv_truthy(l) ? l : jj_eval_expr(E, f, x->b);
    }
    case E_COND:
        if (jv_truthy(jj_eval_expr(E, f, x->b))) return jj_eval_expr(E, f, x->a);
        return x->c ? jj_eval_expr(E, f, x->c) : &jv_undef;
    case E_LIST:
    case E_TUPLE: {
        jv *l = jv_list(a, 0);
        for (const jnode *y = x->b; y; y = y->next) jv_list_push(a, l, jj_eval_expr(E, f, y));
        l->tuple = x->k == E_TUPLE;
        return l;
    }
    case E_DICT: {
        jv *d = jv_dict(a);
        for (const jnode *p = x->b; p; p = p->next) {
            jv *k = jj_eval_expr(E, f, p->a);
            if (k->k == JV_LIST || k->k == JV_DICT) jj_fail(a, "unhashable type: '%s'", jv_kind_name(k));
            jv_dict_set(a, d, k, jj_eval_expr(E, f, p->b));
        }
        return d;
    }
    default: jj_fail(a, "not an expression");
    }
}

// ---- statements ----
static void assign(jj_eval *E, jj_frame *f, const jnode *target, jv *v) {
    if (target->k == E_NAME) return frame_set(E, f, target->s, target->n, v);
    if (target->k == E_ATTR) {
        jv *obj = jj_lookup(f, target->a->s, target->a->n);
        if (!obj || obj->k != JV_DICT || !obj->ns) jj_fail(E->a, "cannot assign attribute on non-namespace object");
        jv_dict_set(E->a, obj, jv_strn(E->a, target->s, target->n), v);
        return;
    }
    // a tuple of targets
    size_t n = 0;
    for (const jnode *t = target->b; t; t = t->next) n++;
    if (v->k != JV_LIST) jj_fail(E->a, "cannot unpack non-iterable %s object", jv_kind_name(v));
    if (v->list.n != n) jj_fail(E->a, "cannot unpack %zu values into %zu names", v->list.n, n);
    size_t i = 0;
    for (const jnode *t = target->b; t; t = t->next) assign(E, f, t, v->list.a[i++]);
}

// The items a for loop walks: a list's items, a dict's keys, a string's characters.
static jv *iter_items(jj_eval *E, jv *v) {
    if (v->k == JV_LIST) return v;
    jv *l = jv_list(E->a, 0);
    if (v->k == JV_DICT)
        for (size_t i = 0; i < v->dict.n; i++) jv_list_push(E->a, l, v->dict.keys[i]);
    else if (v->k == JV_STR) {
        for (size_t i = 0; i < v->str.n;) {
            size_t k = i + 1;
            while (k < v->str.n && ((unsigned char)v->str.s[k] & 0xC0) == 0x80) k++;
            jv_list_push(E->a, l, jv_strn(E->a, v->str.s + i, k - i));
            i = k;
        }
    } else if (v->k != JV_UNDEF)
        jj_fail(E->a, "'%s' object is not iterable", jv_kind_name(v));
    return l;
}

// `loop` is one object per for statement, updated in place each iteration (so a loop allocates nothing per item).
static const char *const LOOP_KEYS[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                        "previtem", "nextitem", "depth", "depth0"};
enum { N_LOOP_KEYS = sizeof LOOP_KEYS / sizeof LOOP_KEYS[0] };

static jv *loop_new(jj_eval *E) {
    jv *loop = jv_dict(E->a);
    for (size_t j = 0; j < N_LOOP_KEYS; j++)
        jv_dict_set(E->a, loop, jv_strn(E->a, LOOP_KEYS[j], strlen(LOOP_KEYS[j])), &jv_undef);
    return loop;
}

static void loop_update(jj_eval *E, jv *loop, jv *items, size_t i) {
    jj_arena *a = E->a;
    const long long n = (long long)items->list.n, k = (long long)i;
    jv *vals[N_LOOP_KEYS] = {jv_int(a, k + 1),  jv_int(a, k),    jv_int(a, n - k), jv_int(a, n - k - 1),
                             jv_bool(k == 0),   jv_bool(k == n - 1), jv_int(a, n),
                             k > 0 ? items->list.a[i - 1] : &jv_undef, k + 1 < n ? items->list.a[i + 1] : &jv_undef,
                             jv_int(a, 1), jv_int(a, 0)};
    memcpy(loop->dict.vals, vals, sizeof vals);
}

static void exec_for(jj_eval *E, jj_frame *f, const jnode *x) {
    jv *items = iter_items(E, jj_eval_expr(E, f, x->b));
    jj_frame *lf = frame_new(E, f);
    if (x->e) { // `for x in xs if cond`: filtered before the loop, so loop.* counts the kept items
        jv *kept = jv_list(E->a, 0);
        for (size_t i = 0; i < items->list.n; i++) {
            assign(E, lf, x->a, items->list.a[i]);
            if (jv_truthy(jj_eval_expr(E, lf, x->e))) jv_list_push(E->a, kept, items->list.a[i]);
        }
        items = kept;
    }
    jv *loop = loop_new(E);
    frame_set(E, lf, "loop", 4, loop);
    for (size_t i = 0; i < items->list.n; i++) {
        assign(E, lf, x->a, items->list.a[i]);
        loop_update(E, loop, items, i);
        jj_exec(E, lf, x->c);
        const int c = E->control;
        E->control = 0;
        if (c == 1) break;
    }
    if (items->list.n == 0 && x->d) jj_exec(E, f, x->d);
}

static jv *render_body(jj_eval *E, jj_frame *f, const jnode *body) {
    jj_buf out = {.limit = E->out->limit}, *saved = E->out;
    E->out = &out;
    jj_exec(E, f, body);
    E->out = saved;
    return out.p ? jv_str_owned(E->a, out.p, out.n) : jv_strn(E->a, "", 0);
}

void jj_exec(jj_eval *E, jj_frame *f, const jnode *body) {
    for (const jnode *x = body; x && !E->control; x = x->next) {
        step(E, x);
        switch (x->k) {
        case N_TEXT: jj_put(E->a, E->out, x->s, x->n); break;
        case N_OUT: jv_write_str(E->a, E->out, jj_eval_expr(E, f, x->a)); break;
        case N_IF: jj_exec(E, f, jv_truthy(jj_eval_expr(E, f, x->a)) ? x->b : x->c); break;
        case N_FOR: exec_for(E, f, x); break;
        case N_SET: assign(E, f, x->a, jj_eval_expr(E, f, x->b)); break;
        case N_SETBLOCK: assign(E, f, x->a, render_body(E, f, x->c)); break;
        case N_MACRO: {
            jv *m = jj_alloc(E->a, sizeof *m);
            m->k = JV_MACRO;
            m->macro.node = x;
            m->macro.closure = f;
            frame_set(E, f, x->s, x->n, m);
            break;
        }
        case N_FILTERBLOCK: {
            jv *text = render_body(E, f, x->c);
            argv_t av;
            eval_args(E, f, x->a->b, &av);
            char name[48];
            snprintf(name, sizeof name, "%.*s", (int)x->a->n, x->a->s);
            jv_write_str(E->a, E->out, jj_filter(E, name, text, av.pos, av.npos, av.kw, av.kwv, av.nkw));
            break;
        }
        case N_BREAK: E->control = 1; break;
        case N_CONTINUE: E->control = 2; break;
        default: jj_fail(E->a, "not a statement");
        }
    }
}
