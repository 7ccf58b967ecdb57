// A target fixture, a DFlash (or DFlash2) drafter fixture and the engine + speculative state over them, for the
// DFlash tests (tests/data/fixtures/TARGET, tests/data/dflash/DRAFTER).
#ifndef FD_TEST_SPEC_RIG_H
#define FD_TEST_SPEC_RIG_H
#include <jansson.h>

#include "engine/dflash.h"
#include "fixture.h"

typedef struct {
    fd_model m;
    fd_drafter d;
    fd_engine e;
    fd_dflash s;
    fixture fx;
} spec_rig;

// block 0 = the drafter's; capacity 0 = prompt + 64. Prefill budget 64. Returns 0 or -1 (fd_error set).
int spec_rig_open(spec_rig *r, fd_backend *be, const char *target, const char *drafter, int block, int64_t capacity);
void spec_rig_close(spec_rig *r);
// spec_rig_close after releasing the model's and the drafter's copies on `be` (the GPU tests open many rigs in one
// process).
void spec_rig_release_close(spec_rig *r, fd_backend *be);
// The plain greedy reference beside a rig: inits `plain` on r's model and backend with r's engine options and
// generates the fixture's r->fx.n_greedy new tokens after its prompt (prefill budget 64) into ref. Returns 0 or -1
// (fd_error set; `plain` needs engine_free only on 0).
int spec_rig_plain_greedy(spec_rig *r, fd_backend *be, fd_engine *plain, int32_t *ref);
// tests/data/dflash/DRAFTER/FILE as n floats, NULL if missing or of another size.
float *dflash_fixture_f32(const char *drafter, const char *file, size_t n);
// tests/data/dflash/DRAFTER/draft.json (the reference's anchor, argmax and selector paths), NULL if missing.
json_t *dflash_fixture_meta(const char *drafter);
// 1 when the json array `key` of meta equals got[0..n).
int dflash_meta_ids_equal(json_t *meta, const char *key, const int32_t *got, int n);

// ---- the trained pair (models/tiny-qwen35 + models/tiny-qwen35-dflash, tools/train_tiny.py) ----
#define TRAINED_TARGET_DIR "models/tiny-qwen35"
#define TRAINED_DRAFT_DIR  "models/tiny-qwen35-dflash"
// Loads the pair (the target with load options lo, NULL: as published) and uploads both to be. Returns 0 or -1
// (fd_error set).
int trained_pair_load(fd_backend *be, const fd_load_opts *lo, fd_model *m, fd_drafter *d);
// Its held-out prompts (tests/data/trained/val_prompts.json: [{"ids": [...]}, ...]):
// The prompts array, or NULL with fd_error set.
json_t *held_out_prompts(void);
// Prompt p's ids (malloc'ed, *n of them).
int32_t *held_out_ids(json_t *prompts, size_t p, int *n);
// The longest prompt's length (for an engine's capacity).
int held_out_max_len(json_t *prompts);
// One prompt both ways from a reset: plain greedy on `plain`, then speculative greedy through s (on its own target
// engine), n_new tokens each after ids[0..n), prefill budget 64. Returns how many leading ids agree (n_new:
// identical; the speculative ids in out[0..n_new)) and adds the round's counts to *rounds and *emitted; -1 with
// fd_error set when a generation fails.
int held_out_spec_vs_plain(fd_engine *plain, fd_dflash *s, const int32_t *ids, int n, int n_new, int32_t *out,
                           int64_t *rounds, int64_t *emitted);
// Frees a speculative pair set up by hand, in the order its parts depend on each other: s, its target engine,
// the plain engine beside it, the drafter and the model (each released from be first).
void spec_pair_free(fd_dflash *s, fd_engine *plain, fd_drafter *d, fd_model *m, fd_backend *be);
#endif
