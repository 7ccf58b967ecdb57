// The layer kinds every decoder here is built from, over backend ops: the Gated DeltaNet mixer, the gated
// attention mixer, the dense SwiGLU FFN (shared with the drafters) and the MoE FFN. A mixer reads the normed input
// in s->h and writes its output to s->y; shapes come from the rank plan (local heads and widths).
#ifndef FD_MODEL_LAYERS_H
#define FD_MODEL_LAYERS_H
#include "model/forward.h"

// The GDN in-projections of s->h into t1 = qkv [n, conv_channels], t2 = z [n, Hv dv], t3 = b [n, Hv],
// t4 = a [n, Hv]: the one place the architecture families' GDN mixers differ (model/decoder.c picks one).
// The in-projections of n rows: qkv -> t1, z -> t2, b -> b_out, a -> a_out ([n, Hv] each; t3 / t4, or a verify's
// keep buffer, forward.h: fd_fwd_seg.gdn_keep).
typedef void (*fd_gdn_in_proj)(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n,
                               void *b_out, void *a_out);
// qwen3_5 / qwen3_5_moe: four projections (in_proj_qkv, in_proj_z, in_proj_b, in_proj_a).
void gdn_in_proj_separate(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n,
                          void *b_out, void *a_out);
// qwen3_next: two grouped projections (in_proj_qkvz, in_proj_ba, per key-head group) and their split.
void gdn_in_proj_grouped(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n,
                         void *b_out, void *a_out);

// GDN layer li over the batch's rows: in-projections, then per segment the causal conv and the recurrence on the
// segment's state, then the gated norm and the out-projection.
void gdn_mixer(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
               const fd_fwd_batch *b, fd_gdn_in_proj in_proj);
// Attention layer li: q|gate, k, v projections, then per segment q/k norms, RoPE, the KV store and causal
// attention over the segment's cache, then the sigmoid gate and the out-projection.
void gated_attn_mixer(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
                      const fd_fwd_batch *b);
// y = down(silu(gate h) * up h) over n rows; g and u are [n, width] scratch.
void swiglu_ffn(fd_backend *be, void *y, const void *h, void *g, void *u, const fd_weight *gate, const fd_weight *up,
                const fd_weight *down, int n, int64_t width);
// The routed experts and the shared expert of layer L (the backend's moe op).
void moe_ffn(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n);
#endif
