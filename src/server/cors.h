// Optional CORS (--allowed-origins): which browser origins may call the server, and the headers that say so.
// Off by default: no Access-Control-* header is ever sent and OPTIONS stays a 405, as before the option existed.
#ifndef FD_SERVER_CORS_H
#define FD_SERVER_CORS_H
#include <microhttpd.h>
#include <stddef.h>

typedef struct {
    int any;        // "*": every origin (answered with "Access-Control-Allow-Origin: *")
    char **origins; // exact origins, "scheme://host[:port]" as browsers send them
    int n;
} srv_cors;

// spec: a comma-separated list ("https://a.example,http://localhost:3000", "*") or vLLM's JSON list
// ('["https://a.example"]'). 0, or -1 with fd_error_set for an origin no browser sends (a path, a trailing '/',
// no scheme, spaces inside, an empty list). NULL spec: CORS off.
int srv_cors_parse(const char *spec, srv_cors *out);
void srv_cors_free(srv_cors *c);
int srv_cors_enabled(const srv_cors *c);
// The Access-Control-Allow-Origin value for a request's Origin header: "*", the origin itself, or NULL (not allowed,
// no Origin, or CORS off).
const char *srv_cors_allow(const srv_cors *c, const char *origin);
// The methods a preflight may ask for; 1 if method is one of them.
#define SRV_CORS_METHODS "GET, POST, OPTIONS"
int srv_cors_method_ok(const char *method);
// Access-Control-Allow-Origin (and Vary: Origin unless "*") on a response; nothing when allow_origin is "".
void srv_cors_add_headers(struct MHD_Response *r, const char *allow_origin);
// An allowed preflight's empty answer: the origin, the methods, the requested headers echoed (any header is
// allowed, as vLLM's default allowed_headers ["*"]), a 600 s cache. requested_headers may be NULL.
struct MHD_Response *srv_cors_preflight_response(const char *allow_origin, const char *requested_headers);
#endif
