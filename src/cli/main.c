// build/flashdelta: dispatch to subcommands.
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_cmds[] = {
    {"run", cmd_run, "run [MODEL_DIR --ids 1,2,3]       demo generation (bundled tiny model when no dir)"},
    {"info", cmd_info, "info MODEL_DIR                     architecture, layer plan, parameters, dtypes"},
    {"logits", cmd_logits, "logits MODEL_DIR --ids 1,2,3 --out FILE   float32 logits [n_ids x vocab]"},
    {"generate", cmd_generate,
     "generate MODEL_DIR --ids 1,2,3 -n N [--prefill-chunk K] [--temperature T --top-k K --top-p P --seed S]\n"
     "           [--draft DIR [--block-size B] [--stats]]   greedy (or sampled) ids, one line"},
    {"bench", cmd_bench,
     "bench (MODEL_DIR | --random-weights CONFIG.json) [--draft DIR | --draft-random CONFIG.json]\n"
     "           [--contexts 1024,32768,65536,131072] [--decode 32] [--oracle-tau 4.74] [--json FILE]"},
    {"draft-logits", cmd_draft_logits, "draft-logits MODEL_DIR --draft DIR --ids 1,2,3 --out FILE"},
    {"serve", cmd_serve, "serve --model DIR [--tokenizer PATH] [--port 8000]   OpenAI-compatible HTTP server"},
    {"tokenize", cmd_tokenize, "tokenize TOKENIZER [--decode]     text on stdin -> ids (or ids -> text)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: flashdelta COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) fprintf(f, "  %s\n", k_cmds[i].help);
    fprintf(f, "\ncommon options: --backend cpu|cuda  --route NAME=VALUE (docs/routes.md)  --ctx N  --prefill-chunk K\n"
               "                --threads N  --trace FILE (Chrome-trace JSON of per-op timings)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flashdelta: error: unknown command '%s' (see flashdelta --help)\n", argv[1]);
    return 2;
}
