// Golden tests: our ids must equal Hugging Face `tokenizers` on the committed corpus, for Qwen3's tokenizer and two
// synthetic ones (different regexes, normalizer, added-token options). Expected ids were made by
// tools/tokenizer_golden.js (HF's Node bindings) and cross-checked by tools/tokenizer_golden.py (HF Python).
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/tokenizer.h"
#include "test.h"
#include "test_tokenizer.h"

#define DATA FD_TEST_SOURCE_DIR "/tests/data/tokenizer/"

typedef struct {
    char **name, **text;
    size_t *len;
    int n;
} corpus_t;

static char *gunzip(const char *path, size_t *len) {
    char *cmd = fd_sprintf("gzip -dc '%s'", path), *out = NULL;
    int rc = test_run(cmd, &out);
    free(cmd);
    if (rc != 0) {
        free(out);
        return NULL;
    }
    if (len) *len = out ? strlen(out) : 0;
    return out;
}

static int load_corpus(corpus_t *c) {
    memset(c, 0, sizeof *c);
    char *all = gunzip(DATA "corpus.jsonl.gz", NULL);
    if (!all) return -1;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t e;
        json_t *d = json_loads(line, 0, &e);
        if (!d) continue;
        c->name = fd_realloc(c->name, (c->n + 1) * sizeof(char *));
        c->text = fd_realloc(c->text, (c->n + 1) * sizeof(char *));
        c->len = fd_realloc(c->len, (c->n + 1) * sizeof(size_t));
        json_t *tx = json_object_get(d, "text");
        c->name[c->n] = fd_strdup(json_string_value(json_object_get(d, "name")));
        c->len[c->n] = json_string_length(tx);
        c->text[c->n] = fd_malloc(c->len[c->n] + 1);
        memcpy(c->text[c->n], json_string_value(tx), c->len[c->n] + 1);
        c->n++;
        json_decref(d);
    }
    free(all);
    return 0;
}

static void free_corpus(corpus_t *c) {
    for (int i = 0; i < c->n; i++) {
        free(c->name[i]);
        free(c->text[i]);
    }
    free(c->name);
    free(c->text);
    free(c->len);
}

tok_tokenizer *test_tok_qwen3(void) {
    const char *p = FD_TEST_SOURCE_DIR "/" TEST_QWEN3_TOKENIZER;
    if (!fd_file_exists(p)) {
        if (getenv("FD_REQUIRE_TOKENIZER_DATA")) {
            test_fail(__FILE__, __LINE__, "tokenizer", "%s is missing: run `make tokenizer-data`", p);
            return NULL;
        }
        fprintf(stderr, "  (skipped: %s is missing; `make tokenizer-data` fetches it)\n", p);
        return NULL;
    }
    tok_tokenizer *t = tok_load(p);
    if (!t) test_fail(__FILE__, __LINE__, "tokenizer", "tok_load: %s", fd_error_msg());
    return t;
}

tok_tokenizer *test_tok_gz(const char *name) {
    char *path = fd_sprintf(DATA "%s.json.gz", name);
    size_t n;
    char *json = gunzip(path, &n);
    tok_tokenizer *t = json ? tok_load_json(json, n, path) : NULL;
    if (!t) test_fail(__FILE__, __LINE__, "tokenizer", "loading %s: %s", path, json ? fd_error_msg() : "gzip failed");
    free(json);
    free(path);
    return t;
}

// NFC/NFKC as the tokenizer applies it: what decode(encode(x)) must give back.
static char *normalized(const char *s, size_t n, int options, size_t *out_n) {
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d, options);
    *out_n = r < 0 ? 0 : (size_t)r;
    return (char *)d;
}

