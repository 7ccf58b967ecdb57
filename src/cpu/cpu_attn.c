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
static void cpu_rope(fd_backend *be, void *x, int n, int H, int hd, int rot_dim, float theta, int64_t pos0) {
    (void)be;
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

static size_t cpu_kv_bytes_per_token(fd_backend *be, int Hkv, int hd) {
    (void)be;
    return (size_t)2 * Hkv * hd * sizeof(float);
}

static void cpu_kv_store(fd_backend *be, void *cache, const void *k, const void *v, int64_t pos0, int n, int Hkv,
                         int hd, int64_t capacity) {
    (void)be;
    FD_CHECK(pos0 >= 0 && pos0 + n <= capacity, "kv_store [%lld, %lld) beyond capacity %lld", (long long)pos0,
             (long long)(pos0 + n), (long long)capacity);
    const size_t row = (size_t)Hkv * hd;
    float *K = cache, *V = K + capacity * row;
    memcpy(K + pos0 * row, k, (size_t)n * row * 4);
    memcpy(V + pos0 * row, v, (size_t)n * row * 4);
}

typedef struct {
    float *out;
    const float *q, *K, *V;
    int64_t pos0;
    int n, H, Hkv, hd;
    float scale;
    int causal;
} attn_ctx;

static void attn_rows(void *p, int64_t b, int64_t e) {
    attn_ctx *c = p;
    const int hd = c->hd, group = c->H / c->Hkv;
    const int64_t span = c->pos0 + c->n;
    float *sc = fd_malloc((size_t)span * 4);
    for (int64_t idx = b; idx < e; idx++) {
        const int64_t t = idx / c->H;
        const int h = (int)(idx % c->H), kvh = h / group;
        const int64_t last = c->causal ? c->pos0 + t : span - 1; // causal: keys 0..pos0+t
        const float *q = c->q + idx * hd;
        float mx = -INFINITY;
        for (int64_t j = 0; j <= last; j++) {
            const float *kr = c->K + (j * c->Hkv + kvh) * hd;
            float d = 0;
            for (int x = 0; x < hd; x++) d += q[x] * kr[x];
            sc[j] = d * c->scale;
            if (sc[j] > mx) mx = sc[j];
        }
        double sum = 0;
        for (int64_t j = 0; j <= last; j++) sum += sc[j] = expf(sc[j] - mx);
        const float inv = (float)(1.0 / sum);
        float *o = c->out + (t * c->H + h) * hd;
        for (int x = 0; x < hd; x++) o[x] = 0;
        for (int64_t j = 0; j <= last; j++) {
            const float *vr = c->V + (j * c->Hkv + kvh) * hd, w = sc[j] * inv;
            for (int x = 0; x < hd; x++) o[x] += w * vr[x];
        }
    }
    free(sc);
}

static void cpu_attention(fd_backend *be, void *out, const void *q, const void *cache, int64_t pos0, int n, int H,
                          int Hkv, int hd, int64_t capacity, float scale, int causal) {
    (void)be;
    const float *K = cache, *V = K + capacity * Hkv * hd;
    attn_ctx c = {out, q, K, V, pos0, n, H, Hkv, hd, scale, causal};
    fd_parallel_for((int64_t)n * H, 1, attn_rows, &c);
}

void cpu_install_attn(fd_backend *be) {
    be->split_q_gate = cpu_split_q_gate;
    be->rope = cpu_rope;
    be->kv_bytes_per_token = cpu_kv_bytes_per_token;
    be->kv_store = cpu_kv_store;
    be->attention = cpu_attention;
}
