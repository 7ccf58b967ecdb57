// Jinja entry points (see jinja.h): each runs its phase under a setjmp, with its own arena.
#include <string.h>

#include "base/base.h"
#include "io/jinja_internal.h"

// Bounds of one parse / render. Chat templates are a few KB and render a few hundred KB at most; these leave
// room for long conversations while keeping a hostile template from taking the server down.
#define JJ_PARSE_MEMORY ((size_t)64 << 20)
#define JJ_RENDER_MEMORY ((size_t)256 << 20)
#define JJ_OUTPUT_LIMIT ((size_t)16 << 20)
#define JJ_MAX_STEPS 50000000LL

jj_template *jj_parse(const char *src, size_t n) {
    jj_template *t = fd_calloc(1, sizeof *t);
    jmp_buf jb;
    t->arena.limit = JJ_PARSE_MEMORY;
    t->arena.jb = &jb;
    if (setjmp(jb)) {
        fd_error_set("chat template %s", t->arena.err ? t->arena.err : "error");
        jj_free(t);
        return NULL;
    }
    size_t count;
    jj_tok *toks = jj_lex(&t->arena, src, n, &count);
    t->body = jj_parse_tokens(&t->arena, toks);
    t->arena.jb = NULL;
    return t;
}

char *jj_render(const jj_template *t, const json_t *ctx, size_t *len) { return jj_render_bounded(t, ctx, len, 0, 0); }

char *jj_render_bounded(const jj_template *t, const json_t *ctx, size_t *len, long long max_steps, size_t max_output) {
    jj_arena a = {.limit = JJ_RENDER_MEMORY};
    jmp_buf jb;
    a.jb = &jb;
    if (setjmp(jb)) {
        fd_error_set("chat template %s", a.err ? a.err : "error");
        jj_arena_free(&a);
        return NULL;
    }
    jj_buf out = {.limit = max_output ? max_output : JJ_OUTPUT_LIMIT};
    jj_eval E = {.a = &a, .out = &out, .max_steps = max_steps ? max_steps : JJ_MAX_STEPS};
    jj_frame *root = jj_alloc(&a, sizeof *root);
    root->vars = ctx && json_is_object(ctx) ? jv_from_json(&a, ctx) : jv_dict(&a);
    E.globals = root;
    jj_frame *top = jj_alloc(&a, sizeof *top); // the template's own variables shadow the context's
    top->parent = root;
    top->vars = jv_dict(&a);
    jj_exec(&E, top, t->body);
    char *s = fd_malloc(out.n + 1);
    if (out.n) memcpy(s, out.p, out.n);
    s[out.n] = 0;
    if (len) *len = out.n;
    jj_arena_free(&a);
    return s;
}

void jj_free(jj_template *t) {
    if (!t) return;
    jj_arena_free(&t->arena);
    free(t);
}
