// The one backend interface. The engine drives a model forward pass through these entry points only and
// never branches on which backend it talks to; `cpu` (reference, src/cpu) and `cuda` (src/cuda) implement it.
//
// Buffers are backend memory (host memory for cpu, device memory for cuda) obtained from alloc().
// Argument conventions in the shape comments:
//   act  activation element of the backend's choice (act_bytes wide: fp32 on cpu)
//   f32  always float32 (recurrent state, conv state, logits, router math)
// Row-major everywhere; [n, d] means n rows of d contiguous elements. n is a token count.
#ifndef FD_BACKEND_H
#define FD_BACKEND_H
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "base/sample_math.h" // fd_sample_params
#include "base/weight.h" // fd_weight: a bound weight and its format

#define FD_TOPK_ROWS_MAX 256 // topk_rows' K at most (DFlash2's selector top-k bound)

typedef struct fd_backend fd_backend;

// One attention layer's KV cache as the cache ops see it. `base` holds `slots` token slots in the backend's layout
// (planes sized from slots, see kv_bytes_per_token). Position p of the sequence lives in slot
//   pages ? pages[p / page_tokens] * page_tokens + p % page_tokens : p
// pages is backend memory (host memory on cpu) with capacity / page_tokens entries, page_tokens a power of two and
// a multiple of every kernel's key tile (engine/kv_pool.h: FD_KV_PAGE_TOKENS), so a kernel looks a page up once
// per key tile. pages NULL: a contiguous cache (slot = position, capacity = slots), e.g. a snapshot or a drafter's
// context cache. Positions at or beyond capacity do not exist; entries of pages a sequence has not reserved are 0.
typedef struct {
    void *base;
    const int32_t *pages;
    int page_tokens;
    int64_t slots;    // physical token slots of base
    int64_t capacity; // addressable positions
} fd_kv_view;

// A contiguous cache of `capacity` positions; FD_KV_FLAT: the same as a pointer argument (a compound literal that
// lives to the end of the enclosing block).
static inline fd_kv_view fd_kv_flat(void *base, int64_t capacity) {
    fd_kv_view v = {base, NULL, 0, capacity, capacity};
    return v;
}
#define FD_KV_FLAT(base, capacity) (&(fd_kv_view){(void *)(base), NULL, 0, (capacity), (capacity)})

// fd_sample_params (one logits row's sampling parameters): base/sample_math.h.

// A named execution route: an op with more than one implementation. The choice is explicit (default, flag
// `--route NAME=VALUE`, env FD_ROUTE_<NAME>), printed at start, and every call is counted under the value that
// actually ran, so a run can prove it took the route it was asked for (routes_verify in engine/routes.h).
// A value named FD_ROUTE_AUTO picks one of the route's other values per call by a documented rule and counts the
// call under the value it picked; routes_verify accepts any counted value while it is selected.
#define FD_ROUTE_MAX_VALUES 4
#define FD_ROUTE_AUTO "auto"
typedef struct {
    const char *name;
    const char *values[FD_ROUTE_MAX_VALUES + 1]; // NULL-terminated
    int *sel;                                    // index of the chosen value; the implementation reads it
    int64_t calls[FD_ROUTE_MAX_VALUES];          // calls and tokens per value actually run
    int64_t tokens[FD_ROUTE_MAX_VALUES];
    const char *by_shape; // non-NULL: some calls take another value by design; says which (e.g. "< 64 rows")
    const char *help;
    int locked;           // set by the backend once the choice is baked into memory (the kv cache layout)
} fd_route;

// GDN prefill route: the chunked (UT/WY, chunk 64) form or the token-serial recurrence.
typedef enum { FD_GDN_CHUNKED = 0, FD_GDN_SERIAL = 1 } fd_gdn_route;

typedef struct {
    const fd_weight *router;           // [E, d]
    const fd_weight *gate, *up, *down; // arrays of E experts: [I, d], [I, d], [d, I] (views; fused or per-expert)
    const fd_weight *sh_gate, *sh_up, *sh_down, *sh_gate_w; // shared expert [Is, d] [Is, d] [d, Is], gate [1, d]
    int n_experts, top_k, inter, sh_inter, renorm;
} fd_moe_weights;

