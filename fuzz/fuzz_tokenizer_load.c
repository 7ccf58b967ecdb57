// libFuzzer target for tokenizer.json loading: arbitrary bytes as the file. tok_load_json must either fail with a
// message or give a tokenizer that encodes and decodes a few fixed texts with ids inside its vocabulary.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int init;
    if (!init) {
        fd_log_set_level(FD_LOG_QUIET); // added-token id warnings would flood the log
        init = 1;
    }
    tok_tokenizer *t = tok_load_json((const char *)data, size, "fuzz/tokenizer.json");
    if (!t) {
        FD_CHECK(fd_error_msg()[0] != 0, "a failed load must say why");
        return 0;
    }
    static const char *texts[] = {"Hello world! 123 4567", "<|im_start|>user\nhi<|im_end|>", "  \t\r\n x",
                                  "\xe4\xbd\xa0\xe5\xa5\xbd e\xcc\x81 \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd", ""};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        tok_ids ids = {0};
        if (tok_encode(t, texts[i], strlen(texts[i]), &ids) == 0) {
            for (size_t k = 0; k < ids.n; k++) FD_CHECK(ids.ids[k] >= 0 && ids.ids[k] < tok_n_vocab(t));
            char *s = NULL;
            size_t n = 0;
            if (tok_decode(t, ids.ids, ids.n, 0, &s, &n) == 0) FD_CHECK(tok_utf8_invalid_at(s, n) == n);
            free(s);
        }
        tok_ids_free(&ids);
    }
    tok_free(t);
    return 0;
}
