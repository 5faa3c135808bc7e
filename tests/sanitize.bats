#!/usr/bin/env bats
# The kit under AddressSanitizer (out-of-bounds accesses, use after free,
# and at exit LeakSanitizer's leaks) and UndefinedBehaviorSanitizer: the
# programs `make sanitize` builds into build/sanitize/ run lab 00, the
# gradient checker, the collectives, every DDP mode and every ZeRO stage on
# 3 ranks, and must exit 0 without a single report. Leaks inside Open MPI
# and the libraries under it are suppressed by library (sanitize/lsan.supp);
# the kit's own never are. The sanitizer options are in sanitize/env.sh.
# The last tests plant bugs, to show that a report does fail a run.
load helpers
# shellcheck source=tests/sanitize/env.sh
source "$BATS_TEST_DIRNAME/sanitize/env.sh"

SAN="$BUILD/sanitize"
SHORT=(--config tiny --steps 3 --eval-every 2 --threads 1 --data "$SYNTH")

setup_file() {
    t 900 make -s -C "$ROOT" all data sanitize
}

# The last `run` exited 0 and printed no sanitizer report.
no_reports() {
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" != *"ERROR: AddressSanitizer"* ]]
    [[ "$output" != *"ERROR: LeakSanitizer"* ]]
    [[ "$output" != *"runtime error:"* ]]
}

# The sanitizer flags as the Makefile has them (for planted-bug builds)
san_flags() {
    make -s --no-print-directory -C "$ROOT" print-flags SANITIZE=1 BUILD=build/sanitize |
        sed -n 's/^SANITIZE_FLAGS=//p'
}

@test "sanitize: its own build directory; the normal build stays up to date" {
    # the stamp: the flavour, then the compiler flags
    [[ "$(cat "$SAN/flavor")" == "cpu-sanitize "*"-fsanitize=address"* ]]
    [[ "$(cat "$BUILD/flavor")" == "cpu "* ]]
    [[ "$(cat "$BUILD/flavor")" != *sanitize* ]]
    run make -n -C "$ROOT" all
    echo "$output"
    [[ "$output" != *mpicc* ]]
}

@test "sanitize: lab 00 trains tiny (accumulation, evaluation, parameter dump)" {
    require_solution 00
    run t 120 "$SAN/solutions/00_single_device/train_gpt" "${SHORT[@]}" --grad-accum 2 \
        --out "$BATS_TEST_TMPDIR/run" --dump-params "$BATS_TEST_TMPDIR/run/params.bin"
    no_reports
    [ "$(wc -l < "$BATS_TEST_TMPDIR/run/metrics.csv")" -eq 4 ]
}

@test "sanitize: gradcheck frees what it allocates, every layer and the model" {
    require_solution 00
    run t 120 "$SAN/solutions/00_single_device/gradcheck"
    no_reports
    [[ "$output" == *"all gradients match"* ]]
}

@test "sanitize: collectives checker and benchmark on 3 ranks" {
    require_solution 01
    run mpirun_t 120 3 "$SAN/solutions/01_collectives/check_collectives"
    no_reports
    run mpirun_t 120 3 "$SAN/solutions/01_collectives/check_collectives" --op halving_allreduce
    no_reports
    run mpirun_t 120 3 "$SAN/solutions/01_collectives/bench_collectives" --min-bytes 4 \
        --max-bytes 16K --iters 2 --warmup 1 --out "$BATS_TEST_TMPDIR/bench"
    no_reports
}

@test "sanitize: DDP naive, bucketed, overlapped on 3 ranks" {
    require_solution 02
    for mode in naive bucketed overlapped; do
        run mpirun_t 120 3 "$SAN/solutions/02_ddp/train_ddp" "${SHORT[@]}" --ddp "$mode" \
            --bucket-mb 0.1 --batch 12 --grad-accum 2 --check-consistency 2 \
            --out "$BATS_TEST_TMPDIR/$mode"
        no_reports
    done
}

@test "sanitize: ZeRO-1, 2, 3 (and 3 without prefetch, and 2 and 3 with --overlap-rs) on 3 ranks" {
    require_solution 03
    for flags in "--zero 1" "--zero 2" "--zero 3" "--zero 3 --no-prefetch" "--zero 2 --overlap-rs" \
                 "--zero 3 --overlap-rs"; do
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 3 "$SAN/solutions/03_zero/train_zero" "${SHORT[@]}" $flags \
            --batch 12 --grad-accum 2 --out "$BATS_TEST_TMPDIR/${flags// /}"
        no_reports
    done
}

