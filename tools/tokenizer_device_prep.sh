#!/usr/bin/env bash
# Prepares .tokdev/ for the tokenizer golden cross-check and benchmark on the GPU machine (which has HF
# tokenizers/transformers but none of our -dev libraries): a static build of `flashdelta tokenize` and the
# tokenizer.json files of `make tokenizer-data`. .tokdev/ must be listed in .git/info/exclude; name it in `carry`.
# Then, on the device:
#   python3 tools/tokenizer_golden.py check .tokdev/tokenizer-qwen3/models/tokenizer.json
#   taskset -c 3 python3 tools/tokenizer_golden.py bench .tokdev/tokenizer-qwen3/models/tokenizer.json .tokdev/fd_tok
set -euo pipefail
cd "$(dirname "$0")/.."
make tokenizer-data
grep -qx '/.tokdev/' .git/info/exclude 2>/dev/null || echo '/.tokdev/' >> .git/info/exclude
rm -rf .tokdev && mkdir -p .tokdev
printf '#include "cli/cli.h"\nint main(int argc, char **argv) { return cmd_tokenize(argc - 1, argv + 1); }\n' > .tokdev/main.c
gcc -std=c11 -O2 -g -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc -pthread -static -o .tokdev/fd_tok .tokdev/main.c \
    src/cli/cmd_tokenize.c src/io/tokenizer_*.c src/base/base.c -ljansson -lpcre2-8 -lutf8proc -lm -lpthread
for p in qwen3 llama3 gpt4o deepseek_v3; do
    mkdir -p .tokdev/tokenizer-$p/models && cp third_party/tokenizer-$p/models/tokenizer.json .tokdev/tokenizer-$p/models/
done
cp third_party/tokenizer-qwen3/models/tokenizer_config.json .tokdev/tokenizer-qwen3/models/
du -sh .tokdev
