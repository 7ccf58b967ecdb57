// Operations of `flashdelta serve` beyond the OpenAI routes: scheduler limits from the configuration, CORS, IPv6
// listening, the vLLM-named metrics (tests/test_server_http.c has the rig).
#include <limits.h>
#include <math.h>
#include <pthread.h>
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

// ---- vllm: metric names (vLLM's exposition: vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py) ----

#define VL "{model_name=\"qwen35_dense_tied\",engine=\"0\"}"

// The value of one series (the exact name and labels at a line's start), or -1 if absent.
static double prom(const char *text, const char *series) {
    const size_t n = strlen(series);
    for (const char *at = text; (at = strstr(at, series)); at += n)
        if ((at == text || at[-1] == '\n') && at[n] == ' ') return atof(at + n + 1);
    return -1;
}

static char *scrape(const srv_proc *p) {
    char *m = NULL;
    EXPECT(http(p, "GET", "/metrics", NULL, 0, NULL, &m) == 200);
    return m;
}

// The exposition's grammar, as Prometheus reads it: every sample line is `name{labels} value` under a "# TYPE" of
// its family; counters end in _total; a histogram's buckets rise with le, are cumulative and end at +Inf = _count.
static void check_exposition(const char *text) {
    char *copy = fd_strdup(text), *save = NULL;
    char family[160] = "", type[16] = "";
    double last_le = -1, last_cum = -1;
    int samples = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "# TYPE ", 7)) {
            ASSERT(sscanf(line + 7, "%159s %15s", family, type) == 2, "%s", line);
            EXPECT(strcmp(type, "counter") || strstr(family, "_total") == family + strlen(family) - 6, "%s", line);
            last_le = last_cum = -1;
            continue;
        }
        if (line[0] == '#') continue;
        samples++;
        const char *brace = strchr(line, '{'), *close = strchr(line, '}');
        ASSERT(brace && close && close[1] == ' ', "malformed sample: %s", line);
        EXPECT(!strncmp(line, family, strlen(family)), "sample %s outside its family %s", line, family);
        if (!strcmp(type, "histogram") && strstr(line, "_bucket{")) {
            const char *le = strstr(line, "le=\"");
            ASSERT(le != NULL, "%s", line);
            const double bound = !strncmp(le + 4, "+Inf", 4) ? 1e308 : atof(le + 4), cum = atof(close + 2);
            EXPECT(bound > last_le && cum >= last_cum, "histogram not cumulative: %s", line);
            last_le = bound;
            last_cum = cum;
        } else if (!strcmp(type, "histogram") && strstr(line, "_count{")) {
            EXPECT(last_le == 1e308 && atof(close + 2) == last_cum, "_count != +Inf bucket: %s", line);
        }
    }
    EXPECT(samples > 100);
    free(copy);
}

static int n_tokens(const char *text) { // the tokenizer's own count (`flashdelta tokenize`)
    char *cmd = fd_sprintf("printf '%%s' '%s' | %s tokenize %s | wc -w", text, test_bin(), SRV_TOK), *out = NULL;
    test_run(cmd, &out);
    int n = out ? atoi(out) : -1;
    free(out);
    free(cmd);
    return n;
}

typedef struct {
    const srv_proc *p;
    const char *body;
} bg_req;
static void *bg_post(void *arg) {
    bg_req *b = arg;
    char *out = NULL;
    http(b->p, "POST", "/v1/completions", b->body, strlen(b->body), NULL, &out);
    free(out);
    return NULL;
}

