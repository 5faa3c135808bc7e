#!/usr/bin/env bats
# Finite-difference gradient checks of every layer and of the whole model
# (apps/gradcheck.c states the step and the tolerance, and why), and proof
# that the checker catches wrong backward passes.
load helpers

# every test here runs lab 00's solution
setup() {
    require_solution 00
}

@test "gradcheck: every layer and the whole model match finite differences" {
    run t 120 "$SOL00/gradcheck"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"all gradients match"* ]]
    for layer in encoder matmul gelu residual crossentropy layernorm attention; do
        [[ "$output" == *"$layer "* ]]
    done
    # the model check covers every parameter tensor of a 2-layer model: 2 + 12*2 + 2
    [ "$(printf '%s\n' "$output" | grep -c '^model .* ok$')" -eq 28 ]
    # and of the same model with a mixture of experts in its second block
    # (lab 08): the router and the stacked experts, 2 + 12*2 + 1 + 2
    [ "$(printf '%s\n' "$output" | grep -c '^moe .* ok$')" -eq 29 ]
    printf '%s\n' "$output" | grep -q '^moe  *blocks.1.routerw .* ok$'
    # attention reports q, k and v apart, at T = 5 and at T = 67
    for part in dq dk dv "dq (T=67)" "dk (T=67)" "dv (T=67)"; do
        printf '%s\n' "$output" | grep -q "^attention  *$part  *rel err .* += err .* ok$"
    done
    # fused attention (lab 05's extension): q, k, v at T = 5 and 300 (two key
    # tiles), and the model with it, 28
    for part in dq dk dv "dq (T=300)" "dk (T=300)" "dv (T=300)"; do
        printf '%s\n' "$output" | grep -q "^fused attention  *$part  *rel err .* += err .* ok$"
    done
    [ "$(printf '%s\n' "$output" | grep -c '^model, fused attention .* ok$')" -eq 28 ]
    # every gradient but crossentropy's (in place) is checked for accumulation
    [ "$(printf '%s\n' "$output" | grep -c ' += err ')" -eq 108 ]  # 45 + fused 34 + MoE 29
    [ "$(printf '%s\n' "$output" | grep -c ' += n/a (in place)')" -eq 1 ]
}

@test "gradcheck: --layer runs one layer, an unknown layer is a user error" {
    run t 60 "$SOL00/gradcheck" --layer attention
    [ "$status" -eq 0 ]
    [[ "$output" == *"attention"* ]]
    [[ "$output" != *"layernorm"* ]]
    run t 60 "$SOL00/gradcheck" --layer softmaxx
    assert_user_error
}

# Planted bugs: each mutant of the solution must fail the check of its layer.
mutant_fails() {
    local layer=$1 expr=$2 dir="$BATS_TEST_TMPDIR/mutant"
    sed "$expr" "$ROOT/solutions/00_single_device/backprop.c" > "$BATS_TEST_TMPDIR/backprop.c"
    ! cmp -s "$BATS_TEST_TMPDIR/backprop.c" "$ROOT/solutions/00_single_device/backprop.c" || return 1
    build_variant "$BATS_TEST_TMPDIR/backprop.c" 00_single_device "$dir" gradcheck
    run t 60 "$dir/gradcheck" --layer "$layer"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"FAIL"* ]]
}

# not_accumulated LAYER TENSOR: after mutant_fails, TENSOR's line (and only
# its, at every shape checked) says it was not accumulated, while it matches
# finite differences: the gradient is right, the buffer's previous contents
# are lost
not_accumulated() {
    local line
    line=$(printf '%s\n' "$output" | grep "^$1  *$2  *rel err")
    [[ "$line" == *"FAIL: not accumulated"* ]]
    [[ "$line" != *"does not match finite differences"* ]]
    ! printf '%s\n' "$output" | grep 'FAIL:' | grep -Ev "^$1 +$2( \(T=[0-9]+\))? +rel err" || return 1
}

# Writing = where the contract says += passes any check that zeroes the
# buffers first (every caller in the kit does). Pre-filled buffers catch it.
@test "gradcheck catches layernorm's dx written with = instead of +=" {
    mutant_fails layernorm 's/dx\[i\] += s \* (/dx[i] = s * (/'
    not_accumulated layernorm dinp
}

