// DFlash / DFlash2 drafter: configuration and weights, bound from an HF drafter directory
// (architectures DFlashDraftModel, or DFlash2DraftModel with the additions of model/dflash2.h; model_type qwen3). The drafter has no embedding and no LM head of its
// own: it uses the target's. Its RMSNorms are the standard Qwen3 kind (w * x), not the target's (1 + w).
#ifndef FD_DFLASH_MODEL_H
#define FD_DFLASH_MODEL_H
#include "model/model.h"

#define FD_MAX_TAPS 32

typedef struct {
    fd_weight input_norm, post_norm;     // [d]
    fd_weight q_proj, k_proj, v_proj;    // [H hd, d], [Hkv hd, d], [Hkv hd, d]
    fd_weight o_proj;                    // [d, H hd]
    fd_weight q_norm, k_norm;            // [hd]
    fd_weight gate_proj, up_proj, down_proj; // [I, d], [I, d], [d, I]
} fd_draft_layer;

typedef struct {
    char architecture[64];
    int hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size, vocab_size;
    float rms_norm_eps, rope_theta;
    int rotary_dim;
    int block_size;
    int num_target_layers;
    int target_layer_ids[FD_MAX_TAPS];
    int n_taps;
    int mask_token_id;
    float output_multiplier;     // 1 when absent
    float final_logit_softcap;   // 0 = none
    st_set st;
    fd_weight fc;                // [d, n_taps d]
    fd_weight hidden_norm, norm; // [d]
    fd_draft_layer *layers;
    struct fd_dflash2 *v2; // DFlash2DraftModel extras (model/dflash2.h); NULL for a DFlash drafter
    fd_binder binder; // checkpoint tensors, or synthetic ones (bench --draft-random)
} fd_drafter;

// Loads DIR (config.json + safetensors) and checks it fits `target` (hidden size, vocabulary, tap layers,
// mask id). target NULL: no fit check (`flashdelta info` on a drafter). Returns 0 or -1 with fd_error set.
int drafter_load(const char *dir, const fd_model *target, fd_drafter *d);
// A drafter of the geometry in config file `config_path` with random bf16 weights.
int drafter_random(const char *config_path, const fd_model *target, uint64_t seed, fd_drafter *d);
void drafter_upload(fd_drafter *d, fd_backend *be);
// Frees the backend's copies (before the backend is destroyed).
void drafter_release(fd_drafter *d, fd_backend *be);
void drafter_free(fd_drafter *d);
#endif
