// HTTP side of the server: libmicrohttpd callbacks, routing, request validation, responses. Runs on the
// libmicrohttpd thread pool; never calls the engine (the scheduler thread does).
//
// A generation request's connection is suspended while the scheduler works and resumed when there is output
// (MHD_suspend_connection is called only from libmicrohttpd's own callbacks, as its API requires).
#include "server/http.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "io/chat_template.h"
#include "server/conn.h"
#include "server/http_api.h"

typedef enum {
    R_NONE = 0, R_COMPLETIONS, R_CHAT, R_MODELS, R_HEALTH, R_METRICS, R_RESET, R_MODEL_ID, R_TOKENIZE, R_DETOKENIZE,
    R_VERSION
} srv_route;

typedef struct {
    srv_route route;
    srv_buf body;
    int too_big;
    size_t received; // body bytes so far
    double t0;
    int http11; // an HTTP/1.1 request (interim 1xx responses allowed)
    srv_job *job;
    int status;
    int logged_error; // an error response was queued (for the log line)
    char model_id[256]; // GET /v1/models/{id}
    char why[320];
    char allow_origin[256]; // Access-Control-Allow-Origin of every response ("" = none: CORS off, or not allowed)
} conn_ctx;

static enum MHD_Result send_text(conn_ctx *cx, struct MHD_Connection *c, int status, const char *type,
                                 const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", type);
    srv_cors_add_headers(r, cx->allow_origin);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cx->status = status;
    return ok;
}

static enum MHD_Result send_json(conn_ctx *cx, struct MHD_Connection *c, int status, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    FD_CHECK(s != NULL);
    enum MHD_Result ok = send_text(cx, c, status, "application/json", s);
    free(s);
    return ok;
}

static enum MHD_Result send_err(conn_ctx *cx, struct MHD_Connection *c, const srv_err *e) {
    char *s = srv_err_json(e);
    snprintf(cx->why, sizeof cx->why, "%s", e->message);
    enum MHD_Result ok = send_text(cx, c, e->status, "application/json", s);
    free(s);
    return ok;
}

static enum MHD_Result fail(conn_ctx *cx, struct MHD_Connection *c, int status, const char *type, const char *code,
                            const char *msg) {
    srv_err e;
    srv_err_set(&e, status, type, code, NULL, "%s", msg);
    return send_err(cx, c, &e);
}

static json_t *usage_json(const srv_job *j) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", j->n_completion,
                     "total_tokens", j->n_prompt + j->n_completion, "prompt_tokens_details", "cached_tokens",
                     j->n_cached);
}

// One choice of a finished plain response.
static json_t *choice_json(const srv_job *j, int i) {
    const srv_choice *ch = &j->ch[i];
    const char *fin = srv_finish_name(ch->finish) ? srv_finish_name(ch->finish) : "stop";
    json_t *text = json_stringn(ch->text.p ? ch->text.p : "", ch->text.len), *choice;
    if (j->kind == SRV_CHAT) {
        json_t *msg = json_pack("{s:s, s:o}", "role", "assistant", "content", ch->content_null ? json_null() : text);
        if (ch->content_null) json_decref(text);
        if (ch->reasoning) json_object_set_new(msg, "reasoning_content", json_string(ch->reasoning));
        if (ch->tool_calls) json_object_set(msg, "tool_calls", ch->tool_calls);
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", i, "message", msg, "logprobs", "finish_reason", fin);
        if (j->logprobs)
            json_object_set_new(choice, "logprobs",
                                json_pack("{s:o}", "content", ch->lp_all ? json_incref(ch->lp_all) : json_array()));
    } else {
        choice = json_pack("{s:i, s:o, s:n, s:s}", "index", i, "text", text, "logprobs", "finish_reason", fin);
        if (j->logprobs) {
            json_t *none = json_array();
            json_object_set_new(choice, "logprobs", srv_completion_logprobs(ch->lp_all ? ch->lp_all : none));
            json_decref(none);
        }
    }
    return choice;
}

