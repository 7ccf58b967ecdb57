// config.json's quantization_config: which published quantized formats we read, and which we refuse clearly.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "io/json_util.h"
#include "model/config.h"
#include "model/quant_config.h"

static int qerr(const char *path, const char *what) {
    return fd_error_set("%s: quantization_config: %s", path, what);
}

// modules_to_not_convert: a list of names (or null), NUL-separated into q->skip.
static int parse_skip(const json_t *qc, const char *path, fd_quant_config *q) {
    const json_t *skip = json_object_get(qc, "modules_to_not_convert");
    if (skip && !json_is_null(skip)) {
        if (!json_is_array(skip)) return qerr(path, "modules_to_not_convert must be a list of strings");
        size_t used = 0;
        for (size_t i = 0; i < json_array_size(skip); i++) {
            const json_t *e = json_array_get(skip, i);
            if (!json_is_string(e)) return qerr(path, "modules_to_not_convert must be a list of strings");
            const size_t n = strlen(json_string_value(e));
            if (used + n + 1 > sizeof q->skip)
                return qerr(path, "modules_to_not_convert is longer than 64 KiB of names");
            memcpy(q->skip + used, json_string_value(e), n + 1);
            used += n + 1;
            q->n_skip++;
        }
    }
    return 0;
}

// An optional integer field; *v keeps its default when absent or null. Returns -1 (fd_error set) if not an integer.
static int opt_int(const json_t *qc, const char *path, const char *key, int *v) {
    const json_t *e = json_object_get(qc, key);
    if (!e || json_is_null(e)) return 0;
    if (!json_is_integer(e)) return fd_error_set("%s: quantization_config: '%s' must be an integer", path, key);
    const json_int_t x = json_integer_value(e);
    *v = x < -1000000 ? -1000000 : x > 1000000 ? 1000000 : (int)x;
    return 0;
}

static int opt_bool(const json_t *qc, const char *path, const char *key, int *v) {
    const json_t *e = json_object_get(qc, key);
    if (!e || json_is_null(e)) return 0;
    if (!json_is_boolean(e)) return fd_error_set("%s: quantization_config: '%s' must be true or false", path, key);
    *v = json_is_true(e);
    return 0;
}

// int4 bits and group size as the CPU reference reads them (and as Marlin-style kernels will): 4 bits; groups
// of 32, 64 or 128 inputs, or -1 (one group over all of K, stored as 0).
static int check_int4(const char *path, const char *what, int bits, int group, int *group_out) {
    if (bits != 4)
        return fd_error_set("%s: quantization_config: %sbits %d is not supported (int4 only: bits 4)", path, what,
                            bits);
    if (group != -1 && group != 32 && group != 64 && group != 128)
        return fd_error_set("%s: quantization_config: %sgroup_size %d is not supported (32, 64, 128 or -1)", path,
                            what, group);
    *group_out = group == -1 ? 0 : group;
    return 0;
}

static pcre2_code *compile_re(const char *pat, char *err, size_t n) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, 0, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(err, n, "%s at offset %zu", (const char *)msg, (size_t)eo);
    }
    return re;
}

// GPTQModel's `dynamic`: {"-:regex": {}, "+:regex" or "regex": {overrides}}; the first rule matching a module
// decides whether (and with which bits / group size) it is quantized.
static int parse_dynamic(const json_t *qc, const char *path, fd_quant_config *q) {
    const json_t *dyn = json_object_get(qc, "dynamic");
    if (!dyn || json_is_null(dyn)) return 0;
    if (!json_is_object(dyn)) return qerr(path, "'dynamic' must be an object of regex -> overrides");
    size_t used = 0;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)dyn, key, val) {
        if (q->n_dyn == FD_QUANT_MAX_DYN) return qerr(path, "'dynamic' has more than 256 rules");
        const int neg = !strncmp(key, "-:", 2);
        const char *pat = neg || !strncmp(key, "+:", 2) ? key + 2 : key;
        char err[200];
        pcre2_code *re = compile_re(pat, err, sizeof err);
        if (!re)
            return fd_error_set("%s: quantization_config: dynamic rule '%s' is not a valid regex: %s", path, key, err);
        pcre2_code_free(re);
        int group = 0;
        if (!neg) {
            if (val && !json_is_object(val))
                return fd_error_set("%s: quantization_config: dynamic rule '%s' must map to an object", path, key);
            int bits = 4, g = q->group_size ? q->group_size : -1;
            char what[300];
            snprintf(what, sizeof what, "dynamic rule '%s': ", key);
            FD_TRY(opt_int(val, path, "bits", &bits));
            FD_TRY(opt_int(val, path, "group_size", &g));
            FD_TRY(check_int4(path, what, bits, g, &group));
            if (group == 0 && g == -1) group = -1; // explicit "one group over K" (0 means "the global one")
        }
        const size_t n = strlen(pat);
        if (used + n + 1 > sizeof q->dyn) return qerr(path, "'dynamic' is longer than 16 KiB of regexes");
        memcpy(q->dyn + used, pat, n + 1);
        used += n + 1;
        q->dyn_neg[q->n_dyn] = (unsigned char)neg;
        q->dyn_group[q->n_dyn] = group;
        q->n_dyn++;
    }
    return 0;
}