// Compares every document; prints the first differences with context. Returns the number of documents that differ.
static int golden_compare(const tok_tokenizer *t, const char *ids_file, int norm_options, int check_roundtrip) {
    corpus_t c;
    if (load_corpus(&c) != 0 || c.n < 100) {
        test_fail(__FILE__, __LINE__, "tokenizer", "corpus did not load (%d docs)", c.n);
        return -1;
    }
    char *all = gunzip(ids_file, NULL);
    if (!all) {
        test_fail(__FILE__, __LINE__, "tokenizer", "cannot read %s", ids_file);
        free_corpus(&c);
        return -1;
    }
    int bad = 0, bad_rt = 0;
    size_t total_ids = 0, total_bytes = 0;
    char *p = all;
    for (int d = 0; d < c.n; d++) {
        char *eol = strchr(p, '\n');
        if (!eol) {
            test_fail(__FILE__, __LINE__, "tokenizer", "%s has fewer lines than the corpus has documents", ids_file);
            bad++;
            break;
        }
        *eol = 0;
        tok_ids want = {0}, got = {0};
        for (char *q = p; *q;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            tok_ids_push(&want, (int32_t)v);
            q = end;
        }
        p = eol + 1;
        int rc = tok_encode(t, c.text[d], c.len[d], &got);
        total_ids += want.n;
        total_bytes += c.len[d];
        if (rc != 0 || got.n != want.n || (got.n && memcmp(got.ids, want.ids, got.n * sizeof(int32_t)))) {
            if (bad++ < 3) {
                size_t k = 0;
                while (k < got.n && k < want.n && got.ids[k] == want.ids[k]) k++;
                fprintf(stderr, "  %s: %s differs at id #%zu: got %d, want %d (got %zu ids, want %zu)\n", ids_file,
                        c.name[d], k, k < got.n ? got.ids[k] : -1, k < want.n ? want.ids[k] : -1, got.n, want.n);
            }
        } else if (check_roundtrip) {
            char *back = NULL;
            size_t bn = 0, nn = c.len[d];
            char *norm = norm_options ? normalized(c.text[d], c.len[d], norm_options, &nn) : NULL;
            const char *expect = norm ? norm : c.text[d];
            int drc = tok_decode(t, got.ids, got.n, 0, &back, &bn);
            if (drc != 0 || bn != nn || memcmp(back, expect, bn)) {
                if (bad_rt++ < 3) fprintf(stderr, "  decode(encode(x)) != x for %s\n", c.name[d]);
            }
            free(back);
            free(norm);
        }
        tok_ids_free(&want);
        tok_ids_free(&got);
    }
    fprintf(stderr, "  %s: %d documents, %zu bytes, %zu ids, %d differ, %d fail decode(encode(x))\n", ids_file, c.n,
            total_bytes, total_ids, bad, bad_rt);
    EXPECT(total_bytes >= 1000000, "corpus is %zu bytes", total_bytes);
    EXPECT(bad_rt == 0, "%d documents do not round-trip", bad_rt);
    free(all);
    free_corpus(&c);
    return bad;
}

TEST(tokenizer_golden_qwen3) {
    tok_tokenizer *t = test_tok_qwen3();
    if (!t) return;
    int bad = golden_compare(t, DATA "qwen3.ids.gz", UTF8PROC_STABLE | UTF8PROC_COMPOSE, 1);
    EXPECT(bad == 0, "%d documents differ from HF", bad);
    tok_free(t);
}

TEST(tokenizer_golden_synth_a) {
    tok_tokenizer *t = test_tok_gz("synth_a");
    if (!t) return;
    // Round trip does not hold here: NFKC and add_prefix_space change the text on purpose.
    int bad = golden_compare(t, DATA "synth_a.ids.gz", 0, 0);
    EXPECT(bad == 0, "%d documents differ from HF", bad);
    tok_free(t);
}

TEST(tokenizer_golden_synth_c) {
    tok_tokenizer *t = test_tok_gz("synth_c");
    if (!t) return;
    // Removed punctuation and NFD make the round trip lossy on purpose.
    int bad = golden_compare(t, DATA "synth_c.ids.gz", 0, 0);
    EXPECT(bad == 0, "%d documents differ from HF", bad);
    tok_free(t);
}

TEST(tokenizer_golden_synth_d_qwen35_shape) {
    tok_tokenizer *t = test_tok_gz("synth_d");
    if (!t) return;
    int bad = golden_compare(t, DATA "synth_d.ids.gz", UTF8PROC_STABLE | UTF8PROC_COMPOSE, 1);
    EXPECT(bad == 0, "%d documents differ from HF", bad);
    tok_free(t);
}

