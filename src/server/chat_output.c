// The model's output split into reasoning, content and tool calls (see chat.h).
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/chat.h"

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>";
static const char CALL_OPEN[] = "<tool_call>";
static const char FN_OPEN[] = "<function=";

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Longest suffix of s[0..n) that is a proper prefix of tag (the part that may still become the tag).
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1 < n ? t - 1 : n; k > 0; k--)
        if (!memcmp(s + n - k, tag, k)) return k;
    return 0;
}

static const char *find(const char *s, size_t n, const char *tag) { return memmem(s, n, tag, strlen(tag)); }

// Moves a cut back to a UTF-8 character boundary.
static size_t char_start(const char *s, size_t i, size_t lo) {
    while (i > lo && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

void srv_chat_split_init(srv_chat_split *s, int reasoning, int tools, int in_think) {
    memset(s, 0, sizeof *s);
    s->reasoning = reasoning;
    s->tools = tools;
    s->state = reasoning ? (in_think ? 1 : 0) : 2;
    s->content_started = !reasoning;
}

// The first tool-call tag in the content: <tool_call>, or a bare <function= (Qwen3-Coder sometimes drops the
// wrapper).
static const char *find_call(const char *s, size_t n) {
    const char *a = find(s, n, CALL_OPEN), *b = find(s, n, FN_OPEN);
    return a && b ? (a < b ? a : b) : a ? a : b;
}

void srv_chat_split_feed(srv_chat_split *s, const char *text, size_t upto, srv_emit_fn emit, void *ctx) {
    for (;;) {
        const char *p = text + s->pos;
        const size_t n = upto - s->pos;
        if (s->state == 0) { // does the output open with <think>?
            size_t ws = 0;
            while (ws < n && is_ws(p[ws])) ws++;
            const size_t k = n - ws, t = sizeof THINK_OPEN - 1;
            if (k < t && !memcmp(p + ws, THINK_OPEN, k)) return; // not decided yet
            if (k >= t && !memcmp(p + ws, THINK_OPEN, t)) {
                s->pos += ws + t;
                s->state = 1;
            } else {
                s->state = 2;
                s->content_started = 1; // no thinking: the content is the output, byte for byte
            }
            continue;
        }
        if (s->state == 1) {
            size_t lead = 0; // the reasoning's leading whitespace is dropped
            if (s->held == 0)
                while (lead < n && is_ws(p[lead])) lead++;
            if (lead) {
                s->pos += lead;
                continue;
            }
            const char *close = find(p, n, THINK_CLOSE);
            size_t end = close ? (size_t)(close - p) : n - partial_tag(p, n, THINK_CLOSE);
            size_t trim = end; // trailing whitespace waits: it is dropped if </think> follows
            while (trim > 0 && is_ws(p[trim - 1])) trim--;
            trim = char_start(p, trim, 0);
            if (trim) {
                emit(ctx, 1, p, trim);
                s->held = 1; // some reasoning was emitted: later whitespace is inner whitespace
            }
            s->pos += trim;
            if (!close) return;
            s->pos = (size_t)(close - text) + sizeof THINK_CLOSE - 1;
            s->state = 2;
            s->held = 0;
            continue;
        }
        if (s->state == 2) {
            if (!s->content_started) { // the newlines after </think>
                size_t lead = 0;
                while (lead < n && p[lead] == '\n') lead++;
                s->pos += lead;
                if (lead == n) return;
                s->content_started = 1;
                continue;
            }
            const char *call = s->tools ? find_call(p, n) : NULL;
            size_t end = call ? (size_t)(call - p) : n;
            if (s->tools && !call) {
                size_t a = partial_tag(p, n, CALL_OPEN), b = partial_tag(p, n, FN_OPEN);
                end = n - (a > b ? a : b);
            }
            size_t keep = end; // with tools, trailing whitespace waits (it is dropped before a call)
            if (s->tools)
                while (keep > 0 && is_ws(p[keep - 1])) keep--;
            keep = char_start(p, keep, 0);
            if (keep) emit(ctx, 0, p, keep);
            s->pos += keep;
            s->held = s->pos;
            if (call) {
                s->calls_at = (size_t)(call - text);
                s->state = 3;
            }
            return;
        }
        return; // state 3: held until the end
    }
}

void srv_chat_split_finish(srv_chat_split *s, const char *text, size_t len, const json_t *tools, srv_emit_fn emit,
                           void *ctx, srv_tool_call **calls, int *n_calls) {
    *calls = NULL;
    *n_calls = 0;
    srv_chat_split_feed(s, text, len, emit, ctx);
    if (s->state == 3) {
        size_t end = 0;
        if (srv_tool_calls_parse(text + s->calls_at, len - s->calls_at, tools, calls, n_calls, &end) == 0) {
            size_t a = s->calls_at + end, b = len;
            while (a < b && is_ws(text[a])) a++;
            while (b > a && is_ws(text[b - 1])) b--;
            if (b > a) emit(ctx, 0, text + a, b - a);
            return;
        }
        if (len > s->held) emit(ctx, 0, text + s->held, len - s->held); // malformed: all of it is content
        return;
    }
    if (s->state == 0) { // an output that is a prefix of "<think>" (or only whitespace) is content
        if (len > s->pos) emit(ctx, 0, text + s->pos, len - s->pos);
        return;
    }
    // state 1 (an unclosed <think>): what is left is reasoning, less trailing whitespace; state 2: content
    size_t b = len;
    if (s->state == 1)
        while (b > s->pos && is_ws(text[b - 1])) b--;
    if (s->state == 2 && !s->content_started) return;
    if (b > s->pos) emit(ctx, s->state == 1, text + s->pos, b - s->pos);
}

// ---- the whole output ----
typedef struct {
    char *p;
    size_t len, cap;
} text_buf;
typedef struct {
    text_buf r, c;
} two_bufs;

static void collect(void *ctx, int reasoning, const char *s, size_t n) {
    two_bufs *b = ctx;
    text_buf *t = reasoning ? &b->r : &b->c;
    size_t need = t->len + n + 1;
    if (need > t->cap) {
        t->cap = need * 2;
        t->p = fd_realloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = 0;
}

void srv_chat_parse(const srv_chat_prompt *p, const json_t *tools, const char *output, size_t n,
                    srv_chat_result *out) {
    memset(out, 0, sizeof *out);
    char *text = fd_sprintf("%s%.*s", p->forced ? p->forced : "", (int)n, output);
    size_t len = strlen(p->forced ? p->forced : "") + n;
    srv_chat_split s;
    srv_chat_split_init(&s, p->reasoning, p->tools, p->in_think);
    two_bufs b = {{0}, {0}};
    srv_chat_split_finish(&s, text, len, tools, collect, &b, &out->calls, &out->n_calls);
    out->reasoning = b.r.p; // NULL when no reasoning was emitted
    out->content = b.c.p ? b.c.p : out->n_calls ? NULL : fd_strdup("");
    free(text);
}

void srv_chat_result_free(srv_chat_result *r) {
    free(r->reasoning);
    free(r->content);
    srv_tool_calls_free(r->calls, r->n_calls);
    memset(r, 0, sizeof *r);
}
