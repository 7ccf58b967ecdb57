// Tokenizer unit tests: bad files, pathological inputs, streaming decode, the CLI.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/tokenizer.h"
#include "test.h"
#include "test_tokenizer.h"

// A tiny hand-made byte-level tokenizer; %s slots let each bad-file case break one part.
static const char *k_tiny_fmt =
    "{\"added_tokens\": [{\"id\": 9, \"content\": \"<eos>\", \"special\": true}],"
    " \"normalizer\": %s,"
    " \"pre_tokenizer\": %s,"
    " \"decoder\": %s,"
    " \"model\": {\"type\": \"%s\", \"vocab\": %s, \"merges\": %s}}";
static const char *k_norm = "{\"type\": \"NFC\"}";
static const char *k_pre = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                           "\"\\\\p{N}{1,3}\"}, \"behavior\": \"Isolated\"}, {\"type\": \"ByteLevel\", "
                           "\"add_prefix_space\": false, \"use_regex\": true}]}";
static const char *k_dec = "{\"type\": \"ByteLevel\"}";
static const char *k_vocab = "{\"a\": 0, \"b\": 1, \"ab\": 2, \"Ġ\": 3, \"Ġab\": 4, \"1\": 5, \"2\": 6, \"12\": 7}";
static const char *k_merges = "[\"a b\", [\"Ġ\", \"ab\"], \"1 2\"]";

static tok_tokenizer *tiny(const char *norm, const char *pre, const char *dec, const char *type, const char *vocab,
                           const char *merges) {
    char *j = fd_sprintf(k_tiny_fmt, norm, pre, dec, type, vocab, merges);
    tok_tokenizer *t = tok_load_json(j, strlen(j), "tiny");
    free(j);
    return t;
}

static void expect_ids(const tok_tokenizer *t, const char *text, const int32_t *want, size_t n) {
    tok_ids got = {0};
    int rc = tok_encode(t, text, strlen(text), &got);
    EXPECT(rc == 0 && got.n == n && !memcmp(got.ids, want, n * sizeof(int32_t)), "\"%s\": got %zu ids", text,
           got.n);
    tok_ids_free(&got);
}

TEST(tokenizer_tiny_handmade) {
    tok_tokenizer *t = tiny(k_norm, k_pre, k_dec, "BPE", k_vocab, k_merges);
    ASSERT(t, "%s", fd_error_msg());
    expect_ids(t, "ab ab", (int32_t[]){2, 4}, 2);
    // HF numbers added tokens itself from the vocab size (8), whatever the file says (9).
    expect_ids(t, "ab<eos>12", (int32_t[]){2, 8, 7}, 3);
    EXPECT(tok_token_id(t, "<eos>") == 8 && tok_is_special(t, 8) && !tok_is_special(t, 2));
    char *s;
    size_t n;
    ASSERT(tok_decode(t, (int32_t[]){2, 8, 4}, 3, 0, &s, &n) == 0);
    EXPECT(!strcmp(s, "ab<eos> ab"), "%s", s);
    free(s);
    ASSERT(tok_decode(t, (int32_t[]){2, 8, 4}, 3, 1, &s, &n) == 0);
    EXPECT(!strcmp(s, "ab ab"), "skip_special: %s", s);
    free(s);
    EXPECT(tok_decode(t, (int32_t[]){42}, 1, 0, &s, &n) == -1 && strstr(fd_error_msg(), "unknown token id 42"));
    const char *b = tok_token_bytes(t, 4, &n);
    EXPECT(b && n == 3 && !memcmp(b, " ab", 3) && tok_token_bytes(t, 42, &n) == NULL);
    tok_ids v = {0};
    EXPECT(tok_encode(t, "a\xff", 2, &v) == -1 && strstr(fd_error_msg(), "not valid UTF-8 at byte 1"), "%s",
           fd_error_msg());
    tok_free(t);
}

static void expect_bad(tok_tokenizer *t, const char *want) {
    EXPECT(t == NULL && strstr(fd_error_msg(), want), "want \"%s\", got \"%s\"", want, t ? "(loaded)" : fd_error_msg());
    tok_free(t);
}