TEST(tokenizer_golden_synth_b) {
    tok_tokenizer *t = test_tok_gz("synth_b");
    if (!t) return;
    int bad = golden_compare(t, DATA "synth_b.ids.gz", 0, 1);
    EXPECT(bad == 0, "%d documents differ from HF", bad);
    tok_free(t);
}

// More real byte-level BPE tokenizers, fetched by `make tokenizer-data` like Qwen3's: Llama-3 (ignore_merges,
// \p{N}{1,3}), GPT-4o's o200k (case-class regex), DeepSeek-V3 (three Split steps, an empty normalizer Sequence).
TEST(tokenizer_golden_more) {
    static const char *names[] = {"llama3", "gpt4o", "deepseek_v3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *path = fd_sprintf(FD_TEST_SOURCE_DIR "/third_party/tokenizer-%s/models/tokenizer.json", names[i]);
        char *ids = fd_sprintf(DATA "%s.ids.gz", names[i]);
        if (!fd_file_exists(path)) {
            if (getenv("FD_REQUIRE_TOKENIZER_DATA")) test_fail(__FILE__, __LINE__, "tokenizer", "%s is missing", path);
            else fprintf(stderr, "  (skipped: %s is missing; `make tokenizer-data` fetches it)\n", path);
        } else {
            tok_tokenizer *t = tok_load(path);
            EXPECT(t != NULL, "%s: %s", path, fd_error_msg());
            if (t) {
                int bad = golden_compare(t, ids, 0, 1);
                EXPECT(bad == 0, "%s: %d documents differ from HF", names[i], bad);
                tok_free(t);
            }
        }
        free(path);
        free(ids);
    }
}

// decode vs HF's decode (tools/tokenizer_decode_golden.js): added tokens break the byte runs, invalid bytes become
// U+FFFD per run, skip_special. The streaming decoder must give the same text.
TEST(tokenizer_decode_golden) {
    json_error_t e;
    json_t *cases = json_load_file(DATA "decode_cases.json", 0, &e);
    ASSERT(json_is_array(cases), "decode_cases.json: %s", e.text);
    static const char *names[] = {"synth_a", "synth_b", "synth_c", "synth_d"};
    tok_tokenizer *toks[4] = {0};
    for (int i = 0; i < 4; i++) toks[i] = test_tok_gz(names[i]);
    int bad = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *jids = json_object_get(c, "ids");
        const char *name = json_string_value(json_object_get(c, "tokenizer"));
        const tok_tokenizer *t = NULL;
        for (int k = 0; k < 4; k++)
            if (!strcmp(names[k], name)) t = toks[k];
        if (!t) continue;
        size_t n = json_array_size(jids);
        int32_t *ids = fd_malloc((n + 1) * sizeof(int32_t));
        for (size_t k = 0; k < n; k++) ids[k] = (int32_t)json_integer_value(json_array_get(jids, k));
        int skip = json_is_true(json_object_get(c, "skip_special"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        char *got = NULL;
        size_t gn = 0;
        int ok = tok_decode(t, ids, n, skip, &got, &gn) == 0 && gn == strlen(want) && !memcmp(got, want, gn);
        // the stream, piece by piece
        tok_stream *st = tok_stream_new(t, skip);
        char *acc = fd_calloc(1, 1);
        size_t an = 0, len;
        for (size_t k = 0; k < n; k++) {
            const char *p = tok_stream_push(st, ids[k], &len);
            acc = fd_realloc(acc, an + len + 1);
            if (p) memcpy(acc + an, p, len), an += len;
        }
        const char *p = tok_stream_flush(st, &len);
        acc = fd_realloc(acc, an + len + 1);
        memcpy(acc + an, p, len);
        an += len;
        ok = ok && an == strlen(want) && !memcmp(acc, want, an);
        if (!ok && bad++ < 4)
            fprintf(stderr, "  decode case %zu (%s, skip=%d): got \"%.*s\" / stream \"%.*s\", want \"%s\"\n", i, name, skip,
                    (int)gn, got ? got : "", (int)an, acc, want);
        tok_stream_free(st);
        free(acc);
        free(got);
        free(ids);
    }
    EXPECT(bad == 0, "%d of %zu decode cases differ from HF", bad, json_array_size(cases));
    for (int i = 0; i < 4; i++) tok_free(toks[i]);
    json_decref(cases);
}
