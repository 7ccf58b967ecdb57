// The layer kinds (see layers.h). Scratch roles per mixer are listed at its top; model/plan.c sizes t0..t5 from
// the same roles.
#include "model/layers.h"

#include <math.h>

static void *row(void *base, int64_t r, int64_t width, int ab) { return (char *)base + r * width * ab; }

// The in-projections of one input run as one matmul_multi (one launch for decode-sized n on the GPU).
void gdn_in_proj_separate(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n,
                          void *b_out, void *a_out) {
    (void)p;
    void *const outs[] = {s->t[1], s->t[2], b_out, a_out};
    const fd_weight *const Ws[] = {&L->in_qkv, &L->in_z, &L->in_b, &L->in_a};
    be->matmul_multi(be, outs, Ws, 4, s->h, n);
}

void gdn_in_proj_grouped(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n,
                         void *b_out, void *a_out) {
    // qkvz lands in t0 and ba in t5 (both free until the conv and the core write them), then splits into t1..t4
    void *const outs[] = {s->t[0], s->t[5]};
    const fd_weight *const Ws[] = {&L->in_qkvz, &L->in_ba};
    be->matmul_multi(be, outs, Ws, 2, s->h, n);
    be->gdn_split_qkvz(be, s->t[1], s->t[2], b_out, a_out, s->t[0], s->t[5], n, p->gdn_k_heads, p->gdn_v_heads,
                       p->gdn_k_dim, p->gdn_v_dim);
}

// One verify tree's conv and GDN core (forward.h: fd_fwd_tree), into the same scratch rows as the chain's.
static void gdn_tree_segment(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
                             const fd_fwd_seg *q) {
    const int Hk = p->gdn_k_heads, Hv = p->gdn_v_heads, dk = p->gdn_k_dim, dv = p->gdn_v_dim;
    const int C = p->conv_channels, ab = be->act_bytes, r0 = q->row0, m = q->n;
    be->conv1d_silu_tree(be, row(s->t[0], r0, C, ab), row(s->t[1], r0, C, ab), &L->conv_w, q->conv_state[li], m, C,
                         p->conv_kernel, q->conv_slots[li], q->tree->parent_dev);
    be->gdn_core_tree(be, row(s->t[5], r0, (int64_t)Hv * dv, ab), row(s->t[0], r0, C, ab), row(s->t[3], r0, Hv, ab),
                      row(s->t[4], r0, Hv, ab), &L->A_log, &L->dt_bias, q->gdn_state[li], m, Hk, Hv, dk, dv,
                      q->gdn_slots[li], q->tree->parent_dev);
}

void gdn_mixer(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
               const fd_fwd_batch *b, fd_gdn_in_proj in_proj) {
    const int Hk = p->gdn_k_heads, Hv = p->gdn_v_heads, dk = p->gdn_k_dim, dv = p->gdn_v_dim;
    const int C = p->conv_channels, ab = be->act_bytes;
    // t1 = qkv [n, C], t2 = z [n, Hv dv], t3 = b [n, Hv], t4 = a [n, Hv], t0 = conv out, t5 = core out; a replay
    // verify (fd_fwd_seg.gdn_keep) puts the conv out, b and a in its keep buffer instead, where the commit finds them
    const fd_fwd_seg *keep = b->n_segs == 1 && b->segs[0].gdn_keep && !b->segs[0].tree ? &b->segs[0] : NULL;
    void *conv_out = s->t[0], *bq = s->t[3], *aq = s->t[4];
    if (keep) {
        FD_CHECK(keep->row0 == 0 && keep->n == b->n, "a replay verify is the forward's only segment");
        conv_out = keep->gdn_keep[li];
        bq = row(conv_out, b->n, C, ab);
        aq = row(bq, b->n, Hv, ab);
    }
    in_proj(p, L, be, s, b->n, bq, aq);
    for (int k = 0; k < b->n_segs; k++) {
        const fd_fwd_seg *q = &b->segs[k];
        const int r0 = q->row0, m = q->n;
        if (q->tree) {
            gdn_tree_segment(p, L, li, be, s, q);
            continue;
        }
        void *qkv = row(conv_out, r0, C, ab), *o = row(s->t[5], r0, (int64_t)Hv * dv, ab);
        const void *br = row(bq, r0, Hv, ab), *ar = row(aq, r0, Hv, ab);
        be->conv1d_silu(be, qkv, row(s->t[1], r0, C, ab), &L->conv_w, q->conv_state[li], m, C, p->conv_kernel,
                        q->conv_slots ? q->conv_slots[li] : NULL);
        if (keep)
            be->gdn_core_readonly(be, o, qkv, br, ar, &L->A_log, &L->dt_bias, q->gdn_state[li], m, Hk, Hv, dk, dv);
        else
            be->gdn_core(be, q->gdn_route, o, qkv, br, ar, &L->A_log, &L->dt_bias, q->gdn_state[li], m, Hk, Hv, dk, dv,
                         q->gdn_slots ? q->gdn_slots[li] : NULL);
    }
    be->gated_rmsnorm(be, s->t[5], s->t[5], s->t[2], &L->gdn_norm, (int64_t)b->n * Hv, dv, p->eps);
    be->matmul(be, s->y, s->t[5], &L->out_proj, b->n, 0);
}

