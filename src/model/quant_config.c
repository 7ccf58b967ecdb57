// config.json's quantization_config: which published quantized formats we read, and which we refuse clearly.
#include <jansson.h>
#include <string.h>

#include "base/base.h"
#include "io/json_util.h"
#include "model/config.h"
#include "model/quant_config.h"

static int qerr(const char *path, const char *what) {
    return fd_error_set("%s: quantization_config: %s", path, what);
}

int cfg_parse_quant(const json_t *root, const char *path, fd_quant_config *q) {
    memset(q, 0, sizeof *q);
    const json_t *qc = json_object_get(root, "quantization_config");
    if (!qc || json_is_null(qc)) return 0;
    if (!json_is_object(qc)) return qerr(path, "must be an object");
    const json_t *m = json_object_get(qc, "quant_method");
    if (!json_is_string(m)) return qerr(path, "missing 'quant_method' (a string)");
    const char *method = json_string_value(m);
    if (!strcmp(method, "gptq") || !strcmp(method, "awq"))
        return fd_error_set("%s: quantization_config: quant_method '%s' (int4) is not supported yet; FP8 "
                            "block-scaled checkpoints (quant_method 'fp8') are",
                            path, method);
    if (strcmp(method, "fp8"))
        return fd_error_set("%s: quantization_config: quant_method '%s' is not supported (supported: fp8)", path,
                            FD_SAFE(method));
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
