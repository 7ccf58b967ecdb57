// OpenAI request parsing and validation (see request.h).
#include "server/request.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/tokenizer.h"

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    // messages quote request text: keep them one line and valid UTF-8 for the JSON encoder
    for (char *p = e->message; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' ';
    size_t n = strlen(e->message), ok = tok_utf8_invalid_at(e->message, n);
    if (ok < n) e->message[ok] = 0;
    return -1;
}

char *srv_err_json(const srv_err *e) {
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type", e->type, "param",
                          e->param[0] ? json_string(e->param) : json_null(), "code",
                          e->code ? json_string(e->code) : json_null());
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    FD_CHECK(s != NULL);
    return s;
}

#define BAD(param, ...) srv_err_set(err, 400, "invalid_request_error", NULL, param, __VA_ARGS__)

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

static int want_int(const json_t *v, const char *name, long long lo, long long hi, long long *out, srv_err *err) {
    if (!json_is_integer(v)) return BAD(name, "'%s' must be an integer, not %s", name, json_kind(v));
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(name, "'%s' must be in [%lld, %lld], got %lld", name, lo, hi, x);
    *out = x;
    return 0;
}

static int want_num(const json_t *v, const char *name, double lo, double hi, double *out, srv_err *err) {
    if (!json_is_number(v)) return BAD(name, "'%s' must be a number, not %s", name, json_kind(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return BAD(name, "'%s' must be in [%g, %g], got %g", name, lo, hi, x);
    *out = x;
    return 0;
}

static int want_bool(const json_t *v, const char *name, int *out, srv_err *err) {
    if (!json_is_boolean(v)) return BAD(name, "'%s' must be a boolean, not %s", name, json_kind(v));
    *out = json_is_true(v);
    return 0;
}

static int parse_stop(const json_t *v, srv_req *r, srv_err *err) {
    const json_t *one[1] = {v};
    size_t n = 1;
    if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > SRV_MAX_STOP) return BAD("stop", "'stop' takes at most %d sequences, got %zu", SRV_MAX_STOP, n);
    } else if (!json_is_string(v)) {
        return BAD("stop", "'stop' must be a string or an array of strings, not %s", json_kind(v));
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        if (!json_is_string(s)) return BAD("stop", "'stop' entries must be strings, not %s", json_kind(s));
        size_t len = json_string_length(s);
        if (len == 0) return BAD("stop", "'stop' sequences must not be empty");
        if (len > SRV_MAX_STOP_LEN) return BAD("stop", "'stop' sequences are limited to %d bytes", SRV_MAX_STOP_LEN);
        if (strlen(json_string_value(s)) != len) return BAD("stop", "'stop' sequences must not contain NUL");
        r->stop[r->n_stop++] = fd_strdup(json_string_value(s));
    }
    return 0;
}

// Text of a message's content: a string, null (assistant), or an array of {"type":"text","text":...} parts.
static int content_text(const json_t *c, int i, char **out, srv_err *err) {
    char param[48];
    snprintf(param, sizeof param, "messages[%d].content", i);
    if (json_is_null(c) || !c) {
        *out = fd_strdup("");
        return 0;
    }
    if (json_is_string(c)) {
        if (strlen(json_string_value(c)) != json_string_length(c)) return BAD(param, "'%s' contains NUL", param);
        *out = fd_strdup(json_string_value(c));
        return 0;
    }
    if (!json_is_array(c)) return BAD(param, "'%s' must be a string or an array of text parts", param);
    size_t cap = 64, len = 0;
    char *s = fd_malloc(cap);
    s[0] = 0;
    size_t k;
    json_t *part;
    json_array_foreach(c, k, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *t = json_object_get(part, "text");
        if (!json_is_object(part) || !type || strcmp(type, "text") || !json_is_string(t) ||
            json_object_size(part) != 2) {
            free(s);
            return BAD(param, "'%s' parts must be {\"type\": \"text\", \"text\": ...} (only text is supported)", param);
        }
        size_t tl = json_string_length(t);
        if (strlen(json_string_value(t)) != tl) {
            free(s);
            return BAD(param, "'%s' contains NUL", param);
        }
        while (len + tl + 1 > cap) s = fd_realloc(s, cap *= 2);
        memcpy(s + len, json_string_value(t), tl + 1);
        len += tl;
    }
    *out = s;
    return 0;
}

