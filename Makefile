# wan22vae: `make` builds the library, the CLI and the tests; `make test` runs the CPU suite, and the GPU suite
# where a GPU is present. Optional parts are detected: OpenBLAS (else a built-in GEMM), libpng, CUDA (nvcc); `make`
# prints what it found. `make install` (PREFIX, DESTDIR) installs the header, the shared library (SONAME
# libwan22vae.so.<major>) and the static one, the CLI and a pkg-config file; `make uninstall` removes them.
CC      ?= gcc
NVCC    ?= nvcc
BUILD   ?= build
OPT     ?= -O2
CFLAGS  += $(OPT) -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-format-truncation -fPIC -Iinclude -Isrc \
           -pthread -fvisibility=hidden
LDLIBS  += -lm -lpthread -ldl
SAN     ?=
ifneq ($(SAN),)
CFLAGS  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SAN)
endif

# The version: W22_VERSION in include/wan22vae.h (the one place to change it); the SONAME carries its major number.
VERSION       := $(shell sed -n 's/^.define W22_VERSION "\(.*\)".*/\1/p' include/wan22vae.h)
VERSION_MAJOR := $(firstword $(subst ., ,$(VERSION)))
SONAME        := libwan22vae.so.$(VERSION_MAJOR)
# The libraries a program linking libwan22vae.a needs, as detected below (the pkg-config file's Libs.private).
LIBS_PRIVATE  :=

has_header = $(shell printf '\#include <$(1)>\n' | $(CC) -E -x c - >/dev/null 2>&1 && echo 1)

BLAS ?= $(if $(call has_header,cblas.h),openblas,none)
# OpenBLAS's header at build time; the library itself is dlopen'd at the first product (src/cpu/gemm.c says why)
ifeq ($(BLAS),openblas)
CFLAGS += -DW22_HAVE_CBLAS
endif
PNG ?= $(if $(call has_header,png.h),1,0)
ifeq ($(PNG),1)
CFLAGS += -DW22_HAVE_PNG
LDLIBS += -lpng -lz
LIBS_PRIVATE += -lpng -lz
endif
CUDA ?= $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v $(NVCC) 2>/dev/null))
NVFLAGS ?= -O3 -std=c++17 -lineinfo -Xptxas=--warn-on-spills -Xcompiler -fPIC -Iinclude -Isrc
NVFLAGS += -Xcompiler -fvisibility=hidden
# One fat library (issue 45): the Hopper-only kernels (wgmma, TMA, clusters) as sm_90a SASS; every other kernel (the
# portable path: mma.sync, cp.async, ldmatrix and the plain kernels) as SASS for each of CUDA_ARCHS plus compute_80
# PTX, which the driver compiles for GPUs that come later. Which .cu is which: a file whose name holds "wgmma" or
# ends in _sm90a.cu is Hopper-only (CU_HOPPER); every other .cu, in src/cuda or any other folder, is portable. The
# backend never launches a Hopper-only kernel on another GPU (src/cuda/route.h: the path is taken at open).
CUDA_ARCHS    ?= 80 86 89 90a 100 120
NVARCH_ALL    := $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a),code=sm_$(a)) \
                 -gencode=arch=compute_80,code=compute_80
NVARCH_HOPPER := -gencode=arch=compute_90a,code=sm_90a
ifeq ($(CUDA),1)
CFLAGS += -DW22_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt
LIBS_PRIVATE += -L$(CUDA_HOME)/lib64 -lcudart_static -lrt -lstdc++
endif
LIBS_PRIVATE += -lm -lpthread -ldl

# One line saying what was found (ffmpeg is needed at run time only, for .mp4: whether it is on the PATH).
NVCC_RELEASE = $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
ifneq ($(if $(MAKECMDGOALS),$(filter-out clean uninstall,$(MAKECMDGOALS)),all),)
$(info wan22vae: BLAS=$(BLAS) PNG=$(PNG) CUDA=$(CUDA)$(if $(filter 1,$(CUDA)), (nvcc $(or $(NVCC_RELEASE),?))) \
FFMPEG=$(if $(shell command -v ffmpeg 2>/dev/null),yes,no))
endif

