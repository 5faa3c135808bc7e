# The lab kit's one entry point. `make help` lists the targets.
SHELL := /bin/bash
BUILD := build
# mpicc is gcc with Open MPI's include and library flags
CC := mpicc
ARCH := $(shell gcc -print-multiarch)

# OpenBLAS, OpenMP flavour: BLAS then shares the OpenMP thread pool with our
# loops (and runs single-threaded when called from inside a parallel region).
BLAS_INC := /usr/include/$(ARCH)/openblas-openmp
BLAS_LIB := /usr/lib/$(ARCH)/openblas-openmp
# oneDNN (mixed precision's bf16 GEMMs, common/half_gemm.h): the system's
# (libdnnl-dev), or a copy elsewhere given by both (its headers, its library)
DNNL_INC :=
DNNL_LIB :=

# -fno-math-errno: no libm function here sets errno for us to read, and
# without it sqrtf is a call that keeps loops (AdamW's) from vectorizing;
# it changes no result. -pthread: --save-async's checkpoint writer thread
# (common/checkpoint.h).
CFLAGS := -std=gnu11 -O3 -march=native -fno-math-errno -fopenmp -pthread -Wall -Wextra -Wpointer-arith -MMD -MP
CPPFLAGS := -Icommon -I$(BUILD)/gen -I$(BLAS_INC) $(if $(DNNL_INC),-I$(DNNL_INC))
LDLIBS := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas -ldnnl -lm -fopenmp -pthread
ifneq ($(DNNL_LIB),)
LDLIBS += -L$(DNNL_LIB) -Wl,-rpath,$(DNNL_LIB)
endif

COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
LIBCOMMON := $(BUILD)/libcommon.a

DATASET_TOOLS := gen_synthetic text_to_tokens tokens_info
DATASET_BINS := $(DATASET_TOOLS:%=$(BUILD)/bin/%)

# ---- The labs: one manifest each ------------------------------------------
# The instructor's tree has every lab's solution; a student handout (`make
# handout`, below) has only the released ones (solutions/NN_name/ present)
# and a file .handout. So:
# - each lab builds from labs/ (the student's copy) into build/labs/NN_name/,
#   and from solutions/ into build/solutions/NN_name/ when its solution is here
#   (a lab's headers exist once, in labs/: every copy compiles against them);
# - a later lab links an earlier lab's objects through build/earlier/NN_name/:
#   copies of the solution's objects when that solution is here, else of the
#   student's own (build/labs/NN_name/). So lab 02 runs on lab 00's solution
#   once it is released, and on the student's own lab 00 before.
# Which objects a lab has and what each of its programs links is written once,
# in labs/NN_name/lab.mk (labs/00_single_device/lab.mk explains each line);
# the rules below are generated from the manifests, and the grader, the
# sanitizer and pretend-GPU builds and the docs' tests read the same facts
# (print-links, print-programs, print-checks).
LAB_NAMES := $(patsubst labs/%/lab.mk,%,$(wildcard labs/[0-9][0-9]_*/lab.mk))
SOLVED := $(filter $(LAB_NAMES),$(patsubst solutions/%/,%,$(wildcard solutions/[0-9][0-9]_*/)))
# $(call copy_of,NN_name): solutions when that lab's solution is here, else labs
copy_of = $(if $(filter $(1),$(SOLVED)),solutions,labs)
# $(call copies_of,NN_name): the copies of a lab to build
copies_of = labs $(if $(filter $(1),$(SOLVED)),solutions)

# A manifest's variables, read into NN_name.objects, NN_name.programs,
# NN_name.link.PROG, NN_name.checks, NN_name.fake_gpu, NN_name.plugin and
# NN_name.absent.
define read_manifest
objects :=
programs :=
checks :=
fake_gpu :=
plugin :=
absent :=
include labs/$(1)/lab.mk
$(1).objects := $$(objects)
$(1).programs := $$(programs)
$(1).checks := $$(checks)
$(1).fake_gpu := $$(fake_gpu)
$(1).plugin := $$(plugin)
$(1).absent := $$(absent)
$$(foreach p,$$(programs),$$(if $$(link.$$(p)),,$$(error labs/$(1)/lab.mk: no link.$$(p) for program $$(p))))
$$(foreach p,$$(programs),$$(eval $(1).link.$$(p) := $$(link.$$(p))))
$$(foreach p,$$(programs),$$(eval undefine link.$$(p)))
endef
$(foreach l,$(LAB_NAMES),$(eval $(call read_manifest,$(l))))

