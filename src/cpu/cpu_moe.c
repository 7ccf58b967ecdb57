// CPU mixture-of-experts: fp32 softmax router, top-k (ties to the lower index, as torch.topk on CPU),
// optional renormalisation, SwiGLU experts over the tokens routed to each, plus the sigmoid-gated shared expert.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

// y[n, d] = down(silu(gate x) * up x) for n rows of x
static void swiglu_rows(float *y, const float *x, const fd_weight *gate, const fd_weight *up, const fd_weight *down,
                        int n, int inter) {
    float *g = fd_malloc((size_t)n * inter * 4), *u = fd_malloc((size_t)n * inter * 4);
    cpu_matmul_f32(g, x, gate, n);
    cpu_matmul_f32(u, x, up, n);
    for (int64_t i = 0; i < (int64_t)n * inter; i++) g[i] = cpu_silu(g[i]) * u[i];
    cpu_matmul_f32(y, g, down, n);
    free(g);
    free(u);
}

static void cpu_moe(fd_backend *be, void *out, const void *x, const fd_moe_weights *mw, int n, int d) {
    (void)be;
    const float *X = x;
    float *O = out;
    const int E = mw->n_experts, K = mw->top_k;
    float *logits = fd_malloc((size_t)n * E * 4);
    cpu_matmul_f32(logits, X, mw->router, n);
    int *sel = fd_malloc((size_t)n * K * sizeof(int));
    float *wsel = fd_malloc((size_t)n * K * 4);
    for (int t = 0; t < n; t++) {
        float *l = logits + (int64_t)t * E, mx = -INFINITY;
        for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        double s = 0;
        for (int e = 0; e < E; e++) s += l[e] = expf(l[e] - mx);
        for (int e = 0; e < E; e++) l[e] = (float)(l[e] / s);
        float tot = 0;
        for (int k = 0; k < K; k++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= sel[t * K + j] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            sel[t * K + k] = best;
            wsel[t * K + k] = l[best];
            tot += l[best];
        }
        if (mw->renorm)
            for (int k = 0; k < K; k++) wsel[t * K + k] /= tot;
    }
    memset(O, 0, (size_t)n * d * 4);
    // Group the tokens of each expert so its weights are read once per call.
    int *rows = fd_malloc((size_t)n * sizeof(int));
    float *xs = fd_malloc((size_t)n * d * 4), *ys = fd_malloc((size_t)n * d * 4), *ws = fd_malloc((size_t)n * 4);
    for (int e = 0; e < E; e++) {
        int m = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < K; k++)
                if (sel[t * K + k] == e) {
                    rows[m] = t;
                    ws[m] = wsel[t * K + k];
                    memcpy(xs + (int64_t)m * d, X + (int64_t)t * d, (size_t)d * 4);
                    m++;
                }
        if (!m) continue;
        swiglu_rows(ys, xs, &mw->gate[e], &mw->up[e], &mw->down[e], m, mw->inter);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < d; j++) O[(int64_t)rows[i] * d + j] += ws[i] * ys[(int64_t)i * d + j];
    }
    if (mw->sh_gate) {
        float *sg = fd_malloc((size_t)n * 4);
        swiglu_rows(ys, X, mw->sh_gate, mw->sh_up, mw->sh_down, n, mw->sh_inter);
        cpu_matmul_f32(sg, X, mw->sh_gate_w, n);
        for (int t = 0; t < n; t++) {
            const float s = cpu_sigmoid(sg[t]);
            for (int j = 0; j < d; j++) O[(int64_t)t * d + j] += s * ys[(int64_t)t * d + j];
        }
        free(sg);
    }
    free(logits);
    free(sel);
    free(wsel);
    free(rows);
    free(xs);
    free(ys);
    free(ws);
}

void cpu_install_moe(fd_backend *be) { be->moe = cpu_moe; }
