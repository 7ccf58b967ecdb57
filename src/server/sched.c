// The scheduler: the one thread that calls the engine (the CPU thread pool is not reentrant, and a GPU stream wants
// one owner anyway). Each slot is an engine holding one sequence. A step runs one decode token for every decoding
// slot (round-robin), then spends what is left of the token budget on prompt chunks, oldest request first, so a
// long prompt advances by at most one budget per step and never stalls running streams for longer.
//
// Continuous batching: sequences join and leave between steps, and a step's decode tokens of all decoding slots run
// as one batched forward (engine_decode_batch_sample: weights read once, state and KV per sequence, each slot's
// token sampled on the backend with its own parameters); prompt chunks run per sequence.
//
// Speculative decoding (--draft): each slot also holds a DFlash state over its engine; a decode step is then one
// draft -> verify -> accept round that emits 1..B tokens. The prompt chunks feed the drafter's context as they run.
// The prefix cache then also holds the drafter's context K/V of each block. Decode-time snapshots are skipped in
// that mode: a round moves the sequence by 1..B tokens, past block boundaries, so only prompt checkpoints are cached.
//
// Prefix cache: on admission the longest cached prefix (ending at a state snapshot, at most prompt-1 tokens: the last
// prompt token must run to give logits) is restored into the slot. Prompt chunks are cut at snapshot points (every
// pc_checkpoint tokens and the last block boundary before the final prompt token) so that the state exists there.
// During decode the state is snapshot at each block boundary into a per-slot buffer (overwritten), and the last one
// is cached when the request ends: the next chat turn, which repeats this turn's prompt and answer, then hits it.
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "engine/dflash.h"
#include "engine/prefix_cache.h"
#include "engine/sampling.h"
#include "engine/sampling_host.h"
#include "engine/routes.h"
#include "server/server_internal.h"

typedef enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_DECODE } slot_state;

typedef struct {
    fd_engine e;
    slot_state st;
    srv_job *job;
    int32_t *seq; // tokens fed to the engine so far or about to be: prompt, then generated
    int64_t n_seq, cap_seq;
    tok_stream *ts; // detokenizer (whole UTF-8 characters only)
    srv_buf text;   // generated text so far (stop strings are searched here)
    size_t emitted; // bytes of text already published to a stream
    int n_gen;
    int32_t next; // sampled token to feed at the next decode step
    double t_last, t_peek;
    int probed; // the half-close probe was sent (client_gone)
    fd_sampler smp;   // the request's temperature / top-k / top-p and seeded generator (tokens are sampled on the
                      // backend: engine_forward_sample / engine_decode_batch_sample; only the ids come back)
    fd_dflash spec;   // speculative decoding state (when the server has a drafter)
    int64_t admitted; // admission order (oldest prefill first)
    void *roll;       // decode-time state snapshot at roll_pos (backend memory), handed to the cache at the end
    int64_t roll_pos;
    float *row;       // host sampling: one row of logits [V] and scratch [2 V]
    float *scratch;
    fd_host_state hs; // host sampling: penalty counts
    int choice;       // which of the job's choices this sequence is (n > 1)
    double t_prefill, t_prefill_log; // prefill start and last progress line (long prompts, see log_prefill)
    int64_t prefill_from;            // n_past when the prefill started (after the prefix cache)
} slot;

struct srv_sched {
    const srv_config *cfg;
    fd_model *m;
    fd_backend *be;
    const tok_tokenizer *tok;
    fd_drafter *dr; // NULL: no speculative decoding
    int32_t eos[16];
    int n_eos;
    srv_metrics *met;
    slot *slots;
    int n_slots, rr;
    pc_cache *pc;
    fd_kv_pool pool; // the slots' KV pages
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue; // FIFO ring of cfg->max_queue
    int q_head, q_len;
    int stopping, running_thread;
    int64_t reset_asked, reset_done, admit_counter;
};

// ---- finishing ----

// The prefix cache as this job's tenant sees it.
static pc_cache *pc_for(srv_sched *s, const srv_job *j) {
    pc_set_salt(s->pc, j->cache_salt);
    return s->pc;
}

static void job_fail(srv_job *j, int status, const char *type, const char *code, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        srv_err_set(&j->err, status, type, code, NULL, "%s", msg);
        if (j->stream && j->headers_sent) { // else the HTTP side answers with the error's own status
            srv_sse_error(j);
            srv_sse_done(j);
        }
        j->done = 1;
        j->t_done = fd_time_s();
    }
    srv_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

static void met_finish(srv_sched *s, int kind, const srv_job *j, double now) {
    pthread_mutex_lock(&s->met->mu);
    s->met->finished[kind]++;
    s->met->running--;
    srv_hist_observe(&s->met->e2e, now - j->t_arrival);
    pthread_mutex_unlock(&s->met->mu);
}