// The finished non-streaming job as an OpenAI response (caller holds j->mu).
static enum MHD_Result respond_job(conn_ctx *cx, struct MHD_Connection *c, srv_job *j) {
    if (j->err.status) return send_err(cx, c, &j->err);
    json_t *choices = json_array();
    for (int i = 0; i < j->n; i++) json_array_append_new(choices, choice_json(j, i));
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", j->id, "object",
                          j->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created",
                          (json_int_t)j->created, "model", j->model_name, "choices", choices, "usage", usage_json(j));
    return send_json(cx, c, 200, o);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_job *j = cls;
    pthread_mutex_lock(&j->mu);
    if (j->out_sent < j->out.len) {
        size_t n = j->out.len - j->out_sent < max ? j->out.len - j->out_sent : max;
        memcpy(buf, j->out.p + j->out_sent, n);
        j->out_sent += n;
        if (j->out_sent == j->out.len) j->out.len = j->out_sent = 0;
        pthread_mutex_unlock(&j->mu);
        return (ssize_t)n;
    }
    if (j->done || !j->conn) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    j->suspended = 1; // the scheduler resumes us when it publishes more
    MHD_suspend_connection(j->conn);
    pthread_mutex_unlock(&j->mu);
    return 0;
}

static void stream_free(void *cls) { srv_job_unref(cls); }

// A stream's 200 and SSE headers, once the scheduler admitted the job. Called without j->mu: libmicrohttpd calls
// stream_read (which takes j->mu) with the response's own lock held, so queueing it under j->mu would invert them.
static enum MHD_Result stream_start(conn_ctx *cx, struct MHD_Connection *c, srv_job *j) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, j,
                                                                  stream_free);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    srv_cors_add_headers(resp, cx->allow_origin);
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    cx->status = 200;
    return ok;
}

