#!/usr/bin/env bats
# The GPU suite: the CUDA backend (make CUDA=1, built into build/gpu) against
# the CPU backend. Every test needs a CUDA GPU and, without one, skips with
# one line; `make test-gpu` runs this file alone, `make test` runs it with
# the rest (skipped in CI, which has nvcc but no GPU).
#
# Tolerances. The GPU sums in other orders than the CPU (cuBLAS's GEMM
# tiling, warp reductions), so fp32
# results differ in the last bits and the difference grows over steps. For
# 12 steps of tiny: losses within 1e-4 + 1e-4 |loss| and parameters within
# 1e-4 (10x the CPU layouts' tolerance); the grad-norm within 1e-3 relative
# (the grader's). The memory accounting is logical bytes: it must be equal.
load helpers
# The tolerances are fp32's: TF32 GEMMs (KIT_TF32=1, bench/gpu.sh's default)
# round inputs to 10 bits and differ from the CPU by about 1e-3
unset KIT_TF32

GPU_BUILD="$BUILD/gpu"
COMMON=(--config tiny --steps 12 --eval-every 4)

gpu_count() {
    nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true
}

setup_file() {
    [ "$(gpu_count)" -gt 0 ] || return 0
    t 1800 make -s -C "$ROOT" gpu-build > "$BATS_FILE_TMPDIR/build.log" 2>&1 \
        || { tail -n 30 "$BATS_FILE_TMPDIR/build.log"; return 1; }
    have_solution 00 || return 0   # a handout without it: the tests that need it skip
    export CPU_BASE="$BATS_FILE_TMPDIR/cpu"
    t 300 "$SOL00/train_gpt" "${COMMON[@]}" --out "$CPU_BASE" \
        --dump-params "$CPU_BASE/params.bin" > /dev/null
}

setup() {
    GPUS=$(gpu_count)
    [ "$GPUS" -gt 0 ] || skip "no CUDA device (nvidia-smi -L lists none): GPU test not run"
    cd "$ROOT"
}

# close_to_cpu DIR: DIR's losses and parameters within the GPU tolerances
# of the CPU run, and its memory.csv equal to the CPU run's.
close_to_cpu() {
    python3 - "$CPU_BASE" "$1" <<'PY'
import sys, csv, array
base, run = sys.argv[1], sys.argv[2]
def rows(d, f): return list(csv.DictReader(open(f"{d}/{f}")))
a, b = rows(base, "metrics.csv"), rows(run, "metrics.csv")
assert len(a) == len(b), (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    for col in ("loss", "val_loss"):
        if x[col] == "": continue
        want, have = float(x[col]), float(y[col])
        assert abs(have - want) <= 1e-4 + 1e-4 * abs(want), f"{col} at step {x['step']}: {have} vs CPU {want}"
        worst = max(worst, abs(have - want))
    gw, gh = float(x["grad_norm"]), float(y["grad_norm"])
    assert abs(gh - gw) <= 1e-3 * abs(gw), f"grad_norm at step {x['step']}: {gh} vs CPU {gw}"
p, q = array.array("f"), array.array("f")
p.frombytes(open(f"{base}/params.bin", "rb").read())
q.frombytes(open(f"{run}/params.bin", "rb").read())
assert len(p) == len(q), (len(p), len(q))
pw = max(abs(x - y) for x, y in zip(p, q))
assert pw < 1e-4, f"parameters differ by up to {pw}"
print(f"ok: losses within {worst:.2g} of the CPU's, parameters within {pw:.2g}")
PY
}

# same_memory_as_cpu DIR REF: memory.csv of DIR has REF's rows, byte for byte
same_memory_as_cpu() {
    diff <(sort "$2/memory.csv") <(sort "$1/memory.csv")
}

@test "gpu: every kernel's forward and backward equals the CPU backend (random inputs)" {
    require_solution 00  # the CPU side is lab 00's backward passes
    run t 300 "$GPU_BUILD/cuda/tests/test_kernels"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *" 0 failed"* ]]
}

@test "gpu: lab 00 on the GPU follows the CPU loss curve; memory.csv equal; driver memory reported" {
    require_solution 00
    out="$BATS_TEST_TMPDIR/gpu"
    run t 300 "$GPU_BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --device cuda \
        --out "$out" --dump-params "$out/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"MiB in use on the GPU (cudaMemGetInfo"* ]]
    run close_to_cpu "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    same_memory_as_cpu "$out" "$CPU_BASE"
}

