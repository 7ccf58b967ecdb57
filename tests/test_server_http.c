// `flashdelta serve` end to end: each test starts the server on loopback (port 0, read back from --port-file) with a
// fixture model and the test tokenizer, talks to it with curl and with the official openai npm client
// (tests/server/*.mjs), and always stops it at the end, even when a check fails; the server must then exit 0, which
// under `make asan` also means LeakSanitizer found nothing. Every request loop is bounded in count and time.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server_rig.h"
#include "test.h"

static char *abs_path(const char *p) {
    char buf[PATH_MAX];
    return fd_strdup(realpath(p, buf) ? buf : p);
}

int srv_start(srv_proc *p, const char *extra) { return srv_start_model(p, SRV_MODEL, SRV_TOK, extra); }

int srv_start_model(srv_proc *p, const char *model, const char *tokenizer, const char *extra) {
    memset(p, 0, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "/tmp/fd_srv_XXXXXX");
    if (!mkdtemp(p->dir)) return -1;
    snprintf(p->log, sizeof p->log, "%s/server.log", p->dir);
    char *cmd = fd_sprintf("exec %s serve --model %s --tokenizer %s --host 127.0.0.1 --port 0 --port-file %s/port "
                           "--threads 2 %s >%s 2>&1",
                           test_bin(), model, tokenizer, p->dir, extra, p->log);
    p->pid = fork();
    if (p->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    if (p->pid < 0) return -1;
    char *pf = fd_sprintf("%s/port", p->dir);
    for (int i = 0; i < 600 && !p->port; i++) { // up to 30 s (sanitizer builds start slowly)
        FILE *f = fopen(pf, "r");
        if (f) {
            if (fscanf(f, "%d", &p->port) != 1) p->port = 0;
            fclose(f);
        }
        int st;
        if (!p->port && waitpid(p->pid, &st, WNOHANG) == p->pid) {
            p->pid = 0;
            break;
        }
        if (!p->port) usleep(50 * 1000);
    }
    free(pf);
    return p->port ? 0 : -1;
}

static void show_log(const srv_proc *p, int lines) {
    char *cmd = fd_sprintf("tail -n %d %s >&2", lines, p->log);
    test_run(cmd, NULL);
    free(cmd);
}

// SIGTERM, then wait (bounded); SIGKILL if it hangs. Returns the exit status (-1: killed or signalled).
int srv_stop(srv_proc *p) {
    int status = -1;
    if (p->pid > 0) {
        kill(p->pid, SIGTERM);
        int st, done = 0;
        for (int i = 0; i < 400 && !done; i++) { // 20 s
            if (waitpid(p->pid, &st, WNOHANG) == p->pid) done = 1;
            else usleep(50 * 1000);
        }
        if (!done) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
        } else if (WIFEXITED(st)) {
            status = WEXITSTATUS(st);
        }
    }
    if (status != 0) show_log(p, 60);
    char *cmd = fd_sprintf("rm -rf %s", p->dir);
    test_run(cmd, NULL);
    free(cmd);
    p->pid = 0;
    return status;
}

// Runs body with a started server and stops the server afterwards, also when body leaves through ASSERT.
void with_server(const char *args, void (*body)(srv_proc *)) { with_server_model(SRV_MODEL, SRV_TOK, args, body); }

void with_server_model(const char *model, const char *tokenizer, const char *args, void (*body)(srv_proc *)) {
    srv_proc p;
    if (srv_start_model(&p, model, tokenizer, args)) {
        show_log(&p, 40);
        srv_stop(&p);
        ASSERT(0, "the server did not start (%s)", args);
    }
    jmp_buf saved;
    memcpy(saved, test_abort_jmp, sizeof saved);
    volatile int aborted = setjmp(test_abort_jmp);
    if (!aborted) body(&p);
    memcpy(test_abort_jmp, saved, sizeof saved);
    int st = srv_stop(&p);
    EXPECT(st == 0, "server exit status %d after SIGTERM (nonzero under ASan: a leak or an error)", st);
    if (aborted) longjmp(test_abort_jmp, 1);
}

