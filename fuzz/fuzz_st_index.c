// libFuzzer target for the sharded-checkpoint path of st_open_dir: the input becomes
// model.safetensors.index.json in a temporary directory that holds two small valid shards. Whatever the index
// says, st_open_dir must fail with a one-line message naming the index, or return a consistent set.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_dir[256];

static void write_file(const char *name, const void *buf, size_t n) {
    char *p = fd_path_join(g_dir, name);
    FILE *f = fopen(p, "wb");
    FD_CHECK(f != NULL, "%s", p);
    FD_CHECK(fwrite(buf, 1, n, f) == n);
    fclose(f);
    free(p);
}

// A shard whose 8-byte-padded header `hdr` describes `data_len` bytes of data.
static void write_shard(const char *name, const char *hdr, size_t data_len) {
    size_t hl = (strlen(hdr) + 7) / 8 * 8, n = 8 + hl + data_len;
    uint8_t *buf = calloc(1, n);
    FD_CHECK(buf != NULL);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memset(buf + 8, ' ', hl);
    memcpy(buf + 8, hdr, strlen(hdr));
    write_file(name, buf, n);
    free(buf);
}

static void cleanup(void) {
    const char *names[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors",
                           "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = fd_path_join(g_dir, names[i]);
        unlink(p);
        free(p);
    }
    rmdir(g_dir);
}

static void setup(void) {
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fd_fuzz_index_XXXXXX", base ? base : "/tmp");
    FD_CHECK(mkdtemp(g_dir) != NULL);
    atexit(cleanup);
    write_shard("model-00001-of-00002.safetensors",
                "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8);
    write_shard("model-00002-of-00002.safetensors", "{\"c\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}",
                3);
    write_shard("model.safetensors", "{\"z\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        setup();
        init = 1;
    }
    write_file("model.safetensors.index.json", data, size);
    st_set s;
    if (st_open_dir(g_dir, &s) == 0) {
        FD_CHECK(s.n_files >= 1 && s.n_files <= 3 && s.n_tensors >= 1);
        for (int i = 0; i < s.n_tensors; i++) {
            const st_tensor *t = &s.tensors[i];
            FD_CHECK(t->file >= 0 && t->file < s.n_files);
            const uint8_t *m = s.files[t->file].map;
            FD_CHECK((const uint8_t *)t->data >= m &&
                     (const uint8_t *)t->data + t->nbytes <= m + s.files[t->file].map_len);
            FD_CHECK(st_find(&s, t->name) == t);
        }
        st_close(&s);
    } else {
        FD_CHECK(s.n_files == 0 && s.tensors == NULL && s.n_tensors == 0);
        FD_CHECK(strstr(fd_error_msg(), "model.safetensors.index.json") != NULL, "error lacks the index: %s",
                 fd_error_msg());
        FD_CHECK(strchr(fd_error_msg(), '\n') == NULL, "multi-line error: %s", fd_error_msg());
    }
    return 0;
}