# The words of a link list (labs/00_single_device/lab.mk):
# lab_of: the lab a word names (NN_name of NN_name/NAME), empty for an app
lab_of = $(filter $(LAB_NAMES),$(firstword $(subst /, ,$(1))))
# $(call lab_available,LAB,OF): whether a program of OF (a lab, or none) may
# link LAB: its solution is here, or LAB is OF or earlier
lab_available = $(or $(filter $(1),$(SOLVED)),$(if $(filter $(2),$(LAB_NAMES)),$(filter $(1),$(firstword $(sort $(1) $(2))))))
# $(call lab_files,WORD,DIR): the objects WORD stands for, under DIR/NN_name/
lab_files = $(if $(findstring /,$(1)),$(2)/$(1).o,$(foreach o,$($(1).objects),$(2)/$(1)/$(o).o))
apps_objects = $(patsubst %,$(BUILD)/apps/%.o,$(1))
# $(call lab_word,WORD,OF,COPY): OF's own objects from build/COPY/, another
# lab's from build/earlier/, with the app objects that hand them to the
# library (the lab's plugin)
lab_word = $(call apps_objects,$($(call lab_of,$(1)).plugin)) $(call lab_files,$(1),$(BUILD)/$(if $(filter $(2),$(call lab_of,$(1))),$(3),earlier))
# $(call optional_word,LAB,OF,COPY): LAB? in a link list
optional_word = $(if $(call lab_available,$(1),$(2)),$(call lab_word,$(1),$(2),$(3)),$(call apps_objects,$($(1).absent)))
link_word = $(if $(filter %?,$(1)),$(call optional_word,$(1:?=),$(2),$(3)),$(if $(call lab_of,$(1)),$(call lab_word,$(1),$(2),$(3)),$(call apps_objects,$(1))))
# $(call program_links,OF,COPY,PROG): the objects PROG of OF's COPY links
program_links = $(foreach w,$($(1).link.$(3)),$(call link_word,$(w),$(1),$(2)))
# $(call student_links,LAB,PROG): what PROG of a student's copy of LAB links
# besides the lab's own objects (the grader compiles those from the copy)
student_links = $(filter-out $(call lab_files,$(1),$(BUILD)/labs),$(call program_links,$(1),labs,$(2)))

LAB_BINS := $(foreach l,$(LAB_NAMES),$(foreach c,$(call copies_of,$(l)),$(foreach p,$($(l).programs),$(BUILD)/$(c)/$(l)/$(p))))
EARLIER_OBJS := $(foreach l,$(LAB_NAMES),$(call lab_files,$(l),$(BUILD)/earlier))
# every lab's headers, from labs/ (one copy: the student's)
CPPFLAGS += $(LAB_NAMES:%=-Ilabs/%)

# Programs outside the labs link the same words, as no lab's (an earlier
# lab through build/earlier/, an optional one only when its solution is
# here): the planner, the checkpoint tool and the C unit tests (which test
# the library, not the student: the ones that run lab 00's backward passes
# skip in a handout without lab 00's solution). --advise builds lab 06's
# schedules (schedule_by_name) to simulate them.
tools.link.memplan := memplan 06_pipeline/schedules
tools.link.ckpt := ckpt_tool 09_checkpoint?
tools.link.bench_attention := bench_attention 00_single_device 05_activation_memory?
TOOL_BINS := $(BUILD)/bin/memplan $(BUILD)/bin/ckpt $(BUILD)/bin/bench_attention
# tests/c/NAME.c link the labs named here and the others none
# (tests/layout.bats checks test_layout: the library links without any lab).
# A lab's own checks of the student's code are its programs (lab.mk's checks).
tests.link.test_model := 00_single_device
tests.link.test_recompute := 00_single_device
tests.link.test_pipe_exec := 00_single_device
tests.link.test_moe := 00_single_device
tests.link.test_cp_kernels := 00_single_device
tests.link.test_fused_attention := 00_single_device 05_activation_memory?
tests.link.torch_dump := 00_single_device 05_activation_memory?
tests.link.test_costmodel := 06_pipeline/schedules
# tests/cuda/ (one rule for all: test_kernels checks lab 00's passes on the GPU)
tests.link.cuda := 00_single_device
test_links = $(foreach w,$(tests.link.$(1)),$(call link_word,$(w),tests,earlier))

