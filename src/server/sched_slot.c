// One sequence's life on the scheduler thread: a slot takes a choice of a job (prefix-cache restore, the prompt's KV
// pages reserved up front), turns each sampled token into text (stop strings, whole UTF-8 characters) published to
// the client, and ends it (finished, failed, or the client gone), handing its pages and last snapshot back.
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/sched_internal.h"

// ---- finishing ----

// The prefix cache as this job's tenant sees it.
pc_cache *sched_pc_for(srv_sched *s, const srv_job *j) {
    pc_set_salt(s->pc, j->cache_salt);
    return s->pc;
}

void sched_job_fail(srv_job *j, int status, const char *type, const char *code, const char *msg) {
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

void sched_met_finish(srv_sched *s, int kind, const slot *sl, double now) {
    const srv_job *j = sl->job;
    pthread_mutex_lock(&s->met->mu);
    s->met->finished[kind]++;
    s->met->running--;
    srv_hist_observe(&s->met->e2e, now - j->t_arrival);
    if (sl->n_gen > 0) { // vLLM's per-request series, for a sequence that got to its first token
        srv_hist_observe(&s->met->req_prompt, j->n_prompt);
        srv_hist_observe(&s->met->req_gen, sl->n_gen);
        srv_hist_observe(&s->met->prefill_time, sl->t_first_token - sl->t_prefill);
        srv_hist_observe(&s->met->decode_time, sl->t_last - sl->t_first_token);
        srv_hist_observe(&s->met->inference_time, sl->t_last - sl->t_prefill);
    }
    pthread_mutex_unlock(&s->met->mu);
}

void slot_release(srv_sched *s, slot *sl) {
    if (s->pc && sl->roll.n && sl->roll_pos > 0 && sl->roll_pos <= sl->e.n_past &&
        !pc_has_snapshot(sched_pc_for(s, sl->job), sl->seq, sl->roll_pos))
        pc_insert(s->pc, &sl->e, NULL, sl->seq, sl->roll_pos, &sl->roll); // takes it: sl->roll is left empty
    es_parts_free(&sl->roll);
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

void slot_fail(srv_sched *s, slot *sl, int status, const char *type, const char *code, const char *msg,
                      int kind) {
    sched_job_fail(sl->job, status, type, code, msg);
    sched_met_finish(s, kind, sl, fd_time_s());
    slot_release(s, sl);
}

// A failed forward: a full KV pool is the server's capacity, not a fault (503, like an overloaded queue).
void slot_fail_forward(srv_sched *s, slot *sl) {
    const char *msg = fd_error_msg();
    if (fd_error_code() == FD_ERR_KV_FULL)
        slot_fail(s, sl, 503, "server_overloaded", "kv_cache_full", msg, SRV_FIN_ERROR);
    else
        slot_fail(s, sl, 500, "server_error", NULL, msg, SRV_FIN_ERROR);
}

// ---- output ----

int sched_is_eos(const srv_sched *s, int32_t t) {
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
void slot_take_token(srv_sched *s, slot *sl, int32_t t) {
    srv_job *j = sl->job;
    const double now = fd_time_s();
    sl->n_gen++;
    pthread_mutex_lock(&s->met->mu);
    s->met->generation_tokens++;
    if (sl->n_gen == 1) srv_hist_observe(&s->met->ttft, now - j->t_arrival);
    else srv_hist_observe(&s->met->itl, now - sl->t_last);
    pthread_mutex_unlock(&s->met->mu);
    if (sl->n_gen == 1) {
        sl->t_first_token = now;
        pthread_mutex_lock(&j->mu);
        j->t_first = now;
        pthread_mutex_unlock(&j->mu);
    }
    sl->t_last = now;
    srv_finish fin = SRV_FINISH_NONE;
    size_t len = 0;
    if (!j->ignore_eos && sched_is_eos(s, t)) {
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
    if (fin == SRV_FINISH_LENGTH || (fin == SRV_FINISH_STOP && !j->ignore_eos && sched_is_eos(s, t))) {
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
        sched_met_finish(s, fin == SRV_FINISH_STOP ? SRV_FIN_STOP : SRV_FIN_LENGTH, sl, now);
        slot_release(s, sl);
    }
}

// ---- running ----

void slot_seq_push(slot *sl, const int32_t *t, int64_t n) {
    if (sl->n_seq + n > sl->cap_seq) {
        while (sl->n_seq + n > sl->cap_seq) sl->cap_seq = sl->cap_seq ? sl->cap_seq * 2 : 256;
        sl->seq = fd_realloc(sl->seq, (size_t)sl->cap_seq * sizeof(int32_t));
    }
    memcpy(sl->seq + sl->n_seq, t, (size_t)n * sizeof(int32_t));
    sl->n_seq += n;
}

void slot_start(srv_sched *s, slot *sl, srv_job *j, int choice) {
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
    slot_seq_push(sl, j->prompt, j->n_prompt);
    fd_dflash *spec = s->dr ? &sl->spec : NULL;
    int64_t cached = s->pc ? pc_restore(sched_pc_for(s, j), &sl->e, spec, j->prompt, j->n_prompt, j->n_prompt - 1) : 0;
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
// Is the client still there? Peeks at the socket while libmicrohttpd has the connection suspended (it does not watch
// suspended connections): a reset or a socket error means the client went away. End-of-file alone does not: a client
// may half-close (shutdown(SHUT_WR)) once its request is sent and still read the answer, as HTTP allows. To tell
// that from a client that closed for good, the first end-of-file of an HTTP/1.1 request whose response has not
// started is answered with an interim "HTTP/1.1 100 Continue" (every HTTP/1.1 client must skip 1xx responses): a
// closed socket answers it with a reset, seen at the next peek; a half-closed client reads past it. (A stream whose
// headers went out cannot take it: its closed client is noticed when the next event's write fails.)
int slot_client_gone(slot *sl, double now) {
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
