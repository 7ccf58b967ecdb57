// The engine: runs a bound model on a backend for one sequence at a time (or a batched decode step over many). It
// owns the per-sequence caches (attention KV pages, GDN conv and recurrent state, verify slots), the scratch, the
// step inputs, graphs and routes; the decoder is the model's (model/forward.h), called with a batch description.
#ifndef FD_ENGINE_H
#define FD_ENGINE_H
#include "backend.h"
#include "engine/kv_pool.h"
#include "model/forward.h"

typedef struct {
    int64_t calls, tokens;
} fd_route_count;

// The engine's own routes (the backend adds its own).
enum {
    FD_ROUTE_GDN_PREFILL = 0,
    FD_ROUTE_GDN_DECODE,
    FD_ROUTE_GRAPHS,
    FD_ROUTE_SPEC_VERIFY,
    FD_ROUTE_GDN_VERIFY,
    FD_ENGINE_ROUTES
};
// route gdn_verify's values (engine_verify.c)
enum { FD_GDN_VERIFY_SLOTS = 0, FD_GDN_VERIFY_REPLAY = 1 };

// Forwards of at most this many rows of one sequence (decode steps, verify blocks) are recorded once and replayed
// as a CUDA graph when route graphs is on; they then read their position from backend memory (pos_dev) so a
// replay computes the current step (engine_graphs.h).
#define FD_GRAPH_MAX_N 16

// Recorded forwards of one engine: recordings made, replays, recordings discarded (something in the forward
// could not be recorded; it ran eagerly), graphs freed because memory they referenced moved, and eligible
// forwards that ran eagerly (first call of a shape, route off, backend busy recording).
typedef struct {
    int64_t recorded, replayed, failed, stale, eager;
} fd_graph_stats;

typedef struct {
    int max_batch;        // scratch rows: the largest n one forward call takes (the prefill token budget)
    int64_t capacity;     // KV positions per sequence (its maximum context)
    fd_gdn_route gdn_prefill;
    // The paged KV pool (kv_pool.h): a shared one (not owned; every engine on it must use the same model and
    // backend), or NULL for a pool of the engine's own of min(kv_tokens, capacity) tokens (kv_tokens 0: capacity).
    fd_kv_pool *pool;
    int64_t kv_tokens;
    // A tensor-parallel leader's shared pools (engine_init_tp), one per rank: rank r's engine takes rank_pools[r]
    // (a pool on rank r's backend for rank r's shard). NULL: every rank engine has a pool of its own. A plain
    // engine refuses it (its shared pool is `pool`).
    fd_kv_pool *const *rank_pools;
} fd_engine_opts;