TEST(tokenizer_bad_files) {
    expect_bad(tok_load("/nonexistent/tokenizer.json"), "no such file");
    expect_bad(tok_load("/"), "nor a directory holding tokenizer.json");
    expect_bad(tok_load_json("{\"model\": ", 10, "x"), "invalid JSON");
    expect_bad(tok_load_json("[1]", 3, "x"), "top level is not an object");
    expect_bad(tok_load_json("{}", 2, "x"), "\"model\": missing");
    expect_bad(tiny(k_norm, k_pre, k_dec, "WordPiece", k_vocab, k_merges), "model type \"WordPiece\"");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", k_vocab, "[\"a c\"]"), "model.merges[0]");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", k_vocab, "[\"a b c\"]"), "not two tokens");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", k_vocab, "[7]"), "neither");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", k_vocab, "{}"), "model.merges: missing");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", "{\"a\": -1}", "[]"), "model.vocab[\"a\"]");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", "{\"a\": 99999999999}", "[]"), "model.vocab[\"a\"]");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", "{}", "[]"), "model.vocab: empty");
    expect_bad(tiny(k_norm, k_pre, k_dec, "BPE", "[]", "[]"), "model.vocab: missing");
    expect_bad(tiny("{\"type\": \"Lowercase\"}", k_pre, k_dec, "BPE", k_vocab, k_merges), "\"Lowercase\" is not");
    expect_bad(tiny(k_norm, "{\"type\": \"Whitespace\"}", k_dec, "BPE", k_vocab, k_merges), "\"Whitespace\" is not");
    expect_bad(tiny(k_norm, "null", k_dec, "BPE", k_vocab, k_merges), "pre_tokenizer: missing");
    expect_bad(tiny(k_norm,
                    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
                    "\"(\"}}, {\"type\": \"ByteLevel\"}]}",
                    k_dec, "BPE", k_vocab, k_merges),
               "does not compile");
    expect_bad(tiny(k_norm, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": "
                            "\"Split\", \"pattern\": {\"String\": \"x\"}}]}",
                    k_dec, "BPE", k_vocab, k_merges),
               "ByteLevel must be the last step");
    expect_bad(tiny(k_norm, k_pre, "{\"type\": \"WordPiece\"}", "BPE", k_vocab, k_merges), "decoder: only ByteLevel");
    const char *no_content = "{\"added_tokens\": [{\"id\": 1}], \"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}";
    expect_bad(tok_load_json(no_content, strlen(no_content), "x"), "added_tokens[0]");
}

// Whatever the input, encode finishes in time, and decode gives the text back (no normalizer in synth_b).
static void check_roundtrip_fast(const tok_tokenizer *t, const char *what, const char *text, size_t n, int exact) {
    tok_ids ids = {0};
    double t0 = fd_time_s();
    int rc = tok_encode(t, text, n, &ids);
    double dt = fd_time_s() - t0;
    EXPECT(rc == 0, "%s: %s", what, fd_error_msg());
    EXPECT(dt < 5.0, "%s: encode took %.2f s for %zu bytes", what, dt, n); // generous for sanitizer builds
    char *back = NULL;
    size_t bn = 0;
    EXPECT(tok_decode(t, ids.ids, ids.n, 0, &back, &bn) == 0 && (!exact || (bn == n && !memcmp(back, text, n))),
           "%s: decode(encode(x)) != x", what);
    free(back);
    tok_ids_free(&ids);
}

static char *repeat(const char *unit, size_t times, size_t *n) {
    size_t u = strlen(unit);
    char *s = fd_malloc(u * times + 1);
    for (size_t i = 0; i < times; i++) memcpy(s + i * u, unit, u);
    s[u * times] = 0;
    *n = u * times;
    return s;
}

