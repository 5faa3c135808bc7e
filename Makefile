# The lab kit's one entry point. `make help` lists the targets.
SHELL := /bin/bash
BUILD := build
CC := gcc
ARCH := $(shell $(CC) -print-multiarch)

# OpenBLAS, OpenMP flavour: BLAS then shares the OpenMP thread pool with our
# loops (and runs single-threaded when called from inside a parallel region).
BLAS_INC := /usr/include/$(ARCH)/openblas-openmp
BLAS_LIB := /usr/lib/$(ARCH)/openblas-openmp

CFLAGS := -std=gnu11 -O3 -march=native -fopenmp -Wall -Wextra -MMD -MP
CPPFLAGS := -Icommon -I$(BUILD)/gen -I$(BLAS_INC)
LDLIBS := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas -lm -fopenmp

COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
LIBCOMMON := $(BUILD)/libcommon.a

DATASET_TOOLS := gen_synthetic text_to_tokens tokens_info
DATASET_BINS := $(DATASET_TOOLS:%=$(BUILD)/bin/%)

# Each lab builds twice: from labs/ (the student's copy) and from solutions/.
LAB00_PROGS := train_gpt gradcheck
LAB00_BINS := $(foreach v,labs solutions,$(LAB00_PROGS:%=$(BUILD)/$(v)/00_single_device/%))

TEST_SRC := $(wildcard tests/c/*.c)
TEST_BINS := $(TEST_SRC:tests/c/%.c=$(BUILD)/tests/%)

SYNTH_TOKENS ?= 2000000
DEMO_CONFIG ?= small
DEMO_STEPS ?= 300

.PHONY: all deps data demo test skeletons bench clean help
# Keep the objects of pattern-rule chains (build/apps/*.o...): the tests link
# lab variants against them, and make would otherwise delete them as intermediates.
.SECONDARY:
all: $(LIBCOMMON) $(DATASET_BINS) $(LAB00_BINS) $(TEST_BINS)

help:
	@echo "make            build everything into $(BUILD)/"
	@echo "make demo       install missing packages, build, train '$(DEMO_CONFIG)' on the CPU, draw the loss chart"
	@echo "make test       install missing packages, build, run the whole test suite"
	@echo "make data       generate the synthetic corpus $(BUILD)/data/synth.tok"
	@echo "make english    build a real English corpus from Debian's fortunes-min"
	@echo "make skeletons  regenerate the student files in labs/ from solutions/"
	@echo "make bench      tokens/s and GFLOP/s of the 'small' config (vs PyTorch if installed)"
	@echo "make deps       check and install the Debian packages the kit needs"
	@echo "make clean      remove $(BUILD)/ (runs/ is kept)"

deps:
	@bash scripts/deps.sh

# git revision for run.json, rewritten only when it changes
$(BUILD)/gen/git_rev.h: FORCE
	@mkdir -p $(@D)
	@rev=$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown); \
	 line="#define DTLAB_GIT_REV \"$$rev$$(git diff --quiet HEAD 2>/dev/null || echo -dirty)\""; \
	 [ -f $@ ] && [ "$$(cat $@)" = "$$line" ] || echo "$$line" > $@
FORCE:

$(BUILD)/common/runlog.o: $(BUILD)/gen/git_rev.h

$(BUILD)/labs/%.o: CFLAGS += -Wno-unused-parameter

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(LIBCOMMON): $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bin/%: $(BUILD)/datasets/%.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# lab 00: the apps link the student's (or the solution's) backprop.o
$(BUILD)/%/00_single_device/train_gpt: $(BUILD)/apps/train_gpt.o $(BUILD)/%/00_single_device/backprop.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/00_single_device/gradcheck: $(BUILD)/apps/gradcheck.o $(BUILD)/%/00_single_device/backprop.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# C unit tests link the solution of lab 00 (they test the library, not the student)
$(BUILD)/tests/%: $(BUILD)/tests/c/%.o $(BUILD)/solutions/00_single_device/backprop.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

$(BUILD)/data/synth.tok: $(BUILD)/bin/gen_synthetic
	@mkdir -p $(@D)
	$(BUILD)/bin/gen_synthetic --out $@ --tokens $(SYNTH_TOKENS) --seed 1

data: $(BUILD)/data/synth.tok

english: $(BUILD)/bin/text_to_tokens
	bash datasets/english.sh $(BUILD)/bin $(BUILD)/data

demo: deps
	@$(MAKE) --no-print-directory all data
	bash scripts/demo.sh $(DEMO_CONFIG) $(DEMO_STEPS)

test: deps
	@$(MAKE) --no-print-directory all data
	bash tests/run.sh

skeletons:
	bash tools/make_skeletons.sh solutions labs

bench: deps
	@$(MAKE) --no-print-directory all data
	bash bench/bench.sh

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
