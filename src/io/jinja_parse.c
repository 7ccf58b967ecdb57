// The Jinja parser: tokens -> AST, with Jinja2's grammar and operator precedence (lowest first):
//   a if c else b  |  or  |  and  |  not  |  == != < <= > >= in, not in  |  + -  |  ~  |  * / // %  |  **  |
//   unary - +  |  postfix . [] ()  |  filters (x|f) and tests (x is t), which bind tighter than any operator.
#include <stdio.h>
#include <string.h>

#include "io/jinja_internal.h"

typedef struct {
    jj_arena *a;
    const jj_tok *t;
    size_t i;
    int depth;
} parser;

static const jj_tok *peek(parser *P) { return &P->t[P->i]; }
static const jj_tok *peek2(parser *P) { return P->t[P->i].k == TK_EOF ? &P->t[P->i] : &P->t[P->i + 1]; }
static const jj_tok *next(parser *P) {
    const jj_tok *t = &P->t[P->i];
    P->a->line = t->line;
    if (t->k != TK_EOF) P->i++;
    return t;
}
static int tok_is(const jj_tok *t, jj_tok_kind k, const char *s) {
    return t->k == k && (!s || (t->n == strlen(s) && !memcmp(t->s, s, t->n)));
}
static int is_op(parser *P, const char *s) { return tok_is(peek(P), TK_OP, s); }
static int is_name(parser *P, const char *s) { return tok_is(peek(P), TK_NAME, s); }
static int accept_op(parser *P, const char *s) { return is_op(P, s) ? (next(P), 1) : 0; }
static int accept_name(parser *P, const char *s) { return is_name(P, s) ? (next(P), 1) : 0; }

static const char *tok_desc(const jj_tok *t) {
    switch (t->k) {
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "'}}'";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "'%}'";
    case TK_STRING: return "a string";
    case TK_INT:
    case TK_FLOAT: return "a number";
    default: return t->k == TK_NAME ? "a name" : "an operator";
    }
}

__attribute__((noreturn)) static void unexpected(parser *P, const char *want) {
    const jj_tok *t = peek(P);
    P->a->line = t->line;
    if (t->k == TK_NAME || t->k == TK_OP)
        jj_fail(P->a, "expected %s, got '%.*s'", want, (int)(t->n > 40 ? 40 : t->n), t->s);
    jj_fail(P->a, "expected %s, got %s", want, tok_desc(t));
}
static void expect_op(parser *P, const char *s) {
    if (!accept_op(P, s)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", s);
        unexpected(P, w);
    }
}
static void expect_kind(parser *P, jj_tok_kind k, const char *want) {
    if (peek(P)->k != k) unexpected(P, want);
    next(P);
}
static const jj_tok *expect_name(parser *P) {
    if (peek(P)->k != TK_NAME) unexpected(P, "a name");
    return next(P);
}

static jnode *node(parser *P, jn_kind k) {
    jnode *x = jj_alloc(P->a, sizeof *x);
    x->k = k;
    x->line = peek(P)->line;
    return x;
}
static jnode *node2(parser *P, jn_kind k, int op, jnode *a, jnode *b) {
    jnode *x = node(P, k);
    x->op = op;
    x->a = a;
    x->b = b;
    return x;
}

static void enter(parser *P) {
    if (++P->depth > 200) jj_fail(P->a, "the template nests too deeply");
}

static jnode *parse_expr(parser *P);
static jnode *parse_or(parser *P);
static jnode *parse_unary(parser *P, int with_filter);

// (a, b=1, ...): positional and keyword arguments, as one list (E_KWARG for keywords)
static jnode *parse_args(parser *P) {
    jnode *head = NULL, **tail = &head;
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        jnode *arg;
        if (peek(P)->k == TK_NAME && tok_is(peek2(P), TK_OP, "=")) {
            const jj_tok *nt = next(P);
            next(P);
            arg = node(P, E_KWARG);
            arg->s = nt->s;
            arg->n = nt->n;
            arg->a = parse_expr(P);
        } else {
            arg = parse_expr(P);
        }
        *tail = arg;
        tail = &arg->next;
        if (!accept_op(P, ",")) break;
    }
    expect_op(P, ")");
    return head;
}