// exact_random: the tokenizer has no normalizer, so random text must come back byte for byte.
static void pathological(const tok_tokenizer *t, int exact_random) {
    static const char *units[] = {"a", " ", "\n", "\r\n", "1", "\xe2\x82\xac", "\xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd",
                                  "'", "'s", "\t ", "\xe4\xbd\xa0", "<", "<|", "<|im_end|", "<|im_end|>", "ab ",
                                  "\xcc\x81", "a\xcc\x81"};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n;
        char *s = repeat(units[i], 100000 / strlen(units[i]), &n);
        char *what = fd_sprintf("100 KB of \"%s\"", units[i]);
        check_roundtrip_fast(t, what, s, n, exact_random || !strstr(units[i], "\xcc")); // NFC composes a+U+0301
        free(what);
        free(s);
    }
    // One long run, then something else: the regex alternatives that backtrack over the run must stay linear.
    static const char *runs[] = {" ", "\n", "\t", "1", "\xe3\x80\x80"};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        size_t n;
        char *s = repeat(runs[i], 100000 / strlen(runs[i]), &n);
        s = fd_realloc(s, n + 2);
        s[n++] = 'x';
        s[n] = 0;
        char *what = fd_sprintf("100 KB of \"%s\" then x", runs[i]);
        check_roundtrip_fast(t, what, s, n, 1);
        free(what);
        free(s);
    }
    // 1 MB of random bytes: almost surely invalid UTF-8 -> a clear error, never a crash.
    size_t n = 1 << 20;
    uint8_t *r = fd_malloc(n);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        r[i] = (uint8_t)x;
    }
    tok_ids ids = {0};
    EXPECT(tok_encode(t, (char *)r, n, &ids) == -1 && strstr(fd_error_msg(), "not valid UTF-8 at byte"));
    // The same bytes turned into valid UTF-8: random code points of every length.
    char *u = fd_malloc(n + 4);
    size_t k = 0;
    for (size_t i = 0; k + 4 < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t cp = (uint32_t)(x % 4 == 0 ? x % 0x80 : x % 4 == 1 ? x % 0x800 : x % 4 == 2 ? x % 0x10000 : x % 0x110000);
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) continue;
        if (cp < 0x80) u[k++] = (char)cp;
        else if (cp < 0x800) u[k++] = (char)(0xC0 | cp >> 6), u[k++] = (char)(0x80 | (cp & 0x3F));
        else if (cp < 0x10000)
            u[k++] = (char)(0xE0 | cp >> 12), u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[k++] = (char)(0x80 | (cp & 0x3F));
        else
            u[k++] = (char)(0xF0 | cp >> 18), u[k++] = (char)(0x80 | ((cp >> 12) & 0x3F)),
            u[k++] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[k++] = (char)(0x80 | (cp & 0x3F));
    }
    check_roundtrip_fast(t, "1 MB of random code points", u, k, exact_random);
    free(u);
    free(r);
    tok_ids_free(&ids);
}

TEST(tokenizer_pathological_synth_b) {
    tok_tokenizer *t = test_tok_gz("synth_b");
    if (!t) return;
    pathological(t, 1);
    tok_free(t);
}

TEST(tokenizer_pathological_qwen3) {
    tok_tokenizer *t = test_tok_qwen3();
    if (!t) return;
    pathological(t, 0); // the units are NFC already; random code points are not
    // 100 KB of combining marks of two classes after one letter: canonical ordering must not be quadratic (utf8proc's
    // own ordering took seconds here).
    size_t n;
    char *s = repeat("\xcc\x81\xcc\xa3", 25000, &n);
    s[0] = 'a', s[1] = 'a'; // a letter first (replacing one mark pair's first mark keeps the length)
    tok_ids ids = {0};
    double t0 = fd_time_s();
    EXPECT(tok_encode(t, s, n, &ids) == 0 && ids.n > 0);
    double dt = fd_time_s() - t0;
    EXPECT(dt < 3.0, "mixed marks took %.2f s", dt); // quadratic ordering took 5 s without sanitizers
    tok_ids_free(&ids);
    free(s);
    tok_free(t);
}