@test "sanitize: checkpoints: ZeRO-3 on 3 ranks saves (and again with --save-async: the same files), TP 2 resumes from it, check_ckpt, the tool inspects, verifies and converts" {
    require_solution 03 04 09
    local d="$BATS_TEST_TMPDIR"
    run mpirun_t 120 3 "$SAN/solutions/03_zero/train_zero" "${SHORT[@]}" --zero 3 --batch 6 \
        --save "$d/ck" --save-every 2 --keep 2 --out "$d/z"
    no_reports
    run mpirun_t 120 3 "$SAN/solutions/03_zero/train_zero" "${SHORT[@]}" --zero 3 --batch 6 \
        --save "$d/cka" --save-every 2 --keep 2 --save-async --out "$d/za"
    no_reports
    same_checkpoints "$d/ck" "$d/cka"
    run mpirun_t 120 2 "$SAN/solutions/04_tensor_parallel/train_tp" "${SHORT[@]}" --tp 2 --batch 6 \
        --resume "$d/ck/step-000002" --out "$d/t"
    no_reports
    run t 120 "$SAN/solutions/09_checkpoint/check_ckpt"
    no_reports
    for cmd in "inspect $d/ck" "verify $d/ck" "convert $d/ck $d/conv.bin"; do
        # shellcheck disable=SC2086  # cmd is a list
        run t 60 "$SAN/bin/ckpt" $cmd
        no_reports
    done
}

@test "sanitize: tensor parallelism tp 2 x dp 2 with a padded vocabulary, and tp 4 with the fused cross-entropy" {
    require_solution 04
    for flags in "--tp 2 --vocab 257" "--tp 4 --fused-ce"; do
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 4 "$SAN/solutions/04_tensor_parallel/train_tp" "${SHORT[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
}

@test "sanitize: lab 05, sequence parallelism with full and selective recomputation (tp 2 x dp 2), ZeRO-3 with full" {
    require_solution 05
    for flags in "--tp 2 --sp --recompute full" "--tp 2 --sp --recompute selective --grad-accum 2"; do
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 4 "$SAN/solutions/05_activation_memory/train_tp" "${SHORT[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
    run mpirun_t 120 2 "$SAN/solutions/05_activation_memory/train_zero" "${SHORT[@]}" --zero 3 \
        --recompute full --out "$BATS_TEST_TMPDIR/z3"
    no_reports
}

@test "sanitize: lab 06, train_pp with 1F1B and ZB-H1 at pp 2, interleaved at tp 2 x pp 2" {
    require_solution 06
    for case in "2 --pp 2 --schedule 1f1b --micro-batches 4" \
        "2 --pp 2 --schedule zb-h1 --micro-batches 4" \
        "4 --pp 2 --tp 2 --schedule interleaved --chunks 2 --micro-batches 2"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 "$np" "$SAN/solutions/06_pipeline/train_pp" "${SHORT[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
}

@test "sanitize: lab 07, train_cp with the ring, zigzag and Ulysses, zigzag at tp 2 x cp 2" {
    require_solution 07
    for case in "2 --cp 2 --cp-algo ring" "2 --cp 2 --cp-algo ulysses" \
        "4 --cp 2 --tp 2 --cp-algo zigzag"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 "$np" "$SAN/solutions/07_context_parallel/train_cp" "${SHORT[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
}

@test "sanitize: lab 08, train_moe at ep 2, tp 2 x ep 2 dropless, and the overlapped exchange at ep 4" {
    require_solution 08
    for case in "2 --ep 2" "4 --ep 2 --tp 2 --capacity-factor 0" "4 --ep 4 --ep-overlap"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 120 "$np" "$SAN/solutions/08_moe/train_moe" "${SHORT[@]}" --config tiny-moe \
            $flags --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
}

@test "sanitize: lab 10, train_4d with ZeRO-1 over dp x cp (tp 2 x cp 2 x pp 2, zigzag), interleaved dp 2 x tp 2 x pp 2 with SP and hybrid ZeRO-1, simulated nodes; the order search" {
    require_solution 10
    for case in "8 --tp 2 --cp 2 --pp 2 --cp-algo zigzag --zero 1 --micro-batches 2" \
        "8 --dp 2 --tp 2 --pp 2 --sp --schedule interleaved --chunks 2 --micro-batches 2 --ranks-per-node 4 --zero 1 --dp-shard 1"; do
        read -r np flags <<<"$case"
        # shellcheck disable=SC2086  # flags is a list
        run mpirun_t 300 "$np" "$SAN/solutions/10_composed/train_4d" "${SHORT[@]}" $flags \
            --out "$BATS_TEST_TMPDIR/${flags// /}" --dump-params "$BATS_TEST_TMPDIR/p.bin"
        no_reports
    done
    run t 60 "$SAN/solutions/10_composed/check_mesh_order"
    no_reports
}