static void slot_release(srv_sched *s, slot *sl) {
    if (s->pc && sl->roll) {
        if (sl->roll_pos > 0 && sl->roll_pos <= sl->e.n_past &&
            !pc_has_snapshot(pc_for(s, sl->job), sl->seq, sl->roll_pos))
            pc_insert(s->pc, &sl->e, NULL, sl->seq, sl->roll_pos, sl->roll);
        else
            s->be->free(s->be, sl->roll);
    }
    sl->roll = NULL;
    sl->roll_pos = 0;
    engine_reset(&sl->e); // its KV pages go back to the pool for the other slots
    host_state_free(&sl->hs);
    size_t n;
    tok_stream_flush(sl->ts, &n); // resets the stream for the next request
    sl->text.len = 0;
    srv_job_unref(sl->job);
    sl->job = NULL;
    sl->st = SLOT_FREE;
}

static void slot_fail(srv_sched *s, slot *sl, int status, const char *type, const char *code, const char *msg,
                      int kind) {
    job_fail(sl->job, status, type, code, msg);
    met_finish(s, kind, sl->job, fd_time_s());
    slot_release(s, sl);
}

// A failed forward: a full KV pool is the server's capacity, not a fault (503, like an overloaded queue).
static void slot_fail_forward(srv_sched *s, slot *sl) {
    const char *msg = fd_error_msg();
    if (fd_error_code() == FD_ERR_KV_FULL)
        slot_fail(s, sl, 503, "server_overloaded", "kv_cache_full", msg, SRV_FIN_ERROR);
    else
        slot_fail(s, sl, 500, "server_error", NULL, msg, SRV_FIN_ERROR);
}

// ---- output ----

static int is_eos(const srv_sched *s, int32_t t) {
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos[i] == t) return 1;
    return 0;
}

// Earliest stop-string match in text that ends after byte `from` (matches wholly before it were checked already).
static long find_stop(const srv_job *j, const srv_buf *text, size_t from) {
    long best = -1;
    for (int i = 0; i < j->n_stop; i++) {
        size_t sl = strlen(j->stop[i]);
        size_t start = from >= sl ? from - sl + 1 : 0;
        if (text->len < sl) continue;
        const char *hit = memmem(text->p + start, text->len - start, j->stop[i], sl);
        if (hit && (best < 0 || hit - text->p < best)) best = hit - text->p;
    }
    return best;
}

// Streams publish text only up to where no stop string can still begin, and only whole UTF-8 characters.
static size_t safe_len(const srv_job *j, const srv_buf *text) {
    size_t hold = 0;
    for (int i = 0; i < j->n_stop; i++) {
        size_t l = strlen(j->stop[i]);
        if (l - 1 > hold) hold = l - 1;
    }
    size_t n = text->len > hold ? text->len - hold : 0;
    while (n > 0 && n < text->len && ((unsigned char)text->p[n] & 0xC0) == 0x80) n--;
    return n;
}

static void publish(srv_sched *s, slot *sl, srv_finish fin) {
    srv_job *j = sl->job;
    srv_choice *ch = &j->ch[sl->choice];
    pthread_mutex_lock(&j->mu);
    j->n_completion += sl->n_gen - ch->n_completion;
    ch->n_completion = sl->n_gen;
    j->cur = sl->choice; // the chunks below are this choice's (n > 1 streams interleave choices)
    // the stream ends with the last choice: its finish chunk, then usage and [DONE]
    const int last = fin && !ch->done && j->n_done + 1 == j->n;
    if (j->stream && j->logprobs) srv_sse_logprobs(j);
    if (j->kind == SRV_CHAT) {
        const size_t upto = fin || !j->stream ? sl->text.len : safe_len(j, &sl->text);
        fin = srv_chat_publish(j, ch, sl->text.p, upto, fin);
        if (j->stream && fin) srv_sse_chunk(j, NULL, 0, 0, fin);
    } else if (j->stream) {
        size_t upto = fin ? sl->text.len : safe_len(j, &sl->text);
        if (upto > sl->emitted) {
            srv_sse_chunk(j, sl->text.p + sl->emitted, upto - sl->emitted, 0, SRV_FINISH_NONE);
            sl->emitted = upto;
        }
        if (fin) srv_sse_chunk(j, NULL, 0, 0, fin);
    }
    if (j->stream && last) {
        if (j->include_usage) srv_sse_usage(j, j->n_prompt);
        srv_sse_done(j);
    }
    if (fin && !ch->done) {
        if (!j->stream && j->kind != SRV_CHAT) {
            if (j->echo) srv_buf_add(&ch->text, j->echo, strlen(j->echo));
            srv_buf_add(&ch->text, sl->text.p ? sl->text.p : "", sl->text.len);
        }
        ch->finish = fin;
        ch->done = 1;
        if (++j->n_done == j->n) { // the last choice ends the request
            j->done = 1;
            j->t_done = fd_time_s();
        }
    }
    srv_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
    (void)s;
}

