// The model's own chat template, rendered with our Jinja interpreter (io/jinja.h), as transformers'
// apply_chat_template renders it: the context is messages, tools, documents, add_generation_prompt, the tokenizer's
// special tokens (bos_token, eos_token, ... from tokenizer_config.json) and then the chat_template_kwargs.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "io/chat_template.h"
#include "io/jinja.h"

struct chat_template {
    jj_template *tpl;
    json_t *special; // {"bos_token": "...", ...}: the special tokens the tokenizer config names
    char *origin;    // where the template came from, for the log
    char *source;    // the template text (what it knows about: <think>, <function=, ...)
};

// Qwen3's chat template (Qwen/Qwen3 tokenizer_config.json, tests/data/chat_templates/qwen3.jinja): ChatML with
// thinking and hermes-style tool calls, the fallback for a model that has no template of its own.
static const char QWEN3_TEMPLATE[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set content = message.content %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in message.content %}\n"
    "                {%- set content = message.content.split('</think>')[-1].lstrip('\\n') %}\n"
    "                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}";

static chat_template *from_source(const char *src, size_t n, const char *origin, json_t *special) {
    jj_template *t = jj_parse(src, n);
    if (!t) {
        fd_error_prefix("%s", origin);
        json_decref(special);
        return NULL;
    }
    chat_template *ct = fd_calloc(1, sizeof *ct);
    ct->tpl = t;
    ct->special = special ? special : json_object();
    ct->origin = fd_strdup(origin);
    ct->source = fd_sprintf("%.*s", (int)n, src);
    return ct;
}

chat_template *chat_template_builtin(void) {
    return from_source(QWEN3_TEMPLATE, sizeof QWEN3_TEMPLATE - 1, "built-in (Qwen3 ChatML)", NULL);
}

chat_template *chat_template_from_string(const char *src, size_t n, const char *origin) {
    return from_source(src, n, origin ? origin : "chat template", NULL);
}

// tokenizer_config.json's special tokens: a string, or an AddedToken object {"content": ...}
static json_t *special_tokens(const json_t *cfg) {
    json_t *out = json_object();
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                                        "mask_token", NULL};
    for (int i = 0; cfg && names[i]; i++) {
        json_t *v = json_object_get(cfg, names[i]);
        const char *s = json_is_string(v) ? json_string_value(v)
                      : json_is_object(v) ? json_string_value(json_object_get(v, "content")) : NULL;
        if (s) json_object_set_new(out, names[i], json_string(s));
    }
    return out;
}

// "chat_template" of tokenizer_config.json: a string, or a list of {"name", "template"} (the "default" one).
static const char *config_template(const json_t *cfg) {
    json_t *t = json_object_get(cfg, "chat_template");
    if (json_is_string(t)) return json_string_value(t);
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default")) return json_string_value(json_object_get(e, "template"));
    }
    return NULL;
}

chat_template *chat_template_load(const char *dir, const char *path, int *found) {
    *found = 0;
    json_t *cfg = NULL;
    char *cfg_path = dir ? fd_path_join(dir, "tokenizer_config.json") : NULL;
    if (cfg_path && fd_file_exists(cfg_path)) {
        json_error_t e;
        cfg = json_load_file(cfg_path, 0, &e);
        if (!json_is_object(cfg)) {
            fd_error_set("%s: %s", cfg_path, cfg ? "not a JSON object" : e.text);
            json_decref(cfg);
            free(cfg_path);
            return NULL;
        }
    }
    json_t *special = special_tokens(cfg);
    char *jinja_path = dir ? fd_path_join(dir, "chat_template.jinja") : NULL;
    chat_template *ct = NULL;
    size_t n;
    char *src = NULL;
    const char *origin = NULL;
    if (path) { // --chat-template: a Jinja file, or a JSON file with "chat_template" (a tokenizer_config.json)
        src = fd_read_file(path, &n);
        origin = path;
        if (src) {
            json_t *j = json_loads(src, 0, NULL);
            const char *t = json_is_object(j) ? config_template(j) : NULL;
            if (t) {
                free(src);
                src = fd_strdup(t);
                n = strlen(src);
            }
            json_decref(j);
        }
    } else if (jinja_path && fd_file_exists(jinja_path)) {
        src = fd_read_file(jinja_path, &n);
        origin = jinja_path;
    } else if (cfg && config_template(cfg)) {
        src = fd_strdup(config_template(cfg));
        n = strlen(src);
        origin = cfg_path;
    }
    if (origin) {
        *found = 1;
        if (src) ct = from_source(src, n, origin, special);
        else json_decref(special);
    } else {
        json_decref(special);
    }
    free(src);
    free(jinja_path);
    free(cfg_path);
    json_decref(cfg);
    return ct;
}

const char *chat_template_origin(const chat_template *t) { return t->origin; }
int chat_template_mentions(const chat_template *t, const char *text) { return strstr(t->source, text) != NULL; }

char *chat_template_apply(const chat_template *t, const json_t *messages, const json_t *tools,
                          const json_t *documents, const json_t *kwargs, int add_generation_prompt) {
    json_t *ctx = json_object();
    json_object_set_new(ctx, "messages", messages ? json_deep_copy(messages) : json_array());
    json_object_set_new(ctx, "tools", tools ? json_deep_copy(tools) : json_null());
    json_object_set_new(ctx, "documents", documents ? json_deep_copy(documents) : json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    json_object_update(ctx, t->special);
    if (json_is_object(kwargs)) json_object_update(ctx, (json_t *)kwargs);
    char *s = jj_render(t->tpl, ctx, NULL);
    json_decref(ctx);
    return s;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    jj_free(t->tpl);
    json_decref(t->special);
    free(t->origin);
    free(t->source);
    free(t);
}
