// The chunked GDN prefill at the 27B's heads (Hk 16, Hv 48, dk = dv = 128) for both kernel sets of the cuda route
// gdn_chunk, and the entry point tools/peer_prefill.py uses to put FLA's chunk_gated_delta_rule and ours on the
// same inputs.
//   bench_cuda_gdn_chunk (FD_CUDA_BENCH=1): one call of 4096 tokens (the engine's prefill chunk) and one of 65536
//     (a whole 64K prompt: 16 passes of 4096 inside the call), CUDA events around 5 back-to-back calls, median of
//     5 such runs; one "BENCH | gdn_chunk=<kernels> n=<tokens> ..." line each (FLOP: the chunked form's MACs as
//     bench_cuda_27b_ops counts them; bytes: qkv read, o written, the state read and written).
//   peer_gdn_chunk_io (FD_GDN_PEER_IN / FD_GDN_PEER_OUT set): reads the inputs the peer script wrote, runs one
//     chunked call per kernel set and writes the output and final state to FD_GDN_PEER_OUT.<kernels>.
//     File layout (little-endian): int32 header {0x504e4447 (the bytes 'GDNP'), 1, n, Hk, Hv, dk, dv, 0}, then
//     fp32 qkv [n, 2 Hk dk + Hv dv] (conv output: Q heads | K heads | V heads), b [n, Hv], a [n, Hv] (raw gates:
//     beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias)), A_log [Hv], dt_bias [Hv], S0 [Hv, dk, dv].
//     Output: fp32 o [n, Hv, dv] then S [Hv, dk, dv].
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/test.h"
#include "backend.h"
#include "bench_common.h"
#include "cuda/cuda.h"
#include "cuda_rig.h"

static const char *const chunk_kernels[2] = {"tf32x3", "bf16"};

typedef struct {
    void *o, *qkv, *b, *a, *state;
    fd_weight *A_log, *dt_bias;
    int n, Hk, Hv, dk, dv, reps;
} gdn_call;

static void run_calls(const gdn_call *c) {
    for (int r = 0; r < c->reps; r++)
        B()->gdn_core(B(), FD_GDN_CHUNKED, c->o, c->qkv, c->b, c->a, c->A_log, c->dt_bias, c->state, c->n, c->Hk, c->Hv,
                      c->dk, c->dv, NULL);
}

// ms per call: CUDA events around c->reps calls, median of 5 runs after one warm-up run
static double events_ms(const gdn_call *c) {
    cudaEvent_t e0, e1;
    FD_CHECK(cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess);
    run_calls(c);
    double t[5];
    for (int i = 0; i < 5; i++) {
        fd_cuda_record_event(B(), e0);
        run_calls(c);
        fd_cuda_record_event(B(), e1);
        FD_CHECK(cudaEventSynchronize(e1) == cudaSuccess);
        float ms = 0;
        FD_CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess);
        t[i] = ms / c->reps;
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    qsort(t, 5, sizeof t[0], cmp_d);
    return t[2];
}

TEST(bench_cuda_gdn_chunk) {
    if (cuda_rig_bench_skipped()) return;
    const int Hk = 16, Hv = 48, dk = 128, dv = 128, cq = 2 * Hk * dk + Hv * dv, nmax = 65536;
    fd_weight Al = wrand(Hv, 1, -1, 1.5f), dtb = wrand(Hv, 1, -1, 1);
    gdn_call c = {.qkv = dev_rand((size_t)nmax * cq, -1, 1),
                  .a = dev_rand((size_t)nmax * Hv, -3, 3),
                  .b = dev_rand((size_t)nmax * Hv, -3, 3),
                  .o = B()->alloc(B(), (size_t)nmax * Hv * dv * 4),
                  .state = dev_rand((size_t)Hv * dk * dv, -0.1f, 0.1f),
                  .A_log = &Al,
                  .dt_bias = &dtb,
                  .Hk = Hk,
                  .Hv = Hv,
                  .dk = dk,
                  .dv = dv};
    const char *was = fd_cuda_route(B(), "gdn_chunk");
    char saved[16];
    snprintf(saved, sizeof saved, "%s", was ? was : "tf32x3");
    const int ns[2] = {4096, 65536};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 2; i++) {
            FD_CHECK(fd_cuda_set_route(B(), "gdn_chunk", chunk_kernels[k]) == 0, "%s", fd_error_msg());
            c.n = ns[i], c.reps = ns[i] == 4096 ? 5 : 1;
            const double mac = 64.0 * 64 * (3 * dk + 2 * dv) + 3.0 * 64 * dk * dv;
            const double flop = 2.0 * mac * Hv * ((c.n + 63) / 64);
            const double bytes = (double)c.n * (cq + Hv * dv) * 4 + 2.0 * Hv * dk * dv * 4;
            char what[80];
            snprintf(what, sizeof what, "gdn_chunk=%s n=%d (Hk16 Hv48 128/128)", chunk_kernels[k], c.n);
            row(what, events_ms(&c), flop, bytes);
        }
    FD_CHECK(fd_cuda_set_route(B(), "gdn_chunk", saved) == 0, "%s", fd_error_msg());
    B()->free(B(), c.qkv), B()->free(B(), c.a), B()->free(B(), c.b), B()->free(B(), c.o), B()->free(B(), c.state);
    B()->release_weight(B(), &Al), B()->release_weight(B(), &dtb);
}

