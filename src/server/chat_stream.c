// The scheduler's side of chat output: the generated text, as it grows, becomes reasoning_content / content deltas
// (streams) or the message's fields (plain responses), and tool calls at the end (see chat.h).
#include <stdlib.h>
#include <string.h>

#include "server/server_internal.h"

static void emit_sse(void *ctx, int reasoning, const char *s, size_t n) {
    srv_job *j = ctx;
    if (reasoning) srv_sse_reasoning(j, s, n);
    else srv_sse_chunk(j, s, n, 0, SRV_FINISH_NONE);
}

srv_finish srv_chat_publish(srv_job *j, srv_choice *ch, const char *text, size_t upto, srv_finish fin) {
    if (!j->stream) {
        if (!fin) return fin;
        srv_chat_result r;
        srv_chat_parse(&j->chat, j->tools, text ? text : "", upto, &r);
        if (r.content) srv_buf_add(&ch->text, r.content, strlen(r.content));
        ch->content_null = r.content == NULL;
        ch->reasoning = r.reasoning;
        r.reasoning = NULL;
        if (r.n_calls) ch->tool_calls = srv_tool_calls_json(j, (int)(ch - j->ch), r.calls, r.n_calls);
        if (r.n_calls && fin == SRV_FINISH_STOP) fin = SRV_FINISH_TOOL_CALLS;
        srv_chat_result_free(&r);
        return fin;
    }
    if (!ch->ctext.p) { // first output: the splitter starts on the forced call opening, if any
        srv_chat_split_init(&ch->split, j->chat.reasoning, j->chat.tools, j->chat.in_think);
        const char *f = j->chat.forced ? j->chat.forced : "";
        srv_buf_add(&ch->ctext, f, strlen(f));
    }
    if (upto > ch->ctext_from) {
        srv_buf_add(&ch->ctext, text + ch->ctext_from, upto - ch->ctext_from);
        ch->ctext_from = upto;
    }
    if (!fin) {
        srv_chat_split_feed(&ch->split, ch->ctext.p, ch->ctext.len, emit_sse, j);
        return fin;
    }
    srv_tool_call *calls;
    int n = 0;
    srv_chat_split_finish(&ch->split, ch->ctext.p, ch->ctext.len, j->tools, emit_sse, j, &calls, &n);
    if (n) srv_sse_tool_calls(j, calls, n);
    if (n && fin == SRV_FINISH_STOP) fin = SRV_FINISH_TOOL_CALLS;
    srv_tool_calls_free(calls, n);
    return fin;
}
