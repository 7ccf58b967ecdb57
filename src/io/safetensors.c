// safetensors reader. Format: 8-byte little-endian header length H, then H bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the start of the data section.
//
// st_parse is the only code that touches untrusted bytes, so it validates everything before any pointer
// into the buffer is formed: the header must fit in the file, every [begin, end) must lie inside the data
// section, and end - begin must equal prod(shape) * dtype size computed with overflow checks.
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json_util.h"

// Tensor counts are stored in an int; real checkpoints have at most tens of thousands per file.
#define ST_MAX_TENSORS (1 << 24)

static int dtype_from_name(const char *s, fd_dtype *out) {
    for (int t = 0; t < FD_DTYPE_COUNT; t++) {
        if (!strcmp(s, fd_dtype_name((fd_dtype)t))) {
            *out = (fd_dtype)t;
            return 0;
        }
    }
    return -1;
}

static void free_tensors(st_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free(t[i].name);
    free(t);
}

// By data position: begin, then end (an empty tensor sorts before a non-empty one starting at the same byte).
static int cmp_tensor_span(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    const uint8_t *xa = x->data, *ya = y->data;
    if (xa != ya) return xa < ya ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

// The format's own rule (its reference validator): the tensors tile the data section exactly, in some order, with
// no overlap, gap or trailing byte. An overlap would let one tensor alias another's bytes.
static int check_layout(const char *path, st_tensor *ts, int n, const uint8_t *data, size_t data_len) {
    st_tensor **by = fd_malloc((size_t)(n ? n : 1) * sizeof *by);
    for (int i = 0; i < n; i++) by[i] = &ts[i];
    qsort(by, (size_t)n, sizeof *by, cmp_tensor_span);
    size_t at = 0;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const size_t b = (size_t)((const uint8_t *)by[i]->data - data), e = b + by[i]->nbytes;
        if (b < at)
            rc = fd_error_set("%s: tensor '%s': data_offsets [%zu, %zu] overlap tensor '%s' (which ends at %zu)", path,
                              FD_SAFE(by[i]->name), b, e, FD_SAFE(by[i - 1]->name), at);
        else if (b > at)
            rc = fd_error_set("%s: tensor '%s': data_offsets [%zu, %zu] leave a gap of %zu bytes before it", path,
                              FD_SAFE(by[i]->name), b, e, b - at);
        at = e;
    }
    if (!rc && at != data_len)
        rc = fd_error_set("%s: the data section has %zu bytes after the last tensor (the offsets must cover it "
                          "exactly)",
                          path, data_len - at);
    free(by);
    return rc;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

// Reads a non-negative JSON integer; jansson stores integers as long long.
static int get_nonneg(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0) return -1;
    *out = (uint64_t)x;
    return 0;
}