static jnode *parse_primary(parser *P) {
    enter(P);
    const jj_tok *t = peek(P);
    jnode *x;
    if (t->k == TK_NAME) {
        next(P);
        x = node(P, E_LIT);
        if (tok_is(t, TK_NAME, "true") || tok_is(t, TK_NAME, "True")) x->v = &jv_true;
        else if (tok_is(t, TK_NAME, "false") || tok_is(t, TK_NAME, "False")) x->v = &jv_false;
        else if (tok_is(t, TK_NAME, "none") || tok_is(t, TK_NAME, "None")) x->v = &jv_none;
        else {
            x->k = E_NAME;
            x->s = t->s;
            x->n = t->n;
        }
    } else if (t->k == TK_STRING) {
        jj_buf b = {0};
        while (peek(P)->k == TK_STRING) { // adjacent literals concatenate, as in Python
            const jj_tok *s = next(P);
            jj_put(P->a, &b, s->s, s->n);
        }
        x = node(P, E_LIT);
        x->v = b.p ? jv_str_owned(P->a, b.p, b.n) : jv_strn(P->a, "", 0);
    } else if (t->k == TK_INT || t->k == TK_FLOAT) {
        next(P);
        x = node(P, E_LIT);
        x->v = t->k == TK_INT ? jv_int(P->a, t->i) : jv_float(P->a, t->f);
    } else if (tok_is(t, TK_OP, "(")) {
        next(P);
        if (accept_op(P, ")")) {
            x = node(P, E_TUPLE);
        } else {
            x = parse_expr(P);
            if (is_op(P, ",")) {
                jnode *tu = node(P, E_TUPLE), **tail = &tu->b;
                *tail = x;
                tail = &x->next;
                while (accept_op(P, ",") && !is_op(P, ")")) {
                    jnode *y = parse_expr(P);
                    *tail = y;
                    tail = &y->next;
                }
                x = tu;
            }
            expect_op(P, ")");
        }
    } else if (tok_is(t, TK_OP, "[")) {
        next(P);
        x = node(P, E_LIST);
        jnode **tail = &x->b;
        while (!is_op(P, "]")) {
            jnode *y = parse_expr(P);
            *tail = y;
            tail = &y->next;
            if (!accept_op(P, ",")) break;
        }
        expect_op(P, "]");
    } else if (tok_is(t, TK_OP, "{")) {
        next(P);
        x = node(P, E_DICT);
        jnode **tail = &x->b;
        while (!is_op(P, "}")) {
            jnode *pair = node(P, E_PAIR);
            pair->a = parse_expr(P);
            expect_op(P, ":");
            pair->b = parse_expr(P);
            *tail = pair;
            tail = &pair->next;
            if (!accept_op(P, ",")) break;
        }
        expect_op(P, "}");
    } else {
        unexpected(P, "an expression");
    }
    P->depth--;
    return x;
}

static jnode *parse_postfix(parser *P, jnode *x) {
    for (;;) {
        if (accept_op(P, ".")) {
            const jj_tok *t = peek(P);
            if (t->k == TK_INT) { // foo.0 is foo[0]
                next(P);
                jnode *idx = node(P, E_LIT);
                idx->v = jv_int(P->a, t->i);
                x = node2(P, E_INDEX, 0, x, idx);
                continue;
            }
            t = expect_name(P);
            jnode *y = node2(P, E_ATTR, 0, x, NULL);
            y->s = t->s;
            y->n = t->n;
            x = y;
        } else if (accept_op(P, "[")) {
            jnode *start = NULL, *stop = NULL, *step = NULL;
            if (!is_op(P, ":")) start = parse_expr(P);
            if (accept_op(P, ":")) {
                if (!is_op(P, ":") && !is_op(P, "]")) stop = parse_expr(P);
                if (accept_op(P, ":") && !is_op(P, "]")) step = parse_expr(P);
                jnode *y = node2(P, E_SLICE, 0, x, start);
                y->c = stop;
                y->d = step;
                x = y;
            } else {
                x = node2(P, E_INDEX, 0, x, start);
            }
            expect_op(P, "]");
        } else if (is_op(P, "(")) {
            x = node2(P, E_CALL, 0, x, parse_args(P));
        } else {
            return x;
        }
    }
}

