// DFlash speculative decoding: the draft -> verify -> accept -> commit round on top of the target engine, and the
// drafter's caches. The drafter's forward (a block of [anchor, MASK x (B-1)] attending, non-causally, to the context
// K/V of every committed token) is the model's: model/draft_forward.h.
#ifndef FD_DFLASH_H
#define FD_DFLASH_H
#include "engine/engine.h"
#include "engine/sampling.h"
#include "model/draft_forward.h"

#define FD_SPEC_MAX_BLOCK 64

typedef struct {
    int64_t rounds, draft_tokens, accepted, emitted;
    int64_t accepted_per_pos[FD_SPEC_MAX_BLOCK]; // rounds whose draft at position i (0-based) was accepted
    int64_t tree_rounds; // rounds that verified a tree (spec_verify=tree; draft_tokens then counts its nodes)
    // Where the rounds' time went (host clock): draft = the drafter's forward and its ids on the host; verify = the
    // target's forward over the block and its argmax ids (greedy) or logits (T > 0) on the host; accept = the
    // acceptance on the host; commit = the GDN / conv state commit and the drafter's context for the accepted
    // tokens, launched, and finished only where phase_sync is set (else its device time lands in the next draft).
    double draft_s, verify_s, accept_s, commit_s, round_s;
} fd_spec_stats;

// Oracle drafter (tests and the bench): proposes the reference continuation `ref` with a set number of
// correct drafts per round (cycled from `accept`), then a wrong token. Label results as oracle runs.
// With `force`, the round accepts exactly that many drafts whatever the target says (the bench: the round's
// work is the same, and tau stays exact where a reference made by 1-token decode steps and a B-token verify
// disagree on near-ties, as random weights and GPU rounding do); the output is then not the target's greedy.
typedef struct {
    const int32_t *ref;
    int64_t ref_len;
    const int *accept;
    int n_accept;
    int force;
} fd_spec_oracle;

typedef struct fd_dflash {
    fd_engine *tgt;
    fd_drafter *dr;
    fd_backend *be;
    int B;            // block size (anchor included)
    int64_t capacity; // draft KV positions
    int64_t n_ctx;    // committed positions whose context K/V are cached
    void **kv;        // [drafter layers] draft KV caches
    fd_draft_scratch ds; // the draft forward's scratch (model/draft_forward.h)
    const fd_draft_variant *variant;
    int32_t *ids_dev;  // [B] the draft block's ids in backend memory (embed reads them there)
    float *h_logits, *h_q, *h_p; // host scratch: verify logits [B, V], draft distributions [B-1, V], one row [V]
    int32_t *h_ids;              // host scratch: the verify's argmax ids [B] (greedy rounds)
    int phase_sync;              // the round waits for its commit, so fd_spec_stats.commit_s is the device's (bench)
    const fd_spec_oracle *oracle;
    // How a round proposes its drafts (chosen at init from the drafter): DFlash takes the argmax of each draft row
    // or samples it; DFlash2 walks its candidate selector (sel) over the draft logits. Writes n drafts and, when q
    // is not NULL (sampling), their distributions q [n, V].
    int (*propose)(struct fd_dflash *s, int32_t anchor, int n, fd_sampler *smp, int32_t *draft, float *q);
    struct fd_dflash2_selector *sel; // DFlash2 drafters only (engine/dflash2.h), else NULL
    int tree_budget;     // spec_verify=tree: draft nodes per tree (engine/dflash_tree.h), set at init to the default
    float *h_tree_logits; // host [h_tree_rows, V]: a tree verify's logits (made at the first tree round)
    int h_tree_rows;
    fd_spec_stats st;
    // called after every commit (tests check the committed state against a fresh prefill)
    void (*on_commit)(void *ctx, const struct fd_dflash *s, int accepted);
    void *on_commit_ctx;
} fd_dflash;

// The target engine must have been created with max_batch >= B; this adds taps and state slots to it.
int dflash_init(fd_dflash *s, fd_engine *tgt, fd_drafter *dr, int block_size);
void dflash_free(fd_dflash *s);
// Appends the context K/V of the first m rows of the target's taps (positions n_ctx..n_ctx+m-1).
void dflash_context_append(fd_dflash *s, int m);
// One draft forward on [anchor, MASK x (B-1)] at position n_ctx: draft ids (B-1) and, if logits is not NULL,
// the (B-1) x V fp32 draft logits (after output_multiplier / softcap).
int dflash_draft(fd_dflash *s, int32_t anchor, int32_t *draft_ids, float *logits);
// dflash_draft's forward alone: the block's B - 1 rows of raw draft logits stay on the device (s->ds.logits_dev,
// [B - 1, V]); dflash_draft_logits_raw: 1 when they are the logits the host uses (no output multiplier, no
// softcap), so ranking them on the device ranks what the host would.
int dflash_draft_forward(fd_dflash *s, int32_t anchor);
int dflash_draft_logits_raw(const fd_dflash *s);
// DFlash2: the draft forward, then the selector's candidates of the first n draft rows into s->sel->cand /
// s->sel->unary (the backend's topk_rows where the logits are raw, else top_k_row over the rows on the host).
int dflash2_draft_candidates(fd_dflash *s, int32_t anchor, int n);
// Forgets the sequence (the target engine is reset separately).
void dflash_reset(fd_dflash *s);
// One round from `anchor`, the newest emitted token (not yet seen by the target): draft, verify at most L
// tokens (1..B), accept, commit. Writes the accepted drafts and then the next token to emitted (at most L) and
// their count to *n_emitted. `produced` (tokens emitted so far) only positions the oracle.
int dflash_round(fd_dflash *s, int32_t anchor, int L, fd_sampler *smp, int64_t produced, int32_t *emitted,
                 int *n_emitted);
// Prefill + speculative generation of n_new tokens into out. smp NULL or greedy: identical to plain greedy.
// Otherwise drafts are sampled from q (the drafter's distribution under the same temperature/top-k/top-p)
// and verified by speculative rejection sampling: accept x with probability min(1, p(x)/q(x)), on rejection
// resample from normalize(max(0, p - q)), and draw the bonus from p, so the output follows the target's
// sampling distribution exactly.
int dflash_generate(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, int n_new, fd_sampler *smp,
                    int32_t *out);
// Prefills the target on ids (taps into the draft context); writes the first new token (greedy when smp is
// NULL, else sampled).
int dflash_prefill(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, fd_sampler *smp, int32_t *anchor);
void dflash_print_stats(const fd_dflash *s, FILE *f);
// Speculative rejection sampling over a verified block [anchor, drafts...] of L tokens. q [L-1, V] are the
// distributions the drafts were drawn from, tl [L, V] the target logits (the sampler turns them into p).
// Returns the number of accepted drafts; *next is the token after them (the resample at the first rejection,
// or the bonus drawn from p). p is scratch [V].
int spec_accept_sampled(fd_sampler *smp, const int32_t *block, int L, const float *q, const float *tl, int V,
                        float *p, int32_t *next);
#endif