// Streaming decode emits only whole characters, and all the pieces together are tok_decode's result.
static void check_stream(const tok_tokenizer *t, const int32_t *ids, size_t n) {
    char *full;
    size_t fn;
    ASSERT(tok_decode(t, ids, n, 0, &full, &fn) == 0);
    tok_stream *s = tok_stream_new(t, 0);
    char *acc = fd_malloc(fn + 16);
    size_t an = 0, len;
    int broken = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = tok_stream_push(s, ids[i], &len);
        ASSERT(p);
        if (tok_utf8_invalid_at(p, len) != len) broken++;
        EXPECT(an + len <= fn, "stream longer than decode");
        if (an + len > fn) break;
        memcpy(acc + an, p, len);
        an += len;
    }
    const char *p = tok_stream_flush(s, &len);
    if (an + len <= fn) memcpy(acc + an, p, len);
    an += len;
    EXPECT(broken == 0, "%d pushes returned a partial UTF-8 character", broken);
    EXPECT(an == fn && !memcmp(acc, full, fn), "stream gave %zu bytes, decode %zu", an, fn);
    tok_stream_free(s);
    free(acc);
    free(full);
}

TEST(tokenizer_stream_decode) {
    tok_tokenizer *t = test_tok_gz("synth_b");
    if (!t) return;
    const char *text = "Emoji \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb, "
                       "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c, \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7, "
                       "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 e\xcc\x81 <|endoftext|>";
    tok_ids ids = {0};
    ASSERT(tok_encode(t, text, strlen(text), &ids) == 0);
    check_stream(t, ids.ids, ids.n);
    // synth_b numbers its one-byte tokens by byte value (tools/tokenizer_synth.py), so raw bytes can be fed.
    int32_t bad[] = {'a', 0xE4, 'b', 0x80, 0xF0, 0x9F, 'c'}; // lone lead, stray continuation, cut 4-byte char
    check_stream(t, bad, 7);
    int32_t split4[] = {'x', 0xF0, 0x9F, 0x91, 0x8B, 'y'}; // one emoji over four pushes
    check_stream(t, split4, 6);
    int32_t truncated[] = {'x', 0xF0, 0x9F, 0x91}; // still incomplete at the end: the flush gives U+FFFD
    check_stream(t, truncated, 4);
    tok_stream *st = tok_stream_new(t, 0);
    size_t len;
    EXPECT(tok_stream_push(st, 0xF0, &len) && len == 0);
    EXPECT(tok_stream_push(st, 0x9F, &len) && len == 0);
    EXPECT(tok_stream_push(st, 0x91, &len) && len == 0);
    const char *p = tok_stream_push(st, 0x8B, &len);
    EXPECT(p && len == 4 && !memcmp(p, "\xf0\x9f\x91\x8b", 4));
    EXPECT(tok_stream_push(st, 99999, &len) == NULL && strstr(fd_error_msg(), "unknown token id"));
    tok_stream_free(st);
    char *s;
    size_t n;
    ASSERT(tok_decode(t, bad, 7, 0, &s, &n) == 0);
    EXPECT(n == 1 + 3 + 1 + 3 + 3 + 1, "lossy decode: %zu bytes", n); // one U+FFFD per maximal invalid part
    EXPECT(tok_utf8_invalid_at(s, n) == n, "decode output is not valid UTF-8");
    free(s);
    tok_ids_free(&ids);
    tok_free(t);
}

