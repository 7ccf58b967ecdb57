// The scheduler's own state, shared by its three parts (all run on the scheduler thread, except sched_submit):
//   sched.c       the thread, the queue and admission (KV-page accounting), create / stop / free
//   sched_slot.c  one sequence's life: start (prefix cache restore, KV reservation), each sampled token (stop
//                 strings, publishing to the client), failure and release
//   sched_step.c  one engine step: batched decode / DFlash rounds / host-sampled rows, then prompt chunks
#ifndef FD_SERVER_SCHED_INTERNAL_H
#define FD_SERVER_SCHED_INTERNAL_H
#include "engine/dflash.h"
#include "engine/prefix_cache.h"
#include "engine/sampling.h"
#include "engine/sampling_host.h"
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
    double t_last, t_peek, t_first_token;
    int probed; // the half-close probe was sent (client_gone)
    fd_sampler smp;   // the request's temperature / top-k / top-p and seeded generator (tokens are sampled on the
                      // backend: engine_forward_sample / engine_decode_batch_sample; only the ids come back)
    fd_dflash spec;   // speculative decoding state (when the server has a drafter)
    int64_t admitted; // admission order (oldest prefill first)
    es_parts roll;    // decode-time state snapshot at roll_pos (every rank's, in its backend memory), handed to the
                      // cache at the end
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
    int32_t *eos; // the end-of-sequence ids (a copy)
    int n_eos;
    srv_metrics *met;
    slot *slots;
    int n_slots, rr;
    pc_cache *pc;
    const fd_tp_set *tp; // --tp: every slot's engine leads these ranks; NULL: plain engines
    // The slots' KV pages: one pool, or one per rank under --tp. Every rank's pool lends and takes back the same
    // pages in the same order (a leader reserves on all its ranks), so pools[0] speaks for all in admission.
    fd_kv_pool pools[FD_TP_MAX];
    int n_pools;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job **queue; // FIFO ring of cfg->max_queue
    int q_head, q_len;
    int stopping, running_thread;
    int64_t reset_asked, reset_done, admit_counter;
    // scratch sized from the configuration at create, so no fixed cap on slots or routes:
    slot **decoding;           // [n_slots] the slots decoding this step
    fd_engine **dec_engines;   // [n_slots] their engines, samplers, input and sampled ids
    fd_sampler **dec_samplers;
    int32_t *dec_ids, *dec_picked;
    srv_job **admitted;        // [n_slots] jobs admitted this round (each takes at least one slot)
    srv_job **expired;         // [max_queue] jobs dropped from the queue this round
    int n_route_values;        // every value of every route (the size of met->route_hits)
};

// ---- sched_slot.c ----
pc_cache *sched_pc_for(srv_sched *s, const srv_job *j); // the prefix cache as this job's tenant sees it
void sched_job_fail(srv_job *j, int status, const char *type, const char *code, const char *msg);
void sched_met_finish(srv_sched *s, int kind, const slot *sl, double now); // the sequence ends: its metrics
int sched_is_eos(const srv_sched *s, int32_t t);
// A slot takes choice `choice` of job j (a reference for choices after the first); refused (503) when the pool
// cannot hold the prompt's KV pages.
void slot_start(srv_sched *s, slot *sl, srv_job *j, int choice);
void slot_release(srv_sched *s, slot *sl);
void slot_fail(srv_sched *s, slot *sl, int status, const char *type, const char *code, const char *msg, int kind);
void slot_fail_forward(srv_sched *s, slot *sl);
void slot_seq_push(slot *sl, const int32_t *t, int64_t n);
// A sampled token: account, detokenize, check eos / stop strings / length, publish; releases the slot at the end.
void slot_take_token(srv_sched *s, slot *sl, int32_t t);
int slot_client_gone(slot *sl, double now);

// ---- sched_step.c ----
void sched_step(srv_sched *s);
void sched_sync_route_metrics(srv_sched *s);
#endif