// A sampled token: account, detokenize, check eos / stop strings / length, publish.
static void take_token(srv_sched *s, slot *sl, int32_t t) {
    srv_job *j = sl->job;
    const double now = fd_time_s();
    sl->n_gen++;
    pthread_mutex_lock(&s->met->mu);
    s->met->generation_tokens++;
    if (sl->n_gen == 1) srv_hist_observe(&s->met->ttft, now - j->t_arrival);
    else srv_hist_observe(&s->met->itl, now - sl->t_last);
    pthread_mutex_unlock(&s->met->mu);
    if (sl->n_gen == 1) {
        pthread_mutex_lock(&j->mu);
        j->t_first = now;
        pthread_mutex_unlock(&j->mu);
    }
    sl->t_last = now;
    srv_finish fin = SRV_FINISH_NONE;
    size_t len = 0;
    if (!j->ignore_eos && is_eos(s, t)) {
        fin = SRV_FINISH_STOP;
    } else {
        const char *piece = tok_stream_push(sl->ts, t, &len);
        if (!piece) { // an id with no text (the model's vocabulary is padded past the tokenizer's): it adds nothing
            FD_DEBUG("request %s: token id %d has no text in the tokenizer", j->id, t);
            piece = "";
            len = 0;
        }
        const size_t before = sl->text.len;
        srv_buf_add(&sl->text, piece, len);
        long at = find_stop(j, &sl->text, before);
        if (at >= 0) {
            sl->text.len = (size_t)at;
            fin = SRV_FINISH_STOP;
        } else if (sl->n_gen >= j->max_tokens) {
            fin = SRV_FINISH_LENGTH;
        }
        sl->next = t;
    }
    if (fin == SRV_FINISH_LENGTH || (fin == SRV_FINISH_STOP && !j->ignore_eos && is_eos(s, t))) {
        const char *rest = tok_stream_flush(sl->ts, &len); // bytes of an unfinished character become U+FFFD
        srv_buf_add(&sl->text, rest, len);
        long at = find_stop(j, &sl->text, sl->text.len - len);
        if (at >= 0) {
            sl->text.len = (size_t)at;
            fin = SRV_FINISH_STOP;
        }
    }
    publish(s, sl, fin);
    if (fin) {
        met_finish(s, fin == SRV_FINISH_STOP ? SRV_FIN_STOP : SRV_FIN_LENGTH, j, now);
        slot_release(s, sl);
    }
}

// ---- running ----

static void seq_push(slot *sl, const int32_t *t, int64_t n) {
    if (sl->n_seq + n > sl->cap_seq) {
        while (sl->n_seq + n > sl->cap_seq) sl->cap_seq = sl->cap_seq ? sl->cap_seq * 2 : 256;
        sl->seq = fd_realloc(sl->seq, (size_t)sl->cap_seq * sizeof(int32_t));
    }
    memcpy(sl->seq + sl->n_seq, t, (size_t)n * sizeof(int32_t));
    sl->n_seq += n;
}

static void slot_start(srv_sched *s, slot *sl, srv_job *j, int choice) {
    const double now = fd_time_s();
    sl->job = j;
    sl->choice = choice;
    if (choice > 0) srv_job_ref(j); // each of the job's sequences holds a reference (the queue's went to the first)
    sl->n_seq = 0;
    sl->n_gen = 0;
    sl->emitted = 0;
    sl->text.len = 0;
    sl->t_peek = 0;
    sl->probed = 0;
    sl->admitted = s->admit_counter++;
    sampler_init(&sl->smp, (float)j->temperature, j->top_k, (float)j->top_p, j->seed + (uint64_t)choice);
    if (j->host) {
        const int V = s->m->cfg.vocab_size;
        if (!sl->row) {
            sl->row = fd_malloc((size_t)V * sizeof *sl->row);
            sl->scratch = fd_malloc((size_t)V * 2 * sizeof *sl->scratch);
        }
        host_state_init(&sl->hs, V, j->prompt, j->n_prompt);
    }
    engine_reset(&sl->e);
    if (s->dr) dflash_reset(&sl->spec);
    seq_push(sl, j->prompt, j->n_prompt);
    fd_dflash *spec = s->dr ? &sl->spec : NULL;
    int64_t cached = s->pc ? pc_restore(pc_for(s, j), &sl->e, spec, j->prompt, j->n_prompt, j->n_prompt - 1) : 0;
    // The prompt's KV pages up front: a prompt the pool cannot hold now is refused before any work (503).
    const int kv_ok = engine_reserve(&sl->e, j->n_prompt) == 0;
    pthread_mutex_lock(&j->mu);
    j->n_cached = (int)cached;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->met->mu);
    s->met->running++;
    s->met->prompt_tokens += j->n_prompt;
    if (s->pc) {
        s->met->pc_queries += j->n_prompt;
        s->met->pc_hits += cached;
    }
    srv_hist_observe(&s->met->queue, now - j->t_arrival);
    pthread_mutex_unlock(&s->met->mu);
    sl->st = SLOT_PREFILL;
    sl->t_prefill = sl->t_prefill_log = now;
    sl->prefill_from = sl->e.n_past;
    if (!kv_ok) {
        slot_fail_forward(s, sl);
        return;
    }
    pthread_mutex_lock(&j->mu); // a stream's headers (200) go out now, not before a refusal could come
    j->admitted = 1;
    srv_job_wake_locked(j);
    pthread_mutex_unlock(&j->mu);
}