typedef struct {
    fd_model *m;
    fd_backend *be;
    fd_engine_opts opt;
    // per-sequence state
    int64_t n_past;
    fd_kv_pool *pool; // attention KV pages (shared or own_pool)
    fd_kv_pool own_pool;
    fd_kv_pages pages;  // this sequence's page table: positions [0, pages.held * P) are backed
    float **conv_state; // [num_layers] f32 [conv_dim, K-1] (NULL for attention layers)
    float **gdn_state;  // [num_layers] f32 [Hv, dk, dv]
    // the forward's scratch (backend memory), sized for max_batch tokens from the model's rank plan
    fd_fwd_scratch scratch;
    float *logits_dev;  // [ENGINE_LOGIT_ROWS, V] f32
    // routes: gdn_prefill (chunked | serial) for prompt forwards, gdn_decode (serial) for 1-token steps and
    // verify blocks; see engine/routes.h
    fd_route routes[FD_ENGINE_ROUTES];
    int gdn_prefill_sel, gdn_decode_sel;
    // GDN core calls by the form that ran (all forwards), for /metrics
    fd_route_count gdn_chunked, gdn_serial;
    int64_t tokens_computed; // tokens through the whole forward (prefill + decode + verify), never reset
    // speculative decoding (DFlash): hidden-state taps and per-token state slots for verify
    int n_taps;
    int tap_col[FD_MAX_LAYERS]; // column block of layer i's output in `taps`, or -1
    void *taps;                 // act [max_batch, n_taps * d]: tapped layer outputs of the last forward
    int spec_block;             // slots per GDN layer (0 = none)
    float **gdn_slots;          // [num_layers] f32 [spec_block, Hv, dk, dv]
    float **conv_slots;         // [num_layers] f32 [spec_block, conv_dim, K-1]
    int use_slots;              // set for the duration of engine_verify
    // route gdn_verify (slots | replay): a chain verify writes the GDN state after every token to its slot (the
    // commit copies one), or leaves the GDN state as it was and keeps the core's inputs, from which the commit
    // replays the accepted tokens (engine_verify.c). The conv state takes its slots either way.
    int gdn_verify_sel;
    void **gdn_keep;    // [num_layers] act [spec_block, conv_dim + 2 Hv]: the verify's post-conv qkv | b | a rows
    int replay_pending; // tokens of the last chain verify whose GDN state the commit must replay (0: none)
    // route spec_verify (chain | tree): what a DFlash round verifies (engine/dflash_tree.h); a tree verify's
    // shape (set for the duration of engine_verify_tree) and its parents in backend memory [spec_block]
    int spec_verify_sel;
    const fd_fwd_tree *tree;
    int32_t *tree_parent_dev; // [2 spec_block]: a tree's n parents, then its n depths
    // Device-side step inputs (backend memory), written with one to_device before every forward: the position
    // n_past (pos_dev, int64) and the forward's token ids (ids_dev, int32 [max_batch]). Kernels read them when
    // they run, so a replayed graph computes the current step; n_past may be set freely between forwards
    // (commit, reset, prefix-cache restore) since pos_dev is rewritten from it each time.
    void *step_dev;    // pos_dev then ids_dev
    int64_t *pos_dev;
    int32_t *ids_dev;
    void *step_host;   // host staging of the same layout
    // route graphs: on | off where the backend records graphs (cuda), else only off
    int graphs_sel;
    int graphs_capable; // the backend records graphs and the model has no MoE layer (MoE routing syncs the host)
    struct fd_engine_graphs *graphs; // engine_graphs.c; NULL until the first eligible forward
    fd_graph_stats graph_stats;
    // Progress of a long prompt (the CLI's terminal progress line): when on_progress is set, every forward of the
    // prompt that engine_prompt_begin announced reports tokens done of total, after a backend sync so the time a
    // caller measures is compute, not launch. NULL (the default) costs nothing.
    void (*on_progress)(void *ud, int64_t done, int64_t total);
    void *progress_ud;
    int64_t prompt_base, prompt_total; // n_past when the prompt began; its length (0: no prompt under way)
    // Tensor parallelism (engine_tp.h): set on a group leader, which runs every forward on its rank engines and
    // holds no cache of its own; NULL on a plain engine (and on every rank engine).
    struct fd_engine_tp *tp;
} fd_engine;

void engine_default_opts(fd_engine_opts *o);
int engine_init(fd_engine *e, fd_model *m, fd_backend *be, const fd_engine_opts *opt);
void engine_free(fd_engine *e);
void engine_reset(fd_engine *e); // forget the sequence (zero state, n_past = 0, KV pages back to the pool)
// Makes positions [0, positions) of the KV cache addressable (pages from the pool; host only, nothing recorded).
// Forwards reserve what they need themselves; the prefix cache calls this before restoring KV. On a short pool:
// the "KV cache full" error, nothing changed.
int engine_reserve(fd_engine *e, int64_t positions);
// Attention layer li's KV cache of this sequence (a paged view).
fd_kv_view engine_kv_view(const fd_engine *e, int li);

// Runs n tokens (n <= max_batch) at positions n_past.. and appends them to the sequence. Writes fp32 logits
// to host `logits`: all n rows ([n, V]) when all_logits, else only the last row ([V]); NULL for none.
int engine_forward(fd_engine *e, const int32_t *ids, int n, float *logits, int all_logits);
// One decode step for n sequences of the same model and backend at once: seqs[i] takes ids[i] at its own
// position. GEMMs and MoE run once over the n rows (weights read once); conv, GDN, RoPE, KV and attention run per
// sequence. The scratch of seqs[0] is used (n <= its max_batch). logits: host [n, V].
int engine_decode_batch(fd_engine **seqs, const int32_t *ids, int n, float *logits);
// What every prompt entry point checks before its first chunk: a non-empty prompt of n tokens that fits the
// context, with all of its KV pages taken now (a short pool refuses it with the sequence untouched); clamps *chunk
// to 1..max_batch (<= 0: max_batch).
int engine_prompt_begin(fd_engine *e, int64_t n, int *chunk);
// Prefill of any length in chunks of at most `chunk` tokens (0 = max_batch). Logits as engine_forward.
int engine_prefill(fd_engine *e, const int32_t *ids, int64_t n, int chunk, float *logits, int all_logits);
// Greedy: prefill ids, then generate n_new tokens (argmax, lowest index on ties) into out.
int engine_generate_greedy(fd_engine *e, const int32_t *ids, int64_t n, int chunk, int n_new, int32_t *out);
// The same with a sampler (engine/sampling.h; NULL = greedy on the host). With a sampler every token is sampled
// on the backend (engine_forward_sample).
struct fd_sampler_s;
int engine_generate(fd_engine *e, const int32_t *ids, int64_t n, int chunk, int n_new, struct fd_sampler_s *smp,
                    int32_t *out);