static int parse_gptq(const json_t *qc, const char *path, fd_quant_config *q) {
    int bits = -1, group = 0;
    FD_TRY(opt_int(qc, path, "bits", &bits));
    if (!json_is_integer(json_object_get(qc, "group_size"))) return qerr(path, "gptq: missing 'group_size'");
    FD_TRY(opt_int(qc, path, "group_size", &group));
    FD_TRY(check_int4(path, "gptq: ", bits, group, &q->group_size));
    q->sym = 1;
    FD_TRY(opt_bool(qc, path, "sym", &q->sym));
    FD_TRY(opt_bool(qc, path, "desc_act", &q->desc_act));
    int lm_head = 0;
    FD_TRY(opt_bool(qc, path, "lm_head", &lm_head));
    if (lm_head) return qerr(path, "gptq: a quantized lm_head (\"lm_head\": true) is not supported");
    // GPTQModel writes checkpoint_format (older files: format); packing words other than int32 and the old
    // is_marlin_format flag are layouts of their own.
    const json_t *pd = json_object_get(qc, "pack_dtype");
    if (pd && !json_is_null(pd) && !(json_is_string(pd) && !strcmp(json_string_value(pd), "int32")))
        return qerr(path, "gptq: pack_dtype must be \"int32\" (the published packing)");
    int marlin = 0;
    FD_TRY(opt_bool(qc, path, "is_marlin_format", &marlin));
    if (marlin) return qerr(path, "gptq: is_marlin_format true is not supported (the plain gptq layout is)");
    const json_t *cf = json_object_get(qc, "checkpoint_format");
    if (!cf || json_is_null(cf)) cf = json_object_get(qc, "format");
    const char *fmt = json_is_string(cf) ? json_string_value(cf) : "gptq";
    if (cf && !json_is_null(cf) && !json_is_string(cf)) return qerr(path, "gptq: 'checkpoint_format' must be a string");
    if (!strcmp(fmt, "gptq"))
        q->zero_add = 1; // v1: the stored zero is z - 1
    else if (!strcmp(fmt, "gptq_v2"))
        q->zero_add = 0;
    else
        return fd_error_set("%s: quantization_config: gptq checkpoint_format '%s' is not supported (\"gptq\" or "
                            "\"gptq_v2\")",
                            path, fmt);
    FD_TRY(parse_skip(qc, path, q));
    FD_TRY(parse_dynamic(qc, path, q));
    q->bits = 4;
    q->method = FD_QUANT_GPTQ;
    return 0;
}

// AWQ: HF's AwqConfig names (bits, group_size, version) or AutoAWQ's own (w_bit, q_group_size).
static int parse_awq(const json_t *qc, const char *path, fd_quant_config *q) {
    int bits = -1, group = -2;
    FD_TRY(opt_int(qc, path, "w_bit", &bits));
    FD_TRY(opt_int(qc, path, "bits", &bits));
    FD_TRY(opt_int(qc, path, "q_group_size", &group));
    FD_TRY(opt_int(qc, path, "group_size", &group));
    if (group == -2) return qerr(path, "awq: missing 'group_size' (or 'q_group_size')");
    FD_TRY(check_int4(path, "awq: ", bits, group, &q->group_size));
    const json_t *v = json_object_get(qc, "version");
    if (v && !json_is_null(v) && !(json_is_string(v) && !strcasecmp(json_string_value(v), "gemm")))
        return fd_error_set("%s: quantization_config: awq version '%s' is not supported (only \"gemm\", AutoAWQ's "
                            "default layout)",
                            path, json_is_string(v) ? json_string_value(v) : "(not a string)");
    int zp = 1;
    FD_TRY(opt_bool(qc, path, "zero_point", &zp));
    if (!zp) return qerr(path, "awq: zero_point false is not supported (AWQ gemm checkpoints store zeros)");
    FD_TRY(parse_skip(qc, path, q));
    q->bits = 4;
    q->method = FD_QUANT_AWQ;
    return 0;
}

