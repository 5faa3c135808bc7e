#!/usr/bin/env bats
# CUDA sources: they must compile everywhere (CI has nvcc but no GPU); the
# NCCL communicator is checked against the MPI path where a GPU exists.
load helpers

NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

setup() {
    command -v "$NVCC" >/dev/null || skip "nvcc not found at $NVCC (set NVCC=/path/to/nvcc)"
}

# Number of GPUs nvidia-smi lists (0 without a driver or without nvidia-smi).
gpu_count() {
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
}

@test "cuda: make cuda-check compiles every .cu file to an object" {
    run t 600 make -s -C "$ROOT" cuda-check NVCC="$NVCC"
    echo "$output"
    [ "$status" -eq 0 ]
    cd "$ROOT"
    local n=0 src
    while IFS= read -r src; do
        [ -f "$BUILD/cuda/${src%.cu}.o" ] || { echo "no object for $src"; return 1; }
        n=$((n + 1))
    done < <(find common solutions labs tests/cuda -name '*.cu' 2>/dev/null)
    [ "$n" -ge 2 ]
}

@test "cuda: a compile error in a .cu file fails make cuda-check" {
    local dir=$BATS_TEST_TMPDIR
    printf 'int broken( {\n' > "$dir/broken.cu"
    run t 120 make -s -C "$ROOT" cuda-check NVCC="$NVCC" BUILD="$dir/build" CUDA_SRC="$dir/broken.cu"
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"broken.cu"* ]]
}

@test "cuda: make cuda-check without nvcc fails with one clear message" {
    run make -s -C "$ROOT" cuda-check NVCC=/nonexistent/nvcc
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"nvcc not found at '/nonexistent/nvcc'"* ]]
}

@test "cuda: the NCCL test program builds; without a GPU it says skip (status 77)" {
    run t 600 make -s -C "$ROOT" cuda-tests NVCC="$NVCC"
    echo "$output"
    [ "$status" -eq 0 ]
    [ -x "$BUILD/cuda/tests/test_nccl" ]
    [ "$(gpu_count)" -eq 0 ] || skip "a GPU is present: the next test runs the program"
    run t 60 "$BUILD/cuda/tests/test_nccl"
    echo "$output"
    [ "$status" -eq 77 ]
    [[ "$output" == "skip: no CUDA device"* ]]
}

@test "cuda: NCCL collectives equal the MPI path bit for bit (1 and 2 ranks)" {
    local gpus
    gpus=$(gpu_count)
    [ "$gpus" -gt 0 ] || skip "no CUDA device: nvidia-smi -L lists no GPU"
    run t 600 make -s -C "$ROOT" cuda-tests NVCC="$NVCC"
    [ "$status" -eq 0 ]
    run mpirun_t 300 1 "$BUILD/cuda/tests/test_nccl"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *" 0 failed"* ]]
    run mpirun_t 300 2 "$BUILD/cuda/tests/test_nccl"
    echo "$output"
    if [ "$gpus" -ge 2 ]; then
        [ "$status" -eq 0 ]
        [[ "$output" == *" 0 failed"* ]]
    else
        # two ranks, one GPU: NCCL cannot, the kit says to use the MPI path
        [ "$status" -eq 2 ]
        [[ "$output" == *"error: ranks 0 and 1 of group 'world' would share one GPU"* ]]
        [[ "$output" == *"host staging"* ]]
    fi
}
