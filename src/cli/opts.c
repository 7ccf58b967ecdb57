// The option table, its parser and usage printer, and the model commands' option values (opts.h).
#include "cli/opts.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dflash.h"

static const opt_def k_opts[] = {
    {O_MODEL, "-m|--model", "DIR", "model directory (or give it as the first argument)"},
    {O_IDS, "--ids", "1,2,3", "prompt token ids (exact work: no tokenizer involved)"},
    {O_PROMPT, "-p|--prompt", "TEXT", "prompt text, tokenized with the model's tokenizer ('-' = stdin)"},
    {O_OUT, "--out", "FILE", "output file (float32 little-endian)"},
    {O_N_NEW, "-n|--n-new|--max-tokens", "N", "tokens to generate"},
    {O_SYSTEM, "--system", "TEXT", "system message at the start of the conversation"},
    {O_TEMPERATURE, "--temperature|--temp", "T", "sampling temperature, 0..100 (0 = greedy, the default)"},
    {O_TOP_K, "--top-k", "K", "sample among the K most likely tokens (0 = off)"},
    {O_TOP_P, "--top-p", "P", "nucleus sampling, 0..1 (1 = off)"},
    {O_SEED, "--seed", "S", "random seed (sampling; random weights)"},
    {O_DRAFT, "--draft", "DIR", "DFlash drafter: speculative decoding"},
    {O_BLOCK_SIZE, "--block-size", "B", "DFlash block, 2..64 (default: the drafter's)"},
    {O_TREE_BUDGET, "--tree-budget", "N", "draft nodes per tree round, 1..63 (route spec_verify=tree; default 32)"},
    {O_STATS, "--stats", NULL, "print DFlash, route and graph statistics on stderr"},
    {O_IGNORE_EOS, "--ignore-eos", NULL, "go on past end-of-sequence tokens (up to -n)"},
    {O_RANDOM_WEIGHTS, "--random-weights", "CONFIG.json", "a synthetic target instead of MODEL_DIR"},
    {O_DRAFT_RANDOM, "--draft-random", "CONFIG.json", "a synthetic drafter instead of --draft"},
    {O_CONTEXTS, "--contexts", "L1,L2,..", "context lengths (default 1024,32768,65536,131072)"},
    {O_DECODE_TOKENS, "--decode", "N", "decode tokens per context (default 32)"},
    {O_ORACLE_TAU, "--oracle-tau", "TAU", "accepted drafts per round of the ORACLE drafter (default 4.74)"},
    {O_GEMM_CEILING, "--gemm-ceiling", "FLOP/S", "roofline GEMM ceiling (default: H200 bf16 on cuda)"},
    {O_COPY_CEILING, "--copy-ceiling", "B/S", "roofline copy ceiling (default: H200 on cuda)"},
    {O_JSON, "--json", "FILE", "results as JSON"},
    {O_BACKEND, "--backend", "cpu|cuda", "backend (default cpu)"},
    {O_THREADS, "--threads|-t", "N", "CPU backend threads (env FD_THREADS)"},
    {O_TP, "--tp", "N", "tensor-parallel ranks: 1, 2, 4 or 8, one host thread each (cpu; cuda: device r per rank, NCCL)"},
    {O_ROUTE, "--route", "NAME=VALUE", "an execution route (docs/routes.md; env FD_ROUTE_<NAME>); repeatable"},
    {O_GDN_PREFILL, "--gdn-prefill", "chunked|serial", "shorthand for --route gdn_prefill=..."},
    {O_CTX, "--ctx|-c|--max-model-len", "N", "context capacity, tokens"},
    {O_KV_TOKENS, "--kv-tokens", "N", "paged KV cache, tokens (default 262144)"},
    {O_PREFILL_CHUNK, "--prefill-chunk|-b|--batch-size", "K", "token budget of one forward"},
    {O_TRACE, "--trace", "FILE", "Chrome-trace JSON of per-op timings (changes timings)"},
    {O_QUANTIZE, "--quantize|--quant", "fp8|gptq-int4|awq-int4",
     "linear weights quantized at load: FP8 e4m3 with 128x128 block scales, or int4 in groups of 128 (GPTQ: "
     "attention and shared experts stay bf16, as Qwen publishes; AWQ: all)"},
    {O_TOKENIZER, "--tokenizer", "PATH", "tokenizer.json or a directory holding it (default: the model's)"},
    {O_MODEL_NAME, "--model-name|--served-model-name|-a|--alias", "NAME", "model id served and expected"},
    {O_HOST, "--host", "ADDR", "address to bind: IPv4, IPv6 (::1, [::]) or a host name (default 127.0.0.1)"},
    {O_PORT, "--port", "N", "TCP port (default 8000; 0 = any free port, see --port-file)"},
    {O_PORT_FILE, "--port-file", "PATH", "write the bound port there once listening"},
    {O_SLOTS, "--slots|--max-num-seqs|-np|--parallel", "N", "concurrent sequences (default 4)"},
    {O_HTTP_THREADS, "--http-threads", "N", "HTTP thread pool (default 4)"},
    {O_MAX_QUEUE, "--max-queue", "N", "waiting requests before 429 (default 64)"},
    {O_QUEUE_TIMEOUT, "--queue-timeout", "S", "seconds waiting for a slot or KV pages before 503 (default 60)"},
    {O_REQUEST_TIMEOUT, "--request-timeout", "S", "seconds per request before 504 (default 600)"},
    {O_CONN_TIMEOUT, "--conn-timeout", "S", "idle connection timeout (default 30)"},
    {O_BODY_TIMEOUT, "--recv-timeout|--body-timeout", "S",
     "seconds to receive a whole request, headers and body, before the connection is cut (default 30)"},
    {O_MAX_CONNS, "--max-conns", "N", "open connections in all (default 1000)"},
    {O_MAX_CONNS_PER_IP, "--max-conns-per-ip", "N", "open connections from one client address (default 64)"},
    {O_API_KEY, "--api-key", "KEY", "require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize (env FLASHDELTA_API_KEY)"},
    {O_ALLOWED_ORIGINS, "--allowed-origins", "LIST", "CORS: browser origins allowed, comma-separated or a JSON list; * = any (default: off)"},
    {O_CHAT_TEMPLATE, "--chat-template", "FILE", "Jinja chat template (default: the model's, else Qwen3's)"},
    {O_ADMIN_KEY, "--admin-key", "KEY", "bearer token of the admin routes, /reset_prefix_cache (env FD_ADMIN_KEY)"},
    {O_CACHE_SALT_API_KEY, "--cache-salt-api-key", NULL, "share prefix-cache blocks only within one bearer token"},
    {O_PARSE_SPECIAL, "--parse-special-tokens", NULL,
     "special-token text in messages and prompts becomes control tokens (default: plain text)"},
    {O_MAX_BODY, "--max-body", "BYTES", "request body limit before 413 (default 4194304)"},
    {O_NO_PREFIX_CACHE, "--no-prefix-cache", NULL, "disable the prefix cache"},
    {O_PREFIX_BLOCK, "--prefix-block", "N", "prefix cache block, tokens (default 16)"},
    {O_PREFIX_CHECKPOINT, "--prefix-checkpoint", "N", "GDN state snapshot every N prompt tokens (default 256)"},
    {O_PREFIX_CACHE_MB, "--prefix-cache-mb", "N", "prefix cache budget, MiB (default 1024)"},
    {O_DECODE, "--decode", NULL, "ids on stdin -> text"},
    {O_SKIP_SPECIAL, "--skip-special", NULL, "with --decode: leave special tokens out"},
    {O_BENCH_FILE, "--bench", "FILE", "encode FILE and print MB/s"},
    {O_REPEAT, "--repeat", "N", "with --bench: best of N runs (default 5)"},
};