// A prompt of more than 8 prefill budgets logs its progress every 5 s and at its end, so a long prefill is visible
// in the log (short ones, nearly all, say nothing).
static void log_prefill(srv_sched *s, slot *sl, int64_t end, int final) {
    const int64_t todo = sl->job->n_prompt - sl->prefill_from;
    const double now = fd_time_s();
    if (todo <= 8 * (int64_t)s->cfg->prefill_chunk || (!final && now - sl->t_prefill_log < 5)) return;
    sl->t_prefill_log = now;
    const int64_t done = end - sl->prefill_from;
    const double dt = now - sl->t_prefill, rate = dt > 0 ? (double)done / dt : 0;
    if (final)
        FD_INFO("prefill %s: %lld tokens in %.2f s (%.0f tok/s)", sl->job->id, (long long)done, dt, rate);
    else
        FD_INFO("prefill %s: %lld / %lld tokens, %.0f tok/s, ETA %.1f s", sl->job->id, (long long)done,
                (long long)todo, rate, rate > 0 ? (double)(todo - done) / rate : 0.0);
}

// The KV tokens (whole pages) a job's prompt takes.
static int64_t kv_prompt_tokens(const srv_sched *s, const srv_job *j) {
    const int64_t P = s->pool.page_tokens;
    return ((int64_t)j->n_prompt + P - 1) / P * P;
}

