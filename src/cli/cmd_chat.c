// `flashdelta chat MODEL_DIR [--draft DIR]`: a terminal chat. Each turn renders the whole conversation with the
// model's chat template (its chat_template.jinja / tokenizer_config.json, else the built-in Qwen3 one, as serve
// does), and the engine keeps the conversation's KV and GDN state between turns: only the tokens after the longest
// prefix it already holds are prefilled (/stats shows how many were reused). When the rendering departs from what the
// engine holds (a re-tokenized answer, a DFlash round that ran past the end of the answer, /reset) the prefix cache
// (engine/prefix_cache.h) restores the longest prefix it has a state snapshot for: every turn leaves one at the last
// block boundary of its prompt (under --tp N every rank's part, in its own memory). Ctrl-C ends the answer being
// generated, not the program; Ctrl-D or /quit ends it.
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/gen.h"
#include "engine/prefix_cache.h"
#include "io/chat_template.h"

static const char *chat_why_not(opt_id id) {
    return id == O_IDS ? "chat reads text from the terminal" : id == O_PROMPT ? "type the messages instead" : NULL;
}
static const opt_id k_chat_opts[] = {O_MODEL,  O_TOKENIZER,  O_DRAFT, O_BLOCK_SIZE,    O_TREE_BUDGET,
                                     O_SYSTEM, O_IGNORE_EOS, O_N_NEW, O_TEMPERATURE,   O_TOP_K,
                                     O_TOP_P,  O_SEED,       O_TP,    CLI_ENGINE_OPTS, O_COUNT};
const cmd_spec cmd_chat_spec = {
    "chat", "MODEL_DIR",
    "terminal chat with the model's chat template, answers streamed; /reset, /stats, /quit; Ctrl-C stops an answer",
    k_chat_opts, chat_why_not};

static volatile sig_atomic_t g_stop;
static void on_sigint(int sig) {
    (void)sig;
    g_stop = 1;
}

typedef struct {
    chat_msg *msgs;
    char **owned; // the strings msgs point to
    int n, cap;
} convo;

static void convo_add(convo *c, const char *role, char *text) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 8;
        c->msgs = fd_realloc(c->msgs, (size_t)c->cap * sizeof *c->msgs);
        c->owned = fd_realloc(c->owned, (size_t)c->cap * sizeof *c->owned);
    }
    c->msgs[c->n] = (chat_msg){.role = role, .content = text};
    c->owned[c->n++] = text;
}

static void convo_clear(convo *c, int keep) {
    while (c->n > keep) free(c->owned[--c->n]);
}

// One message from stdin: a line; a line ending in '\' continues on the next; a line `"""` opens a block that
// the next `"""` line closes. NULL at end of input. *interrupted: Ctrl-C at the prompt (nothing returned).
static char *read_message(int tty, int *interrupted) {
    size_t cap = 256, len = 0;
    char *msg = fd_malloc(cap), line[4096];
    int block = 0;
    *interrupted = 0;
    msg[0] = 0;
    if (tty) fputs(">>> ", stdout), fflush(stdout);
    for (;;) {
        errno = 0;
        if (!fgets(line, sizeof line, stdin)) {
            if (errno == EINTR) {
                clearerr(stdin);
                *interrupted = 1;
            }
            if (len && !*interrupted) return msg; // end of input after a partial message: send it
            free(msg);
            return NULL;
        }
        size_t n = strlen(line);
        const int nl = n && line[n - 1] == '\n';
        if (nl) line[--n] = 0;
        int more = 0;
        if (!strcmp(line, "\"\"\"")) {
            block = !block;
            if (block) {
                if (tty) fputs("... ", stdout), fflush(stdout);
                continue;
            }
            if (len && msg[len - 1] == '\n') msg[--len] = 0;
            return msg;
        }
        if (!block && n && line[n - 1] == '\\') line[--n] = 0, more = 1;
        if (len + n + 2 > cap) msg = fd_realloc(msg, cap = 2 * (len + n + 2));
        memcpy(msg + len, line, n);
        len += n;
        if (block || more || !nl) msg[len++] = '\n';
        msg[len] = 0;
        if (!nl && !block && !more) continue; // a line longer than the buffer: its rest follows
        if (!block && !more) {
            if (len && msg[len - 1] == '\n') msg[--len] = 0;
            return msg;
        }
        if (tty) fputs("... ", stdout), fflush(stdout);
    }
}