const opt_def *opts_def(opt_id id) {
    for (size_t i = 0; i < sizeof k_opts / sizeof k_opts[0]; i++)
        if (k_opts[i].id == id) return &k_opts[i];
    return NULL;
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("flashdelta: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

// Does `names` ("-c|--ctx") contain exactly `name` (len bytes)?
static int has_name(const char *names, const char *name, size_t len) {
    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        const size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !strncmp(p, name, len)) return 1;
        p += n + (bar != NULL);
    }
    return 0;
}

int opts_takes(const cmd_spec *cmd, opt_id id) {
    for (const opt_id *o = cmd->opts; *o != O_COUNT; o++)
        if (*o == id) return 1;
    return 0;
}

// The row of `name` among the command's options first (tokenize's --decode is a flag, bench's takes N), then any.
static const opt_def *lookup(const cmd_spec *cmd, const char *name, size_t len) {
    for (const opt_id *o = cmd->opts; *o != O_COUNT; o++)
        if (has_name(opts_def(*o)->names, name, len)) return opts_def(*o);
    for (size_t i = 0; i < sizeof k_opts / sizeof k_opts[0]; i++)
        if (has_name(k_opts[i].names, name, len)) return &k_opts[i];
    return NULL;
}

void opts_usage(const cmd_spec *cmd, FILE *f) {
    fprintf(f, "usage: flashdelta %s%s%s [options]\n  %s\noptions:\n", cmd->name, *cmd->args ? " " : "", cmd->args,
            cmd->summary);
    for (const opt_id *o = cmd->opts; *o != O_COUNT; o++) {
        const opt_def *d = opts_def(*o);
        char names[96];
        snprintf(names, sizeof names, "%s", d->names);
        for (char *p = names; *p; p++)
            if (*p == '|') *p = ',';
        char head[160];
        snprintf(head, sizeof head, "%s%s%s", names, d->meta ? " " : "", d->meta ? d->meta : "");
        fprintf(f, "  %-44s %s\n", head, d->help);
    }
}

