// Operations of `flashdelta serve` beyond the OpenAI routes: scheduler limits from the configuration, CORS, IPv6
// listening, the vLLM-named metrics (tests/test_server_http.c has the rig).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/cors.h"
#include "server_rig.h"
#include "test.h"

// Past the scheduler's old fixed limits (--slots at most 256; arrays of 256 decoding slots and admitted jobs per
// step): 300 slots, 300 concurrent streams, each answer checked against `flashdelta generate`.
static void many_slots_body(srv_proc *p) {
    run_node(p, "load.mjs", "FD_CLIENTS=300 FD_REQUESTS=1 FD_TIME_LIMIT=240");
    EXPECT(metric(p, "flashdelta:num_requests_running{") == 0 && metric(p, "flashdelta:num_requests_waiting{") == 0);
    EXPECT(metric(p, "flashdelta:request_success_total{model_name=\"qwen35_dense_tied\",finished_reason=\"length\"}") +
                   metric(p, "flashdelta:request_success_total{model_name=\"qwen35_dense_tied\",finished_reason=\"stop\"}") ==
               300);
}
TEST(server_ops_300_slots_past_old_limits) {
    with_server("--ctx 256 --slots 300 --max-queue 400 --max-conns-per-ip 400 --http-threads 8", many_slots_body);
}

// ---- CORS (--allowed-origins) ----

// One curl request with extra curl arguments (headers): the status, and the response headers in *headers,
// lower-cased (header names are case-insensitive). body: NULL or JSON, POSTed from a file.
static int head_req(const srv_proc *p, const char *method, const char *path, const char *extra, const char *body,
                    char **headers) {
    char *hf = fd_sprintf("%s/headers", p->dir), *bf = fd_sprintf("%s/body", p->dir);
    if (body) {
        FILE *f = fopen(bf, "wb");
        ASSERT(f != NULL);
        fputs(body, f);
        fclose(f);
    }
    char *cmd = fd_sprintf("curl -s --max-time 60 -X %s -o /dev/null -D %s -w '%%{http_code}' %s %s%s "
                           "'http://127.0.0.1:%d%s'",
                           method, hf, extra ? extra : "", body ? "-H 'Content-Type: application/json' --data-binary @" : "",
                           body ? bf : "", p->port, path);
    char *res = NULL;
    int rc = test_run(cmd, &res);
    int status = rc == 0 && res ? atoi(res) : -1;
    size_t n;
    *headers = fd_read_file(hf, &n);
    if (!*headers) *headers = fd_strdup("");
    for (char *q = *headers; *q; q++)
        if (*q >= 'A' && *q <= 'Z') *q = (char)(*q - 'A' + 'a');
    unlink(hf);
    unlink(bf);
    free(res);
    free(cmd);
    free(hf);
    free(bf);
    return status;
}

static int has(const char *headers, const char *line) { return strstr(headers, line) != NULL; }

#define APP "-H 'Origin: http://app.example:3000'"
#define EVIL "-H 'Origin: http://evil.example'"
#define KEY "-H 'Authorization: Bearer test-key'"

