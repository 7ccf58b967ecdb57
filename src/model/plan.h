// The per-rank plan: every shape one rank's forward uses, computed once at load from the configuration, a rank and
// a rank count. Under tensor parallelism (vLLM's qwen3_next.py is the reference) the attention and GDN heads, the
// conv channels that follow the GDN heads, the FFN / expert widths and the vocabulary are split over the ranks
// (local = total / tp); the hidden size, the norms and the router are replicated. A KV head count below tp is
// replicated instead (each rank holds one head; tp must then be a multiple of it), as vLLM's QKV projection does.
// The forward (model/forward.h) reads its shapes from here, never from fd_config, and the engine sizes scratch and
// per-sequence state from here. plan_init refuses a split the shapes do not allow; model_shard (model/shard.c)
// slices the weights to a rank's plan and engine_tp.h runs the ranks.
#ifndef FD_MODEL_PLAN_H
#define FD_MODEL_PLAN_H
#include <stdint.h>

#include "model/config.h"

typedef enum { FD_FFN_DENSE = 0, FD_FFN_MOE = 1 } fd_ffn_kind;

// The forward's scratch buffers (rows of act elements, one row per token): x, h, y are [n, hidden]; t0..t5 are the
// intermediates a layer kind names in model/layers.c.
enum { FD_SCRATCH_T0 = 0, FD_SCRATCH_T1, FD_SCRATCH_T2, FD_SCRATCH_T3, FD_SCRATCH_T4, FD_SCRATCH_T5, FD_SCRATCH_TMPS };

typedef struct {
    fd_layer_kind kind;
    fd_ffn_kind ffn;
    int64_t tmp_width[FD_SCRATCH_TMPS]; // elements per row this layer writes into t0..t5 (0: unused)
} fd_layer_plan;

typedef struct {
    int tp_rank, tp_size;
    // A shard of a tensor-parallel group (model_shard sets it, at tp 1 too): its forward all-reduces after every
    // row-parallel projection, so --tp 1 runs the group's code path (a one-rank all-reduce) rather than skipping it.
    int grouped;
    fd_arch arch;
    int num_layers, hidden;
    float eps;
    // gated attention, local to the rank
    int q_heads, kv_heads, head_dim, rotary_dim;
    float rope_theta;
    // Gated DeltaNet, local: heads, head dims, conv channels (2 Hk dk + Hv dv) and taps
    int gdn_k_heads, gdn_v_heads, gdn_k_dim, gdn_v_dim, conv_channels, conv_kernel;
    // FFN widths, local: dense SwiGLU, routed expert, shared expert
    int ffn_width, expert_width, shared_expert_width;
    // this rank's slice of the vocabulary: rows [vocab_begin, vocab_end) of the LM head (all of it at tp 1)
    int vocab_size, vocab_begin, vocab_end;
    int first_gdn_layer, n_gdn_layers; // -1 / 0 when the model has no GDN layer
    int has_moe;
    fd_layer_plan layers[FD_MAX_LAYERS];
    int64_t tmp_width[FD_SCRATCH_TMPS]; // the widest use of each scratch intermediate over the layers
} fd_rank_plan;

// The plan of rank tp_rank of tp_size for configuration c. Refuses (fd_error set, naming the config field) a rank
// outside 0..tp_size-1 and any head count or width that does not split evenly over tp_size ranks.
int plan_init(fd_rank_plan *p, const fd_config *c, int tp_rank, int tp_size);
// Bytes of one GDN layer's conv state ([conv_channels, conv_kernel - 1] f32) and recurrent state ([Hv, dk, dv] f32).
int64_t plan_conv_state_bytes(const fd_rank_plan *p);
int64_t plan_gdn_state_bytes(const fd_rank_plan *p);
#endif
