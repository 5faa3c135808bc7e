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

# -fno-math-errno: no libm function here sets errno for us to read, and
# without it sqrtf is a call that keeps loops (AdamW's) from vectorizing;
# it changes no result. -pthread: --save-async's checkpoint writer thread
# (common/checkpoint.h).
CFLAGS := -std=gnu11 -O3 -march=native -fno-math-errno -fopenmp -pthread -Wall -Wextra -MMD -MP
CPPFLAGS := -Icommon -I$(BUILD)/gen -I$(BLAS_INC)
LDLIBS := -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas -lm -fopenmp -pthread

COMMON_SRC := $(wildcard common/*.c)
COMMON_OBJ := $(COMMON_SRC:%.c=$(BUILD)/%.o)
LIBCOMMON := $(BUILD)/libcommon.a

DATASET_TOOLS := gen_synthetic text_to_tokens tokens_info
DATASET_BINS := $(DATASET_TOOLS:%=$(BUILD)/bin/%)

# ---- Which copies of the labs this tree has --------------------------------
# The instructor's tree has every lab's solution; a student handout (`make
# handout`, below) has only the released ones (solutions/NN_name/ present)
# and a file .handout. So:
# - each lab builds from labs/ (the student's copy) into build/labs/NN_name/,
#   and from solutions/ into build/solutions/NN_name/ when its solution is here;
# - a later lab links an earlier lab's object through build/earlier/NN_name/:
#   a copy of the solution's object when that solution is here, else of the
#   student's own (build/labs/NN_name/). So lab 02 runs on lab 00's solution
#   once it is released, and on the student's own lab 00 before. The grader
#   links the same files (grader/cases/*.toml: link), and so do the planner
#   and the C unit tests (which test the library; the ones that run lab 00's
#   backward passes skip in a handout without lab 00's solution).
LAB_NAMES := $(patsubst labs/%/,%,$(wildcard labs/[0-9][0-9]_*/))
SOLVED := $(patsubst solutions/%/,%,$(wildcard solutions/[0-9][0-9]_*/))
# $(call copy_of,NN_name): solutions when that lab's solution is here, else labs
copy_of = $(if $(filter $(1),$(SOLVED)),solutions,labs)
# $(call copies_of,NN_name): the copies of a lab to build
copies_of = labs $(if $(filter $(1),$(SOLVED)),solutions)

LAB00_PROGS := train_gpt gradcheck
LAB00_BINS := $(foreach v,$(call copies_of,00_single_device),$(LAB00_PROGS:%=$(BUILD)/$(v)/00_single_device/%))

LAB01_PROGS := check_collectives bench_collectives
LAB01_BINS := $(foreach v,$(call copies_of,01_collectives),$(LAB01_PROGS:%=$(BUILD)/$(v)/01_collectives/%))

LAB02_BINS := $(foreach v,$(call copies_of,02_ddp),$(BUILD)/$(v)/02_ddp/train_ddp)

LAB03_BINS := $(foreach v,$(call copies_of,03_zero),$(BUILD)/$(v)/03_zero/train_zero)

LAB04_BINS := $(foreach v,$(call copies_of,04_tensor_parallel),$(BUILD)/$(v)/04_tensor_parallel/train_tp)

LAB05_PROGS := train_tp train_zero check_act
LAB05_BINS := $(foreach v,$(call copies_of,05_activation_memory),$(LAB05_PROGS:%=$(BUILD)/$(v)/05_activation_memory/%))

LAB06_PROGS := pipeline_schedule train_pp
LAB06_BINS := $(foreach v,$(call copies_of,06_pipeline),$(LAB06_PROGS:%=$(BUILD)/$(v)/06_pipeline/%))

LAB07_BINS := $(foreach v,$(call copies_of,07_context_parallel),$(BUILD)/$(v)/07_context_parallel/train_cp)

LAB08_BINS := $(foreach v,$(call copies_of,08_moe),$(BUILD)/$(v)/08_moe/train_moe)

LAB10_PROGS := train_4d check_mesh_order
LAB10_BINS := $(foreach v,$(call copies_of,10_composed),$(LAB10_PROGS:%=$(BUILD)/$(v)/10_composed/%))

# lab 09: four of the trainers again, linking that copy's checkpoint_shards.o
# (every other program links lab 09 through build/earlier/, below)
LAB09_PROGS := check_ckpt train_gpt train_zero train_tp train_pp
LAB09_BINS := $(foreach v,$(call copies_of,09_checkpoint),$(LAB09_PROGS:%=$(BUILD)/$(v)/09_checkpoint/%))