static void cors_body(srv_proc *p) {
    char *h;
    // a listed origin may read responses: the origin echoed, Vary: Origin
    EXPECT(head_req(p, "GET", "/v1/models", APP " " KEY, NULL, &h) == 200);
    EXPECT(has(h, "access-control-allow-origin: http://app.example:3000\r\n") && has(h, "vary: origin"), "%s", h);
    free(h);
    // errors too (a browser app must see the 401 to show it), and the second listed origin
    EXPECT(head_req(p, "GET", "/v1/models", "-H 'Origin: https://b.example'", NULL, &h) == 401);
    EXPECT(has(h, "access-control-allow-origin: https://b.example\r\n"), "%s", h);
    free(h);
    // an origin not listed gets its answer without the header (the browser then refuses it to the page)
    EXPECT(head_req(p, "GET", "/v1/models", EVIL " " KEY, NULL, &h) == 200);
    EXPECT(!has(h, "access-control-"), "%s", h);
    free(h);
    // no Origin (curl, servers): no CORS headers
    EXPECT(head_req(p, "GET", "/v1/models", KEY, NULL, &h) == 200);
    EXPECT(!has(h, "access-control-"), "%s", h);
    free(h);
    // preflight: no key needed, 204 with the allowed methods and the asked headers echoed
    EXPECT(head_req(p, "OPTIONS", "/v1/chat/completions",
                    APP " -H 'Access-Control-Request-Method: POST' "
                        "-H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os'",
                    NULL, &h) == 204);
    EXPECT(has(h, "access-control-allow-origin: http://app.example:3000\r\n"), "%s", h);
    EXPECT(has(h, "access-control-allow-methods: get, post, options\r\n"), "%s", h);
    EXPECT(has(h, "access-control-allow-headers: authorization, content-type, x-stainless-os\r\n"), "%s", h);
    EXPECT(has(h, "access-control-max-age: 600\r\n"), "%s", h);
    free(h);
    // a model id route (the URL has a tail) preflights too
    EXPECT(head_req(p, "OPTIONS", "/v1/models/qwen35_dense_tied", APP " -H 'Access-Control-Request-Method: GET'",
                    NULL, &h) == 204);
    free(h);
    // refused preflights carry no Access-Control-Allow-* header: origin not listed, method not offered, no route
    EXPECT(head_req(p, "OPTIONS", "/v1/chat/completions", EVIL " -H 'Access-Control-Request-Method: POST'", NULL, &h) ==
           400);
    EXPECT(!has(h, "access-control-allow"), "%s", h);
    free(h);
    EXPECT(head_req(p, "OPTIONS", "/v1/chat/completions", APP " -H 'Access-Control-Request-Method: DELETE'", NULL, &h) ==
           400);
    EXPECT(!has(h, "access-control-allow"), "%s", h);
    free(h);
    EXPECT(head_req(p, "OPTIONS", "/nope", APP " -H 'Access-Control-Request-Method: GET'", NULL, &h) == 404);
    free(h);
    // OPTIONS that is no preflight (no Access-Control-Request-Method): the route's 405 as before
    EXPECT(head_req(p, "OPTIONS", "/v1/models", APP, NULL, &h) == 405);
    free(h);
    // a stream's SSE response carries the header as well
    EXPECT(head_req(p, "POST", "/v1/completions", APP " " KEY,
                    "{\"prompt\":\"Hello\",\"max_tokens\":3,\"stream\":true}", &h) == 200);
    EXPECT(has(h, "content-type: text/event-stream") && has(h, "access-control-allow-origin: http://app.example:3000"),
           "%s", h);
    free(h);
}
TEST(server_ops_cors_listed_origins) {
    with_server("--ctx 1024 --slots 1 --api-key test-key "
                "--allowed-origins 'http://app.example:3000, https://b.example'",
                cors_body);
}

static void cors_any_body(srv_proc *p) {
    char *h;
    EXPECT(head_req(p, "GET", "/health", EVIL, NULL, &h) == 200);
    EXPECT(has(h, "access-control-allow-origin: *\r\n") && !has(h, "vary: origin"), "%s", h);
    free(h);
    EXPECT(head_req(p, "OPTIONS", "/v1/completions", EVIL " -H 'Access-Control-Request-Method: POST'", NULL, &h) == 204);
    EXPECT(has(h, "access-control-allow-origin: *\r\n"), "%s", h);
    free(h);
}
TEST(server_ops_cors_any_origin_json_list) {
    with_server("--ctx 1024 --slots 1 --allowed-origins '[\"*\"]'", cors_any_body);
}

static void cors_off_body(srv_proc *p) {
    char *h;
    EXPECT(head_req(p, "GET", "/health", APP, NULL, &h) == 200);
    EXPECT(!has(h, "access-control-"), "%s", h);
    free(h);
    EXPECT(head_req(p, "OPTIONS", "/v1/completions", APP " -H 'Access-Control-Request-Method: POST'", NULL, &h) == 405);
    EXPECT(!has(h, "access-control-"), "%s", h);
    free(h);
}
TEST(server_ops_cors_off_by_default) { with_server("--ctx 1024 --slots 1", cors_off_body); }

