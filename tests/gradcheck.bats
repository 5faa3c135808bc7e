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
    ! cmp -s "$BATS_TEST_TMPDIR/backprop.c" "$ROOT/solutions/00_single_device/backprop.c"
    build_variant "$BATS_TEST_TMPDIR/backprop.c" "$ROOT/solutions/00_single_device" "$dir" gradcheck
    run t 60 "$dir/gradcheck" --layer "$layer"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"FAIL"* ]]
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
    mutant_fails attention 's/sgemm_rowmajor_cpu(1, 0, T, hs, T, scale, dp, T, q/sgemm_rowmajor_cpu(1, 0, T, hs, T, 1.0f, dp, T, q/'
}

@test "gradcheck's model check catches a wrong attention backward too" {
    mutant_fails model 's/sgemm_rowmajor_cpu(1, 0, T, hs, T, 1.0f, p, T, dy, C, 1.0f, dv/sgemm_rowmajor_cpu(1, 0, T, hs, T, 2.0f, p, T, dy, C, 1.0f, dv/'
}
