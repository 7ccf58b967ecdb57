// The drafters' forward pass (DFlash and DFlash2), next to the target's (model/forward.h), over backend ops only.
//
// A DFlash drafter is a small Qwen3-style decoder that runs non-causally over one block [anchor, MASK x (B-1)] at
// positions n_ctx.., attending to the K/V of its context (the target's tapped hidden states, projected by fc), and
// reads its logits through the target's embedding and LM head. DFlash2 is the same decoder with a dynamic grouped
// conv around each sublayer and sliding-window layers: the differences are a variant (draft_variant: the conv
// hooks and the attention), chosen once from the drafter, not branches in the forward. The speculative round that
// drives these (caches' lifetime, acceptance, the selector walk) is the engine's (engine/dflash.h).
#ifndef FD_MODEL_DRAFT_FORWARD_H
#define FD_MODEL_DRAFT_FORWARD_H
#include "backend.h"
#include "model/dflash.h"

// The draft forward's scratch in backend memory: ctx, k, v hold up to ctx_rows rows (a context append of a whole
// prompt chunk); the block buffers B rows.
typedef struct {
    int B, ctx_rows;
    void *ctx, *k, *v;               // act [ctx_rows, d], [ctx_rows, Hkv hd] x 2
    void *x, *h, *y, *q, *att, *g, *u; // act [B, d] x 3, [B, H hd] x 2, [B, I] x 2
    float *logits_dev;               // f32 [B-1, V]: the block's logits after the anchor (before any multiplier)
    float *dyn;                      // DFlash2: f32 [B, 2 K G], the current sublayer's dynamic taps (pre | post)
    void *tmp;                       // DFlash2: act [B, d], a conv's output
} fd_draft_scratch;

// The drafter's context caches: one contiguous cache of `capacity` positions per drafter layer (be->kv_store).
typedef struct {
    void *const *kv;
    int64_t capacity;
} fd_draft_caches;

// What differs between the drafter architectures inside the forward.
typedef struct {
    const char *name; // "dflash", "dflash2"
    // Around sublayer `mlp` (0 attention, 1 MLP) of layer l, on act [B, d] in place: conv_in on its input, conv_out
    // on its output. NULL: none.
    void (*conv_in)(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, int mlp, void *h);
    void (*conv_out)(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, int mlp, void *y);
    // The block's attention in layer l: s->q over cache kv (positions 0 .. n_ctx + B) into s->att.
    void (*attention)(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, const fd_kv_view *kv,
                      int64_t n_ctx);
} fd_draft_variant;

const fd_draft_variant *draft_variant(const fd_drafter *d);

// Allocates the scratch for blocks of B and context appends of up to ctx_rows rows; refuses a backend that lacks an
// op the drafter's variant needs (nothing allocated then).
int draft_scratch_init(fd_draft_scratch *s, const fd_drafter *d, fd_backend *be, int B, int ctx_rows);
void draft_scratch_free(fd_draft_scratch *s, fd_backend *be);

// Context append: the first m rows of taps [m, n_taps d] (the target's tapped layer outputs) -> fc -> hidden_norm,
// then every layer's K/V of them at positions pos0..pos0+m-1.
void draft_forward_context(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, const void *taps, int m,
                           const fd_draft_caches *c, int64_t pos0);
// The block: ids_dev [B] (backend memory) at positions n_ctx.., each layer's block K/V stored after the context (the
// next context append overwrites them). Leaves the final-normed hidden of the B-1 rows after the anchor in s->h and
// their logits (the target's LM head) in s->logits_dev.
void draft_forward_block(const fd_drafter *d, const fd_model *target, fd_backend *be, fd_draft_scratch *s,
                         const int32_t *ids_dev, const fd_draft_caches *c, int64_t n_ctx);
#endif
