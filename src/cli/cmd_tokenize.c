// `flashdelta tokenize` — placeholder until the tokenizer lands (issue 3).
#include <stdio.h>

#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "flashdelta: error: tokenize is not built yet\n");
    return 1;
}
