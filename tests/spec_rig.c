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

void spec_rig_release_close(spec_rig *r, fd_backend *be) {
    drafter_release(&r->d, be);
    model_release(&r->m, be);
    spec_rig_close(r);
}

int spec_rig_plain_greedy(spec_rig *r, fd_backend *be, fd_engine *plain, int32_t *ref) {
    FD_TRY(engine_init(plain, &r->m, be, &r->e.opt));
    if (engine_generate_greedy(plain, r->fx.ids, r->fx.n_ids, 64, r->fx.n_greedy, ref) == 0) return 0;
    engine_free(plain);
    return -1;
}

int trained_pair_load(fd_backend *be, const fd_load_opts *lo, fd_model *m, fd_drafter *d) {
    FD_TRY(model_load_with(TRAINED_TARGET_DIR, lo, m));
    model_upload(m, be);
    if (drafter_load(TRAINED_DRAFT_DIR, m, d)) {
        model_release(m, be);
        model_free(m);
        return -1;
    }
    drafter_upload(d, be);
    return 0;
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

json_t *held_out_prompts(void) {
    json_error_t err;
    json_t *prompts = json_load_file("tests/data/trained/val_prompts.json", 0, &err);
    if (!json_is_array(prompts) || json_array_size(prompts) < 1) {
        json_decref(prompts);
        fd_error_set("tests/data/trained/val_prompts.json: %s", prompts ? "not a non-empty array" : err.text);
        return NULL;
    }
    return prompts;
}

int32_t *held_out_ids(json_t *prompts, size_t p, int *n) {
    json_t *list = json_object_get(json_array_get(prompts, p), "ids");
    *n = (int)json_array_size(list);
    int32_t *ids = fd_malloc(sizeof(int32_t) * (size_t)(*n > 0 ? *n : 1));
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(list, (size_t)i));
    return ids;
}

int held_out_max_len(json_t *prompts) {
    int max_n = 0;
    for (size_t p = 0; p < json_array_size(prompts); p++) {
        const int n = (int)json_array_size(json_object_get(json_array_get(prompts, p), "ids"));
        max_n = n > max_n ? n : max_n;
    }
    return max_n;
}

int held_out_spec_vs_plain(fd_engine *plain, fd_dflash *s, const int32_t *ids, int n, int n_new, int32_t *out,
                           int64_t *rounds, int64_t *emitted) {
    int32_t *ref = fd_malloc(sizeof(int32_t) * (size_t)n_new);
    engine_reset(plain);
    int rc = engine_generate_greedy(plain, ids, n, 64, n_new, ref);
    if (rc == 0) {
        engine_reset(s->tgt);
        dflash_reset(s);
        rc = dflash_generate(s, ids, n, 64, n_new, NULL, out);
    }
    int same = 0;
    while (rc == 0 && same < n_new && out[same] == ref[same]) same++;
    free(ref);
    if (rc) return -1;
    *rounds += s->st.rounds;
    *emitted += s->st.emitted;
    return same;
}

void spec_pair_free(fd_dflash *s, fd_engine *plain, fd_drafter *d, fd_model *m, fd_backend *be) {
    fd_engine *tgt = s->tgt;
    dflash_free(s);
    engine_free(tgt);
    engine_free(plain);
    drafter_release(d, be);
    drafter_free(d);
    model_release(m, be);
    model_free(m);
}
