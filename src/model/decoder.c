// The decoders (see forward.h): one forward per architecture family, from the layer kinds of layers.h.
//
// Family "qwen3 hybrid" (qwen3_5, qwen3_5_moe, qwen3_next): embed; per layer a GDN or gated attention mixer and a
// dense or MoE FFN, each residual add fused with the norm that reads its result (add_rmsnorm): the mixer's with
// post_norm, the FFN's with the next layer's input_norm or, after the last layer, the final norm (which is why that
// norm covers every row, not only the LM head's: it costs one extra row pass and saves a launch). The members of
// the family differ only in their GDN in-projections (k_arch). Under tensor parallelism each rank's mixer and FFN
// end in a row-parallel projection (out_proj / o_proj, down_proj / the experts' and shared expert's down) that
// leaves a partial sum in s->y: one all-reduce after each makes y the full output on every rank (called only on a
// shard of a group, plan.grouped: a plain model runs exactly the ops it ran before tensor parallelism existed, and
// an explicit --tp 1 runs the one-rank all-reduce, the identity, so its logits are the plain engine's bitwise).
#include "model/forward.h"

#include <string.h>

#include "model/layers.h"

typedef void (*fd_forward_fn)(const fd_model *m, fd_backend *be, fd_fwd_scratch *s, const fd_fwd_batch *b,
                              fd_gdn_in_proj gdn_in_proj);

typedef struct {
    fd_forward_fn forward;
    fd_gdn_in_proj gdn_in_proj;
} arch_forward;

static void hybrid_forward(const fd_model *m, fd_backend *be, fd_fwd_scratch *s, const fd_fwd_batch *b,
                           fd_gdn_in_proj gdn_in_proj);

static const arch_forward k_arch[FD_ARCH_COUNT] = {
    [FD_ARCH_QWEN3_5] = {hybrid_forward, gdn_in_proj_separate},
    [FD_ARCH_QWEN3_5_MOE] = {hybrid_forward, gdn_in_proj_separate},
    [FD_ARCH_QWEN3_NEXT] = {hybrid_forward, gdn_in_proj_grouped},
};

static void *row(void *base, int64_t r, int64_t width, int ab) { return (char *)base + r * width * ab; }

// The sum of the ranks' partial outputs y [n, hidden].
static void reduce_partial(const fd_rank_plan *p, fd_backend *be, void *y, int n) {
    if (p->grouped) be->all_reduce(be, y, (int64_t)n * p->hidden);
}

static void hybrid_forward(const fd_model *m, fd_backend *be, fd_fwd_scratch *s, const fd_fwd_batch *b,
                           fd_gdn_in_proj gdn_in_proj) {
    const fd_rank_plan *p = &m->plan;
    const int n = b->n, d = p->hidden;
    be->embed(be, s->x, &m->embed, b->ids_dev, n);
    be->rmsnorm(be, s->h, s->x, &m->layers[0].input_norm, n, d, p->eps, 1);
    for (int li = 0; li < p->num_layers; li++) {
        const fd_layer *L = &m->layers[li];
        const fd_layer_plan *lp = &p->layers[li];
        if (lp->kind == FD_LAYER_GDN) gdn_mixer(p, L, li, be, s, b, gdn_in_proj);
        else gated_attn_mixer(p, L, li, be, s, b);
        reduce_partial(p, be, s->y, n);
        be->add_rmsnorm(be, s->h, s->x, s->y, &L->post_norm, n, d, p->eps, 1);
        if (lp->ffn == FD_FFN_MOE) moe_ffn(p, L, be, s, n);
        else swiglu_ffn(be, s->y, s->h, s->t[0], s->t[1], &L->gate_proj, &L->up_proj, &L->down_proj, n, p->ffn_width);
        reduce_partial(p, be, s->y, n);
        const fd_weight *next_norm = li + 1 < p->num_layers ? &m->layers[li + 1].input_norm : &m->final_norm;
        be->add_rmsnorm(be, s->h, s->x, s->y, next_norm, n, d, p->eps, 1);
        if (b->tap_col && b->tap_col[li] >= 0) {
            const size_t rb = (size_t)d * be->act_bytes;
            be->copy_rows(be, (char *)b->taps + (size_t)b->tap_col[li] * rb, rb * (size_t)b->n_taps, s->x, rb, n, rb);
        }
    }
    if (b->head_first >= 0) model_lm_head(m, be, s, b->head_first, n - b->head_first, b->logits_dev);
}

void model_forward(const fd_model *m, fd_backend *be, fd_fwd_scratch *s, const fd_fwd_batch *b) {
    const arch_forward *a = &k_arch[m->plan.arch];
    FD_CHECK(b->n >= 1 && b->n <= s->rows && a->forward, "forward of %d rows (scratch %d) for architecture %s", b->n,
             s->rows, cfg_arch_name(m->plan.arch));
    FD_CHECK(!m->plan.grouped || be->all_reduce, "rank %d of %d on backend %s, which is in no tensor-parallel group",
             m->plan.tp_rank, m->plan.tp_size, be->name);
    a->forward(m, be, s, b, a->gdn_in_proj);
}

void model_lm_head(const fd_model *m, fd_backend *be, const fd_fwd_scratch *s, int r0, int rows, float *logits_dev) {
    be->matmul(be, logits_dev, row(s->h, r0, m->plan.hidden, be->act_bytes), &m->lm_head, rows, 1);
}

void fwd_scratch_init(fd_fwd_scratch *s, const fd_model *m, fd_backend *be, int rows) {
    const fd_rank_plan *p = &m->plan;
    const size_t row_bytes = (size_t)p->hidden * be->act_bytes;
    s->rows = rows;
    s->x = be->alloc(be, (size_t)rows * row_bytes);
    s->h = be->alloc(be, (size_t)rows * row_bytes);
    s->y = be->alloc(be, (size_t)rows * row_bytes);
    for (int k = 0; k < FD_SCRATCH_TMPS; k++) { // at least one element: a kind no layer uses still gets a buffer
        const int64_t w = p->tmp_width[k] > 0 ? p->tmp_width[k] : 1;
        s->t[k] = be->alloc(be, (size_t)rows * (size_t)w * be->act_bytes);
    }
}

void fwd_scratch_free(fd_fwd_scratch *s, fd_backend *be) {
    void *bufs[] = {s->x, s->h, s->y, s->t[0], s->t[1], s->t[2], s->t[3], s->t[4], s->t[5]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}
