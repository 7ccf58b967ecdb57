// `flashdelta tokenize TOKENIZER [--decode [--skip-special]] [--bench FILE [--repeat N]]`
//   encode (default): UTF-8 text on stdin -> ids on one line, space-separated. No special tokens are added;
//                     special-token strings in the text become their ids.
//   --decode:         ids (separated by spaces, commas or newlines) on stdin -> text on stdout, unchanged bytes;
//                     --skip-special leaves special tokens out.
//   --bench FILE:     encodes FILE as one text, single-threaded, and prints MB/s (best of N runs).
// TOKENIZER is a tokenizer.json or a model directory holding one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "cli/session.h"
#include "io/tokenizer.h"

static int run_decode(tok_tokenizer *t, int skip_special) {
    size_t n;
    char *in = cli_read_stream(stdin, &n);
    int32_t *ids = fd_malloc((n / 2 + 1) * sizeof(int32_t));
    size_t k = 0;
    char *p = in;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\r' || *p == '\t' || *p == '[' || *p == ']') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "flashdelta: error: tokenize --decode: \"%.20s\" is not a token id\n", p);
            free(in);
            free(ids);
            return 1;
        }
        ids[k++] = (int32_t)v;
        p = end;
    }
    char *text;
    size_t len;
    int rc = tok_decode(t, ids, k, skip_special, &text, &len);
    free(in);
    free(ids);
    if (rc) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    fwrite(text, 1, len, stdout);
    free(text);
    return 0;
}

static int run_bench(tok_tokenizer *t, const char *file, int repeat) {
    size_t n;
    char *text = fd_read_file(file, &n);
    if (!text) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    double best = 1e30;
    size_t n_ids = 0;
    for (int r = 0; r < repeat; r++) {
        tok_ids ids = {0};
        double t0 = fd_time_s();
        if (tok_encode(t, text, n, &ids)) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            free(text);
            return 1;
        }
        double dt = fd_time_s() - t0;
        if (dt < best) best = dt;
        n_ids = ids.n;
        tok_ids_free(&ids);
    }
    printf("flashdelta encode: %.2f MB/s (%zu bytes -> %zu tokens, best of %d, 1 thread)\n", n / best / 1e6, n, n_ids,
           repeat);
    free(text);
    return 0;
}

static const opt_id k_tokenize_opts[] = {O_DECODE, O_SKIP_SPECIAL, O_BENCH_FILE, O_REPEAT, O_COUNT};
const cmd_spec cmd_tokenize_spec = {"tokenize", "TOKENIZER",
                                    "text on stdin -> ids (or ids -> text with --decode); TOKENIZER: tokenizer.json "
                                    "or a directory holding it",
                                    k_tokenize_opts, NULL};

typedef struct {
    const char *bench;
    int decode, skip_special;
    long long repeat;
} tok_args;

static int apply_tokenize(void *ctx, opt_id id, const char *name, const char *v) {
    tok_args *a = ctx;
    switch (id) {
    case O_DECODE:
        a->decode = 1;
        return 0;
    case O_SKIP_SPECIAL:
        a->skip_special = 1;
        return 0;
    case O_BENCH_FILE:
        a->bench = v;
        return 0;
    case O_REPEAT:
        if (opt_int(v, 1, 1000000, &a->repeat)) return cli_error("%s: '%s' is not a count in 1..1000000", name, v);
        return 0;
    default:
        return cli_error("%s: not a tokenize option", name);
    }
}

int cmd_tokenize(int argc, char **argv) {
    tok_args a = {NULL, 0, 0, 5};
    const char *path = NULL;
    int prc = opts_parse(&cmd_tokenize_spec, argc, argv, apply_tokenize, &a, &path);
    if (prc) return prc == 1 ? 0 : prc;
    if (!path) return cli_error("tokenize needs TOKENIZER (a tokenizer.json or a directory holding one)");
    const char *bench = a.bench;
    const int decode = a.decode, skip_special = a.skip_special, repeat = (int)a.repeat;
    double t0 = fd_time_s();
    tok_tokenizer *t = tok_load(path);
    if (!t) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    FD_DEBUG("tokenizer loaded in %.3f s", fd_time_s() - t0);
    int rc;
    if (bench)
        rc = run_bench(t, bench, repeat);
    else if (decode)
        rc = run_decode(t, skip_special);
    else {
        size_t n;
        char *text = cli_read_stream(stdin, &n);
        tok_ids ids = {0};
        rc = tok_encode(t, text, n, &ids);
        if (rc)
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        else {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.ids[i]);
            printf("\n");
        }
        rc = rc ? 1 : 0;
        free(text);
        tok_ids_free(&ids);
    }
    tok_free(t);
    return rc;
}
