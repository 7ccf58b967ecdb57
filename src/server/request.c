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

// Request text in an error (the message, the offending field's name): one line and valid UTF-8 for the JSON
// encoder, also where the fixed-size copy cut a character in two.
static void err_text_clean(char *t) {
    for (char *p = t; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' ';
    size_t n = strlen(t), ok = tok_utf8_invalid_at(t, n);
    if (ok < n) t[ok] = 0;
}

int srv_err_set(srv_err *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    err_text_clean(e->message);
    err_text_clean(e->param);
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

// An assistant message's tool_calls, as templates want them: the arguments JSON string becomes an object (as vLLM
// does: Qwen3.5 / Qwen3-Coder templates iterate over the arguments); a string that is not a JSON object stays.
static json_t *parse_tool_calls(const json_t *tc, const char *param, srv_err *err) {
    if (!json_is_array(tc)) return BAD(param, "'%s.tool_calls' must be an array", param), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c) {
        json_t *fn = json_object_get(c, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_object(c) || !name || (args && !json_is_string(args) && !json_is_object(args))) {
            json_decref(out);
            return BAD(param, "'%s.tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": "
                              "{\"name\", \"arguments\"}}", param, i), NULL;
        }
        json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), JSON_DECODE_ANY, NULL) : NULL;
        json_t *a = json_is_object(parsed) ? json_incref(parsed) : args ? json_incref(args) : json_object();
        json_decref(parsed);
        json_t *call = json_pack("{s:s, s:{s:s, s:o}}", "type", "function", "function", "name", name, "arguments", a);
        json_t *id = json_object_get(c, "id");
        if (json_is_string(id)) json_object_set(call, "id", id);
        json_array_append_new(out, call);
    }
    return out;
}

static int parse_messages(const json_t *v, srv_req *r, srv_err *err) {
    if (!json_is_array(v)) return BAD("messages", "'messages' must be an array, not %s", json_kind(v));
    size_t n = json_array_size(v);
    if (n == 0) return BAD("messages", "'messages' must not be empty");
    if (n > 4096) return BAD("messages", "'messages' is limited to 4096 entries");
    r->msgs = fd_calloc(n, sizeof *r->msgs);
    r->chat_messages = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(v, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD(param, "'%s' must be an object, not %s", param, json_kind(m));
        const char *key;
        json_t *val;
        json_object_foreach(m, key, val) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name") &&
                strcmp(key, "reasoning_content") && strcmp(key, "reasoning") && strcmp(key, "tool_calls") &&
                strcmp(key, "tool_call_id"))
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
        if (!rc || json_is_null(rc)) rc = json_object_get(m, "reasoning"); // vLLM's newer name
        if (rc && !json_is_null(rc)) {
            if (!json_is_string(rc)) return BAD(param, "'%s.reasoning_content' must be a string", param);
            cm->reasoning_content = fd_strdup(json_string_value(rc));
        }
        json_t *jm = json_pack("{s:s, s:s}", "role", cm->role, "content", cm->content);
        json_array_append_new(r->chat_messages, jm);
        if (cm->reasoning_content) json_object_set_new(jm, "reasoning_content", json_string(cm->reasoning_content));
        static const char *const strs[] = {"name", "tool_call_id"};
        for (int k = 0; k < 2; k++) {
            json_t *v = json_object_get(m, strs[k]);
            if (!v || json_is_null(v)) continue;
            if (!json_is_string(v)) return BAD(param, "'%s.%s' must be a string", param, strs[k]);
            json_object_set(jm, strs[k], v);
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc)) {
            if (strcmp(role, "assistant")) return BAD(param, "'%s.tool_calls' is only for assistant messages", param);
            json_t *calls = parse_tool_calls(tc, param, err);
            if (!calls) return -1;
            json_object_set_new(jm, "tool_calls", calls);
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

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}]
static int parse_tools(const json_t *v, srv_req *r, srv_err *err) {
    if (!json_is_array(v)) return BAD("tools", "'tools' must be an array, not %s", json_kind(v));
    if (json_array_size(v) > 512) return BAD("tools", "'tools' is limited to 512 entries");
    size_t i;
    json_t *t;
    json_array_foreach(v, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *name = json_string_value(json_object_get(fn, "name"));
        json_t *params = json_object_get(fn, "parameters"), *desc = json_object_get(fn, "description");
        if (!json_is_object(t) || !type || strcmp(type, "function") || !json_is_object(fn) || !name || !name[0])
            return BAD("tools", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
        if ((params && !json_is_object(params) && !json_is_null(params)) || (desc && !json_is_string(desc) && !json_is_null(desc)))
            return BAD("tools", "'tools[%zu].function': 'parameters' must be an object, 'description' a string", i);
    }
    if (json_array_size(v)) r->tools = json_deep_copy(v);
    return 0;
}

// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
static int parse_tool_choice(const json_t *v, srv_req *r, srv_err *err) {
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "none")) r->tool_choice = SRV_TOOLS_NONE;
    else if (s && !strcmp(s, "auto")) r->tool_choice = SRV_TOOLS_AUTO;
    else if (s && !strcmp(s, "required")) r->tool_choice = SRV_TOOLS_REQUIRED;
    else if (json_is_object(v) && json_string_value(json_object_get(json_object_get(v, "function"), "name"))) {
        const char *name = json_string_value(json_object_get(json_object_get(v, "function"), "name"));
        int found = 0;
        size_t i;
        json_t *t;
        json_array_foreach(r->tools, i, t) found |= !strcmp(json_string_value(json_object_get(json_object_get(t, "function"), "name")), name);
        if (!found) return BAD("tool_choice", "'tool_choice' names the function '%.60s', which is not in 'tools'", name);
        r->tool_choice = SRV_TOOLS_NAMED;
        r->tool_choice_name = fd_strdup(name);
    } else {
        return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                  "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if ((r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED) && !r->tools)
        return BAD("tool_choice", "'tool_choice' %s needs 'tools'", s ? s : "with a function");
    return 0;
}

