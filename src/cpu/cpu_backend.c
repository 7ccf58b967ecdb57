// CPU backend: memory entry points (plain host memory) and the constructor.
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

static void *cpu_alloc(fd_backend *be, size_t bytes) {
    (void)be;
    return fd_calloc(1, bytes);
}
static void cpu_free(fd_backend *be, void *p) {
    (void)be;
    free(p);
}
static void cpu_zero(fd_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}
static void cpu_copy(fd_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, src, bytes);
}
static void cpu_copy_batch(fd_backend *be, void *const *dst, const void *const *src, const size_t *bytes, int count) {
    for (int i = 0; i < count; i++) cpu_copy(be, dst[i], src[i], bytes[i]);
}
// Weights stay where they were bound (the mmap): the reference reads every dtype directly.
static void cpu_upload_weight(fd_backend *be, fd_weight *w) {
    (void)be;
    w->dev = (void *)w->data;
    w->dev_dtype = w->dtype;
}
static void cpu_release_weight(fd_backend *be, fd_weight *w) {
    (void)be;
    w->dev = NULL; // it was the bound data itself
}
static void cpu_sync(fd_backend *be) { (void)be; }
static void cpu_destroy(fd_backend *be) {
    cpu_group_leave(be);
    free(be->impl);
    free(be);
}

fd_backend *fd_backend_cpu_create(int n_threads) {
    fd_threads_init(n_threads);
    fd_backend *be = fd_calloc(1, sizeof *be);
    be->name = "cpu";
    be->act_bytes = 4;
    cpu_impl *c = fd_calloc(1, sizeof *c);
    be->impl = c;
    c->routes[0] = (fd_route){.name = "kv",
                              .values = {"f32", "e4m3"},
                              .sel = &c->kv,
                              .help = "attention KV cache: fp32, or FP8 E4M3 with one fp32 scale per token and head"};
    c->routes[1] = (fd_route){.name = "gemm_fp8",
                              .values = {"gemv", "dequant", "wgmma"},
                              .sel = &c->gemm_fp8,
                              .by_shape = "wgmma: block_cols != 128 or > 16 rows run gemv",
                              .help = "FP8 block-scaled weights: gemv and dequant keep fp32 activations (the reference "
                                      "of both CUDA values); wgmma is W8A8 (x quantized to e4m3 per token and "
                                      "128-group, the CUDA wgmma kernel's semantics)"};
    be->routes = c->routes;
    be->n_routes = 2;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->to_device = cpu_copy;
    be->to_host = cpu_copy;
    be->copy = cpu_copy;
    be->copy_batch = cpu_copy_batch;
    be->upload_weight = cpu_upload_weight;
    be->release_weight = cpu_release_weight;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    cpu_install_dense(be);
    cpu_install_gdn(be);
    cpu_install_attn(be);
    cpu_install_moe(be);
    cpu_install_dflash2(be);
    cpu_install_sample(be);
    cpu_install_group(be);
    return be;
}
