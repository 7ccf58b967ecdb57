// libFuzzer target for the chat template and control-token encoding: bytes become messages (a role byte, then the
// content, 0x00 between messages; byte 0 picks the generation prompt and enable_thinking), rendered with Qwen3's
// template and encoded with the test tokenizer (tests/data/server/tokenizer.json, ChatML specials at 509..511;
// run from the repo root). Invariants: the plain spans lie in the text, in order; with them, the encoder gives
// exactly as many special ids as the template itself wrote special tokens (none from message text); with special
// parsing off it gives none; decode(encode(text)) == text.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const k_special[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

static int in_spans(const tok_span *s, int n, size_t a, size_t b) {
    for (int i = 0; i < n; i++)
        if (a < s[i].off + s[i].len && s[i].off < b) return 1;
    return 0;
}

// Leftmost non-overlapping special-token strings that touch no span (what the template wrote).
static size_t template_specials(const char *t, size_t n, const tok_span *s, int ns) {
    size_t count = 0;
    for (size_t i = 0; i < n;) {
        size_t hit = 0;
        for (int k = 0; k < 3 && !hit; k++) {
            const size_t l = strlen(k_special[k]);
            if (l <= n - i && !memcmp(t + i, k_special[k], l) && !in_spans(s, ns, i, i + l)) hit = l;
        }
        count += hit > 0;
        i += hit ? hit : 1;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tok_tokenizer *tok;
    if (!tok) {
        tok = tok_load("tests/data/server/tokenizer.json");
        FD_CHECK(tok != NULL, "run the fuzzer from the repo root: %s", fd_error_msg());
    }
    if (size < 1) return 0;
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    chat_msg msgs[64];
    char *copy = fd_malloc(size);
    memcpy(copy, data + 1, size - 1);
    copy[size - 1] = 0;
    int n = 0;
    for (size_t i = 0; i < size - 1 && n < 64;) {
        const size_t len = strlen(copy + i);
        if (len == 0) {
            i++;
            continue;
        }
        msgs[n].role = roles[(unsigned char)copy[i] % 4];
        msgs[n].content = copy + i + 1;
        msgs[n].reasoning_content = (unsigned char)copy[i] & 0x80 ? copy + i + 1 : NULL;
        n++;
        i += len + 1;
    }
    tok_span *spans;
    int ns;
    const int think = data[0] & 2 ? CHAT_THINKING_OFF : CHAT_THINKING_DEFAULT;
    char *text = chat_render_qwen3_spans(msgs, n, data[0] & 1, think, &spans, &ns);
    if (!text) {
        FD_CHECK(n == 0, "render failed: %s", fd_error_msg());
        free(copy);
        return 0;
    }
    const size_t len = strlen(text);
    for (int i = 0; i < ns; i++) {
        FD_CHECK(spans[i].len > 0 && spans[i].off + spans[i].len <= len, "span outside the text");
        FD_CHECK(i == 0 || spans[i].off >= spans[i - 1].off + spans[i - 1].len, "spans out of order");
    }
    tok_ids ids = {0};
    const tok_enc_opts safe = {.parse_special = 1, .plain = spans, .n_plain = ns}, off = {0};
    if (tok_encode_opts(tok, text, len, &safe, &ids) == 0) {
        size_t specials = 0;
        for (size_t i = 0; i < ids.n; i++) specials += ids.ids[i] >= 509 && ids.ids[i] <= 511;
        FD_CHECK(specials == template_specials(text, len, spans, ns), "special ids %zu, the template wrote %zu",
                 specials, template_specials(text, len, spans, ns));
        char *back;
        size_t blen;
        FD_CHECK(tok_decode(tok, ids.ids, ids.n, 0, &back, &blen) == 0);
        FD_CHECK(blen == len && !memcmp(back, text, len), "decode(encode(text)) != text");
        free(back);
        ids.n = 0;
        FD_CHECK(tok_encode_opts(tok, text, len, &off, &ids) == 0);
        for (size_t i = 0; i < ids.n; i++) FD_CHECK(ids.ids[i] < 509, "a special id with special parsing off");
    } else {
        FD_CHECK(tok_utf8_invalid_at(text, len) < len, "encode failed on valid UTF-8: %s", fd_error_msg());
    }
    tok_ids_free(&ids);
    free(text);
    free(spans);
    free(copy);
    return 0;
}