int32_t engine_argmax(const float *logits, int V);
// Like engine_forward, but instead of logits returns the greedy id (argmax, lowest index on ties) of every row in
// out_ids [n], computed by the backend next to the logits: only 4 bytes per row reach the host.
int engine_forward_greedy(fd_engine *e, const int32_t *ids, int n, int32_t *out_ids);
// 1 when route graphs is on (and the backend can record graphs).
int engine_graphs_on(const fd_engine *e);

// Sampling on the backend (sample_rows): the last row's logits never leave the backend, only the id does. The
// sampler's one uniform per token is drawn on the host (none when greedy), so a seed gives the ids of the host
// path (cpu: bitwise; cuda: except where u falls within rounding of a CDF boundary). On error the sampler is
// left as it was.
int engine_forward_sample(fd_engine *e, const int32_t *ids, int n, struct fd_sampler_s *smp, int32_t *out);
// engine_prefill, then the first token sampled on the backend into *out.
int engine_prefill_sample(fd_engine *e, const int32_t *ids, int64_t n, int chunk, struct fd_sampler_s *smp,
                          int32_t *out);
// engine_decode_batch with sequence i's token sampled by smps[i] on the backend into out[i].
int engine_decode_batch_sample(fd_engine **seqs, const int32_t *ids, int n, struct fd_sampler_s **smps,
                               int32_t *out);

// ---- speculative decoding ----
// Every forward from now on also writes the outputs of `layers` (HF hidden_states[i+1]) to e->taps.
int engine_set_taps(fd_engine *e, const int *layers, int n);
// Allocates per-token GDN and conv state slots for verify blocks (or trees) of up to `block` tokens; a larger
// block than the slots hold reallocates them (recorded forwards are dropped).
int engine_enable_slots(fd_engine *e, int block);
// Verify forward: n <= spec_block tokens at n_past.., all-position logits into host `logits` [n, V]; GDN layers
// run the recurrence and, under gdn_verify=slots, record the state after every token (replay: they keep the
// core's inputs and leave the GDN state as it was). n_past advances by n until engine_commit, which must follow.
int engine_verify(fd_engine *e, const int32_t *ids, int n, float *logits);
// The same verify for greedy acceptance: only the argmax of every row (backend argmax_rows, lowest index on
// ties as engine_argmax) crosses to the host, not the n x V logits.
int engine_verify_greedy(fd_engine *e, const int32_t *ids, int n, int32_t *argmax);
// Keeps the first `keep` (1..n) tokens of the last verify: KV is truncated by position (its pages stay reserved),
// the conv state is taken from slot keep-1, the GDN state too (slots) or replayed over the keep tokens (replay).
void engine_commit(fd_engine *e, int64_t n_past_before_verify, int keep);
// The live GDN and conv state of every layer <- state slot `slot` (the state after that verified token or node),
// in batches through the backend's copy_batch where it has one. engine_commit and engine_commit_tree end here.
void engine_commit_slot(fd_engine *e, int slot);
// After a chain verify of n_verified tokens under gdn_verify=replay (engine_verify.c): the GDN state after the
// first `keep` of them, replayed from the state the verify left untouched, and the conv state from slot keep - 1.
void engine_commit_replay(fd_engine *e, int n_verified, int keep);
// Tree verify (route spec_verify=tree; engine_tree.c): the n nodes of a tree (forward.h: fd_fwd_tree; parent[0]
// == -1, parent[t] < t) with ids, in one forward at n_past..; all-node logits into host `logits` [n, V]. Node t's
// logits are those of the chain of its root-to-node path. n_past advances by n until engine_commit_tree.
int engine_verify_tree(fd_engine *e, const int32_t *ids, const int32_t *parent, int n, float *logits);
// The same verify for greedy acceptance: only every node's argmax (backend argmax_rows, lowest index on ties, as
// engine_argmax over its logits) comes to the host, n ids instead of n x V floats.
int engine_verify_tree_greedy(fd_engine *e, const int32_t *ids, const int32_t *parent, int n, int32_t *argmax);
// Keeps the root-to-node path path[0..keep-1] (path[0] = 0, path[d] a child of path[d-1]) of the last tree
// verify: its K/V and taps move to positions / rows d, GDN and conv state come from slot path[keep-1].
void engine_commit_tree(fd_engine *e, int64_t n_past_before_verify, const int32_t *path, int keep);
// 0 when this backend runs tree verify, else -1 saying why.
int engine_tree_supported(const fd_engine *e);
#endif