// Is the client still there? Peeks at the socket while libmicrohttpd has the connection suspended (it does not watch
// suspended connections): a reset or a socket error means the client went away. End-of-file alone does not: a client
// may half-close (shutdown(SHUT_WR)) once its request is sent and still read the answer, as HTTP allows. To tell
// that from a client that closed for good, the first end-of-file of an HTTP/1.1 request whose response has not
// started is answered with an interim "HTTP/1.1 100 Continue" (every HTTP/1.1 client must skip 1xx responses): a
// closed socket answers it with a reset, seen at the next peek; a half-closed client reads past it. (A stream whose
// headers went out cannot take it: its closed client is noticed when the next event's write fails.)
static int client_gone(slot *sl, double now) {
    srv_job *j = sl->job;
    if (atomic_load(&j->cancelled)) return 1;
    if (now < sl->t_peek) return 0;
    sl->t_peek = now + 0.05;
    int gone = 0;
    pthread_mutex_lock(&j->mu);
    if (!j->conn) gone = 1;
    else if (j->suspended && j->fd >= 0) {
        char c;
        ssize_t r = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        gone = r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
        if (r == 0 && !sl->probed && j->http11 && !j->headers_sent) {
            // j->mu is held and the connection suspended: libmicrohttpd writes nothing to it meanwhile
            static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
            sl->probed = 1;
            gone = send(j->fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN &&
                   errno != EWOULDBLOCK;
        } else if (r == 0) {
            // after end-of-file recv keeps returning 0 even once a reset came; the reset shows in the TCP state
            struct tcp_info ti;
            socklen_t tl = sizeof ti;
            gone = getsockopt(j->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return gone;
}

static void decode_finish(srv_sched *s, slot *sl, int32_t tok);

// Host sampling from the slot's logits row (engine_forward wrote it): the token, and its logprobs entry.
static int32_t host_sample(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    fd_token_logprobs lp;
    int32_t t = host_pick(&sl->smp, &j->hp, &sl->hs, sl->row, s->m->cfg.vocab_size, sl->scratch, j->top_logprobs,
                          j->logprobs ? &lp : NULL);
    if (j->logprobs && !(is_eos(s, t) && !j->ignore_eos)) { // the end-of-sequence token is not part of the text
        json_t *e = srv_logprob_entry(s->tok, &lp);
        pthread_mutex_lock(&j->mu);
        json_t **dst = j->stream ? &j->ch[sl->choice].lp_pending : &j->ch[sl->choice].lp_all;
        if (!*dst) *dst = json_array();
        json_array_append_new(*dst, e);
        pthread_mutex_unlock(&j->mu);
    }
    return t;
}

// A host-sampled slot's decode step: its own forward with the logits row (no batching, no speculation).
static void host_decode(srv_sched *s, slot *sl) {
    if (engine_reserve(&sl->e, sl->e.n_past + 1)) {
        slot_fail_forward(s, sl);
        return;
    }
    seq_push(sl, &sl->next, 1);
    if (engine_forward(&sl->e, &sl->next, 1, sl->row, 0)) {
        slot_fail_forward(s, sl);
        return;
    }
    const int32_t t = host_sample(s, sl);
    if (s->dr) { // no decode snapshots with a drafter (see the top of the file)
        pthread_mutex_lock(&s->met->mu);
        s->met->decode_steps++;
        pthread_mutex_unlock(&s->met->mu);
        take_token(s, sl, t);
    } else {
        decode_finish(s, sl, t);
    }
}

// One DFlash round from the newest token: emits 1..B tokens (never more than max_tokens still allows).
static void spec_round(srv_sched *s, slot *sl) {
    srv_job *j = sl->job;
    int32_t em[FD_SPEC_MAX_BLOCK];
    int ne = 0;
    const int left = j->max_tokens - sl->n_gen;
    const int L = left < sl->spec.B ? left : sl->spec.B;
    if (dflash_round(&sl->spec, sl->next, L, sampler_is_greedy(&sl->smp) ? NULL : &sl->smp, sl->n_gen, em, &ne)) {
        slot_fail_forward(s, sl);
        return;
    }
    pthread_mutex_lock(&s->met->mu);
    s->met->decode_steps++;
    s->met->spec_drafts++;
    s->met->spec_draft_tokens += L - 1;
    s->met->spec_accepted += ne - 1;
    for (int i = 0; i < ne - 1 && i < SRV_SPEC_POS; i++) s->met->spec_accepted_pos[i]++;
    pthread_mutex_unlock(&s->met->mu);
    for (int i = 0; i < ne && sl->job == j; i++) take_token(s, sl, em[i]); // stops when the request ends
}

// After a slot's decode forward (which sampled `tok`): keep the newest block-boundary state for the prefix cache,
// count the step, emit the token.
static void decode_finish(srv_sched *s, slot *sl, int32_t tok) {
    const int B = s->pc ? pc_block(s->pc) : 0;
    if (B && sl->e.n_past % B == 0) {
        const es_geom *g = pc_geom(s->pc);
        if (!sl->roll) sl->roll = s->be->alloc(s->be, g->state_bytes);
        es_state_save(&sl->e, g, sl->roll);
        sl->roll_pos = sl->e.n_past;
    }
    pthread_mutex_lock(&s->met->mu);
    s->met->decode_steps++;
    pthread_mutex_unlock(&s->met->mu);
    take_token(s, sl, tok);
}

// One decode token for every slot in sls at once (engine_decode_batch: the weights are read once per step, not
// once per sequence). Speculative slots run their own rounds instead.
static void decode_slots(srv_sched *s, slot **sls, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (sls[i]->job->host) host_decode(s, sls[i]);
        else sls[kept++] = sls[i];
    }
    n = kept;
    if (s->dr) {
        for (int i = 0; i < n; i++) spec_round(s, sls[i]);
        return;
    }
    if (n == 0) return;
    fd_engine *es[256];
    fd_sampler *smps[256];
    int32_t ids[256], picked[256];
    // A slot whose next position finds the KV pool full ends with 503; the others go on.
    int live = 0;
    for (int i = 0; i < n; i++) {
        if (engine_reserve(&sls[i]->e, sls[i]->e.n_past + 1))
            slot_fail_forward(s, sls[i]);
        else
            sls[live++] = sls[i];
    }
    n = live;
    if (n == 0) return;
    for (int i = 0; i < n; i++) {
        seq_push(sls[i], &sls[i]->next, 1);
        es[i] = &sls[i]->e;
        smps[i] = &sls[i]->smp;
        ids[i] = sls[i]->next;
    }
    // groups of at most the scratch rows of the group's first engine (the prefill budget)
    for (int g0 = 0; g0 < n;) {
        const int mb = es[g0]->opt.max_batch, g = n - g0 < mb ? n - g0 : mb;
        if (engine_decode_batch_sample(es + g0, ids + g0, g, smps + g0, picked + g0)) {
            for (int i = 0; i < n; i++) slot_fail(s, sls[i], 500, "server_error", NULL, fd_error_msg(), SRV_FIN_ERROR);
            return;
        }
        g0 += g;
    }
    for (int i = 0; i < n; i++) decode_finish(s, sls[i], picked[i]);
}

// Runs up to `budget` prompt tokens; returns how many ran.
static int64_t prefill_some(srv_sched *s, slot *sl, int64_t budget) {
    srv_job *j = sl->job;
    const int64_t pos = sl->e.n_past, n = j->n_prompt;
    int64_t end = pos + budget < n ? pos + budget : n;
    int64_t last_b = 0, ck = 0;
    if (s->pc) {
        const int64_t B = pc_block(s->pc);
        ck = s->cfg->pc_checkpoint;
        last_b = ((n - 1) / B) * B;
        const int64_t next_ck = (pos / ck + 1) * ck;
        if (next_ck < end && next_ck <= last_b) end = next_ck;
        if (last_b > pos && last_b < end) end = last_b;
    }
    const int final = end == n;
    int32_t first = -1; // the first generated token, sampled on the backend by the final chunk (or on the host)
    const int host = final && j->host;
    if (final && !host ? engine_forward_sample(&sl->e, j->prompt + pos, (int)(end - pos), &sl->smp, &first)
                       : engine_forward(&sl->e, j->prompt + pos, (int)(end - pos), host ? sl->row : NULL, 0)) {
        slot_fail_forward(s, sl);
        return end - pos;
    }
    if (host) first = host_sample(s, sl);
    if (s->dr) dflash_context_append(&sl->spec, (int)(end - pos));
    pthread_mutex_lock(&s->met->mu);
    s->met->prefill_computed_tokens += end - pos;
    s->met->prefill_chunks++;
    pthread_mutex_unlock(&s->met->mu);
    log_prefill(s, sl, end, final);
    if (s->pc && end > 0 && (end % ck == 0 || end == last_b) && !pc_has_snapshot(pc_for(s, j), j->prompt, end))
        pc_insert(s->pc, &sl->e, s->dr ? &sl->spec : NULL, j->prompt, end, NULL);
    if (final) {
        sl->st = SLOT_DECODE;
        take_token(s, sl, first);
    }
    return end - pos;
}

static void sync_route_metrics(srv_sched *s) {
    // The route table of slot 0 names every route; engine routes are summed over all slots' engines, backend
    // routes (shared) are counted once.
    fd_route *r[FD_MAX_ROUTES];
    const int n = s->n_slots ? routes_list(&s->slots[0].e, r) : 0;
    int k = 0;
    int64_t calls[64] = {0}, tokens[64] = {0};
    const char *rn[64], *rv[64];
    for (int i = 0; i < n; i++)
        for (int v = 0; r[i]->values[v] && k < 64; v++, k++) {
            rn[k] = r[i]->name;
            rv[k] = r[i]->values[v];
            if (i >= FD_ENGINE_ROUTES) {
                calls[k] = r[i]->calls[v];
                tokens[k] = r[i]->tokens[v];
            } else {
                for (int j = 0; j < s->n_slots; j++) {
                    calls[k] += s->slots[j].e.routes[i].calls[v];
                    tokens[k] += s->slots[j].e.routes[i].tokens[v];
                }
            }
        }
    pc_stats ps = {0};
    if (s->pc) pc_get_stats(s->pc, &ps);
    pthread_mutex_lock(&s->met->mu);
    for (int i = 0; i < k; i++) {
        s->met->route_hits[i].route = rn[i];
        s->met->route_hits[i].value = rv[i];
        s->met->route_hits[i].calls = calls[i];
        s->met->route_hits[i].tokens = tokens[i];
    }
    s->met->n_route_hits = k;
    s->met->pc_nodes = ps.nodes;
    s->met->pc_snapshots = ps.snapshots;
    s->met->pc_evictions = ps.evictions;
    s->met->pc_bytes = (double)ps.bytes;
    s->met->pc_budget = (double)ps.budget;
    pthread_mutex_unlock(&s->met->mu);
}

static void step(srv_sched *s) {
    const double now = fd_time_s();
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->st == SLOT_FREE) continue;
        if (sl->job->done) { // another choice of the request failed: the request is over
            met_finish(s, SRV_FIN_ABORT, sl->job, now);
            slot_release(s, sl);
            continue;
        }
        if (client_gone(sl, now)) slot_fail(s, sl, 499, "cancelled", NULL, "the client disconnected", SRV_FIN_ABORT);
        else if (now - sl->job->t_arrival > s->cfg->request_timeout)
            slot_fail(s, sl, 504, "timeout_error", "timeout", "the request exceeded the server's request timeout",
                      SRV_FIN_ABORT);
    }
    int64_t budget = s->cfg->prefill_chunk;
    slot *dec[256];
    int n_dec = 0;
    for (int k = 0; k < s->n_slots && n_dec < 256; k++) { // one decode token per decoding slot, round-robin order
        slot *sl = &s->slots[(s->rr + k) % s->n_slots];
        if (sl->st == SLOT_DECODE) dec[n_dec++] = sl;
    }
    decode_slots(s, dec, n_dec);
    budget -= n_dec;
    s->rr = (s->rr + 1) % s->n_slots;
    // prompts: oldest first; at least a small chunk per step so prompts progress under a full decode load
    const int64_t min_chunk = s->cfg->prefill_chunk < 32 ? s->cfg->prefill_chunk : 32;
    if (budget < min_chunk) budget = min_chunk;
    while (budget > 0) {
        slot *best = NULL;
        for (int i = 0; i < s->n_slots; i++)
            if (s->slots[i].st == SLOT_PREFILL && (!best || s->slots[i].admitted < best->admitted))
                best = &s->slots[i];
        if (!best) break;
        budget -= prefill_some(s, best, budget);
    }
    sync_route_metrics(s);
}

static int n_active(const srv_sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_slots; i++) n += s->slots[i].st != SLOT_FREE;
    return n;
}

