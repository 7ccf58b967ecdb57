// `flashdelta serve --tp N` on the CPU backend: the same battery of requests (completions and chat, greedy and
// seeded sampling, sent at once so that several slots decode in one batched forward per step) against the plain
// server and against --tp 2 (and a one-rank group, --tp 1) must give the same answers; DFlash under --tp keeps the
// plain server's greedy text; /metrics labels the route counters by rank; the settings that cannot run are refused.
// The fixture's heads split at 2, not at 4 (linear_num_key_heads = 2): --tp 4 is the unshardable case.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "server_rig.h"
#include "test.h"

#define TP_TOKENS 24

// Completions and chat, greedy and sampled (seeded, so two servers that compute the same logits draw the same
// ids); every request generates TP_TOKENS tokens (ignore_eos), so a wrong logit anywhere changes some answer.
static const struct {
    const char *path, *body;
    int sampled;
} k_reqs[] = {
    {"/v1/completions", "{\"prompt\":\"Hello there\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}", 0},
    {"/v1/completions", "{\"prompt\":\"The quick brown fox\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}", 0},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":24,\"temperature\":0,"
     "\"ignore_eos\":true}",
     0},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"1 2 3\"}],"
     "\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}",
     0},
    {"/v1/completions",
     "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0.8,\"top_p\":0.9,\"seed\":42,"
     "\"ignore_eos\":true}",
     1},
    {"/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"Sing\"}],\"max_tokens\":24,\"temperature\":1.0,\"top_k\":50,"
     "\"seed\":7,\"ignore_eos\":true}",
     1},
};
#define N_REQS ((int)(sizeof k_reqs / sizeof k_reqs[0]))

// Sends the battery's requests at once (more of them than slots: some wait, the others decode together) and
// returns one line per request, in battery order: its text and finish reason. Sampled requests only when asked.
static char *battery(const srv_proc *p, int with_sampled) {
    char script[8192];
    int n = 0;
    for (int i = 0; i < N_REQS; i++) {
        if (k_reqs[i].sampled && !with_sampled) continue;
        char *bf = fd_sprintf("%s/b%d.json", p->dir, i);
        FILE *f = fopen(bf, "wb");
        ASSERT(f != NULL);
        fputs(k_reqs[i].body, f);
        fclose(f);
        free(bf);
        n += snprintf(script + n, sizeof script - (size_t)n,
                      "curl -s --max-time 120 -H 'Content-Type: application/json' -o %s/r%d.json --data-binary "
                      "@%s/b%d.json http://127.0.0.1:%d%s & ",
                      p->dir, i, p->dir, i, p->port, k_reqs[i].path);
    }
    snprintf(script + n, sizeof script - (size_t)n, "wait");
    ASSERT(test_run(script, NULL) == 0, "the battery's requests did not run");
    char *out = fd_strdup("");
    for (int i = 0; i < N_REQS; i++) {
        if (k_reqs[i].sampled && !with_sampled) continue;
        char *rf = fd_sprintf("%s/r%d.json", p->dir, i);
        json_t *r = json_load_file(rf, 0, NULL);
        free(rf);
        json_t *c = json_array_get(json_object_get(r, "choices"), 0);
        const char *text = json_string_value(json_object_get(c, "text"));
        if (!text) text = json_string_value(json_object_get(json_object_get(c, "message"), "content"));
        const char *fin = json_string_value(json_object_get(c, "finish_reason"));
        const json_int_t got = json_integer_value(json_object_get(json_object_get(r, "usage"), "completion_tokens"));
        EXPECT(text && text[0] && fin && !strcmp(fin, "length") && got == TP_TOKENS,
               "request %d (%s): no answer of %d tokens", i, k_reqs[i].path, TP_TOKENS);
        char *line = fd_sprintf("%s%d %s |%s|\n", out, i, fin ? fin : "-", text ? text : "-");
        free(out);
        out = line;
        json_decref(r);
    }
    return out;
}

static int log_has(const srv_proc *p, const char *what) {
    size_t n;
    char *log = fd_read_file(p->log, &n);
    const int found = log && strstr(log, what);
    free(log);
    return found;
}

// What each server of a comparison answered (with_server bodies take no argument).
static char *g_answers;
static int g_with_sampled;

static void plain_body(srv_proc *p) {
    g_answers = battery(p, g_with_sampled);
    char *m = NULL;
    EXPECT(http(p, "GET", "/metrics", NULL, 0, NULL, &m) == 200 && m && !strstr(m, "rank=\""),
           "a plain server's route samples carry a rank label");
    free(m);
}