// One curl request. body: NULL or bytes (len) sent from a file. Returns the HTTP status (-1 on failure) and the
// response body in *out (malloc'ed) when out is given.
int http(const srv_proc *p, const char *method, const char *path, const char *body, size_t len,
                const char *extra, char **out) {
    char *bf = fd_sprintf("%s/body", p->dir), *of = fd_sprintf("%s/out", p->dir);
    if (body) {
        FILE *f = fopen(bf, "wb");
        if (!f) return -1;
        fwrite(body, 1, len, f);
        fclose(f);
    }
    char *cmd = fd_sprintf("curl -s -S --max-time 60 -X %s -o %s -w '%%{http_code}' %s%s%s "
                           "-H 'Content-Type: application/json' %s 'http://127.0.0.1:%d%s'",
                           method, of, body ? "--data-binary @" : "", body ? bf : "", body ? "" : "",
                           extra ? extra : "", p->port, path);
    char *res = NULL;
    int rc = test_run(cmd, &res);
    int status = rc == 0 && res ? atoi(res) : -1;
    if (out) {
        size_t n;
        *out = fd_read_file(of, &n);
        if (!*out) *out = fd_strdup("");
    }
    unlink(of);
    free(res);
    free(cmd);
    free(bf);
    free(of);
    return status;
}

int http_json(const srv_proc *p, const char *path, const char *body, json_t **out) {
    char *s;
    int st = http(p, "POST", path, body, strlen(body), NULL, &s);
    *out = json_loads(s, 0, NULL);
    free(s);
    return st;
}

// The greedy ids `flashdelta generate` gives for text, decoded as the server must answer (ids up to the first
// <|im_end|>/<|endoftext|>, specials dropped).
static char *expected_text(const char *text, int n, const char *dir, int *n_prompt) {
    char *tf = fd_sprintf("%s/prompt.txt", dir);
    FILE *f = fopen(tf, "wb");
    fputs(text, f);
    fclose(f);
    char *cmd = fd_sprintf("%s tokenize %s < %s", test_bin(), SRV_TOK, tf), *ids = NULL;
    test_run(cmd, &ids);
    free(cmd);
    *n_prompt = 0;
    for (char *q = ids; *q; q++) *q = *q == ' ' ? ',' : *q == '\n' ? 0 : *q;
    for (char *q = ids; *q; q++) *n_prompt += *q == ',';
    (*n_prompt)++;
    cmd = fd_sprintf("%s generate %s --ids %s -n %d --ctx 4096 2>/dev/null", test_bin(), SRV_MODEL, ids, n);
    char *gen = NULL;
    test_run(cmd, &gen);
    free(cmd);
    char keep[8192] = "";
    for (char *tok = strtok(gen, " \n"); tok; tok = strtok(NULL, " \n")) {
        int id = atoi(tok);
        if (id == 509 || id == 511) break;
        if (id == 510) continue;
        snprintf(keep + strlen(keep), sizeof keep - strlen(keep), "%d ", id);
    }
    cmd = fd_sprintf("echo '%s' | %s tokenize %s --decode", keep, test_bin(), SRV_TOK);
    char *txt = NULL;
    if (keep[0]) test_run(cmd, &txt);
    else txt = fd_strdup("");
    free(cmd);
    free(gen);
    free(ids);
    free(tf);
    return txt;
}

int64_t metric(const srv_proc *p, const char *name_and_labels) {
    char *m;
    if (http(p, "GET", "/metrics", NULL, 0, NULL, &m) != 200) {
        free(m);
        return -1;
    }
    const char *at = strstr(m, name_and_labels);
    int64_t v = at ? atoll(strchr(at, '}') + 2) : -1;
    free(m);
    return v;
}

// ---- routes, greedy exactness with curl, cancellation ----

