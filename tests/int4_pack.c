// Test-side int4 packing in the published GPTQ and AWQ layouts (see int4_pack.h).
#include "int4_pack.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/weight.h"
#include "io/safetensors.h"

// AutoAWQ's gemm pack order: nibble i of a word holds column 8 c + k_order[i].
static const int k_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static const char *const k_proj[] = {"q_proj",  "k_proj",      "v_proj",    "o_proj",       "gate_proj", "up_proj",
                                     "down_proj", "in_proj_qkv", "in_proj_z", "in_proj_qkvz", "out_proj",  NULL};

typedef struct {
    char *name;
    const char *dtype;
    int ndim;
    int64_t shape[3];
    void *data; // owned
    size_t nbytes;
} ent;
typedef struct {
    ent *e;
    int n;
} elist;

static void add(elist *l, const char *name, const char *dtype, int ndim, const int64_t *shape, const void *data,
                size_t nbytes) {
    l->e = fd_realloc(l->e, sizeof(ent) * (size_t)(l->n + 1));
    ent *e = &l->e[l->n++];
    e->name = fd_strdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    for (int i = 0; i < ndim; i++) e->shape[i] = shape[i];
    e->data = fd_malloc(nbytes ? nbytes : 1);
    memcpy(e->data, data, nbytes);
    e->nbytes = nbytes;
}

// safetensors: u64 header length, the JSON header (padded with spaces to 8 bytes), the data in entry order.
static int write_st(const elist *l, const char *path) {
    size_t cap = 1 << 16, used = 0, off = 0;
    char *h = fd_malloc(cap);
    used += (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < l->n; i++) {
        const ent *e = &l->e[i];
        if (cap - used < 512 + strlen(e->name)) h = fd_realloc(h, cap *= 2);
        used += (size_t)snprintf(h + used, cap - used, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e->name, e->dtype);
        for (int d = 0; d < e->ndim; d++)
            used += (size_t)snprintf(h + used, cap - used, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        used += (size_t)snprintf(h + used, cap - used, "],\"data_offsets\":[%zu,%zu]}", off, off + e->nbytes);
        off += e->nbytes;
    }
    h[used++] = '}';
    while (used % 8) h[used++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return fd_error_set("%s: cannot write", path);
    }
    const uint64_t hl = used;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, used, f);
    for (int i = 0; i < l->n; i++) fwrite(l->e[i].data, 1, l->e[i].nbytes, f);
    fclose(f);
    free(h);
    return 0;
}

