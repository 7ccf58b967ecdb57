// DFlash test rig (see spec_rig.h).
#include "spec_rig.h"

#include <stdlib.h>
#include <string.h>

int spec_rig_open(spec_rig *r, fd_backend *be, const char *target, const char *drafter, int block, int64_t capacity) {
    memset(r, 0, sizeof *r);
    if (fixture_load(target, &r->fx) || model_load(r->fx.dir, &r->m)) return -1;
    model_upload(&r->m, be);
    char *dir = fd_sprintf("tests/data/dflash/%s", drafter);
    int rc = drafter_load(dir, &r->m, &r->d);
    free(dir);
    if (rc) return -1;
    drafter_upload(&r->d, be);
    fd_engine_opts o;
    engine_default_opts(&o);
    o.capacity = capacity ? capacity : r->fx.n_ids + 64;
    o.max_batch = 64;
    FD_TRY(engine_init(&r->e, &r->m, be, &o));
    return dflash_init(&r->s, &r->e, &r->d, block);
}

void spec_rig_close(spec_rig *r) {
    dflash_free(&r->s);
    engine_free(&r->e);
    drafter_free(&r->d);
    model_free(&r->m);
    fixture_free(&r->fx);
}

float *dflash_fixture_f32(const char *drafter, const char *file, size_t n) {
    char *p = fd_sprintf("tests/data/dflash/%s/%s", drafter, file);
    float *f = test_read_f32(p, n);
    free(p);
    return f;
}

json_t *dflash_fixture_meta(const char *drafter) {
    char *p = fd_sprintf("tests/data/dflash/%s/draft.json", drafter);
    json_t *j = json_load_file(p, 0, NULL);
    free(p);
    return j;
}

int dflash_meta_ids_equal(json_t *meta, const char *key, const int32_t *got, int n) {
    json_t *a = json_object_get(meta, key);
    if ((int)json_array_size(a) != n) return 0;
    for (int i = 0; i < n; i++)
        if (json_integer_value(json_array_get(a, (size_t)i)) != got[i]) return 0;
    return 1;
}