static void routes_body(srv_proc *p) {
    char *s;
    EXPECT(http(p, "GET", "/health", NULL, 0, NULL, &s) == 200 && strstr(s, "\"ok\""), "%s", s);
    free(s);
    EXPECT(http(p, "GET", "/v1/models", NULL, 0, NULL, &s) == 200 && strstr(s, "\"qwen35_dense_tied\""), "%s", s);
    free(s);
    EXPECT(http(p, "GET", "/nope", NULL, 0, NULL, &s) == 404 && strstr(s, "{\"error\":"), "%s", s);
    free(s);
    EXPECT(http(p, "GET", "/v1/completions", NULL, 0, NULL, &s) == 405 && strstr(s, "{\"error\":"), "%s", s);
    free(s);
    EXPECT(http(p, "GET", "/metrics", NULL, 0, NULL, &s) == 200);
    const char *names[] = {"# TYPE flashdelta:prompt_tokens_total counter",
                           "# TYPE flashdelta:prefix_cache_queries_total counter",
                           "# TYPE flashdelta:prefix_cache_hits_total counter",
                           "# TYPE flashdelta:time_to_first_token_seconds histogram",
                           "# TYPE flashdelta:inter_token_latency_seconds histogram",
                           "flashdelta:spec_decode_num_accepted_tokens_total{",
                           "flashdelta:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"qwen35_dense_tied\","
                           "position=\"0\"} 0",
                           "flashdelta:route_calls_total{model_name=\"qwen35_dense_tied\",op=\"gdn_prefill\","
                           "route=\"chunked\"}"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) EXPECT(strstr(s, names[i]), "metrics lack %s", names[i]);
    free(s);

    // greedy output equals `flashdelta generate` on the ids of `flashdelta tokenize`
    const char *prompt = "Beautiful is better than ugly. Simple is better than complex.";
    int n_prompt;
    char *want = expected_text(prompt, 20, p->dir, &n_prompt);
    char *body = fd_sprintf("{\"prompt\": \"%s\", \"max_tokens\": 20, \"temperature\": 0}", prompt);
    json_t *r;
    EXPECT(http_json(p, "/v1/completions", body, &r) == 200);
    const char *got = json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text"));
    EXPECT(got && !strcmp(got, want), "server '%s' != generate '%s'", got ? got : "(null)", want);
    EXPECT(json_integer_value(json_object_get(json_object_get(r, "usage"), "prompt_tokens")) == n_prompt);
    json_decref(r);
    free(body);
    // streamed with curl: the concatenated deltas give the same text, then [DONE]
    body = fd_sprintf("{\"prompt\": \"%s\", \"max_tokens\": 20, \"temperature\": 0, \"stream\": true}", prompt);
    EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), "-N", &s) == 200);
    const char *done = strstr(s, "data: [DONE]\n\n");
    EXPECT(done && done[14] == 0, "stream does not end with [DONE]: %s", s);
    char acc[4096] = "";
    for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: {", 7)) continue;
        json_t *c = json_loads(line + 6, 0, NULL);
        const char *t = json_string_value(json_object_get(json_array_get(json_object_get(c, "choices"), 0), "text"));
        if (t) snprintf(acc + strlen(acc), sizeof acc - strlen(acc), "%s", t);
        json_decref(c);
    }
    EXPECT(!strcmp(acc, want), "streamed '%s' != '%s'", acc, want);
    free(s);
    free(body);
    free(want);

    // a client that goes away: the stream and a plain request are cancelled (finished_reason="abort")
    const char *lbl = "flashdelta:request_success_total{model_name=\"qwen35_dense_tied\",finished_reason=\"abort\"}";
    const int64_t a0 = metric(p, lbl);
    body = fd_sprintf("{\"prompt\": \"x\", \"max_tokens\": 3900, \"ignore_eos\": true, \"stream\": true}");
    EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), "-N --max-time 0.5", NULL) != 200);
    free(body);
    body = fd_sprintf("{\"prompt\": \"x\", \"max_tokens\": 3900, \"ignore_eos\": true}");
    EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), "--max-time 0.5", NULL) != 200);
    free(body);
    int64_t a1 = a0;
    for (int i = 0; i < 100 && a1 < a0 + 2; i++) { // 5 s
        usleep(50 * 1000);
        a1 = metric(p, lbl);
    }
    EXPECT(a1 == a0 + 2, "aborted requests %lld -> %lld", (long long)a0, (long long)a1);
    EXPECT(metric(p, "flashdelta:num_requests_running{") == 0);
}

