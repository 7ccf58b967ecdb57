// build/flashdelta: dispatch to subcommands.
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
    int own_help; // the command prints its own --help (its options differ from the common ones)
} k_cmds[] = {
    {"run", cmd_run, "run [MODEL_DIR --ids 1,2,3]       demo generation (bundled tiny model when no dir)", 0},
    {"info", cmd_info, "info MODEL_DIR                     architecture, layer plan, parameters, dtypes", 0},
    {"logits", cmd_logits, "logits MODEL_DIR --ids 1,2,3 --out FILE   float32 logits [n_ids x vocab]", 0},
    {"generate", cmd_generate,
     "generate MODEL_DIR --ids 1,2,3 -n N [--prefill-chunk K] [--temperature T --top-k K --top-p P --seed S]\n"
     "           [--draft DIR [--block-size B] [--stats]]   greedy (or sampled) ids, one line", 0},
    {"bench", cmd_bench,
     "bench (MODEL_DIR | --random-weights CONFIG.json) [--draft DIR | --draft-random CONFIG.json]\n"
     "           [--contexts 1024,32768,65536,131072] [--decode 32] [--oracle-tau 4.74] [--json FILE]", 0},
    {"draft-logits", cmd_draft_logits, "draft-logits MODEL_DIR --draft DIR --ids 1,2,3 --out FILE", 0},
    {"serve", cmd_serve, "serve --model DIR [--tokenizer PATH] [--port 8000]   OpenAI-compatible HTTP server", 1},
    {"tokenize", cmd_tokenize, "tokenize TOKENIZER [--decode]     text on stdin -> ids (or ids -> text)", 1},
};

static void common_options(FILE *f) {
    fprintf(f, "\ncommon options: --backend cpu|cuda  --route NAME=VALUE (docs/routes.md)  --ctx N  --prefill-chunk K\n"
               "                --kv-tokens N (paged KV cache, tokens; default 262144)\n"
               "                --threads N  --trace FILE (Chrome-trace JSON of per-op timings)\n");
}

static void usage(FILE *f) {
    fprintf(f, "usage: flashdelta COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++) fprintf(f, "  %s\n", k_cmds[i].help);
    common_options(f);
}

static int wants_help(int argc, char **argv) {
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].name)) {
            if (!k_cmds[i].own_help && wants_help(argc, argv)) {
                printf("usage: flashdelta %s\n", k_cmds[i].help);
                common_options(stdout);
                return 0;
            }
            return k_cmds[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "flashdelta: error: unknown command '%s' (see flashdelta --help)\n", argv[1]);
    return 2;
}
