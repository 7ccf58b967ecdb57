// libFuzzer target for encode/decode: arbitrary bytes as text, through the three committed synthetic tokenizers
// (synth_a: NFKC, lstrip/rstrip/single_word added tokens, prefix space; synth_b: no normalizer, GPT-2 regex;
// synth_c: NFD, MergedWithNext/Removed/inverted splits).
// Invariants: invalid UTF-8 is refused with a message; otherwise ids are in range, decode is valid UTF-8,
// streaming decode equals decode, and with synth_b decode(encode(x)) == x exactly. Run from the repo root.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tok_tokenizer *load_gz(const char *path) {
    char *cmd = fd_sprintf("gzip -dc '%s'", path);
    FILE *p = popen(cmd, "r");
    free(cmd);
    FD_CHECK(p != NULL, "popen");
    size_t cap = 1 << 20, n = 0, r;
    char *buf = fd_malloc(cap);
    while ((r = fread(buf + n, 1, cap - n, p)) > 0)
        if ((n += r) == cap) buf = fd_realloc(buf, cap *= 2);
    pclose(p);
    tok_tokenizer *t = tok_load_json(buf, n, path);
    FD_CHECK(t != NULL, "%s (run the fuzzer from the repo root): %s", path, fd_error_msg());
    free(buf);
    return t;
}

static void check(const tok_tokenizer *t, const char *text, size_t size, int exact) {
    tok_ids ids = {0};
    if (tok_encode(t, text, size, &ids) != 0) {
        FD_CHECK(tok_utf8_invalid_at(text, size) < size, "encode failed on valid UTF-8: %s", fd_error_msg());
        return;
    }
    for (size_t k = 0; k < ids.n; k++) FD_CHECK(ids.ids[k] >= 0 && ids.ids[k] < tok_n_vocab(t));
    char *s;
    size_t n;
    FD_CHECK(tok_decode(t, ids.ids, ids.n, 0, &s, &n) == 0);
    FD_CHECK(tok_utf8_invalid_at(s, n) == n);
    if (exact) FD_CHECK(n == size && !memcmp(s, text, n), "decode(encode(x)) != x");
    tok_stream *st = tok_stream_new(t, 0);
    size_t at = 0, len;
    for (size_t k = 0; k < ids.n; k++) {
        const char *p = tok_stream_push(st, ids.ids[k], &len);
        FD_CHECK(p && at + len <= n && !memcmp(s + at, p, len), "stream diverges from decode");
        at += len;
    }
    const char *p = tok_stream_flush(st, &len);
    FD_CHECK(at + len == n && !memcmp(s + at, p, len));
    tok_stream_free(st);
    free(s);
    tok_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tok_tokenizer *a, *b, *c;
    if (!a) {
        fd_log_set_level(FD_LOG_QUIET);
        a = load_gz("tests/data/tokenizer/synth_a.json.gz");
        b = load_gz("tests/data/tokenizer/synth_b.json.gz");
        c = load_gz("tests/data/tokenizer/synth_c.json.gz");
    }
    check(a, (const char *)data, size, 0);
    check(b, (const char *)data, size, 1);
    check(c, (const char *)data, size, 0);
    return 0;
}
