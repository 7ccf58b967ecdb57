// The drafters' forward (see draft_forward.h). The FFN is the target's SwiGLU block (model/layers.h); the
// attention is the drafter's own (plain RMSNorm on q and k, RoPE, non-causal over the block).
#include "model/draft_forward.h"

#include <math.h>
#include <string.h>

#include "model/dflash2.h"
#include "model/layers.h"

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// ---- DFlash: full attention, no convs ----

static void full_attention(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, const fd_kv_view *kv,
                           int64_t n_ctx) {
    (void)l;
    be->attention(be, s->att, s->q, kv, n_ctx, NULL, s->B, d->num_heads, d->num_kv_heads, d->head_dim,
                  1.0f / sqrtf((float)d->head_dim), 0);
}

// ---- DFlash2: dynamic grouped convs around each sublayer, sliding-window layers ----

static const fd_dflash2_conv *conv_of(const fd_drafter *d, int l, int mlp) {
    return mlp ? &d->v2->mlp_conv[l] : &d->v2->attn_conv[l];
}

static void dyn_conv_in(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, int mlp, void *h) {
    const fd_dflash2 *m = d->v2;
    const fd_dflash2_conv *c = conv_of(d, l, mlp);
    const int K = m->conv_kernel, G = d->hidden_size / m->conv_group;
    // One projection of the sublayer input gives the taps for both sides of the sublayer; the post half stays in
    // s->dyn for dyn_conv_out.
    be->matmul(be, s->dyn, h, &c->proj, s->B, 1);
    be->dyn_conv(be, s->tmp, h, s->dyn, 2 * K * G, &c->base, 0, s->B, d->hidden_size, m->conv_group, K);
    be->copy(be, h, s->tmp, (size_t)s->B * d->hidden_size * be->act_bytes);
}

static void dyn_conv_out(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, int mlp, void *y) {
    const fd_dflash2 *m = d->v2;
    const int K = m->conv_kernel, G = d->hidden_size / m->conv_group;
    be->dyn_conv(be, s->tmp, y, s->dyn + (size_t)K * G, 2 * K * G, &conv_of(d, l, mlp)->base, 1, s->B,
                 d->hidden_size, m->conv_group, K);
    be->copy(be, y, s->tmp, (size_t)s->B * d->hidden_size * be->act_bytes);
}

static void window_attention(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, const fd_kv_view *kv,
                             int64_t n_ctx) {
    const int w = d->v2->window[l];
    const float scale = 1.0f / sqrtf((float)d->head_dim);
    // Keys run from position 0 to the block's last query (n_ctx + B - 1 apart at most): a window wider than that
    // masks nothing, and the plain attention is the same computation.
    if (!w || n_ctx + s->B <= w)
        be->attention(be, s->att, s->q, kv, n_ctx, NULL, s->B, d->num_heads, d->num_kv_heads, d->head_dim, scale, 0);
    else
        be->attention_window(be, s->att, s->q, kv, n_ctx, s->B, d->num_heads, d->num_kv_heads, d->head_dim, scale, w);
}

static const fd_draft_variant k_dflash = {"dflash", NULL, NULL, full_attention};
static const fd_draft_variant k_dflash2 = {"dflash2", dyn_conv_in, dyn_conv_out, window_attention};

const fd_draft_variant *draft_variant(const fd_drafter *d) { return d->v2 ? &k_dflash2 : &k_dflash; }

int draft_scratch_init(fd_draft_scratch *s, const fd_drafter *d, fd_backend *be, int B, int ctx_rows) {
    memset(s, 0, sizeof *s);
    if (d->v2 && (!be->dyn_conv || !be->attention_window))
        return fd_error_set("the %s backend does not implement the DFlash2 drafter ops (dyn_conv, attention_window); "
                            "run DFlash2 drafters with --backend cpu", be->name);
    const int64_t ab = be->act_bytes, D = d->hidden_size, rows = imax(ctx_rows, B);
    const int64_t qw = (int64_t)d->num_heads * d->head_dim, kw = (int64_t)d->num_kv_heads * d->head_dim;
    s->B = B;
    s->ctx_rows = (int)rows;
    s->ctx = be->alloc(be, (size_t)(rows * D * ab));
    s->k = be->alloc(be, (size_t)(rows * kw * ab));
    s->v = be->alloc(be, (size_t)(rows * kw * ab));
    s->x = be->alloc(be, (size_t)(B * D * ab));
    s->h = be->alloc(be, (size_t)(B * D * ab));
    s->y = be->alloc(be, (size_t)(B * D * ab));
    s->q = be->alloc(be, (size_t)(B * qw * ab));
    s->att = be->alloc(be, (size_t)(B * qw * ab));
    s->g = be->alloc(be, (size_t)(B * d->intermediate_size * ab));
    s->u = be->alloc(be, (size_t)(B * d->intermediate_size * ab));
    s->logits_dev = be->alloc(be, (size_t)(B - 1) * d->vocab_size * sizeof(float));
    if (d->v2) {
        const int64_t G = D / d->v2->conv_group;
        s->dyn = be->alloc(be, (size_t)B * 2 * d->v2->conv_kernel * G * sizeof(float));
        s->tmp = be->alloc(be, (size_t)(B * D * ab));
    }
    return 0;
}