// --tp: the same battery; every rank runs every forward, so both ranks count the same decode and prefill calls.
static void tp_body(srv_proc *p) {
    g_answers = battery(p, g_with_sampled);
    EXPECT(log_has(p, "prefix cache off (it does not run under --tp") && log_has(p, "the ranks agree"),
           "no --tp lines in the log");
    const char *R = "flashdelta:route_calls_total{model_name=\"qwen35_dense_tied\",op=\"gdn_%s\",route=\"%s\","
                    "rank=\"%d\"}";
    int ranks = 0;
    while (ranks < 8) {
        char *name = fd_sprintf(R, "decode", "serial", ranks);
        const int64_t v = metric(p, name);
        free(name);
        if (v < 0) break;
        ranks++;
    }
    EXPECT(ranks >= 1, "no rank-labelled route samples");
    for (int r = 0; r < ranks; r++) {
        char *d = fd_sprintf(R, "decode", "serial", r), *d0 = fd_sprintf(R, "decode", "serial", 0);
        char *f = fd_sprintf(R, "prefill", "chunked", r), *f0 = fd_sprintf(R, "prefill", "chunked", 0);
        EXPECT(metric(p, d) > 0 && metric(p, d) == metric(p, d0) && metric(p, f) > 0 && metric(p, f) == metric(p, f0),
               "rank %d's route counts", r);
        free(d), free(d0), free(f), free(f0);
    }
    char *with_ranks = fd_sprintf("%s%d ranks\n", g_answers, ranks);
    free(g_answers);
    g_answers = with_ranks;
}

// The plain server's answers against `serve ARGS`'s (ARGS: a --tp setting), the rank count /metrics showed.
static void compare(const char *plain_args, const char *tp_args, int ranks) {
    with_server(plain_args, plain_body);
    char *want = g_answers;
    g_answers = NULL;
    with_server(tp_args, tp_body);
    char *got = g_answers, *want_ranks = fd_sprintf("%s%d ranks\n", want, ranks);
    EXPECT(want && got && !strcmp(want_ranks, got), "%s differs from the plain server:\n--- plain\n%s--- %s\n%s",
           tp_args, want ? want : "", tp_args, got ? got : "");
    free(want), free(got), free(want_ranks);
    g_answers = NULL;
}

// Greedy and sampled answers of --tp 2 and --tp 1 (a one-rank group) are the plain server's, several slots
// decoding in each step's one forward (the leaders as its sequences, on one shared KV pool per rank).
TEST(server_tp_matches_plain_batched) {
    g_with_sampled = 1;
    compare("--ctx 1024 --slots 4", "--ctx 1024 --slots 4 --tp 2", 2);
    compare("--ctx 1024 --slots 4", "--ctx 1024 --slots 4 --tp 1", 1);
}

// DFlash under --tp 2 (the drafter on rank 0's backend, reading rank 0's taps): greedy answers are the plain,
// unspeculated server's, and the rounds are counted.
static void tp_draft_body(srv_proc *p) {
    tp_body(p);
    EXPECT(metric(p, "flashdelta:spec_decode_num_drafts_total{") > 0, "no DFlash round ran");
}
TEST(server_tp_dflash_greedy_matches_plain) {
    g_with_sampled = 0;
    with_server("--ctx 1024 --slots 2", plain_body);
    char *want = g_answers;
    g_answers = NULL;
    with_server("--ctx 1024 --slots 2 --tp 2 --draft tests/data/dflash/qwen35_dense_tied_b8", tp_draft_body);
    char *want_ranks = fd_sprintf("%s2 ranks\n", want ? want : "");
    EXPECT(want && g_answers && !strcmp(want_ranks, g_answers), "DFlash --tp 2 differs:\n--- plain\n%s--- tp\n%s",
           want ? want : "", g_answers ? g_answers : "");
    free(want), free(want_ranks), free(g_answers);
    g_answers = NULL;
}

// Settings `serve --tp` cannot run, refused before listening with the exit status and a message naming them.
TEST(server_tp_refusals) {
    const struct {
        const char *env, *args, *says;
        int status;
    } k[] = {
        {"", "--tp 3", "--tp: '3' is not 1, 2, 4 or 8", 2},
        {"", "--tp 4", "linear_num_key_heads = 2 is not a multiple of 4", 1},
        {"", "--tp 2 --prefix-block 32", "--prefix-block: the prefix cache does not run under --tp", 2},
        {"", "--tp 2 --trace /tmp/fd_tp_trace.json", "--trace records one backend; it does not run with --tp 2", 2},
        {"", "--tp 2 --draft tests/data/dflash/qwen35_dense_tied_b8 --route spec_verify=tree",
         "spec_verify=tree does not run under --tp", 1},
        {"FD_TP_TEST_DISAGREE=1 ", "--tp 2", "the tensor-parallel ranks disagree (table above): refusing to start", 2},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *cmd = fd_sprintf("%stimeout 60 %s serve %s --tokenizer %s --port 0 --threads 2 %s 2>&1", k[i].env,
                               test_bin(), SRV_MODEL, SRV_TOK, k[i].args);
        char *out = NULL;
        const int st = test_run(cmd, &out);
        EXPECT(st == k[i].status && out && strstr(out, k[i].says), "serve %s: exit %d (want %d): %s", k[i].args, st,
               k[i].status, out ? out : "");
        if (i == 5)
            EXPECT(out && strstr(out, "  rank 0: build ") && strstr(out, "  rank 1: build "), "no ranks' table: %s",
                   out ? out : "");
        free(cmd);
        free(out);
    }
}