static void vllm_metrics_body(srv_proc *p) {
    static const char *const prompts[] = {"Hello", "The Zen of Python, by Tim Peters",
                                          "Beautiful is better than ugly. Explicit is better than implicit."};
    int sum_prompt = 0, le10 = 0;
    for (int i = 0; i < 3; i++) {
        const int n = n_tokens(prompts[i]);
        ASSERT(n > 0);
        sum_prompt += n;
        le10 += n <= 10;
        char *body = fd_sprintf("{\"prompt\": \"%s\", \"max_tokens\": 6, \"temperature\": 0, \"ignore_eos\": true}",
                                prompts[i]);
        char *out = NULL;
        EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), NULL, &out) == 200, "%s", out);
        free(out);
        free(body);
    }
    char *m = scrape(p);
    check_exposition(m);
    EXPECT(prom(m, "vllm:prompt_tokens_total" VL) == sum_prompt, "%g != %d", prom(m, "vllm:prompt_tokens_total" VL),
           sum_prompt);
    EXPECT(prom(m, "vllm:generation_tokens_total" VL) == 18);
    EXPECT(prom(m, "vllm:request_success_total{model_name=\"qwen35_dense_tied\",engine=\"0\",finished_reason=\"length\"}") == 3);
    EXPECT(prom(m, "vllm:request_success_total{model_name=\"qwen35_dense_tied\",engine=\"0\",finished_reason=\"stop\"}") == 0);
    EXPECT(prom(m, "vllm:num_requests_running" VL) == 0 && prom(m, "vllm:num_requests_waiting" VL) == 0);
    EXPECT(prom(m, "vllm:kv_cache_usage_perc" VL) == 0, "idle pool in use: %g", prom(m, "vllm:kv_cache_usage_perc" VL));
    EXPECT(prom(m, "vllm:num_preemptions_total" VL) == 0);
    EXPECT(prom(m, "vllm:prefix_cache_queries_total" VL) == sum_prompt);
    // per-request token histograms: vLLM's 1-2-5 buckets up to max_model_len (--ctx 1024: 1, 2, 5, ..., 1000)
    EXPECT(prom(m, "vllm:request_prompt_tokens_count" VL) == 3 && prom(m, "vllm:request_prompt_tokens_sum" VL) == sum_prompt);
    EXPECT(prom(m, "vllm:request_prompt_tokens_bucket{model_name=\"qwen35_dense_tied\",engine=\"0\",le=\"10\"}") == le10);
    EXPECT(prom(m, "vllm:request_prompt_tokens_bucket{model_name=\"qwen35_dense_tied\",engine=\"0\",le=\"1000\"}") == 3);
    EXPECT(prom(m, "vllm:request_prompt_tokens_bucket{model_name=\"qwen35_dense_tied\",engine=\"0\",le=\"2000\"}") == -1);
    EXPECT(prom(m, "vllm:request_generation_tokens_sum" VL) == 18);
    EXPECT(prom(m, "vllm:request_generation_tokens_bucket{model_name=\"qwen35_dense_tied\",engine=\"0\",le=\"5\"}") == 0 &&
           prom(m, "vllm:request_generation_tokens_bucket{model_name=\"qwen35_dense_tied\",engine=\"0\",le=\"10\"}") == 3);
    // latency histograms: one first token per request, 5 gaps after it
    EXPECT(prom(m, "vllm:time_to_first_token_seconds_count" VL) == 3);
    EXPECT(prom(m, "vllm:inter_token_latency_seconds_count" VL) == 15);
    EXPECT(prom(m, "vllm:time_per_output_token_seconds_count" VL) == 15);
    EXPECT(prom(m, "vllm:e2e_request_latency_seconds_count" VL) == 3);
    EXPECT(prom(m, "vllm:request_queue_time_seconds_count" VL) == 3);
    const char *phases[] = {"vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds",
                            "vllm:request_inference_time_seconds"};
    for (int i = 0; i < 3; i++) {
        char *c = fd_sprintf("%s_count" VL, phases[i]), *s = fd_sprintf("%s_sum" VL, phases[i]);
        EXPECT(prom(m, c) == 3 && prom(m, s) >= 0, "%s", c);
        free(c);
        free(s);
    }
    // inference = prefill + decode for every request, so the sums agree (up to rounding)
    const double inf = prom(m, "vllm:request_inference_time_seconds_sum" VL),
                 pre = prom(m, "vllm:request_prefill_time_seconds_sum" VL),
                 dec = prom(m, "vllm:request_decode_time_seconds_sum" VL);
    EXPECT(inf > 0 && fabs(inf - pre - dec) < 1e-6 * (1 + inf), "%g != %g + %g", inf, pre, dec);
    EXPECT(!strstr(m, "vllm:spec_decode"), "spec-decode series without a drafter");
    // the same counts under the flashdelta: names
    EXPECT(prom(m, "flashdelta:prompt_tokens_total{model_name=\"qwen35_dense_tied\"}") == sum_prompt);
    free(m);

    // KV-cache usage while a request holds pages: above 0, at most 1; back to 0 when it ends
    bg_req b = {p, "{\"prompt\": \"Hello\", \"max_tokens\": 900, \"temperature\": 0, \"ignore_eos\": true}"};
    pthread_t th;
    ASSERT(pthread_create(&th, NULL, bg_post, &b) == 0);
    double busy = -1;
    for (int i = 0; i < 400 && busy <= 0; i++) {
        m = scrape(p);
        if (prom(m, "vllm:num_requests_running" VL) == 1) busy = prom(m, "vllm:kv_cache_usage_perc" VL);
        free(m);
        if (busy <= 0) usleep(10 * 1000);
    }
    pthread_join(th, NULL);
    EXPECT(busy > 0 && busy <= 1, "KV usage while running: %g", busy);
    m = scrape(p);
    EXPECT(prom(m, "vllm:kv_cache_usage_perc" VL) == 0 && prom(m, "vllm:gpu_cache_usage_perc" VL) == 0);
    free(m);
}
TEST(server_ops_vllm_metric_names) { with_server("--ctx 1024 --slots 1", vllm_metrics_body); }

