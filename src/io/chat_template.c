// Qwen3's Jinja chat template, step for step (see chat_template.h). Python string methods it uses (split,
// strip('\n'), lstrip, rstrip, startswith, endswith) are re-created with exactly those semantics.
#include "io/chat_template.h"

#include <jansson.h>
#include <string.h>

#include "base/base.h"

typedef struct {
    char *p;
    size_t n, cap;
    tok_span *spans; // where message text went (NULL: not recorded)
    int n_spans, cap_spans, record;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = fd_realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }
// Text that came from a message (content, reasoning): recorded as a plain span, so that the encoder never turns
// control-token text inside it into control tokens.
static void put_user(sbuf *b, const char *s, size_t n) {
    if (b->record && n) {
        if (b->n_spans == b->cap_spans) {
            b->cap_spans = b->cap_spans ? 2 * b->cap_spans : 16;
            b->spans = fd_realloc(b->spans, (size_t)b->cap_spans * sizeof *b->spans);
        }
        b->spans[b->n_spans++] = (tok_span){b->n, n};
    }
    put_n(b, s, n);
}

typedef struct {
    const char *s;
    size_t n;
} span;

static span sp(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }
static span lstrip_nl(span x) {
    while (x.n && x.s[0] == '\n') x.s++, x.n--;
    return x;
}
static span rstrip_nl(span x) {
    while (x.n && x.s[x.n - 1] == '\n') x.n--;
    return x;
}
// Last occurrence of needle in x, or NULL.
static const char *find_last(span x, const char *needle) {
    size_t k = strlen(needle);
    const char *hit = NULL;
    for (size_t i = 0; i + k <= x.n; i++)
        if (!memcmp(x.s + i, needle, k)) hit = x.s + i;
    return hit;
}
static const char *find_first(span x, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= x.n; i++)
        if (!memcmp(x.s + i, needle, k)) return x.s + i;
    return NULL;
}
static int starts(span x, const char *p) { return x.n >= strlen(p) && !memcmp(x.s, p, strlen(p)); }
static int ends(span x, const char *p) { return x.n >= strlen(p) && !memcmp(x.s + x.n - strlen(p), p, strlen(p)); }
static int is(const chat_msg *m, const char *role) { return !strcmp(m->role, role); }

char *chat_render_qwen3(const chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking) {
    return chat_render_qwen3_spans(msgs, n, add_generation_prompt, enable_thinking, NULL, NULL);
}

