// DFlash speculative decoding: the drafter's forward (block of [anchor, MASK x (B-1)] attending, non-causally,
// to the context K/V of every committed token) and the draft -> verify -> accept -> commit round.
#ifndef FD_DFLASH_H
#define FD_DFLASH_H
#include "engine/engine.h"
#include "model/dflash.h"

#define FD_SPEC_MAX_BLOCK 64

typedef struct {
    int64_t rounds, draft_tokens, accepted, emitted;
    int64_t accepted_per_pos[FD_SPEC_MAX_BLOCK]; // rounds whose draft at position i (0-based) was accepted
    double draft_s, verify_s, round_s;
} fd_spec_stats;

// Oracle drafter (tests and the bench): proposes the reference continuation `ref` with a forced number of
// correct drafts per round (cycled from `accept`), then a wrong token. Label results as oracle runs.
typedef struct {
    const int32_t *ref;
    int64_t ref_len;
    const int *accept;
    int n_accept;
} fd_spec_oracle;

typedef struct fd_dflash {
    fd_engine *tgt;
    fd_drafter *dr;
    fd_backend *be;
    int B;            // block size (anchor included)
    int64_t capacity; // draft KV positions
    int64_t n_ctx;    // committed positions whose context K/V are cached
    void **kv;        // [drafter layers] draft KV caches
    void *ctx, *x, *h, *q, *k, *v, *att, *y, *g, *u; // scratch (backend memory)
    float *logits_dev; // f32 [B-1, V]
    const fd_spec_oracle *oracle;
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
// Prefill + speculative greedy generation of n_new tokens into out (identical to plain greedy).
int dflash_generate(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, int n_new, int32_t *out);
// Prefills the target on ids (taps into the draft context); writes the greedy anchor.
int dflash_prefill(fd_dflash *s, const int32_t *ids, int64_t n, int chunk, int32_t *anchor);
void dflash_print_stats(const fd_dflash *s, FILE *f);
#endif