# dw and db sum over the rows: a literal = in the solution's row loop loses
# rows (finite differences catch that); a backward that sums per channel and
# then writes with = drops only what the buffer held before, as these do
@test "gradcheck catches layernorm's dw overwritten (= instead of +=)" {
    mutant_fails layernorm 's/dw\[i\] += dy\[i\] \* xhat;/dw[i] = (n ? dw[i] : 0.0f) + dy[i] * xhat;/'
    not_accumulated layernorm dw
}

@test "gradcheck catches layernorm's db overwritten (= instead of +=)" {
    mutant_fails layernorm 's/db\[i\] += dy\[i\];/db[i] = (n ? db[i] : 0.0f) + dy[i];/'
    not_accumulated layernorm db
}

@test "gradcheck catches a literal = in layernorm's row loop for db too (finite differences)" {
    mutant_fails layernorm 's/db\[i\] += dy\[i\];/db[i] = dy[i];/'
    printf '%s\n' "$output" | grep -q '^layernorm  *db  *rel err .*does not match finite differences'
}

@test "gradcheck catches attention's dq written with = (beta 0) instead of +=" {
    # each row block of the solution owns its rows of dq: beta 0 is exactly =
    mutant_fails attention 's/dpI, T, k, 3 \* C, 1.0f, dq/dpI, T, k, 3 * C, 0.0f, dq/'
    not_accumulated attention dq
}

@test "gradcheck catches an attention backward that counts on datt arriving zeroed" {
    # dP added into datt instead of written: right only if datt held zeros
    mutant_fails attention 's/dyI, C, v, 3 \* C, 0.0f, dpI, T)/dyI, C, v, 3 * C, 1.0f, dpI, T)/'
    printf '%s\n' "$output" | grep -q '^attention  *dq  *rel err .*does not match finite differences'
    printf '%s\n' "$output" | grep -q '^attention  *dv  *rel err .* ok$'
}

@test "gradcheck's longer attention shape catches a bug past the first 32 rows" {
    mutant_fails attention 's/for (int j = 0; j <= i; j++) dot +=/for (int j = 0; j <= i \&\& j < 32; j++) dot +=/'
    printf '%s\n' "$output" | grep -q '^attention  *dq  *rel err .* ok$'
    printf '%s\n' "$output" | grep -q '^attention  *dq (T=67)  *rel err .*does not match finite differences'
}

@test "gradcheck --time attention times the forward, 4 full GEMMs and the backward" {
    # one thread unless OMP_NUM_THREADS says otherwise (helpers.bash sets it)
    run t 60 env -u OMP_NUM_THREADS "$SOL00/gradcheck" --time attention --shape 2,40,16,2 --reps 3
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"attention B=2 T=40 C=16 NH=2, 1 thread, median of 3 calls"* ]]
    printf '%s\n' "$output" | grep -Eq '^  backward / 4 full GEMMs [0-9]+\.[0-9]{2}$'
    # the student's skeleton stops at its TODO
    run t 60 "$LAB00/gradcheck" --time attention --shape 2,40,16,2 --reps 3
    [ "$status" -eq 3 ]
    [[ "$output" == *"not implemented: attention_backward"* ]]
}

@test "gradcheck --require-skip counts the backward's GEMM multiply-adds against the full four" {
    # the solution's 32-row blocks at T = 512: (nb + 1) / (2 nb) = 17/32 = 0.531
    run t 60 "$SOL00/gradcheck" --time attention --shape 2,512,32,2 --reps 1 --require-skip
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"= 0.531 of the 4 full GEMMs'"* ]]
    [[ "$output" == *"gradcheck: the backward skips the masked half"* ]]
    # a blocked backward that still multiplies every key does them all
    sed 's/: ATT_BLOCK, n = i0 + m;/: ATT_BLOCK, n = T;/' \
        "$ROOT/solutions/00_single_device/backprop.c" > "$BATS_TEST_TMPDIR/backprop.c"
    ! cmp -s "$BATS_TEST_TMPDIR/backprop.c" "$ROOT/solutions/00_single_device/backprop.c" || return 1
    build_variant "$BATS_TEST_TMPDIR/backprop.c" 00_single_device \
        "$BATS_TEST_TMPDIR/full" gradcheck
    run t 60 "$BATS_TEST_TMPDIR/full/gradcheck" --time attention --shape 2,512,32,2 --reps 1 --require-skip
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"= 1.000 of the 4 full GEMMs'"* ]]
    [[ "$output" == *"FAILED: "*"the masked half is not skipped"* ]]
    run t 60 "$SOL00/gradcheck" --layer attention --require-skip
    assert_user_error
}