TEST(server_http_routes_curl_greedy_and_cancel) { with_server("--ctx 4096 --slots 2", routes_body); }

// ---- bad input ----

typedef struct {
    const char *method, *path, *body; // body NULL: none; "@big": generated
    int status;
    const char *needle;
} bad_case;

static void bad_body(srv_proc *p) {
    static const bad_case cases[] = {
        {"POST", "/v1/completions", "{", 400, "Invalid JSON"},
        {"POST", "/v1/completions", "", 400, "empty"},
        {"POST", "/v1/completions", "[]", 400, "must be a JSON object"},
        {"POST", "/v1/completions", "{\"prompt\": 3}", 400, "must be a string or an array"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": \"3\"}", 400, "must be an integer"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"frobnicate\": true}", 400, "Unrecognized request argument"},
        {"POST", "/v1/completions", "{\"prompt\": \"\"}", 400, "must not be empty"},
        {"POST", "/v1/chat/completions", "{\"messages\": []}", 400, "must not be empty"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 0}", 400, "at least 1"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 1000000}", 400, "maximum context length"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"max_tokens\": 99999999999}", 400, "must be in"},
        {"POST", "/v1/completions", "{\"prompt\": \"\xc3\x28\"}", 400, "not valid UTF-8"},
        {"POST", "/v1/completions", "{\"prompt\": [1, 2, 600]}", 400, "outside the vocabulary"},
        {"POST", "/v1/completions", "{\"prompt\": \"a\", \"model\": \"gpt-4\"}", 404, "does not exist"},
        {"POST", "/v1/completions", "@long", 400, "maximum context length"},
        {"POST", "/v1/completions", "@big", 413, "exceeds"},
        {"POST", "/v1/completions", "@chunked", 413, "exceeds"},
        {"DELETE", "/v1/completions", NULL, 405, "not allowed"},
        {"GET", "/v2/anything", NULL, 404, "no such route"},
    };
    char *long_prompt = NULL, *big = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const bad_case *c = &cases[i];
        const char *body = c->body, *extra = NULL;
        if (body && !strcmp(body, "@long")) { // ~2500 tokens > --ctx 1024
            size_t n = 6000;
            long_prompt = fd_malloc(n + 64);
            int k = snprintf(long_prompt, 64, "{\"prompt\": \"");
            for (size_t j = 0; j < n - 100; j += 2) long_prompt[k++] = 'a' + (char)(j % 23), long_prompt[k++] = ' ';
            snprintf(long_prompt + k, 32, "\"}");
            body = long_prompt;
        } else if (body && (!strcmp(body, "@big") || !strcmp(body, "@chunked"))) { // > --max-body 65536
            if (!strcmp(body, "@chunked")) extra = "-H 'Transfer-Encoding: chunked'";
            free(big);
            big = fd_malloc(200001);
            memset(big, ' ', 200000);
            big[0] = '{';
            big[199999] = '}';
            big[200000] = 0;
            body = big;
        }
        char *s;
        int st = http(p, c->method, c->path, body, body ? strlen(body) : 0, extra, &s);
        EXPECT(st == c->status && strstr(s, c->needle) && strstr(s, "{\"error\":{\"message\":"),
               "case %zu (%s %s): status %d, body %.300s", i, c->method, c->path, st, s);
        free(s);
        EXPECT(http(p, "GET", "/health", NULL, 0, NULL, NULL) == 200, "server unhealthy after case %zu", i);
    }
    free(long_prompt);
    free(big);

    // slow body (a 1000-byte body trickling at 50 B/s against --body-timeout 1): the server cuts the connection
    // (libmicrohttpd 0.9.75 cannot answer in the middle of a body) and keeps serving everyone else
    {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
        const char *head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: 1000\r\n\r\n{\"prompt\": \"x\"";
        EXPECT(send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t)strlen(head));
        char resp[2048] = "";
        size_t got = 0;
        const double t0 = fd_time_s();
        int closed = 0;
        while (fd_time_s() - t0 < 8 && !closed) {
            send(fd, "     ", 5, MSG_NOSIGNAL); // fails once the server has closed: that is fine
            usleep(100 * 1000);
            ssize_t r = recv(fd, resp + got, sizeof resp - 1 - got, MSG_DONTWAIT);
            if (r > 0) resp[got += (size_t)r] = 0;
            closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
        }
        const double dt = fd_time_s() - t0;
        EXPECT(closed && got == 0 && dt > 0.8 && dt < 4, "slow body: closed %d after %.1f s, got %.200s", closed, dt,
               resp);
        close(fd);
    }
    EXPECT(http(p, "GET", "/health", NULL, 0, NULL, NULL) == 200);

    // slowloris: half a header, then silence; --conn-timeout 2 closes it, other clients are served meanwhile
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT(fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char *half = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le";
    EXPECT(send(fd, half, strlen(half), 0) == (ssize_t)strlen(half));
    EXPECT(http(p, "GET", "/health", NULL, 0, NULL, NULL) == 200);
    struct timeval tv = {.tv_sec = 8};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const double t0 = fd_time_s();
    char buf[512];
    ssize_t r;
    while ((r = recv(fd, buf, sizeof buf, 0)) > 0) {}
    const double dt = fd_time_s() - t0;
    EXPECT(r == 0 && dt < 7.5, "slowloris connection not closed by the server (recv %zd after %.1f s)", r, dt);
    close(fd);
    EXPECT(http(p, "GET", "/health", NULL, 0, NULL, NULL) == 200);
    // bad requests are counted as 4xx responses
    EXPECT(metric(p, "flashdelta:http_responses_total{model_name=\"qwen35_dense_tied\",status=\"4xx\"}") >= 20);
}

