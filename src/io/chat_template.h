// Chat templates: the model's own (a Jinja template read from the model directory and rendered by io/jinja.h, as
// transformers' apply_chat_template does), the built-in fallback (Qwen3's template), the Qwen3 template written out
// in C (chat_render_qwen3), and the model's end-of-sequence ids.
//
// chat_render_qwen3 gives the same string as transformers' apply_chat_template(..., tokenize=False) with the
// chat_template of Qwen3's tokenizer_config.json, for messages with roles system/user/assistant/tool (no `tools`
// list, no tool_calls). Checked against that template in tests/test_chat_template.c.
#ifndef FD_CHAT_TEMPLATE_H
#define FD_CHAT_TEMPLATE_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/tokenizer.h"

// ---- the model's own template ----
typedef struct chat_template chat_template;

// The chat template of a model: `path` when given (--chat-template: a Jinja file, or a JSON file with a
// "chat_template" such as a tokenizer_config.json), else dir/chat_template.jinja, else dir/tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template}: "default"). Special tokens (bos_token, eos_token, ...)
// come from dir/tokenizer_config.json. *found = 0 and NULL (no error) when there is none: use
// chat_template_builtin(). NULL + fd_error with *found = 1 for a template that does not parse or a bad file.
chat_template *chat_template_load(const char *dir, const char *path, int *found);
// Qwen3's own template (ChatML, <think> reasoning, hermes <tool_call> JSON), for models without a template.
chat_template *chat_template_builtin(void);
// A template from text (tests, tools). NULL + fd_error on a syntax error.
chat_template *chat_template_from_string(const char *src, size_t n, const char *origin);
// Renders the prompt: messages (a JSON array of message objects, as the template expects them), tools and
// documents (arrays, or NULL: the template sees None, as with transformers), kwargs (chat_template_kwargs, an
// object or NULL). Returns the text (malloc'ed), or NULL + fd_error (a template's raise_exception included).
char *chat_template_apply(const chat_template *t, const json_t *messages, const json_t *tools,
                          const json_t *documents, const json_t *kwargs, int add_generation_prompt);
const char *chat_template_origin(const chat_template *t); // the file it came from, or "built-in ..."
// Whether the template's text contains `text` (what the output looks like: "</think>", "<function=", ...).
int chat_template_mentions(const chat_template *t, const char *text);
void chat_template_free(chat_template *t);

// ---- Qwen3's template, in C ----

typedef struct {
    const char *role;              // "system" | "user" | "assistant" | "tool"
    const char *content;           // NULL is treated as ""
    const char *reasoning_content; // assistant only; NULL = not given (then taken from <think>...</think>)
} chat_msg;

// enable_thinking as the template reads it: only an explicit false adds the empty think block after the generation
// prompt; true and "not given" render the same.
enum { CHAT_THINKING_DEFAULT = -1, CHAT_THINKING_OFF = 0, CHAT_THINKING_ON = 1 };

// Returns the prompt text (malloc'ed), or NULL + fd_error for an unknown role or no messages.
char *chat_render_qwen3(const chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking);

// The same, and where message text (content, reasoning) went: *spans (malloc'ed, *n_spans of them; NULL if none)
// are the plain spans for tok_encode_opts, so special-token text a user wrote stays text.
char *chat_render_qwen3_spans(const chat_msg *msgs, int n, int add_generation_prompt, int enable_thinking,
                              tok_span **spans, int *n_spans);

// End-of-sequence ids: generation_config.json "eos_token_id" (a number or a list) and tokenizer_config.json
// "eos_token" (a string or {"content": ...}) found in model_dir, in that order, without repeats. Returns how many
// (0 if neither file names one), or -1 + fd_error for a file that exists but is malformed.
int chat_eos_ids(const char *model_dir, const tok_tokenizer *t, int32_t *ids, int max_ids);
#endif
