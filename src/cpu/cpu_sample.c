// CPU sample_rows: the host sampler's own steps (base/sample_math.c), so the ids are bitwise those of
// sampler_sample for the same uniforms.
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

void cpu_install_sample(fd_backend *be) {
    be->sample_rows = cpu_sample_rows;
    be->logsumexp_rows = cpu_logsumexp_rows;
}