// What browsers send as Origin (the Fetch standard's serialization: scheme://host[:port], nothing after) is all
// that can match; anything else is refused at startup with a message, before the model loads.
TEST(server_ops_cors_bad_lists_refused) {
    static const char *const bad[] = {"'http://a.example/'", "'a.example'", "'http://a.example/path'", "''",
                                      "'http://a.example,,http://b.example'", "'[\"http://a.example\", 3]'",
                                      "'[\"http://a.example\"'", "'http://'", "'[]'"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *cmd = fd_sprintf("%s serve --model %s --tokenizer %s --port 0 --allowed-origins %s 2>&1", test_bin(),
                               SRV_MODEL, SRV_TOK, bad[i]);
        char *out = NULL;
        int rc = test_run(cmd, &out);
        EXPECT(rc == 2 && out && strstr(out, "--allowed-origins"), "%s: exit %d: %s", bad[i], rc, out ? out : "");
        free(out);
        free(cmd);
    }
    srv_cors c;
    ASSERT(srv_cors_parse(" http://a.example , https://b.example:8443 ", &c) == 0);
    EXPECT(c.n == 2 && !c.any);
    EXPECT(srv_cors_allow(&c, "http://a.example") && !strcmp(srv_cors_allow(&c, "http://a.example"), "http://a.example"));
    EXPECT(srv_cors_allow(&c, "https://b.example:8443") != NULL);
    EXPECT(srv_cors_allow(&c, "https://b.example") == NULL); // another port is another origin
    EXPECT(srv_cors_allow(&c, "http://A.example") == NULL);  // browsers lower-case the host; exact compare
    EXPECT(srv_cors_allow(&c, NULL) == NULL && srv_cors_allow(&c, "") == NULL);
    srv_cors_free(&c);
    ASSERT(srv_cors_parse(NULL, &c) == 0);
    EXPECT(!srv_cors_enabled(&c) && srv_cors_allow(&c, "http://a.example") == NULL);
}

// ---- IPv6 --host ----

static int curl_status(const char *url) {
    char *cmd = fd_sprintf("curl -g -s --max-time 10 -o /dev/null -w '%%{http_code}' '%s'", url), *res = NULL;
    int rc = test_run(cmd, &res);
    int st = rc == 0 && res ? atoi(res) : -1;
    free(res);
    free(cmd);
    return st;
}

static void v6_loopback_body(srv_proc *p) {
    char *u = fd_sprintf("http://[::1]:%d/health", p->port);
    EXPECT(curl_status(u) == 200);
    free(u);
    u = fd_sprintf("http://127.0.0.1:%d/health", p->port); // ::1 is IPv6 only
    EXPECT(curl_status(u) != 200);
    free(u);
}
static void v6_any_body(srv_proc *p) {
    char *u = fd_sprintf("http://[::1]:%d/v1/models", p->port);
    EXPECT(curl_status(u) == 200);
    free(u);
    u = fd_sprintf("http://127.0.0.1:%d/v1/models", p->port); // "::" takes IPv4 clients as well (dual stack)
    EXPECT(curl_status(u) == 200);
    free(u);
}
TEST(server_ops_ipv6_host) {
    with_server("--ctx 1024 --slots 1 --host ::1", v6_loopback_body);
    with_server("--ctx 1024 --slots 1 --host [::1]", v6_loopback_body);
    with_server("--ctx 1024 --slots 1 --host '[::]'", v6_any_body);
    static const char *const bad[] = {"999.1.1.1", "'[::1'", "'::g'", "''"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *cmd = fd_sprintf("%s serve --model %s --tokenizer %s --port 0 --host %s 2>&1", test_bin(), SRV_MODEL,
                               SRV_TOK, bad[i]);
        char *out = NULL;
        int rc = test_run(cmd, &out);
        EXPECT(rc == 2 && out && strstr(out, "--host"), "%s: exit %d: %s", bad[i], rc, out ? out : "");
        free(out);
        free(cmd);
    }
}
