// --allowed-origins parsing and matching (cors.h). Matching is an exact string compare, as the Fetch standard's
// Origin header is already serialized (lower-case scheme and host, no default port, no path).
#include "server/cors.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

// An origin as a browser serializes it: "*", or scheme "://" host [":" port], nothing after.
static int check_origin(const char *o) {
    if (!strcmp(o, "*")) return 0;
    const char *sep = strstr(o, "://");
    if (!sep || sep == o)
        return fd_error_set("--allowed-origins: '%s' is not an origin (expected scheme://host[:port] or *)", o);
    for (const char *p = o; *p; p++)
        if (isspace((unsigned char)*p) || (p > sep + 2 && (*p == '/' || *p == '?' || *p == '#')))
            return fd_error_set("--allowed-origins: '%s' is not an origin: browsers send scheme://host[:port] with no "
                                "path, trailing '/', query or spaces", o);
    if (!sep[3]) return fd_error_set("--allowed-origins: '%s' has no host", o);
    return 0;
}

static int add_origin(srv_cors *c, const char *o, size_t len) {
    while (len && isspace((unsigned char)*o)) o++, len--;
    while (len && isspace((unsigned char)o[len - 1])) len--;
    if (!len) return fd_error_set("--allowed-origins: an empty origin in the list");
    char *s = fd_malloc(len + 1);
    memcpy(s, o, len);
    s[len] = 0;
    if (check_origin(s)) {
        free(s);
        return -1;
    }
    if (!strcmp(s, "*")) c->any = 1;
    c->origins = realloc(c->origins, sizeof *c->origins * (size_t)(c->n + 1));
    FD_CHECK(c->origins != NULL);
    c->origins[c->n++] = s;
    return 0;
}

int srv_cors_parse(const char *spec, srv_cors *out) {
    memset(out, 0, sizeof *out);
    if (!spec) return 0;
    const char *p = spec;
    while (isspace((unsigned char)*p)) p++;
    int rc = 0;
    if (*p == '[') { // vLLM's form: a JSON list of strings
        json_error_t je;
        json_t *list = json_loads(p, 0, &je);
        if (!json_is_array(list)) rc = fd_error_set("--allowed-origins: not a JSON list of strings: %s", je.text);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) {
            if (rc) break;
            if (!json_is_string(v)) rc = fd_error_set("--allowed-origins: item %zu of the JSON list is not a string", i);
            else rc = add_origin(out, json_string_value(v), strlen(json_string_value(v)));
        }
        json_decref(list);
    } else {
        for (const char *q = p;; q++)
            if (*q == ',' || !*q) {
                if ((rc = add_origin(out, p, (size_t)(q - p)))) break;
                if (!*q) break;
                p = q + 1;
            }
    }
    if (!rc && out->n == 0) rc = fd_error_set("--allowed-origins: the list is empty");
    if (rc) srv_cors_free(out);
    return rc;
}

void srv_cors_free(srv_cors *c) {
    for (int i = 0; i < c->n; i++) free(c->origins[i]);
    free(c->origins);
    memset(c, 0, sizeof *c);
}

int srv_cors_enabled(const srv_cors *c) { return c->n > 0; }

const char *srv_cors_allow(const srv_cors *c, const char *origin) {
    if (!c->n || !origin || !origin[0]) return NULL;
    if (c->any) return "*";
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->origins[i], origin)) return origin;
    return NULL;
}

int srv_cors_method_ok(const char *method) {
    return method && (!strcmp(method, "GET") || !strcmp(method, "POST") || !strcmp(method, "OPTIONS"));
}

void srv_cors_add_headers(struct MHD_Response *r, const char *allow_origin) {
    if (!allow_origin || !allow_origin[0]) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", allow_origin);
    if (strcmp(allow_origin, "*")) MHD_add_response_header(r, "Vary", "Origin"); // the answer depends on Origin
}

struct MHD_Response *srv_cors_preflight_response(const char *allow_origin, const char *requested_headers) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    srv_cors_add_headers(r, allow_origin);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", SRV_CORS_METHODS);
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            requested_headers && requested_headers[0] ? requested_headers : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    return r;
}