int opts_parse(const cmd_spec *cmd, int argc, char **argv, opt_apply_fn apply, void *ctx, const char **positional) {
    int seen_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            opts_usage(cmd, stdout);
            return 1;
        }
        if (a[0] != '-' || !a[1]) {
            if (!positional || seen_positional)
                return cli_error("%s: unexpected argument '%s' (see flashdelta %s --help)", cmd->name, a, cmd->name);
            *positional = a;
            seen_positional = 1;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        const size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const opt_def *d = lookup(cmd, a, len);
        if (!d)
            return cli_error("%s: unknown option '%.*s' (see flashdelta %s --help)", cmd->name, (int)len, a, cmd->name);
        if (!opts_takes(cmd, d->id)) {
            const char *why = cmd->why_not ? cmd->why_not(d->id) : NULL;
            return cli_error("%s does not take %.*s%s%s (see flashdelta %s --help)", cmd->name, (int)len, a,
                             why ? ": " : "", why ? why : "", cmd->name);
        }
        const char *v = NULL;
        if (d->meta) {
            v = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
            if (!v) return cli_error("%s: option %s needs a value (%s)", cmd->name, a, d->meta);
        } else if (eq) {
            return cli_error("%s: option %.*s takes no value", cmd->name, (int)len, a);
        }
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)len, a);
        int rc = apply(ctx, d->id, name, v);
        if (rc) return rc;
    }
    return 0;
}

int opt_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int opt_num(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

// "1,2,3" (spaces allowed) -> ids
int parse_ids(const char *s, int32_t **ids, int64_t *n) {
    int64_t cap = 64, cnt = 0;
    int32_t *v = fd_malloc((size_t)cap * sizeof *v);
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',' && *end != ' ')) {
            free(v);
            return fd_error_set("--ids: '%.40s' is not a comma-separated list of non-negative token ids", s);
        }
        if (cnt == cap) v = fd_realloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (!cnt) {
        free(v);
        return fd_error_set("--ids: no token ids given");
    }
    *ids = v;
    *n = cnt;
    return 0;
}

static int bad(const char *name, const char *v, const char *what) {
    return cli_error("%s: '%s' is not %s", name, v, what);
}

int opt_tp(const char *name, const char *v, int *tp) {
    long long x;
    if (opt_int(v, 1, 8, &x) || (x & (x - 1))) return bad(name, v, "1, 2, 4 or 8");
    *tp = (int)x;
    return 0;
}

int cli_check_trace_tp(const char *trace, int tp) {
    if (trace && tp >= 1) return cli_error("--trace records one backend; it does not run with --tp %d", tp);
    return 0;
}