// Validates one header entry and fills *t (name not set). data/data_len describe the data section.
static int parse_entry(const char *path, const char *name, const json_t *e, const uint8_t *data, size_t data_off,
                       size_t data_len, st_tensor *t) {
    if (!json_is_object(e))
        return fd_error_set("%s: tensor '%s': header entry must be an object, got %s", path, name, fd_json_kind(e));
    const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
                 *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return fd_error_set("%s: tensor '%s': 'dtype' must be a string, got %s", path, name,
                            jd ? fd_json_kind(jd) : "nothing");
    if (dtype_from_name(json_string_value(jd), &t->dtype))
        return fd_error_set("%s: tensor '%s': unsupported dtype '%s' (expected one of F32 F16 BF16 I32 I64 U8 I8 "
                            "F64 BOOL F8_E4M3)",
                            path, name, FD_SAFE(json_string_value(jd)));
    if (!json_is_array(js))
        return fd_error_set("%s: tensor '%s': 'shape' must be an array, got %s", path, name,
                            js ? fd_json_kind(js) : "nothing");
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return fd_error_set("%s: tensor '%s': %zu dimensions, at most %d supported", path, name, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    // Element count and byte size with overflow checks; a zero dimension makes an empty tensor.
    uint64_t count = 1;
    int overflow = 0;
    for (size_t d = 0; d < nd; d++) {
        uint64_t dim;
        if (get_nonneg(json_array_get(js, d), &dim) || dim > (uint64_t)INT64_MAX)
            return fd_error_set("%s: tensor '%s': shape[%zu] must be a non-negative integer", path, name, d);
        t->shape[d] = (int64_t)dim;
        if (__builtin_mul_overflow(count, dim, &count)) overflow = 1;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(count, (uint64_t)fd_dtype_size(t->dtype), &nbytes) || nbytes > SIZE_MAX)
        return fd_error_set("%s: tensor '%s': shape is too large (element count overflows)", path, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return fd_error_set("%s: tensor '%s': 'data_offsets' must be an array [begin, end]", path, name);
    uint64_t begin, end;
    if (get_nonneg(json_array_get(jo, 0), &begin) || get_nonneg(json_array_get(jo, 1), &end))
        return fd_error_set("%s: tensor '%s': 'data_offsets' must hold two non-negative integers", path, name);
    if (begin > end)
        return fd_error_set("%s: tensor '%s': data_offsets [%llu, %llu] has begin > end", path, name,
                            (unsigned long long)begin, (unsigned long long)end);
    if (end > data_len)
        return fd_error_set("%s: tensor '%s': data_offsets [%llu, %llu] run past the data section (%zu bytes); "
                            "file truncated?",
                            path, name, (unsigned long long)begin, (unsigned long long)end, data_len);
    if (end - begin != nbytes)
        return fd_error_set("%s: tensor '%s': data_offsets span %llu bytes but shape and dtype %s need %llu", path,
                            name, (unsigned long long)(end - begin), fd_dtype_name(t->dtype),
                            (unsigned long long)nbytes);
    // Consumers read elements through typed pointers; the mapping is page-aligned, so an element-aligned file
    // offset makes those reads aligned. The reference writer and HF's save_pretrained always align tensors.
    size_t esz = fd_dtype_size(t->dtype);
    if (nbytes > 0 && (data_off + begin) % esz != 0)
        return fd_error_set("%s: tensor '%s': data at file offset %llu is not aligned to its %zu-byte dtype %s", path,
                            name, (unsigned long long)(data_off + begin), esz, fd_dtype_name(t->dtype));
    t->nbytes = (size_t)nbytes;
    t->data = data + begin;
    t->file = 0;
    return 0;
}

int st_parse(const uint8_t *buf, size_t len, const char *path, st_tensor **tensors, int *n) {
    *tensors = NULL;
    *n = 0;
    if (len < 8)
        return fd_error_set("%s: file is %zu bytes, too short for the 8-byte safetensors header length", path, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > len - 8)
        return fd_error_set("%s: header length %llu exceeds the file size (%zu bytes); truncated or not a "
                            "safetensors file",
                            path, (unsigned long long)hlen, len);
    if (hlen < 2)
        return fd_error_set("%s: header length %llu is too small for a JSON object", path, (unsigned long long)hlen);
    json_error_t jerr;
    // JSON_REJECT_DUPLICATES: otherwise jansson keeps the last of two equal names and a corrupt header
    // could silently point a tensor at the wrong bytes.
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (strstr(jerr.text, "duplicate"))
            return fd_error_set("%s: duplicate tensor name in header (%s)", path, FD_SAFE(jerr.text));
        return fd_error_set("%s: corrupt JSON header at line %d column %d: %s", path, jerr.line, jerr.column,
                            FD_SAFE(jerr.text));
    }
    if (!json_is_object(root)) {
        fd_error_set("%s: JSON header must be an object, got %s", path, fd_json_kind(root));
        json_decref(root);
        return -1;
    }
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    size_t cap = json_object_size(root);
    if (cap > ST_MAX_TENSORS) {
        json_decref(root);
        return fd_error_set("%s: %zu tensors in one header, at most %d supported", path, cap, ST_MAX_TENSORS);
    }
    st_tensor *ts = fd_calloc(cap ? cap : 1, sizeof *ts);
    int cnt = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) continue; // free-form string map; we do not use it
        if (!key[0]) {
            fd_error_set("%s: tensor with an empty name in header", path);
            goto fail;
        }
        st_tensor *t = &ts[cnt];
        memset(t, 0, sizeof *t);
        if (parse_entry(path, FD_SAFE(key), val, data, 8 + (size_t)hlen, data_len, t)) goto fail;
        t->name = fd_strdup(key);
        cnt++;
    }
    json_decref(root);
    root = NULL;
    if (check_layout(path, ts, cnt, data, data_len)) {
        free_tensors(ts, cnt);
        return -1;
    }
    qsort(ts, (size_t)cnt, sizeof *ts, cmp_tensor_name);
    // The JSON parser already rejects equal keys; this guards the sorted-array invariant st_find relies on.
    for (int i = 1; i < cnt; i++) {
        if (!strcmp(ts[i - 1].name, ts[i].name)) {
            fd_error_set("%s: duplicate tensor '%s' in header", path, FD_SAFE(ts[i].name));
            free_tensors(ts, cnt);
            return -1;
        }
    }
    *tensors = ts;
    *n = cnt;
    return 0;
fail:
    json_decref(root);
    free_tensors(ts, cnt);
    return -1;
}

// ---- files and directories ----