# ---- CUDA sources: `make cuda-check` compiles every .cu with nvcc (CI has
# nvcc but no GPU), `make cuda-tests` links the GPU tests (they skip, exit
# status 77, without a GPU). NVCC=/path/to/nvcc or CUDA_HOME=... to choose.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
# NCCL: with the toolkit by default; NCCL_HOME=DIR where it is installed
# apart (DIR/include/nccl.h, DIR/lib/libnccl.so)
NCCL_HOME ?= $(CUDA_HOME)
# Machine code for Ampere (sm_80: A100, and the RTX 30xx run it) and Hopper
# (sm_90: H100, H200), plus sm_90 PTX that the driver compiles for newer GPUs
# at first load. CUDA_ARCH=-arch=sm_89 (say) builds for one GPU only, faster.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
# OMPI_SKIP_MPICXX: mpi.h without Open MPI's C++ bindings (and their library).
# WERROR=1 makes every warning an error: the test suite's cuda-check builds
# so (tests/cuda.bats), and CI fails on a new warning; a user's nvcc, gcc or
# MPI headers of other versions than CI's may warn where CI's do not, and
# that must not stop their build.
NVCC_WERROR := $(if $(filter 1,$(WERROR)),-Werror all-warnings -Xcompiler -Werror)
NVCCFLAGS := -std=c++17 -O2 $(CUDA_ARCH) $(NVCC_WERROR) -Xcompiler -Wall,-Wextra \
	-MMD -MP -DOMPI_SKIP_MPICXX -DKIT_CUDA -DKIT_NCCL
NCCL_DIRS := $(if $(filter $(CUDA_HOME),$(NCCL_HOME)),,-I$(NCCL_HOME)/include)
CUDA_CPPFLAGS = -Icommon -Iapps -I$(CUDA_HOME)/include $(NCCL_DIRS) $(shell mpicc --showme:compile)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
	$(if $(filter $(CUDA_HOME),$(NCCL_HOME)),,-L$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib) \
	-lnccl -lcublas -lcudart -lstdc++