@test "gpu: two GPU runs give the same bits (no atomic float adds: the embedding's gradient too), and a vocabulary-parallel one too" {
    require_solution 00 02 04
    local a="$BATS_TEST_TMPDIR/a" b="$BATS_TEST_TMPDIR/b" dir
    # the synthetic corpus repeats tokens within every sequence: rows of
    # dwte take several positions' gradients, in an order that must not vary
    for dir in "$a" "$b"; do
        run t 300 "$GPU_BUILD/solutions/00_single_device/train_gpt" "${COMMON[@]}" --device cuda \
            --out "$dir" --dump-params "$dir/params.bin"
        [ "$status" -eq 0 ]
    done
    cmp "$a/params.bin" "$b/params.bin"
    diff <(cut -d, -f1-5 "$a/metrics.csv") <(cut -d, -f1-5 "$b/metrics.csv")
    # the vocabulary-parallel embedding (tp 2), ranks on one GPU or two
    for dir in "$a-tp" "$b-tp"; do
        run mpirun_t 300 2 "$GPU_BUILD/solutions/04_tensor_parallel/train_tp" --tp 2 "${COMMON[@]}" \
            --device cuda --out "$dir" --dump-params "$dir/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
    done
    cmp "$a-tp/params.bin" "$b-tp/params.bin"
}

@test "gpu: lab 01 collectives on GPU buffers: NCCL equals MPI bit for bit; host staging is correct" {
    require_solution 01
    run mpirun_t 300 1 "$GPU_BUILD/cuda/tests/test_nccl"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *" 0 failed"* ]]
    run mpirun_t 300 2 "$GPU_BUILD/cuda/tests/test_nccl"
    echo "$output"
    if [ "$GPUS" -ge 2 ]; then
        [ "$status" -eq 0 ]
        [[ "$output" == *" 0 failed"* ]]
    else
        # two ranks, one GPU: NCCL cannot, the kit says to use the MPI path
        [ "$status" -eq 2 ]
        [[ "$output" == *"error: ranks 0 and 1 of group 'world' would share one GPU"* ]]
        [[ "$output" == *"host staging"* ]]
    fi
    # more ranks than GPUs: the MPI path with host staging (checked results)
    for op in allreduce reduce_scatter allgather broadcast; do
        run mpirun_t 300 $((GPUS + 1)) "$GPU_BUILD/solutions/01_collectives/bench_collectives" \
            --device cuda --impl library --op "$op" --min-bytes 4K --max-bytes 1M --iters 2 \
            --warmup 1 --out "$BATS_TEST_TMPDIR/$op"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"MPI with host staging"* ]]
    done
}