static float *read_floats(FILE *f, size_t n, const char *what) {
    float *x = fd_malloc(n * 4 + 4);
    FD_CHECK(fread(x, 4, n, f) == n, "peer input: short read of %s (%zu floats)", what, n);
    return x;
}

TEST(peer_gdn_chunk_io) {
    const char *in = getenv("FD_GDN_PEER_IN"), *out = getenv("FD_GDN_PEER_OUT");
    if (!in || !out) {
        printf("    skipped: FD_GDN_PEER_IN / FD_GDN_PEER_OUT not set (tools/peer_prefill.py sets them)\n");
        return;
    }
    FILE *f = fopen(in, "rb");
    ASSERT(f, "peer input %s: cannot open", in);
    int32_t hd[8];
    ASSERT(fread(hd, 4, 8, f) == 8 && hd[0] == 0x504e4447 && hd[1] == 1, "peer input %s: not a version-1 GDN file", in);
    const int n = hd[2], Hk = hd[3], Hv = hd[4], dk = hd[5], dv = hd[6];
    ASSERT(n >= 1 && Hk >= 1 && Hv % Hk == 0 && dk >= 1 && dk <= 256 && dv >= 1 && dv <= 256,
           "peer input %s: bad shape n %d Hk %d Hv %d dk %d dv %d", in, n, Hk, Hv, dk, dv);
    const size_t cq = 2 * (size_t)Hk * dk + (size_t)Hv * dv, ns = (size_t)Hv * dk * dv, no = (size_t)n * Hv * dv;
    float *qkv = read_floats(f, (size_t)n * cq, "qkv"), *b = read_floats(f, (size_t)n * Hv, "b");
    float *a = read_floats(f, (size_t)n * Hv, "a"), *al = read_floats(f, Hv, "A_log");
    float *dt = read_floats(f, Hv, "dt_bias"), *S0 = read_floats(f, ns, "S0");
    fclose(f);
    fd_weight Al = {.name = "A_log", .dtype = FD_F32, .rows = Hv, .cols = 1, .data = al};
    fd_weight Dt = {.name = "dt_bias", .dtype = FD_F32, .rows = Hv, .cols = 1, .data = dt};
    B()->upload_weight(B(), &Al), B()->upload_weight(B(), &Dt);
    gdn_call c = {.qkv = cuda_rig_up(B(), qkv, (size_t)n * cq * 4),
                  .b = cuda_rig_up(B(), b, (size_t)n * Hv * 4),
                  .a = cuda_rig_up(B(), a, (size_t)n * Hv * 4),
                  .o = cuda_rig_poisoned(B(), no),
                  .state = B()->alloc(B(), ns * 4),
                  .A_log = &Al,
                  .dt_bias = &Dt,
                  .n = n,
                  .Hk = Hk,
                  .Hv = Hv,
                  .dk = dk,
                  .dv = dv,
                  .reps = 1};
    for (int k = 0; k < 2; k++) {
        FD_CHECK(fd_cuda_set_route(B(), "gdn_chunk", chunk_kernels[k]) == 0, "%s", fd_error_msg());
        B()->to_device(B(), c.state, S0, ns * 4);
        run_calls(&c);
        float *o = cuda_rig_down(B(), c.o, no), *S = cuda_rig_down(B(), c.state, ns);
        char path[4096];
        snprintf(path, sizeof path, "%s.%s", out, chunk_kernels[k]);
        FILE *g = fopen(path, "wb");
        ASSERT(g, "peer output %s: cannot create", path);
        ASSERT(fwrite(o, 4, no, g) == no && fwrite(S, 4, ns, g) == ns && fclose(g) == 0, "peer output %s: write", path);
        printf("    peer io: gdn_chunk=%s n=%d Hk=%d Hv=%d dk=%d dv=%d -> %s (finite: %s)\n", chunk_kernels[k], n, Hk,
               Hv, dk, dv, path, cuda_rig_all_finite(o, no) && cuda_rig_all_finite(S, ns) ? "yes" : "NO");
        free(o), free(S);
    }
    FD_CHECK(fd_cuda_set_route(B(), "gdn_chunk", "tf32x3") == 0, "%s", fd_error_msg());
    B()->free(B(), c.qkv), B()->free(B(), c.b), B()->free(B(), c.a), B()->free(B(), c.o), B()->free(B(), c.state);
    B()->release_weight(B(), &Al), B()->release_weight(B(), &Dt);
    free(qkv), free(b), free(a), free(al), free(dt), free(S0);
}