static int parse_fields(json_t *root, srv_kind kind, srv_req *r, srv_err *err) {
    static const char *const neutral[] = {"best_of", "tools", "functions", "tool_choice",
                                          "response_format", "suffix", "parallel_tool_calls", NULL};
    json_t *tool_choice = NULL;
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
            if (want_int(v, key, 1, SRV_MAX_N, &x, err)) return -1;
            r->n = (int)x;
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
            // every key reaches the template (as transformers passes them); enable_thinking is also read here
            json_t *th = json_object_get(v, "enable_thinking");
            int b;
            if (th && want_bool(th, "chat_template_kwargs.enable_thinking", &b, err)) return -1;
            if (th) r->enable_thinking = b ? CHAT_THINKING_ON : CHAT_THINKING_OFF;
            r->template_kwargs = json_deep_copy(v);
        } else if (!strcmp(key, "echo") && kind == SRV_COMPLETION) {
            if (!json_is_null(v) && want_bool(v, key, &r->echo, err)) return -1;
        } else if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty")) {
            if (!json_is_null(v) && want_num(v, key, -2, 2, key[0] == 'p' ? &r->presence_penalty : &r->frequency_penalty, err))
                return -1;
        } else if (!strcmp(key, "repetition_penalty")) {
            if (!json_is_null(v) && want_num(v, key, 0.01, 10, &r->repetition_penalty, err)) return -1;
        } else if (!strcmp(key, "min_p")) {
            if (!json_is_null(v) && want_num(v, key, 0, 1, &r->min_p, err)) return -1;
        } else if (!strcmp(key, "logprobs")) {
            if (json_is_null(v)) continue;
            if (kind == SRV_CHAT) {
                if (want_bool(v, key, &r->logprobs, err)) return -1;
            } else {
                if (want_int(v, key, 0, 5, &x, err)) return -1;
                r->logprobs = x > 0 || json_is_integer(v);
                r->top_logprobs = (int)x;
            }
        } else if (!strcmp(key, "top_logprobs") && kind == SRV_CHAT) {
            if (json_is_null(v)) continue;
            if (want_int(v, key, 0, 20, &x, err)) return -1;
            r->top_logprobs = (int)x;
        } else if (!strcmp(key, "logit_bias")) {
            if (json_is_null(v)) continue;
            if (!json_is_object(v)) return BAD(key, "'logit_bias' must be an object of token id -> bias");
            if (json_object_size(v) > 1024) return BAD(key, "'logit_bias' is limited to 1024 entries");
            r->bias_ids = fd_malloc((json_object_size(v) + 1) * sizeof *r->bias_ids);
            r->bias = fd_malloc((json_object_size(v) + 1) * sizeof *r->bias);
            const char *k2;
            json_t *v2;
            json_object_foreach(v, k2, v2) {
                char *end;
                long id = strtol(k2, &end, 10);
                double b;
                if (!k2[0] || *end || id < 0 || id > INT32_MAX)
                    return BAD(key, "'logit_bias' keys must be token ids, got '%.40s'", k2);
                if (want_num(v2, "logit_bias values", -100, 100, &b, err)) return -1;
                r->bias_ids[r->n_bias] = (int32_t)id;
                r->bias[r->n_bias++] = (float)b;
            }
        } else if (!strcmp(key, "tools") && kind == SRV_CHAT) {
            if (json_is_null(v)) continue;
            if (parse_tools(v, r, err)) return -1;
        } else if (!strcmp(key, "tool_choice") && kind == SRV_CHAT) {
            if (!json_is_null(v)) tool_choice = v;
        } else if (!strcmp(key, "parallel_tool_calls") && kind == SRV_CHAT) {
            int b;
            if (!json_is_null(v) && want_bool(v, key, &b, err)) return -1;
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
    if (tool_choice && parse_tool_choice(tool_choice, r, err)) return -1;
    if (kind == SRV_COMPLETION && !have_prompt) return BAD("prompt", "'prompt' is required");
    if (kind == SRV_CHAT && !have_msgs) return BAD("messages", "'messages' is required");
    if (r->include_usage && !r->stream) return BAD("stream_options", "'stream_options' needs 'stream': true");
    if (r->echo && r->logprobs) return BAD("echo", "'echo' with 'logprobs' (the prompt's logprobs) is not supported");
    if (r->top_logprobs && !r->logprobs) return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return 0;
}

int srv_req_parse(const char *body, size_t len, srv_kind kind, srv_req *r, srv_err *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->temperature = 1.0;
    r->top_p = 1.0;
    r->enable_thinking = CHAT_THINKING_DEFAULT;
    r->repetition_penalty = 1.0;
    r->n = 1;
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
    json_decref(r->chat_messages);
    json_decref(r->tools);
    json_decref(r->template_kwargs);
    free(r->tool_choice_name);
    free(r->bias_ids);
    free(r->bias);
    free(r->model);
    free(r->cache_salt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}
