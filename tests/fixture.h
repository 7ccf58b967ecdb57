// Reference fixtures made by tools/make_fixtures.py with HF transformers (tests/data/fixtures/NAME/):
// an HF model dir + prompt.json (ids, greedy continuation) + logits.f32 ([n_prompt, vocab] fp32).
#ifndef FD_TEST_FIXTURE_H
#define FD_TEST_FIXTURE_H
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

typedef struct {
    char *dir;
    int32_t *ids;
    int n_ids;
    int32_t *greedy;
    int n_greedy;
    int vocab;
    float *logits; // [n_ids, vocab]
} fixture;

// Names of the committed fixtures in published float dtypes, NULL-terminated.
extern const char *const k_fixture_names[];
// Those and the FP8 block-scaled ones (tools/make_quant_fixtures.py: 96-token prompts, references on the
// dequantized weights; their greedy paths were not chosen for a wide top-1 margin, so tests that perturb the
// numerics on purpose, e.g. e4m3 KV, use k_fixture_names only).
extern const char *const k_all_fixture_names[];
// Loads tests/data/fixtures/NAME; returns 0 or -1 (fd_error set).
int fixture_load(const char *name, fixture *fx);
void fixture_free(fixture *fx);
// The fixture's prompt prefilled by a fresh engine over m (uploaded to be), every row's logits, and their rel-L2
// against HF's (fx->logits) in *err. Returns 0, or -1 with fd_error set. The engine is gone afterwards; m stays
// uploaded.
int fixture_prefill_rel_l2(const fixture *fx, fd_model *m, fd_backend *be, double *err);
// "1,2,3" for ids[0..n) (malloc'ed), as the CLI's --ids takes them.
char *test_ids_csv(const int32_t *ids, int n);
// The file at `path` as n floats (malloc'ed), or NULL when it is missing or of another size.
float *test_read_f32(const char *path, size_t n);
#endif