static jnode *parse_filter_expr(parser *P, jnode *x) {
    for (;;) {
        if (accept_op(P, "|")) {
            const jj_tok *t = expect_name(P);
            jnode *f = node2(P, E_FILTER, 0, x, NULL);
            f->s = t->s;
            f->n = t->n;
            if (is_op(P, "(")) f->b = parse_args(P);
            x = f;
        } else if (accept_name(P, "is")) {
            jnode *f = node2(P, E_TEST, accept_name(P, "not"), x, NULL);
            const jj_tok *t = expect_name(P);
            f->s = t->s;
            f->n = t->n;
            const jj_tok *c = peek(P);
            if (tok_is(c, TK_OP, "(")) {
                f->b = parse_args(P);
            } else if ((c->k == TK_NAME || c->k == TK_STRING || c->k == TK_INT || c->k == TK_FLOAT ||
                        tok_is(c, TK_OP, "[") || tok_is(c, TK_OP, "{")) &&
                       !tok_is(c, TK_NAME, "else") && !tok_is(c, TK_NAME, "or") && !tok_is(c, TK_NAME, "and")) {
                if (tok_is(c, TK_NAME, "is")) jj_fail(P->a, "You cannot chain multiple tests with is");
                f->b = parse_postfix(P, parse_primary(P));
            }
            x = f;
        } else if (is_op(P, "(")) {
            x = node2(P, E_CALL, 0, x, parse_args(P));
        } else {
            return x;
        }
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    enter(P);
    jnode *x;
    if (accept_op(P, "-")) x = node2(P, E_UNARY, '-', parse_unary(P, 0), NULL);
    else if (accept_op(P, "+")) x = node2(P, E_UNARY, '+', parse_unary(P, 0), NULL);
    else x = parse_primary(P);
    x = parse_postfix(P, x);
    if (with_filter) x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static jnode *parse_pow(parser *P) {
    jnode *x = parse_unary(P, 1);
    while (accept_op(P, "**")) x = node2(P, E_BIN, OP_POW, x, parse_unary(P, 1));
    return x;
}
static jnode *parse_math2(parser *P) {
    jnode *x = parse_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : 0;
        if (!op) return x;
        next(P);
        x = node2(P, E_BIN, op, x, parse_pow(P));
    }
}
static jnode *parse_concat(parser *P) {
    jnode *x = parse_math2(P);
    while (accept_op(P, "~")) x = node2(P, E_BIN, OP_CONCAT, x, parse_math2(P));
    return x;
}
static jnode *parse_math1(parser *P) {
    jnode *x = parse_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? OP_ADD : is_op(P, "-") ? OP_SUB : 0;
        if (!op) return x;
        next(P);
        x = node2(P, E_BIN, op, x, parse_concat(P));
    }
}
static jnode *parse_compare(parser *P) {
    jnode *x = parse_math1(P);
    for (;;) {
        static const struct {
            const char *s;
            int op;
        } ops[] = {{"==", OP_EQ}, {"!=", OP_NE}, {"<", OP_LT}, {"<=", OP_LE}, {">", OP_GT}, {">=", OP_GE}};
        int op = 0;
        for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
            if (is_op(P, ops[i].s)) op = ops[i].op;
        if (op) next(P);
        else if (accept_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek2(P), TK_NAME, "in")) {
            next(P);
            next(P);
            op = OP_NOTIN;
        } else return x;
        x = node2(P, E_BIN, op, x, parse_math1(P));
    }
}
static jnode *parse_not(parser *P) {
    enter(P);
    jnode *x = accept_name(P, "not") ? node2(P, E_UNARY, '!', parse_not(P), NULL) : parse_compare(P);
    P->depth--;
    return x;
}
static jnode *parse_and(parser *P) {
    jnode *x = parse_not(P);
    while (accept_name(P, "and")) x = node2(P, E_AND, 0, x, parse_not(P));
    return x;
}
static jnode *parse_or(parser *P) {
    jnode *x = parse_and(P);
    while (accept_name(P, "or")) x = node2(P, E_OR, 0, x, parse_and(P));
    return x;
}
static jnode *parse_expr(parser *P) {
    enter(P);
    jnode *x = parse_or(P);
    while (accept_name(P, "if")) {
        jnode *c = node2(P, E_COND, 0, x, parse_or(P));
        if (accept_name(P, "else")) c->c = parse_expr(P);
        x = c;
    }
    P->depth--;
    return x;
}

