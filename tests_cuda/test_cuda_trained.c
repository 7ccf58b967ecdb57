// The shipped trained pair (models/tiny-qwen35 + models/tiny-qwen35-dflash, tools/train_tiny.py) on the CUDA
// backend: on each of the 8 held-out prompts (tests/data/trained/val_prompts.json), greedy generation with the
// drafter gives exactly the ids of plain greedy generation on the GPU, with gemm_act=bf16x2 and with the default
// route. Prints the emitted tokens/round per prompt and over all prompts (the drafter's real acceptance).
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/spec_rig.h"
#include "../tests/test.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"
#include "engine/dflash.h"

#define N_NEW      64

CUDA_RIG(0) // the backend only

TEST(cuda_trained_dflash_greedy_identical) {
    json_t *prompts = held_out_prompts();
    ASSERT(prompts, "%s", fd_error_msg());
    const char *default_gemm = fd_cuda_route(gpu(), "gemm_act");
    char def[32];
    snprintf(def, sizeof def, "%s", default_gemm ? default_gemm : "bf16");
    const char *routes[2] = {"bf16x2", def};
    fd_model m;
    fd_drafter d;
    ASSERT(trained_pair_load(gpu(), NULL, &m, &d) == 0, "%s", fd_error_msg());
    const int max_n = held_out_max_len(prompts);
    fd_engine plain, tgt;
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = max_n + N_NEW + 16;
    o.max_batch = 64;
    ASSERT(engine_init(&plain, &m, gpu(), &o) == 0 && engine_init(&tgt, &m, gpu(), &o) == 0, "%s", fd_error_msg());
    fd_dflash s;
    ASSERT(dflash_init(&s, &tgt, &d, 0) == 0, "%s", fd_error_msg());
    for (int rt = 0; rt < 2; rt++) {
        ASSERT(fd_cuda_set_route(gpu(), "gemm_act", routes[rt]) == 0, "%s", fd_error_msg());
        int64_t rounds = 0, emitted = 0;
        int diffs = 0;
        for (size_t p = 0; p < json_array_size(prompts); p++) {
            int n;
            int32_t *ids = held_out_ids(prompts, p, &n), out[N_NEW];
            const int same = held_out_spec_vs_plain(&plain, &s, ids, n, N_NEW, out, &rounds, &emitted);
            ASSERT(same >= 0, "%s", fd_error_msg());
            const double tau = s.st.rounds ? (double)s.st.emitted / (double)s.st.rounds : 0;
            char verdict[64];
            if (same == N_NEW)
                snprintf(verdict, sizeof verdict, "identical");
            else
                snprintf(verdict, sizeof verdict, "DIFFERS at token %d", same);
            printf("    gemm_act=%-6s prompt %zu (%d ids): %s over %d tokens, %lld rounds, %.3f emitted tokens/round\n",
                   routes[rt], p, n, verdict, N_NEW, (long long)s.st.rounds, tau);
            EXPECT(same == N_NEW, "gemm_act=%s prompt %zu: speculative differs from plain greedy at token %d",
                   routes[rt], p, same);
            diffs += same != N_NEW;
            free(ids);
        }
        const double tau = rounds ? (double)emitted / (double)rounds : 0;
        printf("    gemm_act=%-6s all %zu prompts: %d differ; %.3f emitted tokens/round at block %d\n", routes[rt],
               json_array_size(prompts), diffs, tau, s.B);
        // On the CPU (models/README.md): 1.85 1.85 1.47 2.33 1.58 2.33 2.42 4.20 per prompt, about 2.05 over all
        // rounds; the GPU must match closely (same ids), and a broken drafter would give ~1.0.
        EXPECT(tau > 1.4, "gemm_act=%s: emitted tokens/round %.3f", routes[rt], tau);
    }
    spec_pair_free(&s, &plain, &d, &m, gpu());
    json_decref(prompts);
}
