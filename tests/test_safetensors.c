// Tests of src/io/safetensors: good single-file and sharded checkpoints written by a tiny writer here, and
// every class of bad input (each must fail with -1 and a message naming the file and the problem).
#include <ftw.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "test.h"

// ---- a tiny safetensors writer ----

typedef struct {
    const char *name, *dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes; // bytes of data written for this tensor
} wt;

// Writes raw bytes: 8-byte LE header length `hlen_field`, header text, then `data_len` bytes (byte i = i & 0xff).
static void write_raw(const char *path, const char *header, uint64_t hlen_field, size_t data_len) {
    FILE *f = fopen(path, "wb");
    FD_CHECK(f != NULL, "%s", path);
    uint8_t h8[8];
    for (int i = 0; i < 8; i++) h8[i] = (uint8_t)(hlen_field >> (8 * i));
    fwrite(h8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc((int)(i & 0xff), f);
    fclose(f);
}

// Builds the header for `n` tensors laid out back to back (plus __metadata__) and writes the file.
// Returns the data-section size.
static size_t write_st(const char *path, const wt *ts, int n) {
    size_t cap = 256 + (size_t)n * 256, len = 0, off = 0;
    char *h = fd_malloc(cap);
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name, ts[i].dtype);
        for (int d = 0; d < ts[i].ndim; d++)
            len += (size_t)snprintf(h + len, cap - len, "%s%lld", d ? "," : "", (long long)ts[i].shape[d]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%zu,%zu]}", off, off + ts[i].nbytes);
        off += ts[i].nbytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' '; // the reference writer pads the header to 8 bytes
    h[len] = 0;
    write_raw(path, h, len, off);
    free(h);
    return off;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    FD_CHECK(f != NULL, "%s", path);
    fputs(text, f);
    fclose(f);
}