CUDA_SRC := $(wildcard common/*.cu solutions/*/*.cu labs/*/*.cu tests/cuda/*.cu)
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/cuda/%.o)
CUDA_LIB := $(BUILD)/cuda/libcommon_cuda.a
CUDA_TEST_BINS := $(patsubst tests/cuda/%.cu,$(BUILD)/cuda/tests/%,$(wildcard tests/cuda/*.cu))


# `make CUDA=1`: every program gets the GPU backend (--device cuda): the C
# sources see KIT_CUDA, the library takes in common/*.cu, the programs link
# CUDA, cuBLAS and NCCL. A build remembers its flavour (cpu or cuda, and
# its flags) and switching rebuilds every object.
FLAVOR := $(if $(filter 1,$(CUDA)),cuda,cpu)
ifeq ($(FLAVOR),cuda)
CPPFLAGS += -DKIT_CUDA -DKIT_NCCL
COMMON_OBJ += $(filter $(BUILD)/cuda/common/%,$(CUDA_OBJ))
LDLIBS += $(CUDA_LDLIBS)
endif

# `make SANITIZE=1`: AddressSanitizer (out-of-bounds, use after free, leaks
# through LeakSanitizer) and UndefinedBehaviorSanitizer, every UB report
# fatal; -O1 keeps the stack traces readable. `make sanitize` builds this
# flavour in its own directory (tests/sanitize.bats).
ifeq ($(SANITIZE),1)
SANITIZE_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g
CFLAGS := $(filter-out -O3,$(CFLAGS)) -O1 $(SANITIZE_FLAGS)
LDLIBS += $(SANITIZE_FLAGS)
FLAVOR := $(FLAVOR)-sanitize
endif
# The stamp holds the compiler flags too: changing them rebuilds as well.
FLAVOR_STAMP := $(FLAVOR) $(CFLAGS)
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/flavor 2>/dev/null)" = "$(FLAVOR_STAMP)" ] || echo "$(FLAVOR_STAMP)" > $(BUILD)/flavor)

TEST_SRC := $(wildcard tests/c/*.c)
TEST_NAMES := $(TEST_SRC:tests/c/%.c=%)
TEST_BINS := $(TEST_NAMES:%=$(BUILD)/tests/%)

SYNTH_TOKENS ?= 2000000
DEMO_CONFIG ?= small
DEMO_STEPS ?= 300
DEMO_RANKS ?= 2

.PHONY: all deps deps-gpu data demo test slides slide-figures skeletons bench $(BENCHMARKS:%=bench-%) clean help check doc-check grade grade-inputs gradescope references print-flags print-links print-checks print-programs print-benchmarks tour cluster-up cluster-down cuda-check cuda-tests nvcc-found gpu-build bench-gpu test-gpu fake-gpu sanitize handout
# Keep the objects of pattern-rule chains (build/apps/*.o...): the tests link
# lab variants against them, and make would otherwise delete them as intermediates.
.SECONDARY:
all: $(LIBCOMMON) $(DATASET_BINS) $(LAB_BINS) $(EARLIER_OBJS) $(TOOL_BINS) $(TEST_BINS)

help:
	@echo "make            build everything into $(BUILD)/"
	@echo "make demo       install missing packages, build, train '$(DEMO_CONFIG)' on the CPU, draw the loss chart"
	@echo "make test       install missing packages, build, run the whole test suite"
	@echo "make data       generate the synthetic corpus $(BUILD)/data/synth.tok"
	@echo "make english    build a real English corpus from Debian's fortunes-min"
	@echo "make check LAB=06  the lab's own checks of your copy (the gradient checker, the checkers,"
	@echo "                the generators' test); CHECK_COPY=solutions runs the solution's"
	@echo "make grade      grade labs/ against the reference runs (LAB=01 for one lab); fails when a"
	@echo "                point is lost (FAIL_UNDER=80% or points sets the bar)"
	@echo "make references rerun the solutions and rewrite grader/reference/"
	@echo "make doc-check  rerun the command of every figure the labs' READMEs and HINTS check"
	@echo "make gradescope LAB=01 [GRADE_FLAGS=--hidden]  write build/gradescope/autograder-01_*.zip"
	@echo "make skeletons  regenerate the student files in labs/ from solutions/"
	@echo "make handout DEST=dir [RELEASED=00,01] [HINTS=no]  write the tree students get (docs/INSTRUCTORS.md)"
	@echo "make slides     one lecture deck per lab, offline HTML in build/slides/ (index.html lists them)"
	@echo "make bench      lab 00: tokens/s of 'small' at 1 and all threads (vs PyTorch if installed), per-kernel profiles and rooflines of small and medium"
	@$(foreach b,$(BENCHMARKS),printf 'make %-15s %s\n' bench-$(b) "$$(sed -n 's/^# help: //p' bench/$(b).sh)";)
	@echo "make cluster-up [NODES=2 SLOTS=2 LINK_BW=10gbit LINK_LAT=20us]  a cluster of network namespaces on this machine (root); scripts/cluster.sh run -- PROGRAM runs on it"
	@echo "make cluster-down  remove it (namespaces, links, processes, files)"
	@echo "make tour       lab 10: one model trained in 10 layouts by the composed trainer: losses, memory, traffic, step time, runs/tour/report.html"
	@echo "make deps       check and install the Debian packages the kit needs"
	@echo "make cuda-check compile every CUDA source with nvcc (no GPU needed; NVCC=..., CUDA_HOME=..., NCCL_HOME=...; WERROR=1: warnings are errors)"
	@echo "make cuda-tests build the GPU tests into $(BUILD)/cuda/tests/ (they skip without a GPU)"
	@echo "make CUDA=1     build every program with the GPU backend (--device cuda; NCCL, cuBLAS)"
	@echo "make test-gpu   the GPU suite: kernels, lab 00-03 on the GPU against the CPU (skips without a GPU; needs no root: deps.sh --gpu)"
	@echo "make bench-gpu  tokens/s and MFU of small and gpt2-124m on the GPU, NCCL busbw"
	@echo "make sanitize   build the solutions' programs with AddressSanitizer and UBSan into $(BUILD)/sanitize/"
	@echo "make clean      remove $(BUILD)/ (runs/ is kept)"
	@echo
	@echo "Each lab's programs (labs/NN_name/lab.mk), in $(BUILD)/labs/NN_name/ (your copy) and, where its solution is here, $(BUILD)/solutions/NN_name/:"
	@$(foreach l,$(LAB_NAMES),echo "  $(l): $($(l).programs)";)
	@echo "Tools, in $(BUILD)/bin/: $(notdir $(TOOL_BINS) $(DATASET_BINS))"

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

# skeletons leave parameters and helpers for the student to use (the grader
# compiles students' copies with these too: print-flags)
LAB_CFLAGS := -Wno-unused-parameter -Wno-unused-function
$(BUILD)/labs/%.o: CFLAGS += $(LAB_CFLAGS)

$(BUILD)/%.o: %.c $(BUILD)/flavor
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# A lab's objects (the student's and the solution's) talk to other ranks
# through comm.h's counted calls only: an object that calls MPI, NCCL or the
# kit's uncounted calls is refused and removed (the grader does the same)
define compile_lab
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@
	@bash scripts/lab_symbols.sh $@ || { rm -f $@; exit 1; }
endef
$(BUILD)/labs/%.o: labs/%.c $(BUILD)/flavor
	$(compile_lab)
$(BUILD)/solutions/%.o: solutions/%.c $(BUILD)/flavor
	$(compile_lab)

$(LIBCOMMON): $(COMMON_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bin/%: $(BUILD)/datasets/%.o $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# A lab's programs, linked as its manifest says (link.PROG), from each copy
define program_rule
$(BUILD)/$(2)/$(1)/$(3): $(call program_links,$(1),$(2),$(3)) $(LIBCOMMON)
	$$(CC) $$(filter %.o,$$^) $$(LIBCOMMON) $$(LDLIBS) -o $$@
endef
$(foreach l,$(LAB_NAMES),$(foreach c,$(call copies_of,$(l)),$(foreach p,$($(l).programs),$(eval $(call program_rule,$(l),$(c),$(p))))))

# build/earlier/NN_name/X.o: lab NN's object as later labs see it (above)
define earlier_rule
$(BUILD)/earlier/$(1)/$(2).o: $(BUILD)/$(call copy_of,$(1))/$(1)/$(2).o
	@mkdir -p $$(@D)
	cp $$< $$@
endef
$(foreach l,$(LAB_NAMES),$(foreach o,$($(l).objects),$(eval $(call earlier_rule,$(l),$(o)))))

# apps/NAME.c built again for lab NN (apps/NAME_labNN.o) with WITH_LABNN
# defined: the same program with that lab's options (lab 05's train_tp)
define lab_variant_rule
$(BUILD)/apps/%_lab$(firstword $(subst _, ,$(1))).o: apps/%.c $(BUILD)/flavor
	@mkdir -p $$(@D)
	$$(CC) $$(CPPFLAGS) -DWITH_LAB$(firstword $(subst _, ,$(1))) $$(CFLAGS) -c $$< -o $$@
endef
$(foreach l,$(LAB_NAMES),$(eval $(call lab_variant_rule,$(l))))

$(BUILD)/bin/memplan: $(call program_links,tools,earlier,memplan) $(LIBCOMMON)
$(BUILD)/bin/ckpt: $(call program_links,tools,earlier,ckpt) $(LIBCOMMON)
$(BUILD)/bin/bench_attention: $(call program_links,tools,earlier,bench_attention) $(LIBCOMMON)
$(TOOL_BINS):
	@mkdir -p $(@D)
	$(CC) $(filter %.o,$^) $(LIBCOMMON) $(LDLIBS) -o $@

# the C unit tests (tests/c/; apps/ for the labs' plugins' headers)
$(BUILD)/tests/c/%.o: CPPFLAGS += -Iapps
define test_rule
$(BUILD)/tests/$(1): $(BUILD)/tests/c/$(1).o $(call test_links,$(1)) $(LIBCOMMON)
	@mkdir -p $$(@D)
	$$(CC) $$(filter %.o,$$^) $$(LIBCOMMON) $$(LDLIBS) -o $$@
endef
$(foreach t,$(TEST_NAMES),$(eval $(call test_rule,$(t))))

# The trainers and the collectives benchmark with a pretend GPU made of host
# memory in place of common/device.c (tests/fake_gpu.bats): --device cuda
# then runs the GPU path's transfers, staging and allocator on the CPU, and
# host code touching GPU memory outside a kernel or a copy crashes, as on a
# GPU. The programs are the manifests' fake_gpu ones, linked from the
# solutions, into build/fake_gpu/NN_name/; selftest checks the pretend GPU
# itself. -rdynamic: the crash report's backtrace names the programs'
# functions.
# The pretend GPU comes with the pretend NCCL (tests/fake_gpu/fake_nccl.c,
# over MPI): comm.c with its NCCL path (KIT_NCCL) and common/comm_nccl.cu,
# which g++ builds against the pretend's nccl.h and cuda_runtime_api.h
# (tests/fake_gpu/include/), come before the library, whose comm.o is then
# left out. With one pretend GPU per rank (FAKE_GPUS) every group runs on it.
FAKE_DEVICE := $(BUILD)/tests/fake_gpu/fake_device.o $(BUILD)/tests/fake_gpu/fake_nccl.o \
	$(BUILD)/fake_gpu/obj/comm.o $(BUILD)/fake_gpu/obj/comm_nccl.o
FAKE_GPU_BINS := $(foreach l,$(LAB_NAMES),$(foreach p,$($(l).fake_gpu),$(BUILD)/fake_gpu/$(l)/$(p))) \
	$(BUILD)/fake_gpu/selftest $(BUILD)/fake_gpu/nccl_check
$(BUILD)/fake_gpu/obj/comm.o: common/comm.c $(BUILD)/flavor
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DKIT_NCCL $(CFLAGS) -c $< -o $@
# C++ without exceptions or RTTI: no libstdc++ to link
$(BUILD)/fake_gpu/obj/comm_nccl.o: common/comm_nccl.cu $(BUILD)/flavor
	@mkdir -p $(@D)
	$(CXX) -x c++ -std=c++17 -fno-exceptions -fno-rtti -O2 -g -Wall -Wextra -MMD -MP \
		-DOMPI_SKIP_MPICXX -DKIT_NCCL -Itests/fake_gpu/include $(CPPFLAGS) $(shell mpicc --showme:compile) \
		-c $< -o $@
FAKE_GPU_LDFLAGS := -rdynamic
# It runs every lab's solution: in a handout without them all it skips.
ifeq ($(filter-out $(SOLVED),$(LAB_NAMES)),)
fake-gpu: $(FAKE_GPU_BINS)
else
fake-gpu:
	@echo "fake-gpu: skipped: it builds every lab's solution, and this handout has none for $(filter-out $(SOLVED),$(LAB_NAMES))"
endif
define fake_gpu_rule
$(BUILD)/fake_gpu/$(1)/$(2): $(FAKE_DEVICE) $(call program_links,$(1),solutions,$(2)) $(LIBCOMMON)
endef
$(foreach l,$(LAB_NAMES),$(foreach p,$($(l).fake_gpu),$(eval $(call fake_gpu_rule,$(l),$(p)))))
$(BUILD)/fake_gpu/selftest: $(FAKE_DEVICE) $(BUILD)/tests/fake_gpu/selftest.o $(LIBCOMMON)
$(BUILD)/fake_gpu/nccl_check: $(FAKE_DEVICE) $(BUILD)/tests/fake_gpu/nccl_check.o $(LIBCOMMON)
$(FAKE_GPU_BINS):
	@mkdir -p $(@D)
	$(CC) $(FAKE_GPU_LDFLAGS) $(filter %.o,$^) $(LIBCOMMON) $(LDLIBS) -o $@

$(BUILD)/data/synth.tok: $(BUILD)/bin/gen_synthetic
	@mkdir -p $(@D)
	$(BUILD)/bin/gen_synthetic --out $@ --tokens $(SYNTH_TOKENS) --seed 1

data: $(BUILD)/data/synth.tok

english: $(BUILD)/bin/text_to_tokens
	bash datasets/english.sh $(BUILD)/bin $(BUILD)/data

demo: deps
	@$(MAKE) --no-print-directory all data
	bash scripts/demo.sh $(DEMO_CONFIG) $(DEMO_STEPS) $(DEMO_RANKS)

test:
	@bash scripts/deps.sh --test
	@$(MAKE) --no-print-directory all data fake-gpu
	bash tests/run.sh

# Lecture decks: slides/NN_name.md into self-contained HTML under
# build/slides/ (tools/make_slides.sh), with the charts the labs'
# benchmarks draw (tools/slide_figures.sh: made when missing, reused
# otherwise; make slide-figures remakes them). 150 s on 2 cores, 2026-12-05.
SLIDE_FIGURES_TIME := about 3 minutes on 2 cores
slides: deps
	@$(MAKE) --no-print-directory all data
	@if [ -s $(BUILD)/slides/fig/07/timeline-zigzag.png ] && [ -s $(BUILD)/slides/fig/05/attention.png ]; then \
		echo "slides: reusing the figures in $(BUILD)/slides/fig/ (make slide-figures redraws them: every lab's benchmark, $(SLIDE_FIGURES_TIME))"; \
	else \
		echo "slides: no figures in $(BUILD)/slides/fig/ yet: every lab's benchmark draws them, $(SLIDE_FIGURES_TIME)"; \
		bash tools/slide_figures.sh $(BUILD)/slides; \
	fi
	bash tools/make_slides.sh $(BUILD)/slides

slide-figures: deps
	@$(MAKE) --no-print-directory all data
	@echo "slide-figures: every lab's benchmark, $(SLIDE_FIGURES_TIME)"
	bash tools/slide_figures.sh $(BUILD)/slides

# Instructors' targets refuse to run in a handout, with one line.
not_in_handout = @if [ -f .handout ]; then echo "$@: error: $(1)" >&2; exit 2; fi

skeletons:
	$(call not_in_handout,this is a student handout: make skeletons would overwrite your labs/ (instructors only))
	bash tools/make_skeletons.sh solutions labs

# The tree students get (docs/INSTRUCTORS.md: "Handing out the labs"): tracked files but
# the solutions of the labs not in RELEASED (lab numbers: RELEASED=00,01;
# default none), grader/planted/ and, with HINTS=no, labs/*/HINTS.md; plus
# START.md and .handout; a fresh git repository of one commit.
handout:
	$(call not_in_handout,this tree is a handout already: make handouts in the instructor's tree)
	@bash tools/make_handout.sh "$(DEST)" "$(RELEASED)" "$(HINTS)"

bench: deps
	@$(MAKE) --no-print-directory all data
	bash bench/bench.sh
	@if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then $(MAKE) --no-print-directory bench-gpu; \
	 else echo "bench-gpu: skipped: no GPU (nvidia-smi lists none)"; fi

# The CUDA flavour (make CUDA=1) in its own directory, beside the CPU build:
# the GPU suite and benchmark use it, and `make test` never rebuilds it.
GPU_BUILD := $(BUILD)/gpu
gpu-build:
	@$(MAKE) --no-print-directory CUDA=1 BUILD=$(GPU_BUILD) all $(GPU_BUILD)/cuda/tests/test_kernels $(GPU_BUILD)/cuda/tests/test_nccl

# The sanitizer flavour (SANITIZE=1, above) in its own directory, beside the
# CPU build: the solutions' programs, the dataset tools, the planner and the C
# unit tests. tests/sanitize.bats runs them.
SANITIZE_BUILD := $(BUILD)/sanitize
# (the outer make passes BUILD=$(SANITIZE_BUILD) and SANITIZE=1 to the inner one)
SANITIZE_BINS := $(filter $(BUILD)/solutions/%,$(LAB_BINS)) $(DATASET_BINS) $(TOOL_BINS) $(TEST_BINS)
ifeq ($(SANITIZE),1)
sanitize: $(SANITIZE_BINS)
else
sanitize:
	@$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(SANITIZE_BUILD) sanitize
endif

# The GPU targets need no root and none of the CPU-only packages (slides,
# charts, corpora): deps.sh --gpu checks what they build with, and says
# which CUDA piece is missing and where it looked.
deps-gpu:
	@CUDA_HOME="$(CUDA_HOME)" NCCL_HOME="$(NCCL_HOME)" NVCC="$(NVCC)" bash scripts/deps.sh --gpu

bench-gpu: deps-gpu
	@$(MAKE) --no-print-directory data gpu-build
	bash bench/gpu.sh

# The GPU suite alone (tests/gpu.bats; each test skips without a GPU).
test-gpu: deps-gpu
	@$(MAKE) --no-print-directory all data gpu-build
	bash tests/run.sh tests/gpu.bats

# Each lab's benchmark: bench/NAME.sh is `make bench-NAME`, and its line
# "# help: ..." is what `make help` says of it (bench.sh is `make bench`,
# gpu.sh `make bench-gpu`, common.sh their helpers). A benchmark runs the
# solution's program in the instructor's tree and the student's
# (build/labs/) in a handout; BENCH_COPY=labs or BENCH_COPY=solutions
# chooses (bench/common.sh).
BENCHMARKS := $(filter-out bench common gpu,$(patsubst bench/%.sh,%,$(wildcard bench/*.sh)))
$(BENCHMARKS:%=bench-%): bench-%:
	@$(MAKE) --no-print-directory all data
	bash bench/$*.sh

# A cluster on this machine (scripts/cluster.sh, root only): NODES network
# namespaces of SLOTS ranks, links shaped to LINK_BW (and LINK_LAT where the
# kernel has netem); `scripts/cluster.sh run -- PROGRAM ARGS` runs on it
NODES ?= 2
SLOTS ?= 2
LINK_BW ?= 10gbit
cluster-up:
	bash scripts/cluster.sh up --nodes $(NODES) --slots $(SLOTS) --link-bandwidth $(LINK_BW) $(if $(LINK_LAT),--link-latency $(LINK_LAT))

cluster-down:
	bash scripts/cluster.sh down

# the composed trainer's tour (tools/tour.sh)
tour: deps
	@$(MAKE) --no-print-directory all data
	bash tools/tour.sh

# The autograder (grader/README.md): LAB=01 grades one lab, GRADE_FLAGS adds
# options (--hidden, --src DIR...), FAIL_UNDER=80% (or points) the core's
# score under which it exits non-zero (default: any point lost; 0: never).
# It builds what the graded labs' programs
# link besides the lab's own sources (the grader compiles those itself, and
# a lab that does not compile scores zero there): a lab is graded whatever
# state the other labs' files are in.
LAB ?= all
GRADE_LABS := $(if $(filter all,$(LAB)),$(LAB_NAMES),$(filter $(LAB) $(LAB)_%,$(LAB_NAMES)))
GRADE_INPUTS := $(LIBCOMMON) $(BUILD)/data/synth.tok $(sort $(foreach l,$(GRADE_LABS),$(foreach p,$($(l).programs),$(call student_links,$(l),$(p)))))
grade: deps
	@$(MAKE) --no-print-directory grade-inputs
	python3 grader/grade.py --lab $(LAB) $(if $(FAIL_UNDER),--fail-under '$(FAIL_UNDER)') $(GRADE_FLAGS)

grade-inputs: $(GRADE_INPUTS)

# The labs' READMEs and HINTS against the kit (tools/check_doc_figures.py):
# every figure with a check line reruns and agrees, every measurement says
# where it came from
doc-check:
	@$(MAKE) --no-print-directory all data
	python3 tools/check_doc_figures.py --run $(wildcard labs/*/README.md labs/*/HINTS.md)

# A lab's own checks (its lab.mk's checks: the gradient checker, the
# collectives' checker, the schedules' test...) on the student's copy,
# CHECK_COPY=solutions on the solution's: make check LAB=06
CHECK_COPY ?= labs
CHECK_LAB := $(if $(filter all,$(LAB)),,$(filter $(LAB) $(LAB)_%,$(LAB_NAMES)))
check:
	@[ -n "$(CHECK_LAB)" ] || { echo "check: error: LAB=NN names one lab (make check LAB=06), got LAB=$(LAB)" >&2; exit 2; }
	@$(MAKE) --no-print-directory all data
	@bash scripts/check_lab.sh "$(CHECK_LAB)" "$(CHECK_COPY)" "$($(CHECK_LAB).checks)"

# Gradescope's autograder zip for LAB (one lab), with GRADE_FLAGS written
# into its run_autograder (grader/README.md, "Gradescope")
gradescope:
	$(call not_in_handout,this is a student handout: the autograder is built from the instructor's tree)
	@python3 grader/gradescope/make_zip.py --lab '$(LAB)' --out $(BUILD)/gradescope --flags='$(GRADE_FLAGS)'

references: deps
	$(call not_in_handout,this is a student handout: the references are the instructor's)
	@$(MAKE) --no-print-directory all data
	python3 grader/grade.py --lab $(LAB) --make-references

# how labs are compiled, for the grader's builds of other copies of a lab
# (SANITIZE_FLAGS: empty but with SANITIZE=1, for tests/sanitize.bats)
print-flags:
	@echo "CC=$(CC)"
	@echo "CPPFLAGS=$(CPPFLAGS)"
	@echo "CFLAGS=$(CFLAGS) $(LAB_CFLAGS)"
	@echo "LDLIBS=$(LDLIBS)"
	@echo "SANITIZE_FLAGS=$(SANITIZE_FLAGS)"

# The manifests' facts for the grader (print-links: per lab program, the
# objects it links besides the lab's own, for a student's copy) and the
# docs' tests (print-programs, print-benchmarks)
print-links:
	@$(foreach l,$(LAB_NAMES),$(foreach p,$($(l).programs),echo "$(l) $(p) $(call student_links,$(l),$(p))";))
print-checks:
	@$(foreach l,$(LAB_NAMES),$(if $($(l).checks),echo "$(l) $($(l).checks)";))
print-programs:
	@$(foreach l,$(LAB_NAMES),$(foreach p,$($(l).programs),echo "$(l) $(p)";))
	@$(foreach b,$(TOOL_BINS) $(DATASET_BINS),echo "tools $(notdir $(b))";)
print-benchmarks:
	@$(foreach b,bench $(BENCHMARKS:%=bench-%) bench-gpu,echo "$(b)";)

cuda-check: $(CUDA_OBJ)
cuda-tests: $(CUDA_TEST_BINS)

nvcc-found:
	@command -v "$(NVCC)" >/dev/null || { echo "make: nvcc not found at '$(NVCC)': install the CUDA toolkit, or set NVCC=/path/to/nvcc" >&2; exit 1; }

$(BUILD)/cuda/%.o: %.cu | nvcc-found
	@mkdir -p $(@D)
	$(NVCC) $(CUDA_CPPFLAGS) $(NVCCFLAGS) -c $< -o $@

$(CUDA_LIB): $(filter $(BUILD)/cuda/common/%,$(CUDA_OBJ))
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/cuda/tests/%: $(BUILD)/cuda/tests/cuda/%.o $(CUDA_LIB) $(call test_links,cuda) $(LIBCOMMON)
	$(CC) $^ $(CUDA_LDLIBS) $(LDLIBS) -o $@

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