char *chat_render_qwen3_spans(const chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking,
                              tok_span **spans, int *n_spans) {
    if (spans) *spans = NULL, *n_spans = 0;
    if (n <= 0) {
        fd_error_set("chat: no messages");
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (!msgs[i].role || !(is(&msgs[i], "system") || is(&msgs[i], "user") || is(&msgs[i], "assistant") ||
                               is(&msgs[i], "tool"))) {
            // The Jinja template would silently drop such a message; a server must say so instead.
            fd_error_set("chat: message %d has role \"%s\" (expected system, user, assistant or tool)", i,
                         msgs[i].role ? msgs[i].role : "(none)");
            return NULL;
        }
    sbuf b = {0};
    b.record = spans != NULL;
    put(&b, "");
    if (is(&msgs[0], "system")) {
        put(&b, "<|im_start|>system\n");
        put_user(&b, msgs[0].content ? msgs[0].content : "", msgs[0].content ? strlen(msgs[0].content) : 0);
        put(&b, "<|im_end|>\n");
    }
    // The last user message that is a real query (not a wrapped tool response): thinking is kept only after it.
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        span c = sp(msgs[i].content);
        if (is(&msgs[i], "user") && !(starts(c, "<tool_response>") && ends(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &msgs[i];
        span content = sp(m->content);
        if (is(m, "user") || (is(m, "system") && i > 0)) {
            put(&b, "<|im_start|>");
            put(&b, m->role);
            put(&b, "\n");
            put_user(&b, content.s, content.n);
            put(&b, "<|im_end|>\n");
        } else if (is(m, "assistant")) {
            span reasoning = sp("");
            if (m->reasoning_content) {
                reasoning = sp(m->reasoning_content);
            } else if (find_first(content, "</think>")) {
                span full = content;
                const char *last_end = find_last(full, "</think>");
                content = lstrip_nl((span){last_end + 8, (size_t)(full.s + full.n - (last_end + 8))});
                span before = {full.s, (size_t)(find_first(full, "</think>") - full.s)};
                before = rstrip_nl(before);
                const char *open = find_last(before, "<think>");
                if (open) before = (span){open + 7, (size_t)(before.s + before.n - (open + 7))};
                reasoning = lstrip_nl(before);
            }
            put(&b, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                put(&b, "<think>\n");
                span r = rstrip_nl(lstrip_nl(reasoning));
                put_user(&b, r.s, r.n);
                put(&b, "\n</think>\n\n");
                content = lstrip_nl(content);
            }
            put_user(&b, content.s, content.n);
            put(&b, "<|im_end|>\n");
        } else if (is(m, "tool")) { // consecutive tool results share one user turn
            if (i == 0 || !is(&msgs[i - 1], "tool")) put(&b, "<|im_start|>user");
            put(&b, "\n<tool_response>\n");
            put_user(&b, content.s, content.n);
            put(&b, "\n</tool_response>");
            if (i == n - 1 || !is(&msgs[i + 1], "tool")) put(&b, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) {
        put(&b, "<|im_start|>assistant\n");
        if (enable_thinking == CHAT_THINKING_OFF) put(&b, "<think>\n\n</think>\n\n");
    }
    if (spans) *spans = b.spans, *n_spans = b.n_spans;
    return b.p;
}

static int add_id(int32_t *ids, int *n, int max, int32_t id) {
    for (int i = 0; i < *n; i++)
        if (ids[i] == id) return 0;
    if (*n >= max) return fd_error_set("more than %d eos ids", max);
    ids[(*n)++] = id;
    return 0;
}

static json_t *load_json_if_present(const char *dir, const char *name, int *rc) {
    char *path = fd_path_join(dir, name);
    json_t *j = NULL;
    *rc = 0;
    if (fd_file_exists(path)) {
        json_error_t e;
        j = json_load_file(path, 0, &e);
        if (!j || !json_is_object(j)) {
            *rc = fd_error_set("%s: %s", path, j ? "not a JSON object" : e.text);
            json_decref(j);
            j = NULL;
        }
    }
    free(path);
    return j;
}

int chat_eos_ids(const char *model_dir, const tok_tokenizer *t, int32_t *ids, int max_ids) {
    int n = 0, rc;
    json_t *gen = load_json_if_present(model_dir, "generation_config.json", &rc);
    if (rc) return -1;
    if (gen) {
        json_t *e = json_object_get(gen, "eos_token_id");
        size_t k = json_is_array(e) ? json_array_size(e) : e && !json_is_null(e) ? 1 : 0; // null: none (HF)
        for (size_t i = 0; i < k && rc == 0; i++) {
            json_t *v = json_is_array(e) ? json_array_get(e, i) : e;
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x >= tok_n_vocab(t)) rc = fd_error_set("generation_config.json: eos_token_id %lld is not a token id", (long long)x);
            else rc = add_id(ids, &n, max_ids, (int32_t)x);
        }
        json_decref(gen);
        if (rc) return -1;
    }
    json_t *tc = load_json_if_present(model_dir, "tokenizer_config.json", &rc);
    if (rc) return -1;
    if (tc) {
        json_t *e = json_object_get(tc, "eos_token");
        const char *s = json_is_string(e) ? json_string_value(e)
                      : json_is_object(e) ? json_string_value(json_object_get(e, "content")) : NULL;
        if (s) {
            int32_t id = tok_token_id(t, s);
            if (id < 0) rc = fd_error_set("tokenizer_config.json: eos_token \"%s\" is not in the vocabulary", s);
            else rc = add_id(ids, &n, max_ids, id);
        }
        json_decref(tc);
        if (rc) return -1;
    }
    return n;
}