static char g_dir[256];
static char *tmp_dir(void) {
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fd_st_XXXXXX", base ? base : "/tmp");
    FD_CHECK(mkdtemp(g_dir) != NULL);
    return g_dir;
}
static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}
static void rm_tree(const char *dir) {
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static char *in_dir(const char *name) {
    return fd_path_join(g_dir, name);
}

#define EXPECT_ERR(rc, ...)                                                                                            \
    do {                                                                                                               \
        EXPECT((rc) == -1, "(rc=%d)", (int)(rc));                                                                      \
        const char *subs_[] = {__VA_ARGS__};                                                                           \
        for (size_t k_ = 0; k_ < sizeof subs_ / sizeof subs_[0]; k_++)                                                 \
            EXPECT(strstr(fd_error_msg(), subs_[k_]) != NULL, "message '%s' lacks '%s'", fd_error_msg(), subs_[k_]);   \
    } while (0)

// Writes one file with a single custom header and checks st_open_file's error.
static int open_header(const char *header, uint64_t hlen, size_t data_len, char **path_out) {
    char *p = in_dir("model.safetensors");
    write_raw(p, header, hlen, data_len);
    st_set s;
    int rc = st_open_file(p, &s);
    if (rc == 0) st_close(&s);
    *path_out = p;
    return rc;
}

// ---- good files ----

TEST(st_good_single_file) {
    tmp_dir();
    wt ts[] = {{"model.norm.weight", "F32", 2, {2, 3}, 24},
               {"lm_head.weight", "BF16", 1, {4}, 8},
               {"empty", "F16", 2, {0, 5}, 0},
               {"scalar", "I64", 0, {0}, 8},
               {"q8", "F8_E4M3", 3, {1, 2, 3}, 6}};
    char *p = in_dir("model.safetensors");
    write_st(p, ts, 5);
    st_set s;
    ASSERT(st_open_dir(g_dir, &s) == 0, "%s", fd_error_msg());
    EXPECT(s.n_files == 1 && s.n_tensors == 5);
    for (int i = 1; i < s.n_tensors; i++) EXPECT(strcmp(s.tensors[i - 1].name, s.tensors[i].name) < 0);
    const st_tensor *a = st_find(&s, "model.norm.weight");
    ASSERT(a != NULL);
    EXPECT(a->dtype == FD_F32 && a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3 && a->nbytes == 24);
    const uint8_t *base = (const uint8_t *)s.files[0].map + s.files[0].map_len - 46; // data section: 46 bytes
    EXPECT((const uint8_t *)a->data == base && base[5] == 5);
    const st_tensor *b = st_find(&s, "lm_head.weight");
    ASSERT(b != NULL);
    EXPECT(b->dtype == FD_BF16 && (const uint8_t *)b->data == base + 24 && ((const uint8_t *)b->data)[0] == 24);
    const st_tensor *e = st_find(&s, "empty");
    EXPECT(e && e->nbytes == 0 && e->shape[0] == 0);
    const st_tensor *sc = st_find(&s, "scalar");
    EXPECT(sc && sc->ndim == 0 && sc->nbytes == 8 && sc->dtype == FD_I64);
    const st_tensor *q = st_find(&s, "q8");
    EXPECT(q && q->dtype == FD_F8E4M3 && q->nbytes == 6);
    EXPECT(st_find(&s, "missing") == NULL && st_find(&s, "") == NULL && st_find(&s, "zzz") == NULL);
    EXPECT(st_find(&s, "__metadata__") == NULL);
    st_close(&s);
    EXPECT(s.n_tensors == 0 && s.tensors == NULL);
    ASSERT(st_open_file(p, &s) == 0, "%s", fd_error_msg());
    EXPECT(s.n_tensors == 5 && !strcmp(s.files[0].path, p));
    st_close(&s);
    free(p);
    rm_tree(g_dir);
}

TEST(st_good_sharded_index) {
    tmp_dir();
    wt s1[] = {{"a.weight", "BF16", 2, {2, 2}, 8}, {"b.weight", "F32", 1, {3}, 12}};
    wt s2[] = {{"c.weight", "F16", 1, {5}, 10}, {"extra.unlisted", "U8", 1, {1}, 1}};
    char *p1 = in_dir("model-00001-of-00002.safetensors"), *p2 = in_dir("model-00002-of-00002.safetensors");
    write_st(p1, s1, 2);
    write_st(p2, s2, 2);
    char *ix = in_dir("model.safetensors.index.json");
    write_text(ix, "{\"metadata\":{\"total_size\":30},\"weight_map\":{"
                   "\"c.weight\":\"model-00002-of-00002.safetensors\","
                   "\"a.weight\":\"model-00001-of-00002.safetensors\","
                   "\"b.weight\":\"model-00001-of-00002.safetensors\"}}");
    // A stray single file must be ignored when an index exists.
    char *single = in_dir("model.safetensors");
    write_raw(single, "garbage", 999, 0);
    st_set s;
    ASSERT(st_open_dir(g_dir, &s) == 0, "%s", fd_error_msg());
    EXPECT(s.n_files == 2, "%d files", s.n_files);
    EXPECT(s.n_tensors == 4);
    const st_tensor *a = st_find(&s, "a.weight"), *b = st_find(&s, "b.weight"), *c = st_find(&s, "c.weight");
    ASSERT(a && b && c);
    EXPECT(strstr(s.files[a->file].path, "00001") && strstr(s.files[c->file].path, "00002"));
    EXPECT(a->file == b->file && a->file != c->file);
    EXPECT(((const uint8_t *)b->data)[0] == 8 && c->dtype == FD_F16 && c->nbytes == 10);
    EXPECT(st_find(&s, "extra.unlisted") != NULL);
    st_close(&s);
    free(p1), free(p2), free(ix), free(single);
    rm_tree(g_dir);
}

// ---- missing files and bad indexes ----

TEST(st_missing_files) {
    tmp_dir();
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), g_dir, "model.safetensors.index.json", "model.safetensors");
    char *nd = in_dir("nope");
    EXPECT_ERR(st_open_dir(nd, &s), nd, "No such file");
    char *f = in_dir("file");
    write_text(f, "x");
    EXPECT_ERR(st_open_dir(f, &s), f, "not a directory");
    EXPECT_ERR(st_open_file(nd, &s), nd, "cannot open");
    EXPECT_ERR(st_open_file(g_dir, &s), g_dir, "not a regular file");
    free(nd), free(f);
    rm_tree(g_dir);
}

