// libFuzzer target for the HTTP request body parser (src/server/request.c, compiled into this target: the fuzz core
// holds no server code): arbitrary bytes as a /v1/completions and as a /v1/chat/completions body.
// Invariants: a refusal is a 4xx with a one-line UTF-8 message and a JSON error body; an accepted request is
// consistent (a completion has exactly one prompt form, a chat at least one message, every stop string non-empty)
// and a chat renders through the template. ASan/UBSan watch every byte.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/request.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one(const uint8_t *data, size_t size, srv_kind kind) {
    srv_req r;
    srv_err e;
    if (srv_req_parse((const char *)data, size, kind, &r, &e)) {
        FD_CHECK(e.status >= 400 && e.status < 500, "status %d", e.status);
        const size_t n = strlen(e.message);
        FD_CHECK(tok_utf8_invalid_at(e.message, n) == n, "error message is not UTF-8");
        for (size_t i = 0; i < n; i++) FD_CHECK((unsigned char)e.message[i] >= 0x20, "control byte in message");
        free(srv_err_json(&e));
        return;
    }
    if (kind == SRV_COMPLETION) FD_CHECK(!r.prompt_text != !r.prompt_ids, "exactly one prompt form");
    else FD_CHECK(r.n_msgs > 0 && r.msgs);
    FD_CHECK(r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
    for (int i = 0; i < r.n_stop; i++) FD_CHECK(r.stop[i][0] != 0);
    FD_CHECK(r.top_p > 0 && r.top_p <= 1 && r.temperature >= 0 && r.temperature <= 2);
    if (kind == SRV_CHAT) {
        tok_span *spans;
        int n_spans;
        char *text = chat_render_qwen3_spans(r.msgs, r.n_msgs, 1, r.enable_thinking, &spans, &n_spans);
        FD_CHECK(text != NULL, "an accepted chat does not render: %s", fd_error_msg());
        free(text);
        free(spans);
    }
    srv_req_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(data, size, SRV_COMPLETION);
    one(data, size, SRV_CHAT);
    return 0;
}