@test "sanitize: token-file tools, memory planner, C unit tests" {
    local d=$BATS_TEST_TMPDIR
    run t 60 "$SAN/bin/gen_synthetic" --out "$d/s.tok" --tokens 20000
    no_reports
    run t 60 "$SAN/bin/tokens_info" --head 20 "$d/s.tok"
    no_reports
    printf 'h\303\251llo\n' > "$d/a.txt"
    run t 60 "$SAN/bin/text_to_tokens" "$d/a.txt" "$d/a.tok"
    no_reports
    run t 60 "$SAN/bin/memplan" --config small --ranks 4
    no_reports
    for test in test_alloc test_kernels test_rng test_mesh test_layout; do
        run t 60 "$SAN/tests/$test"
        no_reports
    done
    run mpirun_t 60 3 "$SAN/tests/test_comm" "$BATS_TEST_TMPDIR"
    no_reports
}

@test "sanitize: the model's unit tests (lab 00's backward passes; hooks, recomputation, the ring's blocks, the MoE layer)" {
    require_solution 00
    for test in test_model test_recompute test_pipe_exec test_cp_kernels test_moe; do
        run t 60 "$SAN/tests/$test"
        no_reports
    done
}

@test "sanitize: lab 06, every pipeline schedule generated, validated, simulated and drawn; the schedule library's and lab 06's unit tests" {
    require_solution 06
    for args in "gpipe -p 3 -m 6" "1f1b -p 3 -m 6" "interleaved -v 2 -p 3 -m 6" "zb-h1 -p 3 -m 6" \
        "dualpipe -p 4 -m 8"; do
        # shellcheck disable=SC2086  # args is a list
        run t 60 "$SAN/solutions/06_pipeline/pipeline_schedule" --schedule $args --comm \
            --send 0.25 --out "$BATS_TEST_TMPDIR/${args%% *}"
        no_reports
    done
    for test in tests/test_schedule solutions/06_pipeline/check_schedules; do
        run t 120 "$SAN/$test"
        no_reports
    done
}

# Planted bugs: the sanitizers must report them and fail the run.
# planted LAB FILE SED_EXPR PROG: $BATS_TEST_TMPDIR/mutant/PROG, built with the
# sanitizers from solutions/LAB/FILE edited by SED_EXPR (into $BATS_TEST_TMPDIR/FILE)
planted() {
    local lab=$1 file=$2 expr=$3 prog=$4 src="$BATS_TEST_TMPDIR/$2"
    sed "$expr" "$ROOT/solutions/$lab/$file" > "$src"
    run cmp -s "$src" "$ROOT/solutions/$lab/$file"
    [ "$status" -eq 1 ]  # the edit applied
    VARIANT_BUILD=$SAN VARIANT_FLAGS=$(san_flags) build_variant "$src" "$lab" \
        "$BATS_TEST_TMPDIR/mutant" "$prog"
}

@test "sanitize catches a heap overflow planted in lab 00's layernorm backward" {
    require_solution 00
    planted 00_single_device backprop.c 's/for (int i = 0; i < C; i++)/for (int i = 0; i <= C; i++)/' \
        gradcheck
    run t 60 "$BATS_TEST_TMPDIR/mutant/gradcheck" --layer layernorm
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"ERROR: AddressSanitizer: heap-buffer-overflow"* ]]
    [[ "$output" == *"in layernorm_backward_cpu $BATS_TEST_TMPDIR/backprop.c:"* ]]
}

@test "sanitize catches a leak planted in lab 01 on 3 ranks (lsan.supp hides only Open MPI's)" {
    require_solution 01
    # the scratch buffer grows without freeing the old one: silent without LeakSanitizer
    planted 01_collectives collectives.c 's/^        mem_free(buf);$//' check_collectives
    run mpirun_t 60 3 "$BATS_TEST_TMPDIR/mutant/check_collectives" --op reduce_scatter
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"ERROR: LeakSanitizer: detected memory leaks"* ]]
    [[ "$output" == *"in scratch_floats $BATS_TEST_TMPDIR/collectives.c:"* ]]
}

@test "sanitize: undefined behaviour is fatal (a signed overflow)" {
    local src="$BATS_TEST_TMPDIR/overflow.c"
    cat > "$src" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    printf("%d\n", 2 * n);  /* overflows for n > INT_MAX / 2 */
    return 0;
}
EOF
    # shellcheck disable=SC2046  # the flags are a list
    gcc $(san_flags) "$src" -o "$BATS_TEST_TMPDIR/overflow"
    run t 10 "$BATS_TEST_TMPDIR/overflow" 5
    no_reports
    run t 10 "$BATS_TEST_TMPDIR/overflow" 2000000000
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"runtime error: signed integer overflow"* ]]
    [[ "$output" != *"-294967296"* ]]  # stopped before printing the wrapped value
}