// Writes shard 1 holding a.weight and the given index text.
static void setup_index(const char *index_text) {
    wt s1[] = {{"a.weight", "BF16", 1, {2}, 4}};
    char *p1 = in_dir("model-00001-of-00002.safetensors");
    write_st(p1, s1, 1);
    char *ix = in_dir("model.safetensors.index.json");
    write_text(ix, index_text);
    free(p1), free(ix);
}

TEST(st_missing_shard) {
    tmp_dir();
    setup_index("{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                "\"b.weight\":\"model-00002-of-00002.safetensors\"}}");
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "model-00002-of-00002.safetensors",
               "cannot open");
    EXPECT(s.n_files == 0 && s.tensors == NULL);
    rm_tree(g_dir);
}

TEST(st_index_tensor_absent_from_shard) {
    tmp_dir();
    setup_index("{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                "\"ghost.weight\":\"model-00001-of-00002.safetensors\"}}");
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "ghost.weight",
               "model-00001-of-00002.safetensors", "does not contain");
    rm_tree(g_dir);
}

TEST(st_index_tensor_in_wrong_shard) {
    tmp_dir();
    wt s2[] = {{"b.weight", "F32", 1, {1}, 4}};
    char *p2 = in_dir("model-00002-of-00002.safetensors");
    write_st(p2, s2, 1);
    setup_index("{\"weight_map\":{\"a.weight\":\"model-00002-of-00002.safetensors\","
                "\"b.weight\":\"model-00002-of-00002.safetensors\",\"c\":\"model-00001-of-00002.safetensors\"}}");
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), "'a.weight'", "mapped to", "00002", "found in", "00001");
    free(p2);
    rm_tree(g_dir);
}

TEST(st_index_duplicate_across_shards) {
    tmp_dir();
    wt s2[] = {{"a.weight", "BF16", 1, {2}, 4}};
    char *p2 = in_dir("model-00002-of-00002.safetensors");
    write_st(p2, s2, 1);
    setup_index("{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\","
                "\"x\":\"model-00002-of-00002.safetensors\"}}");
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), "'a.weight'", "appears in both", "00001", "00002");
    free(p2);
    rm_tree(g_dir);
}