# Earlier labs' objects that later labs and the tests link.
EARLIER_OBJ := $(BUILD)/earlier/00_single_device/backprop.o
EARLIER_DDP := $(BUILD)/earlier/02_ddp/ddp.o
EARLIER_TP := $(BUILD)/earlier/04_tensor_parallel/tensor_parallel.o
EARLIER_ZERO := $(BUILD)/earlier/03_zero/zero.o
EARLIER_SCHED := $(BUILD)/earlier/06_pipeline/schedules.o
EARLIER_CP := $(BUILD)/earlier/07_context_parallel/ring_attention.o $(BUILD)/earlier/07_context_parallel/ulysses.o
EARLIER_PIPE := $(BUILD)/earlier/06_pipeline/pipeline.o
EARLIER_ACT := $(BUILD)/earlier/05_activation_memory/activation_memory.o
EARLIER_EP := $(BUILD)/earlier/08_moe/expert_parallel.o
# checkpoints (common/checkpoint.c calls lab 09's functions): every program
# that links the library links them too
EARLIER_CKPT := $(BUILD)/earlier/09_checkpoint/checkpoint_shards.o

# ---- CUDA sources: `make cuda-check` compiles every .cu with nvcc (CI has
# nvcc but no GPU), `make cuda-tests` links the GPU tests (they skip, exit
# status 77, without a GPU). NVCC=/path/to/nvcc or CUDA_HOME=... to choose.
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
# Machine code for Ampere (sm_80: A100, and the RTX 30xx run it) and Hopper
# (sm_90: H100, H200), plus sm_90 PTX that the driver compiles for newer GPUs
# at first load. CUDA_ARCH=-arch=sm_89 (say) builds for one GPU only, faster.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]
# OMPI_SKIP_MPICXX: mpi.h without Open MPI's C++ bindings (and their library)
NVCCFLAGS := -std=c++17 -O2 $(CUDA_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror \
	-MMD -MP -DOMPI_SKIP_MPICXX -DKIT_CUDA
CUDA_CPPFLAGS = -Icommon -Itests/c -I$(CUDA_HOME)/include $(shell mpicc --showme:compile)
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcublas -lcudart -lstdc++
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
CPPFLAGS += -DKIT_CUDA
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
TEST_BINS := $(TEST_SRC:tests/c/%.c=$(BUILD)/tests/%)
# tests of a lab's student file, linking it through build/earlier/ (below)
LAB_TEST_BINS := $(BUILD)/tests/lab06/test_schedules $(BUILD)/tests/lab07/test_ring_attention

SYNTH_TOKENS ?= 2000000
DEMO_CONFIG ?= small
DEMO_STEPS ?= 300
DEMO_RANKS ?= 2

.PHONY: all deps data demo test slides slide-figures skeletons bench clean help grade references print-flags bench-collectives bench-ddp bench-zero bench-tp bench-act bench-pp bench-cp bench-moe bench-ckpt bench-failures bench-costmodel bench-cluster tour cluster-up cluster-down cuda-check cuda-tests nvcc-found gpu-build bench-gpu test-gpu fake-gpu sanitize handout
# Keep the objects of pattern-rule chains (build/apps/*.o...): the tests link
# lab variants against them, and make would otherwise delete them as intermediates.
.SECONDARY:
all: $(LIBCOMMON) $(DATASET_BINS) $(LAB00_BINS) $(LAB01_BINS) $(LAB02_BINS) $(LAB03_BINS) $(LAB04_BINS) $(LAB05_BINS) $(LAB06_BINS) $(LAB07_BINS) $(LAB08_BINS) $(LAB09_BINS) $(LAB10_BINS) $(EARLIER_OBJ) $(BUILD)/bin/memplan $(BUILD)/bin/ckpt $(TEST_BINS) $(LAB_TEST_BINS)

help:
	@echo "make            build everything into $(BUILD)/"
	@echo "make demo       install missing packages, build, train '$(DEMO_CONFIG)' on the CPU, draw the loss chart"
	@echo "make test       install missing packages, build, run the whole test suite"
	@echo "make data       generate the synthetic corpus $(BUILD)/data/synth.tok"
	@echo "make english    build a real English corpus from Debian's fortunes-min"
	@echo "make grade      grade labs/ against the reference runs (LAB=01 for one lab)"
	@echo "make references rerun the solutions and rewrite grader/reference/"
	@echo "make skeletons  regenerate the student files in labs/ from solutions/"
	@echo "make handout DEST=dir [RELEASED=00,01] [HINTS=no]  write the tree students get (README: Handing out the labs)"
	@echo "make slides     one lecture deck per lab, offline HTML in build/slides/ (index.html lists them)"
	@echo "make bench      lab 00: tokens/s of 'small' at 1 and all threads (vs PyTorch if installed), per-kernel profiles and rooflines of small and medium"
	@echo "make bench-collectives  lab 01's ring all-reduce vs the library on 2 and 4 ranks, busbw chart"
	@echo "make bench-ddp  lab 02: naive/bucketed/overlapped step and wait times, bucket sweep, timelines"
	@echo "make bench-zero lab 03: memory per rank vs the planner, bytes per step, step times (DDP, ZeRO-1/2/3)"
	@echo "make bench-tp   lab 04: memory per rank vs the planner, TP all-reduce bytes per step, step times (tp 1, 2, 4)"
	@echo "make bench-pp   lab 06: pipeline bubble measured vs simulated vs formula per schedule and m, activations per stage vs the planner, measured and simulated Gantt charts"
	@echo "make bench-cp   lab 07: attention pairs and busy time per rank (ring, zigzag, striped, Ulysses), CP bytes per step vs the formula, memory per rank and the longest sequence within a budget vs the planner, the ring's overlap timeline"
	@echo "make bench-ckpt lab 09: checkpoints: bytes per rank (every element once), save and load time vs the disk, Young/Daly's interval"
	@echo "make bench-failures lab 09: a job killed at exponential times and resumed, wall time per save interval against Young/Daly"
	@echo "make bench-costmodel lab 10: the step-time model (memplan --advise) against train_4d: predicted vs measured step time per layout"
	@echo "make cluster-up [NODES=2 SLOTS=2 LINK_BW=10gbit LINK_LAT=20us]  a cluster of network namespaces on this machine (root); scripts/cluster.sh run -- PROGRAM runs on it"
	@echo "make cluster-down  remove it (namespaces, links, processes, files)"
	@echo "make bench-cluster  lab 01 on a cluster of namespaces (root): both links' alpha-beta, hierarchical vs flat all-reduce on 2x2 and 4x1, predicted and measured, charts"
	@echo "make tour       lab 10: one model trained in 10 layouts by the composed trainer: losses, memory, traffic, step time, runs/tour/report.html"
	@echo "make bench-moe  lab 08 (one device so far): the router's balance with and without the aux loss (chart), parameters and step time vs experts"
	@echo "make bench-act  lab 05: activations per rank vs the planner (tp 1, 2, 4; SP; recompute), recompute step times and FLOPs, activations vs seq"
	@echo "make deps       check and install the Debian packages the kit needs"
	@echo "make cuda-check compile every CUDA source with nvcc (no GPU needed; NVCC=... picks nvcc)"
	@echo "make cuda-tests build the GPU tests into $(BUILD)/cuda/tests/ (they skip without a GPU)"
	@echo "make CUDA=1     build every program with the GPU backend (--device cuda; NCCL, cuBLAS)"
	@echo "make test-gpu   the GPU suite: kernels, lab 00-03 on the GPU against the CPU (skips without a GPU)"
	@echo "make bench-gpu  tokens/s and MFU of small and gpt2-124m on the GPU, NCCL busbw"
	@echo "make sanitize   build the solutions' programs with AddressSanitizer and UBSan into $(BUILD)/sanitize/"
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

# lab 00: the apps link the student's (or the solution's) backprop.o
$(BUILD)/%/00_single_device/train_gpt: $(BUILD)/apps/train_gpt.o $(BUILD)/%/00_single_device/backprop.o $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/00_single_device/gradcheck: $(BUILD)/apps/gradcheck.o $(BUILD)/%/00_single_device/backprop.o $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 01: the programs link the student's (or the solution's) collectives.o;
# collectives.h has no solution region, so both copies are the same file.
$(BUILD)/apps/%_collectives.o: CPPFLAGS += -I$(call copy_of,01_collectives)/01_collectives
$(BUILD)/%/01_collectives/check_collectives: $(BUILD)/apps/check_collectives.o $(BUILD)/%/01_collectives/collectives.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/01_collectives/bench_collectives: $(BUILD)/apps/bench_collectives.o $(BUILD)/%/01_collectives/collectives.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 02: train_ddp links the student's (or the solution's) ddp.o, through
# apps/ddp_sync.c (lab 02's averaging as the loop's GradSync; lab 04 uses it too)
$(BUILD)/apps/train_ddp.o $(BUILD)/apps/ddp_sync.o: CPPFLAGS += -I$(call copy_of,02_ddp)/02_ddp
# (and, like every later lab, lab 00 through build/earlier/: its solution when
# here, so that a student stuck on one lab can still do the next)
$(BUILD)/%/02_ddp/train_ddp: $(BUILD)/apps/train_ddp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/%/02_ddp/ddp.o $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 03: train_zero links the student's (or the solution's) zero.o
$(BUILD)/apps/train_zero.o: CPPFLAGS += -I$(call copy_of,03_zero)/03_zero
$(BUILD)/%/03_zero/train_zero: $(BUILD)/apps/train_zero.o $(BUILD)/%/03_zero/zero.o $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 04: train_tp links the student's (or the solution's) tensor_parallel.o,
# and lab 02's DDP through build/earlier/ for the data-parallel groups
$(BUILD)/apps/train_tp.o: CPPFLAGS += -I$(call copy_of,04_tensor_parallel)/04_tensor_parallel -I$(call copy_of,02_ddp)/02_ddp
$(BUILD)/%/04_tensor_parallel/train_tp: $(BUILD)/apps/train_tp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/04_tensor_parallel/tensor_parallel.o $(EARLIER_DDP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 05: train_tp and train_zero built again WITH_LAB05 (--sp, --recompute),
# linking the student's (or the solution's) activation_memory.o, and labs
# 02-04 through build/earlier/; check_act links the lab's object alone
LAB05_INC := -I$(call copy_of,05_activation_memory)/05_activation_memory \
	-I$(call copy_of,04_tensor_parallel)/04_tensor_parallel -I$(call copy_of,03_zero)/03_zero \
	-I$(call copy_of,02_ddp)/02_ddp
$(BUILD)/apps/%_lab05.o: apps/%.c $(BUILD)/flavor
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -DWITH_LAB05 $(LAB05_INC) $(CFLAGS) -c $< -o $@
$(BUILD)/apps/act_layers.o: CPPFLAGS += -I$(call copy_of,05_activation_memory)/05_activation_memory
$(BUILD)/%/05_activation_memory/train_tp: $(BUILD)/apps/train_tp_lab05.o $(BUILD)/apps/act_layers.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/05_activation_memory/activation_memory.o $(EARLIER_TP) $(EARLIER_DDP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/05_activation_memory/train_zero: $(BUILD)/apps/train_zero_lab05.o $(BUILD)/apps/act_layers.o $(BUILD)/%/05_activation_memory/activation_memory.o $(EARLIER_ZERO) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
# check_act: the layernorm sum alone, on a pipeline's stages
$(BUILD)/apps/check_act.o: CPPFLAGS += -I$(call copy_of,05_activation_memory)/05_activation_memory
$(BUILD)/%/05_activation_memory/check_act: $(BUILD)/apps/check_act.o $(BUILD)/%/05_activation_memory/activation_memory.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 06: pipeline_schedule links the student's (or the solution's)
# schedules.o; schedules.h has no solution region, so both copies are the
# same file. It draws with tools/plot_pipeline.sh, found above the program.
$(BUILD)/apps/pipeline_schedule.o: CPPFLAGS += -I$(call copy_of,06_pipeline)/06_pipeline
$(BUILD)/%/06_pipeline/pipeline_schedule: $(BUILD)/apps/pipeline_schedule.o $(BUILD)/%/06_pipeline/schedules.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
# train_pp links that copy's schedules.o and pipeline.o, lab 04's layers and
# lab 02's DDP through build/earlier/
$(BUILD)/apps/train_pp.o: CPPFLAGS += -I$(call copy_of,06_pipeline)/06_pipeline -I$(call copy_of,04_tensor_parallel)/04_tensor_parallel -I$(call copy_of,02_ddp)/02_ddp
$(BUILD)/%/06_pipeline/train_pp: $(BUILD)/apps/train_pp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/06_pipeline/pipeline.o $(BUILD)/%/06_pipeline/schedules.o $(EARLIER_TP) $(EARLIER_DDP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 04's layers for the programs that split their blocks inside another
# lab's layout (apps/tp_layers.h)
$(BUILD)/apps/tp_layers.o: CPPFLAGS += -I$(call copy_of,04_tensor_parallel)/04_tensor_parallel

# lab 07: train_cp links that copy's ring_attention.o and ulysses.o, lab
# 04's layers and lab 02's DDP through build/earlier/
$(BUILD)/apps/train_cp.o: CPPFLAGS += -I$(call copy_of,07_context_parallel)/07_context_parallel -I$(call copy_of,04_tensor_parallel)/04_tensor_parallel -I$(call copy_of,02_ddp)/02_ddp
$(BUILD)/apps/cp_layers.o: CPPFLAGS += -I$(call copy_of,07_context_parallel)/07_context_parallel
$(BUILD)/%/07_context_parallel/train_cp: $(BUILD)/apps/train_cp.o $(BUILD)/apps/cp_layers.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/07_context_parallel/ring_attention.o $(BUILD)/%/07_context_parallel/ulysses.o $(EARLIER_TP) $(EARLIER_DDP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 09: the library's checkpoints (common/checkpoint.c, and train.c's
# --resume) call lab 09's functions, declared in its header
$(BUILD)/common/checkpoint.o $(BUILD)/common/train.o $(BUILD)/apps/check_ckpt.o: CPPFLAGS += -I$(call copy_of,09_checkpoint)/09_checkpoint
# check_ckpt: the lab's geometry over simulated layouts and its commit
$(BUILD)/%/09_checkpoint/check_ckpt: $(BUILD)/apps/check_ckpt.o $(BUILD)/%/09_checkpoint/checkpoint_shards.o $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/09_checkpoint/train_gpt: $(BUILD)/apps/train_gpt.o $(BUILD)/%/09_checkpoint/checkpoint_shards.o $(EARLIER_OBJ) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/09_checkpoint/train_zero: $(BUILD)/apps/train_zero.o $(BUILD)/%/09_checkpoint/checkpoint_shards.o $(EARLIER_ZERO) $(EARLIER_OBJ) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/09_checkpoint/train_tp: $(BUILD)/apps/train_tp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/09_checkpoint/checkpoint_shards.o $(EARLIER_TP) $(EARLIER_DDP) $(EARLIER_OBJ) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/09_checkpoint/train_pp: $(BUILD)/apps/train_pp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/09_checkpoint/checkpoint_shards.o $(EARLIER_PIPE) $(EARLIER_SCHED) $(EARLIER_TP) $(EARLIER_DDP) $(EARLIER_OBJ) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# lab 08: train_moe links that copy's expert_parallel.o, and lab 04's layers
# through build/earlier/ for the dense parts under --tp
$(BUILD)/apps/train_moe.o $(BUILD)/apps/ep_sync.o: CPPFLAGS += -I$(call copy_of,08_moe)/08_moe
$(BUILD)/%/08_moe/train_moe: $(BUILD)/apps/train_moe.o $(BUILD)/apps/ep_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/08_moe/expert_parallel.o $(EARLIER_TP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# build/earlier/NN_name/X.o: lab NN's object as later labs see it (above)
$(BUILD)/earlier/00_single_device/backprop.o: $(BUILD)/$(call copy_of,00_single_device)/00_single_device/backprop.o
$(BUILD)/earlier/02_ddp/ddp.o: $(BUILD)/$(call copy_of,02_ddp)/02_ddp/ddp.o
$(BUILD)/earlier/03_zero/zero.o: $(BUILD)/$(call copy_of,03_zero)/03_zero/zero.o
$(BUILD)/earlier/04_tensor_parallel/tensor_parallel.o: $(BUILD)/$(call copy_of,04_tensor_parallel)/04_tensor_parallel/tensor_parallel.o
$(BUILD)/earlier/06_pipeline/schedules.o: $(BUILD)/$(call copy_of,06_pipeline)/06_pipeline/schedules.o
$(BUILD)/earlier/07_context_parallel/ring_attention.o: $(BUILD)/$(call copy_of,07_context_parallel)/07_context_parallel/ring_attention.o
$(BUILD)/earlier/07_context_parallel/ulysses.o: $(BUILD)/$(call copy_of,07_context_parallel)/07_context_parallel/ulysses.o
$(BUILD)/earlier/06_pipeline/pipeline.o: $(BUILD)/$(call copy_of,06_pipeline)/06_pipeline/pipeline.o
$(BUILD)/earlier/09_checkpoint/checkpoint_shards.o: $(BUILD)/$(call copy_of,09_checkpoint)/09_checkpoint/checkpoint_shards.o
$(BUILD)/earlier/05_activation_memory/activation_memory.o: $(BUILD)/$(call copy_of,05_activation_memory)/05_activation_memory/activation_memory.o
$(BUILD)/earlier/08_moe/expert_parallel.o: $(BUILD)/$(call copy_of,08_moe)/08_moe/expert_parallel.o
$(EARLIER_OBJ) $(EARLIER_DDP) $(EARLIER_TP) $(EARLIER_ZERO) $(EARLIER_SCHED) $(EARLIER_CP) $(EARLIER_PIPE) $(EARLIER_CKPT) $(EARLIER_ACT) $(EARLIER_EP):
	@mkdir -p $(@D)
	cp $< $@

# lab 10: the composed trainer links that copy's composed.o (the seams)
# and every earlier lab's functions through build/earlier/; composed.h
# names lab 03's Zero (grader/cases/10_composed.toml: include)
$(BUILD)/labs/10_composed/composed.o $(BUILD)/solutions/10_composed/composed.o: CPPFLAGS += -I$(call copy_of,03_zero)/03_zero
$(BUILD)/apps/train_4d.o $(BUILD)/apps/composed_zero1.o $(BUILD)/apps/check_mesh_order.o: CPPFLAGS += $(foreach l,02_ddp 03_zero 04_tensor_parallel 05_activation_memory 06_pipeline 07_context_parallel 08_moe 10_composed,-I$(call copy_of,$(l))/$(l))
# check_mesh_order: the extension's order checked alone
$(BUILD)/%/10_composed/check_mesh_order: $(BUILD)/apps/check_mesh_order.o $(BUILD)/%/10_composed/composed.o $(EARLIER_ZERO) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@
$(BUILD)/%/10_composed/train_4d: $(BUILD)/apps/train_4d.o $(BUILD)/apps/composed_zero1.o $(BUILD)/apps/act_layers.o $(BUILD)/apps/cp_layers.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/ep_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/%/10_composed/composed.o $(EARLIER_ACT) $(EARLIER_PIPE) $(EARLIER_SCHED) $(EARLIER_CP) $(EARLIER_EP) $(EARLIER_TP) $(EARLIER_ZERO) $(EARLIER_DDP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(LDLIBS) -o $@

# the memory planner's command line (common/memplan.h); --advise builds
# lab 06's schedules (schedule_by_name) to simulate them
$(BUILD)/apps/memplan.o: CPPFLAGS += -I$(call copy_of,06_pipeline)/06_pipeline
$(BUILD)/bin/memplan: $(BUILD)/apps/memplan.o $(EARLIER_SCHED) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# the checkpoint tool (common/checkpoint.h): inspect, verify, convert
$(BUILD)/bin/ckpt: $(BUILD)/apps/ckpt_tool.o $(EARLIER_CKPT) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# C unit tests link lab 00 through build/earlier/ (they test the library, not the student)
$(BUILD)/tests/%: $(BUILD)/tests/c/%.o $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# lab 06's generators against the validator, the simulator and the formulas
# (tests/c/lab06/, outside tests/c/*.c: it links lab 06, not lab 00)
$(BUILD)/tests/c/lab06/%.o: CPPFLAGS += -Itests/c -I$(call copy_of,06_pipeline)/06_pipeline
$(BUILD)/tests/lab06/test_schedules: $(BUILD)/tests/c/lab06/test_schedules.o $(EARLIER_SCHED) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# lab 07's ring attention and Ulysses on 2-4 ranks against lab 00's
# attention of the whole sequence, and a finite-difference check of the ring
# (tests/c/lab07/: it links lab 07, and lab 00 for the reference)
$(BUILD)/tests/c/lab07/%.o: CPPFLAGS += -Itests/c -I$(call copy_of,07_context_parallel)/07_context_parallel
$(BUILD)/tests/lab07/test_ring_attention: $(BUILD)/tests/c/lab07/test_ring_attention.o $(EARLIER_CP) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

# The trainers and the collectives benchmark with a pretend GPU made of host
# memory in place of common/device.c (tests/fake_gpu.bats): --device cuda
# then runs the GPU path's transfers, staging and allocator on the CPU, and
# host code touching GPU memory outside a kernel or a copy crashes, as on a
# GPU. selftest checks the pretend GPU itself. -rdynamic: the crash report's
# backtrace names the programs' functions.
FAKE_GPU_BINS := $(addprefix $(BUILD)/fake_gpu/,train_gpt train_ddp train_zero train_tp train_tp_lab05 train_zero_lab05 train_pp train_cp train_moe bench_collectives selftest)
FAKE_GPU_LDFLAGS := -rdynamic
# It runs every lab's solution: in a handout without them all it skips.
ifeq ($(filter-out $(SOLVED),$(LAB_NAMES)),)
fake-gpu: $(FAKE_GPU_BINS)
else
fake-gpu:
	@echo "fake-gpu: skipped: it builds every lab's solution, and this handout has none for $(filter-out $(SOLVED),$(LAB_NAMES))"
endif
$(BUILD)/fake_gpu/train_gpt: $(BUILD)/apps/train_gpt.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_ddp: $(BUILD)/apps/train_ddp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/solutions/02_ddp/ddp.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_zero: $(BUILD)/apps/train_zero.o $(BUILD)/solutions/03_zero/zero.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_tp: $(BUILD)/apps/train_tp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/solutions/04_tensor_parallel/tensor_parallel.o $(BUILD)/solutions/02_ddp/ddp.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_tp_lab05: $(BUILD)/apps/train_tp_lab05.o $(BUILD)/apps/act_layers.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/solutions/05_activation_memory/activation_memory.o $(BUILD)/solutions/04_tensor_parallel/tensor_parallel.o $(BUILD)/solutions/02_ddp/ddp.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_zero_lab05: $(BUILD)/apps/train_zero_lab05.o $(BUILD)/apps/act_layers.o $(BUILD)/solutions/05_activation_memory/activation_memory.o $(BUILD)/solutions/03_zero/zero.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_pp: $(BUILD)/apps/train_pp.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/solutions/06_pipeline/pipeline.o $(BUILD)/solutions/06_pipeline/schedules.o $(BUILD)/solutions/04_tensor_parallel/tensor_parallel.o $(BUILD)/solutions/02_ddp/ddp.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_cp: $(BUILD)/apps/train_cp.o $(BUILD)/apps/cp_layers.o $(BUILD)/apps/ddp_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/solutions/07_context_parallel/ring_attention.o $(BUILD)/solutions/07_context_parallel/ulysses.o $(BUILD)/solutions/04_tensor_parallel/tensor_parallel.o $(BUILD)/solutions/02_ddp/ddp.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/train_moe: $(BUILD)/apps/train_moe.o $(BUILD)/apps/ep_sync.o $(BUILD)/apps/tp_layers.o $(BUILD)/solutions/08_moe/expert_parallel.o $(BUILD)/solutions/04_tensor_parallel/tensor_parallel.o $(BUILD)/solutions/00_single_device/backprop.o
$(BUILD)/fake_gpu/bench_collectives: $(BUILD)/apps/bench_collectives.o $(BUILD)/solutions/01_collectives/collectives.o
$(BUILD)/fake_gpu/selftest: $(BUILD)/tests/fake_gpu/selftest.o $(BUILD)/solutions/00_single_device/backprop.o
$(FAKE_GPU_BINS): $(BUILD)/tests/fake_gpu/fake_device.o $(BUILD)/solutions/09_checkpoint/checkpoint_shards.o $(LIBCOMMON)
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
	@$(MAKE) --no-print-directory all data
	bash tests/run.sh

# Lecture decks: slides/NN_name.md into self-contained HTML under
# build/slides/ (tools/make_slides.sh), with the charts the labs'
# benchmarks draw (tools/slide_figures.sh: made when missing; make
# slide-figures remakes them).
slides: deps
	@$(MAKE) --no-print-directory all data
	@[ -s $(BUILD)/slides/fig/07/timeline-zigzag.png ] || bash tools/slide_figures.sh $(BUILD)/slides
	bash tools/make_slides.sh $(BUILD)/slides

slide-figures: deps
	@$(MAKE) --no-print-directory all data
	bash tools/slide_figures.sh $(BUILD)/slides

# Instructors' targets refuse to run in a handout, with one line.
not_in_handout = @if [ -f .handout ]; then echo "$@: error: $(1)" >&2; exit 2; fi

skeletons:
	$(call not_in_handout,this is a student handout: make skeletons would overwrite your labs/ (instructors only))
	bash tools/make_skeletons.sh solutions labs

# The tree students get (README: "Handing out the labs"): tracked files but
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
# the step-time model's test builds lab 06's schedules (schedule_by_name)
$(BUILD)/tests/c/test_costmodel.o: CPPFLAGS += -I$(call copy_of,06_pipeline)/06_pipeline
$(BUILD)/tests/test_costmodel: $(BUILD)/tests/c/test_costmodel.o $(EARLIER_SCHED) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	@mkdir -p $(@D)
	$(CC) $^ $(LDLIBS) -o $@

GPU_BUILD := $(BUILD)/gpu
gpu-build:
	@$(MAKE) --no-print-directory CUDA=1 BUILD=$(GPU_BUILD) all $(GPU_BUILD)/cuda/tests/test_kernels $(GPU_BUILD)/cuda/tests/test_nccl

# The sanitizer flavour (SANITIZE=1, above) in its own directory, beside the
# CPU build: the solutions' programs, the dataset tools, the planner and the C
# unit tests. tests/sanitize.bats runs them.
SANITIZE_BUILD := $(BUILD)/sanitize
# (the outer make passes BUILD=$(SANITIZE_BUILD) and SANITIZE=1 to the inner one)
SANITIZE_BINS := $(filter $(BUILD)/solutions/%,$(LAB00_BINS) $(LAB01_BINS) $(LAB02_BINS) $(LAB03_BINS) $(LAB04_BINS) $(LAB05_BINS) $(LAB06_BINS) $(LAB07_BINS) $(LAB08_BINS) $(LAB09_BINS) $(LAB10_BINS)) \
	$(DATASET_BINS) $(BUILD)/bin/memplan $(BUILD)/bin/ckpt $(TEST_BINS) $(LAB_TEST_BINS)
ifeq ($(SANITIZE),1)
sanitize: $(SANITIZE_BINS)
else
sanitize:
	@$(MAKE) --no-print-directory SANITIZE=1 BUILD=$(SANITIZE_BUILD) sanitize
endif

bench-gpu: deps
	@$(MAKE) --no-print-directory data gpu-build
	bash bench/gpu.sh

# The GPU suite alone (tests/gpu.bats; each test skips without a GPU).
test-gpu: deps
	@$(MAKE) --no-print-directory all data gpu-build
	bash tests/run.sh tests/gpu.bats

# Each lab's benchmark (bench: lab 00, bench-collectives: 01, bench-ddp: 02,
# bench-zero: 03, bench-tp: 04, bench-act: 05, bench-pp: 06, bench-cp: 07, bench-moe: 08, bench-ckpt and bench-failures: 09) runs the solution's program in the instructor's tree and
# the student's (build/labs/) in a handout; BENCH_COPY=labs or
# BENCH_COPY=solutions chooses (bench/common.sh).
bench-collectives:
	@$(MAKE) --no-print-directory all
	bash bench/collectives.sh

bench-ddp:
	@$(MAKE) --no-print-directory all data
	bash bench/ddp.sh

bench-zero:
	@$(MAKE) --no-print-directory all data
	bash bench/zero.sh

bench-tp:
	@$(MAKE) --no-print-directory all data
	bash bench/tp.sh

bench-act:
	@$(MAKE) --no-print-directory all data
	bash bench/act.sh

bench-pp:
	@$(MAKE) --no-print-directory all data
	bash bench/pp.sh

bench-cp:
	@$(MAKE) --no-print-directory all data
	bash bench/cp.sh

bench-moe:
	@$(MAKE) --no-print-directory all data
	bash bench/moe.sh

bench-ckpt:
	@$(MAKE) --no-print-directory all data
	bash bench/ckpt.sh

bench-failures:
	@$(MAKE) --no-print-directory all data
	bash bench/failures.sh

bench-costmodel:
	@$(MAKE) --no-print-directory all data
	bash bench/costmodel.sh

bench-cluster:
	@$(MAKE) --no-print-directory all
	bash bench/cluster.sh

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
# options (--hidden, --src DIR...).
LAB ?= all
grade: deps
	@$(MAKE) --no-print-directory all data
	python3 grader/grade.py --lab $(LAB) $(GRADE_FLAGS)

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

$(BUILD)/cuda/tests/%: $(BUILD)/cuda/tests/cuda/%.o $(CUDA_LIB) $(EARLIER_OBJ) $(EARLIER_CKPT) $(LIBCOMMON)
	$(CC) $^ $(CUDA_LDLIBS) $(LDLIBS) -o $@

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# TEMPORARY (docs branch, for tests/docs.bats): the lead replaces these
# with targets generated from the labs' manifests.
.PHONY: print-programs print-benchmarks
print-programs:
	@for p in $(LAB00_PROGS); do echo "00_single_device $$p"; done
	@for p in $(LAB01_PROGS); do echo "01_collectives $$p"; done
	@echo "02_ddp train_ddp"
	@echo "03_zero train_zero"
	@echo "04_tensor_parallel train_tp"
	@for p in $(LAB05_PROGS); do echo "05_activation_memory $$p"; done
	@for p in $(LAB06_PROGS); do echo "06_pipeline $$p"; done
	@echo "07_context_parallel train_cp"
	@echo "08_moe train_moe"
	@for p in $(LAB09_PROGS); do echo "09_checkpoint $$p"; done
	@for p in $(LAB10_PROGS); do echo "10_composed $$p"; done
	@for p in memplan ckpt $(DATASET_TOOLS); do echo "bin $$p"; done
print-benchmarks:
	@sed -n 's/^\.PHONY://p' Makefile | tr ' ' '\n' | grep -E '^bench(-|$$)'
