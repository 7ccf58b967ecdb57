// top_k_row (base/sample_math.h) and the CPU backend's topk_rows against a reference written another way: every
// non-NaN index sorted by (value desc, index asc) with qsort, the first K taken, the rest filled with (-inf, slot).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "base/sample_math.h"
#include "test.h"

static const float *g_row;
static int by_value_then_index(const void *pa, const void *pb) {
    const int a = *(const int *)pa, b = *(const int *)pb;
    if (g_row[a] > g_row[b]) return -1;
    if (g_row[a] < g_row[b]) return 1;
    return a < b ? -1 : a > b;
}

static void reference_top_k(const float *row, int V, int K, int32_t *ids, float *vals) {
    int *idx = malloc((size_t)V * sizeof *idx), n = 0;
    for (int v = 0; v < V; v++)
        if (row[v] == row[v]) idx[n++] = v;
    g_row = row;
    qsort(idx, (size_t)n, sizeof *idx, by_value_then_index);
    for (int k = 0; k < K; k++) {
        ids[k] = k < n ? idx[k] : k;
        vals[k] = k < n ? row[idx[k]] : -INFINITY;
    }
    free(idx);
}

// Rows with heavy ties (values from a few levels), NaNs, infinities and both zeros.
static void fill_row(float *row, int V, uint64_t *st, int kind) {
    for (int v = 0; v < V; v++) {
        *st = *st * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t r = (uint32_t)(*st >> 33);
        switch (kind) {
        case 0: row[v] = (float)(r % 100000) / 997.0f - 50.0f; break; // few exact ties
        case 1: row[v] = (float)(r % 7) - 3.0f; break;                 // 7 levels: ties everywhere
        case 2: row[v] = r % 5 == 0 ? NAN : r % 11 == 0 ? -0.0f : r % 13 == 0 ? 0.0f : (float)(r % 3); break;
        default: row[v] = r % 3 == 0 ? -INFINITY : r % 4 == 0 ? INFINITY : NAN; break; // few finite, some NaN
        }
    }
}

TEST(topk_row_matches_a_sorted_reference) {
    const int Vs[] = {1, 5, 300, 4099}, Ks[] = {1, 2, 16, 64, 256};
    uint64_t st = 7;
    fd_backend *be = fd_backend_cpu_create(1);
    int checked = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof Vs[0]; vi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (int kind = 0; kind < 4; kind++) {
                const int V = Vs[vi], K = Ks[ki];
                if (K > V) continue;
                float *rows = malloc(sizeof(float) * (size_t)V * 2);
                fill_row(rows, V, &st, kind);
                fill_row(rows + V, V, &st, (kind + 1) % 4);
                int32_t ids[2 * 256], want_ids[256], bids[2 * 256];
                float vals[2 * 256], want_vals[256], bvals[2 * 256];
                be->topk_rows(be, bids, bvals, rows, 2, V, K);
                for (int r = 0; r < 2; r++) {
                    top_k_row(rows + (size_t)r * V, V, K, ids + r * K, vals + r * K);
                    reference_top_k(rows + (size_t)r * V, V, K, want_ids, want_vals);
                    for (int k = 0; k < K; k++) {
                        const int same_val = memcmp(&vals[r * K + k], &want_vals[k], sizeof(float)) == 0;
                        EXPECT(ids[r * K + k] == want_ids[k] && same_val,
                               "V %d K %d kind %d row %d slot %d: %d (%g) vs the reference %d (%g)", V, K, kind, r, k,
                               ids[r * K + k], vals[r * K + k], want_ids[k], want_vals[k]);
                    }
                }
                EXPECT(!memcmp(bids, ids, sizeof(int32_t) * 2 * (size_t)K) &&
                           !memcmp(bvals, vals, sizeof(float) * 2 * (size_t)K),
                       "V %d K %d kind %d: the CPU backend's topk_rows differs from top_k_row", V, K, kind);
                checked++;
                free(rows);
            }
    printf("    %d row pairs: top_k_row and the CPU topk_rows equal the sorted reference (ids and value bits)\n",
           checked);
    be->destroy(be);
}