int cfg_parse_quant(const json_t *root, const char *path, fd_quant_config *q) {
    memset(q, 0, sizeof *q);
    const json_t *qc = json_object_get(root, "quantization_config");
    if (!qc || json_is_null(qc)) return 0;
    if (!json_is_object(qc)) return qerr(path, "must be an object");
    const json_t *m = json_object_get(qc, "quant_method");
    if (!json_is_string(m)) return qerr(path, "missing 'quant_method' (a string)");
    const char *method = json_string_value(m);
    if (!strcmp(method, "gptq")) return parse_gptq(qc, path, q);
    if (!strcmp(method, "awq")) return parse_awq(qc, path, q);
    if (strcmp(method, "fp8"))
        return fd_error_set("%s: quantization_config: quant_method '%s' is not supported (supported: fp8, gptq, "
                            "awq)",
                            path, FD_SAFE(method));
    const json_t *fmt = json_object_get(qc, "fmt");
    if (fmt && !json_is_null(fmt) && !(json_is_string(fmt) && !strcmp(json_string_value(fmt), "e4m3")))
        return qerr(path, "fmt must be \"e4m3\" (float8_e4m3fn weights); other FP8 formats are not supported");
    const json_t *act = json_object_get(qc, "activation_scheme");
    if (act && !json_is_null(act) && !(json_is_string(act) && !strcmp(json_string_value(act), "dynamic")))
        return qerr(path, "activation_scheme must be \"dynamic\" (static activation scales are not supported)");
    const json_t *bs = json_object_get(qc, "weight_block_size");
    if (!bs || json_is_null(bs))
        return qerr(path, "missing 'weight_block_size' (per-tensor FP8 is not supported; block-scaled "
                          "[128, 128] is)");
    if (!json_is_array(bs) || json_array_size(bs) != 2 || !json_is_integer(json_array_get(bs, 0)) ||
        !json_is_integer(json_array_get(bs, 1)))
        return qerr(path, "weight_block_size must be two integers [rows, cols]");
    const json_int_t br = json_integer_value(json_array_get(bs, 0)), bc = json_integer_value(json_array_get(bs, 1));
    if (br < 1 || bc < 1 || br > 4096 || bc > 4096 || bc % 16)
        return fd_error_set("%s: quantization_config: weight_block_size [%lld, %lld] is not supported (rows in "
                            "1..4096, cols a multiple of 16 up to 4096)",
                            path, (long long)br, (long long)bc);
    q->method = FD_QUANT_FP8;
    q->block_rows = (int)br;
    q->block_cols = (int)bc;
    FD_TRY(parse_skip(qc, path, q));
    return 0;
}

int cfg_quant_skips(const fd_quant_config *q, const char *name) {
    char module[512];
    size_t n = strlen(name);
    if (n > 7 && !strcmp(name + n - 7, ".weight")) n -= 7;
    if (n >= sizeof module) return 0;
    memcpy(module, name, n);
    module[n] = 0;
    const char *e = q->skip;
    for (int i = 0; i < q->n_skip; i++, e += strlen(e) + 1) {
        const size_t m = strlen(e);
        for (const char *p = strstr(module, e); p && m; p = strstr(p + 1, e)) {
            const int starts = p == module || p[-1] == '.', ends = p[m] == 0 || p[m] == '.';
            if (starts && ends) return 1;
        }
    }
    return 0;
}

int cfg_quant_int4_module(const fd_quant_config *q, const char *module, int *group_size) {
    *group_size = q->group_size;
    if (q->method == FD_QUANT_AWQ) { // vLLM: an entry anywhere in the module name excludes it
        const char *e = q->skip;
        for (int i = 0; i < q->n_skip; i++, e += strlen(e) + 1)
            if (*e && strstr(module, e)) return 0;
        return 1;
    }
    const char *pat = q->dyn;
    for (int i = 0; i < q->n_dyn; i++, pat += strlen(pat) + 1) {
        char err[200];
        pcre2_code *re = compile_re(pat, err, sizeof err);
        if (!re) return fd_error_set("quantization_config: dynamic rule '%s': %s", pat, err);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        const int rc = pcre2_match(re, (PCRE2_SPTR)module, PCRE2_ZERO_TERMINATED, 0, PCRE2_ANCHORED, md, NULL);
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (rc >= 0) {
            if (q->dyn_neg[i]) return 0;
            if (q->dyn_group[i]) *group_size = q->dyn_group[i] < 0 ? 0 : q->dyn_group[i];
            return 1;
        }
    }
    char name[520];
    snprintf(name, sizeof name, "%s.weight", module);
    return cfg_quant_skips(q, name) ? 0 : 1;
}