static int apply_model_opt(void *ctx, opt_id id, const char *name, const char *v) {
    cli_opts *o = ctx;
    long long x;
    double f;
    o->given |= 1ull << id;
    switch (id) {
    case O_MODEL:
        if (o->model_dir) return cli_error("give the model directory once (%s %s)", name, v);
        o->model_dir = v;
        return 0;
    case O_IDS:
        free(o->ids); // a repeated --ids replaces the earlier one
        o->ids = NULL;
        if (parse_ids(v, &o->ids, &o->n_ids)) return cli_error("%s", fd_error_msg());
        return 0;
    case O_PROMPT:
        o->prompt = v;
        return 0;
    case O_SYSTEM:
        o->system = v;
        return 0;
    case O_TOKENIZER:
        o->tokenizer = v;
        return 0;
    case O_OUT:
        o->out = v;
        return 0;
    case O_N_NEW:
        if (opt_int(v, 0, 1 << 24, &x)) return bad(name, v, "a count in 0..16777216");
        o->n_new = (int)x;
        o->n_given = 1;
        return 0;
    case O_PREFILL_CHUNK:
        if (opt_int(v, 1, 1 << 20, &x)) return bad(name, v, "in 1..1048576");
        o->prefill_chunk = (int)x;
        return 0;
    case O_TP:
        return opt_tp(name, v, &o->tp);
    case O_THREADS:
        if (opt_int(v, 1, 256, &x)) return bad(name, v, "in 1..256");
        o->threads = (int)x;
        return 0;
    case O_CTX:
        if (opt_int(v, 1, 1 << 24, &x)) return bad(name, v, "in 1..16777216");
        o->ctx = x;
        return 0;
    case O_KV_TOKENS:
        if (opt_int(v, 1, 1 << 30, &x)) return bad(name, v, "in 1..1073741824");
        o->kv_tokens = x;
        return 0;
    case O_ROUTE:
    case O_GDN_PREFILL:
        if (o->n_routes == 8) return cli_error("at most 8 --route options");
        if (id == O_GDN_PREFILL && strcmp(v, "chunked") && strcmp(v, "serial"))
            return cli_error("--gdn-prefill: '%s' is not a route value (chunked | serial)", v);
        o->route_specs[o->n_routes++] =
            id == O_ROUTE ? v : (!strcmp(v, "chunked") ? "gdn_prefill=chunked" : "gdn_prefill=serial");
        return 0;
    case O_TEMPERATURE:
        if (opt_num(v, 0, 100, &f)) return bad(name, v, "in 0..100");
        o->temperature = (float)f;
        return 0;
    case O_TOP_P:
        if (opt_num(v, 0, 1, &f)) return bad(name, v, "in 0..1");
        o->top_p = (float)f;
        return 0;
    case O_TOP_K:
        if (opt_int(v, 0, 1 << 30, &x)) return bad(name, v, "a count >= 0");
        o->top_k = (int)x;
        return 0;
    case O_SEED:
        if (opt_int(v, 0, INT64_MAX, &x)) return bad(name, v, "a non-negative integer");
        o->seed = (uint64_t)x;
        return 0;
    case O_RANDOM_WEIGHTS:
        o->random_cfg = v;
        return 0;
    case O_DRAFT_RANDOM:
        o->draft_random = v;
        return 0;
    case O_TRACE:
        o->trace = v;
        return 0;
    case O_QUANTIZE:
        o->load.quantize_fp8 = !strcmp(v, "fp8");
        o->load.quantize_int4 = !strcmp(v, "gptq-int4")  ? FD_WFMT_GPTQ_INT4
                                : !strcmp(v, "awq-int4") ? FD_WFMT_AWQ_INT4
                                                         : 0;
        if (!o->load.quantize_fp8 && !o->load.quantize_int4) return bad(name, v, "fp8, gptq-int4 or awq-int4");
        return 0;
    case O_JSON:
        o->json_out = v;
        return 0;
    case O_DECODE_TOKENS:
        if (opt_int(v, 1, 1 << 20, &x)) return bad(name, v, "in 1..1048576");
        o->bench.decode_tokens = (int)x;
        return 0;
    case O_CONTEXTS:
        o->bench.n_ctx = 0;
        for (const char *p = v; *p;) {
            char *end;
            errno = 0;
            long long c = strtoll(p, &end, 10);
            if (end == p || errno || c < 1 || c > (1 << 24) || o->bench.n_ctx == FD_BENCH_MAX_CTX ||
                (*end && *end != ','))
                return bad(name, v, "a list of up to 16 lengths in 1..16777216");
            o->bench.ctx[o->bench.n_ctx++] = c;
            p = *end ? end + 1 : end;
        }
        return 0;
    case O_ORACLE_TAU:
    case O_GEMM_CEILING:
    case O_COPY_CEILING:
        if (opt_num(v, 0, 1e30, &f)) return bad(name, v, "a non-negative number");
        if (id == O_ORACLE_TAU)
            o->bench.oracle_tau = f;
        else if (id == O_GEMM_CEILING)
            o->bench.gemm_ceiling = f;
        else
            o->bench.copy_ceiling = f;
        return 0;
    case O_DRAFT:
        o->draft_dir = v;
        return 0;
    case O_BLOCK_SIZE:
        if (opt_int(v, 2, FD_SPEC_MAX_BLOCK, &x)) return bad(name, v, "in 2..64");
        o->block_size = (int)x;
        return 0;
    case O_TREE_BUDGET:
        if (opt_int(v, 1, FD_SPEC_MAX_BLOCK - 1, &x)) return bad(name, v, "in 1..63");
        o->tree_budget = (int)x;
        return 0;
    case O_STATS:
        o->stats = 1;
        return 0;
    case O_IGNORE_EOS:
        o->ignore_eos = 1;
        return 0;
    case O_BACKEND:
        if (strcmp(v, "cpu") && strcmp(v, "cuda")) return bad(name, v, "cpu or cuda");
        o->backend = v;
        return 0;
    default:
        return cli_error("%s: not a model-command option", name); // a table row listed by mistake
    }
}

