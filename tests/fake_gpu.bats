#!/usr/bin/env bats
# The GPU path without a GPU: the programs built with a pretend GPU made of
# host memory (tests/fake_gpu/fake_device.c in place of common/device.c).
# With --device cuda every buffer mem_alloc makes is "GPU" memory: token
# batches and initial parameters are uploaded, parameters downloaded for
# dumps and checks, the allocator caches freed GPU blocks, and the
# communicator stages GPU buffers through host copies (MPI's path when ranks
# share a GPU). The kernels are the CPU's, so every run must equal the CPU
# run bit for bit: a transfer that is missing, misplaced or short shows.
# What this cannot see is the CUDA code itself (tests/gpu.bats, on a GPU).
load helpers

FAKE="$BUILD/fake_gpu"
COMMON=(--config tiny --steps 8 --eval-every 4 --threads 1)

setup_file() {
    t 600 make -s -C "$ROOT" fake-gpu
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
    run t 120 "$FAKE/train_gpt" "${COMMON[@]}" --device cuda --out "$gpu" --dump-params "$gpu/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"device pretend GPU"* ]]
    [[ "$output" == *"MiB in use on the GPU"* ]]
    t 120 "$SOL00/train_gpt" "${COMMON[@]}" --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
    same_bits "$gpu" "$cpu"
}

@test "fake gpu: DDP naive, bucketed, overlapped on 3 ranks (host staging) equal the CPU runs" {
    cd "$ROOT"
    for mode in naive bucketed overlapped; do
        local flags=(--ddp "$mode" --bucket-mb 0.1 --batch 12 --grad-accum 2 --check-consistency 4)
        local gpu="$BATS_TEST_TMPDIR/gpu-$mode" cpu="$BATS_TEST_TMPDIR/cpu-$mode"
        run mpirun_t 180 3 "$FAKE/train_ddp" "${COMMON[@]}" "${flags[@]}" --device cuda \
            --out "$gpu" --dump-params "$gpu/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"MPI with host staging"* ]]
        mpirun_t 180 3 "$BUILD/solutions/02_ddp/train_ddp" "${COMMON[@]}" "${flags[@]}" \
            --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
        same_bits "$gpu" "$cpu"
    done
}

@test "fake gpu: ZeRO-1, 2, 3 (and 3 without prefetch) on 3 ranks equal the CPU runs" {
    cd "$ROOT"
    for flags in "--zero 1" "--zero 2" "--zero 3" "--zero 3 --no-prefetch"; do
        local name=${flags// /}
        local gpu="$BATS_TEST_TMPDIR/gpu$name" cpu="$BATS_TEST_TMPDIR/cpu$name"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 180 3 "$FAKE/train_zero" "${COMMON[@]}" $flags --batch 12 --grad-accum 2 \
            --device cuda --out "$gpu" --dump-params "$gpu/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        # shellcheck disable=SC2086
        mpirun_t 180 3 "$BUILD/solutions/03_zero/train_zero" "${COMMON[@]}" $flags --batch 12 \
            --grad-accum 2 --out "$cpu" --dump-params "$cpu/params.bin" > /dev/null
        same_bits "$gpu" "$cpu"
    done
}

@test "fake gpu: the library's collectives on GPU buffers give the right results through staging" {
    for op in allreduce reduce_scatter allgather broadcast; do
        run mpirun_t 120 3 "$FAKE/bench_collectives" --device cuda --impl library --op "$op" \
            --min-bytes 4 --max-bytes 64K --iters 2 --warmup 1 --out "$BATS_TEST_TMPDIR/$op"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"MPI with host staging"* ]]
    done
    # the lab's own functions compute on host memory: a clear error, not a crash
    run mpirun_t 60 2 "$FAKE/bench_collectives" --device cuda
    assert_user_error
    [[ "$output" == *"add --impl library"* ]]
}
