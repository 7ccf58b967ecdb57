// Tree verify (spec_verify=tree) on the device: the ancestor masks of a verify tree, which the tree attention
// kernels test keys against. Node t of an n-node tree (n <= CU_TREE_MAX_NODES) has parent[t] < t, or -1 (a root:
// its parent is the committed state).
#ifndef FD_CUDA_TREE_CUH
#define FD_CUDA_TREE_CUH
#include "cuda/cuda_common.h"

// anc[t] (t < n) gets bit a set for every ancestor a of node t and for t itself: query t sees the key of node a
// exactly when that bit is set. par, anc: shared arrays of CU_TREE_MAX_NODES entries. Every thread of the block
// calls it (it ends with a barrier). A parent that is not an earlier node traps: the engine checks the tree
// before the forward, so this only guards against reading outside the mask.
static __device__ __forceinline__ void cu_tree_ancestors(unsigned long long *anc, int *par, const int32_t *parent,
                                                         int n) {
    for (int t = threadIdx.x; t < n; t += blockDim.x) par[t] = parent[t];
    __syncthreads();
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        unsigned long long m = 0;
        for (int a = t; a >= 0;) { // walks at most t + 1 nodes: every step goes to an earlier node
            m |= 1ull << a;
            const int p = par[a];
            if (p >= a) __trap();
            a = p;
        }
        anc[t] = m;
    }
    __syncthreads();
}

// Whether the query of node t (its ancestor mask anc_t, its key at q_pos = pos0 + t) sees the key at key_pos: every
// context key before pos0, and the tree keys of its ancestors and itself.
static __device__ __forceinline__ bool cu_tree_sees(unsigned long long anc_t, int64_t pos0, int64_t q_pos,
                                                    int64_t key_pos) {
    return key_pos < pos0 || (key_pos <= q_pos && (anc_t >> (key_pos - pos0) & 1ull));
}
#endif