TEST(st_index_malformed) {
    tmp_dir();
    st_set s;
    setup_index("{\"weight_map\": {\"a.weight\": ");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "invalid JSON", "line 1");
    setup_index("{\"metadata\":{}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "weight_map");
    setup_index("[1,2]");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "weight_map");
    setup_index("{\"weight_map\":{}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "empty");
    setup_index("{\"weight_map\":{\"a.weight\":7}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "a.weight", "shard file name");
    setup_index("{\"weight_map\":{\"a.weight\":\"/etc/passwd\"}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "relative");
    setup_index("{\"weight_map\":{\"a.weight\":\"x\\ny.safetensors\"}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "relative shard file name");
    EXPECT(strchr(fd_error_msg(), '\n') == NULL);
    // A shard whose own header is corrupt: the message names the index, the shard and the problem.
    char *p2 = in_dir("bad.safetensors");
    write_raw(p2, "{x", 2, 0);
    setup_index("{\"weight_map\":{\"a.weight\":\"model-00001-of-00002.safetensors\",\"b\":\"bad.safetensors\"}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "model.safetensors.index.json", "bad.safetensors", "corrupt JSON header");
    free(p2);
    rm_tree(g_dir);
}

// ---- corrupt single files ----

TEST(st_truncated_file) {
    tmp_dir();
    char *p;
    const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    EXPECT_ERR(open_header(hdr, strlen(hdr) + 100, 0, &p), p, "header length", "exceeds the file size");
    free(p);
    EXPECT_ERR(open_header(hdr, UINT64_MAX, 0, &p), p, "header length", "exceeds");
    free(p);
    EXPECT_ERR(open_header("", 0, 0, &p), p, "header length 0");
    free(p);
    // Data section shorter than the offsets promise (the file was cut in the middle of the data).
    EXPECT_ERR(open_header(hdr, strlen(hdr), 15, &p), p, "'a'", "run past the data section (15 bytes)", "truncated");
    free(p);
    // Shorter than the 8-byte length field (and an empty file, which mmap cannot map).
    p = in_dir("model.safetensors");
    write_text(p, "abc");
    st_set s;
    EXPECT_ERR(st_open_file(p, &s), p, "3 bytes", "too short");
    write_text(p, "");
    EXPECT_ERR(st_open_file(p, &s), p, "0 bytes", "too short");
    free(p);
    rm_tree(g_dir);
}

TEST(st_corrupt_json_header) {
    tmp_dir();
    char *p;
    const char *bad[] = {"{\"a\":{\"dtype\":\"F32\",", "not json at all", "{\"a\":1}garbage", "\xff\xfe{}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = open_header(bad[i], strlen(bad[i]), 0, &p);
        EXPECT_ERR(rc, p, "corrupt JSON header", "line");
        free(p);
    }
    EXPECT_ERR(open_header("[1,2,3]", 7, 0, &p), p, "must be an object", "an array");
    free(p);
    EXPECT_ERR(open_header("{\"a\":[1]}", 9, 0, &p), p, "'a'", "must be an object");
    free(p);
    const char *empty = "{\"\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}";
    EXPECT_ERR(open_header(empty, strlen(empty), 4, &p), p, "empty name");
    free(p);
    rm_tree(g_dir);
}

TEST(st_bad_dtype) {
    tmp_dir();
    char *p;
    const char *h1 = "{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}";
    EXPECT_ERR(open_header(h1, strlen(h1), 1, &p), p, "'w'", "unsupported dtype 'F4'", "BF16");
    free(p);
    const char *h2 = "{\"w\":{\"dtype\":5,\"shape\":[2],\"data_offsets\":[0,1]}}";
    EXPECT_ERR(open_header(h2, strlen(h2), 1, &p), p, "'w'", "'dtype' must be a string");
    free(p);
    // Control characters in a crafted name must not split the one-line message.
    const char *hn = "{\"a\\nb\":{\"dtype\":\"X\\r\",\"shape\":[2],\"data_offsets\":[0,1]}}";
    EXPECT_ERR(open_header(hn, strlen(hn), 1, &p), p, "'a?b'", "'X?'");
    EXPECT(strchr(fd_error_msg(), '\n') == NULL && strchr(fd_error_msg(), '\r') == NULL);
    free(p);
    const char *h3 = "{\"w\":{\"shape\":[2],\"data_offsets\":[0,1]}}";
    EXPECT_ERR(open_header(h3, strlen(h3), 1, &p), p, "'w'", "'dtype' must be a string, got nothing");
    free(p);
    rm_tree(g_dir);
}

TEST(st_shape_size_mismatch) {
    tmp_dir();
    char *p;
    const char *h1 = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,4],\"data_offsets\":[0,20]}}";
    EXPECT_ERR(open_header(h1, strlen(h1), 24, &p), p, "'w'", "span 20 bytes", "need 24");
    free(p);
    const char *h2 = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,-4],\"data_offsets\":[0,24]}}";
    EXPECT_ERR(open_header(h2, strlen(h2), 24, &p), p, "'w'", "shape[1]", "non-negative");
    free(p);
    const char *h3 = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[3,\"4\"],\"data_offsets\":[0,24]}}";
    EXPECT_ERR(open_header(h3, strlen(h3), 24, &p), p, "'w'", "shape[1]");
    free(p);
    const char *h4 = "{\"w\":{\"dtype\":\"BF16\",\"shape\":{},\"data_offsets\":[0,24]}}";
    EXPECT_ERR(open_header(h4, strlen(h4), 24, &p), p, "'w'", "'shape' must be an array");
    free(p);
    const char *h5 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}";
    EXPECT_ERR(open_header(h5, strlen(h5), 1, &p), p, "'w'", "9 dimensions", "at most 8");
    free(p);
    rm_tree(g_dir);
}

TEST(st_overflow_shapes) {
    tmp_dir();
    char *p;
    // 2^32 * 2^32 elements overflows uint64; 2^62 elements * 4 bytes overflows the byte count.
    const char *h1 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}";
    EXPECT_ERR(open_header(h1, strlen(h1), 0, &p), p, "'w'", "too large");
    free(p);
    const char *h2 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,0]}}";
    EXPECT_ERR(open_header(h2, strlen(h2), 0, &p), p, "'w'", "too large");
    free(p);
    // A zero dimension after a huge one is a valid empty tensor, not an overflow.
    const char *h3 = "{\"w\":{\"dtype\":\"F32\",\"shape\":[9223372036854775807,0],\"data_offsets\":[0,0]}}";
    int rc = open_header(h3, strlen(h3), 0, &p);
    EXPECT(rc == 0, "%s", fd_error_msg());
    free(p);
    // Integers beyond int64 are rejected by the JSON parser itself.
    const char *h4 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999],\"data_offsets\":[0,0]}}";
    EXPECT_ERR(open_header(h4, strlen(h4), 0, &p), p, "corrupt JSON header");
    free(p);
    rm_tree(g_dir);
}