static void elist_free(elist *l) {
    for (int i = 0; i < l->n; i++) free(l->e[i].name), free(l->e[i].data);
    free(l->e);
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int is_proj(const char *module) {
    const char *last = strrchr(module, '.');
    last = last ? last + 1 : module;
    for (int i = 0; k_proj[i]; i++)
        if (!strcmp(last, k_proj[i])) return 1;
    return 0;
}

// Quantizes W [N, K] as the spec says and appends the packed tensors of `module` to `q`, its dequantized F32 weight
// to `d` under `wname`.
static void quant_module(const int4_spec *s, const char *module, const char *wname, const float *W, int64_t N,
                         int64_t K, elist *q, elist *d, uint64_t *seed) {
    const int64_t gsz = s->group ? s->group : K, G = (K + gsz - 1) / gsz, N8 = N / 8;
    int32_t *gidx = fd_malloc(sizeof(int32_t) * (size_t)K);
    for (int64_t k = 0; k < K; k++) gidx[k] = (int32_t)(k / gsz);
    if (s->desc_act) { // act order: the i-th input in a random order belongs to group i / gsz
        int64_t *perm = fd_malloc(sizeof(int64_t) * (size_t)K);
        for (int64_t k = 0; k < K; k++) perm[k] = k;
        for (int64_t k = K - 1; k > 0; k--) {
            const int64_t j = (int64_t)(rnd(seed) % (uint64_t)(k + 1)), t = perm[k];
            perm[k] = perm[j], perm[j] = t;
        }
        for (int64_t i = 0; i < K; i++) gidx[perm[i]] = (int32_t)(i / gsz);
        free(perm);
    }
    const int zlo = !s->awq && !s->v2; // v1 cannot store z = 0 (it stores z - 1)
    uint16_t *sc = fd_calloc((size_t)(G * N), 2);
    int *z = fd_calloc((size_t)(G * N), sizeof(int));
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            float lo = 0, hi = 0, amax = 0;
            for (int64_t k = 0; k < K; k++)
                if (gidx[k] == g) {
                    const float w = W[n * K + k];
                    lo = fminf(lo, w), hi = fmaxf(hi, w), amax = fmaxf(amax, fabsf(w));
                }
            const int sym = !s->awq && s->sym;
            float sf = sym ? amax / 7.0f : (hi - lo) / 15.0f;
            if (!(sf > 1e-4f)) sf = 1e-4f;
            sc[g * N + n] = fd_f32_to_f16(sf);
            sf = fd_f16_to_f32(sc[g * N + n]);
            int zz = sym ? 8 : (int)lrintf(-lo / sf);
            z[g * N + n] = zz < zlo ? zlo : zz > 15 ? 15 : zz;
        }
    uint32_t *qw = fd_calloc((size_t)(N * K / 8), 4), *qz = fd_calloc((size_t)(G * N8), 4);
    float *deq = fd_malloc(sizeof(float) * (size_t)(N * K));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++) {
            const int64_t g = gidx[k];
            const float sf = fd_f16_to_f32(sc[g * N + n]);
            const int zz = z[g * N + n];
            long v = lrintf(W[n * K + k] / sf) + zz;
            const int qq = v < 0 ? 0 : v > 15 ? 15 : (int)v;
            deq[n * K + k] = s->awq ? (float)(qq - zz) * sf : sf * (float)(qq - zz);
            if (s->awq) {
                int i = 0;
                while (k_order[i] != n % 8) i++;
                qw[k * N8 + n / 8] |= (uint32_t)qq << (4 * i);
            } else {
                qw[(k / 8) * N + n] |= (uint32_t)qq << (4 * (k % 8));
            }
        }
    for (int64_t g = 0; g < G; g++)
        for (int64_t n = 0; n < N; n++) {
            int pos = (int)(n % 8);
            if (s->awq) {
                pos = 0;
                while (k_order[pos] != n % 8) pos++;
            }
            qz[g * N8 + n / 8] |= (uint32_t)(z[g * N + n] - zlo) << (4 * pos);
        }
    char nm[600];
    const int64_t qs_g[2] = {K / 8, N}, qs_a[2] = {K, N8}, zs[2] = {G, N8}, ss[2] = {G, N}, ws[2] = {N, K};
    snprintf(nm, sizeof nm, "%s.qweight", module);
    add(q, nm, "I32", 2, s->awq ? qs_a : qs_g, qw, (size_t)(N * K / 2));
    snprintf(nm, sizeof nm, "%s.qzeros", module);
    add(q, nm, "I32", 2, zs, qz, (size_t)(G * N8) * 4);
    snprintf(nm, sizeof nm, "%s.scales", module);
    add(q, nm, "F16", 2, ss, sc, (size_t)(G * N) * 2);
    if (!s->awq) {
        snprintf(nm, sizeof nm, "%s.g_idx", module);
        add(q, nm, "I32", 1, &K, gidx, (size_t)K * 4);
    }
    add(d, wname, "F32", 2, ws, deq, (size_t)(N * K) * 4);
    free(gidx), free(sc), free(z), free(qw), free(qz), free(deq);
}

static int write_config(const char *src, const char *dst, const char *qc_json) {
    json_error_t err;
    json_t *root = json_load_file(src, 0, &err);
    if (!root) return fd_error_set("%s: %s", src, err.text);
    json_object_del(root, "quantization_config");
    if (qc_json) {
        json_t *qc = json_loads(qc_json, 0, &err);
        if (!qc) {
            json_decref(root);
            return fd_error_set("quantization_config text: %s", err.text);
        }
        json_object_set_new(root, "quantization_config", qc);
    }
    const int rc = json_dump_file(root, dst, JSON_INDENT(1));
    json_decref(root);
    return rc ? fd_error_set("%s: cannot write", dst) : 0;
}

