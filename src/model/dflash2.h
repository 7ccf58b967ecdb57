// DFlash2 drafter (architectures DFlash2DraftModel): the DFlash drafter plus
//  - a grouped dynamic causal conv around the attention and the MLP sublayer of every draft layer
//    (`layers.N.attention_conv` / `layers.N.mlp_conv`: base_kernel [2, K, d], kernel_projection [2 K d/group, d]);
//  - a candidate selector (`candidate_selector.*`: hidden_projection [R, d], predecessor/successor codebooks
//    [V, R]) that walks each draft position's top-k candidates from the anchor;
//  - optional `sliding_attention` layers (non-causal, symmetric window), as the published drafters have.
// The config fields live in `dflash_config`: conv_kernel_size (2), conv_group_size (16), selector_rank (256),
// selector_top_k (16). Loaded through drafter_load (model/dflash.h), which calls in here.
#ifndef FD_DFLASH2_MODEL_H
#define FD_DFLASH2_MODEL_H
#include <jansson.h>

#include "model/dflash.h"

#define FD_DFLASH2_MAX_TOPK 256

typedef struct {
    fd_weight base; // base_kernel as [2, K d]: row 0 the taps before the sublayer, row 1 those after it
    fd_weight proj; // kernel_projection [2 K G, d], G = d / group: per row (pre|post) x tap x group
} fd_dflash2_conv;

typedef struct fd_dflash2 {
    int conv_kernel, conv_group; // taps K; channels sharing one dynamic correction
    int rank, top_k;
    int *window;                       // [layers] symmetric sliding window, 0 = full attention
    fd_dflash2_conv *attn_conv, *mlp_conv; // [layers]
    fd_weight hidden_proj;             // [R, d]: W_h, applied to the final-normed draft hidden
    fd_weight pred_codebook, succ_codebook; // [V, R]; read on the host by the selector walk (never uploaded)
} fd_dflash2;

// Reads the DFlash2 fields of a drafter config (dc = its dflash_config) into d->v2, after the DFlash fields.
int dflash2_parse_config(json_t *root, json_t *dc, const char *path, fd_drafter *d);
// Binds the DFlash2 tensors (from d->st, or synthetic when d->synthetic).
int dflash2_bind(fd_drafter *d);
void dflash2_upload(fd_drafter *d, fd_backend *be);
// Calls fn on every DFlash2 weight that dflash2_upload gives the backend (the codebooks stay on the host).
void dflash2_for_each_weight(fd_drafter *d, fd_backend *be, void (*fn)(fd_backend *, fd_weight *));
void dflash2_free(fd_drafter *d);
#endif
