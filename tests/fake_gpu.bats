#!/usr/bin/env bats
# The GPU path without a GPU: the programs built with a pretend GPU made of
# host memory (tests/fake_gpu/fake_device.c in place of common/device.c).
# With --device cuda every buffer mem_alloc makes is "GPU" memory: token
# batches and initial parameters are uploaded, parameters downloaded for
# dumps and checks, the allocator caches freed GPU blocks, and the
# communicator stages GPU buffers through host copies (MPI's path when ranks
# share a GPU). The kernels are the CPU's, so every run must equal the CPU
# run bit for bit: a transfer that is missing, misplaced or short shows.
# The pretend GPU's memory is locked (PROT_NONE) except inside its kernels,
# copies and zero fills, so host code that touches GPU memory (a crash on a
# real GPU) crashes here too, with one line and a backtrace: every run below
# passes with that on, and a planted host memset shows it is caught.
# What this cannot see is the CUDA code itself (tests/gpu.bats, on a GPU).
load helpers

FAKE="$BUILD/fake_gpu"
COMMON=(--config tiny --steps 8 --eval-every 4 --threads 1)

setup_file() {
    t 600 make -s -C "$ROOT" fake-gpu
}

setup() {
    # `make fake-gpu` builds every lab's solution (it skips in a handout without them all)
    require_solution 00 01 02 03 04 05 09
    ulimit -c 0  # the crashes below are expected: no core files
}

# build_fake_zero SRC OUT: lab 03's trainer from SRC (a copy of
# apps/train_zero.c) linked with the pretend GPU, like the fake-gpu target
# but -O0 -g: no call is optimised away (a function whose last act is the
# bad access would leave no frame in the backtrace) and addr2line names lines
build_fake_zero() {
    local src=$1 out=$2 arch links
    arch=$(gcc -print-multiarch)
    mpicc -std=gnu11 -O0 -g -fopenmp -I"$ROOT/common" -I"$ROOT/apps" -I"$ROOT/labs/03_zero" -c "$src" \
        -o "$out.o"
    # what lab 03's manifest links, but the program's own object
    links=$(make -s --no-print-directory -C "$ROOT" print-links | awk '$1 == "03_zero" && $2 == "train_zero"' | cut -d' ' -f4-)
    [ -n "$links" ]
    (cd "$ROOT" && mpicc -rdynamic "$out.o" "$BUILD/solutions/03_zero/zero.o" $links \
        "$BUILD/tests/fake_gpu/fake_device.o" "$BUILD/tests/fake_gpu/fake_nccl.o" "$BUILD/fake_gpu/obj/comm.o" \
        "$BUILD/fake_gpu/obj/comm_nccl.o" "$BUILD/libcommon.a" -L"/usr/lib/$arch/openblas-openmp" \
        -Wl,-rpath,"/usr/lib/$arch/openblas-openmp" -lopenblas -ldnnl -lm -fopenmp -pthread -o "$out")
}

# fake_equals_cpu NAME NP FAKE_PROG CPU_PROG FLAGS...: FAKE_PROG with
# --device cuda on the pretend GPU and CPU_PROG on the CPU, on NP ranks,
# give the same bits (same_bits)
fake_equals_cpu() {
    local name=$1 np=$2 fake=$3 cpu_prog=$4
    shift 4
    local gpu="$BATS_TEST_TMPDIR/gpu$name" cpu="$BATS_TEST_TMPDIR/cpu$name"
    run mpirun_t 180 "$np" "$fake" "${COMMON[@]}" "$@" --device cuda --out "$gpu" \
        --dump-params "$gpu/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    mpirun_t 180 "$np" "$cpu_prog" "${COMMON[@]}" "$@" --out "$cpu" \
        --dump-params "$cpu/params.bin" > /dev/null
    same_bits "$gpu" "$cpu"
}

