// Loader for the HF reference fixtures (see fixture.h).
#include "fixture.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/engine.h"
#include "test.h"

const char *const k_fixture_names[] = {"qwen35_dense_tied", "qwen35_vl_sharded", "qwen3_next_moe", "qwen35_moe",
                                       "qwen35_moe_kv1", NULL};
const char *const k_all_fixture_names[] = {"qwen35_dense_tied", "qwen35_vl_sharded", "qwen3_next_moe", "qwen35_moe",
                                           "qwen35_moe_kv1",    "fp8_qwen35_dense",  "fp8_qwen3_next_moe",
                                           "fp8_qwen35_moe",    NULL};

static int read_ids(json_t *root, const char *key, int32_t **out, int *n) {
    json_t *a = json_object_get(root, key);
    if (!json_is_array(a)) return fd_error_set("prompt.json: '%s' is not an array", key);
    *n = (int)json_array_size(a);
    *out = fd_malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++) (*out)[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return 0;
}

int fixture_load(const char *name, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    fx->dir = fd_sprintf("tests/data/fixtures/%s", name);
    char *p = fd_path_join(fx->dir, "prompt.json");
    json_error_t err;
    json_t *root = json_load_file(p, 0, &err);
    free(p);
    if (!root) return fd_error_set("%s/prompt.json: %s", fx->dir, err.text);
    int rc = read_ids(root, "ids", &fx->ids, &fx->n_ids);
    if (!rc) rc = read_ids(root, "greedy", &fx->greedy, &fx->n_greedy);
    fx->vocab = (int)json_integer_value(json_object_get(root, "vocab_size"));
    json_decref(root);
    if (rc) return -1;
    size_t len;
    p = fd_path_join(fx->dir, "logits.f32");
    char *raw = fd_read_file(p, &len);
    free(p);
    if (!raw) return -1;
    if (len != (size_t)fx->n_ids * fx->vocab * sizeof(float)) {
        free(raw);
        return fd_error_set("%s/logits.f32: %zu bytes, expected %d x %d floats", fx->dir, len, fx->n_ids, fx->vocab);
    }
    fx->logits = (float *)raw;
    return 0;
}

void fixture_free(fixture *fx) {
    free(fx->dir);
    free(fx->ids);
    free(fx->greedy);
    free(fx->logits);
    memset(fx, 0, sizeof *fx);
}

char *test_ids_csv(const int32_t *ids, int n) {
    const size_t cap = (size_t)n * 12 + 1;
    char *s = fd_malloc(cap);
    size_t used = 0;
    s[0] = 0;
    for (int i = 0; i < n; i++) used += (size_t)snprintf(s + used, cap - used, "%s%d", i ? "," : "", ids[i]);
    return s;
}

float *test_read_f32(const char *path, size_t n) {
    size_t len = 0;
    char *raw = fd_read_file(path, &len);
    if (raw && len != n * 4) {
        free(raw);
        return NULL;
    }
    return (float *)raw;
}

int fixture_prefill_rel_l2(const fixture *fx, fd_model *m, fd_backend *be, double *err) {
    model_upload(m, be);
    fd_engine_opts eo;
    engine_default_opts(&eo);
    eo.capacity = fx->n_ids + 1;
    eo.max_batch = fx->n_ids;
    fd_engine e;
    FD_TRY(engine_init(&e, m, be, &eo));
    float *lg = fd_malloc(sizeof(float) * (size_t)fx->n_ids * (size_t)fx->vocab);
    const int rc = engine_prefill(&e, fx->ids, fx->n_ids, 0, lg, 1);
    if (rc == 0) *err = test_rel_l2(lg, fx->logits, (size_t)fx->n_ids * (size_t)fx->vocab);
    free(lg);
    engine_free(&e);
    return rc;
}
