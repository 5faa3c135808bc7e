#!/usr/bin/env bats
# The C unit-test programs (tests/c/), one test each.
load helpers

@test "unit: counter-based RNG (known answers, sharding-independent init)" {
    run t 60 "$BUILD/tests/test_rng"
    echo "$output"
    [ "$status" -eq 0 ]
}
@test "unit: fp32 to bf16 and fp16, round to nearest even, on all 2^32 fp32 patterns; widening exact" {
    run t 120 "$BUILD/tests/test_precision"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "test_precision: "*" checks, 0 failed" ]]
}
@test "unit: allocator accounting (current and peak per category)" {
    run t 60 "$BUILD/tests/test_alloc"
    echo "$output"
    [ "$status" -eq 0 ]
}
@test "unit: kernels against plain loops; AdamW, clipping, causality" {
    run t 60 "$BUILD/tests/test_kernels"
    echo "$output"
    [ "$status" -eq 0 ]
}
@test "unit: model hooks: order, gradient ranges once and final, private unit buffers give identical results" {
    require_solution 00  # it runs the backward passes
    run t 60 "$BUILD/tests/test_model"
    echo "$output"
    [ "$status" -eq 0 ]
}
@test "unit: shard map: tensors tile the buffer, pieces cover the model once, every TP and EP degree inits lab 00's weights" {
    run t 60 "$BUILD/tests/test_layout"
    echo "$output"
    [ "$status" -eq 0 ]
}
@test "unit: activation recomputation (selective, full) gives bit for bit the gradients of keeping everything, in the formula's bytes" {
    require_solution 00  # it runs the backward passes
    run t 60 "$BUILD/tests/test_recompute"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "unit: pipeline schedules: the validator accepts GPipe, 1F1B, ZB-H1 and interleaved and rejects each mistake by name; simulated bubbles equal the formulas" {
    run t 60 "$BUILD/tests/test_schedule"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "unit: the executor: the trivial schedule is the plain loop bit for bit, stages and split backwards on one rank give the whole model's gradients bit for bit, memory peaks as predicted" {
    require_solution 00  # it runs the backward passes
    run t 60 "$BUILD/tests/test_pipe_exec"
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "unit: mixture of experts: gradients against finite differences (drops and dropless, k 1 and 2), routing and ties against a reference, expert ranges assembled equal the whole, aux loss, memory counts" {
    run t 60 "$BUILD/tests/test_moe"
    echo "$output"
    [ "$status" -eq 0 ]
}
