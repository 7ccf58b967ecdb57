// Shared by the Jinja interpreter's parts: jinja_value.c (arena, values, str/repr/tojson), jinja_lex.c (tokens),
// jinja_parse.c (AST), jinja_eval.c (statements, expressions), jinja_builtins.c (filters, tests, methods, globals).
//
// Memory: everything a parse or a render allocates comes from one arena that is freed at once. Errors longjmp to the
// entry point (jj_parse / jj_render), which is safe because nothing outside the arena is held across the jump. Values
// may then share structure freely (and even form cycles through namespaces) without reference counting.
#ifndef FD_JINJA_INTERNAL_H
#define FD_JINJA_INTERNAL_H
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "io/jinja.h"

typedef struct jj_chunk jj_chunk;
typedef struct {
    jj_chunk *head;
    size_t used, limit; // bytes allocated so far, and the most this arena may take
    jmp_buf *jb;        // where an error jumps
    char *err;          // the error text (fd_error_set'ed by the entry point)
    int line;           // template line being parsed / evaluated, for messages
} jj_arena;

__attribute__((noreturn, format(printf, 2, 3))) void jj_fail(jj_arena *a, const char *fmt, ...);
void *jj_alloc(jj_arena *a, size_t n); // zeroed
char *jj_strndup(jj_arena *a, const char *s, size_t n);
void jj_arena_free(jj_arena *a);

// ---- values ----
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_MACRO, JV_FUNC } jv_kind;

typedef struct jv jv;
typedef struct jnode jnode;
struct jv {
    jv_kind k;
    uint8_t tuple; // list: written as a tuple (repr)
    uint8_t ns;    // dict: a namespace() (its attributes may be assigned)
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *s;
            size_t n;
        } str;
        struct {
            jv **a;
            size_t n, cap;
        } list;
        struct {
            jv **keys, **vals;
            size_t n, cap;
        } dict;
        struct {
            const jnode *node;
            struct jj_frame *closure;
        } macro;
        struct {
            int id;   // a builtin (jinja_builtins.c)
            jv *self; // bound method: the object; NULL for a global function
        } fn;
    };
};

extern jv jv_undef, jv_none, jv_true, jv_false;
jv *jv_bool(int b);
jv *jv_int(jj_arena *a, long long i);
jv *jv_float(jj_arena *a, double f);
jv *jv_strn(jj_arena *a, const char *s, size_t n); // copies
jv *jv_str_owned(jj_arena *a, const char *s, size_t n); // s lives in the arena already
jv *jv_list(jj_arena *a, size_t cap);
void jv_list_push(jj_arena *a, jv *l, jv *x);
jv *jv_dict(jj_arena *a);
jv *jv_dict_get(const jv *d, const char *key, size_t n); // NULL if absent
void jv_dict_set(jj_arena *a, jv *d, jv *key, jv *val);
jv *jv_from_json(jj_arena *a, const json_t *j);

int jv_truthy(const jv *v);
int jv_equal(const jv *x, const jv *y);
int jv_compare(jj_arena *a, const jv *x, const jv *y); // <0, 0, >0; error for incomparable kinds
const char *jv_kind_name(const jv *v);
size_t jv_utf8_len(const char *s, size_t n); // code points

// Growable byte buffer in the arena, with the render's output bound.
typedef struct {
    char *p;
    size_t n, cap, limit;
} jj_buf;
void jj_put(jj_arena *a, jj_buf *b, const char *s, size_t n);
void jj_puts(jj_arena *a, jj_buf *b, const char *s);
void jv_write_str(jj_arena *a, jj_buf *b, const jv *v);  // Python str()
void jv_write_repr(jj_arena *a, jj_buf *b, const jv *v); // Python repr()
jv *jv_to_str(jj_arena *a, const jv *v);
// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=sep, sort_keys=sort_keys);
// sep NULL = Python's default (", " / ": ", or "," / ": " with an indent). indent < 0 = none. flags: 1 sort_keys,
// 2 ensure_ascii.
void jv_write_json(jj_arena *a, jj_buf *b, const jv *v, int indent, const char *item_sep, const char *key_sep,
                   int flags, int depth);

