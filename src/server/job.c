// Jobs (one per generation request), their output buffers and the SSE event encoding.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/server_internal.h"

void srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        b->p = fd_realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

srv_job *srv_job_new(void) {
    srv_job *j = fd_calloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->fd = -1;
    j->n = 1;
    atomic_init(&j->cancelled, 0);
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    srv_buf_free(&j->out);
    for (int i = 0; i < SRV_MAX_N; i++) {
        srv_buf_free(&j->ch[i].text);
        free(j->ch[i].reasoning);
        json_decref(j->ch[i].tool_calls);
        json_decref(j->ch[i].lp_all);
        json_decref(j->ch[i].lp_pending);
        srv_buf_free(&j->ch[i].ctext);
    }

    srv_chat_prompt_free(&j->chat);
    json_decref(j->tools);


    free(j->echo);
    free((void *)j->hp.bias_ids);
    free((void *)j->hp.bias);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_wake_locked(srv_job *j) {
    if (j->suspended && j->conn) {
        j->suspended = 0;
        MHD_resume_connection(j->conn);
    }
}

const char *srv_finish_name(srv_finish f) {
    return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : f == SRV_FINISH_TOOL_CALLS ? "tool_calls"
                                                                                                        : NULL;
}

static json_t *chunk_base(srv_job *j) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", j->id, "object",
                     j->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)j->created, "model", j->model_name);
}

static void sse_emit(srv_job *j, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    FD_CHECK(s != NULL, "SSE chunk not encodable");
    srv_buf_add(&j->out, "data: ", 6);
    srv_buf_add(&j->out, s, strlen(s));
    srv_buf_add(&j->out, "\n\n", 2);
    free(s);
    json_decref(o);
}

void srv_sse_chunk(srv_job *j, const char *delta, size_t len, int role_chunk, srv_finish finish) {
    json_t *o = chunk_base(j);
    const char *fin = srv_finish_name(finish);
    json_t *choice = json_pack("{s:i, s:n, s:o}", "index", j->cur, "logprobs", "finish_reason",
                               fin ? json_string(fin) : json_null());
    if (j->kind == SRV_CHAT) {
        json_t *d = json_object();
        if (role_chunk) {
            json_object_set_new(d, "role", json_string("assistant"));
            json_object_set_new(d, "content", json_string(""));
        } else if (len) {
            json_object_set_new(d, "content", json_stringn(delta, len));
        }
        json_object_set_new(choice, "delta", d);
    } else {
        json_object_set_new(choice, "text", json_stringn(len ? delta : "", len));
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    sse_emit(j, o);
}

static void sse_delta(srv_job *j, json_t *delta) {
    json_t *o = chunk_base(j);
    json_t *choice = json_pack("{s:i, s:o, s:n, s:n}", "index", j->cur, "delta", delta, "logprobs", "finish_reason");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    sse_emit(j, o);
}

void srv_sse_reasoning(srv_job *j, const char *delta, size_t len) {
    sse_delta(j, json_pack("{s:s%}", "reasoning_content", delta, len));
}

// Call ids: unique per response (the job id's random part, the choice and the call's index).
json_t *srv_tool_calls_json(srv_job *j, int choice, const srv_tool_call *calls, int n) {
    json_t *a = json_array();
    const char *tail = strchr(j->id, '-') ? strchr(j->id, '-') + 1 : j->id;
    for (int i = 0; i < n; i++) {
        char id[96];
        if (choice) snprintf(id, sizeof id, "call_%s%d_%d", tail, choice, i);
        else snprintf(id, sizeof id, "call_%s%d", tail, i);
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                           "name", calls[i].name, "arguments", calls[i].arguments));
    }
    return a;
}

void srv_sse_tool_calls(srv_job *j, const srv_tool_call *calls, int n) {
    json_t *all = srv_tool_calls_json(j, j->cur, calls, n);
    for (int i = 0; i < n; i++) {
        json_t *c = json_deep_copy(json_array_get(all, (size_t)i));
        json_object_set_new(c, "index", json_integer(i));
        sse_delta(j, json_pack("{s:[o]}", "tool_calls", c));
    }
    json_decref(all);
}

void srv_sse_usage(srv_job *j, int n_prompt) {
    json_t *o = chunk_base(j);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage",
                        json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", n_prompt, "completion_tokens",
                                  j->n_completion, "total_tokens", n_prompt + j->n_completion,
                                  "prompt_tokens_details", "cached_tokens", j->n_cached));
    sse_emit(j, o);
}

void srv_sse_error(srv_job *j) {
    char *e = srv_err_json(&j->err);
    srv_buf_add(&j->out, "data: ", 6);
    srv_buf_add(&j->out, e, strlen(e));
    srv_buf_add(&j->out, "\n\n", 2);
    free(e);
}

void srv_sse_done(srv_job *j) { srv_buf_add(&j->out, "data: [DONE]\n\n", 14); }

// A token's text for logprobs: its bytes when they are valid UTF-8, else vLLM's "bytes:\xNN..." spelling.
static json_t *token_text(const tok_tokenizer *t, int32_t id, json_t **bytes) {
    size_t n = 0;
    const char *b = tok_token_bytes(t, id, &n);
    if (!b) b = "", n = 0;
    *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)b[i]));
    if (tok_utf8_invalid_at(b, n) == n) return json_stringn(b, n);
    char *s = fd_malloc(n * 4 + 8);
    size_t k = (size_t)sprintf(s, "bytes:");
    for (size_t i = 0; i < n; i++) k += (size_t)sprintf(s + k, "\\x%02x", (unsigned char)b[i]);
    json_t *j = json_stringn(s, k);
    free(s);
    return j;
}

json_t *srv_logprob_entry(const tok_tokenizer *t, const fd_token_logprobs *lp) {
    json_t *bytes, *tok = token_text(t, lp->id, &bytes);
    json_t *top = json_array();
    for (int i = 0; i < lp->n_top; i++) {
        json_t *tb, *tt = token_text(t, lp->top_ids[i], &tb);
        json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", tt, "logprob", (double)lp->top_logprobs[i],
                                             "bytes", tb));
    }
    return json_pack("{s:o, s:f, s:o, s:o}", "token", tok, "logprob", (double)lp->logprob, "bytes", bytes,
                     "top_logprobs", top);
}

json_t *srv_completion_logprobs(const json_t *entries) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *e;
    json_array_foreach(entries, i, e) {
        json_t *tok = json_object_get(e, "token");
        json_array_append(toks, tok);
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object(), *t;
        size_t k;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t)
            json_object_set(m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_array_size(json_object_get(e, "bytes"));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

void srv_sse_logprobs(srv_job *j) {
    json_t *pend = j->ch[j->cur].lp_pending;
    if (!pend || !json_array_size(pend)) return;
    json_t *o = chunk_base(j);
    json_t *lp = j->kind == SRV_CHAT ? json_pack("{s:O}", "content", pend) : srv_completion_logprobs(pend);
    json_t *choice = json_pack("{s:i, s:o, s:n}", "index", j->cur, "logprobs", lp, "finish_reason");
    if (j->kind == SRV_CHAT) json_object_set_new(choice, "delta", json_object());
    else json_object_set_new(choice, "text", json_string(""));
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    sse_emit(j, o);
    json_array_clear(pend);
}