TEST(server_http_bad_input_and_slow_clients) {
    with_server("--ctx 1024 --max-body 65536 --recv-timeout 1 --conn-timeout 2", bad_body);
}

// ---- admission control: queue full 429, queue timeout 503, request timeout 504 ----

static void admission_body(srv_proc *p) {
    char *cmd = fd_sprintf(
        "cd %s && U=http://127.0.0.1:%d/v1/completions; "
        "L='{\"prompt\": \"x\", \"max_tokens\": 4000, \"ignore_eos\": true}'; "
        "curl -s --max-time 60 -o a.json -w '%%{http_code}' -d \"$L\" $U > a.st & "
        "sleep 0.3; curl -s --max-time 60 -o b.json -w '%%{http_code}' -d \"$L\" $U > b.st & "
        "sleep 0.3; curl -s --max-time 60 -o c.json -w '%%{http_code}' -d \"$L\" $U > c.st; wait; "
        "cat a.st; echo; cat b.st; echo; cat c.st; echo; cat a.json b.json c.json",
        p->dir, p->port);
    char *out = NULL;
    test_run(cmd, &out);
    free(cmd);
    int a = 0, b = 0, c = 0;
    EXPECT(out && sscanf(out, "%d %d %d", &a, &b, &c) == 3);
    EXPECT(a == 504 && b == 503 && c == 429, "statuses %d %d %d (want 504 503 429): %s", a, b, c, out);
    EXPECT(out && strstr(out, "\"code\":\"queue_full\"") && strstr(out, "\"code\":\"timeout\""), "%s", out);
    free(out);
    EXPECT(metric(p, "flashdelta:requests_rejected_total{model_name=\"qwen35_dense_tied\",reason=\"queue_full\"}") == 1);
    EXPECT(metric(p, "flashdelta:requests_rejected_total{model_name=\"qwen35_dense_tied\",reason=\"queue_timeout\"}") ==
           1);
    EXPECT(http(p, "GET", "/health", NULL, 0, NULL, NULL) == 200);
}