int int4_make(const char *fixture, const int4_spec *s, const char *dir) {
    char *src = fd_sprintf("tests/data/fixtures/%s", fixture);
    char *qd = fd_sprintf("%s/int4", dir), *dd = fd_sprintf("%s/deq", dir);
    mkdir(dir, 0700);
    mkdir(qd, 0700);
    mkdir(dd, 0700);
    st_set st;
    int rc = st_open_dir(src, &st), count = 0;
    uint64_t seed = s->seed | 1;
    elist q = {0}, d = {0};
    for (int i = 0; !rc && i < st.n_tensors; i++) {
        const st_tensor *t = &st.tensors[i];
        char module[512];
        const size_t n = strlen(t->name);
        int quant = t->ndim == 2 && n > 7 && n < sizeof module && !strcmp(t->name + n - 7, ".weight");
        if (quant) {
            memcpy(module, t->name, n - 7);
            module[n - 7] = 0;
            quant = is_proj(module) && (!s->quantize || s->quantize(module));
        }
        if (!quant) {
            add(&q, t->name, fd_dtype_name(t->dtype), t->ndim, t->shape, t->data, t->nbytes);
            add(&d, t->name, fd_dtype_name(t->dtype), t->ndim, t->shape, t->data, t->nbytes);
            continue;
        }
        fd_weight w = {.name = t->name, .dtype = t->dtype, .rows = t->shape[0], .cols = t->shape[1], .data = t->data};
        float *W = fd_malloc(sizeof(float) * (size_t)(w.rows * w.cols));
        fd_weight_f32(&w, 0, w.rows * w.cols, W);
        quant_module(s, module, t->name, W, w.rows, w.cols, &q, &d, &seed);
        if (s->also_dense && !strcmp(s->also_dense, module))
            add(&q, t->name, fd_dtype_name(t->dtype), t->ndim, t->shape, t->data, t->nbytes);
        free(W);
        count++;
    }
    char *p;
    if (!rc) rc = write_st(&q, p = fd_sprintf("%s/model.safetensors", qd)), free(p);
    if (!rc) rc = write_st(&d, p = fd_sprintf("%s/model.safetensors", dd)), free(p);
    char *cs = fd_sprintf("%s/config.json", src), *cq = fd_sprintf("%s/config.json", qd),
         *cd = fd_sprintf("%s/config.json", dd);
    if (!rc) rc = write_config(cs, cq, s->qc_json);
    if (!rc) rc = write_config(cs, cd, NULL);
    free(cs), free(cq), free(cd);
    elist_free(&q);
    elist_free(&d);
    st_close(&st);
    free(src), free(qd), free(dd);
    return rc ? -1 : count;
}

void int4_rm(const char *dir) {
    static const char *const sub[] = {"int4", "deq"}, *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        for (int f = 0; f < 2; f++) {
            char *p = fd_sprintf("%s/%s/%s", dir, sub[i], files[f]);
            unlink(p);
            free(p);
        }
        char *p = fd_sprintf("%s/%s", dir, sub[i]);
        rmdir(p);
        free(p);
    }
    rmdir(dir);
}

int int4_patch_header(const char *dir, const char *from, const char *to) {
    char *p = fd_sprintf("%s/int4/model.safetensors", dir);
    size_t len;
    char *st = fd_read_file(p, &len);
    int rc = -1;
    if (st && strlen(from) == strlen(to)) {
        uint64_t hl;
        memcpy(&hl, st, 8);
        char *h = memmem(st + 8, hl, from, strlen(from));
        if (h) {
            memcpy(h, to, strlen(to));
            FILE *f = fopen(p, "wb");
            rc = f && fwrite(st, 1, len, f) == len ? 0 : -1;
            if (f) fclose(f);
        }
    }
    if (rc) fd_error_set("int4_patch_header: '%s' not found in %s", from, p);
    free(st);
    free(p);
    return rc;
}

int int4_patch_i32(const char *dir, const char *name, int64_t index, int32_t value) {
    char *p = fd_sprintf("%s/int4/model.safetensors", dir);
    st_set st;
    int rc = st_open_file(p, &st);
    long off = -1;
    if (!rc) {
        const st_tensor *t = st_find(&st, name);
        if (t && t->dtype == FD_I32 && (size_t)(index + 1) * 4 <= t->nbytes)
            off = (long)((const char *)t->data - (const char *)st.files[0].map) + (long)index * 4;
        st_close(&st);
    }
    FILE *f = off >= 0 ? fopen(p, "r+b") : NULL;
    rc = f && !fseek(f, off, SEEK_SET) && fwrite(&value, 4, 1, f) == 1 ? 0 : -1;
    if (f) fclose(f);
    if (rc) fd_error_set("int4_patch_i32: %s[%lld] not patched in %s", name, (long long)index, p);
    free(p);
    return rc;
}
