// Sampling under --tp without a gather on the GPU (engine/tp_sample.h): softmax_scan_rows against the CPU's (the
// chained sums within rounding, the crossings equal but where a target lies within rounding of a cumulative sum),
// and tp_sample_rows over 2 and 4 slices of rows on one GPU against sample_row on the host, at the 27B's vocabulary.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "base/sample_math.h"
#include "cuda_rig.h"
#include "engine/tp_sample.h"

CUDA_RIG(57)

TEST(cuda_softmax_scan_rows_vs_cpu) {
    const int R = 6, V = 248320;
    uint64_t seed = 5;
    float *x = malloc(sizeof(float) * (size_t)R * V), mx[6], temp[6];
    test_fill_uniform(x, (size_t)R * V, -6.0f, 6.0f, &seed);
    double div[6], target[6], ca[6], ga[6];
    int32_t cp[6], gp[6];
    for (int r = 0; r < R; r++) {
        x[(size_t)r * V + 1000 * r + 7] += 15.0f;
        mx[r] = 21.0f, temp[r] = 0.3f + 0.25f * r, div[r] = r % 2 ? 0 : 3e4, ca[r] = ga[r] = r * 0.25;
    }
    void *d = cuda_rig_up(gpu(), x, sizeof(float) * (size_t)R * V);
    cpu()->softmax_scan_rows(cpu(), ca, cp, x, R, V, mx, temp, div, NULL);
    gpu()->softmax_scan_rows(gpu(), ga, gp, d, R, V, mx, temp, div, NULL);
    for (int r = 0; r < R; r++) {
        // the GPU's expf may differ from the host's by an ulp per term: the sums agree to ~1e-8, not bitwise
        EXPECT(fabs(ga[r] - ca[r]) <= 1e-6 * fabs(ca[r]), "row %d: sum %.17g on the GPU, %.17g on the CPU", r, ga[r],
               ca[r]);
        EXPECT(gp[r] == cp[r], "row %d: last positive %d vs %d", r, gp[r], cp[r]);
        target[r] = (ca[r] - r * 0.25) * (0.1 + 0.15 * r), ca[r] = ga[r] = 0; // inside the row's own mass
    }
    cpu()->softmax_scan_rows(cpu(), ca, cp, x, R, V, mx, temp, div, target);
    gpu()->softmax_scan_rows(gpu(), ga, gp, d, R, V, mx, temp, div, target);
    for (int r = 0; r < R; r++) EXPECT(gp[r] == cp[r] && gp[r] >= 0, "row %d: crossing %d vs %d", r, gp[r], cp[r]);
    gpu()->free(gpu(), d);
    free(x);
}

TEST(cuda_tp_sample_rows_vs_sample_row) {
    const int R = 16, V = 248320;
    uint64_t seed = 9;
    float *x = malloc(sizeof(float) * (size_t)R * V), *scratch = malloc(sizeof(float) * V);
    test_fill_uniform(x, (size_t)R * V, -4.0f, 4.0f, &seed);
    fd_sample_params p[16];
    double u[16];
    for (int r = 0; r < R; r++) {
        // a nucleus of 20 tokens holding > 97 % of the mass even at T = 1.5 (else top-p rows are rightly gathered)
        for (int j = 0; j < 20; j++) x[(size_t)r * V + 12345 * j + r] += 20.0f;
        p[r] = (fd_sample_params){r % 5 ? 0.3f + 0.3f * (r % 5) : 0.0f, r % 4 == 1 ? 40 : 0, r % 4 == 2 ? 0.9f : 1};
        u[r] = (r + 0.37) / R;
    }
    int differ = 0;
    const int64_t before = tp_sample_gathered_bytes();
    for (int tp = 2; tp <= 4; tp += 2) {
        tp_slice sl[4];
        for (int q = 0; q < tp; q++) {
            const int b = q * V / tp, e = (q + 1) * V / tp;
            float *h = malloc(sizeof(float) * (size_t)R * (e - b));
            for (int r = 0; r < R; r++) memcpy(h + (size_t)r * (e - b), x + (size_t)r * V + b, sizeof(float) * (e - b));
            sl[q] = (tp_slice){gpu(), cuda_rig_up(gpu(), h, sizeof(float) * (size_t)R * (e - b)), b, e};
            free(h);
        }
        int32_t got[16];
        tp_sample_rows(sl, tp, R, V, p, u, got);
        for (int r = 0; r < R; r++) differ += got[r] != sample_row(&p[r], x + (size_t)r * V, V, u[r], scratch);
        for (int q = 0; q < tp; q++) gpu()->free(gpu(), (void *)sl[q].logits_dev);
    }
    EXPECT(differ == 0, "%d of %d rows differ from sample_row", differ, 2 * R);
    EXPECT(tp_sample_gathered_bytes() == before, "rows were gathered");
    free(x);
    free(scratch);
}
