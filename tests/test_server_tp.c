// `flashdelta serve --tp N` on the CPU backend: the same battery of requests (completions and chat, greedy and
// seeded sampling, sent at once so that several slots decode in one batched forward per step) against the plain
// server and against --tp 2 (and a one-rank group, --tp 1) must give the same answers; DFlash under --tp keeps the
// plain server's greedy text; /metrics labels the route counters by rank; the settings that cannot run are refused.
// The fixture's heads split at 2, not at 4 (linear_num_key_heads = 2): --tp 4 is the unshardable case.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
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
    EXPECT(log_has(p, "the ranks agree"), "no --tp line in the log");
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

// ---- the prefix cache under --tp ----

// The prefix-cache battery on a fixture: its prompt ids (P tokens) with PC_NEW greedy tokens, twice (the second
// restores the prompt's last block boundary), then the prompt followed by HF's greedy continuation of it, which
// restores the first request's decode-time snapshot (the slot's, per rank). One line per request: the cached
// tokens and the text; the second request's text must be the first's, the third's HF's continuation detokenized.
#define PC_NEW 40
static const char *g_pc_fixture;
static int g_pc_draft; // a drafter: no decode-time snapshots (sched.c), so the third request restores less
static int g_pc_off;   // --no-prefix-cache: nothing restored

static int pc_request(srv_proc *p, const int32_t *ids, int n, int max_tokens, char **text) {
    char *csv = test_ids_csv(ids, n);
    char *body =
        fd_sprintf("{\"prompt\":[%s],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}", csv, max_tokens);
    char *out = NULL;
    const int st = http(p, "POST", "/v1/completions", body, strlen(body), NULL, &out);
    json_t *r = st == 200 ? json_loads(out, 0, NULL) : NULL;
    const char *t = json_string_value(json_object_get(json_array_get(json_object_get(r, "choices"), 0), "text"));
    const json_t *details = json_object_get(json_object_get(r, "usage"), "prompt_tokens_details");
    const int cached = r ? (int)json_integer_value(json_object_get(details, "cached_tokens")) : -1;
    EXPECT(st == 200 && t, "status %d: %.300s", st, out ? out : "");
    *text = fd_strdup(t ? t : "");
    json_decref(r);
    free(out), free(body), free(csv);
    return cached;
}

static void pc_body(srv_proc *p) {
    fixture fx;
    ASSERT(fixture_load(g_pc_fixture, &fx) == 0, "%s", fd_error_msg());
    ASSERT(fx.n_greedy >= PC_NEW + 8);
    const int n = fx.n_ids, B = 16; // the server's default --prefix-block
    int32_t *turn2 = malloc(sizeof(int32_t) * (size_t)(n + PC_NEW));
    memcpy(turn2, fx.ids, sizeof(int32_t) * (size_t)n);
    memcpy(turn2 + n, fx.greedy, sizeof(int32_t) * PC_NEW);
    char *t[3];
    const int c0 = pc_request(p, fx.ids, n, PC_NEW, &t[0]), c1 = pc_request(p, fx.ids, n, PC_NEW, &t[1]);
    const int c2 = pc_request(p, turn2, n + PC_NEW, 8, &t[2]);
    // HF's continuation of turn 2 as text (an independent reference for its answer)
    char *csv = test_ids_csv(fx.greedy + PC_NEW, 8), *body = fd_sprintf("{\"tokens\":[%s]}", csv), *dt = NULL;
    EXPECT(http(p, "POST", "/detokenize", body, strlen(body), NULL, &dt) == 200, "%s", dt ? dt : "");
    json_t *d = json_loads(dt ? dt : "", 0, NULL);
    const char *hf = json_string_value(json_object_get(d, "prompt"));
    const int want1 = g_pc_off ? 0 : (n - 1) / B * B, want2 = g_pc_off     ? 0
                                                              : g_pc_draft ? want1
                                                                           : (n + PC_NEW - 1) / B * B;
    EXPECT(c0 == 0 && c1 == want1 && c2 == want2, "%s: cached %d, %d, %d tokens (want 0, %d, %d)", g_pc_fixture, c0, c1,
           c2, want1, want2);
    EXPECT(!strcmp(t[0], t[1]), "%s: the restored request answered otherwise:\n%s\n%s", g_pc_fixture, t[0], t[1]);
    EXPECT(hf && !strcmp(t[2], hf), "%s: turn 2 is not HF's continuation:\n%s\n%s", g_pc_fixture, t[2], hf ? hf : "-");
    EXPECT(metric(p, "flashdelta:prefix_cache_hits_total{") == (g_pc_off ? 0 : c1 + c2), "hits counter");
    g_answers = fd_sprintf("%d |%s|\n%d |%s|\n%d |%s|\n", c0, t[0], c1, t[1], c2, t[2]);
    json_decref(d);
    free(csv), free(body), free(dt), free(turn2);
    for (int i = 0; i < 3; i++) free(t[i]);
    fixture_free(&fx);
}

// `serve ARGS` on the fixture: its answers (and cached counts) must be the plain server's with the same cache.
static char *pc_run(const char *fixture_name, const char *args) {
    g_pc_fixture = fixture_name;
    g_pc_off = strstr(args, "--no-prefix-cache") != NULL;
    g_pc_draft = strstr(args, "--draft") != NULL;
    char *dir = fd_sprintf("tests/data/fixtures/%s", fixture_name);
    with_server_model(dir, SRV_TOK, args, pc_body);
    free(dir);
    char *got = g_answers;
    g_answers = NULL;
    return got ? got : fd_strdup("(none)");
}

