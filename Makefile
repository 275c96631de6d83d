# wan22vae: `make` builds the library, the CLI and the tests; `make test` runs the CPU suite, and the GPU suite
# where a GPU is present. Optional parts are detected: OpenBLAS (else a built-in GEMM), libpng, CUDA (nvcc).
CC      ?= gcc
NVCC    ?= nvcc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  += $(OPT) -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -fPIC -Iinclude -Isrc -pthread
LDLIBS  += -lm -lpthread -ldl
SAN     ?=
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

has_header = $(shell printf '\#include <$(1)>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1)

BLAS ?= $(if $(call has_header,cblas.h),openblas,none)
ifeq ($(BLAS),openblas)
CFLAGS += -DW22_HAVE_CBLAS
LDLIBS += -lopenblas
endif
PNG ?= $(if $(call has_header,png.h),1,0)
ifeq ($(PNG),1)
CFLAGS += -DW22_HAVE_PNG
LDLIBS += -lpng -lz
endif
CUDA ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
NVFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas=--warn-on-spills \
           -Xcompiler -fPIC -Iinclude -Isrc
ifeq ($(CUDA),1)
CFLAGS += -DW22_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt
endif

LIB_C   := $(sort $(wildcard src/*.c src/model/*.c src/weights/*.c src/plan/*.c src/cpu/*.c src/dist/*.c src/io/*.c))
LIB_CU  := $(if $(filter 1,$(CUDA)),$(sort $(wildcard src/cuda/*.cu)),)
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)
CLI_C   := $(sort $(wildcard cli/*.c))
TEST_C  := $(sort $(wildcard tests/test_*.c))
TESTS   := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
TEST_CU := $(if $(filter 1,$(CUDA)),$(sort $(wildcard tests/cuda_*.c)),)
GTESTS  := $(TEST_CU:tests/%.c=$(BUILD)/tests/%)

PROBES  := $(if $(filter 1,$(CUDA)),$(BUILD)/bench/winograd_probe,)

all: $(BUILD)/libwan22vae.a $(BUILD)/libwan22vae.so $(BUILD)/wan22vae $(TESTS) $(GTESTS) $(PROBES)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libwan22vae.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libwan22vae.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(filter 1,$(CUDA)),-lstdc++)

$(BUILD)/wan22vae: $(CLI_C:%.c=$(BUILD)/%.o) $(BUILD)/libwan22vae.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(filter 1,$(CUDA)),-lstdc++)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/testutil.o $(BUILD)/libwan22vae.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(filter 1,$(CUDA)),-lstdc++)

# bench/winograd_probe.cu: a measurement of a path the library does not take (docs/PERF.md v17)
$(BUILD)/bench/winograd_probe: bench/winograd_probe.cu $(BUILD)/libwan22vae.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $^ $(filter-out -lcudart_static,$(LDLIBS))

# The CPU suite everywhere; the GPU suite too where a GPU answers.
test: all
	@BUILD=$(BUILD) tests/run.sh cpu $(TESTS) $(sort $(wildcard tests/test_*.sh))
	@if [ -n "$(GTESTS)" ] && $(BUILD)/wan22vae gpu-check >/dev/null 2>&1; then \
	    BUILD=$(BUILD) tests/run.sh gpu $(GTESTS) $(sort $(wildcard tests/cuda_*.sh)); \
	else echo "GPU suite: skipped (no usable GPU here)"; fi

# The CPU suite under AddressSanitizer + UndefinedBehaviorSanitizer (a separate build tree, no CUDA).
test-asan:
	$(MAKE) BUILD=build-asan SAN=address,undefined CUDA=0 OPT=-O1 all
	@BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 tests/run.sh asan $(TESTS:$(BUILD)/%=build-asan/%)

# Disassembly of the CUDA kernels: HGMMA/HMMA should be there.
sass: $(LIB_CU:%.cu=$(BUILD)/%.o)
	for o in $^; do cuobjdump --dump-sass $$o; done > $(BUILD)/kernels.sass; grep -c -E 'HGMMA|HMMA' $(BUILD)/kernels.sass

clean:
	rm -rf build build-asan

.PHONY: all test test-asan sass clean
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# libFuzzer targets under ASan + UBSan: tests/fuzz_<name>.c linked with the library sources FUZZ_SRC_<name>, run
# for FUZZ_TIME seconds each from the committed seeds FUZZ_CORPUS_<name> (default tests/fuzz_corpus_<name>/, made
# by tools/fuzz_corpus.py) with tests/fuzz_<name>.dict where present; new inputs go to $(BUILD)/fuzz_corpus_<name>,
# crashes to $(BUILD)/fuzz-crash-<name>-*. `make fuzz` runs every target in FUZZ_TARGETS, `make fuzz-<name>` one.
# A new target: its name in FUZZ_TARGETS and a FUZZ_SRC_<name> line (npy and latents go here too).
# Needs clang with libFuzzer (Debian/Ubuntu: clang-14 + libclang-rt-14-dev).
FUZZ_CC      ?= clang
FUZZ_TARGETS ?= safetensors weights npy latents
# ~100 s of fuzzing shared by the targets, so that the whole `make fuzz` (builds included) stays near 120 s
FUZZ_TIME    ?= $(shell expr 100 / $(words $(FUZZ_TARGETS)))
FUZZ_FLAGS   := -g -O1 -std=gnu11 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SRC_safetensors := src/weights/safetensors.c src/error.c
FUZZ_SRC_weights     := src/weights/safetensors.c src/weights/weights.c src/weights/finite.c src/model/model.c \
                        src/error.c
FUZZ_CORPUS_safetensors := tests/fuzz_corpus
FUZZ_SRC_npy     := src/io/npy.c src/io/latents.c src/io/input.c src/io/outfile.c src/weights/safetensors.c src/error.c
FUZZ_SRC_latents := $(FUZZ_SRC_npy)

$(BUILD)/fuzz/fuzz_%: tests/fuzz_%.c $(LIB_C) $(wildcard include/*.h src/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(FUZZ_SRC_$*) -o $@ -lm -lpthread

fuzz-%: $(BUILD)/fuzz/fuzz_%
	@mkdir -p $(BUILD)/fuzz_corpus_$*
	$< -max_total_time=$(FUZZ_TIME) -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
	    $(if $(wildcard tests/fuzz_$*.dict),-dict=tests/fuzz_$*.dict) -artifact_prefix=$(BUILD)/fuzz-crash-$*- \
	    $(BUILD)/fuzz_corpus_$* $(or $(FUZZ_CORPUS_$*),tests/fuzz_corpus_$*)

fuzz: $(FUZZ_TARGETS:%=fuzz-%)

.PRECIOUS: $(BUILD)/fuzz/fuzz_%
.PHONY: fuzz