typedef struct {
    int64_t answers, tokens, prefilled, reused, cached, rounds, emitted;
    double decode_s, prefill_s;
    gen_result last;
    int64_t last_prefilled, last_reused, last_cached, last_rounds, last_emitted;
} chat_stats;

static void print_stats(const chat_stats *st, int spec) {
    const gen_result *r = &st->last;
    printf("last answer: %d tokens, %.1f tok/s; prompt: %lld tokens prefilled, %lld reused (%lld of them from the "
           "prefix cache; %.3f s)\n",
           r->n_out, r->decode_s > 0 ? r->n_out / r->decode_s : 0.0, (long long)st->last_prefilled,
           (long long)st->last_reused, (long long)st->last_cached, r->prefill_s);
    printf("session: %lld answers, %lld tokens, %.1f tok/s; %lld prompt tokens prefilled, %lld reused (%lld from the "
           "prefix cache)\n",
           (long long)st->answers, (long long)st->tokens, st->decode_s > 0 ? st->tokens / st->decode_s : 0.0,
           (long long)st->prefilled, (long long)st->reused, (long long)st->cached);
    if (spec)
        printf("DFlash: last answer %.2f emitted tokens/round (%lld rounds); session %.2f (%lld rounds)\n",
               st->last_rounds ? (double)st->last_emitted / (double)st->last_rounds : 0.0, (long long)st->last_rounds,
               st->rounds ? (double)st->emitted / (double)st->rounds : 0.0, (long long)st->rounds);
    fflush(stdout);
}

// The answer's ids as the engine fed them, appended to what it holds: every produced id but the last (the last
// one is the next input, never fed). NULL-safe bookkeeping for the next turn's prefix match.
static void note_fed(tok_ids *held, const int32_t *out, const gen_result *r) {
    const int produced = r->n_out + r->hit_eos;
    for (int i = 0; i + 1 < produced; i++) tok_ids_push(held, out[i]);
}

// Brings the engine to hold a prefix of ids and returns its length (-1 on error): what it already holds when that
// is a prefix of ids, else (after a reset) the longest prefix the cache restores (*cached); *reused counts either.
// Then it prefills up to the last block boundary before the end and caches a state snapshot there for later turns.
static int64_t prepare_prefix(session *s, pc_cache *pc, tok_ids *held, const tok_ids *ids, int chunk, int64_t *reused,
                              int64_t *cached) {
    fd_dflash *spec = s->has_draft ? &s->spec : NULL;
    int64_t same = 0;
    const int64_t n = (int64_t)ids->n;
    if ((int64_t)held->n == s->eng.n_past)
        while (same < (int64_t)held->n && same < n && held->ids[same] == ids->ids[same]) same++;
    if (same == n) same--; // a prompt adds at least one token
    *cached = 0;
    if (same < (int64_t)held->n || s->eng.n_past == 0) { // holds something else past `same`, or nothing: the cache
        engine_reset(&s->eng);
        if (spec) dflash_reset(spec);
        held->n = 0;
        same = *cached = pc_restore(pc, &s->eng, spec, ids->ids, n, n - 1);
    }
    *reused = same;
    const int64_t B = pc_block(pc), b = (n - 1) / B * B;
    if (b > same && !pc_has_snapshot(pc, ids->ids, b)) {
        int32_t anchor; // unused: the answer starts after the rest of the prompt
        if (spec ? dflash_prefill(spec, ids->ids + same, b - same, chunk, NULL, &anchor)
                 : engine_prefill(&s->eng, ids->ids + same, b - same, chunk, NULL, 0))
            return -1;
        pc_insert(pc, &s->eng, spec, ids->ids, b, NULL);
        same = b;
    }
    return same;
}

