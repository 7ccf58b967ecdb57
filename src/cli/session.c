// Engine setup for the model commands, the text prompt path and terminal progress (session.h).
#include "cli/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/threads.h"
#include "cli/cli.h"
#include "engine/dflash_tree.h"
#include "engine/tp_agree.h"
#include "engine/routes.h"
#include "engine/trace.h"

fd_backend *cli_make_backend(const char *name, int threads, int rank) {
    fd_backend *be = tp_backend_create(name, threads, rank);
    if (!be) fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    return be;
}

void session_close(session *s) {
    if (s->trace && s->be) {
        trace_print_summary(s->be, stderr);
        if (trace_write(s->be, s->trace))
            fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
        else
            FD_INFO("trace written to %s", s->trace);
    }
    dflash_free(&s->spec);
    engine_free(&s->eng);
    tp_group_close(&s->tp); // rank 0's backend is s->be
    if (s->be) model_release(&s->model, s->be);
    if (s->be && s->has_draft) drafter_release(&s->dr, s->be);
    if (s->has_draft) drafter_free(&s->dr);
    if (s->be) s->be->destroy(s->be);
    model_free(&s->model);
    memset(s, 0, sizeof *s);
}

static int fail(int rc) {
    fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    return rc;
}

// The context capacity: --ctx, else what the request needs, else (an open-ended session: chat) the model's own
// maximum capped by the KV budget. Past max_position_embeddings the model runs positions it was never trained on:
// allowed, with a warning.
static int64_t pick_capacity(const cli_opts *o, const fd_config *c, int64_t tokens, int64_t kv_tokens) {
    const int64_t max_pos = c->max_position_embeddings;
    int64_t cap = o->ctx ? o->ctx : tokens;
    // With a drafter, room for a tree verify past the last token: a tree's nodes hold one position each until the
    // commit, so a capacity of exactly prompt + new would shrink the trees of the last rounds (at 48 new tokens and
    // budget 32 most of them: the trained pair's held-out prompts made 3.58 emitted tokens/round instead of 3.84).
    if (!o->ctx && tokens > 0 && (o->draft_dir || o->draft_random))
        cap += (o->tree_budget ? o->tree_budget : FD_TREE_BUDGET_DEFAULT) + 1;
    if (!o->ctx && tokens <= 0) {
        cap = max_pos < kv_tokens ? max_pos : kv_tokens;
        FD_INFO("context %lld tokens: the model's max_position_embeddings %lld%s", (long long)cap, (long long)max_pos,
                cap < max_pos ? ", capped by the KV budget (--kv-tokens; raise it or give --ctx)" : "");
    }
    if (tokens > max_pos)
        FD_WARN("%lld tokens (prompt + new) exceed the model's max_position_embeddings %lld: positions past it were "
                "never trained",
                (long long)tokens, (long long)max_pos);
    else if (o->ctx > max_pos)
        FD_WARN("--ctx %lld exceeds the model's max_position_embeddings %lld: positions past it were never trained",
                (long long)o->ctx, (long long)max_pos);
    return cap > 0 ? cap : 1;
}

// Refuses --tp N on a cuda build with fewer than N visible devices (rank r runs on device r), naming both.
int cli_check_tp_devices(const cli_opts *o) {
    if (!tp_check_devices(o->backend, o->tp)) return 0;
    fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    return 1;
}

// --tp N given (1 included: a one-rank group, the same code path as N > 1): the group (engine_tp.h).
static int tp_open(session *s, const cli_opts *o) {
    if (!tp_group_open(&s->tp, &s->model, s->be, o->backend, o->threads, o->tp, o->draft_dir || o->draft_random))
        return 0;
    fprintf(stderr, "flashdelta: error: %s\n", fd_error_msg());
    return 1;
}