static srv_job *q_pop(srv_sched *s) {
    srv_job *j = s->queue[s->q_head];
    s->q_head = (s->q_head + 1) % s->cfg->max_queue;
    s->q_len--;
    return j;
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    srv_job **tmp = fd_malloc((size_t)(s->cfg->max_queue + 1) * sizeof *tmp);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && s->reset_asked == s->reset_done && s->q_len == 0 && !n_active(s))
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (s->reset_asked != s->reset_done) {
            // The cache belongs to this thread. Done before admission, so every request that arrived after the
            // reset was asked for sees the empty cache.
            const int64_t asked = s->reset_asked;
            pthread_mutex_unlock(&s->mu);
            if (s->pc) pc_reset(s->pc);
            sync_route_metrics(s);
            pthread_mutex_lock(&s->met->mu);
            s->met->pc_resets += asked - s->reset_done; // counted when done, so a client can wait for it
            pthread_mutex_unlock(&s->met->mu);
            pthread_mutex_lock(&s->mu);
            s->reset_done = asked;
        }
        // admit into free slots; drop requests that waited too long (their clients get 503)
        int n_adm = 0, n_exp = 0, free_slots = s->n_slots - n_active(s);
        srv_job *adm[256];
        const double now = fd_time_s();
        // KV pages: a prompt waits in the queue (FIFO) until the pool has its pages free; one the whole pool could
        // never hold is admitted and refused at once (503 kv_cache_full, slot_start).
        int64_t kv_free = kv_pool_free_tokens(&s->pool), kv_blocked = 0;
        for (int k = s->q_len; k > 0; k--) {
            srv_job *j = q_pop(s);
            const int64_t need = kv_prompt_tokens(s, j) * j->n; // n > 1: one sequence per choice
            const int kv_fits = need <= kv_free || need > kv_pool_tokens(&s->pool);
            if (now - j->t_arrival > s->cfg->queue_timeout || atomic_load(&j->cancelled)) tmp[n_exp++] = j;
            else if (free_slots >= j->n && n_adm < 256 && kv_fits && !kv_blocked) {
                adm[n_adm++] = j;
                free_slots -= j->n;
                if (need <= kv_free) kv_free -= need;
            } else {
                // later requests may not overtake it (nor one waiting for its n slots)
                kv_blocked |= free_slots > 0 && (!kv_fits || free_slots < j->n);
                s->queue[(s->q_head + s->q_len) % s->cfg->max_queue] = j;
                s->q_len++;
            }
        }
        pthread_mutex_lock(&s->met->mu);
        s->met->waiting = s->q_len;
        pthread_mutex_unlock(&s->met->mu);
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n_exp; i++) {
            int gone = atomic_load(&tmp[i]->cancelled);
            job_fail(tmp[i], gone ? 499 : 503, gone ? "cancelled" : "server_overloaded", NULL,
                     gone ? "the client disconnected"
                          : "no sequence slot (or not enough KV cache pages) became free within the queue timeout");
            pthread_mutex_lock(&s->met->mu);
            if (gone) s->met->finished[SRV_FIN_ABORT]++;
            else s->met->rejected_timeout++;
            pthread_mutex_unlock(&s->met->mu);
            srv_job_unref(tmp[i]);
        }
        for (int i = 0, k = 0; i < n_adm; i++) {
            // A choice refused at start (KV pages) fails the job and drops its slot's reference, which may be the
            // last: hold one across the loop, and start no further choice of a failed job.
            srv_job *j = adm[i];
            const int n_choices = j->n;
            srv_job_ref(j);
            for (int c = 0; c < n_choices; c++) {
                pthread_mutex_lock(&j->mu);
                const int failed = j->done; // failed (a choice cannot have finished yet)
                pthread_mutex_unlock(&j->mu);
                if (failed) break;
                while (s->slots[k].st != SLOT_FREE) k++;
                slot_start(s, &s->slots[k], j, c);
            }
            srv_job_unref(j);
        }
        step(s);
    }
    free(tmp);
    return NULL;
}