void draft_scratch_free(fd_draft_scratch *s, fd_backend *be) {
    void *bufs[] = {s->ctx, s->k, s->v, s->x, s->h, s->y, s->q, s->att, s->g, s->u, s->logits_dev, s->dyn, s->tmp};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) be->free(be, bufs[i]);
    memset(s, 0, sizeof *s);
}

// K and V projections of `m` rows (in s->k, s->v) for drafter layer l, normed and rotated, stored at positions
// pos0..
static void kv_store_rows(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, int l, int m,
                          const fd_draft_caches *c, int64_t pos0) {
    const fd_draft_layer *L = &d->layers[l];
    be->rmsnorm(be, s->k, s->k, &L->k_norm, (int64_t)m * d->num_kv_heads, d->head_dim, d->rms_norm_eps, 0);
    be->rope(be, s->k, m, d->num_kv_heads, d->head_dim, d->rotary_dim, d->rope_theta, pos0, NULL);
    const fd_kv_view kv = fd_kv_flat(c->kv[l], c->capacity);
    be->kv_store(be, &kv, s->k, s->v, pos0, NULL, m, d->num_kv_heads, d->head_dim);
}

void draft_forward_context(const fd_drafter *d, fd_backend *be, fd_draft_scratch *s, const void *taps, int m,
                           const fd_draft_caches *c, int64_t pos0) {
    be->matmul(be, s->ctx, taps, &d->fc, m, 0);
    be->rmsnorm(be, s->ctx, s->ctx, &d->hidden_norm, m, d->hidden_size, d->rms_norm_eps, 0);
    for (int l = 0; l < d->num_layers; l++) {
        const fd_draft_layer *L = &d->layers[l];
        void *const outs[] = {s->k, s->v};
        const fd_weight *const Ws[] = {&L->k_proj, &L->v_proj};
        be->matmul_multi(be, outs, Ws, 2, s->ctx, m);
        kv_store_rows(d, be, s, l, m, c, pos0);
    }
}

void draft_forward_block(const fd_drafter *d, const fd_model *target, fd_backend *be, fd_draft_scratch *s,
                         const int32_t *ids_dev, const fd_draft_caches *c, int64_t n_ctx) {
    const fd_draft_variant *var = draft_variant(d);
    const int B = s->B, D = d->hidden_size, H = d->num_heads, hd = d->head_dim;
    be->embed(be, s->x, &target->embed, ids_dev, B);
    for (int l = 0; l < d->num_layers; l++) {
        const fd_draft_layer *L = &d->layers[l];
        be->rmsnorm(be, s->h, s->x, &L->input_norm, B, D, d->rms_norm_eps, 0);
        if (var->conv_in) var->conv_in(d, be, s, l, 0, s->h);
        {
            void *const outs[] = {s->q, s->k, s->v};
            const fd_weight *const Ws[] = {&L->q_proj, &L->k_proj, &L->v_proj};
            be->matmul_multi(be, outs, Ws, 3, s->h, B);
        }
        be->rmsnorm(be, s->q, s->q, &L->q_norm, (int64_t)B * H, hd, d->rms_norm_eps, 0);
        be->rope(be, s->q, B, H, hd, d->rotary_dim, d->rope_theta, n_ctx, NULL);
        kv_store_rows(d, be, s, l, B, c, n_ctx); // after the context; the next context append overwrites them
        const fd_kv_view kv = fd_kv_flat(c->kv[l], c->capacity);
        var->attention(d, be, s, l, &kv, n_ctx);
        be->matmul(be, s->y, s->att, &L->o_proj, B, 0);
        if (var->conv_out) var->conv_out(d, be, s, l, 0, s->y);
        be->add(be, s->x, s->y, (int64_t)B * D);
        be->rmsnorm(be, s->h, s->x, &L->post_norm, B, D, d->rms_norm_eps, 0);
        if (var->conv_in) var->conv_in(d, be, s, l, 1, s->h);
        swiglu_ffn(be, s->y, s->h, s->g, s->u, &L->gate_proj, &L->up_proj, &L->down_proj, B, d->intermediate_size);
        if (var->conv_out) var->conv_out(d, be, s, l, 1, s->y);
        be->add(be, s->x, s->y, (int64_t)B * D);
    }
    // the B-1 positions after the anchor, through the target's LM head
    const void *rows = (const char *)s->x + (size_t)D * be->act_bytes;
    be->rmsnorm(be, s->h, rows, &d->norm, B - 1, D, d->rms_norm_eps, 0);
    be->matmul(be, s->logits_dev, s->h, &target->lm_head, B - 1, 1);
}