int cli_parse(const cmd_spec *cmd, int argc, char **argv, cli_opts *o, int need_model, int *done) {
    memset(o, 0, sizeof *o);
    *done = 0;
    o->n_new = 16;
    o->top_p = 1.0f;
    o->bench = (fd_bench_opts){.ctx = {1024, 32768, 65536, 131072},
                               .n_ctx = 4,
                               .decode_tokens = 32,
                               .prefill_chunk = 4096,
                               .oracle_tau = 4.74,
                               .gemm_ceiling = -1,
                               .copy_ceiling = -1,
                               .seed = 1};
    o->backend = "cpu";
    const char *pos = NULL;
    int rc = opts_parse(cmd, argc, argv, apply_model_opt, o, &pos);
    if (!rc && pos) {
        if (o->model_dir) rc = cli_error("give the model directory once ('%s' and '%s')", o->model_dir, pos);
        o->model_dir = pos;
    }
    if (!rc && need_model && !o->model_dir && !o->random_cfg)
        rc = cli_error("%s: missing MODEL_DIR%s", cmd->name,
                       opts_takes(cmd, O_RANDOM_WEIGHTS) ? " (or --random-weights)" : "");
    if (!rc && o->model_dir && o->random_cfg) rc = cli_error("give MODEL_DIR or --random-weights, not both");
    if (!rc && o->draft_dir && o->draft_random) rc = cli_error("give --draft or --draft-random, not both");
    if (!rc && o->ids && o->prompt) rc = cli_error("give --ids or -p TEXT, not both");
    if (rc) {
        free(o->ids);
        o->ids = NULL;
        if (rc == 1) *done = 1, rc = 0; // --help
    }
    return rc;
}

int cli_check_sampling(const cli_opts *o) {
    const opt_id samp[] = {O_TOP_K, O_TOP_P, O_SEED};
    for (int i = 0; i < 3; i++)
        if (o->given >> samp[i] & 1 && o->temperature == 0)
            return cli_error("%s samples: give --temperature T > 0 too (temperature 0 decodes greedily)",
                             opts_def(samp[i])->names);
    if (o->given >> O_BLOCK_SIZE & 1 && !o->draft_dir && !o->draft_random)
        return cli_error("--block-size is the DFlash block: give --draft DIR too");
    if (o->given >> O_TREE_BUDGET & 1 && !o->draft_dir && !o->draft_random)
        return cli_error("--tree-budget sizes a DFlash tree round: give --draft DIR (and --route spec_verify=tree)");
    return 0;
}
