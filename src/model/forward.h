// The model's forward pass: the contract between the engine and the decoder.
//
// The engine owns sequences, KV pages, GDN/conv state and its slots, batching, graphs and where outputs go; it
// describes one forward as a batch (fd_fwd_batch: the rows, and per sequence segment where its state lives) and
// calls model_forward, which runs the architecture's decoder over backend ops only and leaves the final-normed
// hidden states (and, when asked, the LM head's logits) in the scratch. Every shape comes from the model's rank
// plan (model/plan.h), not from fd_config. The decoder is one per architecture family (model/decoder.c) built from
// shared layer kinds (model/layers.h): the GDN mixer, the gated attention mixer, the dense SwiGLU FFN, the MoE FFN.
//
// Host-side effects stay outside: model_forward issues backend ops and nothing else, so a recorded forward
// (engine_graphs.c) replays exactly what it did.
#ifndef FD_MODEL_FORWARD_H
#define FD_MODEL_FORWARD_H
#include "backend.h"
#include "model/model.h"

// The forward's scratch in backend memory, sized once for `rows` tokens from the plan: x (residual stream), h
// (normed), y (a sublayer's output) are [rows, hidden]; t[0..5] the intermediates, each as wide as its widest use
// in any layer (plan tmp_width).
typedef struct {
    void *x, *h, *y;
    void *t[FD_SCRATCH_TMPS];
    int rows;
} fd_fwd_scratch;

// Allocates the scratch for `rows` tokens of model m.
void fwd_scratch_init(fd_fwd_scratch *s, const fd_model *m, fd_backend *be, int rows);
void fwd_scratch_free(fd_fwd_scratch *s, fd_backend *be);

// A verify tree over a segment's rows (spec_verify=tree): row t is node t, its parent's row parent[t] < t (-1 for
// the root, whose parent is the committed state). Node t's RoPE position is pos + depth[t]; its K/V are stored at
// position pos + t (the commit moves the accepted path's to pos + depth); attention sees the context and the
// node's ancestors; its GDN / conv state comes from its parent's slot and lands in slot t (conv_slots / gdn_slots
// required); the committed state is left as it was.
typedef struct {
    const int32_t *parent, *depth;            // [n] host
    const int32_t *parent_dev, *depth_dev;    // [n] the same in backend memory (the ops read them there)
} fd_fwd_tree;

// One sequence's rows of a forward, and where its per-sequence state lives. A forward runs its projections over
// all rows at once and the per-sequence work (conv and GDN state, RoPE position, KV cache, attention) segment by
// segment.
typedef struct {
    int row0, n;            // its rows in the scratch
    int64_t pos;            // position of its first row
    const int64_t *pos_dev; // NULL: pos is a host argument; else the ops read the position there (recordable)
    fd_gdn_route gdn_route; // the GDN form of its rows (the engine picks it: route gdn_prefill / gdn_decode)
    float *const *conv_state, *const *gdn_state; // [num_layers] f32 state of its GDN layers (NULL elsewhere)
    float *const *conv_slots, *const *gdn_slots; // per-token states (verify blocks), or NULL
    // A chain verify under gdn_verify=replay (gdn_slots NULL; the batch's only segment, rows from 0): per GDN layer
    // the buffer its core's inputs land in, act [n, conv_dim] post-conv qkv, then [n, Hv] b, then [n, Hv] a; the
    // core only reads the GDN state (gdn_core_readonly) and the engine's commit replays the accepted rows. NULL
    // otherwise.
    void *const *gdn_keep;
    fd_kv_view (*kv_view)(const void *seq, int layer); // attention layer `layer`'s cache of the sequence
    const void *seq;
    const fd_fwd_tree *tree; // NULL: the rows are a chain (row i at pos + i), as every forward but a tree verify
} fd_fwd_seg;

typedef struct {
    int n;                   // rows (tokens) of the forward, <= the scratch's rows
    const int32_t *ids_dev;  // [n] token ids in backend memory
    const fd_fwd_seg *segs;  // the sequences, in row order, covering rows [0, n)
    int n_segs;
    // LM head of rows [head_first, n) into logits_dev [n - head_first, V] f32; head_first < 0: no LM head.
    int head_first;
    float *logits_dev;
    // Hidden-state taps (a drafter's context): when tap_col is not NULL, layer li's output row r goes to column
    // block tap_col[li] (-1: none) of row r of taps [n, n_taps * hidden] (act).
    const int *tap_col;
    int n_taps;
    void *taps;
} fd_fwd_batch;

// The decoder over the batch: embeds ids_dev, runs every layer and leaves the final norm of all n rows in s->h
// (and the LM head as the batch asks).
void model_forward(const fd_model *m, fd_backend *be, fd_fwd_scratch *s, const fd_fwd_batch *b);
// The LM head of `rows` rows starting at row r0 of s->h into logits_dev (f32 [rows, V]).
void model_lm_head(const fd_model *m, fd_backend *be, const fd_fwd_scratch *s, int r0, int rows, float *logits_dev);
#endif
