// CUDA backend: a tensor-parallel group over NCCL (backend.h group_join / all_reduce), one process, one device and
// one host thread per rank (engine_tp.c). group_join makes the ranks' devices one communicator set with
// ncclCommInitAll; all_reduce is an in-place ncclAllReduce (sum, fp32: the activation dtype, act_bytes 4) on the
// rank's own stream, so it is ordered with the rank's kernels and a CUDA graph records it like a kernel (legal
// from NCCL 2.9 on for a communicator created before the capture; cuda_graph.cu captures in relaxed mode).
//
// NCCL is loaded at run time (dlopen of $FD_NCCL_LIB, else "libnccl.so.2"): the binary builds, links (static
// host libraries unchanged) and runs without it, and only --tp on cuda needs it, failing with a message that says
// what to install or point FD_NCCL_LIB at (e.g. the nvidia-nccl-cu12 wheel's nvidia/nccl/lib/libnccl.so.2).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>

#include "cuda/cuda_common.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#else
// The few NCCL declarations used here (nccl.h, NCCL 2.x; values are part of its ABI).
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclFloat32 = 7 } ncclDataType_t;
typedef enum { ncclSum = 0 } ncclRedOp_t;
#endif

#define CU_GROUP_MAX 8
#define CU_NCCL_MIN_VERSION 20900 // NCCL calls inside CUDA stream capture

// The entry points taken from the loaded library.
typedef struct {
    pthread_mutex_t lock;
    int tried, ok, version;
    char why[512]; // why it could not be loaded (ok == 0 once tried)
    ncclResult_t (*get_version)(int *);
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} cu_nccl_lib;

static cu_nccl_lib nccl = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, {0}, NULL, NULL, NULL, NULL, NULL};

// NCCL's version code: X*10000 + Y*100 + Z from 2.9 on, X*1000 + Y*100 + Z before.
static void nccl_version_str(int v, char *buf, size_t cap) {
    if (v >= 10000) snprintf(buf, cap, "%d.%d.%d", v / 10000, v % 10000 / 100, v % 100);
    else snprintf(buf, cap, "%d.%d.%d", v / 1000, v % 1000 / 100, v % 100);
}

// Loads NCCL once per process; 1 when it is usable (nccl.why says why not otherwise). Sets no error.
static int nccl_try_load(void) {
    pthread_mutex_lock(&nccl.lock);
    if (!nccl.tried) {
        nccl.tried = 1;
        const char *env = getenv("FD_NCCL_LIB");
        const char *path = env && env[0] ? env : "libnccl.so.2";
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            snprintf(nccl.why, sizeof nccl.why,
                     "NCCL cannot be loaded (dlopen %s: %s): install NCCL >= 2.9 or set FD_NCCL_LIB to its "
                     "libnccl.so.2 (e.g. the nvidia-nccl-cu12 wheel's nvidia/nccl/lib/libnccl.so.2)",
                     path, e ? e : "?");
        } else {
            *(void **)&nccl.get_version = dlsym(lib, "ncclGetVersion");
            *(void **)&nccl.comm_init_all = dlsym(lib, "ncclCommInitAll");
            *(void **)&nccl.all_reduce = dlsym(lib, "ncclAllReduce");
            *(void **)&nccl.comm_destroy = dlsym(lib, "ncclCommDestroy");
            *(void **)&nccl.error_string = dlsym(lib, "ncclGetErrorString");
            char ver[32] = "?";
            if (!nccl.get_version || !nccl.comm_init_all || !nccl.all_reduce || !nccl.comm_destroy ||
                !nccl.error_string)
                snprintf(nccl.why, sizeof nccl.why, "%s lacks an NCCL entry point (ncclGetVersion, ncclCommInitAll, "
                         "ncclAllReduce, ncclCommDestroy, ncclGetErrorString)", path);
            else if (nccl.get_version(&nccl.version) != ncclSuccess)
                snprintf(nccl.why, sizeof nccl.why, "%s: ncclGetVersion failed", path);
            else if (nccl_version_str(nccl.version, ver, sizeof ver), nccl.version < CU_NCCL_MIN_VERSION)
                snprintf(nccl.why, sizeof nccl.why, "%s is NCCL %s; CUDA graphs record NCCL calls from 2.9 on", path,
                         ver);
            else nccl.ok = 1;
            if (!nccl.ok) dlclose(lib); // else kept for the process's life
        }
    }
    const int ok = nccl.ok;
    pthread_mutex_unlock(&nccl.lock);
    return ok;
}

