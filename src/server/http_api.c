// The operational routes beside generation (GET /v1/models/{id}, POST /tokenize, POST /detokenize, GET /version)
// and API-key authentication. Pure request -> JSON functions; http.c does the HTTP.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server/http.h"
#include "server/http_api.h"

#define FD_SERVER_VERSION "0.1.0"

// Constant time in the key's content (not in its length, which --api-key fixes): every byte of the longer input is
// looked at, whatever matched before.
static int same_secret(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b), n = na > nb ? na : nb;
    unsigned diff = (unsigned)(na ^ nb);
    for (size_t i = 0; i < n; i++) diff |= (unsigned)((i < na ? (unsigned char)a[i] : 0) ^ (i < nb ? (unsigned char)b[i] : 0));
    return diff == 0;
}

int srv_auth_check(const srv_server *S, const char *url, const char *authorization, srv_err *e) {
    const char *key = S->cfg->api_key;
    if (!key || !key[0]) return 0;
    // as vLLM: the OpenAI routes and the tokenizer routes need the key; /health, /metrics, /version do not
    if (strncmp(url, "/v1/", 4) && strcmp(url, "/tokenize") && strcmp(url, "/detokenize")) return 0;
    const char *given = authorization && !strncmp(authorization, "Bearer ", 7) ? authorization + 7 : "";
    if (same_secret(given, key)) return 0;
    return srv_err_set(e, 401, "invalid_request_error", "invalid_api_key", NULL,
                       "Incorrect API key provided (send it as 'Authorization: Bearer <key>')");
}

json_t *srv_model_json(const srv_server *S) {
    return json_pack("{s:s, s:s, s:I, s:s, s:I, s:s}", "id", S->model_name, "object", "model", "created",
                     (json_int_t)S->boot_time, "owned_by", "flashdelta", "max_model_len", (json_int_t)S->cfg->ctx,
                     "root", S->cfg->model_dir);
}

int srv_model_by_id(const srv_server *S, const char *id, json_t **out, srv_err *e) {
    if (strcmp(id, S->model_name))
        return srv_err_set(e, 404, "invalid_request_error", "model_not_found", "model",
                           "The model `%.100s` does not exist.", id);
    *out = srv_model_json(S);
    return 0;
}

json_t *srv_version_json(void) { return json_pack("{s:s}", "version", FD_SERVER_VERSION); }

#define BAD(...) srv_err_set(e, 400, "invalid_request_error", NULL, __VA_ARGS__)

static json_t *load_body(const char *body, size_t len, srv_err *e) {
    json_error_t je;
    json_t *root = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!json_is_object(root)) {
        json_decref(root);
        BAD(NULL, "The request body must be a JSON object");
        return NULL;
    }
    return root;
}