struct fd_backend {
    const char *name;
    int act_bytes;
    void *impl;
    fd_route *routes; // this backend's own routes (may be none)
    int n_routes;
    // Refuses impossible combinations of the selected routes (NULL: all combinations work).
    int (*check_routes)(fd_backend *be);

    // ---- memory ----
    void *(*alloc)(fd_backend *be, size_t bytes); // zero-filled
    void (*free)(fd_backend *be, void *p);
    void (*zero)(fd_backend *be, void *p, size_t bytes);
    void (*to_device)(fd_backend *be, void *dst, const void *host_src, size_t bytes);
    void (*to_host)(fd_backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(fd_backend *be, void *dst, const void *src, size_t bytes);
    // count copies dst[i] <- src[i] of bytes[i] between backend buffers, none overlapping another, as one operation
    // (the speculative commit: a GDN and a conv state per layer, ~100 small copies). NULL: copy, one at a time.
    void (*copy_batch)(fd_backend *be, void *const *dst, const void *const *src, const size_t *bytes, int count);
    void (*upload_weight)(fd_backend *be, fd_weight *w);
    void (*release_weight)(fd_backend *be, fd_weight *w); // frees what upload_weight made; w->dev = NULL
    void (*sync)(fd_backend *be);
    void (*destroy)(fd_backend *be);

    // ---- dense ops ----
    // out[n,d] act = table[ids_dev[i]] ; ids_dev is backend memory (the engine copies ids in with to_device, so
    // a captured CUDA graph reads the ids of the step it is replayed for). The caller checks the ids' range.
    void (*embed)(fd_backend *be, void *out, const fd_weight *table, const int32_t *ids_dev, int n);
    // out[n,d] = rmsnorm(x[n,d]) * (plus_one ? 1+w : w); w [d]; out may alias x
    void (*rmsnorm)(fd_backend *be, void *out, const void *x, const fd_weight *w, int64_t n, int d, float eps,
                    int plus_one);
    // out[n,m] = x[n,k] W[m,k]^T ; out act, or f32 when out_f32
    void (*matmul)(fd_backend *be, void *out, const void *x, const fd_weight *W, int n, int out_f32);
    // outs[i] = matmul(x, Ws[i]) (act) for i < count: the projections of one input (GDN qkv|z|b|a, attention
    // q|k|v, FFN gate|up). Each result equals what matmul gives for that weight alone, bitwise; a backend may run
    // the group as one launch (cuda: one small-n GEMV launch when n <= 16 and every weight is bf16 with the same
    // k; other groups, e.g. weights of different k, each reading x as [n, Ws[i].cols], run one by one).
    void (*matmul_multi)(fd_backend *be, void *const outs[], const fd_weight *const Ws[], int count, const void *x,
                         int n);
    void (*add)(fd_backend *be, void *x, const void *y, int64_t count);      // x += y
    // The residual add and the next norm in one pass (one launch instead of two per decoder sublayer):
    // x[n,d] += y[n,d], then out[n,d] = rmsnorm(x) * (plus_one ? 1+w : w). Bitwise what add then rmsnorm give on
    // the same backend; a row's result depends on that row only. out may not alias x or y.
    void (*add_rmsnorm)(fd_backend *be, void *out, void *x, const void *y, const fd_weight *w, int64_t n, int d,
                        float eps, int plus_one);
    void (*silu_mul)(fd_backend *be, void *out, const void *g, const void *u, int64_t count); // silu(g)*u
    void (*sigmoid_mul)(fd_backend *be, void *x, const void *gate, int64_t count);           // x *= sigmoid(gate)
    // out[n, d] act -> f32 host-readable copy (for logits / hidden taps)
    void (*to_f32)(fd_backend *be, float *out, const void *x, int64_t count);
    // 2-D copy of `rows` rows of row_bytes between backend buffers with the given row strides (bytes)
    void (*copy_rows)(fd_backend *be, void *dst, size_t dst_stride, const void *src, size_t src_stride, int64_t rows,
                      size_t row_bytes);

    // ---- gated DeltaNet ----
    // qwen3_next grouped layout -> contiguous: qkvz [n, Hk*(2dk+2r dv)], ba [n, Hk*2r]
    //   -> qkv [n, 2Hk dk + Hv dv] (Q|K|V), z [n, Hv dv], b [n, Hv], a [n, Hv]
    void (*gdn_split_qkvz)(fd_backend *be, void *qkv, void *z, void *b, void *a, const void *qkvz, const void *ba,
                           int n, int Hk, int Hv, int dk, int dv);
    // depthwise causal conv (kernel K) + SiLU over C channels; conv_state f32 [C, K-1] holds the previous K-1
    // inputs (oldest first) and is updated. out may not alias x. When state_slots (f32 [n, C, K-1]) is not NULL,
    // the state after each token t is also written to slot t (speculative verify: commit = copy one slot).
    void (*conv1d_silu)(fd_backend *be, void *out, const void *x, const fd_weight *w, float *conv_state, int n, int C,
                        int K, float *state_slots);
    // The GDN core for n tokens of one sequence. qkv [n, 2Hk dk + Hv dv] post-conv; b, a [n, Hv] raw projections;
    // A_log, dt_bias [Hv]. Computes beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias), L2-normalises q,k,
    // scales q by 1/sqrt(dk), runs the gated delta rule from state f32 [Hv, dk, dv] (updated in place) and writes
    // o [n, Hv, dv]. Value head h reads q/k head h / (Hv/Hk). When state_slots (f32 [n, Hv, dk, dv]) is not
    // NULL the state after each token t is also written to slot t; the caller then uses FD_GDN_SERIAL.
    void (*gdn_core)(fd_backend *be, fd_gdn_route route, void *o, const void *qkv, const void *b, const void *a,
                     const fd_weight *A_log, const fd_weight *dt_bias, float *state, int n, int Hk, int Hv, int dk,
                     int dv, float *state_slots);
    // The chain recurrence of gdn_core (FD_GDN_SERIAL) over n tokens with the state only read: o exactly as
    // gdn_core writes it for those tokens, bitwise, and nothing else written (route gdn_verify=replay: a verify
    // leaves the committed state S0 as it was; the commit replays the accepted a tokens through gdn_core from S0,
    // whose per-token arithmetic is the verify's, so the state it leaves is bitwise what slot a - 1 would hold).
    // Optional: NULL, and the engine offers only gdn_verify=slots.
    void (*gdn_core_readonly)(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                              const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk,
                              int Hv, int dk, int dv);
    // out[rows, dv] = w * rmsnorm(x) * silu(z), w [dv] (not zero-centred)
    void (*gated_rmsnorm)(fd_backend *be, void *out, const void *x, const void *z, const fd_weight *w, int64_t rows,
                          int dv, float eps);

    // ---- gated attention ----
    // qg [n, H, 2hd] (per head: query | gate) -> q [n, H, hd], gate [n, H*hd]
    void (*split_q_gate)(fd_backend *be, void *q, void *gate, const void *qg, int n, int H, int hd);
    // NeoX rotary on the first rot_dim dims of each head; positions pos0 .. pos0+n-1. pos_dev: NULL, or backend
    // memory holding one int64 whose value when the op executes replaces pos0 (as for attention below).
    void (*rope)(fd_backend *be, void *x, int n, int H, int hd, int rot_dim, float theta, int64_t pos0,
                 const int64_t *pos_dev);
    // The query/key preparation of gated attention for n tokens of one sequence in one op (one launch instead of
    // five): qg [n, H, 2hd] (per head: query | gate) -> gate [n, H*hd] (a copy), q [n, H, hd] =
    // rope(rmsnorm(query) * (1+q_norm)); k [n, Hkv, hd] in place = rope(rmsnorm(k) * (1+k_norm)). rope and pos0 /
    // pos_dev exactly as `rope` above. Same math as split_q_gate, rmsnorm (plus_one) of the q and k rows, then rope
    // of q and k (cpu: bitwise; cuda: within fp32 rounding, each row's result independent of n and of pos_dev vs
    // pos0).
    void (*qk_norm_rope)(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                         const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta, float eps,
                         int64_t pos0, const int64_t *pos_dev);
    // Bytes per cached token per layer for K and V together (layout is the backend's).
    size_t (*kv_bytes_per_token)(fd_backend *be, int Hkv, int hd);
    // store k, v [n, Hkv, hd] at positions pos0.. of a layer's cache (kv: fd_kv_view above). pos_dev: NULL, or
    // backend memory holding one int64 whose value when the op executes replaces pos0 (rows that would land at or
    // beyond kv->capacity are dropped; the engine checks capacity and reserves the pages on the host before every
    // forward).
    void (*kv_store)(fd_backend *be, const fd_kv_view *kv, const void *k, const void *v, int64_t pos0,
                     const int64_t *pos_dev, int n, int Hkv, int hd);
    // copy positions [src_pos, src_pos+n) of cache `src` to [dst_pos, ...) of `dst`, in the backend's layout, through
    // either view's page table (prefix-cache snapshots are contiguous caches of capacity n). The ranges must not
    // overlap physically.
    void (*kv_copy)(fd_backend *be, const fd_kv_view *dst, int64_t dst_pos, const fd_kv_view *src, int64_t src_pos,
                    int64_t n, int Hkv, int hd);
    // attention of q [n, H, hd] at positions pos0.. over positions [0 .. pos0+n) of kv -> out [n, H*hd]. causal:
    // query i sees keys 0..pos0+i; otherwise (the DFlash drafter's block) every query sees all pos0+n keys.
    // pos_dev: NULL, or backend memory holding one int64 whose value *when the op executes* is the position and
    // replaces pos0 (a captured CUDA graph replayed at a later step); the backend then sizes its work from
    // kv->capacity, never from pos0. Calls with n <= 16 give each query row a result bitwise independent of n, of
    // pos_dev vs pos0, of capacity and of the page table (decode and speculative verify agree exactly; CUDA:
    // attention_decode.cu).
    void (*attention)(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0,
                      const int64_t *pos_dev, int n, int H, int Hkv, int hd, float scale, int causal);

    // ---- tensor parallelism (optional: NULL on a backend that is not one rank of a group) ----
    // x [count] act elements (act_bytes wide) += the same buffer of every other rank of the group, in place. Every
    // rank ends with the same bits, run after run, but the summation order is the backend's:
    //   cpu   ranks 0, 1, ..., tp - 1 added in that order (cpu_group.c);
    //   cuda  NCCL's own order (ncclAllReduce, sum: ring or tree by its tuning, the same on every rank), not
    //         0..tp-1; a one-rank group is the identity, bitwise.
    // Issued in stream order like any op (cuda: on the rank's stream, so a CUDA graph records it). Every rank of
    // the group must make the same calls in the same order (the decoder does: one after each row-parallel
    // projection); at tp 1 the call is the identity (the --tp 1 code path, bitwise the plain engine).
    void (*all_reduce)(fd_backend *be, void *x, int64_t count);
    // Makes ranks[0..tp) (backends of this kind, ranks[0] == be, none in a group yet, each on its own device)
    // one group: ranks[r] is rank r and has all_reduce from then on. Returns 0, or -1 with fd_error set (cuda: also
    // when NCCL cannot be loaded: it is dlopen'ed, "libnccl.so.2" or $FD_NCCL_LIB). NULL: no group on this backend.
    int (*group_join)(fd_backend *be, fd_backend *const *ranks, int tp);
    // The kernel libraries this backend runs on, for the ranks' agreement at start (cpu: "cpu"; cuda: runtime,
    // cuBLASLt and NCCL versions and the device). Writes a NUL-terminated line into buf[cap].
    void (*lib_versions)(fd_backend *be, char *buf, size_t cap);

    // ---- mixture of experts ----
    // out[n, d] = sum_topk w_e SwiGLU_e(x) + sigmoid(x sh_gate_w) SwiGLU_sh(x)
    void (*moe)(fd_backend *be, void *out, const void *x, const fd_moe_weights *mw, int n, int d);

    // ---- DFlash2 drafter (optional: NULL where a backend lacks them; the engine then refuses DFlash2) ----
    // Grouped dynamic causal conv over the n rows of one draft block; taps before row 0 read zeros:
    //   out[i, c] = sum_{t < K, t <= i} (base[t, c] + dyn[i * dyn_stride + t * (d / group) + c / group]) x[i - t, c]
    // x, out act [n, d] (out may not alias x); dyn f32; base: the K x d taps of half `half` (0 or 1) of the
    // weight base_w [2, K, d].
    void (*dyn_conv)(fd_backend *be, void *out, const void *x, const float *dyn, int dyn_stride,
                     const fd_weight *base_w, int half, int n, int d, int group, int K);
    // Non-causal attention like `attention` with a symmetric sliding window: query i (position pos0 + i) sees
    // key j < pos0 + n only when |pos0 + i - j| < window.
    void (*attention_window)(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n, int H,
                             int Hkv, int hd, float scale, int window);

    // ---- tree verify (spec_verify=tree; optional: NULL where a backend lacks them, the engine then refuses the
    // route) ----
    // A verify tree of n nodes of one sequence in topological order: parent_dev[t] (backend memory, int32 [n]) is
    // node t's parent, < t, and -1 for the root, whose parent is the sequence's committed state. Node t's state is
    // computed from its parent's: the committed state for the root, else state slot parent_dev[t]; the committed
    // state itself is not changed (the commit copies the accepted node's slot). Along any root-to-node path the
    // results are those of the chain op over that path (cpu: bitwise).
    // conv1d_silu over the tree: as conv1d_silu with state_slots (f32 [n, C, K-1]) required.
    void (*conv1d_silu_tree)(fd_backend *be, void *out, const void *x, const fd_weight *w, const float *conv_state,
                             int n, int C, int K, float *state_slots, const int32_t *parent_dev);
    // gdn_core over the tree (the recurrence): as gdn_core with state_slots (f32 [n, Hv, dk, dv]) required.
    void (*gdn_core_tree)(fd_backend *be, void *o, const void *qkv, const void *b, const void *a,
                          const fd_weight *A_log, const fd_weight *dt_bias, const float *state, int n, int Hk, int Hv,
                          int dk, int dv, float *state_slots, const int32_t *parent_dev);
    // Attention with the tree mask: node t's key/value sits at position pos0 + t of kv; query t sees the context
    // keys [0, pos0) and the keys of its ancestors and itself, in position order -> out [n, H*hd].
    void (*attention_tree)(fd_backend *be, void *out, const void *q, const fd_kv_view *kv, int64_t pos0, int n, int H,
                           int Hkv, int hd, float scale, const int32_t *parent_dev);
    // qk_norm_rope over the tree's rows in one op: row t at position pos0 + depth_dev[t] (backend memory, int32
    // [n]: the node's depth); each row bitwise what qk_norm_rope gives for that row alone at that position.
    // Optional within the tree ops: NULL, and the forward calls qk_norm_rope once per row.
    void (*qk_norm_rope_tree)(fd_backend *be, void *q, void *gate, void *k, const void *qg, const fd_weight *q_norm,
                              const fd_weight *k_norm, int n, int H, int Hkv, int hd, int rot_dim, float theta,
                              float eps, int64_t pos0, const int32_t *depth_dev);

    // ---- tree construction (optional: NULL, and the engine copies the draft rows to the host) ----
    // out_host[r] = log sum_v exp(logits_dev[r, v]) over the V f32 logits of row r (backend memory, [rows, V]), so
    // with topk_rows a row's best tokens and their log-softmax values reach the host without the row (cpu:
    // sample_logsumexp, the sum in double; cuda: fp32 partial sums merged over the block).
    void (*logsumexp_rows)(fd_backend *be, float *out_host, const float *logits_dev, int rows, int V);

    // ---- greedy decoding ----
    // out_host[r] = argmax over the V f32 logits of row r of logits_dev (backend memory, [rows, V]); the lowest
    // index wins ties (as engine_argmax). Only the ids cross to the host.
    void (*argmax_rows)(fd_backend *be, int32_t *out_host, const float *logits_dev, int rows, int V);
    // ids_host / vals_host [rows, K] = the K largest logits of each row of logits_dev ([rows, V]) and their ids, as
    // top_k_row (base/sample_math.h): descending, the lower index first among equals, NaNs never taken; 1 <= K <=
    // FD_TOPK_ROWS_MAX. Only the K pairs of a row cross to the host. Optional (NULL: the caller copies the rows).
    void (*topk_rows)(fd_backend *be, int32_t *ids_host, float *vals_host, const float *logits_dev, int rows, int V,
                      int K);
    // The softmax scan of a vocabulary slice, so a tensor-parallel group samples without gathering logits rows
    // (engine/tp_sample.c). For each row r of logits_dev ([rows, V]) with temp[r] > 0 (other rows are left as they
    // are): q_i = expf((logits[r, i] - mx[r]) / temp[r]) as a float, then (float)(q_i / div[r]) when div[r] > 0 —
    // sample_probs' two steps —, and acc_host[r] += q_i over i in index order (double; acc_host[r] comes in holding
    // the previous slices' sum, so chaining the ranks in order gives sample_probs' / sample_draw_u's own sums).
    // With target (host [rows], may be NULL) the scan stops at the first i with q_i > 0 and target[r] < acc_host[r]
    // (sample_draw_u's rule) and pick_host[r] = i; otherwise pick_host[r] = -2 - (the last i with q_i > 0), or -1
    // when no q_i > 0. mx, temp, div: host [rows]. cpu: that arithmetic exactly; cuda: the sum in per-thread
    // segments merged in order (rounding may differ, as sample_rows'). Optional (NULL: a group gathers the rows).
    void (*softmax_scan_rows)(fd_backend *be, double *acc_host, int32_t *pick_host, const float *logits_dev,
                              int rows, int V, const float *mx, const float *temp, const double *div,
                              const double *target);

    // ---- recorded forwards (CUDA graphs; optional: all NULL where a backend has none, e.g. cpu) ----
    // graph_begin: the ops issued from now until graph_end are recorded, not run. Returns 0, or -1 when this
    // backend cannot record now (nothing changed; run the ops eagerly).
    int (*graph_begin)(fd_backend *be);
    // Ends the recording and returns it as a replayable handle, or NULL when the recording failed (an op needed
    // something a recording cannot hold, e.g. a scratch buffer grew): then none of the recorded ops ran and the
    // caller runs them again eagerly. A handle's ops have NOT run yet either: launch it.
    void *(*graph_end)(fd_backend *be);
    // Runs a handle's ops in stream order (asynchronous like any op). The ops read every buffer, weight and
    // position (pos_dev, ids_dev) when they execute, so a replay computes the current step.
    void (*graph_launch)(fd_backend *be, void *graph);
    void (*graph_free)(fd_backend *be, void *graph);
    // Changes whenever memory a handle may reference was reallocated (scratch growth, weight release): a handle
    // made under another value must be freed, not launched.
    uint64_t (*graph_generation)(fd_backend *be);

    // ---- sampling ----
    // One token id per logits row, to host out_host[rows]: logits f32 [rows, V] (backend memory), params[r] and
    // uniforms[r] (host; one uniform in [0, 1) per row, drawn by the host's sampler so seeds and streams stay the
    // host's; ignored for greedy rows, NULL when every row is greedy). Same distribution as sampler_sample: softmax
    // of logits / T, top-k, then top-p over the kept mass (ties ranked by lower index), renormalised, and the
    // inverse-CDF draw in index order; greedy rows take the argmax (lowest index on ties). cpu: bitwise the ids of
    // sampler_sample; cuda: the same ids except where u lands within rounding of a CDF boundary (sampling.cu).
    void (*sample_rows)(fd_backend *be, int32_t *out_host, const float *logits, int rows, int V,
                        const fd_sample_params *params, const double *uniforms);
};

fd_backend *fd_backend_cpu_create(int n_threads);
#ifdef FD_HAVE_CUDA
fd_backend *fd_backend_cuda_create(int device);
int fd_cuda_device_count(void); // visible CUDA devices (0 when none or no driver)
#endif

#endif