// for / set targets: a name, ns.attr (set only), or names separated by commas (a tuple)
static jnode *parse_target(parser *P, int allow_attr) {
    jnode *first = NULL, **tail = &first;
    int n = 0;
    do {
        int paren = accept_op(P, "(");
        const jj_tok *t = expect_name(P);
        jnode *x = node(P, E_NAME);
        x->s = t->s;
        x->n = t->n;
        if (allow_attr && accept_op(P, ".")) {
            const jj_tok *at = expect_name(P);
            jnode *y = node2(P, E_ATTR, 0, x, NULL);
            y->s = at->s;
            y->n = at->n;
            x = y;
        }
        if (paren) expect_op(P, ")");
        *tail = x;
        tail = &x->next;
        n++;
    } while (accept_op(P, ","));
    if (n == 1) return first;
    jnode *tu = node(P, E_TUPLE);
    tu->b = first;
    return tu;
}

static jnode *parse_body(parser *P, const char *const *stop);

static const char *const STOP_IF[] = {"elif", "else", "endif", NULL};
static const char *const STOP_ENDIF[] = {"endif", NULL};
static const char *const STOP_FOR[] = {"else", "endfor", NULL};
static const char *const STOP_ENDFOR[] = {"endfor", NULL};

static void end_tag(parser *P, const char *name) {
    expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
    if (!accept_name(P, name)) {
        char w[40];
        snprintf(w, sizeof w, "'%s'", name);
        unexpected(P, w);
    }
    expect_kind(P, TK_BLOCK_END, "'%}'");
}

static jnode *parse_if(parser *P) { // after "if" / "elif"
    jnode *x = node(P, N_IF);
    x->a = parse_expr(P);
    expect_kind(P, TK_BLOCK_END, "'%}'");
    x->b = parse_body(P, STOP_IF);
    expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
    if (accept_name(P, "elif")) {
        x->c = parse_if(P);
        return x;
    }
    if (accept_name(P, "else")) {
        expect_kind(P, TK_BLOCK_END, "'%}'");
        x->c = parse_body(P, STOP_ENDIF);
        expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
    }
    if (!accept_name(P, "endif")) unexpected(P, "'endif'");
    expect_kind(P, TK_BLOCK_END, "'%}'");
    return x;
}