// POST /tokenize (vLLM's): {"prompt": "..."} or {"messages": [...], "add_generation_prompt": true, "tools",
// "chat_template_kwargs"} -> {"count", "max_model_len", "tokens"}
int srv_tokenize(const srv_server *S, const char *body, size_t len, json_t **out, srv_err *e) {
    json_t *root = load_body(body, len, e);
    if (!root) return -1;
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "model") && strcmp(key, "prompt") && strcmp(key, "messages") && strcmp(key, "tools") &&
            strcmp(key, "chat_template_kwargs") && strcmp(key, "add_generation_prompt") &&
            strcmp(key, "add_special_tokens") && strcmp(key, "tool_choice"))
            rc = BAD(key, "Unrecognized request argument supplied: %.60s", key);
    }
    const char *model = json_string_value(json_object_get(root, "model"));
    if (!rc && model && strcmp(model, S->model_name))
        rc = srv_err_set(e, 404, "invalid_request_error", "model_not_found", "model", "The model `%.100s` does not exist.",
                         model);
    json_t *prompt = json_object_get(root, "prompt"), *msgs = json_object_get(root, "messages");
    if (!rc && !!json_is_string(prompt) == !!msgs)
        rc = BAD("prompt", "give either 'prompt' (a string) or 'messages'");
    char *text = NULL;
    if (!rc && msgs) { // the chat prompt, exactly as /v1/chat/completions builds it
        json_t *req = json_object();
        static const char *const keep[] = {"messages", "tools", "chat_template_kwargs", "tool_choice", NULL};
        for (int i = 0; keep[i]; i++)
            if (json_object_get(root, keep[i])) json_object_set(req, keep[i], json_object_get(root, keep[i]));
        char *rb = json_dumps(req, JSON_COMPACT);
        json_decref(req);
        srv_req r;
        if (srv_req_parse(rb, strlen(rb), SRV_CHAT, &r, e)) rc = -1;
        free(rb);
        if (!rc) {
            srv_chat_prompt p;
            rc = srv_chat_build_prompt(S->tpl, &r, &p, e);
            json_t *agp = json_object_get(root, "add_generation_prompt");
            if (!rc && json_is_false(agp)) { // the prompt without the assistant turn's opening
                srv_chat_prompt_free(&p);
                char *plain = chat_template_apply(S->tpl, r.chat_messages, r.tools, NULL, r.template_kwargs, 0);
                if (!plain) rc = BAD("messages", "%s", fd_error_msg());
                text = plain;
            } else if (!rc) {
                text = p.text;
                p.text = NULL;
                srv_chat_prompt_free(&p);
            }
            srv_req_free(&r);
        }
    } else if (!rc) {
        text = fd_strdup(json_string_value(prompt));
    }
    json_decref(root);
    if (rc) {
        free(text);
        return -1;
    }
    tok_ids ids = {0};
    if (tok_encode(S->tok, text, strlen(text), &ids)) {
        free(text);
        return BAD("prompt", "%s", fd_error_msg());
    }
    free(text);
    json_t *toks = json_array();
    for (size_t i = 0; i < ids.n; i++) json_array_append_new(toks, json_integer(ids.ids[i]));
    *out = json_pack("{s:I, s:I, s:o}", "count", (json_int_t)ids.n, "max_model_len", (json_int_t)S->cfg->ctx, "tokens",
                     toks);
    tok_ids_free(&ids);
    return 0;
}

// POST /detokenize: {"tokens": [ids]} -> {"prompt": text}. An id the tokenizer cannot decode is a 400.
int srv_detokenize(const srv_server *S, const char *body, size_t len, json_t **out, srv_err *e) {
    json_t *root = load_body(body, len, e);
    if (!root) return -1;
    json_t *toks = json_object_get(root, "tokens");
    const char *model = json_string_value(json_object_get(root, "model"));
    int rc = 0;
    if (model && strcmp(model, S->model_name))
        rc = srv_err_set(e, 404, "invalid_request_error", "model_not_found", "model", "The model `%.100s` does not exist.",
                         model);
    else if (!json_is_array(toks)) rc = BAD("tokens", "'tokens' must be an array of token ids");
    tok_stream *ts = rc ? NULL : tok_stream_new(S->tok, 1);
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; !rc && i < json_array_size(toks); i++) {
        json_t *t = json_array_get(toks, i);
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        size_t k = 0;
        const char *piece = id >= 0 && id < S->vocab ? tok_stream_push(ts, (int32_t)id, &k) : NULL;
        if (!piece) {
            rc = BAD("tokens", "'tokens[%zu]' is not a token id this tokenizer can decode", i);
            break;
        }
        if (n + k + 1 > cap) text = fd_realloc(text, cap = (n + k + 1) * 2);
        memcpy(text + n, piece, k);
        n += k;
    }
    if (!rc) {
        size_t k = 0;
        const char *rest = tok_stream_flush(ts, &k);
        if (n + k + 1 > cap) text = fd_realloc(text, cap = n + k + 1);
        if (k) memcpy(text + n, rest, k);
        n += k;
        *out = json_pack("{s:s%}", "prompt", text ? text : "", n);
    }
    free(text);
    tok_stream_free(ts);
    json_decref(root);
    return rc;
}
