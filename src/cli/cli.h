// Subcommands of build/flashdelta. Each returns the process exit status.
#ifndef FD_CLI_H
#define FD_CLI_H
int cmd_info(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_draft_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
#endif