static jnode *parse_stmt(parser *P) {
    expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
    const jj_tok *t = expect_name(P);
    jnode *x;
    if (tok_is(t, TK_NAME, "if")) return parse_if(P);
    if (tok_is(t, TK_NAME, "for")) {
        x = node(P, N_FOR);
        x->a = parse_target(P, 0);
        if (!accept_name(P, "in")) unexpected(P, "'in'");
        x->b = parse_or(P);
        if (accept_name(P, "if")) x->e = parse_expr(P);
        if (is_name(P, "recursive")) jj_fail(P->a, "recursive for loops are not supported");
        expect_kind(P, TK_BLOCK_END, "'%}'");
        x->c = parse_body(P, STOP_FOR);
        expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
        if (accept_name(P, "else")) {
            expect_kind(P, TK_BLOCK_END, "'%}'");
            x->d = parse_body(P, STOP_ENDFOR);
            expect_kind(P, TK_BLOCK_BEGIN, "'{%'");
        }
        if (!accept_name(P, "endfor")) unexpected(P, "'endfor'");
        expect_kind(P, TK_BLOCK_END, "'%}'");
        return x;
    }
    if (tok_is(t, TK_NAME, "set")) {
        jnode *target = parse_target(P, 1);
        if (accept_op(P, "=")) {
            x = node2(P, N_SET, 0, target, parse_expr(P));
            if (is_op(P, ",")) { // set a, b = 1, 2
                jnode *tu = node(P, E_TUPLE), **tail = &tu->b;
                *tail = x->b;
                tail = &x->b->next;
                while (accept_op(P, ",")) {
                    jnode *y = parse_expr(P);
                    *tail = y;
                    tail = &y->next;
                }
                x->b = tu;
            }
            expect_kind(P, TK_BLOCK_END, "'%}'");
            return x;
        }
        x = node2(P, N_SETBLOCK, 0, target, NULL);
        expect_kind(P, TK_BLOCK_END, "'%}'");
        static const char *const stop[] = {"endset", NULL};
        x->c = parse_body(P, stop);
        end_tag(P, "endset");
        return x;
    }
    if (tok_is(t, TK_NAME, "macro")) {
        x = node(P, N_MACRO);
        const jj_tok *nm = expect_name(P);
        x->s = nm->s;
        x->n = nm->n;
        expect_op(P, "(");
        jnode **tail = &x->b;
        while (!is_op(P, ")")) {
            const jj_tok *pn = expect_name(P);
            jnode *p = node(P, N_PARAM);
            p->s = pn->s;
            p->n = pn->n;
            if (accept_op(P, "=")) p->a = parse_expr(P);
            *tail = p;
            tail = &p->next;
            if (!accept_op(P, ",")) break;
        }
        expect_op(P, ")");
        expect_kind(P, TK_BLOCK_END, "'%}'");
        static const char *const stop[] = {"endmacro", NULL};
        x->c = parse_body(P, stop);
        end_tag(P, "endmacro");
        return x;
    }
    if (tok_is(t, TK_NAME, "filter")) {
        x = node(P, N_FILTERBLOCK);
        const jj_tok *fn = expect_name(P);
        x->a = node(P, E_FILTER);
        x->a->s = fn->s;
        x->a->n = fn->n;
        if (is_op(P, "(")) x->a->b = parse_args(P);
        expect_kind(P, TK_BLOCK_END, "'%}'");
        static const char *const stop[] = {"endfilter", NULL};
        x->c = parse_body(P, stop);
        end_tag(P, "endfilter");
        return x;
    }
    if (tok_is(t, TK_NAME, "break") || tok_is(t, TK_NAME, "continue")) {
        x = node(P, tok_is(t, TK_NAME, "break") ? N_BREAK : N_CONTINUE);
        expect_kind(P, TK_BLOCK_END, "'%}'");
        return x;
    }
    if (tok_is(t, TK_NAME, "generation") || tok_is(t, TK_NAME, "endgeneration")) {
        // transformers' assistant-mask markers: they render nothing
        expect_kind(P, TK_BLOCK_END, "'%}'");
        return NULL;
    }
    jj_fail(P->a, "unknown or unsupported tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
}

static int at_stop(parser *P, const char *const *stop) {
    if (peek(P)->k != TK_BLOCK_BEGIN) return 0;
    const jj_tok *t = peek2(P);
    for (int i = 0; stop && stop[i]; i++)
        if (tok_is(t, TK_NAME, stop[i])) return 1;
    return 0;
}

static jnode *parse_body(parser *P, const char *const *stop) {
    enter(P);
    jnode *head = NULL, **tail = &head;
    for (;;) {
        const jj_tok *t = peek(P);
        jnode *x = NULL;
        if (t->k == TK_EOF) {
            if (stop) jj_fail(P->a, "unexpected end of template (missing '%s')", stop[stop[1] ? 1 : 0]);
            break;
        }
        if (at_stop(P, stop)) break;
        if (t->k == TK_TEXT) {
            next(P);
            x = node(P, N_TEXT);
            x->s = t->s;
            x->n = t->n;
        } else if (t->k == TK_VAR_BEGIN) {
            next(P);
            x = node2(P, N_OUT, 0, parse_expr(P), NULL);
            expect_kind(P, TK_VAR_END, "'}}'");
        } else if (t->k == TK_BLOCK_BEGIN) {
            const jj_tok *nm = peek2(P);
            if (nm->k == TK_NAME && !stop)
                for (const char *const *s = (const char *const[]){"elif", "else", "endif", "endfor", "endset",
                                                                   "endmacro", "endfilter", NULL};
                     *s; s++)
                    if (tok_is(nm, TK_NAME, *s)) {
                        P->a->line = nm->line;
                        jj_fail(P->a, "unexpected '%s'", *s);
                    }
            x = parse_stmt(P);
        } else {
            unexpected(P, "a statement");
        }
        if (x) {
            *tail = x;
            tail = &x->next;
        }
    }
    P->depth--;
    return head;
}

jnode *jj_parse_tokens(jj_arena *a, const jj_tok *toks) {
    parser P = {.a = a, .t = toks};
    jnode *body = parse_body(&P, NULL);
    return body;
}
