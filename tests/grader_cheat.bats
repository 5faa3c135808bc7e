#!/usr/bin/env bats
# The autograder against cheats (grader/, hidden mode): a lab's solution
# whose collectives do nothing and that copies another run's files (the
# solution's, any other in reach, or the committed references) scores zero
# on every hidden case, and without --hidden on every case of labs 02 and
# 03; isolation says what it does and undoes what it changed. Apart from tests/grader.bats so that the two run
# in two lanes of tests/run.sh (the sandbox claims its uids: graders may run
# at once).
load helpers

# make_cheat DIR [PREAMBLE]: DIR/02_ddp, DIR/03_zero, DIR/04_tensor_parallel,
# DIR/05_activation_memory, DIR/06_pipeline, DIR/07_context_parallel and
# DIR/08_moe, copies of the solutions
# whose lab file does no communication and, at exit, copies a run's
# metrics.csv, memory.csv and comm.csv over its own (tests/grader_cheat.h):
# the solution's run wherever it can find one, and the committed references.
# Lab 05's recomputations call no collective without --sp, so its copy also
# rebuilds nothing (full) and zeros the probabilities (selective). Lab 06's
# messages are the executor's (common/), so its file's one collective, the
# tied embedding's sum, is what its copy leaves out; lab 07's ring passes
# K and V with sends the cheat leaves alone, so its copy leaves out the loss
# mean's all-reduce (ring_attention.c, used by every algorithm); lab 08's
# all-to-alls move tokens to their experts and stay, its copy leaves out the
# gradients' averaging (ep_sync_grads' all-reduces). PREAMBLE (e.g.
# "#define CHEAT_REFERENCES_ONLY") goes first.
make_cheat() {
    local dir=$1 pre=${2:-} lab file more
    for lab in 02_ddp:ddp.c 03_zero:zero.c 04_tensor_parallel:tensor_parallel.c \
               05_activation_memory:activation_memory.c 06_pipeline:pipeline.c \
               07_context_parallel:ring_attention.c 08_moe:expert_parallel.c; do
        file=${lab#*:}
        lab=${lab%%:*}
        more=
        [ "$lab" = 05_activation_memory ] && more='#include "model.h"
#include "kernels.h"
#define block_forward(...) ((void)0)
#define attention_probs_forward(att, qkv, B, T, C, NH) set_zero(att, (size_t)(B) * (NH) * (T) * (T))'
        mkdir -p "$dir"
        cp -r "$ROOT/solutions/$lab" "$dir/"
        sed "s|@ROOT@|$ROOT|" "$ROOT/tests/grader_cheat.h" > "$dir/$lab/grader_cheat.h"
        { printf '%s\n#include "grader_cheat.h"\n%s\n' "$pre" "$more"; cat "$ROOT/solutions/$lab/$file"; } \
            > "$dir/$lab/$file"
    done
}

# every case line of report $1 scores 0
all_zero() {
    local cases
    cases=$(case_rows "$1" | grep -cE '^0[2-8]_')
    [ "$cases" -gt 0 ] &&
        [ "$(case_rows "$1" | grep -cE '^0[2-8]_[a-z_]+ .* 0/[0-9]+ ')" -eq "$cases" ] &&
        [ "$(total_of "$1" | cut -d/ -f1)" = 0 ]
}

# grade_cheats LAB: lab LAB's core graded in hidden mode from the cheat (and,
# for lab 03, from its references-only variant too: the references are
# hidden the same way from every lab's cases, so one lab shows it), then
# without --hidden: every case scores zero (prints the grader's output;
# fails naming what scored). The extensions' cases are hidden from a cheat
# the same way as the core's: --core leaves them out here.
grade_cheats() {
    local lab=$1 variant out variants=src rc
    [ "$lab" != 03 ] || variants="src src-ref"
    for variant in $variants; do
        out="$BATS_TEST_TMPDIR/h-$lab-$variant"
        rc=0
        t 600 $GRADE --lab "$lab" --core --hidden --hidden-seed 11 --src "$BATS_TEST_TMPDIR/$variant" \
            --out "$out" || rc=$?
        lost_points "$rc" || { echo "lab $lab, $variant"; return 1; }
        all_zero "$out/report.txt" || { echo "lab $lab, $variant: a hidden case scored"; return 1; }
    done
    # without --hidden there is no solution's run to copy: the isolation
    # that hides them is the same for every lab, so two labs show it (one
    # replicated, one sharded) and the others' time goes to their hidden cases
    [ "$lab" = 02 ] || [ "$lab" = 03 ] || return 0
    rc=0
    t 600 $GRADE --lab "$lab" --core --src "$BATS_TEST_TMPDIR/src" --out "$BATS_TEST_TMPDIR/n-$lab" || rc=$?
    lost_points "$rc" || { echo "lab $lab"; return 1; }
    all_zero "$BATS_TEST_TMPDIR/n-$lab/report.txt" || { echo "lab $lab: a case scored"; return 1; }
}

# Graded here: labs 02 (replicated), 03 (sharded), 04 (TP) and 07 (CP); the
# cheats of 05, 06 and 08 are built (make_cheat) the same way, and what
# hides the runs from them (the hidden draws, the isolation) is the same
# for every lab, so their grading would repeat the same proof.
@test "grader: a cheat copying the solution's run or the references scores zero on every hidden case" {
    require_solution 02 03 04 05 06 07 08
    make_cheat "$BATS_TEST_TMPDIR/src"
    make_cheat "$BATS_TEST_TMPDIR/src-ref" "#define CHEAT_REFERENCES_ONLY"
    in_pairs "$BATS_TEST_TMPDIR/cheats" grade_cheats 02 03 04 07
    output=$(cat "$BATS_TEST_TMPDIR"/cheats/*.txt)
    # as root the student's code is isolated; in a mount namespace the cheat
    # found nothing at all to copy
    if [ "$(id -u)" -eq 0 ]; then
        [[ "$output" == *"grade: isolation on:"* || "$output" == *"grade: isolation partial:"* ]]
    fi
    if [[ "$output" == *"grade: isolation on:"* ]]; then
        ! grep -h "cheat: copied" "$BATS_TEST_TMPDIR"/h-*/*/*/log.txt "$BATS_TEST_TMPDIR"/n-*/*/*/log.txt || return 1
        grep -q "cheat: found no run to copy" "$BATS_TEST_TMPDIR/h-03-src-ref/03_zero/ZeRO-1__2_ranks/log.txt"
    fi
}

@test "grader: isolation says what it does, and the partial level gives back the modes it took" {
    require_solution 02
    [ "$(id -u)" -eq 0 ] || skip "isolation needs root"
    make_cheat "$BATS_TEST_TMPDIR/src"
    mode_before=$(stat -c %a "$ROOT" "$ROOT/solutions")
    run t 300 $GRADE --lab 02 --case "naive" --hidden --hidden-seed 3 --isolation permissions \
        --src "$BATS_TEST_TMPDIR/src" --out "$BATS_TEST_TMPDIR/p"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"grade: isolation partial: "* ]]
    [ "$(stat -c %a "$ROOT" "$ROOT/solutions")" = "$mode_before" ]
    all_zero "$BATS_TEST_TMPDIR/p/report.txt"
    run t 120 $GRADE --lab 00 --case "gradcheck layernorm" --isolation off --src "$ROOT/solutions" \
        --out "$BATS_TEST_TMPDIR/o"
    [ "$status" -eq 0 ]
    [ "$(printf '%s\n' "$output" | grep -c '^grade: isolation off: --isolation off$')" -eq 1 ]
    # a daemon a student's program leaves behind (out of its process group)
    # does not outlive the case: every process of the case's uid is killed
    local src="$BATS_TEST_TMPDIR/daemon" secs
    for level in permissions auto; do
        secs="600.$RANDOM$RANDOM"
        rm -rf "$src" && mkdir -p "$src" && cp -r "$ROOT/solutions/00_single_device" "$src/"
        cat >> "$src/00_single_device/backprop.c" <<EOF
#include <unistd.h>
__attribute__((constructor)) static void leave_a_daemon(void) {
    if (fork() == 0) {
        setsid();
        if (fork() == 0) execl("/bin/sleep", "sleep", "$secs", (char *)0);
        _exit(0);
    }
}
EOF
        run t 300 $GRADE --lab 00 --case "gradcheck layernorm" --isolation $level --src "$src" \
            --out "$BATS_TEST_TMPDIR/d"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"gradcheck layernorm"*" 3/3 "* ]]
        ! pgrep -f "sleep $secs" || return 1
    done
}


# A lab communicates only through comm.h's counted calls: an object that
# calls MPI or NCCL itself, the kit's uncounted calls, or an OS channel
# between processes is refused (scripts/lab_symbols.sh), by the Makefile's
# rule for lab objects and by the grader's builds (the planted cheats
# 04-cheat-row-parallel-gathered-untraced and 07-cheat-ulysses-whole-
# sequence-through-mpi show the grader's); every solution's object passes.
@test "grader: lab objects that communicate past the counted API are refused, naming the call; the solutions' pass" {
    local d="$BATS_TEST_TMPDIR" call
    for call in 'MPI_Allgather(0, 0, MPI_FLOAT, 0, 0, MPI_FLOAT, c->mpi)' \
                'comm_allgather_untraced(c, 0, 0, 0, COMM_FLOAT)' 'comm_set_untraced(c)' \
                'comm_reset_stats(c)' 'socket(0, 0, 0)'; do
        printf '#include <sys/socket.h>\n#include "comm.h"\nvoid f(Comm *c) { (void)c; %s; }\n' "$call" > "$d/lab.c"
        mpicc -I"$ROOT/common" -c "$d/lab.c" -o "$d/lab.o"
        run bash "$ROOT/scripts/lab_symbols.sh" "$d/lab.o"
        echo "$output"
        [ "$status" -eq 1 ]
        [[ "$output" == "$d/lab.o calls ${call%%(*}: a lab communicates only through comm.h's counted calls"* ]]
    done
    run bash "$ROOT/scripts/lab_symbols.sh" "$ROOT"/build/*/[0-9][0-9]_*/*.o
    echo "$output"
    [ "$status" -eq 0 ]
    run bash "$ROOT/scripts/lab_symbols.sh"
    [ "$status" -eq 2 ]
    # the Makefile checks every lab object it compiles
    cd "$ROOT"
    for copy in labs solutions; do
        [ -d "$copy/04_tensor_parallel" ] || continue
        make -n -W "$copy/04_tensor_parallel/tensor_parallel.c" "build/$copy/04_tensor_parallel/tensor_parallel.o" |
            grep -q "scripts/lab_symbols.sh build/$copy/04_tensor_parallel/tensor_parallel.o"
    done
}
