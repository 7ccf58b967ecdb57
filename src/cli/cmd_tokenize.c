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
#include "io/tokenizer.h"

static char *read_stream(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *p = fd_malloc(cap);
    size_t r;
    while ((r = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) p = fd_realloc(p, cap *= 2);
    }
    p[len] = 0;
    *n = len;
    return p;
}

// Wrong arguments: usage on stderr, exit 2. --help: the same on stdout, exit 0.
static int usage_to(FILE *f, int rc) {
    fprintf(f, "usage: flashdelta tokenize TOKENIZER [--decode [--skip-special]] [--bench FILE [--repeat N]]\n"
               "  TOKENIZER: tokenizer.json or a directory holding it; text (or ids with --decode) on stdin\n");
    return rc;
}
static int usage(void) { return usage_to(stderr, 2); }

static int run_decode(tok_tokenizer *t, int skip_special) {
    size_t n;
    char *in = read_stream(stdin, &n);
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

int cmd_tokenize(int argc, char **argv) {
    const char *path = NULL, *bench = NULL;
    int decode = 0, skip_special = 0, repeat = 5;
    for (int i = 1; i < argc; i++) { // argv[0] is "tokenize"
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage_to(stdout, 0);
        else if (!strcmp(argv[i], "--decode")) decode = 1;
        else if (!strcmp(argv[i], "--skip-special")) skip_special = 1;
        else if (!strcmp(argv[i], "--bench") && i + 1 < argc) bench = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1]) return usage();
        else if (!path) path = argv[i];
        else return usage();
    }
    if (!path || repeat < 1) return usage();
    double t0 = fd_time_s();
    tok_tokenizer *t = tok_load(path);
    if (!t) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    FD_DEBUG("tokenizer loaded in %.3f s", fd_time_s() - t0);
    int rc;
    if (bench) rc = run_bench(t, bench, repeat);
    else if (decode) rc = run_decode(t, skip_special);
    else {
        size_t n;
        char *text = read_stream(stdin, &n);
        tok_ids ids = {0};
        rc = tok_encode(t, text, n, &ids);
        if (rc) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
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