# same_bits DIR_A DIR_B: equal parameters, memory.csv, metrics (all but the
# timing columns) and comm.csv calls and bytes
same_bits() {
    cmp "$1/params.bin" "$2/params.bin"
    cmp <(sort "$1/memory.csv") <(sort "$2/memory.csv")
    cmp <(cut -d, -f1-5 "$1/metrics.csv") <(cut -d, -f1-5 "$2/metrics.csv")
    if [ -f "$2/comm.csv" ]; then
        cmp <(cut -d, -f1-5 "$1/comm.csv") <(cut -d, -f1-5 "$2/comm.csv")
    fi
}

@test "fake gpu: lab 00 with --device cuda equals the CPU run bit for bit; GPU memory line printed" {
    cd "$ROOT"
    local gpu="$BATS_TEST_TMPDIR/gpu" cpu="$BATS_TEST_TMPDIR/cpu"
    run t 120 "$FAKE/00_single_device/train_gpt" "${COMMON[@]}" --device cuda --out "$gpu" --dump-params "$gpu/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"device pretend GPU"* ]]
    [[ "$output" == *"MiB in use on the GPU"* ]]
    t 120 "$SOL00/train_gpt" "${COMMON[@]}" --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
    same_bits "$gpu" "$cpu"
}

@test "fake gpu: a mixture of experts (tiny-moe: routing on the host, experts on the GPU) equals the CPU run bit for bit" {
    cd "$ROOT"
    local gpu="$BATS_TEST_TMPDIR/gpu" cpu="$BATS_TEST_TMPDIR/cpu"
    run t 120 "$FAKE/00_single_device/train_gpt" "${COMMON[@]}" --config tiny-moe --device cuda --out "$gpu" \
        --dump-params "$gpu/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    t 120 "$SOL00/train_gpt" "${COMMON[@]}" --config tiny-moe --out "$cpu" \
        --dump-params "$cpu/params.bin" > /dev/null
    same_bits "$gpu" "$cpu"
    cmp "$gpu/moe.csv" "$cpu/moe.csv"
}

@test "fake gpu: DDP naive, bucketed, overlapped on 3 ranks (host staging) equal the CPU runs" {
    cd "$ROOT"
    for mode in naive bucketed overlapped; do
        local flags=(--ddp "$mode" --bucket-mb 0.1 --batch 12 --grad-accum 2 --check-consistency 4)
        local gpu="$BATS_TEST_TMPDIR/gpu-$mode" cpu="$BATS_TEST_TMPDIR/cpu-$mode"
        run mpirun_t 180 3 "$FAKE/02_ddp/train_ddp" "${COMMON[@]}" "${flags[@]}" --device cuda \
            --out "$gpu" --dump-params "$gpu/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"MPI with host staging"* ]]
        mpirun_t 180 3 "$BUILD/solutions/02_ddp/train_ddp" "${COMMON[@]}" "${flags[@]}" \
            --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
        same_bits "$gpu" "$cpu"
    done
}

# ZeRO-Offload's device holds only what the planner says: in a pretend GPU
# of 16 MiB, tiny's ZeRO-2 (17.2 MiB planned) is refused before it starts,
# and with --offload (15.6 MiB: no optimizer bytes) it runs, the GPU's own
# count of bytes in use equal to memory.csv's
@test "fake gpu: ZeRO-2 that does not fit a 16 MiB GPU fits with --offload, the GPU's bytes in use those memory.csv counts" {
    cd "$ROOT"
    local args=(--zero 2 --config tiny --steps 2 --threads 1 --device cuda)
    run env FAKE_GPU_MEMORY_MB=16 "$FAKE/03_zero/train_zero" "${args[@]}" --out "$BATS_TEST_TMPDIR/no"
    echo "$output"
    assert_user_error
    [[ "$output" == *"this run needs 17.2 MiB per rank"*"optimizer 1.7 MiB"*"but 16.0 MiB is available"* ]]
    run env FAKE_GPU_MEMORY_MB=16 "$FAKE/03_zero/train_zero" "${args[@]}" --offload --out "$BATS_TEST_TMPDIR/off"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"peak 15.6 MiB counted in memory.csv, 15.6 MiB in use on the GPU"* ]]
    [[ "$output" != *DIFFERENT* ]]
}

