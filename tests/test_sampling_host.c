// Host sampling (engine/sampling_host.h): logit_bias, penalties, min_p and the raw logprobs, on a small vocabulary.
#include <math.h>
#include <string.h>

#include "engine/sampling_host.h"
#include "test.h"

TEST(host_sampling_controls) {
    enum { V = 8 };
    const float base[V] = {1, 3, 2, 0.5f, -1, 2.9f, 0, -2};
    float row[V], scratch[2 * V];
    fd_sampler g;
    sampler_init(&g, 0, 0, 1, 1);
    fd_host_state st;
    const int32_t prompt[] = {5};
    host_state_init(&st, V, prompt, 1);
    fd_host_params none = {.repetition = 1};
    fd_token_logprobs lp;
    memcpy(row, base, sizeof row);
    EXPECT(host_pick(&g, &none, &st, row, V, scratch, 3, &lp) == 1 && lp.id == 1);
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(base[i]);
    EXPECT(fabs(lp.logprob - (3 - log(z))) < 1e-5 && lp.n_top == 3 && lp.top_ids[0] == 1 && lp.top_ids[1] == 5 &&
           lp.top_ids[2] == 2, "%g %d %d %d", lp.logprob, lp.top_ids[0], lp.top_ids[1], lp.top_ids[2]);
    // presence penalty: 1 was generated, so 5 (2.9) wins now; its reported logprob is still the raw one
    fd_host_params pres = {.presence = 0.5f, .repetition = 1};
    memcpy(row, base, sizeof row);
    EXPECT(host_pick(&g, &pres, &st, row, V, scratch, 1, &lp) == 5 && fabs(lp.logprob - (2.9 - log(z))) < 1e-5);
    // repetition penalty 2 over prompt + generated (1, 5): 3/2 and 2.9/2 fall below 2
    fd_host_params rep = {.repetition = 2};
    memcpy(row, base, sizeof row);
    EXPECT(host_pick(&g, &rep, &st, row, V, scratch, 0, NULL) == 2);
    // logit_bias
    const int32_t ids[] = {7};
    const float bias[] = {100};
    fd_host_params lb = {.repetition = 1, .n_bias = 1, .bias_ids = ids, .bias = bias};
    memcpy(row, base, sizeof row);
    EXPECT(host_pick(&g, &lb, &st, row, V, scratch, 0, NULL) == 7);
    // min_p 0.9 at temperature 1: only ids within 90 % of the top probability survive
    fd_sampler t1;
    sampler_init(&t1, 1, 0, 1, 42);
    fd_host_state fresh;
    host_state_init(&fresh, V, NULL, 0);
    fd_host_params mp = {.repetition = 1, .min_p = 0.9f};
    for (int k = 0; k < 50; k++) {
        memcpy(row, base, sizeof row);
        int32_t id = host_pick(&t1, &mp, &fresh, row, V, scratch, 0, NULL);
        EXPECT(id == 1 || id == 5, "min_p drew %d", id);
        memset(fresh.counts, 0, sizeof(int32_t) * V);
    }
    host_state_free(&fresh);
    host_state_free(&st);
}
