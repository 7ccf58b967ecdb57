// Token-by-token generation for the text commands (generate -p, run MODEL_DIR, chat): the same ids as
// engine_generate / dflash_generate, handed to a sink as they are produced so text streams.
#ifndef FD_CLI_GEN_H
#define FD_CLI_GEN_H
#include <signal.h>

#include "cli/session.h"
#include "engine/sampling.h"

typedef struct {
    const int32_t *eos; // generation ends after emitting one of these (it is not passed to on_token)
    int n_eos;
    volatile sig_atomic_t *stop; // set asynchronously (Ctrl-C): generation ends after the current step
    // called for every new id; a nonzero return ends generation
    int (*on_token)(void *ud, int32_t id);
    void *ud;
} gen_sink;

typedef struct {
    int n_out;    // ids produced (the eos that ended it not counted)
    int hit_eos;  // ended by an eos id
    int32_t last; // the last id produced (not yet fed to the model), -1 if none
    double prefill_s, decode_s;
} gen_result;

// Prefills ids[0..n) after what the engine already holds (a chat continues its conversation), then generates up
// to n_new ids, through DFlash when the session has a drafter. out may be NULL.
int gen_run(session *s, const int32_t *ids, int64_t n, int chunk, int n_new, fd_sampler *smp, const gen_sink *k,
            int32_t *out, gen_result *r);

// A sink that writes the text of each id to stdout as soon as it is complete UTF-8.
typedef struct {
    tok_stream *ts;
    int wrote_newline_last; // the text so far ends with '\n' (or nothing was written)
    int terminal;           // drop control bytes but '\n' and '\t': model text must not drive the terminal
} text_out;
void text_out_init(text_out *t, const tok_tokenizer *tok);
int text_out_token(void *ud, int32_t id);
void text_out_finish(text_out *t); // flushes the stream's tail
#endif