// A verify tree's attention: RoPE at each node's depth (one op over the rows with their depths; where a backend
// lacks it, one row at a time: per row the op gives the bits it gives inside a block), K/V stored at pos + node,
// the tree mask.
static void tree_attention(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
                           const fd_fwd_seg *q) {
    const int H = p->q_heads, Hkv = p->kv_heads, hd = p->head_dim, ab = be->act_bytes, r0 = q->row0, m = q->n;
    if (be->qk_norm_rope_tree)
        be->qk_norm_rope_tree(be, row(s->t[2], r0, (int64_t)H * hd, ab), row(s->t[3], r0, (int64_t)H * hd, ab),
                              row(s->t[4], r0, (int64_t)Hkv * hd, ab), row(s->t[0], r0, (int64_t)2 * H * hd, ab),
                              &L->q_norm, &L->k_norm, m, H, Hkv, hd, p->rotary_dim, p->rope_theta, p->eps, q->pos,
                              q->tree->depth_dev);
    else
        for (int t = r0; t < r0 + m; t++)
            be->qk_norm_rope(be, row(s->t[2], t, (int64_t)H * hd, ab), row(s->t[3], t, (int64_t)H * hd, ab),
                             row(s->t[4], t, (int64_t)Hkv * hd, ab), row(s->t[0], t, (int64_t)2 * H * hd, ab),
                             &L->q_norm, &L->k_norm, 1, H, Hkv, hd, p->rotary_dim, p->rope_theta, p->eps,
                             q->pos + q->tree->depth[t - r0], NULL);
    const fd_kv_view kv = q->kv_view(q->seq, li);
    be->kv_store(be, &kv, row(s->t[4], r0, (int64_t)Hkv * hd, ab), row(s->t[5], r0, (int64_t)Hkv * hd, ab), q->pos,
                 NULL, m, Hkv, hd);
    be->attention_tree(be, row(s->t[1], r0, (int64_t)H * hd, ab), row(s->t[2], r0, (int64_t)H * hd, ab), &kv, q->pos,
                       m, H, Hkv, hd, 1.0f / sqrtf((float)hd), q->tree->parent_dev);
}

void gated_attn_mixer(const fd_rank_plan *p, const fd_layer *L, int li, fd_backend *be, fd_fwd_scratch *s,
                      const fd_fwd_batch *b) {
    const int H = p->q_heads, Hkv = p->kv_heads, hd = p->head_dim, ab = be->act_bytes;
    // t0 = q|gate, t2 = q, t3 = gate, t4 = k, t5 = v, t1 = attention out
    {
        void *const outs[] = {s->t[0], s->t[4], s->t[5]};
        const fd_weight *const Ws[] = {&L->q_proj, &L->k_proj, &L->v_proj};
        be->matmul_multi(be, outs, Ws, 3, s->h, b->n);
    }
    for (int k = 0; k < b->n_segs; k++) {
        const fd_fwd_seg *q = &b->segs[k];
        const int r0 = q->row0, m = q->n;
        void *qr = row(s->t[2], r0, (int64_t)H * hd, ab), *kr = row(s->t[4], r0, (int64_t)Hkv * hd, ab);
        const int64_t *pd = q->pos_dev;
        if (q->tree) {
            tree_attention(p, L, li, be, s, q);
            continue;
        }
        // split of q|gate, q/k norms and RoPE in one op per segment (RoPE needs the segment's position)
        be->qk_norm_rope(be, qr, row(s->t[3], r0, (int64_t)H * hd, ab), kr, row(s->t[0], r0, (int64_t)2 * H * hd, ab),
                         &L->q_norm, &L->k_norm, m, H, Hkv, hd, p->rotary_dim, p->rope_theta, p->eps, q->pos, pd);
        const fd_kv_view kv = q->kv_view(q->seq, li);
        be->kv_store(be, &kv, kr, row(s->t[5], r0, (int64_t)Hkv * hd, ab), q->pos, pd, m, Hkv, hd);
        be->attention(be, row(s->t[1], r0, (int64_t)H * hd, ab), qr, &kv, q->pos, pd, m, H, Hkv, hd,
                      1.0f / sqrtf((float)hd), 1);
    }
    be->sigmoid_mul(be, s->t[1], s->t[3], (int64_t)b->n * H * hd);
    be->matmul(be, s->y, s->t[1], &L->o_proj, b->n, 0);
}

void swiglu_ffn(fd_backend *be, void *y, const void *h, void *g, void *u, const fd_weight *gate, const fd_weight *up,
                const fd_weight *down, int n, int64_t width) {
    void *const outs[] = {g, u};
    const fd_weight *const Ws[] = {gate, up};
    be->matmul_multi(be, outs, Ws, 2, h, n);
    be->silu_mul(be, g, g, u, (int64_t)n * width);
    be->matmul(be, y, g, down, n, 0);
}

void moe_ffn(const fd_rank_plan *p, const fd_layer *L, fd_backend *be, fd_fwd_scratch *s, int n) {
    be->moe(be, s->y, s->h, &L->moe, n, p->hidden);
}
