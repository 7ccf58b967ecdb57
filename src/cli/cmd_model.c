// Model subcommands: info, logits, generate, run.
#include <stdio.h>

#include "cli/cli.h"

int cmd_info(int argc, char **argv) { (void)argc; (void)argv; return 1; }
int cmd_logits(int argc, char **argv) { (void)argc; (void)argv; return 1; }
int cmd_generate(int argc, char **argv) { (void)argc; (void)argv; return 1; }
int cmd_run(int argc, char **argv) { (void)argc; (void)argv; return 1; }
