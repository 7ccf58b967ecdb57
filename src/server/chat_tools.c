// Qwen tool calls in the model's text (see chat.h): the hermes JSON form and the XML <function=...> form.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/chat.h"

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}
static int at(const char *s, size_t n, size_t i, const char *tag) {
    size_t k = strlen(tag);
    return i + k <= n && !memcmp(s + i, tag, k);
}
static const char *find_from(const char *s, size_t n, size_t i, const char *tag) {
    return i <= n ? memmem(s + i, n - i, tag, strlen(tag)) : NULL;
}

// The JSON Schema type of parameter `param` of function `fn` in the request's tools ("" if not given).
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        json_t *ty = json_object_get(json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"),
                                                     param), "type");
        if (json_is_string(ty)) return json_string_value(ty);
        if (json_is_array(ty) && json_is_string(json_array_get(ty, 0))) return json_string_value(json_array_get(ty, 0));
    }
    return "";
}

// A parameter's text as a JSON value: a "string" parameter stays text; others are read as JSON when they are
// (numbers, booleans, objects, arrays; Python's True/False/None too), else kept as text.
static json_t *typed_value(const char *v, size_t n, const char *type) {
    if (strcmp(type, "string")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        if (j) return j;
        if (n == 4 && !memcmp(v, "True", 4)) return json_true();
        if (n == 5 && !memcmp(v, "False", 5)) return json_false();
        if (n == 4 && !memcmp(v, "None", 4)) return json_null();
    }
    return json_stringn(v, n);
}

// <function=NAME> (<parameter=P>\nV\n</parameter>)* </function>, from s[*i] (just past "<function=").
static json_t *parse_xml_call(const char *s, size_t n, size_t *i, const json_t *tools, char **name) {
    const char *gt = find_from(s, n, *i, ">");
    if (!gt || gt == s + *i || gt - (s + *i) > 256 || memchr(s + *i, '\n', (size_t)(gt - (s + *i)))) return NULL;
    *name = fd_sprintf("%.*s", (int)(gt - (s + *i)), s + *i);
    json_t *args = json_object();
    size_t k = (size_t)(gt - s) + 1;
    for (;;) {
        k = skip_ws(s, n, k);
        if (at(s, n, k, "</function>")) {
            *i = k + strlen("</function>");
            return args;
        }
        if (!at(s, n, k, "<parameter=")) break;
        k += strlen("<parameter=");
        const char *pgt = find_from(s, n, k, ">");
        if (!pgt || pgt == s + k || pgt - (s + k) > 256 || memchr(s + k, '\n', (size_t)(pgt - (s + k)))) break;
        char *pname = fd_sprintf("%.*s", (int)(pgt - (s + k)), s + k);
        size_t v0 = (size_t)(pgt - s) + 1;
        // the value ends at </parameter>, or (when the model leaves it out) at the next parameter or </function>
        const char *e1 = find_from(s, n, v0, "</parameter>"), *e2 = find_from(s, n, v0, "<parameter="),
                   *e3 = find_from(s, n, v0, "</function>");
        const char *ve = NULL;
        for (const char *const *c = (const char *const[]){e1, e2, e3}, *const *stop = c + 3; c < stop; c++)
            if (*c && (!ve || *c < ve)) ve = *c;
        if (!ve) {
            free(pname);
            break;
        }
        size_t v1 = (size_t)(ve - s);
        size_t a = v0, b = v1;
        if (a < b && s[a] == '\n') a++;
        if (b > a && s[b - 1] == '\n') b--;
        json_object_set_new(args, pname, typed_value(s + a, b - a, param_type(tools, *name, pname)));
        free(pname);
        k = v1 + (ve == e1 ? strlen("</parameter>") : 0);
    }
    json_decref(args);
    free(*name);
    *name = NULL;
    return NULL;
}

// {"name": ..., "arguments": {...}} (or "parameters"), from s[*i].
static json_t *parse_json_call(const char *s, size_t n, size_t *i, char **name) {
    json_error_t e;
    json_t *o = json_loadb(s + *i, n - *i, JSON_DISABLE_EOF_CHECK, &e);
    if (!json_is_object(o)) {
        json_decref(o);
        return NULL;
    }
    *i += (size_t)e.position;
    const char *nm = json_string_value(json_object_get(o, "name"));
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    if (parsed) args = parsed;
    if (!nm || !nm[0] || (args && !json_is_object(args))) {
        json_decref(parsed);
        json_decref(o);
        return NULL;
    }
    *name = fd_strdup(nm);
    json_t *out = args ? json_incref(args) : json_object();
    json_decref(parsed);
    json_decref(o);
    return out;
}

int srv_tool_calls_parse(const char *text, size_t n, const json_t *tools, srv_tool_call **calls, int *n_calls,
                         size_t *end) {
    *calls = NULL;
    *n_calls = 0;
    size_t i = 0, last = 0;
    int cap = 0;
    for (;;) {
        i = skip_ws(text, n, i);
        int wrapped = at(text, n, i, "<tool_call>");
        if (!wrapped && !at(text, n, i, "<function=")) break;
        size_t k = wrapped ? skip_ws(text, n, i + strlen("<tool_call>")) : i;
        char *name = NULL;
        json_t *args = NULL;
        if (at(text, n, k, "<function=")) {
            k += strlen("<function=");
            args = parse_xml_call(text, n, &k, tools, &name);
        } else if (wrapped && k < n && text[k] == '{') {
            args = parse_json_call(text, n, &k, &name);
        }
        if (args && wrapped) {
            k = skip_ws(text, n, k);
            if (!at(text, n, k, "</tool_call>")) {
                json_decref(args);
                free(name);
                args = NULL;
            } else {
                k += strlen("</tool_call>");
            }
        }
        if (!args) break; // a malformed or truncated call: the caller keeps the text
        char *a = json_dumps(args, JSON_COMPACT);
        json_decref(args);
        FD_CHECK(a != NULL);
        if (*n_calls == cap) {
            cap = cap ? cap * 2 : 4;
            *calls = fd_realloc(*calls, (size_t)cap * sizeof **calls);
        }
        (*calls)[*n_calls].name = name;
        (*calls)[(*n_calls)++].arguments = a;
        i = last = k;
    }
    // everything after the calls must be plain text: a second, broken call means the whole is not well formed
    if (*n_calls == 0 || find_from(text, n, last, "<tool_call>") || find_from(text, n, last, "<function=")) {
        srv_tool_calls_free(*calls, *n_calls);
        *calls = NULL;
        *n_calls = 0;
        return -1;
    }
    *end = last;
    return 0;
}

void srv_tool_calls_free(srv_tool_call *calls, int n) {
    for (int i = 0; i < n; i++) {
        free(calls[i].name);
        free(calls[i].arguments);
    }
    free(calls);
}