// mmaps one file and parses it; on success appends it to set->files and returns its tensors (file index set).
static int open_one(st_set *set, const char *path, st_tensor **tensors, int *n) {
    // O_NONBLOCK: a FIFO given as a shard must fail the regular-file check below, not hang in open().
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return fd_error_set("%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return fd_error_set("%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return fd_error_set("%s: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return fd_error_set("%s: file is %zu bytes, too short for the 8-byte safetensors header length", path, len);
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); // the mapping keeps the file referenced
    if (map == MAP_FAILED) return fd_error_set("%s: mmap of %zu bytes failed: %s", path, len, strerror(e));
    if (st_parse(map, len, path, tensors, n)) {
        munmap(map, len);
        return -1;
    }
    int idx = set->n_files;
    set->files = fd_realloc(set->files, (size_t)(idx + 1) * sizeof *set->files);
    set->files[idx].path = fd_strdup(path);
    set->files[idx].map = map;
    set->files[idx].map_len = len;
    set->n_files = idx + 1;
    for (int i = 0; i < *n; i++) (*tensors)[i].file = idx;
    return 0;
}

int st_open_file(const char *path, st_set *set) {
    memset(set, 0, sizeof *set);
    st_tensor *ts;
    int n;
    if (open_one(set, path, &ts, &n)) {
        st_close(set);
        return -1;
    }
    set->tensors = ts;
    set->n_tensors = n;
    return 0;
}

// Finds `name` in a sorted tensor array; returns its index or -1.
static int find_index(const st_tensor *ts, int n, const char *name) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(ts[mid].name, name);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

const st_tensor *st_find(const st_set *set, const char *name) {
    int i = find_index(set->tensors, set->n_tensors, name);
    return i < 0 ? NULL : &set->tensors[i];
}

static int has_control_char(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 1;
    return 0;
}

// Does the relative name f have a ".." component (a way out of the model directory)?
static int has_dotdot(const char *f) {
    for (const char *p = f; *p;) {
        const char *q = strchr(p, '/');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') return 1;
        p += n + (q != NULL);
    }
    return 0;
}

// The path of shard f, resolved, if it stays inside the model directory (real path rdir). A symbolic link that
// leads out is refused unless FD_ALLOW_EXTERNAL_SHARDS=1 (a Hugging Face cache snapshot links every file to
// ../../blobs). The resolved path is what gets opened, so the check and the open see the same file. NULL + fd_error.
static char *shard_path(const char *dir, const char *rdir, const char *index_path, const char *f) {
    if (has_dotdot(f)) {
        fd_error_set("%s: shard '%s' has a '..' component (shards must be inside the model directory)", index_path,
                     f);
        return NULL;
    }
    char *p = fd_path_join(dir, f);
    char *real = realpath(p, NULL);
    if (!real) {
        fd_error_set("%s: cannot open: %s", p, strerror(errno));
        fd_error_prefix("%s lists shard '%s'", index_path, f);
        free(p);
        return NULL;
    }
    free(p);
    const size_t n = strlen(rdir);
    const int inside = !strncmp(real, rdir, n) && (real[n] == '/' || (n == 1 && rdir[0] == '/'));
    const char *allow = getenv("FD_ALLOW_EXTERNAL_SHARDS");
    if (!inside && !(allow && !strcmp(allow, "1"))) {
        fd_error_set("%s: shard '%s' resolves to %s, outside the model directory %s (a symbolic link; set "
                     "FD_ALLOW_EXTERNAL_SHARDS=1 to allow, e.g. for a Hugging Face cache snapshot)",
                     index_path, f, real, rdir);
        free(real);
        return NULL;
    }
    return real;
}

// Opens the shards named by an index.json weight_map and checks the map against their headers.
static int open_sharded(const char *dir, const char *index_path, st_set *set) {
    // Read whole, then parse: json_load_file reads with getc, a measurable cost on an 80k-tensor index.
    size_t text_len;
    char *text = fd_read_file(index_path, &text_len);
    if (!text) return -1; // the message names the path and the OS error
    json_error_t jerr;
    json_t *root = json_loadb(text, text_len, 0, &jerr);
    free(text);
    if (!root) {
        return fd_error_set("%s: invalid JSON at line %d column %d: %s", index_path, jerr.line, jerr.column,
                            FD_SAFE(jerr.text));
    }
    int rc = -1;
    char **shards = NULL; // distinct shard file names in order of first appearance
    int n_shards = 0;
    int *shard_of = NULL; // weight_map entry -> shard index
    st_tensor *all = NULL;
    int n_all = 0;
    char *rdir = NULL; // the model directory, resolved
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(wm)) {
        fd_error_set("%s: expected an object 'weight_map' mapping tensor names to shard files", index_path);
        goto done;
    }
    size_t n_map = json_object_size(wm);
    if (n_map == 0) {
        fd_error_set("%s: 'weight_map' is empty", index_path);
        goto done;
    }
    shard_of = fd_calloc(n_map, sizeof *shard_of);
    const char *key;
    json_t *val;
    size_t k = 0;
    json_object_foreach(wm, key, val) {
        const char *f = json_is_string(val) ? json_string_value(val) : NULL;
        // Shard names become paths that later messages print whole, so control characters are refused here.
        if (!f || !f[0] || f[0] == '/' || has_control_char(f)) {
            fd_error_set("%s: weight_map['%s'] must be a relative shard file name", index_path, FD_SAFE(key));
            goto done;
        }
        int s = 0;
        while (s < n_shards && strcmp(shards[s], f)) s++;
        if (s == n_shards) {
            shards = fd_realloc(shards, (size_t)(n_shards + 1) * sizeof *shards);
            shards[n_shards++] = fd_strdup(f);
        }
        shard_of[k++] = s;
    }
    rdir = realpath(dir, NULL);
    if (!rdir) {
        fd_error_set("%s: cannot resolve: %s", dir, strerror(errno));
        goto done;
    }
    for (int s = 0; s < n_shards; s++) {
        char *p = shard_path(dir, rdir, index_path, shards[s]);
        if (!p) goto done;
        st_tensor *ts;
        int n;
        int bad = open_one(set, p, &ts, &n);
        if (bad) fd_error_prefix("%s lists shard '%s'", index_path, FD_SAFE(shards[s]));
        free(p);
        if (bad) goto done;
        if ((int64_t)n_all + n > ST_MAX_TENSORS) {
            free_tensors(ts, n);
            fd_error_set("%s: more than %d tensors in all shards", index_path, ST_MAX_TENSORS);
            goto done;
        }
        all = fd_realloc(all, (size_t)(n_all + n + 1) * sizeof *all);
        memcpy(all + n_all, ts, (size_t)n * sizeof *ts);
        n_all += n;
        free(ts); // names now owned by `all`
    }
    qsort(all, (size_t)n_all, sizeof *all, cmp_tensor_name);
    for (int i = 1; i < n_all; i++) {
        if (!strcmp(all[i - 1].name, all[i].name)) {
            fd_error_set("%s: tensor '%s' appears in both %s and %s", index_path, FD_SAFE(all[i].name),
                         set->files[all[i - 1].file].path, set->files[all[i].file].path);
            goto done;
        }
    }
    // Every tensor the index promises must be in the shard it names; tensors the index does not list are
    // kept (they are harmless and st_find simply finds them).
    k = 0;
    json_object_foreach(wm, key, val) {
        int s = shard_of[k++];
        int i = find_index(all, n_all, key);
        if (i < 0) {
            fd_error_set("%s: tensor '%s' is mapped to %s, which does not contain it", index_path, FD_SAFE(key),
                         set->files[s].path);
            goto done;
        }
        if (all[i].file != s) {
            fd_error_set("%s: tensor '%s' is mapped to %s but found in %s", index_path, FD_SAFE(key),
                         set->files[s].path, set->files[all[i].file].path);
            goto done;
        }
    }
    set->tensors = all;
    set->n_tensors = n_all;
    all = NULL;
    rc = 0;
done:
    free(rdir);
    free_tensors(all, n_all);
    for (int s = 0; s < n_shards; s++) free(shards[s]);
    free(shards);
    free(shard_of);
    json_decref(root);
    return rc;
}

int st_open_dir(const char *dir, st_set *set) {
    memset(set, 0, sizeof *set);
    struct stat sb;
    if (stat(dir, &sb) != 0) return fd_error_set("%s: cannot open model directory: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return fd_error_set("%s: not a directory (expected a model directory)", dir);
    char *index = fd_path_join(dir, "model.safetensors.index.json");
    char *single = fd_path_join(dir, "model.safetensors");
    int rc;
    if (fd_file_exists(index)) {
        rc = open_sharded(dir, index, set);
        if (rc) st_close(set);
    } else if (fd_file_exists(single)) {
        rc = st_open_file(single, set);
    } else {
        rc = fd_error_set("%s: no model.safetensors.index.json or model.safetensors in this directory", dir);
    }
    free(index);
    free(single);
    return rc;
}

void st_close(st_set *set) {
    for (int i = 0; i < set->n_files; i++) {
        if (set->files[i].map) munmap(set->files[i].map, set->files[i].map_len);
        free(set->files[i].path);
    }
    free(set->files);
    free_tensors(set->tensors, set->n_tensors);
    memset(set, 0, sizeof *set);
}
