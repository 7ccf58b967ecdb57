// CPU gated-attention ops: query/gate split, partial NeoX RoPE, the KV cache (fp32, [cap, Hkv, hd] for K then
// the same for V) and causal softmax attention with GQA.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

static void cpu_split_q_gate(fd_backend *be, void *q, void *gate, const void *qg, int n, int H, int hd) {
    (void)be;
    const float *src = qg;
    float *Q = q, *G = gate;
    for (int64_t t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            const float *s = src + (t * H + h) * 2 * hd;
            memcpy(Q + (t * H + h) * hd, s, (size_t)hd * 4);
            memcpy(G + (t * H + h) * hd, s + hd, (size_t)hd * 4);
        }
}

// Angles follow HF: inv_freq = 1 / theta^(2i/rot) and angle = pos * inv_freq, both in fp32.
static void cpu_rope(fd_backend *be, void *x, int n, int H, int hd, int rot_dim, float theta, int64_t pos0,
                     const int64_t *pos_dev) {
    (void)be;
    if (pos_dev) pos0 = *pos_dev; // backend memory is host memory here
    float *X = x;
    const int half = rot_dim / 2;
    for (int64_t t = 0; t < n; t++) {
        const float pos = (float)(pos0 + t);
        for (int i = 0; i < half; i++) {
            const float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)rot_dim);
            const float ang = pos * inv_freq, cs = cosf(ang), sn = sinf(ang);
            for (int h = 0; h < H; h++) {
                float *v = X + (t * H + h) * hd;
                const float a = v[i], b = v[i + half];
                v[i] = a * cs - b * sn;
                v[i + half] = b * cs + a * sn;
            }
        }
    }
}

// The reference of the fused op is the sequence of ops it replaces, in their order: bitwise the unfused path.
static void cpu_qk_norm_rope(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                             const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta,
                             float eps, int64_t pos0, const int64_t *pos_dev) {
    cpu_split_q_gate(be, q, gate, qg, n, H, hd);
    cpu_rmsnorm_f32(q, q, q_norm, (int64_t)n * H, hd, eps, 1);
    cpu_rmsnorm_f32(k, k, k_norm, (int64_t)n * Hkv, hd, eps, 1);
    cpu_rope(be, q, n, H, hd, rot_dim, theta, pos0, pos_dev);
    cpu_rope(be, k, n, Hkv, hd, rot_dim, theta, pos0, pos_dev);
}

// A tree's rows one at a time at their own positions: bitwise the per-row calls the forward made before this op.
static void cpu_qk_norm_rope_tree(fd_backend *be, void *q, void *gate, void *k, const void *qg,
                                  const fd_weight *q_norm, const fd_weight *k_norm, int n, int H, int Hkv, int hd,
                                  int rot_dim, float theta, float eps, int64_t pos0, const int32_t *depth_dev) {
    FD_CHECK(depth_dev, "qk_norm_rope_tree: depths required");
    for (int t = 0; t < n; t++)
        cpu_qk_norm_rope(be, (float *)q + (int64_t)t * H * hd, (float *)gate + (int64_t)t * H * hd,
                         (float *)k + (int64_t)t * Hkv * hd, (const float *)qg + (int64_t)t * 2 * H * hd, q_norm,
                         k_norm, 1, H, Hkv, hd, rot_dim, theta, eps, pos0 + depth_dev[t], NULL);
}

// KV cache layouts (C = view->slots token slots), chosen by route kv:
//   f32:  K [C, Hkv, hd] f32, V [C, Hkv, hd] f32
//   e4m3: K [C, Hkv, hd] e4m3, V [C, Hkv, hd] e4m3, Kscale [C, Hkv] f32, Vscale [C, Hkv] f32. Each (token, head)
//         row is scaled by amax/448 before rounding, so every row uses the full e4m3 range.
// Position p lives in slot kv_slot(view, p) (backend.h: a page table, or contiguous).
static size_t cpu_kv_bytes_per_token(fd_backend *be, int Hkv, int hd) {
    cpu_impl *c = cpu_of(be);
    c->routes[0].locked = 1; // a cache is being sized: its layout is fixed from here on
    return c->kv == CPU_KV_E4M3 ? (size_t)2 * Hkv * hd + (size_t)2 * Hkv * sizeof(float)
                                : (size_t)2 * Hkv * hd * sizeof(float);
}