static int parse_messages(const json_t *v, srv_req *r, srv_err *err) {
    if (!json_is_array(v)) return BAD("messages", "'messages' must be an array, not %s", json_kind(v));
    size_t n = json_array_size(v);
    if (n == 0) return BAD("messages", "'messages' must not be empty");
    if (n > 4096) return BAD("messages", "'messages' is limited to 4096 entries");
    r->msgs = fd_calloc(n, sizeof *r->msgs);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD(param, "'%s' must be an object, not %s", param, json_kind(m));
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name") &&
                strcmp(key, "reasoning_content"))
                return BAD(param, "'%s' has an unsupported field '%.40s'", param, key);
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) return BAD(param, "'%s.role' must be a string", param);
        if (!strcmp(role, "developer")) role = "system"; // OpenAI's newer name for the system role
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool"))
            return BAD(param, "'%s.role' must be system, developer, user, assistant or tool, got '%.40s'", param, role);
        json_t *content = json_object_get(m, "content");
        if (!content && strcmp(role, "assistant")) return BAD(param, "'%s.content' is required", param);
        chat_msg *cm = &r->msgs[r->n_msgs++];
        cm->role = fd_strdup(role);
        if (content_text(content, (int)i, (char **)&cm->content, err)) return -1;
        json_t *rc = json_object_get(m, "reasoning_content");
        if (rc && !json_is_null(rc)) {
            if (!json_is_string(rc)) return BAD(param, "'%s.reasoning_content' must be a string", param);
            cm->reasoning_content = fd_strdup(json_string_value(rc));
        }
    }
    return 0;
}

static int parse_prompt(const json_t *v, srv_req *r, srv_err *err) {
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0); // a batch of one prompt
    if (json_is_string(v)) {
        if (json_string_length(v) == 0) return BAD("prompt", "'prompt' must not be empty");
        if (strlen(json_string_value(v)) != json_string_length(v)) return BAD("prompt", "'prompt' contains NUL");
        r->prompt_text = fd_strdup(json_string_value(v));
        return 0;
    }
    if (!json_is_array(v)) return BAD("prompt", "'prompt' must be a string or an array of token ids, not %s",
                                      json_kind(v));
    size_t n = json_array_size(v);
    if (n == 0) return BAD("prompt", "'prompt' must not be empty");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return BAD("prompt", "only one prompt per request is supported (got a batch of %zu)", n);
    if (n > (1u << 24)) return BAD("prompt", "'prompt' has too many token ids");
    r->prompt_ids = fd_malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return BAD("prompt", "'prompt[%zu]' is not a token id (a non-negative integer)", i);
        r->prompt_ids[r->n_prompt_ids++] = (int32_t)json_integer_value(x);
    }
    return 0;
}

// A field we accept only at its neutral value (we cannot honour anything else).
static int neutral_only(const char *key, const json_t *v, srv_err *err) {
    if (json_is_null(v)) return 0;
    if ((!strcmp(key, "frequency_penalty") || !strcmp(key, "presence_penalty")) && json_is_number(v) &&
        json_number_value(v) == 0)
        return 0;
    if ((!strcmp(key, "logprobs") || !strcmp(key, "echo")) && json_is_false(v)) return 0;
    if ((!strcmp(key, "logprobs") || !strcmp(key, "top_logprobs")) && json_is_integer(v) && json_integer_value(v) == 0)
        return 0;
    if (!strcmp(key, "best_of") && json_is_integer(v) && json_integer_value(v) == 1) return 0;
    if (!strcmp(key, "logit_bias") && json_is_object(v) && json_object_size(v) == 0) return 0;
    if ((!strcmp(key, "tools") || !strcmp(key, "functions")) && json_is_array(v) && json_array_size(v) == 0) return 0;
    if (!strcmp(key, "tool_choice") && json_is_string(v) && !strcmp(json_string_value(v), "none")) return 0;
    if (!strcmp(key, "response_format") && json_is_object(v) &&
        !strcmp(json_string_value(json_object_get(v, "type")) ? json_string_value(json_object_get(v, "type")) : "",
                "text"))
        return 0;
    return BAD(key, "'%s' is not supported by this server (only its default value is accepted)", key);
}