// ---- tokens ----
typedef enum {
    TK_EOF,
    TK_TEXT,        // literal template text (whitespace control applied)
    TK_VAR_BEGIN,   // {{
    TK_VAR_END,     // }}
    TK_BLOCK_BEGIN, // {%
    TK_BLOCK_END,   // %}
    TK_NAME,
    TK_STRING, // s/n: the unescaped value
    TK_INT,
    TK_FLOAT,
    TK_OP, // s/n: the operator text
} jj_tok_kind;

typedef struct {
    jj_tok_kind k;
    const char *s;
    size_t n;
    long long i;
    double f;
    int line;
} jj_tok;

// Tokens of the whole template (arena), terminated by TK_EOF.
jj_tok *jj_lex(jj_arena *a, const char *src, size_t n, size_t *count);

// ---- AST ----
typedef enum {
    // statements
    N_TEXT,     // s
    N_OUT,      // a
    N_IF,       // a cond, b then-list, c else-list
    N_FOR,      // a target, b iterable, c body, d else-body, e filter condition
    N_SET,      // a target, b value
    N_SETBLOCK, // a target, c body, s: filter name (optional, "" none)
    N_MACRO,    // s name, b params (N_PARAM list), c body
    N_FILTERBLOCK, // a filter call node (E_FILTER with a NULL operand), c body
    N_BREAK,
    N_CONTINUE,
    N_PARAM, // s name, a default (or NULL)
    // expressions
    E_LIT,    // v
    E_NAME,   // s
    E_ATTR,   // a object, s name
    E_INDEX,  // a object, b index
    E_SLICE,  // a object, b start, c stop, d step (each may be NULL)
    E_CALL,   // a callee, b args (E_KWARG for keyword ones)
    E_KWARG,  // s name, a value
    E_FILTER, // a operand, s name, b args
    E_TEST,   // a operand, s name, b args, op 1 = "is not"
    E_UNARY,  // op '-' '+' '!', a
    E_BIN,    // op, a, b
    E_AND,
    E_OR,
    E_COND, // a then, b condition, c else (NULL: undefined)
    E_LIST, // b items
    E_TUPLE,
    E_DICT, // b pairs (E_PAIR: a key, b value)
    E_PAIR,
} jn_kind;

// Binary operators (E_BIN op)
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT,
       OP_GE, OP_IN, OP_NOTIN };

struct jnode {
    jn_kind k;
    int op, line;
    const char *s;
    size_t n;
    jv *v;
    jnode *a, *b, *c, *d, *e;
    jnode *next; // the next statement of a body / item of a list
};

struct jj_template {
    jj_arena arena;
    jnode *body;
};

jnode *jj_parse_tokens(jj_arena *a, const jj_tok *toks);

// ---- evaluation ----
typedef struct jj_frame {
    struct jj_frame *parent;
    jv *vars; // a dict
} jj_frame;

typedef struct {
    jj_arena *a;
    jj_buf *out;
    jj_frame *globals;
    long long steps, max_steps;
    int depth;   // macro calls in progress
    int control; // 1 break, 2 continue (inside a loop body)
} jj_eval;

jv *jj_eval_expr(jj_eval *E, jj_frame *f, const jnode *x);
void jj_exec(jj_eval *E, jj_frame *f, const jnode *body);
jv *jj_call(jj_eval *E, jv *fn, jv **args, int nargs, const char **kw, jv **kwv, int nkw);
jv *jj_lookup(jj_frame *f, const char *name, size_t n);

// builtins (jinja_builtins.c)
jv *jj_global(jj_arena *a, const char *name, size_t n); // NULL if no such global function
jv *jj_method(jj_arena *a, jv *self, const char *name, size_t n); // bound method, or NULL
jv *jj_call_builtin(jj_eval *E, jv *fn, jv **args, int nargs, const char **kw, jv **kwv, int nkw);
jv *jj_filter(jj_eval *E, const char *name, jv *x, jv **args, int nargs, const char **kw, jv **kwv, int nkw);
int jj_test(jj_eval *E, const char *name, jv *x, jv **args, int nargs);
jv *jj_getattr(jj_eval *E, jv *obj, const char *name, size_t n);
jv *jj_getitem(jj_eval *E, jv *obj, jv *key);
#endif