static int session_setup(session *s, const cli_opts *o, int64_t tokens) {
    memset(s, 0, sizeof *s);
    if (cli_check_trace_tp(o->trace, o->tp)) return 2; // a usage error: before anything is loaded
    cli_progress load;
    progress_start(&load, "loading");
    if (load.on) fprintf(stderr, "flashdelta: loading %s ...", o->random_cfg ? o->random_cfg : o->model_dir);
    if (o->random_cfg ? model_random_with(o->random_cfg, o->seed, &o->load, &s->model)
                      : model_load_with(o->model_dir, &o->load, &s->model)) {
        if (load.on) fputc('\n', stderr);
        return fail(1);
    }
    const fd_config *c = &s->model.cfg;
    for (int64_t i = 0; i < o->n_ids; i++)
        if (o->ids[i] >= c->vocab_size) {
            if (load.on) fputc('\n', stderr);
            fprintf(stderr, "flashdelta: error: --ids: token id %d (position %lld) is outside the vocabulary [0, %d)\n",
                    o->ids[i], (long long)i, c->vocab_size);
            return 1;
        }
    if (o->ctx && tokens > o->ctx) {
        if (load.on) fputc('\n', stderr);
        fprintf(stderr, "flashdelta: error: %lld tokens (prompt + new) do not fit the context capacity --ctx %lld\n",
                (long long)tokens, (long long)o->ctx);
        return 1;
    }
    if (cli_check_tp_devices(o)) {
        if (load.on) fputc('\n', stderr);
        return 1;
    }
    s->be = cli_make_backend(o->backend, o->threads, 0);
    if (!s->be) return 1;
    if (o->trace) {
        s->be = trace_wrap(s->be);
        s->trace = o->trace;
    }
    model_upload(&s->model, s->be);
    if (o->tp >= 1 && tp_open(s, o)) {
        if (load.on) fputc('\n', stderr);
        return 1;
    }
    if (load.on)
        fprintf(stderr, " %.2f M parameters in %.1f s\n", (double)s->model.n_params / 1e6, fd_time_s() - load.t0);
    for (int r = 0; r < (s->tp.tp ? s->tp.tp : 1); r++) // before any cache is sized
        if (routes_backend_preset(r ? s->tp.bes[r] : s->be, o->route_specs, o->n_routes)) return fail(2);
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.kv_tokens = o->kv_tokens ? o->kv_tokens : FD_KV_TOKENS_DEFAULT;
    eo.capacity = pick_capacity(o, c, tokens, eo.kv_tokens);
    if (o->prefill_chunk) eo.max_batch = o->prefill_chunk;
    if (eo.max_batch > eo.capacity) eo.max_batch = (int)eo.capacity;
    if (o->draft_dir || o->draft_random) {
        if (o->draft_random ? drafter_random(o->draft_random, &s->model, o->seed + 1, &s->dr)
                            : drafter_load(o->draft_dir, &s->model, &s->dr))
            return fail(1);
        s->has_draft = 1;
        drafter_upload(&s->dr, s->be);
        const int B = o->block_size ? o->block_size : s->dr.block_size;
        if (eo.max_batch < B) eo.max_batch = B; // a verify block is one forward
    }
    if (s->tp.tp ? engine_init_tp(&s->eng, &s->model, &s->tp, &eo) : engine_init(&s->eng, &s->model, s->be, &eo))
        return fail(1);
    if (s->has_draft && dflash_init(&s->spec, &s->eng, &s->dr, o->block_size)) return fail(1);
    if (s->has_draft && o->tree_budget) s->spec.tree_budget = o->tree_budget;
    // Routes: defaults, then the environment (FD_ROUTE_<NAME>), then --route; impossible combinations refused.
    int bad = routes_from_env(&s->eng);
    for (int i = 0; !bad && i < o->n_routes; i++) bad = routes_set(&s->eng, o->route_specs[i]);
    if (bad || routes_check(&s->eng)) return fail(2);
    // spec_verify=tree with a drafter on an engine that cannot run it (a backend without the tree ops, --tp):
    // refused here, before any prompt is computed, rather than at the first round
    const fd_route *sv = routes_find(&s->eng, "spec_verify");
    if (s->has_draft && sv && !strcmp(sv->values[*sv->sel], "tree") && engine_tree_supported(&s->eng)) return fail(2);
    if (s->tp.tp) {
        // Every rank runs the same build, libraries, routes, configuration and weights, or none runs (exit 2).
        if (tp_agree(&s->eng, FD_VERSION, stderr)) {
            fprintf(stderr, "flashdelta: error: the tensor-parallel ranks disagree (table above): refusing to start\n");
            return 2;
        }
        FD_INFO("tensor parallelism: %d rank%s, one host thread each; the ranks agree on build, libraries, routes, "
                "configuration and weight sample", s->tp.tp, s->tp.tp == 1 ? "" : "s");
    }
    FD_INFO("backend %s, %d threads, capacity %lld tokens (KV pool %lld), prefill budget %d", s->be->name,
            fd_threads_count(), (long long)eo.capacity, (long long)kv_pool_tokens(s->eng.pool), eo.max_batch);
    if (fd_log_level_enabled(FD_LOG_INFO)) routes_print(&s->eng, stderr);
    return 0;
}