TEST(server_http_admission_429_503_504) {
    // A runs 0 .. 2.5 s (504); B waits from 0.3 s and expires at 1.3 s (503); C at 0.6 s finds the queue full (429)
    with_server("--ctx 4096 --slots 1 --max-queue 1 --queue-timeout 1 --request-timeout 2.5", admission_body);
}

// ---- the openai npm client ----

static int npm_have(void) {
    return fd_file_exists("tests/server/node_modules/openai/package.json") &&
           fd_file_exists("tests/server/node_modules/ai/package.json") &&
           fd_file_exists("tests/server/node_modules/@huggingface/jinja/package.json");
}
static int npm_ready(void) {
    if (npm_have()) return 1;
    int rc = test_run("cd tests/server && timeout 300 npm ci --no-audit --no-fund >&2", NULL);
    return rc == 0 && npm_have();
}

void run_node(srv_proc *p, const char *script, const char *env) {
    ASSERT(npm_ready(), "npm ci in tests/server failed (the openai npm package is needed)");
    char *bin = abs_path(test_bin()), *model = abs_path(SRV_MODEL), *tok = abs_path(SRV_TOK);
    char *cmd = fd_sprintf("cd tests/server && FD_URL=http://127.0.0.1:%d FD_MODEL_NAME=qwen35_dense_tied FD_BIN=%s "
                           "FD_MODEL_DIR=%s FD_TOKENIZER=%s FD_ADMIN_KEY=test-admin-key %s timeout 300 node %s "
                           "2>&1",
                           p->port, bin, model, tok, env ? env : "", script);
    char *out = NULL;
    int rc = test_run(cmd, &out);
    printf("%s", out ? out : "");
    EXPECT(rc == 0, "node %s failed (exit %d)", script, rc);
    free(out);
    free(cmd);
    free(bin);
    free(model);
    free(tok);
}

static void openai_body(srv_proc *p) { run_node(p, "client.mjs", NULL); }
TEST(server_http_openai_client) { with_server("--ctx 4096 --slots 2", openai_body); }

// tools, tool_choice, reasoning switch, runTools, the Vercel AI SDK (tests/server/tools.mjs)
static void tools_body(srv_proc *p) { run_node(p, "tools.mjs", NULL); }
TEST(server_http_tools_and_reasoning_clients) { with_server("--ctx 4096 --slots 2", tools_body); }

// Qwen3.5's own template (--chat-template): reasoning opened by the prompt, XML tools (tests/server/reasoning.mjs)
static void reasoning_body(srv_proc *p) { run_node(p, "reasoning.mjs", NULL); }
TEST(server_http_qwen3_5_template_reasoning) {
    with_server("--ctx 4096 --slots 2 --chat-template tests/data/chat_templates/qwen3_5.jinja", reasoning_body);
}

// logprobs, logit_bias, penalties, min_p (tests/server/logprobs.mjs)
static void logprobs_body(srv_proc *p) { run_node(p, "logprobs.mjs", NULL); }
TEST(server_http_logprobs_and_penalties) { with_server("--ctx 4096 --slots 2", logprobs_body); }
// with a drafter: these requests run without speculation, and give the same answers
TEST(server_http_dflash_logprobs_run_unspeculated) {
    with_server("--ctx 4096 --slots 2 --draft tests/data/dflash/qwen35_dense_tied_b8", logprobs_body);
}

// --api-key, /v1/models/{id}, /tokenize, /detokenize, /version (tests/server/api.mjs)
static void api_body(srv_proc *p) { run_node(p, "api.mjs", NULL); }
TEST(server_http_api_key_and_routes) { with_server("--ctx 4096 --slots 1 --api-key test-key", api_body); }