@test "gradcheck --time: an unknown layer or a bad shape is a user error" {
    run t 60 "$SOL00/gradcheck" --time layernorm
    assert_user_error
    run t 60 "$SOL00/gradcheck" --time attention --shape 2,40,15,2
    assert_user_error
    run t 60 "$SOL00/gradcheck" --time attention --shape 2,40
    assert_user_error
}

@test "gradcheck fails a backward pass that returns NaN (a NaN never compares as small)" {
    mutant_fails layernorm 's/db\[i\] += dy\[i\];/db[i] += dy[i] * NAN;/'
    printf '%s\n' "$output" | grep -q '^layernorm  *db  *rel err inf'
}

@test "gradcheck catches a layernorm backward without the mean term" {
    mutant_fails layernorm 's/dy\[i\] \* w\[i\] - mean_g - xhat/dy[i] * w[i] - xhat/'
}

@test "gradcheck catches a layernorm backward that forgets rstd" {
    mutant_fails layernorm 's/dx\[i\] += s \* (/dx[i] += (/'
}

@test "gradcheck catches attention backward with an off-by-one causal mask" {
    mutant_fails attention 's/for (int j = 0; j <= i; j++) dot +=/for (int j = 0; j < i; j++) dot +=/'
}

@test "gradcheck catches attention backward without the 1/sqrt(hs) scale on dk" {
    mutant_fails attention 's/sgemm_rowmajor_cpu(1, 0, n, hs, m, scale, dpI/sgemm_rowmajor_cpu(1, 0, n, hs, m, 1.0f, dpI/'
}

@test "gradcheck's model check catches a wrong attention backward too" {
    mutant_fails model 's/sgemm_rowmajor_cpu(1, 0, n, hs, m, 1.0f, pI/sgemm_rowmajor_cpu(1, 0, n, hs, m, 2.0f, pI/'
}

# The library links without any lab (common/kernels.h): a program that hands
# the kernels no CPU backward passes stops at the first with one line.
@test "gradcheck: a program that hands the kernels no CPU backward passes stops with one line naming what to link" {
    local d="$BATS_TEST_TMPDIR" flags cc
    flags=$(make -s --no-print-directory -C "$ROOT" print-flags)
    cc=$(sed -n 's/^CC=//p' <<< "$flags")
    # in apps/backward_kernels.c's place, a program without the lab's object
    printf '#include "kernels.h"\nconst CpuBackwardKernels *program_backward_kernels(void) { return 0; }\n' \
        > "$d/no_backward_kernels.c"
    (cd "$ROOT" && $cc $(sed -n 's/^CPPFLAGS=//p' <<< "$flags") -c "$d/no_backward_kernels.c" \
        -o "$d/no_backward_kernels.o" &&
        $cc $(sed -n 's/^CPPFLAGS=//p' <<< "$flags") -c apps/no_fused_attention.c \
            -o "$d/no_fused_attention.o" &&
        $cc "$BUILD/apps/gradcheck.o" "$d/no_backward_kernels.o" "$d/no_fused_attention.o" \
            "$BUILD/libcommon.a" \
            $(sed -n 's/^LDLIBS=//p' <<< "$flags") -o "$d/gradcheck")
    for layer in layernorm attention; do
        run t 60 "$d/gradcheck" --layer "$layer"
        echo "$output"
        [ "$status" -eq 1 ]
        [ "$(grep -c 'kernels_set_cpu_backward' <<< "$output")" -eq 1 ]
        [[ "$output" == *"the CPU backward passes were not handed to the kernels (kernels_set_cpu_backward): link the program with its lab's backward kernels"* ]]
    done
}