// A job's connection on its first pass and on every resume: answers when there is an answer, else suspends until
// the scheduler has one (under j->mu, so its wake-up cannot be lost). A stream's headers wait for admission, so a
// refusal (KV pages, queue timeout, shutdown) is answered with its real status.
static enum MHD_Result job_progress(conn_ctx *cx, struct MHD_Connection *c, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    if (j->stream && !j->headers_sent && !j->err.status && j->admitted) {
        j->headers_sent = 1; // from now on a failure is an SSE error event
        j->refs++;           // the response holds one
        pthread_mutex_unlock(&j->mu);
        return stream_start(cx, c, j);
    }
    enum MHD_Result ok = MHD_YES;
    if (j->stream && !j->headers_sent && j->err.status) {
        ok = send_err(cx, c, &j->err);
    } else if (!j->stream && j->done) {
        ok = respond_job(cx, c, j);
    } else {
        j->suspended = 1;
        MHD_suspend_connection(c);
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

// Bearer token of the request (Authorization: Bearer <token>), or NULL.
static const char *bearer_token(struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return NULL;
    h += 7;
    while (*h == ' ') h++;
    return *h ? h : NULL;
}

// Does the request carry key as its bearer token? Compared in constant time (the time says nothing about how much
// of a guess was right). A NULL or empty key matches nothing.
int srv_request_has_key(struct MHD_Connection *c, const char *key) {
    const char *got = bearer_token(c);
    if (!key || !key[0] || !got) return 0;
    const size_t n = strlen(key), m = strlen(got);
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? got[i] : 0);
    return diff == 0;
}

// Admin routes (POST /reset_prefix_cache): refused unless the server has an admin key (--admin-key or
// FD_ADMIN_KEY) and the request carries it. 0, or -1 with *e (403 no key configured, 401 wrong or missing key).
static int admin_check(const srv_server *S, struct MHD_Connection *c, srv_err *e) {
    if (!S->cfg->admin_key || !S->cfg->admin_key[0])
        return srv_err_set(e, 403, "permission_error", "admin_disabled", NULL,
                           "admin routes are disabled: start the server with --admin-key (or FD_ADMIN_KEY)");
    if (!srv_request_has_key(c, S->cfg->admin_key))
        return srv_err_set(e, 401, "authentication_error", "invalid_api_key",
                           NULL, "this route needs the admin key (Authorization: Bearer <key>)");
    return 0;
}

// The prefix-cache tenant of a request: 0 (the shared cache) unless it names a cache_salt or the server salts by
// API key (--cache-salt-api-key). Keyed with the boot nonce, so no one can pick a salt that collides with another
// tenant's; never 0 when salted.
static uint64_t cache_salt(const srv_server *S, const char *salt, const char *key) {
    if (!salt && !key) return 0;
    uint64_t h = S->boot_nonce ^ 0x6a09e667f3bcc909ULL;
    const char *parts[2] = {salt ? salt : "", key ? key : ""};
    for (int p = 0; p < 2; p++) {
        for (const unsigned char *q = (const unsigned char *)parts[p];; q++) {
            h = (h ^ (*q + 0x100u * (unsigned)p)) * 0x100000001b3ULL; // the NUL ends each part (no ambiguity)
            h ^= h >> 29;
            if (!*q) break;
        }
    }
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    return h ? h : 1;
}

static void random_id(srv_server *S, char *out, size_t n, const char *prefix) {
    uint64_t x = (uint64_t)atomic_fetch_add(&S->counter, 1) * 0x9e3779b97f4a7c15ULL ^ S->boot_nonce;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 29;
    snprintf(out, n, "%s%016llx", prefix, (unsigned long long)x);
}

// Turns a parsed request into token ids and checks them against the model. 0, or -1 with *e.
static int prompt_ids(srv_server *S, srv_req *r, tok_ids *ids, srv_chat_prompt *chat, srv_err *e) {
    if (r->prompt_ids) {
        for (int i = 0; i < r->n_prompt_ids; i++) {
            if (r->prompt_ids[i] >= S->vocab)
                return srv_err_set(e, 400, "invalid_request_error", NULL, "prompt",
                                   "'prompt[%d]' = %d is outside the vocabulary [0, %d)", i, r->prompt_ids[i],
                                   S->vocab);
            tok_ids_push(ids, r->prompt_ids[i]);
        }
        return 0;
    }
    // Control tokens come only from the chat template: special-token text a user wrote (message content, a
    // completions prompt) is encoded as plain text unless --parse-special-tokens restores the old behaviour.
    char *text = r->prompt_text;
    tok_span *spans = NULL;
    int n_spans = 0;
    tok_enc_opts eo = {.parse_special = S->cfg->parse_special};
    if (r->kind == SRV_CHAT) { // the model's chat template (server/chat_prompt.c)
        if (srv_chat_build_prompt(S->tpl, r, chat, e)) return -1;
        text = chat->text;
        // where special-token text from the messages landed in the rendering: plain spans
        if (!S->cfg->parse_special && srv_chat_plain_spans(S->tpl, S->tok, r, chat, &spans, &n_spans, e)) {
            free(chat->text);
            chat->text = NULL;
            return -1;
        }
        eo = (tok_enc_opts){.parse_special = 1, .plain = spans, .n_plain = n_spans};
    }
    int rc = tok_encode_opts(S->tok, text, strlen(text), &eo, ids);
    free(spans);
    if (chat->text) {
        free(chat->text);
        chat->text = NULL;
    }
    if (rc) return srv_err_set(e, 400, "invalid_request_error", NULL, NULL, "%s", fd_error_msg());
    for (size_t i = 0; i < ids->n; i++)
        if (ids->ids[i] >= S->vocab)
            return srv_err_set(e, 400, "invalid_request_error", NULL, NULL,
                               "the tokenizer gave id %d, outside the model's vocabulary [0, %d)", ids->ids[i],
                               S->vocab);
    if (ids->n == 0) return srv_err_set(e, 400, "invalid_request_error", NULL, "prompt", "the prompt is empty");
    return 0;
}

// echo: the prompt as text (a token-id prompt decoded, special tokens included as the model saw them)
static char *echo_text(srv_server *S, const srv_req *r, const int32_t *ids, int n) {
    if (r->prompt_text) return fd_strdup(r->prompt_text);
    tok_stream *ts = tok_stream_new(S->tok, 0);
    srv_buf b = {0};
    size_t k;
    for (int i = 0; i < n; i++) {
        const char *p = tok_stream_push(ts, ids[i], &k);
        if (p) srv_buf_add(&b, p, k);
    }
    const char *rest = tok_stream_flush(ts, &k);
    srv_buf_add(&b, rest, k);
    tok_stream_free(ts);
    return b.p;
}

static enum MHD_Result start_generation(srv_server *S, conn_ctx *cx, struct MHD_Connection *c) {
    const srv_config *cfg = S->cfg;
    srv_req r;
    srv_err e;
    const srv_kind kind = cx->route == R_CHAT ? SRV_CHAT : SRV_COMPLETION;
    if (srv_req_parse(cx->body.p, cx->body.len, kind, &r, &e)) return send_err(cx, c, &e);
    tok_ids ids = {0};
    int rc = 0;
    if (r.model && strcmp(r.model, S->model_name))
        rc = srv_err_set(&e, 404, "invalid_request_error", "model_not_found", "model",
                         "The model `%.100s` does not exist.", r.model);
    srv_chat_prompt chat = {0};
    if (!rc) rc = prompt_ids(S, &r, &ids, &chat, &e);
    int64_t max_tokens = r.max_tokens;
    if (!rc && (int64_t)ids.n >= cfg->ctx)
        rc = srv_err_set(&e, 400, "invalid_request_error", "context_length_exceeded",
                         kind == SRV_CHAT ? "messages" : "prompt",
                         "This model's maximum context length is %lld tokens. However, your prompt has %zu tokens.",
                         (long long)cfg->ctx, ids.n);
    if (!rc && max_tokens < 0) { // OpenAI: 16 for completions; chat: what the context leaves
        max_tokens = cfg->ctx - (int64_t)ids.n;
        if (kind == SRV_COMPLETION && max_tokens > cfg->default_max_tokens) max_tokens = cfg->default_max_tokens;
    }
    if (!rc && (int64_t)ids.n + max_tokens > cfg->ctx)
        rc = srv_err_set(&e, 400, "invalid_request_error", "context_length_exceeded", "max_tokens",
                         "This model's maximum context length is %lld tokens. However, you requested %lld tokens "
                         "(%zu in the prompt, %lld for the completion).",
                         (long long)cfg->ctx, (long long)ids.n + max_tokens, ids.n, (long long)max_tokens);
    if (!rc && r.n > cfg->slots)
        rc = srv_err_set(&e, 400, "invalid_request_error", NULL, "n",
                         "'n' = %d is more than the server's %d sequence slots (--slots)", r.n, cfg->slots);
    if (rc) {
        tok_ids_free(&ids);
        srv_chat_prompt_free(&chat);
        srv_req_free(&r);
        return send_err(cx, c, &e);
    }
    srv_job *j = srv_job_new();
    random_id(S, j->id, sizeof j->id, kind == SRV_CHAT ? "chatcmpl-" : "cmpl-");
    j->kind = kind;
    j->stream = r.stream;
    j->include_usage = r.include_usage;
    j->ignore_eos = r.ignore_eos;
    j->model_name = S->model_name;
    j->prompt = ids.ids; // ownership moves to the job
    j->n_prompt = (int)ids.n;
    j->max_tokens = (int)max_tokens;
    j->temperature = r.temperature;
    j->top_p = r.top_p;
    j->top_k = r.top_k;
    if (r.has_seed) j->seed = r.seed;
    else j->seed = S->boot_nonce ^ (uint64_t)(atomic_fetch_add(&S->counter, 1) + 1) * 0x2545f4914f6cdd1dULL;
    for (int i = 0; i < r.n_stop; i++) {
        j->stop[i] = r.stop[i];
        r.stop[i] = NULL;
    }
    j->n_stop = r.n_stop;
    r.n_stop = 0;
    j->n = r.n;
    if (r.echo) j->echo = echo_text(S, &r, j->prompt, j->n_prompt);
    j->logprobs = r.logprobs;
    j->top_logprobs = r.top_logprobs;
    j->hp = (fd_host_params){.presence = (float)r.presence_penalty, .frequency = (float)r.frequency_penalty,
                             .repetition = (float)r.repetition_penalty, .min_p = (float)r.min_p, .n_bias = r.n_bias,
                             .bias_ids = r.bias_ids, .bias = r.bias};
    r.bias_ids = NULL; // ownership moves to the job
    r.bias = NULL;
    j->host = r.logprobs || r.presence_penalty != 0 || r.frequency_penalty != 0 || r.repetition_penalty != 1 ||
              r.min_p > 0 || r.n_bias > 0;
    for (int i = 0; i < r.n_bias; i++)
        if (j->hp.bias_ids[i] >= S->vocab) {
            srv_err_set(&e, 400, "invalid_request_error", NULL, "logit_bias",
                        "'logit_bias' names token %d, outside the vocabulary [0, %d)", j->hp.bias_ids[i], S->vocab);
            srv_chat_prompt_free(&chat);
            srv_req_free(&r);
            srv_job_unref(j);
            return send_err(cx, c, &e);
        }
    if (j->host && cfg->draft_dir)
        FD_INFO("request %s: sampled on the host (logprobs / penalties / min_p / logit_bias), without speculation", j->id);
    j->chat = chat; // ownership moves to the job
    if (chat.tools) j->tools = json_incref(r.tools);
    j->cache_salt = cache_salt(S, r.cache_salt, cfg->cache_salt_api_key ? bearer_token(c) : NULL);
    j->http11 = cx->http11;
    srv_req_free(&r);
    j->t_arrival = cx->t0;
    j->created = (long)time(NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->conn = c;
    cx->job = j;
    for (j->cur = 0; j->stream && j->cur < j->n; j->cur++) { // each choice's stream starts with the role / the echo
        if (kind == SRV_CHAT) srv_sse_chunk(j, NULL, 0, 1, SRV_FINISH_NONE);
        if (j->echo) srv_sse_chunk(j, j->echo, strlen(j->echo), 0, SRV_FINISH_NONE);
    }
    j->cur = 0;
    if (sched_submit(S->sched, j, &e)) return send_err(cx, c, &e);
    return job_progress(cx, c, j);
}

static enum MHD_Result simple_route(srv_server *S, conn_ctx *cx, struct MHD_Connection *c) {
    switch (cx->route) {
    case R_HEALTH:
        if (atomic_load(&S->stopping)) return fail(cx, c, 503, "server_unavailable", NULL, "shutting down");
        return send_json(cx, c, 200, json_pack("{s:s}", "status", "ok"));
    case R_MODELS:
        return send_json(cx, c, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", srv_model_json(S)));
    case R_MODEL_ID:
    case R_TOKENIZE:
    case R_DETOKENIZE: {
        json_t *o = NULL;
        srv_err e;
        int rc = cx->route == R_MODEL_ID ? srv_model_by_id(S, cx->model_id, &o, &e)
               : cx->route == R_TOKENIZE ? srv_tokenize(S, cx->body.p, cx->body.len, &o, &e)
                                         : srv_detokenize(S, cx->body.p, cx->body.len, &o, &e);
        return rc ? send_err(cx, c, &e) : send_json(cx, c, 200, o);
    }
    case R_VERSION: return send_json(cx, c, 200, srv_version_json());
    case R_METRICS: {
        char *m = srv_metrics_render(&S->met, S->model_name);
        enum MHD_Result ok = send_text(cx, c, 200, "text/plain; version=0.0.4; charset=utf-8", m);
        free(m);
        return ok;
    }
    case R_RESET: {
        srv_err e;
        if (admin_check(S, c, &e)) return send_err(cx, c, &e);
        sched_reset_prefix_cache(S->sched); // queued: answers at once, whatever the scheduler is running
        return send_json(cx, c, 200, json_pack("{s:s}", "status", "ok"));
    }
    default:
        return fail(cx, c, 404, "invalid_request_error", "not_found", "no such route");
    }
}

// A CORS preflight (OPTIONS with Access-Control-Request-Method, --allowed-origins set): answered here, before the
// API key is asked for (browsers send no credentials on a preflight). A route that exists, an allowed origin and
// method: 204 with the Access-Control-Allow-* headers; else 404 / 400 without them, so the browser refuses.
static enum MHD_Result preflight(conn_ctx *cx, struct MHD_Connection *c, int route_exists) {
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method");
    const char *headers = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    if (!route_exists) return fail(cx, c, 404, "invalid_request_error", "not_found", "no such route");
    if (!cx->allow_origin[0]) return fail(cx, c, 400, "invalid_request_error", NULL, "Disallowed CORS origin");
    if (!srv_cors_method_ok(want)) {
        cx->allow_origin[0] = 0;
        return fail(cx, c, 400, "invalid_request_error", NULL, "Disallowed CORS method");
    }
    struct MHD_Response *r = srv_cors_preflight_response(cx->allow_origin, headers);
    enum MHD_Result ok = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    cx->status = 204;
    return ok;
}

static srv_route find_route(const char *url, const char *method, int *bad_method) {
    static const struct {
        const char *url, *method;
        srv_route r;
    } k[] = {{"/v1/completions", "POST", R_COMPLETIONS}, {"/v1/chat/completions", "POST", R_CHAT},
             {"/v1/models", "GET", R_MODELS},            {"/health", "GET", R_HEALTH},
             {"/metrics", "GET", R_METRICS},             {"/reset_prefix_cache", "POST", R_RESET},
             {"/tokenize", "POST", R_TOKENIZE},          {"/detokenize", "POST", R_DETOKENIZE},
             {"/version", "GET", R_VERSION}};
    *bad_method = 0;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) { // a model id may hold '/' (org/name)
        if (!strcmp(method, "GET")) return R_MODEL_ID;
        *bad_method = 1;
        return R_NONE;
    }
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(url, k[i].url)) {
            if (!strcmp(method, k[i].method)) return k[i].r;
            *bad_method = 1;
        }
    return R_NONE;
}

enum MHD_Result srv_on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv_server *S = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) { // first call: headers only
        cx = fd_calloc(1, sizeof *cx);
        cx->t0 = fd_time_s();
        cx->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        *con_cls = cx;
        int bad_method;
        cx->route = find_route(url, method, &bad_method);
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        const char *allow = srv_cors_allow(&S->cors, origin);
        if (allow && strlen(allow) < sizeof cx->allow_origin) strcpy(cx->allow_origin, allow);
        if (srv_cors_enabled(&S->cors) && !strcmp(method, "OPTIONS") && origin &&
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method")) {
            int other; // the route the preflight asks about, by the URL alone (OPTIONS itself is no route's method)
            const int exists = find_route(url, "GET", &other) != R_NONE || find_route(url, "POST", &other) != R_NONE;
            cx->route = R_NONE;
            return preflight(cx, c, exists);
        }
        if (cx->route == R_NONE)
            return bad_method ? fail(cx, c, 405, "invalid_request_error", "method_not_allowed",
                                     "method not allowed on this route")
                              : fail(cx, c, 404, "invalid_request_error", "not_found", "no such route");
        if (cx->route == R_MODEL_ID) snprintf(cx->model_id, sizeof cx->model_id, "%s", url + 11);
        srv_err ae;
        if (srv_auth_check(S, url, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), &ae))
            return send_err(cx, c, &ae);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > S->cfg->max_body) {
            cx->too_big = 1;
            return fail(cx, c, 413, "invalid_request_error", "request_too_large",
                        "the request body exceeds the server's limit");
        }
        return MHD_YES;
    }
    if (cx->status) { // an error response is queued already: discard whatever else arrives
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        // libmicrohttpd 0.9.75 accepts a response only before the body or after all of it, not in between. So an
        // oversized body sent without Content-Length is read and dropped, and the 413 goes out at its end; past 4x
        // the limit, and for a body that trickles in slower than --recv-timeout allows, the connection is cut
        // (logged as 413 / 408), which is the only way to stop such a client. (The watchdog in conn.c enforces the same
        // deadline on connections that send nothing at all, or trickle their headers.)
        cx->received += *upload_size;
        if (cx->received > S->cfg->max_body) {
            srv_buf_free(&cx->body);
            cx->too_big = 1;
            *upload_size = 0;
            if (cx->received <= 4 * S->cfg->max_body) return MHD_YES;
            cx->status = 413;
            snprintf(cx->why, sizeof cx->why, "body over 4x --max-body: connection closed");
            return MHD_NO;
        }
        if (fd_time_s() - cx->t0 > S->cfg->recv_timeout) { // a slow (or slowloris) client
            *upload_size = 0;
            cx->status = 408;
            snprintf(cx->why, sizeof cx->why, "request body slower than --recv-timeout: connection closed");
            return MHD_NO;
        }
        srv_buf_add(&cx->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (cx->too_big)
        return fail(cx, c, 413, "invalid_request_error", "request_too_large",
                    "the request body exceeds the server's limit");
    if (cx->job) { // resumed: the scheduler admitted a stream, or has the answer
        return job_progress(cx, c, cx->job);
    }
    srv_conns_request_received(c); // the whole request is here: no receive deadline while it is answered
    if (cx->route == R_COMPLETIONS || cx->route == R_CHAT) return start_generation(S, cx, c);
    return simple_route(S, cx, c);
}

void srv_on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv_server *S = cls;
    conn_ctx *cx = *con_cls;
    if (!cx) {
        srv_conns_request_done(c); // a kept-alive connection's next request has its own deadline
        return;
    }
    if (!cx->status && !cx->job && srv_conns_was_cut(c)) { // the receive deadline cut it (conn.c): no response
        cx->status = 408;
        snprintf(cx->why, sizeof cx->why, "request not received within --recv-timeout: connection closed");
    }
    srv_conns_request_done(c);
    *con_cls = NULL;
    const double now = fd_time_s();
    int status = cx->status;
    pthread_mutex_lock(&S->met.mu);
    if (status >= 100 && status < 600) S->met.http_status[status / 100]++;
    pthread_mutex_unlock(&S->met.mu);
    static const char *const names[] = {"",      "completions", "chat",     "models",     "health",  "metrics",
                                        "reset", "model",       "tokenize", "detokenize", "version"};
    srv_job *j = cx->job;
    if (j) {
        pthread_mutex_lock(&j->mu);
        j->conn = NULL;
        if (!j->done) atomic_store(&j->cancelled, 1); // the client went away: the scheduler drops the sequence
        const double ttft = j->t_first > 0 ? j->t_first - j->t_arrival : -1;
        const double gen = j->t_done > j->t_first && j->n_completion > 1 ? (j->n_completion - 1) / (j->t_done - j->t_first) : 0;
        const char *fin = j->err.status ? "error" : srv_finish_name(j->ch[0].finish) ? srv_finish_name(j->ch[0].finish) : "abort";
        FD_INFO("request %s %s status=%d%s prompt=%d cached=%d completion=%d ttft=%.3fs decode=%.1ftok/s finish=%s "
                "total=%.3fs%s%s%s",
                j->id, names[cx->route], j->err.status ? j->err.status : status, j->stream ? " stream" : "",
                j->n_prompt, j->n_cached, j->n_completion, ttft, gen, fin, now - cx->t0,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)",
                j->err.status ? " error: " : "", j->err.status ? j->err.message : "");
        pthread_mutex_unlock(&j->mu);
        srv_job_unref(j);
    } else if (cx->route != R_HEALTH && cx->route != R_METRICS) {
        FD_INFO("request - %s status=%d total=%.3fs%s%s", names[cx->route], status, now - cx->t0,
                cx->why[0] ? " error: " : "", cx->why);
    }
    srv_buf_free(&cx->body);
    free(cx);
}
