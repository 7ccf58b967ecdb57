// The Qwen3 chat template (ChatML), written out in C, and the model's end-of-sequence ids.
//
// chat_render_qwen3 gives the same string as transformers' apply_chat_template(..., tokenize=False) with the
// chat_template of Qwen3's tokenizer_config.json, for messages with roles system/user/assistant/tool (no `tools`
// list, no tool_calls). Checked against that template in tests/test_chat_template.c.
#ifndef FD_CHAT_TEMPLATE_H
#define FD_CHAT_TEMPLATE_H
#include <stdint.h>

#include "io/tokenizer.h"

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
