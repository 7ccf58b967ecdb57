// The prompt of a chat request: the model's template over the request's messages, tools and
// chat_template_kwargs, plus the opening of a tool call when tool_choice demands one (see chat.h).
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "server/chat.h"

static const char *last(const char *s, const char *needle) {
    const char *hit = NULL;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) hit = p;
    return hit;
}

int srv_chat_build_prompt(const chat_template *t, const srv_req *r, srv_chat_prompt *p, srv_err *e) {
    memset(p, 0, sizeof *p);
    // tool_choice "none": the model is not told about the tools, so it answers in text
    const json_t *tools = r->tools && r->tool_choice != SRV_TOOLS_NONE ? r->tools : NULL;
    char *text = chat_template_apply(t, r->chat_messages, tools, NULL, r->template_kwargs, 1);
    if (!text) return srv_err_set(e, 400, "invalid_request_error", NULL, "messages", "%s", fd_error_msg());
    p->reasoning = chat_template_mentions(t, "</think>");
    p->tools = tools != NULL;
    const char *open = last(text, "<think>"), *close = last(text, "</think>");
    p->in_think = p->reasoning && open && (!close || close < open);
    if (r->tool_choice == SRV_TOOLS_REQUIRED || r->tool_choice == SRV_TOOLS_NAMED) {
        // No constrained decoding: the prompt itself opens the call, so the model can only continue it.
        // A thinking block the template opened is closed first (empty, as enable_thinking=false renders it).
        const int xml = chat_template_mentions(t, "<function=");
        const char *name = r->tool_choice_name;
        p->forced = xml ? (name ? fd_sprintf("<tool_call>\n<function=%s>\n", name) : fd_strdup("<tool_call>\n<function="))
                        : (name ? fd_sprintf("<tool_call>\n{\"name\": \"%s\", \"arguments\": ", name)
                                : fd_strdup("<tool_call>\n{\"name\": \""));
        char *t2 = fd_sprintf("%s%s%s", text, p->in_think ? "\n</think>\n\n" : "", p->forced);
        free(text);
        text = t2;
        p->in_think = 0;
    }
    p->text = text;
    return 0;
}

void srv_chat_prompt_free(srv_chat_prompt *p) {
    free(p->text);
    free(p->forced);
    memset(p, 0, sizeof *p);
}