int session_open(session *s, const cli_opts *o, int64_t tokens) {
    fflush(stdout); // what the command printed so far comes before the setup's log lines
    int rc = session_setup(s, o, tokens);
    if (rc) session_close(s);
    return rc;
}

// ---- progress ----

void progress_start(cli_progress *p, const char *what) {
    memset(p, 0, sizeof *p);
    p->what = what;
    p->t0 = p->last = fd_time_s();
    p->on = isatty(STDERR_FILENO) && fd_log_level_enabled(FD_LOG_INFO);
}

void progress_update(cli_progress *p, int64_t done, int64_t total) {
    if (!p->on) return;
    const double now = fd_time_s(), dt = now - p->t0;
    const int end = done >= total;
    // a prompt of one forward says nothing; a longer one at most ten times a second, and always its end
    if (!p->shown && end) return;
    if (!end && p->shown && now - p->last < 0.1) return;
    p->last = now;
    p->shown = 1;
    const double rate = dt > 0 ? (double)done / dt : 0;
    fflush(stdout);
    fprintf(stderr, "\r\033[Kflashdelta: %s %lld / %lld tokens (%.0f%%), %.0f tok/s", p->what, (long long)done,
            (long long)total, total ? 100.0 * (double)done / (double)total : 100.0, rate);
    if (!end && rate > 0) fprintf(stderr, ", ETA %.1f s", (double)(total - done) / rate);
    if (end) fprintf(stderr, ", %.2f s\n", dt);
    fflush(stderr);
}

void progress_engine_cb(void *ud, int64_t done, int64_t total) {
    cli_progress *p = ud;
    progress_update(p, done, total);
}

void progress_attach(cli_progress *p, fd_engine *e, const char *what) {
    progress_start(p, what);
    if (!p->on) return;
    e->on_progress = progress_engine_cb;
    e->progress_ud = p;
}

// ---- text prompts ----

tok_tokenizer *cli_tokenizer(const char *model_dir) {
    tok_tokenizer *t = tok_load(model_dir);
    if (!t)
        fprintf(stderr, "flashdelta: error: %s (a text prompt needs the model's tokenizer.json; --ids takes ids)\n",
                fd_error_msg());
    return t;
}

char *cli_read_stream(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0, r;
    char *p = fd_malloc(cap);
    while ((r = fread(p + len, 1, cap - len - 1, f)) > 0) {
        len += r;
        if (cap - len - 1 == 0) p = fd_realloc(p, cap *= 2);
    }
    p[len] = 0;
    *n = len;
    return p;
}

int cli_prompt_ids(cli_opts *o, const tok_tokenizer *t) {
    size_t len;
    char *stdin_text = NULL;
    const char *text = o->prompt;
    if (!strcmp(text, "-")) text = stdin_text = cli_read_stream(stdin, &len);
    tok_ids ids = {0};
    int rc = tok_encode(t, text, strlen(text), &ids);
    free(stdin_text);
    if (rc) {
        tok_ids_free(&ids);
        return fail(1);
    }
    if (!ids.n) {
        tok_ids_free(&ids);
        fprintf(stderr, "flashdelta: error: the prompt is empty\n");
        return 1;
    }
    free(o->ids);
    o->ids = ids.ids;
    o->n_ids = (int64_t)ids.n;
    return 0;
}

// Writes n little-endian fp32 values (the host is little-endian x86-64 / arm64); 1 with a message on failure.
int write_f32(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(x, sizeof(float), n, f) != n;
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "flashdelta: error: cannot write %s: %s\n", path, strerror(errno));
    return bad;
}