# ZeRO-Offload keeps the optimizer in host memory and runs AdamW on the CPU:
# a host touch of the pretend GPU's memory, or a kernel handed host memory,
# crashes here
@test "fake gpu: ZeRO-1, 2, 3 (and 3 without prefetch, and 2 and 3 offloaded to the host) on 3 ranks equal the CPU runs" {
    cd "$ROOT"
    for flags in "--zero 1" "--zero 2" "--zero 3" "--zero 3 --no-prefetch" "--zero 2 --offload" \
        "--zero 3 --offload --precision bf16"; do
        local name=${flags// /}
        local gpu="$BATS_TEST_TMPDIR/gpu$name" cpu="$BATS_TEST_TMPDIR/cpu$name"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 180 3 "$FAKE/03_zero/train_zero" "${COMMON[@]}" $flags --batch 12 --grad-accum 2 \
            --device cuda --out "$gpu" --dump-params "$gpu/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        # shellcheck disable=SC2086
        mpirun_t 180 3 "$BUILD/solutions/03_zero/train_zero" "${COMMON[@]}" $flags --batch 12 \
            --grad-accum 2 --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
        same_bits "$gpu" "$cpu"
    done
}

@test "fake gpu: tensor parallelism (tp 2, tp 4, tp 2 x dp 2, a padded vocabulary) equals the CPU runs" {
    cd "$ROOT"
    for case in "2 --tp 2" "4 --tp 4 --vocab 257" "4 --tp 2 --grad-accum 2"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        fake_equals_cpu "${flags// /}" "$np" "$FAKE/04_tensor_parallel/train_tp" \
            "$BUILD/solutions/04_tensor_parallel/train_tp" $flags
    done
}

@test "fake gpu: lab 05 (SP at tp 2 and tp 2 x dp 2, recomputation full and selective, the extension, ZeRO-3 with full) equals the CPU runs" {
    cd "$ROOT"
    for case in "2 train_tp --tp 2 --sp" "2 train_tp --tp 2 --sp --recompute full" \
        "4 train_tp --tp 2 --sp --recompute selective --grad-accum 2" "2 train_tp --tp 2 --sp-regather" \
        "2 train_zero --zero 3 --recompute full"; do
        read -r np prog flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        fake_equals_cpu "$prog${flags// /}" "$np" "$FAKE/05_activation_memory/$prog" \
            "$BUILD/solutions/05_activation_memory/$prog" $flags
    done
}

@test "fake gpu: lab 06 (1F1B and ZB-H1 at pp 2, interleaved at tp 2 x pp 2) equals the CPU runs" {
    cd "$ROOT"
    for case in "2 --pp 2 --schedule 1f1b --micro-batches 4" \
        "2 --pp 2 --schedule zb-h1 --micro-batches 4" \
        "4 --pp 2 --tp 2 --schedule interleaved --chunks 2 --micro-batches 2"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        fake_equals_cpu "pp${flags// /}" "$np" "$FAKE/06_pipeline/train_pp" \
            "$BUILD/solutions/06_pipeline/train_pp" $flags
    done
}

@test "fake gpu: lab 07 (ring and Ulysses at cp 2, striped at cp 4, zigzag at tp 2 x cp 2) equals the CPU runs" {
    cd "$ROOT"
    for case in "2 --cp 2 --cp-algo ring" "2 --cp 2 --cp-algo ulysses" \
        "4 --cp 4 --cp-algo striped" "4 --cp 2 --tp 2 --cp-algo zigzag"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        fake_equals_cpu "cp${flags// /}" "$np" "$FAKE/07_context_parallel/train_cp" \
            "$BUILD/solutions/07_context_parallel/train_cp" $flags
    done
}

@test "fake gpu: lab 08 (ep 2, ep 2 x edp 2, tp 2 x ep 2: the all-to-all-v's on GPU buffers, staged) equals the CPU runs" {
    cd "$ROOT"
    for case in "2 --ep 2" "4 --ep 2" "4 --ep 2 --tp 2"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        fake_equals_cpu "ep${flags// /}-$np" "$np" "$FAKE/08_moe/train_moe" \
            "$BUILD/solutions/08_moe/train_moe" --config tiny-moe $flags
    done
}

@test "fake gpu: the library's collectives on GPU buffers give the right results through staging" {
    for op in allreduce reduce_scatter allgather broadcast; do
        run mpirun_t 120 3 "$FAKE/01_collectives/bench_collectives" --device cuda --impl library --op "$op" \
            --min-bytes 4 --max-bytes 64K --iters 2 --warmup 1 --out "$BATS_TEST_TMPDIR/$op"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"MPI with host staging"* ]]
    done
    # the lab's own functions compute on host memory: a clear error, not a crash
    run mpirun_t 60 2 "$FAKE/01_collectives/bench_collectives" --device cuda
    assert_user_error
    [[ "$output" == *"add --impl library"* ]]
}