// ---- public ----

int64_t sched_kv_tokens(const srv_config *cfg) {
    const int64_t page = FD_KV_PAGE_TOKENS, per_slot = (cfg->ctx + page - 1) / page * page;
    const int64_t most = per_slot * cfg->slots; // what the slots could ever hold at once
    return cfg->kv_tokens < most ? cfg->kv_tokens : most;
}

srv_sched *sched_create(const srv_config *cfg, fd_model *m, fd_backend *be, const tok_tokenizer *tok,
                        fd_drafter *dr, const int32_t *eos, int n_eos, srv_metrics *met) {
    srv_sched *s = fd_calloc(1, sizeof *s);
    s->cfg = cfg;
    s->m = m;
    s->be = be;
    s->tok = tok;
    s->dr = dr;
    s->met = met;
    s->n_eos = n_eos < 16 ? n_eos : 16;
    memcpy(s->eos, eos, sizeof(int32_t) * (size_t)s->n_eos);
    s->n_slots = cfg->slots;
    s->slots = fd_calloc((size_t)s->n_slots, sizeof *s->slots);
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.capacity = cfg->ctx;
    eo.pool = &s->pool;
    eo.max_batch = cfg->prefill_chunk;
    eo.gdn_prefill = cfg->gdn_prefill;
    // Routes from the environment (FD_ROUTE_<NAME>), then --route: the backend's before any cache exists, the
    // engines' after.
    int route_err = routes_backend_preset(be, cfg->route_specs, cfg->n_routes);
    if (!route_err) route_err = kv_pool_init(&s->pool, be, &m->plan, sched_kv_tokens(cfg), 0);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        int set_err = 0;
        if (!route_err && !engine_init(&sl->e, m, be, &eo)) {
            set_err = routes_from_env(&sl->e);
            for (int r = 0; !set_err && r < cfg->n_routes; r++) set_err = routes_set(&sl->e, cfg->route_specs[r]);
        } else {
            set_err = 1;
        }
        if (set_err || routes_check(&sl->e) ||
            (dr && dflash_init(&sl->spec, &sl->e, dr, cfg->block_size))) {
            for (int k = 0; k <= i; k++) {
                if (dr && s->slots[k].spec.tgt) dflash_free(&s->slots[k].spec);
                engine_free(&s->slots[k].e);
                tok_stream_free(s->slots[k].ts);
            }
            kv_pool_free(&s->pool);
            free(s->slots);
            free(s);
            return NULL;
        }
        sl->ts = tok_stream_new(tok, 1);
    }
    if (cfg->prefix_cache) {
        s->pc = pc_create(&s->slots[0].e, cfg->pc_block, cfg->pc_budget);
        if (dr) pc_attach_drafter(s->pc, &s->slots[0].spec);
    }
    s->queue = fd_calloc((size_t)cfg->max_queue, sizeof *s->queue);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    routes_print(&s->slots[0].e, stderr);
    sync_route_metrics(s); // /metrics lists every route from the start
    FD_CHECK(pthread_create(&s->th, NULL, sched_main, s) == 0);
    s->running_thread = 1;
    return s;
}

