// topk_rows on the GPU vs the CPU reference (top_k_row; tests/test_topk.c checks it against a sorted reference):
// ids and value bits equal, on rows built to break a radix select: heavy ties across the K-th value, NaNs, both
// zeros, infinities, rows with fewer non-NaN values than K, and the 27B drafter's shape (V = 248320).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "cuda_rig.h"

CUDA_RIG(91)

static float pick(uint64_t *st, int kind) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t r = (uint32_t)(*st >> 33);
    switch (kind) {
    case 0: return (float)(r % 1000003) / 3.0f - 1e5f;                                    // distinct-ish
    case 1: return (float)(r % 5) - 2.0f;                                                 // 5 levels
    case 2: return r % 4 == 0 ? NAN : r % 7 == 0 ? -0.0f : r % 9 == 0 ? 0.0f : -(float)(r % 2);
    case 3: return r % 50 == 0 ? INFINITY : r % 3 == 0 ? -INFINITY : NAN;                 // mostly NaN
    default: return r % 1000 == 0 ? 7.0f : 6.5f;                                          // one level, few above
    }
}

TEST(cuda_topk_rows_vs_cpu) {
    const int shapes[][3] = {{4, 1, 1}, {4, 37, 5}, {4, 1000, 16}, {4, 4096, 256}, {7, 248320, 16},
                             {2, 248320, 256}, {3, 5000, 1}};
    uint64_t st = 3;
    int rows_checked = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int kind = 0; kind < 5; kind++) {
            const int R = shapes[si][0], V = shapes[si][1], K = shapes[si][2];
            const size_t n = (size_t)R * V;
            float *x = malloc(n * sizeof *x);
            for (size_t i = 0; i < n; i++) x[i] = pick(&st, (kind + (int)(i / V)) % 5); // each row its own kind
            int32_t *ci = malloc(sizeof(int32_t) * R * K), *gi = malloc(sizeof(int32_t) * R * K);
            float *cv = malloc(sizeof(float) * R * K), *gv = malloc(sizeof(float) * R * K);
            for (int i = 0; i < R * K; i++) gi[i] = -7, gv[i] = NAN;
            cpu()->topk_rows(cpu(), ci, cv, x, R, V, K);
            void *d = cuda_rig_up(gpu(), x, n * sizeof *x);
            gpu()->topk_rows(gpu(), gi, gv, d, R, V, K);
            gpu()->free(gpu(), d);
            int bad = -1;
            for (int i = 0; i < R * K && bad < 0; i++)
                if (gi[i] != ci[i] || memcmp(&gv[i], &cv[i], sizeof(float))) bad = i;
            EXPECT(bad < 0, "rows %d V %d K %d kind %d: pair %d is (%d, %g) on the GPU, (%d, %g) on the CPU", R, V, K,
                   kind, bad, bad < 0 ? 0 : gi[bad], bad < 0 ? 0.0 : gv[bad], bad < 0 ? 0 : ci[bad],
                   bad < 0 ? 0.0 : cv[bad]);
            rows_checked += R;
            free(x), free(ci), free(gi), free(cv), free(gv);
        }
    printf("    %d rows (7 shapes x 5 value mixes): GPU topk_rows pairs identical to the CPU's\n", rows_checked);
}