#define FD_NCCL_CHECK(call)                                                                                            \
    do {                                                                                                               \
        ncclResult_t fd_r_ = (call);                                                                                   \
        if (fd_r_ != ncclSuccess)                                                                                      \
            fd_panic(__FILE__, __LINE__, "NCCL error %d (%s) in %s", (int)fd_r_, nccl.error_string(fd_r_), #call);     \
    } while (0)

// The communicators live with the group and go together when its last member leaves (the order NCCL's own
// single-process example destroys them in), so no rank's communicator goes while a peer may still use it.
struct cu_group {
    int tp;
    std::atomic<int> members;
    ncclComm_t comms[CU_GROUP_MAX];
};

static void cu_all_reduce(fd_backend *be, void *x, int64_t count) {
    cu_impl *c = cu_of(be);
    FD_CHECK(c->group, "all_reduce on a cuda backend outside a tensor-parallel group");
    FD_CHECK(be->act_bytes == 4, "all_reduce: fp32 activations expected, act_bytes %d", be->act_bytes);
    // In place on the rank's stream: recorded into a graph while capturing, queued like a kernel otherwise.
    FD_NCCL_CHECK(nccl.all_reduce(x, x, (size_t)count, ncclFloat32, ncclSum, (ncclComm_t)c->nccl_comm, c->stream));
    cu_after_launch(__FILE__, __LINE__);
}

static int cu_group_join(fd_backend *be, fd_backend *const *ranks, int tp) {
    if (tp < 1 || tp > CU_GROUP_MAX) return fd_error_set("tensor-parallel group of %d ranks (1..%d)", tp, CU_GROUP_MAX);
    if (ranks[0] != be) return fd_error_set("group_join: rank 0 must be the backend joining them");
    int devs[CU_GROUP_MAX];
    for (int r = 0; r < tp; r++) {
        if (ranks[r]->group_join != cu_group_join)
            return fd_error_set("tensor-parallel group: rank %d is backend %s, not cuda", r, ranks[r]->name);
        const cu_impl *c = (const cu_impl *)ranks[r]->impl;
        if (c->group) return fd_error_set("tensor-parallel group: rank %d is in a group already", r);
        if (c->capturing) return fd_error_set("tensor-parallel group: rank %d is recording a CUDA graph", r);
        devs[r] = c->device;
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return fd_error_set("tensor-parallel group: ranks %d and %d are both on CUDA device %d (one device "
                                    "per rank)", q, r, devs[r]);
    }
    if (!nccl_try_load()) return fd_error_set("--tp %d on cuda: %s", tp, nccl.why);
    cu_group *g = new cu_group();
    g->tp = tp;
    g->members.store(tp);
    const ncclResult_t rc = nccl.comm_init_all(g->comms, tp, devs);
    cu_thread_device = -1; // NCCL sets devices of its own on this thread: the next cu_of binds again
    if (rc != ncclSuccess) {
        delete g;
        return fd_error_set("ncclCommInitAll over %d devices: NCCL error %d (%s)", tp, (int)rc, nccl.error_string(rc));
    }
    for (int r = 0; r < tp; r++) {
        cu_impl *c = (cu_impl *)ranks[r]->impl;
        c->group = g;
        c->rank = r;
        c->nccl_comm = g->comms[r];
        ranks[r]->all_reduce = cu_all_reduce;
    }
    return 0;
}

void cu_group_leave(fd_backend *be) {
    cu_impl *c = cu_of(be);
    cu_group *g = c->group;
    if (!g) return;
    c->group = NULL;
    c->nccl_comm = NULL;
    be->all_reduce = NULL;
    if (g->members.fetch_sub(1) == 1) {
        for (int r = 0; r < g->tp; r++) FD_NCCL_CHECK(nccl.comm_destroy(g->comms[r]));
        cu_thread_device = -1;
        delete g;
    }
}

// For the ranks' agreement at start: the libraries and the device kind (never the device index, which differs
// by rank by design). NCCL is loaded here if it can be, so its version shows; "none" and why when it cannot.
static void cu_lib_versions(fd_backend *be, char *buf, size_t cap) {
    cu_impl *c = cu_of(be);
    int rt = 0, drv = 0;
    FD_CUDA_CHECK(cudaRuntimeGetVersion(&rt));
    FD_CUDA_CHECK(cudaDriverGetVersion(&drv));
    cudaDeviceProp prop;
    FD_CUDA_CHECK(cudaGetDeviceProperties(&prop, c->device));
    char nv[48] = "none";
    if (nccl_try_load()) nccl_version_str(nccl.version, nv, sizeof nv);
    snprintf(buf, cap, "cuda runtime %d.%d, driver %d.%d, cuBLASLt %zu, NCCL %s, %s sm_%d%d", rt / 1000,
             rt % 1000 / 10, drv / 1000, drv % 1000 / 10, cublasLtGetVersion(), nv, prop.name, prop.major,
             prop.minor);
}

void cu_group_install(fd_backend *be) {
    be->group_join = cu_group_join;
    be->lib_versions = cu_lib_versions;
}