int sched_submit(srv_sched *s, srv_job *j, srv_err *err) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping) {
        rc = srv_err_set(err, 503, "server_unavailable", NULL, NULL, "the server is shutting down");
    } else if (s->q_len >= s->cfg->max_queue) {
        rc = srv_err_set(err, 429, "rate_limit_exceeded", "queue_full", NULL,
                         "the server is busy: %d requests are already waiting; retry later", s->q_len);
    } else {
        srv_job_ref(j);
        s->queue[(s->q_head + s->q_len) % s->cfg->max_queue] = j;
        s->q_len++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        pthread_mutex_lock(&s->met->mu);
        if (err->status == 429) s->met->rejected_queue_full++;
        pthread_mutex_unlock(&s->met->mu);
    } else {
        pthread_mutex_lock(&s->met->mu);
        s->met->waiting++;
        pthread_mutex_unlock(&s->met->mu);
    }
    return rc;
}

void sched_reset_prefix_cache(srv_sched *s) {
    // Queued, never waited for: an HTTP worker must not sit out a long engine step (any number of calls while one
    // is pending collapse into one reset).
    pthread_mutex_lock(&s->mu);
    ++s->reset_asked;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_stop(srv_sched *s) {
    if (!s || !s->running_thread) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->running_thread = 0;
    // the thread is gone: finish what is left from here
    while (s->q_len) {
        srv_job *j = q_pop(s);
        job_fail(j, 503, "server_unavailable", NULL, "the server is shutting down");
        srv_job_unref(j);
    }
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].st != SLOT_FREE)
            slot_fail(s, &s->slots[i], 503, "server_unavailable", NULL, "the server is shutting down",
                      SRV_FIN_ABORT);
}

void sched_free(srv_sched *s) {
    if (!s) return;
    sched_stop(s);
    pc_free(s->pc);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (s->dr) dflash_free(&sl->spec);
        engine_free(&sl->e);
        free(sl->seq);
        tok_stream_free(sl->ts);
        srv_buf_free(&sl->text);
        if (sl->roll) s->be->free(s->be, sl->roll);
        free(sl->row);
        free(sl->scratch);
        host_state_free(&sl->hs);
    }
    kv_pool_free(&s->pool); // after the engines, which hand their pages back
    free(s->slots);
    free(s->queue);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
