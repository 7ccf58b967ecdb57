// libFuzzer target for the config.json parser: arbitrary bytes as JSON text. cfg_parse must either fail
// with a message naming the file or return a config that satisfies every invariant the model code relies on.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "model/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        fd_log_set_level(FD_LOG_QUIET); // output_gate_type warnings would flood the log
        init = 1;
    }
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    fd_config c;
    if (cfg_parse(text, "fuzz/config.json", &c) == 0) {
        FD_CHECK(c.arch >= 0 && c.arch < FD_ARCH_COUNT);
        FD_CHECK(c.num_layers > 0 && c.num_layers <= FD_MAX_LAYERS);
        FD_CHECK(c.num_heads > 0 && c.num_kv_heads > 0 && c.gdn_num_k_heads > 0);
        int gqa_rem = c.num_heads % c.num_kv_heads, gdn_rem = c.gdn_num_v_heads % c.gdn_num_k_heads;
        int rot_odd = c.rotary_dim & 1;
        FD_CHECK(gqa_rem == 0 && gdn_rem == 0 && !rot_odd);
        FD_CHECK(c.rotary_dim > 0 && c.rotary_dim <= c.head_dim);
        FD_CHECK(c.hidden_size > 0 && c.vocab_size > 0 && c.rms_norm_eps > 0);
        for (int i = 0; i < c.num_layers; i++) {
            FD_CHECK(c.layer_kind[i] == FD_LAYER_GDN || c.layer_kind[i] == FD_LAYER_ATTN);
            if (c.layer_is_moe[i])
                FD_CHECK(c.num_experts > 0 && c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts);
            else
                FD_CHECK(c.intermediate_size > 0);
        }
        FD_CHECK(strlen(c.model_type) < sizeof c.model_type && strlen(c.architecture) < sizeof c.architecture);
    } else {
        FD_CHECK(strstr(fd_error_msg(), "fuzz/config.json") != NULL, "error lacks the file name: %s", fd_error_msg());
        FD_CHECK(strchr(fd_error_msg(), '\n') == NULL, "multi-line error: %s", fd_error_msg());
    }
    free(text);
    return 0;
}
