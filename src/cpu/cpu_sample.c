// CPU sample_rows: the host sampler's own steps (base/sample_math.c), so the ids are bitwise those of
// sampler_sample for the same uniforms.
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu.h"
#include "base/sample_math.h"

static void cpu_sample_rows(fd_backend *be, int32_t *out_host, const float *logits, int rows, int V,
                            const fd_sample_params *params, const double *uniforms) {
    (void)be;
    FD_CHECK(rows >= 0 && V >= 1, "sample_rows: %d rows of %d", rows, V);
    float *scratch = fd_malloc(sizeof(float) * (size_t)V);
    for (int r = 0; r < rows; r++) {
        const int greedy = !(params[r].temperature > 0);
        FD_CHECK(greedy || uniforms, "sample_rows: row %d samples but no uniforms were given", r);
        out_host[r] = sample_row(&params[r], logits + (size_t)r * V, V, greedy ? 0 : uniforms[r], scratch);
    }
    free(scratch);
}

static void cpu_logsumexp_rows(fd_backend *be, float *out_host, const float *logits, int rows, int V) {
    (void)be;
    FD_CHECK(V >= 1, "logsumexp_rows over %d logits", V);
    for (int r = 0; r < rows; r++) out_host[r] = (float)sample_logsumexp(logits + (int64_t)r * V, V);
}

// Exactly the float steps and double sums of sample_probs / sample_draw_u (backend.h), one thread per row in index
// order: a group chaining the ranks' scans reproduces them bitwise.
static void cpu_softmax_scan_rows(fd_backend *be, double *acc_host, int32_t *pick_host, const float *logits, int rows,
                                  int V, const float *mx, const float *temp, const double *div,
                                  const double *target) {
    (void)be;
    FD_CHECK(rows >= 0 && V >= 1, "softmax_scan_rows: %d rows of %d", rows, V);
    for (int r = 0; r < rows; r++) {
        if (!(temp[r] > 0)) continue;
        const float *x = logits + (size_t)r * V;
        double acc = acc_host[r];
        int32_t pick = -1, last = -1;
        for (int i = 0; i < V; i++) {
            float q = expf((x[i] - mx[r]) / temp[r]);
            if (div[r] > 0) q = (float)(q / div[r]);
            acc += q;
            if (!(q > 0)) continue;
            last = i;
            if (target && target[r] < acc) {
                pick = i;
                break;
            }
        }
        acc_host[r] = acc;
        if (pick_host) pick_host[r] = pick >= 0 ? pick : -2 - last;
    }
}

void cpu_install_sample(fd_backend *be) {
    be->softmax_scan_rows = cpu_softmax_scan_rows;
    be->sample_rows = cpu_sample_rows;
    be->logsumexp_rows = cpu_logsumexp_rows;
}
