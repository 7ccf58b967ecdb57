// safetensors reader: a single `model.safetensors`, or shards listed by `model.safetensors.index.json`.
// Files are mmap'ed read-only; tensor data pointers stay valid until st_close().
#ifndef FD_SAFETENSORS_H
#define FD_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    fd_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data; // points into the mapping
    size_t nbytes;
    int file; // index into st_set.files
} st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t map_len;
} st_file;

typedef struct {
    st_file *files;
    int n_files;
    st_tensor *tensors; // sorted by name
    int n_tensors;
} st_set;

// Parses one safetensors header. `buf`/`len` is the whole file contents (or mapping). On success fills
// *tensors (malloc'ed array, names malloc'ed, data pointing into buf) and *n. Every offset, size, dtype and
// shape is validated against len; nothing is read out of bounds whatever the bytes. `path` names the file
// in messages. Returns 0, or -1 with fd_error set.
int st_parse(const uint8_t *buf, size_t len, const char *path, st_tensor **tensors, int *n);

// Opens a model directory: model.safetensors.index.json (sharded) if present, else model.safetensors.
int st_open_dir(const char *dir, st_set *set);
// Opens one file.
int st_open_file(const char *path, st_set *set);
void st_close(st_set *set);
const st_tensor *st_find(const st_set *set, const char *name);
#endif
