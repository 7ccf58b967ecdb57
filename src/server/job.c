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
    srv_buf_free(&j->text);
    srv_buf_free(&j->ctext);
    srv_chat_prompt_free(&j->chat);
    json_decref(j->tools);
    json_decref(j->tool_calls);
    free(j->reasoning);
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
    json_t *choice = json_pack("{s:i, s:n, s:o}", "index", 0, "logprobs", "finish_reason",
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
    json_t *choice = json_pack("{s:i, s:o, s:n, s:n}", "index", 0, "delta", delta, "logprobs", "finish_reason");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    sse_emit(j, o);
}

void srv_sse_reasoning(srv_job *j, const char *delta, size_t len) {
    sse_delta(j, json_pack("{s:s%}", "reasoning_content", delta, len));
}

// Call ids: unique per response (the job id's random part and the call's index).
json_t *srv_tool_calls_json(srv_job *j, const srv_tool_call *calls, int n) {
    json_t *a = json_array();
    const char *tail = strchr(j->id, '-') ? strchr(j->id, '-') + 1 : j->id;
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof id, "call_%s%d", tail, i);
        json_array_append_new(a, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                           "name", calls[i].name, "arguments", calls[i].arguments));
    }
    return a;
}

void srv_sse_tool_calls(srv_job *j, const srv_tool_call *calls, int n) {
    json_t *all = srv_tool_calls_json(j, calls, n);
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
