// Streaming generation (gen.h). The plain path mirrors engine_generate: the prompt through
// engine_prefill_sample, then one engine_forward_sample per token (argmax_rows / sample_rows on the backend),
// so a text prompt gives the ids of `generate --ids`. The DFlash path mirrors dflash_generate round by round.
#include "cli/gen.h"

#include <string.h>

#include "io/tokenizer.h"

static int is_eos(const gen_sink *k, int32_t id) {
    for (int i = 0; k && i < k->n_eos; i++)
        if (k->eos[i] == id) return 1;
    return 0;
}

// Hands id on; 1 when generation ends here.
static int emit(const gen_sink *k, int32_t id, int32_t *out, gen_result *r) {
    r->last = id;
    if (is_eos(k, id)) {
        r->hit_eos = 1;
        return 1;
    }
    if (out) out[r->n_out] = id;
    r->n_out++;
    if (k && k->on_token && k->on_token(k->ud, id)) return 1;
    return k && k->stop && *k->stop;
}

int gen_run(session *s, const int32_t *ids, int64_t n, int chunk, int n_new, fd_sampler *smp, const gen_sink *k,
            int32_t *out, gen_result *r) {
    memset(r, 0, sizeof *r);
    r->last = -1;
    fd_engine *e = &s->eng;
    const double t0 = fd_time_s();
    int32_t tok;
    if (s->has_draft) {
        FD_TRY(dflash_prefill(&s->spec, ids, n, chunk, smp, &tok));
    } else {
        FD_TRY(engine_prefill_sample(e, ids, n, chunk, smp, &tok));
    }
    r->prefill_s = fd_time_s() - t0;
    const double t1 = fd_time_s();
    int done = n_new < 1 || emit(k, tok, out, r);
    while (!done && r->n_out < n_new) {
        if (s->has_draft) {
            int64_t L = s->spec.B;
            if (L > n_new - r->n_out) L = n_new - r->n_out;
            if (L > e->opt.capacity - e->n_past) L = e->opt.capacity - e->n_past;
            if (L < 1) return fd_error_set("context capacity of %lld tokens reached", (long long)e->opt.capacity);
            int32_t em[FD_SPEC_MAX_BLOCK];
            int got;
            FD_TRY(dflash_round(&s->spec, tok, (int)L, smp, r->n_out, em, &got));
            for (int i = 0; i < got && !done && r->n_out < n_new; i++) done = emit(k, em[i], out, r);
            tok = em[got - 1];
        } else {
            if (e->n_past >= e->opt.capacity)
                return fd_error_set("context capacity of %lld tokens reached", (long long)e->opt.capacity);
            FD_TRY(engine_forward_sample(e, &tok, 1, smp, &tok));
            done = emit(k, tok, out, r);
        }
    }
    r->decode_s = fd_time_s() - t1;
    return 0;
}

void text_out_init(text_out *t, const tok_tokenizer *tok) {
    t->ts = tok_stream_new(tok, 1);
    t->wrote_newline_last = 1;
    t->terminal = 0;
}

static void put(text_out *t, const char *p, size_t len) {
    if (!p || !len) return;
    if (t->terminal) {
        for (size_t i = 0; i < len; i++) {
            const unsigned char c = (unsigned char)p[i];
            if ((c >= 0x20 && c != 0x7f) || c == '\n' || c == '\t') putchar(c);
        }
    } else {
        fwrite(p, 1, len, stdout);
    }
    fflush(stdout);
    t->wrote_newline_last = p[len - 1] == '\n';
}

int text_out_token(void *ud, int32_t id) {
    text_out *t = ud;
    size_t len = 0;
    const char *p = tok_stream_push(t->ts, id, &len);
    put(t, p, len);
    return 0;
}

void text_out_finish(text_out *t) {
    size_t len = 0;
    const char *p = tok_stream_flush(t->ts, &len);
    put(t, p, len);
    tok_stream_free(t->ts);
    t->ts = NULL;
}
