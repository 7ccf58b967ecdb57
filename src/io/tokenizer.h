// Byte-level BPE tokenizer that loads a Hugging Face `tokenizer.json` and gives the same ids as HF `tokenizers`.
//
// Supported (anything else is refused at load time with a clear error, never silently approximated):
//  - normalizer: null, NFC/NFD/NFKC/NFKD, or a Sequence of those;
//  - pre_tokenizer: ByteLevel, or a Sequence of Split (regex or literal; any SplitDelimiterBehavior; invert)
//    steps ending in ByteLevel (add_prefix_space, use_regex; trim_offsets only moves offsets, so ids ignore it);
//  - model: BPE with vocab + merges ("a b" strings or ["a","b"] pairs), ignore_merges, unk_token/fuse_unk;
//  - added_tokens: special and non-special, matched leftmost-longest before pre-tokenization, with lstrip, rstrip,
//    single_word and normalized;
//  - decoder: ByteLevel. The post_processor is not applied: tok_encode never adds special tokens (HF
//    `add_special_tokens=False`); Qwen models add none anyway.
// Input text must be valid UTF-8 (tok_encode says where it is not). A loaded tokenizer is read-only, so any number
// of threads may encode/decode with it at once.
#ifndef FD_TOKENIZER_H
#define FD_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct tok_tokenizer tok_tokenizer;

// A growable id buffer owned by the caller (free with tok_ids_free).
typedef struct {
    int32_t *ids;
    size_t n, cap;
} tok_ids;
void tok_ids_push(tok_ids *v, int32_t id);
void tok_ids_free(tok_ids *v);

// path: a tokenizer.json file, or a directory containing one. NULL + fd_error_msg() on failure.
tok_tokenizer *tok_load(const char *path);
// Loads from JSON text in memory; name is only used in error messages.
tok_tokenizer *tok_load_json(const char *json, size_t len, const char *name);
void tok_free(tok_tokenizer *t);

int32_t tok_n_vocab(const tok_tokenizer *t);                  // largest id + 1
int32_t tok_token_id(const tok_tokenizer *t, const char *tok); // added token or vocab entry; -1 if none
int tok_is_special(const tok_tokenizer *t, int32_t id);
// The bytes one token decodes to (not necessarily whole UTF-8 characters), or NULL for an unknown id.
const char *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);

// Appends the ids of text[0..len) to out. Returns 0, or -1 (invalid UTF-8; out unchanged) with fd_error set.
// Special added tokens written in the text (e.g. "<|im_end|>") become their ids (HF's default); see tok_encode_opts.
int tok_encode(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out);

// Control-token injection: text a user wrote must not become control tokens. A plain span [off, off + len) of the
// input is encoded with special added tokens treated as ordinary text (HF's split_special_tokens); a special token
// that would touch a plain span does not match. Non-special added tokens still match everywhere, as in HF.
typedef struct {
    size_t off, len;
} tok_span;
typedef struct {
    int parse_special;     // 0: no special token matches anywhere (a /v1/completions prompt by default)
    const tok_span *plain; // with parse_special: spans where none matches (a chat message's content); may be NULL
    int n_plain;
} tok_enc_opts;
int tok_encode_opts(const tok_tokenizer *t, const char *text, size_t len, const tok_enc_opts *o, tok_ids *out);

// Decodes ids to text (malloc'ed, NUL-terminated; *out_len excludes the NUL). Byte sequences that are not valid
// UTF-8 become U+FFFD, as HF does. skip_special drops special added tokens. -1 on an unknown id.
int tok_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out, size_t *out_len);

// Streaming decode for SSE: push ids one at a time and get back only whole UTF-8 characters; bytes of a character
// still incomplete are held until the ids that finish it arrive. Concatenating every push and the final flush
// gives exactly tok_decode of all the ids.
typedef struct tok_stream tok_stream;
tok_stream *tok_stream_new(const tok_tokenizer *t, int skip_special);
// Returns the newly complete text (valid until the next call on s; *len may be 0), or NULL on an unknown id.
const char *tok_stream_push(tok_stream *s, int32_t id, size_t *len);
// Ends the stream: whatever is still held becomes U+FFFD. The stream can then be reused.
const char *tok_stream_flush(tok_stream *s, size_t *len);
void tok_stream_free(tok_stream *s);

// Index of the first byte where text is not valid UTF-8, or len if it all is.
size_t tok_utf8_invalid_at(const char *text, size_t len);
#endif
