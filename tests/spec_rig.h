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
// tests/data/dflash/DRAFTER/FILE as n floats, NULL if missing or of another size.
float *dflash_fixture_f32(const char *drafter, const char *file, size_t n);
// tests/data/dflash/DRAFTER/draft.json (the reference's anchor, argmax and selector paths), NULL if missing.
json_t *dflash_fixture_meta(const char *drafter);
// 1 when the json array `key` of meta equals got[0..n).
int dflash_meta_ids_equal(json_t *meta, const char *key, const int32_t *got, int n);
#endif
