// libFuzzer target for the Jinja interpreter: arbitrary bytes as a chat template, parsed and (when it parses)
// rendered with a small conversation. Either step may fail with a message; neither may crash, hang, leak or read
// out of bounds, and a rendering is always a NUL-terminated string of the length it reports.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CTX[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi <think>\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>r</think>ok\", \"tool_calls\": [{\"type\": \"function\","
    "\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null, true]}}}]},"
    "{\"role\": \"tool\", \"content\": \"out\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\","
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"array\"}}}}}],"
    "\"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *ctx;
    if (!ctx) ctx = json_loads(CTX, 0, NULL);
    jj_template *t = jj_parse((const char *)data, size);
    if (!t) return 0;
    size_t len = 0;
    char *out = jj_render_bounded(t, ctx, &len, 200000, 1 << 20); // small bounds keep each run fast
    if (out) FD_CHECK(strlen(out) <= len && out[len] == 0);
    free(out);
    jj_free(t);
    return 0;
}