LIB_C   := $(sort $(wildcard src/*.c src/model/*.c src/weights/*.c src/plan/*.c src/cpu/*.c src/dist/*.c src/io/*.c src/dit/*.c))
LIB_CU  := $(if $(filter 1,$(CUDA)),$(sort $(wildcard src/cuda/*.cu src/dit/*.cu)),)
CU_HOPPER := $(filter %wgmma.cu %wgmma_tma.cu %_sm90a.cu,$(LIB_CU))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/%.o) $(LIB_CU:%.cu=$(BUILD)/%.o)
CLI_C   := $(sort $(wildcard cli/*.c))
TEST_C  := $(sort $(wildcard tests/test_*.c))
TESTS   := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
TEST_CU := $(if $(filter 1,$(CUDA)),$(sort $(wildcard tests/cuda_*.c)),)
GTESTS  := $(TEST_CU:tests/%.c=$(BUILD)/tests/%)

# bench/bits: the decode's bits and f121's time for refactor A/B runs (bench/ab.sh)
PROBES  := $(if $(filter 1,$(CUDA)),$(BUILD)/bench/bits,)

all: $(BUILD)/libwan22vae.a $(BUILD)/libwan22vae.so $(BUILD)/wan22vae $(TESTS) $(GTESTS) $(PROBES)

# The compile commands, kept in $(BUILD)/.flags: objects are rebuilt when they change (an option, a part detected).
$(BUILD)/.flags: FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(CC) $(CFLAGS)' '$(NVCC) $(NVFLAGS)' '$(NVARCH_ALL)' '$(NVARCH_HOPPER)' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# The frame conversions of the video writers, vectorized (issue 30: the writer thread keeps up with the decode).
# pixels.c's float steps must round one by one as w22_pixel_u8's reference does: no fused multiply-add; no trapping
# math lets its compares become vector selects (no value changes: only floating-point exceptions are not kept).
$(BUILD)/src/io/pixels.o: CFLAGS += -ffp-contract=off -fno-trapping-math -ftree-vectorize
$(BUILD)/src/io/video_y4m.o: CFLAGS += -ftree-vectorize

NVARCH := $(NVARCH_ALL)
$(CU_HOPPER:%.cu=$(BUILD)/%.o): NVARCH := $(NVARCH_HOPPER)
$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVARCH) -MMD -MP -c $< -o $@

$(BUILD)/libwan22vae.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Exports only what W22_API marks (-fvisibility=hidden above); --exclude-libs keeps the static archives' symbols
# (cudart_static) out of the dynamic symbol table too.
$(BUILD)/libwan22vae.so: $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(SONAME) -Wl,--exclude-libs,ALL -o $@ $^ $(LDLIBS) \
	    $(if $(filter 1,$(CUDA)),-lstdc++)

$(BUILD)/wan22vae: $(CLI_C:%.c=$(BUILD)/%.o) $(BUILD)/libwan22vae.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(filter 1,$(CUDA)),-lstdc++)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/testutil.o $(BUILD)/libwan22vae.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(if $(filter 1,$(CUDA)),-lstdc++)

$(BUILD)/bench/bits: $(BUILD)/bench/bits.o $(BUILD)/libwan22vae.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lstdc++

# dev/: experiments, llm.c style, outside `all` and the library: `make dev` builds the CUDA ones (none at present;
# dev/winograd_f4_probe.py is numpy)
DEV_CU := $(if $(filter 1,$(CUDA)),$(sort $(wildcard dev/*.cu)),)
dev: $(DEV_CU:dev/%.cu=$(BUILD)/dev/%)
$(BUILD)/dev/%: dev/%.cu $(BUILD)/libwan22vae.a
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVARCH_HOPPER) -o $@ $^ $(filter-out -lcudart_static,$(LDLIBS))

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

# The library's threads under ThreadSanitizer (tests/tsan.sh says what runs): no CUDA, and the built-in GEMM, whose
# threads are ours to check (OpenBLAS's are not instrumented).
test-tsan:
	$(MAKE) BUILD=build-tsan SAN=thread CUDA=0 BLAS=none OPT=-O1 all
	@BUILD=build-tsan tests/tsan.sh

# Disassembly of the CUDA kernels: HGMMA/HMMA should be there; per arch, its kernels and their HMMA/HGMMA lines (the
# portable ones on every arch of CUDA_ARCHS, the Hopper ones on sm_90a alone; tests/test_fat_build.sh checks the
# archs without cuobjdump). Spills: ptxas warns at build time (-Xptxas=--warn-on-spills).
sass: $(LIB_CU:%.cu=$(BUILD)/%.o)
	for o in $^; do cuobjdump --dump-sass $$o; done > $(BUILD)/kernels.sass; grep -c -E 'HGMMA|HMMA' $(BUILD)/kernels.sass
	@awk '/^arch = / {a = $$3} /Function : / {k[a]++} /HMMA|HGMMA/ {m[a]++} \
	    END {for (x in k) printf "%s: %d kernels, %d HMMA/HGMMA lines\n", x, k[x], m[x]}' $(BUILD)/kernels.sass | sort

# make install [PREFIX=/usr/local] [DESTDIR=staging]: the header, libwan22vae.so.$(VERSION) with its links
# (SONAME $(SONAME)), libwan22vae.a, the CLI and lib/pkgconfig/wan22vae.pc (Libs.private: what the .a needs here).
PREFIX     ?= /usr/local
DESTDIR    ?=
BINDIR     ?= $(PREFIX)/bin
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL    ?= install
LDCONFIG   ?= ldconfig

$(BUILD)/%.pc: %.pc.in Makefile FORCE
	@mkdir -p $(dir $@)
	@sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|g' \
	    -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@LIBS_PRIVATE@|$(LIBS_PRIVATE)|g' $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi

install: $(BUILD)/libwan22vae.a $(BUILD)/libwan22vae.so $(BUILD)/wan22vae $(BUILD)/wan22vae.pc $(BUILD)/wan22vae-static.pc
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	$(INSTALL) -m 644 include/wan22vae.h $(DESTDIR)$(INCLUDEDIR)/wan22vae.h
	$(INSTALL) -m 755 $(BUILD)/libwan22vae.so $(DESTDIR)$(LIBDIR)/libwan22vae.so.$(VERSION)
	ln -sf libwan22vae.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libwan22vae.so
	$(INSTALL) -m 644 $(BUILD)/libwan22vae.a $(DESTDIR)$(LIBDIR)/libwan22vae.a
	$(INSTALL) -m 755 $(BUILD)/wan22vae $(DESTDIR)$(BINDIR)/wan22vae
	$(INSTALL) -m 644 $(BUILD)/wan22vae.pc $(DESTDIR)$(PKGCONFIGDIR)/wan22vae.pc
	$(INSTALL) -m 644 $(BUILD)/wan22vae-static.pc $(DESTDIR)$(PKGCONFIGDIR)/wan22vae-static.pc
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then $(LDCONFIG) 2>/dev/null || true; fi

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/wan22vae.h $(DESTDIR)$(LIBDIR)/libwan22vae.so.$(VERSION) \
	    $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libwan22vae.so $(DESTDIR)$(LIBDIR)/libwan22vae.a \
	    $(DESTDIR)$(BINDIR)/wan22vae $(DESTDIR)$(PKGCONFIGDIR)/wan22vae.pc $(DESTDIR)$(PKGCONFIGDIR)/wan22vae-static.pc
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then $(LDCONFIG) 2>/dev/null || true; fi

clean:
	rm -rf build build-asan build-tsan

FORCE:
.PHONY: all test test-asan test-tsan sass clean install uninstall dev FORCE
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# libFuzzer targets under ASan + UBSan: tests/fuzz_<name>.c linked with the library sources FUZZ_SRC_<name>, run
# for FUZZ_TIME seconds each from the committed seeds FUZZ_CORPUS_<name> (default tests/fuzz_corpus_<name>/, made
# by tools/fuzz_corpus.py) with tests/fuzz_<name>.dict where present; new inputs go to $(BUILD)/fuzz_corpus_<name>,
# crashes to $(BUILD)/fuzz-crash-<name>-*. `make fuzz` runs every target in FUZZ_TARGETS, `make fuzz-<name>` one.
# A new target: its name in FUZZ_TARGETS and a FUZZ_SRC_<name> line (npy and latents go here too).
# Needs clang with libFuzzer (Debian/Ubuntu: clang-14 + libclang-rt-14-dev).
FUZZ_CC      ?= clang
FUZZ_TARGETS ?= safetensors weights npy latents config
# ~100 s of fuzzing shared by the targets, so that the whole `make fuzz` (builds included) stays near 120 s
FUZZ_TIME    ?= $(shell expr 100 / $(words $(FUZZ_TARGETS)))
FUZZ_FLAGS   := -g -O1 -std=gnu11 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SRC_safetensors := src/weights/safetensors.c src/weights/json.c src/error.c
FUZZ_SRC_weights     := src/weights/safetensors.c src/weights/json.c src/weights/weights.c src/weights/source.c \
                        src/weights/finite.c src/model/model.c src/no_cuda.c src/error.c
FUZZ_CORPUS_safetensors := tests/fuzz_corpus
FUZZ_SRC_npy     := src/io/npy.c src/io/latents.c src/io/input.c src/io/outfile.c src/weights/safetensors.c \
                    src/weights/json.c src/error.c
FUZZ_SRC_latents := $(FUZZ_SRC_npy)
FUZZ_SRC_config  := src/weights/source.c src/weights/safetensors.c src/weights/json.c src/weights/weights.c \
                    src/weights/finite.c src/model/model.c src/no_cuda.c src/error.c

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