// The conversation as the template sees it: [{"role", "content"}, ...].
static json_t *convo_json(const convo *c) {
    json_t *a = json_array();
    for (int i = 0; i < c->n; i++)
        json_array_append_new(a, json_pack("{s:s, s:s}", "role", c->msgs[i].role, "content",
                                           c->msgs[i].content ? c->msgs[i].content : ""));
    return a;
}

// The model's own chat template (chat_template.jinja or tokenizer_config.json in the model directory, then in the
// --tokenizer directory), else the built-in Qwen3 one, as `serve` picks it.
static chat_template *load_template(const cli_opts *o) {
    int found = 0;
    chat_template *t = chat_template_load(o->model_dir, NULL, &found);
    if (!found && o->tokenizer) {
        char *dir = fd_strdup(o->tokenizer);
        char *slash = strrchr(dir, '/');
        if (strstr(dir, ".json") && slash) *slash = 0;
        t = chat_template_load(dir, NULL, &found);
        free(dir);
    }
    if (!t && found) return NULL;
    if (!t) t = chat_template_builtin();
    if (t) FD_INFO("chat template: %s", chat_template_origin(t));
    return t;
}

static int chat_loop(session *s, const cli_opts *o, tok_tokenizer *tok, const int32_t *eos, int n_eos) {
    const int tty = isatty(STDIN_FILENO);
    chat_template *tpl = load_template(o);
    if (!tpl) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        return 1;
    }
    convo c = {0};
    if (o->system) convo_add(&c, "system", fd_strdup(o->system));
    const int keep = c.n;
    tok_ids held = {0}; // what the engine holds (its n_past tokens), when known
    chat_stats st = {0};
    fd_sampler smp;
    sampler_init(&smp, o->temperature, o->top_k, o->top_p, o->seed);
    int32_t *out = fd_malloc(sizeof(int32_t) * (size_t)(o->n_new + 1));
    cli_progress pr;
    progress_attach(&pr, &s->eng, "prefill");
    pc_cache *pc = pc_create(&s->eng, 16, (size_t)512 << 20);
    if (s->has_draft) pc_attach_drafter(pc, &s->spec);
    int rc = 0;
    for (;;) {
        int intr;
        char *msg = read_message(tty, &intr);
        if (!msg) {
            if (intr) {
                printf("\n(Ctrl-D or /quit leaves)\n");
                g_stop = 0;
                continue;
            }
            if (tty) putchar('\n');
            break;
        }
        if (!strcmp(msg, "/quit") || !strcmp(msg, "/exit")) {
            free(msg);
            break;
        }
        if (!strcmp(msg, "/stats")) {
            print_stats(&st, s->has_draft);
            free(msg);
            continue;
        }
        if (!strcmp(msg, "/reset")) {
            convo_clear(&c, keep);
            engine_reset(&s->eng);
            if (s->has_draft) dflash_reset(&s->spec);
            held.n = 0;
            printf("(conversation cleared)\n");
            fflush(stdout);
            free(msg);
            continue;
        }
        if (!*msg) {
            free(msg);
            continue;
        }
        convo_add(&c, "user", msg);
        json_t *mj = convo_json(&c);
        char *text = chat_template_apply(tpl, mj, NULL, NULL, NULL, 1);
        json_decref(mj);
        tok_ids ids = {0};
        if (!text || tok_encode(tok, text, strlen(text), &ids)) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            free(text);
            tok_ids_free(&ids);
            convo_clear(&c, c.n - 1);
            continue;
        }
        free(text);
        progress_start(&pr, "prefill");
        int64_t cached, reused;
        const int64_t same = prepare_prefix(s, pc, &held, &ids, o->prefill_chunk, &reused, &cached);
        const int64_t room = s->eng.opt.capacity - (int64_t)ids.n;
        int n_new = o->n_new < room ? o->n_new : (int)(room > 0 ? room : 0);
        if (n_new < 1) {
            fprintf(stderr, "flashdelta: error: the conversation (%zu tokens) fills the context (%lld): /reset\n",
                    ids.n, (long long)s->eng.opt.capacity);
            tok_ids_free(&ids);
            convo_clear(&c, c.n - 1);
            continue;
        }
        text_out txt;
        text_out_init(&txt, tok);
        txt.terminal = isatty(STDOUT_FILENO);
        gen_sink k = {eos, n_eos, &g_stop, text_out_token, &txt};
        gen_result r;
        const int64_t rounds0 = s->spec.st.rounds, emitted0 = s->spec.st.emitted;
        g_stop = 0;
        int grc = same < 0
                      ? -1
                      : gen_run(s, ids.ids + same, (int64_t)(ids.n - same), o->prefill_chunk, n_new, &smp, &k, out, &r);
        text_out_finish(&txt);
        const int stopped = g_stop;
        g_stop = 0;
        if (!txt.wrote_newline_last) putchar('\n');
        if (stopped) printf("(stopped)\n");
        fflush(stdout);
        if (grc) {
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
            engine_reset(&s->eng);
            if (s->has_draft) dflash_reset(&s->spec);
            held.n = 0;
            tok_ids_free(&ids);
            convo_clear(&c, c.n - 1);
            continue;
        }
        held.n = 0;
        for (size_t i = 0; i < ids.n; i++) tok_ids_push(&held, ids.ids[i]);
        note_fed(&held, out, &r);
        char *answer = NULL;
        size_t alen;
        if (tok_decode(tok, out, (size_t)r.n_out, 1, &answer, &alen)) answer = fd_strdup("");
        convo_add(&c, "assistant", answer);
        st.last = r;
        st.last_prefilled = (int64_t)ids.n - reused;
        st.last_reused = reused;
        st.last_cached = cached;
        st.last_rounds = s->spec.st.rounds - rounds0;
        st.last_emitted = s->spec.st.emitted - emitted0;
        st.answers++;
        st.tokens += r.n_out;
        st.decode_s += r.decode_s;
        st.prefill_s += r.prefill_s;
        st.prefilled += st.last_prefilled;
        st.reused += reused;
        st.cached += cached;
        st.rounds += st.last_rounds;
        st.emitted += st.last_emitted;
        tok_ids_free(&ids);
    }
    convo_clear(&c, 0);
    free(c.msgs);
    free(c.owned);
    tok_ids_free(&held);
    pc_free(pc);
    chat_template_free(tpl);
    free(out);
    return rc;
}

