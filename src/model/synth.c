// Synthetic weights (see synth.h). Initialisation by role, read off the tensor name: zero-centred norms get 0
// (so 1 + w = 1), the GDN gated norm and standard (drafter) norms 1, A_log log(U(1,16)), dt_bias 1, conv taps
// U(±0.5), embeddings U(±1), every other matrix U(±sqrt(3/cols)) (unit variance through the product).
#include "model/synth.h"

#include <math.h>
#include <string.h>

#include "base/threads.h"

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

typedef struct {
    uint16_t *out;
    uint64_t key;
    float lo, hi;
    int log_a; // A_log: log of U(1, 16)
} fill_ctx;

static void fill_range(void *p, int64_t b, int64_t e) {
    const fill_ctx *c = p;
    for (int64_t i = b; i < e; i++) {
        const double u = (double)(mix(c->key + (uint64_t)i * 0x9e3779b97f4a7c15ull) >> 11) * (1.0 / 9007199254740992.0);
        float v = c->lo + (c->hi - c->lo) * (float)u;
        if (c->log_a) v = logf(v);
        c->out[i] = fd_f32_to_bf16(v);
    }
}

void synth_weight(fd_weight *w, const char *name, int64_t rows, int64_t cols, uint64_t seed) {
    const int64_t n = rows * cols;
    uint64_t key = mix(seed);
    for (const char *s = name; *s; s++) key = mix(key ^ (uint64_t)(unsigned char)*s);
    fill_ctx c = {fd_malloc((size_t)n * 2), key, 0, 0, 0};
    const int is_vec = cols == 1;
    if (ends_with(name, "A_log")) {
        c.lo = 1, c.hi = 16, c.log_a = 1;
    } else if (ends_with(name, "dt_bias") || ends_with(name, "linear_attn.norm.weight")) {
        c.lo = c.hi = 1;
    } else if (is_vec && ends_with(name, "norm.weight")) {
        // target norms are zero-centred (1 + w); drafter norms (no "model." prefix) are plain w
        c.lo = c.hi = strncmp(name, "model.", 6) ? 1.0f : 0.0f;
    } else if (strstr(name, "conv1d")) {
        c.lo = -0.5f, c.hi = 0.5f;
    } else if (strstr(name, "embed_tokens")) {
        c.lo = -1, c.hi = 1;
    } else {
        const float a = sqrtf(3.0f / (float)cols);
        c.lo = -a, c.hi = a;
    }
    fd_parallel_for(n, 1 << 16, fill_range, &c);
    memset(w, 0, sizeof *w);
    w->name = name;
    w->dtype = FD_BF16;
    w->data = c.out;
    w->rows = rows;
    w->cols = cols;
}