static int64_t kv_slot(const fd_kv_view *kv, int64_t p) {
    if (!kv->pages) return p;
    const int64_t P = kv->page_tokens;
    return (int64_t)kv->pages[p / P] * P + p % P;
}

// Positions [p, p + len) that share one page (so their slots are consecutive), len <= n.
static int64_t kv_run(const fd_kv_view *kv, int64_t p, int64_t n) {
    if (!kv->pages) return n;
    const int64_t left = kv->page_tokens - p % kv->page_tokens;
    return left < n ? left : n;
}

typedef struct {
    uint8_t *k, *v;
    float *ks, *vs;
} kv8;

static kv8 kv8_planes(const fd_kv_view *kv, int Hkv, int hd) {
    uint8_t *base = (uint8_t *)kv->base;
    const int64_t cap = kv->slots, plane = cap * Hkv * hd;
    kv8 p = {base, base + plane, (float *)(base + 2 * plane), (float *)(base + 2 * plane) + cap * Hkv};
    return p;
}

static void quantize_row(uint8_t *dst, float *scale, const float *x, int hd) {
    float amax = 0;
    for (int i = 0; i < hd; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float s = amax > 0 ? amax / 448.0f : 1.0f;
    for (int i = 0; i < hd; i++) dst[i] = fd_f32_to_e4m3(x[i] / s);
    *scale = s;
}

static void cpu_kv_store(fd_backend *be, const fd_kv_view *kv, const void *k, const void *v, int64_t pos0,
                         const int64_t *pos_dev, int n, int Hkv, int hd) {
    if (pos_dev) pos0 = *pos_dev;
    FD_CHECK(pos0 >= 0 && pos0 + n <= kv->capacity, "kv_store [%lld, %lld) beyond capacity %lld", (long long)pos0,
             (long long)(pos0 + n), (long long)kv->capacity);
    const size_t row = (size_t)Hkv * hd;
    cpu_impl *c = cpu_of(be);
    c->routes[0].calls[c->kv]++;
    c->routes[0].tokens[c->kv] += n;
    for (int64_t t = 0; t < n; t++) {
        const int64_t slot = kv_slot(kv, pos0 + t);
        if (c->kv == CPU_KV_E4M3) {
            kv8 p = kv8_planes(kv, Hkv, hd);
            for (int h = 0; h < Hkv; h++) {
                const int64_t at = slot * Hkv + h, r = t * Hkv + h; // (slot, head) row; (token, head) source row
                quantize_row(p.k + at * hd, p.ks + at, (const float *)k + r * hd, hd);
                quantize_row(p.v + at * hd, p.vs + at, (const float *)v + r * hd, hd);
            }
        } else {
            float *K = kv->base, *V = K + kv->slots * row;
            memcpy(K + slot * row, (const float *)k + t * row, row * 4);
            memcpy(V + slot * row, (const float *)v + t * row, row * 4);
        }
    }
}

// Runs of positions that are consecutive slots on both sides move as one memmove per plane.
static void cpu_kv_copy(fd_backend *be, const fd_kv_view *dst, int64_t dst_pos, const fd_kv_view *src, int64_t src_pos,
                        int64_t n, int Hkv, int hd) {
    FD_CHECK(dst_pos >= 0 && src_pos >= 0 && dst_pos + n <= dst->capacity && src_pos + n <= src->capacity,
             "kv_copy: [%lld, +%lld) -> [%lld, +%lld) beyond capacity", (long long)src_pos, (long long)n,
             (long long)dst_pos, (long long)n);
    const int e4 = cpu_of(be)->kv == CPU_KV_E4M3;
    const int64_t row = (int64_t)Hkv * hd;
    for (int64_t i = 0; i < n;) {
        int64_t len = kv_run(dst, dst_pos + i, n - i);
        len = kv_run(src, src_pos + i, len);
        const int64_t ds = kv_slot(dst, dst_pos + i), ss = kv_slot(src, src_pos + i);
        if (e4) {
            kv8 d = kv8_planes(dst, Hkv, hd), s = kv8_planes(src, Hkv, hd);
            memmove(d.k + ds * row, s.k + ss * row, (size_t)(len * row));
            memmove(d.v + ds * row, s.v + ss * row, (size_t)(len * row));
            memmove(d.ks + ds * Hkv, s.ks + ss * Hkv, (size_t)(len * Hkv) * sizeof(float));
            memmove(d.vs + ds * Hkv, s.vs + ss * Hkv, (size_t)(len * Hkv) * sizeof(float));
        } else {
            float *D = dst->base;
            const float *S = src->base;
            memmove(D + ds * row, S + ss * row, (size_t)(len * row) * sizeof(float));
            memmove(D + (dst->slots + ds) * row, S + (src->slots + ss) * row, (size_t)(len * row) * sizeof(float));
        }
        i += len;
    }
}

typedef struct {
    float *out;
    const float *q, *K, *V; // f32 layout
    kv8 p8;                 // e4m3 layout (when K is NULL)
    float lut[256];         // e4m3 code -> value
    const fd_kv_view *kv;
    int64_t pos0;
    int n, H, Hkv, hd;
    float scale;
    int causal;
    int window; // > 0: only keys with |query position - key| < window (DFlash2's sliding layers)
    const int32_t *parent; // a verify tree (backend.h: attention_tree), else NULL
} attn_ctx;

// Key or value row (position j, kv head h) as fp32 into tmp (e4m3) or in place (f32).
static const float *kv_row(const attn_ctx *c, int is_v, int64_t j, int h, float *tmp) {
    const int64_t at = kv_slot(c->kv, j) * c->Hkv + h;
    if (c->K) return (is_v ? c->V : c->K) + at * c->hd;
    const uint8_t *b = (is_v ? c->p8.v : c->p8.k) + at * c->hd;
    const float s = (is_v ? c->p8.vs : c->p8.ks)[at];
    for (int x = 0; x < c->hd; x++) tmp[x] = c->lut[b[x]] * s;
    return tmp;
}

// Where the rows of c read the cache's K and V: the e4m3 planes and the decode table, or the f32 K and V halves.
static void attn_ctx_cache(attn_ctx *c, fd_backend *be) {
    if (cpu_of(be)->kv == CPU_KV_E4M3) {
        c->p8 = kv8_planes(c->kv, c->Hkv, c->hd);
        for (int b = 0; b < 256; b++) c->lut[b] = fd_e4m3_to_f32((uint8_t)b);
    } else {
        c->K = c->kv->base;
        c->V = c->K + c->kv->slots * c->Hkv * c->hd;
    }
}

static void attn_rows(void *p, int64_t b, int64_t e) {
    attn_ctx *c = p;
    const int hd = c->hd, group = c->H / c->Hkv;
    const int64_t span = c->pos0 + c->n;
    float *sc = fd_malloc((size_t)span * 4), *tmp = fd_malloc((size_t)hd * 4);
    for (int64_t idx = b; idx < e; idx++) {
        const int64_t t = idx / c->H, qp = c->pos0 + t;
        const int h = (int)(idx % c->H), kvh = h / group;
        // keys first..last: causal 0..qp, else 0..span-1; a window keeps those within window - 1 of qp
        int64_t first = 0, last = c->causal ? qp : span - 1;
        if (c->window > 0) {
            if (qp - c->window + 1 > first) first = qp - c->window + 1;
            if (qp + c->window - 1 < last) last = qp + c->window - 1;
        }
        const float *q = c->q + idx * hd;
        float mx = -INFINITY;
        for (int64_t j = first; j <= last; j++) {
            const float *kr = kv_row(c, 0, j, kvh, tmp);
            float d = 0;
            for (int x = 0; x < hd; x++) d += q[x] * kr[x];
            sc[j] = d * c->scale;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int64_t j = first; j <= last; j++) sum += sc[j] = expf(sc[j] - mx);
        const float inv = (float)(1.0 / sum);
        float *o = c->out + (t * c->H + h) * hd;
        for (int x = 0; x < hd; x++) o[x] = 0;
        for (int64_t j = first; j <= last; j++) {
            const float *vr = kv_row(c, 1, j, kvh, tmp), w = sc[j] * inv;
            for (int x = 0; x < hd; x++) o[x] += w * vr[x];
        }
    }
    free(sc);
    free(tmp);
}

void cpu_attention_keys(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n, int H,
                        int Hkv, int hd, float scale, int causal, int window) {
    FD_CHECK(pos0 >= 0 && pos0 + n <= kv->capacity, "attention: keys [0, %lld) beyond capacity %lld",
             (long long)(pos0 + n), (long long)kv->capacity);
    attn_ctx *c = fd_calloc(1, sizeof *c);
    *c = (attn_ctx){.out = out,
                    .q = q,
                    .kv = kv,
                    .pos0 = pos0,
                    .n = n,
                    .H = H,
                    .Hkv = Hkv,
                    .hd = hd,
                    .scale = scale,
                    .causal = causal,
                    .window = window};
    attn_ctx_cache(c, be);
    fd_parallel_for((int64_t)n * H, 1, attn_rows, c);
    free(c);
}

// The tree mask: query t sees the context [0, pos0) and its ancestors and itself at pos0 + node. The keys are
// visited in position order (ancestors have lower indices), with the same arithmetic as attn_rows, so a node's
// result is bitwise the causal chain's over its root-to-node path.
static void attn_rows_tree(void *p, int64_t b, int64_t e) {
    attn_ctx *c = p;
    const int hd = c->hd, group = c->H / c->Hkv;
    const int64_t span = c->pos0 + c->n;
    float *sc = fd_malloc((size_t)span * 4), *tmp = fd_malloc((size_t)hd * 4);
    int64_t *keys = fd_malloc((size_t)span * sizeof(int64_t));
    for (int64_t idx = b; idx < e; idx++) {
        const int64_t t = idx / c->H;
        const int h = (int)(idx % c->H), kvh = h / group;
        int64_t nk = c->pos0, path = 0;
        for (int64_t a = t; a >= 0; a = c->parent[a]) path++; // the path's length, then its nodes root first
        for (int64_t a = t, i = nk + path - 1; a >= 0; a = c->parent[a], i--) keys[i] = c->pos0 + a;
        for (int64_t j = 0; j < nk; j++) keys[j] = j;
        nk += path;
        const float *q = c->q + idx * hd;
        float mx = -INFINITY;
        for (int64_t i = 0; i < nk; i++) {
            const float *kr = kv_row(c, 0, keys[i], kvh, tmp);
            float d = 0;
            for (int x = 0; x < hd; x++) d += q[x] * kr[x];
            sc[i] = d * c->scale;
            if (sc[i] > mx) mx = sc[i];
        }
        double sum = 0;
        for (int64_t i = 0; i < nk; i++) sum += sc[i] = expf(sc[i] - mx);
        const float inv = (float)(1.0 / sum);
        float *o = c->out + (t * c->H + h) * hd;
        for (int x = 0; x < hd; x++) o[x] = 0;
        for (int64_t i = 0; i < nk; i++) {
            const float *vr = kv_row(c, 1, keys[i], kvh, tmp), w = sc[i] * inv;
            for (int x = 0; x < hd; x++) o[x] += w * vr[x];
        }
    }
    free(sc);
    free(tmp);
    free(keys);
}

static void cpu_attention_tree(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n,
                               int H, int Hkv, int hd, float scale, const int32_t *parent_dev) {
    FD_CHECK(pos0 >= 0 && pos0 + n <= kv->capacity && parent_dev, "attention_tree: keys [0, %lld) beyond capacity %lld",
             (long long)(pos0 + n), (long long)kv->capacity);
    for (int t = 0; t < n; t++)
        FD_CHECK(parent_dev[t] < t && (t > 0 || parent_dev[t] < 0) && parent_dev[t] >= -1,
                 "attention_tree: node %d has parent %d", t, parent_dev[t]);
    attn_ctx *c = fd_calloc(1, sizeof *c);
    *c = (attn_ctx){.out = out, .q = q, .kv = kv, .pos0 = pos0, .n = n, .H = H, .Hkv = Hkv, .hd = hd,
                    .scale = scale, .causal = 1, .parent = parent_dev};
    attn_ctx_cache(c, be);
    fd_parallel_for((int64_t)n * H, 1, attn_rows_tree, c);
    free(c);
}

// pos_dev is host memory on this backend: the position is read when the op runs, which on the CPU is now.
static void cpu_attention(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0,
                          const int64_t *pos_dev, int n, int H, int Hkv, int hd, float scale, int causal) {
    cpu_attention_keys(be, out, q, kv, pos_dev ? *pos_dev : pos0, n, H, Hkv, hd, scale, causal, 0);
}

void cpu_install_attn(fd_backend *be) {
    be->split_q_gate = cpu_split_q_gate;
    be->rope = cpu_rope;
    be->qk_norm_rope = cpu_qk_norm_rope;
    be->kv_bytes_per_token = cpu_kv_bytes_per_token;
    be->kv_store = cpu_kv_store;
    be->kv_copy = cpu_kv_copy;
    be->attention = cpu_attention;
    be->attention_tree = cpu_attention_tree;
    be->qk_norm_rope_tree = cpu_qk_norm_rope_tree;
}