@test "fake gpu: copies, kernels and the allocator work on the pretend GPU; a host read of its memory outside a kernel is caught" {
    run t 60 env FAKE_GPU_MEMORY_MB=4 "$FAKE/selftest"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "selftest: ok" ]
    run t 60 env FAKE_GPU_MEMORY_MB=4 "$FAKE/selftest" touch
    echo "$output"
    [ "$status" -eq 139 ]  # killed by SIGSEGV, as on a GPU (not a timeout, not a clean exit)
    [[ "$output" == *"selftest: fatal: host code touched pretend-GPU memory at 0x"*" (offset 4 of a 4000-byte GPU block): on a real GPU this is an illegal host access to device memory"* ]]
    [ "$(printf '%s\n' "$output" | grep -c 'touched pretend-GPU memory')" -eq 1 ]
    # the backtrace starts at the guilty function
    [[ "$(printf '%s\n' "$output" | grep -A1 '^selftest: backtrace' | tail -n1)" == *"selftest(host_reads_gpu_memory+"* ]]
    [[ "$output" != *"not caught"* ]]
}

@test "fake gpu: the old host memset of train_zero's begin_step is caught on 2 ranks, naming begin_step; on the CPU it runs" {
    cd "$ROOT"
    local dir=$BATS_TEST_TMPDIR offset
    # planted: begin_step clears the gradients with memset, as it once did
    sed 's|^static void begin_step(void \*ctx) { zero_begin_step(ctx); }$|static void begin_step(void *ctx) {\n    Zero *z = ctx;\n    memset(z->stage == 1 ? z->grads_full : z->grads_shard, 0, sizeof(float)); /* planted */\n    zero_begin_step(z);\n}|' \
        apps/train_zero.c > "$dir/train_zero.c"
    grep -q 'planted' "$dir/train_zero.c"
    build_fake_zero "$dir/train_zero.c" "$dir/train_zero"
    run mpirun_t 120 2 "$dir/train_zero" "${COMMON[@]}" --steps 2 --device cuda --out "$dir/gpu"
    echo "$output"
    [ "$status" -ne 0 ]
    [ "$status" -ne 124 ]  # not the timeout
    [ "$status" -ne 137 ]
    [[ "$output" == *"train_zero: fatal: host code touched pretend-GPU memory at 0x"*" (offset 0 of a 882176-byte GPU block): on a real GPU this is an illegal host access to device memory"* ]]
    # begin_step is static: its frame is PROGRAM(+0xOFFSET), which addr2line
    # names (as the report says); its caller is named in the backtrace itself
    offset=$(printf '%s\n' "$output" | sed -n "s|^$dir/train_zero(+\(0x[0-9a-f]*\)).*|\1|p" | head -n1)
    [ -n "$offset" ]
    [ "$(addr2line -f -e "$dir/train_zero" "$offset" | head -n1)" = begin_step ]
    [[ "$output" == *"$dir/train_zero(train_run_parallel+"* ]]
    # the same program on the CPU: host memory, nothing wrong
    run mpirun_t 120 2 "$dir/train_zero" "${COMMON[@]}" --steps 2 --out "$dir/cpu"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "fake gpu: a run bigger than the GPU's free memory is refused up front (preflight.h), counting the ranks that share it" {
    cd "$ROOT"
    # tiny on one rank needs 16.8 MiB (memplan): 16 MiB of GPU is too little, 24 is enough
    run t 60 env FAKE_GPU_MEMORY_MB=16 "$FAKE/00_single_device/train_gpt" "${COMMON[@]}" --steps 2 --device cuda \
        --out "$BATS_TEST_TMPDIR/small"
    echo "$output"
    assert_user_error
    [[ "$output" == *"needs 16.8 MiB per rank"*"but 16.0 MiB is available on the GPU"* ]]
    run t 60 env FAKE_GPU_MEMORY_MB=24 "$FAKE/00_single_device/train_gpt" "${COMMON[@]}" --steps 2 --device cuda \
        --out "$BATS_TEST_TMPDIR/fits"
    [ "$status" -eq 0 ]
    # three ranks on one (pretend) GPU: three times the per-rank bytes
    run mpirun_t 60 3 env FAKE_GPU_MEMORY_MB=24 "$FAKE/03_zero/train_zero" "${COMMON[@]}" --zero 3 \
        --batch 12 --device cuda --out "$BATS_TEST_TMPDIR/shared"
    echo "$output"
    assert_user_error
    [[ "$output" == *"3 ranks share one GPU"*"available on the GPU"* ]]
    run t 60 env FAKE_GPU_MEMORY_MB=lots "$FAKE/00_single_device/train_gpt" "${COMMON[@]}" --device cuda \
        --out "$BATS_TEST_TMPDIR/oom"
    assert_user_error
    [[ "$output" == *"FAKE_GPU_MEMORY_MB expects an integer"* ]]
}

@test "fake gpu: checkpoints from GPU buffers (ZeRO-3, TP; --save-async the same files) load on the CPU and back, bit for bit" {
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR" S="$BUILD/solutions"
    # saved from the pretend GPU's shards at step 2 of 4, resumed on the CPU
    run mpirun_t 180 2 "$FAKE/03_zero/train_zero" "${COMMON[@]}" --zero 3 --device cuda --save "$d/g" \
        --save-every 2 --out "$d/gz" --dump-params "$d/gz/params.bin"
    [ "$status" -eq 0 ]
    # --save-async's snapshot of the GPU's shards: the same files
    run mpirun_t 180 2 "$FAKE/03_zero/train_zero" "${COMMON[@]}" --zero 3 --device cuda --save "$d/ga" \
        --save-every 2 --save-async --out "$d/ga-run"
    [ "$status" -eq 0 ]
    same_checkpoints "$d/g" "$d/ga"
    run mpirun_t 180 2 "$S/03_zero/train_zero" "${COMMON[@]}" --zero 3 --resume "$d/g/step-000002" \
        --out "$d/cz" --dump-params "$d/cz/params.bin"
    [ "$status" -eq 0 ]
    cmp "$d/gz/params.bin" "$d/cz/params.bin"
    # saved on the CPU, resumed into the pretend GPU's TP shards
    run mpirun_t 180 2 "$S/04_tensor_parallel/train_tp" "${COMMON[@]}" --tp 2 --save "$d/c" \
        --save-every 2 --out "$d/ct" --dump-params "$d/ct/params.bin"
    [ "$status" -eq 0 ]
    run mpirun_t 180 2 "$FAKE/04_tensor_parallel/train_tp" "${COMMON[@]}" --tp 2 --device cuda \
        --resume "$d/c/step-000002" --out "$d/gt" --dump-params "$d/gt/params.bin"
    [ "$status" -eq 0 ]
    cmp "$d/ct/params.bin" "$d/gt/params.bin"
}

@test "fake gpu: comm.h on GPU buffers over the pretend NCCL (one GPU per rank): every collective, uneven shards, a split group, batches of 40 with an all-reduce inside, host beside GPU buffers" {
    run mpirun_t 120 4 env FAKE_GPUS=4 "$FAKE/nccl_check"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"nccl_check: group 'world' over NCCL, one GPU per rank, and every group split from it"* ]]
    [[ "$output" == *"nccl_check: ok"* ]]
    # a wait for a request of a batch before the batch ends: NCCL would never
    # launch it; one clear fatal line, not a hang nor a wrong result, and
    # the same on MPI (ranks sharing a GPU), where the wait would work
    for gpus in 3 1; do
        run mpirun_t 60 3 env FAKE_GPUS=$gpus "$FAKE/nccl_check" wait-in-batch
        echo "$output"
        [ "$status" -eq 1 ]
        [[ "$output" == *"fatal: "*"a wait for a recv of group 'world' before the end of its batch: NCCL launches a batch at comm_batch_end, so this wait would never end; end the batch first"* ]]
        [[ "$output" != *"not caught"* ]]
    done
    # the pretend NCCL itself refuses two ranks on one GPU, as NCCL does
    run mpirun_t 60 2 env FAKE_GPUS=1 "$FAKE/nccl_check" duplicate-gpu
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"ncclCommInitRankConfig: invalid usage: Duplicate GPU detected : rank 0 and rank 1 both on CUDA device GPU-pretend-"*"-0"* ]]
}