TEST(st_bad_offsets) {
    tmp_dir();
    char *p;
    const char *h1 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,2]}}";
    EXPECT_ERR(open_header(h1, strlen(h1), 8, &p), p, "'w'", "begin > end");
    free(p);
    const char *h2 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[-2,0]}}";
    EXPECT_ERR(open_header(h2, strlen(h2), 8, &p), p, "'w'", "non-negative");
    free(p);
    const char *h3 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0]}}";
    EXPECT_ERR(open_header(h3, strlen(h3), 8, &p), p, "'w'", "[begin, end]");
    free(p);
    const char *h4 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[18446744073709551615,0]}}";
    EXPECT_ERR(open_header(h4, strlen(h4), 8, &p), p, "corrupt JSON header");
    free(p);
    const char *h5 = "{\"w\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[9223372036854775806,"
                     "9223372036854775807]}}";
    EXPECT_ERR(open_header(h5, strlen(h5), 8, &p), p, "'w'", "run past the data section");
    free(p);
    rm_tree(g_dir);
}

TEST(st_misaligned_tensor) {
    tmp_dir();
    char *p;
    // 1 byte of U8, then an F32 at data offset 1: header 112 bytes + 8 → file offset 121, not a multiple of 4.
    char h[113];
    snprintf(h, sizeof h, "%-112s",
             "{\"u\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}");
    EXPECT_ERR(open_header(h, 112, 5, &p), p, "'f'", "file offset 121", "not aligned", "4-byte dtype F32");
    free(p);
    rm_tree(g_dir);
}

TEST(st_duplicate_tensor) {
    tmp_dir();
    char *p;
    const char *h = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                    "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
    EXPECT_ERR(open_header(h, strlen(h), 2, &p), p, "duplicate tensor name", "\"w\"");
    free(p);
    rm_tree(g_dir);
}

// st_parse on in-memory buffers, including every prefix of a valid file: none may crash or succeed wrongly.
TEST(st_parse_all_truncations) {
    const char *hdr = "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[8,12]}}";
    size_t hl = (strlen(hdr) + 7) / 8 * 8, len = 8 + hl + 12; // padded with spaces, like the reference writer
    uint8_t *buf = fd_malloc(len);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memset(buf + 8, ' ', hl);
    memcpy(buf + 8, hdr, strlen(hdr));
    for (size_t i = 0; i < 12; i++) buf[8 + hl + i] = (uint8_t)i;
    st_tensor *ts;
    int n;
    ASSERT(st_parse(buf, len, "mem", &ts, &n) == 0, "%s", fd_error_msg());
    EXPECT(n == 2 && !strcmp(ts[0].name, "a") && !strcmp(ts[1].name, "b"));
    EXPECT(ts[0].data == buf + 8 + hl + 8 && ts[0].dtype == FD_I32);
    for (int i = 0; i < n; i++) free(ts[i].name);
    free(ts);
    for (size_t cut = 0; cut < len; cut++) {
        // A fresh allocation of exactly `cut` bytes so ASan catches any read past the end.
        uint8_t *c = fd_malloc(cut);
        memcpy(c, buf, cut);
        int rc = st_parse(c, cut, "mem", &ts, &n);
        EXPECT(rc == -1 && ts == NULL && n == 0, "prefix of %zu bytes parsed", cut);
        EXPECT(strstr(fd_error_msg(), "mem:") == fd_error_msg(), "%s", fd_error_msg());
        free(c);
    }
    free(buf);
}

