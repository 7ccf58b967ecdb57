// Subcommands of build/flashdelta. Each returns the process exit status (0, 1 for bad input or a failed run,
// 2 for usage errors); each has its option table row list (cli/opts.h) in its cmd_spec.
#ifndef FD_CLI_H
#define FD_CLI_H
#include "cli/opts.h"

#define FD_VERSION "0.6.0"

// The options every command that runs the engine takes.
#define CLI_ENGINE_OPTS O_BACKEND, O_THREADS, O_ROUTE, O_GDN_PREFILL, O_CTX, O_KV_TOKENS, O_PREFILL_CHUNK, O_QUANTIZE

extern const cmd_spec cmd_info_spec, cmd_logits_spec, cmd_generate_spec, cmd_run_spec, cmd_chat_spec,
    cmd_draft_logits_spec, cmd_bench_spec, cmd_check_spec, cmd_tokenize_spec, cmd_serve_spec;
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_draft_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
#endif
