// The command line's one option table. Every option of every command is a row here (its names, including the
// vLLM / llama.cpp spellings that mean the same thing, its value and its help); a command lists the rows it takes.
// The parser refuses an option the command does not list (naming the command), so no option is silently ignored,
// and `COMMAND --help` prints exactly the listed rows.
#ifndef FD_CLI_OPTS_H
#define FD_CLI_OPTS_H
#include <stdint.h>
#include <stdio.h>

#include "engine/bench.h"
#include "model/model.h"

typedef enum {
    O_MODEL,
    O_IDS,
    O_PROMPT,
    O_OUT,
    O_N_NEW,
    O_SYSTEM,
    O_TEMPERATURE,
    O_TOP_K,
    O_TOP_P,
    O_SEED,
    O_DRAFT,
    O_BLOCK_SIZE,
    O_TREE_BUDGET,
    O_STATS,
    O_IGNORE_EOS,
    O_RANDOM_WEIGHTS,
    O_DRAFT_RANDOM,
    O_CONTEXTS,
    O_DECODE_TOKENS,
    O_ORACLE_TAU,
    O_GEMM_CEILING,
    O_COPY_CEILING,
    O_JSON,
    // common engine options
    O_BACKEND,
    O_THREADS,
    O_TP,
    O_ROUTE,
    O_GDN_PREFILL,
    O_CTX,
    O_KV_TOKENS,
    O_PREFILL_CHUNK,
    O_TRACE,
    O_QUANTIZE,
    // serve
    O_TOKENIZER,
    O_MODEL_NAME,
    O_HOST,
    O_PORT,
    O_PORT_FILE,
    O_SLOTS,
    O_HTTP_THREADS,
    O_MAX_QUEUE,
    O_QUEUE_TIMEOUT,
    O_REQUEST_TIMEOUT,
    O_CONN_TIMEOUT,
    O_BODY_TIMEOUT,
    O_MAX_BODY,
    O_NO_PREFIX_CACHE,
    O_PREFIX_BLOCK,
    O_PREFIX_CHECKPOINT,
    O_PREFIX_CACHE_MB,
    O_API_KEY,
    O_ALLOWED_ORIGINS,
    O_CHAT_TEMPLATE,
    O_ADMIN_KEY,
    O_CACHE_SALT_API_KEY,
    O_PARSE_SPECIAL,
    O_MAX_CONNS,
    O_MAX_CONNS_PER_IP,
    // tokenize
    O_DECODE,
    O_SKIP_SPECIAL,
    O_BENCH_FILE,
    O_REPEAT,
    O_COUNT
} opt_id;

typedef struct {
    opt_id id;
    const char *names; // "--ctx|-c|--max-model-len": the first is the one help prints first
    const char *meta;  // value placeholder; NULL for a flag
    const char *help;
} opt_def;

typedef struct cmd_spec {
    const char *name;
    const char *args;    // positional part of the usage line ("MODEL_DIR"), "" for none
    const char *summary; // one line for `flashdelta --help`
    const opt_id *opts;  // what the command takes, O_COUNT-terminated
    // why an option the command refuses does not apply (NULL: the generic message)
    const char *(*why_not)(opt_id id);
} cmd_spec;

// Called for every option given: id, the name as typed, its value (NULL for a flag). Returns 0, or 2 after printing
// one "flashdelta: error: ..." line.
typedef int (*opt_apply_fn)(void *ctx, opt_id id, const char *name, const char *value);

// Parses argv[1..] (argv[0] is the command name). A bare word is the positional argument (*positional; a second
// one is refused). `--name=value` works too. Returns 0, 1 for --help (usage printed on stdout), or 2 (message
// printed).
int opts_parse(const cmd_spec *cmd, int argc, char **argv, opt_apply_fn apply, void *ctx, const char **positional);
void opts_usage(const cmd_spec *cmd, FILE *f);
int opts_takes(const cmd_spec *cmd, opt_id id);
const opt_def *opts_def(opt_id id);

int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2))); // prints, returns 2

// Value parsers: 0 or -1 (no message).
int opt_int(const char *s, long long lo, long long hi, long long *out);
// --tp's value (1, 2, 4 or 8) into *tp: 0, or 2 with the message printed.
int opt_tp(const char *name, const char *v, int *tp);
// --trace FILE together with --tp N (tp >= 1: given) is refused, for every command that takes both: 2 with the
// message printed, else 0. (A trace wraps one backend; a group has a backend per rank.)
int cli_check_trace_tp(const char *trace, int tp);
int opt_num(const char *s, double lo, double hi, double *out);

// The model commands' options (info, logits, generate, draft-logits, bench, run, chat).
typedef struct {
    const char *model_dir;
    int32_t *ids;
    int64_t n_ids;
    const char *prompt;    // -p TEXT ("-" = stdin)
    const char *system;    // chat: system message
    const char *tokenizer; // chat: tokenizer.json or its directory (default: MODEL_DIR)
    const char *out;
    int n_new, n_given; // -n and whether it was given
    int prefill_chunk;  // 0 = default budget
    int threads;
    int tp;                     // --tp: tensor-parallel ranks (0 = 1)
    int64_t ctx;                // 0 = the command's default
    int64_t kv_tokens;          // paged KV pool (0 = FD_KV_TOKENS_DEFAULT)
    const char *route_specs[8]; // --route NAME=VALUE, applied after FD_ROUTE_* from the environment
    int n_routes;
    const char *backend;
    float temperature, top_p; // sampling (temperature 0 = greedy)
    int top_k;
    uint64_t seed;
    const char *random_cfg;   // --random-weights CONFIG.json: synthetic target instead of MODEL_DIR
    fd_load_opts load;        // --quantize fp8
    const char *draft_random; // --draft-random CONFIG.json: synthetic drafter
    fd_bench_opts bench;
    const char *json_out;
    const char *trace;     // --trace FILE: Chrome-trace JSON of per-op timings
    const char *draft_dir; // DFlash drafter
    int block_size;        // 0 = the drafter's
    int tree_budget;       // draft nodes of a tree round (route spec_verify=tree); 0 = the default
    int stats;
    int ignore_eos; // text commands: generate to -n even past an end-of-sequence token
    uint64_t given; // bit id: the option was given
} cli_opts;

// Defaults, parse, and the MODEL_DIR check (need_model). On failure nothing stays allocated. Returns 0, or the
// exit status to return (0 after --help).
int cli_parse(const cmd_spec *cmd, int argc, char **argv, cli_opts *o, int need_model, int *done);
int parse_ids(const char *s, int32_t **ids, int64_t *n);
// --top-k / --top-p / --seed without --temperature > 0 (they would be ignored), --block-size without a drafter:
// refused (0 or 2 with the message printed).
int cli_check_sampling(const cli_opts *o);
#endif