// ---- issue 21: shard paths must stay inside the model directory; offsets must tile the data section ----

TEST(st_shard_path_traversal_refused) {
    tmp_dir();
    char outside[300];
    snprintf(outside, sizeof outside, "%s.outside.safetensors", g_dir); // beside the model directory
    wt s1[] = {{"a.weight", "BF16", 1, {2}, 4}};
    write_st(outside, s1, 1);
    const char *base = strrchr(outside, '/') + 1;
    // a ".." name: refused before anything is opened, whether or not the file exists
    char *ix = in_dir("model.safetensors.index.json");
    char *text = fd_sprintf("{\"weight_map\":{\"a.weight\":\"../%s\"}}", base);
    write_text(ix, text);
    free(text);
    st_set s;
    EXPECT_ERR(st_open_dir(g_dir, &s), "'..'", "inside the model directory");
    write_text(ix, "{\"weight_map\":{\"a.weight\":\"sub/../../../../../../etc/passwd\"}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "'..'");
    // a symbolic link out of the directory: refused unless FD_ALLOW_EXTERNAL_SHARDS=1
    char *link = in_dir("model-00001-of-00001.safetensors");
    ASSERT(symlink(outside, link) == 0);
    write_text(ix, "{\"weight_map\":{\"a.weight\":\"model-00001-of-00001.safetensors\"}}");
    EXPECT_ERR(st_open_dir(g_dir, &s), "outside the model directory", "FD_ALLOW_EXTERNAL_SHARDS");
    setenv("FD_ALLOW_EXTERNAL_SHARDS", "1", 1);
    EXPECT(st_open_dir(g_dir, &s) == 0, "%s", fd_error_msg());
    if (s.n_tensors) st_close(&s);
    unsetenv("FD_ALLOW_EXTERNAL_SHARDS");
    // a link that stays inside (to a file in a subdirectory) is fine
    unlink(link);
    char *sub = in_dir("real");
    ASSERT(mkdir(sub, 0755) == 0);
    char *real = in_dir("real/shard.safetensors");
    write_st(real, s1, 1);
    ASSERT(symlink("real/shard.safetensors", link) == 0);
    EXPECT(st_open_dir(g_dir, &s) == 0, "%s", fd_error_msg());
    if (s.n_tensors) st_close(&s);
    unlink(outside);
    free(ix), free(link), free(sub), free(real);
    rm_tree(g_dir);
}

TEST(st_overlapping_or_gapped_offsets_refused) {
    tmp_dir();
    char *p;
    // b lies inside a: both would read the same bytes
    const char *h1 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}";
    EXPECT_ERR(open_header(h1, strlen(h1), 4, &p), p, "overlap");
    free(p);
    const char *h2 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    EXPECT_ERR(open_header(h2, strlen(h2), 6, &p), p, "overlap");
    free(p);
    const char *h3 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                     "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]}}";
    EXPECT_ERR(open_header(h3, strlen(h3), 6, &p), p, "'b'", "gap of 2 bytes");
    free(p);
    const char *h4 = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    EXPECT_ERR(open_header(h4, strlen(h4), 5, &p), p, "3 bytes after the last tensor");
    free(p);
    // listed out of order but tiling the data exactly: fine (the format sorts by offset); empty tensors anywhere
    const char *h5 = "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]},"
                     "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]},"
                     "\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
    EXPECT(open_header(h5, strlen(h5), 4, &p) == 0, "%s", fd_error_msg());
    free(p);
    rm_tree(g_dir);
}