// A warm request under --tp restores every rank from its own part of the cache (the prompt's checkpoint, and the
// decode-time snapshot the previous request left) and answers as the cold one, as the plain server and as HF; the
// plain server's cached counts are the --tp server's; --no-prefix-cache still turns it off under --tp.
TEST(server_tp_prefix_cache_hits_match_plain) {
    const char *k[] = {"qwen35_dense_tied", "qwen3_next_moe"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char *want = pc_run(k[i], "--ctx 1024 --slots 2");
        const char *tp_args[] = {"--ctx 1024 --slots 2 --tp 2", "--ctx 1024 --slots 2 --tp 1"};
        for (int a = 0; a < 2; a++) {
            char *got = pc_run(k[i], tp_args[a]);
            EXPECT(!strcmp(want, got), "%s %s differs from the plain server:\n--- plain\n%s--- tp\n%s", k[i],
                   tp_args[a], want, got);
            free(got);
        }
        free(want);
    }
    char *off = pc_run("qwen35_dense_tied", "--ctx 1024 --slots 2 --tp 2 --no-prefix-cache");
    free(off);
}

// DFlash under --tp 2 with the cache: the drafter's context K/V is restored with rank 0's part (prompt checkpoints
// only: no decode-time snapshots with a drafter), and the greedy answers are the plain server's.
TEST(server_tp_prefix_cache_dflash_matches_plain) {
    const char *D = "--ctx 1024 --slots 2 --draft tests/data/dflash/qwen35_dense_tied_b8";
    char *want = pc_run("qwen35_dense_tied", D), *tp_args = fd_sprintf("%s --tp 2", D);
    char *got = pc_run("qwen35_dense_tied", tp_args);
    EXPECT(!strcmp(want, got), "DFlash --tp 2 with the prefix cache differs:\n--- plain\n%s--- tp\n%s", want, got);
    free(want), free(got), free(tp_args);
}

// Eviction under --tp 2: a budget of about one request's cache (measured on a first server) makes two prompts that
// share their first blocks evict each other's nodes (turns A B B A: a switch finds nothing, a repeat its own
// checkpoint); every answer is still the one of a server without a cache.
static int64_t g_one_request_bytes;
static char *g_evict_answers[4];
static int g_evict_turns;
static int64_t g_evictions;
static int g_evict_cached[4];
static void evict_body(srv_proc *p) {
    fixture fx;
    ASSERT(fixture_load("qwen35_dense_tied", &fx) == 0, "%s", fd_error_msg());
    int32_t *alt = malloc(sizeof(int32_t) * (size_t)fx.n_ids);
    memcpy(alt, fx.ids, sizeof(int32_t) * (size_t)fx.n_ids);
    alt[40] = (alt[40] + 1) % fx.vocab;
    for (int turn = 0; turn < g_evict_turns; turn++) {
        char *t;
        g_evict_cached[turn] = pc_request(p, turn == 1 || turn == 2 ? alt : fx.ids, fx.n_ids, 16, &t);
        g_evict_answers[turn] = t;
        if (turn == 0) g_one_request_bytes = metric(p, "flashdelta:prefix_cache_usage_bytes{");
    }
    g_evictions = metric(p, "flashdelta:prefix_cache_evictions_total{");
    free(alt);
    fixture_free(&fx);
}
TEST(server_tp_prefix_cache_eviction_keeps_answers) {
    char *want[4], *got[4];
    g_evict_turns = 4;
    with_server("--ctx 1024 --slots 1 --no-prefix-cache", evict_body);
    memcpy(want, g_evict_answers, sizeof want);
    g_evict_turns = 1;
    with_server("--ctx 1024 --slots 1 --tp 2", evict_body);
    free(g_evict_answers[0]);
    ASSERT(g_one_request_bytes > 0, "no prefix cache usage after a request");
    char *args =
        fd_sprintf("--ctx 1024 --slots 1 --tp 2 --prefix-cache-mb %.6f", (double)g_one_request_bytes * 1.1 / 1048576.0);
    g_evict_turns = 4;
    with_server(args, evict_body);
    EXPECT(g_evictions > 0 && g_evict_cached[1] == 0 && g_evict_cached[2] > 0 && g_evict_cached[3] == 0,
           "under --prefix-cache-mb %.3f: %lld evictions, cached %d %d %d %d",
           (double)g_one_request_bytes * 1.1 / 1048576.0, (long long)g_evictions, g_evict_cached[0], g_evict_cached[1],
           g_evict_cached[2], g_evict_cached[3]);
    memcpy(got, g_evict_answers, sizeof got);
    for (int i = 0; i < 4; i++) {
        EXPECT(!strcmp(want[i], got[i]), "turn %d under a small budget: |%s| (no cache: |%s|)", i, got[i], want[i]);
        free(want[i]), free(got[i]);
    }
    free(args);
}

// Settings `serve --tp` cannot run, refused before listening with the exit status and a message naming them.
TEST(server_tp_refusals) {
    const struct {
        const char *env, *args, *says;
        int status;
    } k[] = {
        {"", "--tp 3", "--tp: '3' is not 1, 2, 4 or 8", 2},
        {"", "--tp 4", "linear_num_key_heads = 2 is not a multiple of 4", 1},
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
        if (i == 4)
            EXPECT(out && strstr(out, "  rank 0: build ") && strstr(out, "  rank 1: build "), "no ranks' table: %s",
                   out ? out : "");
        free(cmd);
        free(out);
    }
}
