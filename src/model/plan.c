// The per-rank plan (see plan.h).
#include "model/plan.h"

#include <string.h>

#include "base/base.h"

static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

// total / tp when it divides evenly; else the error, naming the config field.
static int split(const char *field, int total, int tp, int *local) {
    if (total % tp)
        return fd_error_set("tensor parallelism over %d ranks: %s = %d is not a multiple of %d", tp, field, total, tp);
    *local = total / tp;
    return 0;
}

// What each layer kind writes into the scratch intermediates t0..t5, per row (the buffer roles are spelled out
// next to each mixer in model/layers.c; a change there changes this).
static void layer_tmp_widths(const fd_rank_plan *p, int li, int64_t *w) {
    const fd_layer_plan *L = &p->layers[li];
    memset(w, 0, sizeof(int64_t) * FD_SCRATCH_TMPS);
    if (L->kind == FD_LAYER_GDN) {
        const int64_t C = p->conv_channels, Hv = p->gdn_v_heads, vw = Hv * p->gdn_v_dim;
        // t1 qkv, t2 z, t3 b, t4 a (from the projections or the grouped split), t0 conv out, t5 core out
        w[FD_SCRATCH_T0] = C;
        w[FD_SCRATCH_T1] = C;
        w[FD_SCRATCH_T2] = vw;
        w[FD_SCRATCH_T3] = Hv;
        w[FD_SCRATCH_T4] = Hv;
        w[FD_SCRATCH_T5] = vw;
        if (p->arch == FD_ARCH_QWEN3_NEXT) { // grouped projections first land in t0 (qkvz) and t5 (ba)
            w[FD_SCRATCH_T0] = max_i64(C, 2 * (int64_t)p->gdn_k_heads * p->gdn_k_dim + 2 * vw);
            w[FD_SCRATCH_T5] = max_i64(vw, 2 * Hv);
        }
    } else {
        const int64_t qw = (int64_t)p->q_heads * p->head_dim, kw = (int64_t)p->kv_heads * p->head_dim;
        // t0 q|gate, t2 q, t3 gate, t4 k, t5 v, t1 attention out
        w[FD_SCRATCH_T0] = 2 * qw;
        w[FD_SCRATCH_T1] = qw;
        w[FD_SCRATCH_T2] = qw;
        w[FD_SCRATCH_T3] = qw;
        w[FD_SCRATCH_T4] = kw;
        w[FD_SCRATCH_T5] = kw;
    }
    if (L->ffn == FD_FFN_DENSE) { // t0 gate, t1 up; the MoE op keeps its own scratch
        w[FD_SCRATCH_T0] = max_i64(w[FD_SCRATCH_T0], p->ffn_width);
        w[FD_SCRATCH_T1] = max_i64(w[FD_SCRATCH_T1], p->ffn_width);
    }
}

int plan_init(fd_rank_plan *p, const fd_config *c, int tp_rank, int tp_size) {
    memset(p, 0, sizeof *p);
    if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
        return fd_error_set("tensor parallelism: rank %d of %d ranks does not exist", tp_rank, tp_size);
    if (c->num_layers < 1 || c->num_layers > FD_MAX_LAYERS)
        return fd_error_set("plan of a %d-layer model (1..%d)", c->num_layers, FD_MAX_LAYERS);
    const int tp = tp_size;
    p->tp_rank = tp_rank;
    p->tp_size = tp;
    p->arch = c->arch;
    p->num_layers = c->num_layers;
    p->hidden = c->hidden_size;
    p->eps = c->rms_norm_eps;
    p->head_dim = c->head_dim;
    p->rotary_dim = c->rotary_dim;
    p->rope_theta = c->rope_theta;
    p->gdn_k_dim = c->gdn_k_dim;
    p->gdn_v_dim = c->gdn_v_dim;
    p->conv_kernel = c->gdn_conv_kernel;
    p->first_gdn_layer = -1;
    int any_dense = 0;
    for (int i = 0; i < c->num_layers; i++) {
        p->layers[i].kind = c->layer_kind[i];
        p->layers[i].ffn = c->layer_is_moe[i] ? FD_FFN_MOE : FD_FFN_DENSE;
        p->has_moe |= c->layer_is_moe[i];
        any_dense |= !c->layer_is_moe[i];
        if (c->layer_kind[i] == FD_LAYER_GDN) {
            if (p->first_gdn_layer < 0) p->first_gdn_layer = i;
            p->n_gdn_layers++;
        }
    }
    FD_TRY(split("num_attention_heads", c->num_heads, tp, &p->q_heads));
    if (c->num_kv_heads >= tp) {
        FD_TRY(split("num_key_value_heads", c->num_kv_heads, tp, &p->kv_heads));
    } else if (tp % c->num_kv_heads) {
        return fd_error_set("tensor parallelism over %d ranks: num_key_value_heads = %d can be neither split nor "
                            "replicated (%d is not a multiple of it)", tp, c->num_kv_heads, tp);
    } else {
        p->kv_heads = 1; // replicated: tp / Hkv ranks hold each KV head
    }
    FD_TRY(split("linear_num_key_heads", c->gdn_num_k_heads, tp, &p->gdn_k_heads));
    FD_TRY(split("linear_num_value_heads", c->gdn_num_v_heads, tp, &p->gdn_v_heads));
    p->conv_channels = 2 * p->gdn_k_heads * p->gdn_k_dim + p->gdn_v_heads * p->gdn_v_dim;
    if (any_dense) FD_TRY(split("intermediate_size", c->intermediate_size, tp, &p->ffn_width));
    if (p->has_moe) {
        FD_TRY(split("moe_intermediate_size", c->moe_intermediate_size, tp, &p->expert_width));
        FD_TRY(split("shared_expert_intermediate_size", c->shared_expert_intermediate_size, tp,
                     &p->shared_expert_width));
    }
    if (c->vocab_size < tp)
        return fd_error_set("tensor parallelism over %d ranks: vocab_size = %d is smaller", tp, c->vocab_size);
    // Contiguous slices of ceil(V / tp) rows; the last rank's may be shorter.
    const int per_rank = (c->vocab_size + tp - 1) / tp;
    p->vocab_size = c->vocab_size;
    p->vocab_begin = tp_rank * per_rank;
    p->vocab_end = p->vocab_begin + per_rank < c->vocab_size ? p->vocab_begin + per_rank : c->vocab_size;
    if (p->vocab_begin >= p->vocab_end)
        return fd_error_set("tensor parallelism over %d ranks: vocab_size = %d leaves rank %d no rows", tp,
                            c->vocab_size, tp_rank);
    for (int i = 0; i < c->num_layers; i++) {
        int64_t *w = p->layers[i].tmp_width;
        layer_tmp_widths(p, i, w);
        for (int k = 0; k < FD_SCRATCH_TMPS; k++) p->tmp_width[k] = max_i64(p->tmp_width[k], w[k]);
    }
    return 0;
}

int64_t plan_conv_state_bytes(const fd_rank_plan *p) {
    return (int64_t)p->conv_channels * (p->conv_kernel - 1) * (int64_t)sizeof(float);
}

int64_t plan_gdn_state_bytes(const fd_rank_plan *p) {
    return (int64_t)p->gdn_v_heads * p->gdn_k_dim * p->gdn_v_dim * (int64_t)sizeof(float);
}