// With a DFlash drafter (block 8): vLLM's spec-decode counters, one per-position series per draft position (7),
// each position accepted no more often than the one before it, their sum the accepted count, and every generated
// token accounted for: the first (from the prompt) plus one per round plus the accepted drafts.
static void vllm_spec_body(srv_proc *p) {
    for (int i = 0; i < 2; i++) {
        const char *body = i ? "{\"prompt\": \"Beautiful is better than ugly.\", \"max_tokens\": 40, \"temperature\": 0, "
                               "\"ignore_eos\": true}"
                             : "{\"prompt\": \"The Zen of Python\", \"max_tokens\": 33, \"temperature\": 0, "
                               "\"ignore_eos\": true}";
        char *out = NULL;
        EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), NULL, &out) == 200, "%s", out);
        free(out);
    }
    char *m = scrape(p);
    check_exposition(m);
    const double drafts = prom(m, "vllm:spec_decode_num_drafts_total" VL),
                 drafted = prom(m, "vllm:spec_decode_num_draft_tokens_total" VL),
                 accepted = prom(m, "vllm:spec_decode_num_accepted_tokens_total" VL),
                 generated = prom(m, "vllm:generation_tokens_total" VL);
    EXPECT(drafts > 0 && drafts == prom(m, "flashdelta:spec_decode_num_drafts_total{model_name=\"qwen35_dense_tied\"}"));
    EXPECT(accepted >= 0 && accepted <= drafted && drafted <= 7 * drafts, "%g %g %g", accepted, drafted, drafts);
    EXPECT(generated == 73 && generated == 2 + drafts + accepted, "%g generated, %g rounds, %g accepted", generated,
           drafts, accepted);
    double sum = 0, prev = 1e300;
    for (int pos = 0; pos < 8; pos++) {
        char *s = fd_sprintf("vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"qwen35_dense_tied\","
                             "engine=\"0\",position=\"%d\"}",
                             pos);
        const double v = prom(m, s);
        if (pos == 7) EXPECT(v == -1, "a series past the last draft position");
        else EXPECT(v >= 0 && v <= prev, "%s = %g", s, v);
        if (pos < 7) sum += v, prev = v;
        free(s);
    }
    EXPECT(sum == accepted, "per-position sum %g != accepted %g", sum, accepted);
    free(m);
}
TEST(server_ops_vllm_spec_decode_metrics) {
    with_server("--ctx 1024 --slots 1 --draft tests/data/dflash/qwen35_dense_tied_b8", vllm_spec_body);
}

// ---- real clients against the trained model (tests/server/trained.mjs) ----

#define TRAINED "models/tiny-qwen35"

static void trained_env_run(srv_proc *p, int draft) {
    char buf[PATH_MAX];
    char *tok = fd_strdup(realpath(TRAINED "/tokenizer.json", buf) ? buf : TRAINED "/tokenizer.json");
    char *env = fd_sprintf("FD_MODEL_NAME=tiny-qwen35 FD_TOKENIZER=%s FD_API_KEY=test-key FD_DRAFT=%d", tok, draft);
    run_node(p, "trained.mjs", env);
    free(env);
    free(tok);
}
static void trained_body(srv_proc *p) { trained_env_run(p, 0); }
static void trained_draft_body(srv_proc *p) { trained_env_run(p, 1); }
TEST(server_ops_trained_model_clients) {
    with_server_model(TRAINED, TRAINED, "--ctx 2048 --slots 2 --api-key test-key", trained_body);
}
// the same greedy answer (HF's) with the trained DFlash drafter, and vLLM's spec-decode series over its rounds
TEST(server_ops_trained_model_dflash) {
    with_server_model(TRAINED, TRAINED, "--ctx 2048 --slots 1 --api-key test-key --draft models/tiny-qwen35-dflash",
                      trained_draft_body);
}