@test "fake gpu: DDP overlapped and ZeRO-3 on 3 pretend GPUs over the pretend NCCL: two runs give the same bits, and follow the CPU run" {
    cd "$ROOT"
    local d="$BATS_TEST_TMPDIR" flags
    for flags in "02_ddp/train_ddp --ddp overlapped --bucket-mb 0.1" "03_zero/train_zero --zero 3"; do
        read -r prog args <<<"$flags"
        local name=${prog%%/*}
        for k in 1 2; do
            # shellcheck disable=SC2086  # args is a list
            run mpirun_t 180 3 env FAKE_GPUS=3 "$FAKE/$prog" "${COMMON[@]}" $args --batch 12 --grad-accum 2 \
                --device cuda --out "$d/$name-$k" --dump-params "$d/$name-$k/params.bin"
            [ "$status" -eq 0 ] || { echo "$output"; return 1; }
            [[ "$output" == *"over NCCL, one GPU per rank"* ]]
        done
        cmp "$d/$name-1/params.bin" "$d/$name-2/params.bin"
        cmp <(cut -d, -f1-5 "$d/$name-1/metrics.csv") <(cut -d, -f1-5 "$d/$name-2/metrics.csv")
        # shellcheck disable=SC2086
        mpirun_t 180 3 "$BUILD/solutions/$prog" "${COMMON[@]}" $args --batch 12 --grad-accum 2 \
            --out "$d/$name-cpu" --dump-params "$d/$name-cpu/params.bin" > /dev/null
        BASE="$d/$name-cpu" same_run "$d/$name-1"
        # comm.csv counts the same calls and bytes on either path
        cmp <(cut -d, -f1-5 "$d/$name-1/comm.csv") <(cut -d, -f1-5 "$d/$name-cpu/comm.csv")
    done
}

@test "fake gpu: a rank that never comes to NCCL's init ends the job by the watchdog, every communicator aborted first" {
    cd "$ROOT"
    run mpirun_t 60 3 env FAKE_GPUS=3 FAKE_NCCL_STALL_INIT=2 FAKE_NCCL_LOG=1 "$FAKE/03_zero/train_zero" \
        "${COMMON[@]}" --zero 1 --batch 12 --device cuda --comm-timeout 2 --out "$BATS_TEST_TMPDIR/x"
    echo "$output"
    [ "$status" -eq 4 ]
    [[ "$output" == *"train_zero: comm timeout: rank "[01]" waited "*" s in nccl_setup on group 'world' (3 ranks), over --comm-timeout 2"* ]]
    # the rank that reports aborted the communicator it was making (the
    # other waiting one may be ended by then)
    local reporter
    reporter=$(sed -n "s/^train_zero: comm timeout: rank \([01]\) waited.*/\1/p" <<<"$output")
    [[ "$output" == *"pretend NCCL: rank $reporter: ncclCommAbort of a communicator still initializing"* ]]
}