// The ids that end an answer: the model's own (generation_config / tokenizer_config) and ChatML's end tokens.
static int chat_eos(const char *dir, const tok_tokenizer *t, int32_t *eos, int max) {
    int n = chat_eos_ids(dir, t, eos, max);
    if (n < 0) return -1;
    const char *extra[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        const int32_t id = tok_token_id(t, extra[i]);
        int seen = id < 0;
        for (int j = 0; j < n; j++) seen |= eos[j] == id;
        if (!seen && n < max) eos[n++] = id;
    }
    return n;
}

int cmd_chat(int argc, char **argv) {
    cli_opts o;
    int done, rc = cli_parse(&cmd_chat_spec, argc, argv, &o, 1, &done);
    if (rc || done) return rc;
    if ((rc = cli_check_sampling(&o))) return rc;
    if (!o.n_given) o.n_new = 512;
    tok_tokenizer *tok = cli_tokenizer(o.tokenizer ? o.tokenizer : o.model_dir);
    if (!tok) return 1;
    int32_t eos[16];
    const int n_eos = chat_eos(o.model_dir, tok, eos, 16);
    if (n_eos < 0) {
        fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        tok_free(tok);
        return 1;
    }
    session s;
    if ((rc = session_open(&s, &o, 0))) { // 0: the model's context, capped by the KV budget
        tok_free(tok);
        return rc;
    }
    // Ctrl-C sets the flag; without SA_RESTART a read at the prompt returns so the loop can say how to leave.
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr,
            "flashdelta chat: %s%s%s, answers of at most %d tokens. Enter sends; end a line with \\ to go on, "
            "or wrap lines in \"\"\"; /reset, /stats, /quit; Ctrl-C stops an answer.\n",
            o.model_dir, s.has_draft ? " with DFlash drafter " : "", s.has_draft ? o.draft_dir : "", o.n_new);
    rc = chat_loop(&s, &o, tok, eos, o.ignore_eos ? 0 : n_eos);
    session_close(&s);
    tok_free(tok);
    return rc;
}
