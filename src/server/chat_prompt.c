// The prompt of a chat request: the model's template over the request's messages, tools and
// chat_template_kwargs, plus the opening of a tool call when tool_choice demands one (see chat.h).
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/tokenizer.h"
#include "server/chat.h"

static const char *last(const char *s, const char *needle) {
    const char *hit = NULL;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) hit = p;
    return hit;
}

int srv_chat_build_prompt(const chat_template *t, const srv_req *r, srv_chat_prompt *p, srv_err *e) {
    memset(p, 0, sizeof *p);
    // tool_choice "none": the model is not told about the tools, so it answers in text
    const json_t *tools = r->tools && r->tool_choice != SRV_TOOLS_NONE ? r->tools : NULL;
    char *text = chat_template_apply(t, r->chat_messages, tools, NULL, r->template_kwargs, 1);
    if (!text) return srv_err_set(e, 400, "invalid_request_error", NULL, "messages", "%s", fd_error_msg());
    p->reasoning = chat_template_mentions(t, "</think>");
    p->tools = tools != NULL;
    const char *open = last(text, "<think>"), *close = last(text, "</think>");
    p->in_think = p->reasoning && open && (!close || close < open);
    if (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED) {
        // No constrained decoding: the prompt itself opens the call, so the model can only continue it.
        // A thinking block the template opened is closed first (empty, as enable_thinking=false renders it).
        const int xml = chat_template_mentions(t, "<function=");
        const char *name = r->tool_choice_name;
        p->forced = xml ? (name ? fd_sprintf("<tool_call>\n<function=%s>\n", name) : fd_strdup("<tool_call>\n<function="))
                        : (name ? fd_sprintf("<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name)
                                : fd_strdup("<tool_call>\n{\"name\": \""));
        char *t2 = fd_sprintf("%s%s%s", text, p->in_think ? "\n</think>\n\n" : "", p->forced);
        free(text);
        text = t2;
        p->in_think = 0;
    }
    p->text = text;
    return 0;
}

void srv_chat_prompt_free(srv_chat_prompt *p) {
    free(p->text);
    free(p->forced);
    memset(p, 0, sizeof *p);
}

// The texts of the tokenizer's special added tokens (malloc'ed array of pointers into the tokenizer).
static int special_texts(const tok_tokenizer *tok, const char ***out, size_t **lens) {
    int n = 0, cap = 0;
    *out = NULL;
    *lens = NULL;
    for (int32_t id = 0; id < tok_n_vocab(tok); id++) {
        if (!tok_is_special(tok, id)) continue;
        size_t len;
        const char *b = tok_token_bytes(tok, id, &len);
        if (!b || !len) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *out = fd_realloc(*out, sizeof **out * (size_t)cap);
            *lens = fd_realloc(*lens, sizeof **lens * (size_t)cap);
        }
        (*out)[n] = b, (*lens)[n] = len, n++;
    }
    return n;
}

// A copy of v in which every string has the first byte of each special-token occurrence replaced by 0x01 (same
// length, no template branches on it). *changed counts the replacements.
static json_t *defang(const json_t *v, const char *const *sp, const size_t *sl, int nsp, int *changed) {
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        const size_t n = json_string_length(v);
        char *c = NULL;
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < nsp; k++)
                if (sl[k] <= n - i && !memcmp(s + i, sp[k], sl[k])) {
                    if (!c) {
                        c = fd_malloc(n + 1);
                        memcpy(c, s, n + 1);
                    }
                    c[i] = 0x01;
                    (*changed)++;
                    break;
                }
        if (!c) return json_incref((json_t *)v);
        json_t *r = json_stringn(c, n);
        free(c);
        return r;
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        for (size_t i = 0; i < json_array_size(v); i++)
            json_array_append_new(a, defang(json_array_get(v, i), sp, sl, nsp, changed));
        return a;
    }
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) json_object_set_new(o, key, defang(val, sp, sl, nsp, changed));
        return o;
    }
    return json_incref((json_t *)v);
}

int srv_chat_plain_spans(const chat_template *t, const tok_tokenizer *tok, const srv_req *r, const srv_chat_prompt *p,
                         tok_span **spans, int *n, srv_err *e) {
    *spans = NULL;
    *n = 0;
    if (!r->chat_messages) return 0;
    const char **sp;
    size_t *sl;
    const int nsp = special_texts(tok, &sp, &sl);
    int changed = 0;
    json_t *msgs = defang(r->chat_messages, sp, sl, nsp, &changed);
    free(sp);
    free(sl);
    if (!changed) {
        json_decref(msgs);
        return 0;
    }
    srv_req r2 = *r;
    r2.chat_messages = msgs;
    srv_chat_prompt p2;
    const int rc = srv_chat_build_prompt(t, &r2, &p2, e);
    json_decref(msgs);
    if (rc) return -1;
    const size_t la = strlen(p->text), lb = strlen(p2.text);
    if (la != lb) {
        srv_chat_prompt_free(&p2);
        return srv_err_set(e, 400, "invalid_request_error", NULL, "messages",
                           "the messages contain special-token text that the chat template treats specially; it "
                           "cannot be kept as plain text (start the server with --parse-special-tokens to let it "
                           "through as control tokens)");
    }
    for (size_t i = 0; i < la; i++)
        if (p->text[i] != p2.text[i]) {
            *spans = fd_realloc(*spans, sizeof **spans * (size_t)(*n + 1));
            (*spans)[(*n)++] = (tok_span){i, 1};
        }
    srv_chat_prompt_free(&p2);
    return 0;
}
