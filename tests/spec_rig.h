// A target fixture, a DFlash (or DFlash2) drafter fixture and the engine + speculative state over them, for the
// DFlash tests (tests/data/fixtures/TARGET, tests/data/dflash/DRAFTER).
#ifndef FD_TEST_SPEC_RIG_H
#define FD_TEST_SPEC_RIG_H
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
#endif