@test "gpu: DDP (2 ranks) on GPUs follows the CPU run" {
    require_solution 00 02
    out="$BATS_TEST_TMPDIR/ddp"
    run mpirun_t 300 2 "$GPU_BUILD/solutions/02_ddp/train_ddp" "${COMMON[@]}" --device cuda \
        --out "$out" --dump-params "$out/params.bin" --check-consistency 4
    echo "$output"
    [ "$status" -eq 0 ]
    if [ "$GPUS" -ge 2 ]; then [[ "$output" == *"over NCCL"* ]]; else [[ "$output" == *"host staging"* ]]; fi
    run close_to_cpu "$out"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "gpu: ZeRO-1, 2, 3 (2 ranks) on GPUs follow the CPU run, memory.csv equal to the CPU's" {
    require_solution 00 03
    for stage in 1 2 3; do
        cpu="$BATS_TEST_TMPDIR/cpu-z$stage"
        run mpirun_t 300 2 "$BUILD/solutions/03_zero/train_zero" "${COMMON[@]}" --zero $stage \
            --threads 1 --out "$cpu"
        [ "$status" -eq 0 ]
        out="$BATS_TEST_TMPDIR/z$stage"
        run mpirun_t 300 2 "$GPU_BUILD/solutions/03_zero/train_zero" "${COMMON[@]}" --zero $stage \
            --device cuda --out "$out" --dump-params "$out/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        run close_to_cpu "$out"
        echo "$output"
        [ "$status" -eq 0 ]
        same_memory_as_cpu "$out" "$cpu"
    done
}

@test "gpu: lab 05, SP at tp 2 with full recomputation on GPUs follows the CPU run, memory.csv equal to the CPU's" {
    require_solution 00 02 04 05
    cpu="$BATS_TEST_TMPDIR/cpu-sp2"
    run mpirun_t 300 2 "$BUILD/solutions/05_activation_memory/train_tp" "${COMMON[@]}" --tp 2 \
        --sp --recompute full --threads 1 --out "$cpu"
    [ "$status" -eq 0 ]
    out="$BATS_TEST_TMPDIR/sp2"
    run mpirun_t 300 2 "$GPU_BUILD/solutions/05_activation_memory/train_tp" "${COMMON[@]}" --tp 2 \
        --sp --recompute full --device cuda --out "$out" --dump-params "$out/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"TP reduce-scatters per rank"*" ok"* ]]
    [[ "$output" == *"TP all-gathers per rank"*" ok"* ]]
    run close_to_cpu "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    same_memory_as_cpu "$out" "$cpu"
}

@test "gpu: tensor parallelism (tp 2 on 2 ranks) on GPUs follows the CPU run, memory.csv equal to the CPU's" {
    require_solution 00 02 04
    cpu="$BATS_TEST_TMPDIR/cpu-tp2"
    run mpirun_t 300 2 "$BUILD/solutions/04_tensor_parallel/train_tp" "${COMMON[@]}" --tp 2 \
        --threads 1 --out "$cpu"
    [ "$status" -eq 0 ]
    out="$BATS_TEST_TMPDIR/tp2"
    run mpirun_t 300 2 "$GPU_BUILD/solutions/04_tensor_parallel/train_tp" "${COMMON[@]}" --tp 2 \
        --device cuda --out "$out" --dump-params "$out/params.bin"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"TP all-reduces per rank"*" ok"* ]]
    run close_to_cpu "$out"
    echo "$output"
    [ "$status" -eq 0 ]
    same_memory_as_cpu "$out" "$cpu"
}

@test "gpu: lab 07, the ring (zigzag) and Ulysses at cp 2 on GPUs follow the CPU run, memory.csv equal to the CPU's" {
    require_solution 00 02 04 07
    for a in zigzag ulysses; do
        cpu="$BATS_TEST_TMPDIR/cpu-$a"
        run mpirun_t 300 2 "$BUILD/solutions/07_context_parallel/train_cp" "${COMMON[@]}" --cp 2 \
            --cp-algo "$a" --threads 1 --out "$cpu"
        [ "$status" -eq 0 ]
        out="$BATS_TEST_TMPDIR/$a"
        run mpirun_t 300 2 "$GPU_BUILD/solutions/07_context_parallel/train_cp" "${COMMON[@]}" \
            --cp 2 --cp-algo "$a" --device cuda --out "$out" --dump-params "$out/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" != *DIFFERENT* ]]
        run close_to_cpu "$out"
        echo "$output"
        [ "$status" -eq 0 ]
        same_memory_as_cpu "$out" "$cpu"
    done
}

@test "gpu: lab 06, 1F1B and ZB-H1 at pp 2 on GPUs follow the CPU run, memory.csv equal to the CPU's" {
    require_solution 00 02 04 06
    for s in 1f1b zb-h1; do
        cpu="$BATS_TEST_TMPDIR/cpu-$s"
        run mpirun_t 300 2 "$BUILD/solutions/06_pipeline/train_pp" "${COMMON[@]}" --pp 2 \
            --schedule "$s" --micro-batches 4 --threads 1 --out "$cpu"
        [ "$status" -eq 0 ]
        out="$BATS_TEST_TMPDIR/$s"
        run mpirun_t 300 2 "$GPU_BUILD/solutions/06_pipeline/train_pp" "${COMMON[@]}" --pp 2 \
            --schedule "$s" --micro-batches 4 --device cuda --out "$out" \
            --dump-params "$out/params.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" != *DIFFERENT* ]]
        run close_to_cpu "$out"
        echo "$output"
        [ "$status" -eq 0 ]
        same_memory_as_cpu "$out" "$cpu"
    done
}
