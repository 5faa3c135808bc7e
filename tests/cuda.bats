#!/usr/bin/env bats
# CUDA sources: they must compile everywhere (CI has nvcc but no GPU), and
# `make CUDA=1` must build every program. What runs on a GPU is checked in
# tests/gpu.bats.
load helpers

NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}

setup() {
    command -v "$NVCC" >/dev/null || skip "nvcc not found at $NVCC (set NVCC=/path/to/nvcc)"
}

# Number of GPUs nvidia-smi lists (0 without a driver or without nvidia-smi).
gpu_count() {
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
}

@test "cuda: make cuda-check compiles every .cu file to an object, without a warning (WERROR=1)" {
    run t 600 make -s -C "$ROOT" cuda-check NVCC="$NVCC" WERROR=1
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

@test "cuda: a warning fails the build with WERROR=1 (the suite's) and not without (a user's nvcc may warn where CI's does not)" {
    local dir=$BATS_TEST_TMPDIR
    printf '__global__ void k(int *p) { int unused; *p = 1; }\n' > "$dir/warns.cu"
    run t 120 make -s -C "$ROOT" cuda-check NVCC="$NVCC" BUILD="$dir/a" CUDA_SRC="$dir/warns.cu" WERROR=1
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"unused"* ]]
    run t 120 make -s -C "$ROOT" cuda-check NVCC="$NVCC" BUILD="$dir/b" CUDA_SRC="$dir/warns.cu"
    echo "$output"
    [ "$status" -eq 0 ]
    [ -f "$dir/b/cuda/$dir/warns.o" ] || [ -n "$(find "$dir/b/cuda" -name warns.o)" ]
}

@test "cuda: make cuda-check without nvcc fails with one clear message" {
    run make -s -C "$ROOT" cuda-check NVCC=/nonexistent/nvcc
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"nvcc not found at '/nonexistent/nvcc'"* ]]
}

@test "cuda: the GPU test programs build; without a GPU they say skip (status 77)" {
    run t 900 make -s -C "$ROOT" cuda-tests NVCC="$NVCC"
    echo "$output"
    [ "$status" -eq 0 ]
    [ -x "$BUILD/cuda/tests/test_nccl" ]
    [ -x "$BUILD/cuda/tests/test_kernels" ]
    [ "$(gpu_count)" -eq 0 ] || skip "a GPU is present: tests/gpu.bats runs the programs"
    for prog in test_nccl test_kernels; do
        run t 60 "$BUILD/cuda/tests/$prog"
        echo "$output"
        [ "$status" -eq 77 ]
        [[ "$output" == "skip: no CUDA device"* ]]
    done
}

@test "cuda: make CUDA=1 builds every program without warnings; they run on the CPU as before" {
    require_solution 00 01 02 03  # it checks each lab's solution is built
    run t 1800 make -s -C "$ROOT" gpu-build NVCC="$NVCC"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" != *"warning"* ]]
    local gpu="$BUILD/gpu" out="$BATS_TEST_TMPDIR"
    for prog in solutions/00_single_device/train_gpt solutions/02_ddp/train_ddp \
                solutions/03_zero/train_zero solutions/01_collectives/bench_collectives; do
        [ -x "$gpu/$prog" ] || { echo "missing $gpu/$prog"; return 1; }
    done
    # the CUDA build's CPU path is the CPU build's: the same losses, bit for bit
    t 120 "$SOL00/train_gpt" --config tiny --steps 3 --threads 1 --data "$SYNTH" \
        --out "$out/cpu" > /dev/null
    t 120 "$gpu/solutions/00_single_device/train_gpt" --config tiny --steps 3 --threads 1 \
        --data "$SYNTH" --out "$out/cuda-build" > /dev/null
    cmp <(cut -d, -f1-5 "$out/cpu/metrics.csv") <(cut -d, -f1-5 "$out/cuda-build/metrics.csv")
    cmp "$out/cpu/memory.csv" "$out/cuda-build/memory.csv"
}

@test "cuda: --device cuda without a GPU is one clear error (CUDA build), a rebuild hint (CPU build)" {
    require_solution 00 03
    run t 60 "$SOL00/train_gpt" --config tiny --steps 1 --device cuda
    assert_user_error
    [[ "$output" == *"rebuild with \`make CUDA=1\`"* ]]
    local gpu="$BUILD/gpu/solutions/00_single_device/train_gpt"
    [ -x "$gpu" ] || skip "no CUDA build (the test above makes it)"
    [ "$(gpu_count)" -eq 0 ] || skip "a GPU is present"
    run t 60 "$gpu" --config tiny --steps 1 --device cuda --data "$SYNTH"
    assert_user_error
    [[ "$output" == *"--device cuda needs a CUDA GPU and none is visible"* ]]
    run mpirun_t 60 2 "$BUILD/gpu/solutions/03_zero/train_zero" --config tiny --steps 1 \
        --device cuda --data "$SYNTH"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--device cuda needs a CUDA GPU and none is visible"* ]]
}