static void prefix_body(srv_proc *p) { run_node(p, "prefix.mjs", NULL); }
TEST(server_http_prefix_cache_counters) {
    with_server("--ctx 4096 --slots 2 --prefix-block 16 --prefix-checkpoint 64 --admin-key test-admin-key", prefix_body);
}

static void load_body(srv_proc *p) {
    run_node(p, "load.mjs", "FD_CLIENTS=32 FD_REQUESTS=4 FD_TIME_LIMIT=240");
    EXPECT(metric(p, "flashdelta:num_requests_running{") == 0 && metric(p, "flashdelta:num_requests_waiting{") == 0);
}
TEST(server_http_load_32_streams) { with_server("--ctx 2048 --slots 8 --max-queue 64 --http-threads 8", load_body); }

static void interleave_body(srv_proc *p) { run_node(p, "interleave.mjs", NULL); }
TEST(server_http_chunked_prefill_interleaves) {
    with_server("--ctx 4096 --slots 2 --prefill-chunk 64 --no-prefix-cache", interleave_body);
}

// SIGTERM with two streams running and a plain request waiting: every client gets a clean end (a 503 error event
// then [DONE], or a 503 body) and the server exits 0 (no leak under ASan).
TEST(server_http_shutdown_ends_open_requests) {
    srv_proc p;
    if (srv_start(&p, "--ctx 4096 --slots 2")) {
        srv_stop(&p);
        ASSERT(0, "the server did not start");
    }
    char *cmd = fd_sprintf(
        "cd %s && U=http://127.0.0.1:%d/v1/completions; "
        "S='{\"prompt\": \"x\", \"max_tokens\": 4000, \"ignore_eos\": true, \"stream\": true}'; "
        "N='{\"prompt\": \"y\", \"max_tokens\": 4000, \"ignore_eos\": true}'; "
        "curl -sN --max-time 30 -d \"$S\" $U > s1.txt & curl -sN --max-time 30 -d \"$S\" $U > s2.txt & "
        "sleep 0.3; curl -s --max-time 30 -w '%%{http_code}' -d \"$N\" $U > n.txt & "
        "sleep 0.5; kill -TERM %d; wait; "
        "for f in s1 s2; do grep -c 'shutting down' $f.txt; tail -c 14 $f.txt | head -c 12; echo; done; cat n.txt",
        p.dir, p.port, (int)p.pid);
    char *out = NULL;
    test_run(cmd, &out);
    free(cmd);
    int st = srv_stop(&p);
    EXPECT(st == 0, "server exit status %d after SIGTERM with open requests", st);
    EXPECT(out && !strncmp(out, "1\ndata: [DONE]\n1\ndata: [DONE]\n", 30), "streams: %s", out);
    EXPECT(out && strstr(out, "shutting down\"") && strstr(out, "}503"), "plain request: %s", out);
    free(out);
}

// Speculative decoding (DFlash, the bundled random-weight drafter): every greedy answer of the openai-client suite
// is still identical to plain `flashdelta generate`, and the spec-decode counters move.
static void draft_body(srv_proc *p) {
    run_node(p, "client.mjs", NULL);
    const int64_t rounds = metric(p, "flashdelta:spec_decode_num_drafts_total{");
    const int64_t drafted = metric(p, "flashdelta:spec_decode_num_draft_tokens_total{");
    const int64_t acc = metric(p, "flashdelta:spec_decode_num_accepted_tokens_total{");
    const int64_t gen = metric(p, "flashdelta:generation_tokens_total{");
    printf("    DFlash: %lld rounds, %lld drafted, %lld accepted, %lld generated tokens\n", (long long)rounds,
           (long long)drafted, (long long)acc, (long long)gen);
    EXPECT(rounds > 0 && drafted >= rounds && acc >= 0 && acc <= drafted);
}
TEST(server_http_dflash_greedy_identical) {
    with_server("--ctx 4096 --slots 2 --draft tests/data/dflash/qwen35_dense_tied_b8", draft_body);
}