TEST(tokenizer_cli) {
    char dir[] = "/tmp/fd_tok_cli_XXXXXX";
    ASSERT(mkdtemp(dir));
    char *cmd = fd_sprintf("gzip -dc %s/tests/data/tokenizer/synth_a.json.gz > %s/tokenizer.json", FD_TEST_SOURCE_DIR, dir);
    ASSERT(test_run(cmd, NULL) == 0);
    free(cmd);
    char *out = NULL;
    // Encode from a directory path; special-token strings become their ids.
    cmd = fd_sprintf("printf 'Hello <|im_start|>user 123' | %s tokenize %s", test_bin(), dir);
    EXPECT(test_run(cmd, &out) == 0, "%s", out ? out : "");
    EXPECT(out && strstr(out, " 20257 ") && out[strlen(out) - 1] == '\n', "ids: %s", out ? out : "");
    free(cmd);
    // Decode gives back the text (synth_a adds a prefix space: decode shows it).
    char *ids = out;
    out = NULL;
    cmd = fd_sprintf("echo '%.*s' | %s tokenize %s/tokenizer.json --decode", (int)strcspn(ids, "\n"), ids, test_bin(), dir);
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "Hello") && strstr(out, "<|im_start|>"), "%s", out);
    free(cmd);
    free(out);
    out = NULL;
    cmd = fd_sprintf("echo '%.*s' | %s tokenize %s --decode --skip-special", (int)strcspn(ids, "\n"), ids, test_bin(), dir);
    EXPECT(test_run(cmd, &out) == 0 && out && strstr(out, "Hello") && !strstr(out, "<|im_start|>"), "%s", out);
    free(cmd);
    free(out);
    free(ids);
    // Bad inputs: one clear line on stderr, exit status != 0.
    out = NULL;
    cmd = fd_sprintf("echo x | %s tokenize /nonexistent 2>&1; echo rc=$?", test_bin());
    test_run(cmd, &out);
    EXPECT(out && strstr(out, "flashdelta: error: tokenizer /nonexistent") && strstr(out, "rc=1"), "%s", out);
    free(cmd);
    free(out);
    out = NULL;
    cmd = fd_sprintf("echo '{\"model\": 1}' > %s/bad.json; echo x | %s tokenize %s/bad.json 2>&1; echo rc=$?", dir,
                     test_bin(), dir);
    test_run(cmd, &out);
    EXPECT(out && strstr(out, "\"model\": missing or not an object") && strstr(out, "rc=1"), "%s", out);
    free(cmd);
    free(out);
    out = NULL;
    cmd = fd_sprintf("printf 'a\\377b' | %s tokenize %s 2>&1; echo rc=$?", test_bin(), dir);
    test_run(cmd, &out);
    EXPECT(out && strstr(out, "not valid UTF-8 at byte 1") && strstr(out, "rc=1"), "%s", out);
    free(cmd);
    free(out);
    out = NULL;
    cmd = fd_sprintf("echo '1 2 x' | %s tokenize %s --decode 2>&1; echo rc=$?", test_bin(), dir);
    test_run(cmd, &out);
    EXPECT(out && strstr(out, "is not a token id") && strstr(out, "rc=1"), "%s", out);
    free(cmd);
    free(out);
    cmd = fd_sprintf("rm -rf %s", dir);
    test_run(cmd, NULL);
    free(cmd);
}

// A loaded tokenizer is read-only: threads encoding at once get the single-threaded ids.
typedef struct {
    const tok_tokenizer *t;
    const char *text;
    size_t len;
    tok_ids ids;
    int rc;
} enc_job;

static void *enc_thread(void *p) {
    enc_job *j = p;
    for (int r = 0; r < 3 && j->rc == 0; r++) {
        tok_ids_free(&j->ids);
        j->rc = tok_encode(j->t, j->text, j->len, &j->ids);
    }
    return NULL;
}

TEST(tokenizer_threads) {
    tok_tokenizer *t = test_tok_gz("synth_a");
    if (!t) return;
    const char *text = "Threads \xe4\xbd\xa0\xe5\xa5\xbd <|im_start|>user word <sep> \xef\xac\x81x 12345 e\xcc\x81\n";
    size_t n;
    char *big = repeat(text, 2000, &n);
    tok_ids want = {0};
    ASSERT(tok_encode(t, big, n, &want) == 0);
    enum { NT = 6 };
    enc_job jobs[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (enc_job){t, big, n, {0}, 0};
        ASSERT(pthread_create(&th[i], NULL, enc_thread, &jobs[i]) == 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        EXPECT(jobs[i].rc == 0 && jobs[i].ids.n == want.n &&
                   !memcmp(jobs[i].ids.ids, want.ids, want.n * sizeof(int32_t)),
               "thread %d", i);
        tok_ids_free(&jobs[i].ids);
    }
    tok_ids_free(&want);
    free(big);
    tok_free(t);
}
