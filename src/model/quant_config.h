// Parsing of config.json's quantization_config (quant_config.c); the result lives in fd_config.quant.
#ifndef FD_QUANT_CONFIG_H
#define FD_QUANT_CONFIG_H
#include <jansson.h>

#include "model/config.h"

// Reads root["quantization_config"] into q (method NONE when absent). Returns 0 or -1 with fd_error set: an
// unsupported method or format is refused here, before any tensor is read.
int cfg_parse_quant(const json_t *root, const char *path, fd_quant_config *q);
#endif
