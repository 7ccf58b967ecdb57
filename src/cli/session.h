// What the model commands share: a loaded model on a backend with an engine (and a DFlash drafter), the text
// prompt path (the model's tokenizer), and progress lines for long work on a terminal.
#ifndef FD_CLI_SESSION_H
#define FD_CLI_SESSION_H
#include "cli/opts.h"
#include "engine/dflash.h"
#include "engine/engine.h"
#include "engine/engine_tp.h"
#include "io/tokenizer.h"

typedef struct {
    const char *trace; // write the trace here at close
    fd_model model;
    fd_backend *be;
    fd_engine eng;       // with --tp N (1 included, when given) a tensor-parallel leader over tp's ranks
    fd_tp_set tp;        // --tp N: the shards and the ranks' backends (bes[0] == be; the others are ours)
    fd_drafter dr;
    fd_dflash spec;
    int has_draft;
} session;

// Loads the model, creates the backend and an engine sized for `tokens` positions (o->ctx when given; tokens <= 0
// with no --ctx: the model's max_position_embeddings capped by the KV budget, said in one line). On failure
// everything is released again and the exit status returned.
int session_open(session *s, const cli_opts *o, int64_t tokens);
void session_close(session *s); // a second close is a no-op

// The backend `name` for tensor-parallel rank `rank` (cuda: on device rank; 0 outside a group).
fd_backend *cli_make_backend(const char *name, int threads, int rank);
// 1 with a message naming both numbers when --tp asks for more CUDA devices than are visible; else 0.
int cli_check_tp_devices(const cli_opts *o);

// Progress of long work on stderr, only when stderr is a terminal (a pipe or file gets none): a line rewritten in
// place with done/total, tok/s and the ETA, ended with a newline when the work completes.
typedef struct {
    const char *what; // "prefill"
    double t0, last;
    int on, shown;
} cli_progress;
void progress_start(cli_progress *p, const char *what);
void progress_update(cli_progress *p, int64_t done, int64_t total); // an engine on_progress callback's body
void progress_engine_cb(void *ud, int64_t done, int64_t total);
// Engine prompts report to p (progress_start again before each later prompt: it restarts the clock).
void progress_attach(cli_progress *p, fd_engine *e, const char *what);

// The model's tokenizer (MODEL_DIR/tokenizer.json), or NULL with a message naming what is missing.
tok_tokenizer *cli_tokenizer(const char *model_dir);
// o->prompt ("-" = all of stdin) through the tokenizer into o->ids; 0, or 1 with the message printed.
int cli_prompt_ids(cli_opts *o, const tok_tokenizer *t);
char *cli_read_stream(FILE *f, size_t *n);
int write_f32(const char *path, const float *x, size_t n);
#endif
