// build/flashdelta: dispatch to subcommands; --version.
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"

static const struct {
    const cmd_spec *spec;
    int (*fn)(int, char **);
} k_cmds[] = {
    {&cmd_run_spec, cmd_run},
    {&cmd_chat_spec, cmd_chat},
    {&cmd_generate_spec, cmd_generate},
    {&cmd_serve_spec, cmd_serve},
    {&cmd_info_spec, cmd_info},
    {&cmd_logits_spec, cmd_logits},
    {&cmd_draft_logits_spec, cmd_draft_logits},
    {&cmd_bench_spec, cmd_bench},
    {&cmd_check_spec, cmd_check},
    {&cmd_tokenize_spec, cmd_tokenize},
};

static void usage(FILE *f) {
    fprintf(f, "usage: flashdelta COMMAND [ARGS]   (flashdelta COMMAND --help lists its options; --version)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        fprintf(f, "  %s %s\n      %s\n", k_cmds[i].spec->name, k_cmds[i].spec->args, k_cmds[i].spec->summary);
}

#ifndef FD_SOURCE_DIR
#define FD_SOURCE_DIR "."
#endif

static void version(void) {
    printf("flashdelta %s\n", FD_VERSION);
#ifdef FD_HAVE_CUDA
    printf("backends: cpu, cuda\n");
#else
    printf("backends: cpu (built without CUDA: make CUDA=1 for the GPU backend)\n");
#endif
    printf("compiler: %s\nsource: %s\n", __VERSION__, FD_SOURCE_DIR);
}

int main(int argc, char **argv) {
    // Whole lines of stdout reach a pipe before any later stderr line, so `2>&1` keeps text and log lines apart.
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        version();
        return 0;
    }
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
        if (!strcmp(argv[1], k_cmds[i].spec->name)) return k_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "flashdelta: error: unknown command '%s' (see flashdelta --help)\n", argv[1]);
    return 2;
}