static int parse_fields(json_t *root, srv_kind kind, srv_req *r, srv_err *err) {
    static const char *const neutral[] = {"frequency_penalty", "presence_penalty", "logprobs", "top_logprobs",
                                          "echo", "best_of", "logit_bias", "tools", "functions", "tool_choice",
                                          "response_format", "suffix", "parallel_tool_calls", NULL};
    const char *key;
    json_t *v;
    long long x;
    int have_prompt = 0, have_msgs = 0;
    json_object_foreach(root, key, v) {
        int known = 1;
        if (!strcmp(key, "model")) {
            if (!json_is_string(v)) return BAD(key, "'model' must be a string, not %s", json_kind(v));
            r->model = fd_strdup(json_string_value(v));
        } else if (!strcmp(key, "prompt") && kind == SRV_COMPLETION) {
            have_prompt = 1;
            if (parse_prompt(v, r, err)) return -1;
        } else if (!strcmp(key, "messages") && kind == SRV_CHAT) {
            have_msgs = 1;
            if (parse_messages(v, r, err)) return -1;
        } else if (!strcmp(key, "max_tokens") || (!strcmp(key, "max_completion_tokens") && kind == SRV_CHAT)) {
            if (json_is_null(v)) continue;
            if (!json_is_integer(v)) return BAD(key, "'%s' must be an integer, not %s", key, json_kind(v));
            if (json_integer_value(v) < 1)
                return BAD(key, "'%s' must be at least 1, got %lld", key, (long long)json_integer_value(v));
            if (want_int(v, key, 1, INT_MAX, &x, err)) return -1;
            r->max_tokens = (int)x;
        } else if (!strcmp(key, "temperature")) {
            if (!json_is_null(v) && want_num(v, key, 0, 2, &r->temperature, err)) return -1;
        } else if (!strcmp(key, "top_p")) {
            if (!json_is_null(v) && want_num(v, key, 0, 1, &r->top_p, err)) return -1;
            if (r->top_p <= 0) return BAD(key, "'top_p' must be in (0, 1]");
        } else if (!strcmp(key, "top_k")) {
            if (!json_is_null(v) && want_int(v, key, -1, INT_MAX, &x, err)) return -1;
            r->top_k = json_is_null(v) || x < 0 ? 0 : (int)x;
        } else if (!strcmp(key, "seed")) {
            if (json_is_null(v)) continue;
            if (want_int(v, key, LLONG_MIN, LLONG_MAX, &x, err)) return -1;
            r->seed = (uint64_t)x;
            r->has_seed = 1;
        } else if (!strcmp(key, "stop")) {
            if (!json_is_null(v) && parse_stop(v, r, err)) return -1;
        } else if (!strcmp(key, "stream")) {
            if (!json_is_null(v) && want_bool(v, key, &r->stream, err)) return -1;
        } else if (!strcmp(key, "stream_options")) {
            if (json_is_null(v)) continue;
            if (!json_is_object(v)) return BAD(key, "'stream_options' must be an object");
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                if (strcmp(k2, "include_usage"))
                    return BAD(key, "'stream_options' has an unsupported field '%.40s'", k2);
                if (want_bool(v2, "stream_options.include_usage", &r->include_usage, err)) return -1;
            }
        } else if (!strcmp(key, "n")) {
            if (json_is_null(v)) continue;
            if (want_int(v, key, 1, 1, &x, err)) return BAD(key, "only 'n': 1 is supported");
        } else if (!strcmp(key, "ignore_eos")) {
            if (!json_is_null(v) && want_bool(v, key, &r->ignore_eos, err)) return -1;
        } else if (!strcmp(key, "cache_salt")) { // vLLM: requests share prefix-cache blocks only with equal salts
            if (json_is_null(v)) continue;
            if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 1024 ||
                strlen(json_string_value(v)) != json_string_length(v))
                return BAD(key, "'cache_salt' must be a non-empty string of at most 1024 bytes, without NUL");
            r->cache_salt = fd_strdup(json_string_value(v));
        } else if (!strcmp(key, "user")) {
            if (!json_is_string(v) && !json_is_null(v)) return BAD(key, "'user' must be a string");
        } else if (!strcmp(key, "chat_template_kwargs") && kind == SRV_CHAT) {
            if (json_is_null(v)) continue;
            if (!json_is_object(v)) return BAD(key, "'chat_template_kwargs' must be an object");
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                int b;
                if (strcmp(k2, "enable_thinking"))
                    return BAD(key, "'chat_template_kwargs' has an unsupported field '%.40s'", k2);
                if (want_bool(v2, "chat_template_kwargs.enable_thinking", &b, err)) return -1;
                r->enable_thinking = b ? CHAT_THINKING_ON : CHAT_THINKING_OFF;
            }
        } else {
            known = 0;
            for (int i = 0; neutral[i]; i++)
                if (!strcmp(key, neutral[i])) {
                    if (neutral_only(key, v, err)) return -1;
                    known = 1;
                }
        }
        if (!known) return BAD(key, "Unrecognized request argument supplied: %.60s", key);
    }
    if (kind == SRV_COMPLETION && !have_prompt) return BAD("prompt", "'prompt' is required");
    if (kind == SRV_CHAT && !have_msgs) return BAD("messages", "'messages' is required");
    if (r->include_usage && !r->stream) return BAD("stream_options", "'stream_options' needs 'stream': true");
    return 0;
}

int srv_req_parse(const char *body, size_t len, srv_kind kind, srv_req *r, srv_err *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->enable_thinking = CHAT_THINKING_DEFAULT;
    if (len == 0) return BAD(NULL, "The request body is empty (a JSON object is required)");
    size_t bad = tok_utf8_invalid_at(body, len);
    if (bad < len) return BAD(NULL, "The request body is not valid UTF-8 (byte %zu)", bad);
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!root) return BAD(NULL, "Invalid JSON body: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = 0;
    if (!json_is_object(root)) rc = BAD(NULL, "The request body must be a JSON object, not %s", json_kind(root));
    else rc = parse_fields(root, kind, r, err);
    json_decref(root);
    if (rc) srv_req_free(r);
    return rc;
}

void srv_req_free(srv_req *r) {
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_msgs; i++) {
        free((char *)r->msgs[i].role);
        free((char *)r->msgs[i].content);
        free((char *)r->msgs[i].reasoning_content);
    }
    free(r->msgs);
    free(r->model);
    free(r->cache_salt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