// DFlash + prefix cache: the cache also holds the drafter's context, so the prefix-cache suite (cold, warm, shared
// prefix, reset, multi-turn; every answer equal to plain `flashdelta generate`) passes with speculative decoding on.
static void draft_prefix_body(srv_proc *p) {
    run_node(p, "prefix.mjs", NULL);
    EXPECT(metric(p, "flashdelta:spec_decode_num_drafts_total{") > 0);
}
TEST(server_http_dflash_with_prefix_cache) {
    with_server("--ctx 4096 --slots 2 --prefix-block 16 --prefix-checkpoint 64 --admin-key test-admin-key "
                "--draft tests/data/dflash/qwen35_dense_tied_b8",
                draft_prefix_body);
}

// A KV pool smaller than slots x ctx (--kv-tokens 512: two 256-token pages for two slots of 2048): a prompt the
// pool cannot hold and a generation that outgrows it both end in 503 kv_cache_full, not a crash; their pages come
// back, and the next request is served.
static void kv_full_body(srv_proc *p) {
    char body[8192] = "{\"prompt\": [";
    for (int i = 0; i < 600; i++)
        snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i ? "," : "", 1 + i % 90);
    snprintf(body + strlen(body), sizeof body - strlen(body), "], \"max_tokens\": 4}");
    char *s = NULL;
    EXPECT(http(p, "POST", "/v1/completions", body, strlen(body), NULL, &s) == 503 && strstr(s, "\"kv_cache_full\"") &&
               strstr(s, "KV cache full"),
           "a 600-token prompt on a 512-token pool: %s", s ? s : "(no body)");
    free(s);
    const char *grow = "{\"prompt\": \"x\", \"max_tokens\": 1000, \"ignore_eos\": true}";
    EXPECT(http(p, "POST", "/v1/completions", grow, strlen(grow), NULL, &s) == 503 && strstr(s, "\"kv_cache_full\""),
           "a generation past 512 tokens: %s", s ? s : "(no body)");
    free(s);
    const char *small = "{\"prompt\": \"Beautiful is better\", \"max_tokens\": 8}";
    EXPECT(http(p, "POST", "/v1/completions", small, strlen(small), NULL, &s) == 200, "after the refusals: %s",
           s ? s : "(no body)");
    free(s);
    // A generation grows to 2 pages (481 tokens); a 300-token prompt (2 pages) arriving meanwhile finds a free slot
    // but not its pages: it waits in the queue until A is done, then runs (200, not 503).
    char ids300[2048] = "";
    for (int i = 0; i < 300; i++)
        snprintf(ids300 + strlen(ids300), sizeof ids300 - strlen(ids300), "%s%d", i ? "," : "", 1 + i % 90);
    char *cmd = fd_sprintf(
        "cd %s && U=http://127.0.0.1:%d/v1/completions; "
        "curl -s --max-time 60 -o a.json -w '%%{http_code}' -d '{\"prompt\": \"x\", \"max_tokens\": 480, "
        "\"ignore_eos\": true}' $U > a.st & "
        "sleep 0.2; curl -s --max-time 60 -o b.json -w '%%{http_code}' -d '{\"prompt\": [%s], \"max_tokens\": 4}' "
        "$U > b.st; wait; cat a.st; echo; cat b.st; echo; cat a.json b.json",
        p->dir, p->port, ids300);
    char *out = NULL;
    test_run(cmd, &out);
    free(cmd);
    int a = 0, b = 0;
    EXPECT(out && sscanf(out, "%d %d", &a, &b) == 2 && a == 200 && b == 200, "statuses %d %d (want 200 200): %s", a, b,
           out ? out : "");
    free(out);
    EXPECT(metric(p, "flashdelta:num_requests_running{") == 0);
}
TEST(server_http_kv_pool_full_503) {
    with_server("--ctx 2048 --slots 2 --kv-tokens 512", kv_full_body);
}

