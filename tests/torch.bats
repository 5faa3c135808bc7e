#!/usr/bin/env bats
# shellcheck disable=SC2154  # $status, $output and $lines are set by bats' run
# The C GPT against PyTorch: build/tests/torch_dump writes the C model's
# initial parameters, one batch, its loss, its gradients and 10 AdamW losses;
# tests/torch_check.py rebuilds the model in PyTorch and compares them all.
# Skipped when the system python has no torch (Debian: python3-torch).

bats_require_minimum_version 1.5.0   # run -N
load helpers

setup_file() {
    if /usr/bin/python3 -c "import torch" > /dev/null 2>&1; then
        export HAVE_TORCH=1
    else
        export HAVE_TORCH=0
    fi
}

setup() {
    ROOT="$BATS_TEST_DIRNAME/.."
    DUMP_BIN="$ROOT/build/tests/torch_dump"
    CHECK_PY="$ROOT/tests/torch_check.py"
    T="$BATS_TEST_TMPDIR"
    [ -x "$DUMP_BIN" ] || {
        echo "$DUMP_BIN is missing: run 'make all' first" >&2
        return 1
    }
}

need_torch() {
    [ "$HAVE_TORCH" = 1 ] || skip "PyTorch not installed (apt-get install python3-torch)"
}

# Every tensor of the dump's model (V 256, ctx 16, L 2), in gpt_tensor_table order.
all_tensors() {
    echo wte wpe
    for l in 0 1; do
        for n in ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw fcprojb; do
            echo "blocks.$l.$n"
        done
    done
    echo lnfw lnfb
}

# dump [--bf16] [--fused] FILE (it runs lab 00's backward passes: skips without its solution)
dump() {
    require_solution 00
    timeout 60 "$DUMP_BIN" "$@" > /dev/null
}

# check_passes FILE: torch_check passes FILE, with its 28 gradient rows and
# its 10 AdamW rows ok (run's status and output stay for further checks)
check_passes() {
    run timeout 300 /usr/bin/python3 "$CHECK_PY" "$1"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"gradients: 28 tensors"* ]]
    [ "$(grep -Ec '^ +[0-9] +[0-9.]+ +[0-9.]+ +[0-9.e+-]+  ok$' <<< "$output")" -eq 10 ]
}

# Multiply the largest-magnitude gradient of tensor $2 in dump file $1 by $3.
scale_grad() {
    timeout 60 /usr/bin/python3 -B - "$1" "$2" "$3" "$ROOT/tests" <<'EOF'
import sys
sys.path.insert(0, sys.argv[4])
import numpy as np
from torch_check import read_dump
from torch_gpt_model import tensor_table
path, name, factor = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = read_dump(path)
table = tensor_table(d["vocab_size"], d["ctx_len"], d["n_layer"], d["n_embd"])
[(offset, count)] = [(o, int(np.prod(s))) for n, o, s in table if n == name]
i = offset + int(np.argmax(np.abs(d["grads"][offset:offset + count])))
with open(path, "r+b") as f:
    f.seek(d["grads_offset"] + 4 * i)
    f.write(np.float32(d["grads"][i] * factor).astype("<f4").tobytes())
EOF
}

# Multiply the C loss of AdamW step $2 in dump file $1 by $3.
scale_step_loss() {
    timeout 60 /usr/bin/python3 -B - "$1" "$2" "$3" "$ROOT/tests" <<'EOF'
import sys
sys.path.insert(0, sys.argv[4])
import numpy as np
from torch_check import read_dump
path, step, factor = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
d = read_dump(path)
with open(path, "r+b") as f:
    f.seek(d["losses_offset"] + 4 * step)
    f.write(np.float32(d["losses"][step] * factor).astype("<f4").tobytes())
EOF
}

@test "torch_dump: usage error without an output file" {
    run -2 timeout 60 "$DUMP_BIN"
    [[ "$output" == *"usage:"* ]]
}

@test "torch_dump: two runs write byte-identical files" {
    dump "$T/a.bin"
    dump "$T/b.bin"
    cmp "$T/a.bin" "$T/b.bin"
    # header 68 bytes + params + 2 x 64 tokens + loss + grads + 10 losses
    [ "$(stat -c %s "$T/a.bin")" -eq $((68 + 4 * 34176 * 2 + 4 * 128 + 4 + 40)) ]
}

@test "torch_check: loss, every gradient and 10 AdamW steps match PyTorch" {
    need_torch
    dump "$T/dump.bin"
    check_passes "$T/dump.bin"
    [[ "$output" == *"torch_check: PASS"* ]]
    [[ "$output" == *"loss at step 0: "*" ok"* ]]
    # each of the 28 tensors has its own row in the gradient table, marked ok
    local n=0 name
    for name in $(all_tensors); do
        grep -Eq "^${name//./\\.} +[0-9]+ .* ok\$" <<< "$output" || {
            echo "no 'ok' row for $name" >&2
            return 1
        }
        n=$((n + 1))
    done
    [ "$n" -eq 28 ]
}

@test "torch_check: bf16 over an fp32 master (torch_dump --bf16) matches PyTorch's bf16 training within bf16's unit roundoff" {
    need_torch
    dump --bf16 "$T/bf16.bin"
    check_passes "$T/bf16.bin"
    [[ "$output" == *"bf16 over an fp32 master"* ]]
    # the step tolerance (u/4) separates: the C model's own fp32 losses are
    # further from its bf16 ones
    dump "$T/fp32.bin"
    /usr/bin/python3 -B - "$T/fp32.bin" "$T/bf16.bin" "$ROOT/tests" <<'EOF'
import sys
sys.path.insert(0, sys.argv[3])
from torch_check import read_dump
a, b = read_dump(sys.argv[1]), read_dump(sys.argv[2])
gap = max(abs(x - y) / abs(y) for x, y in zip(a["losses"], b["losses"]))
print(f"fp32 against bf16, C: {gap:.2e} relative")
assert gap > 2.0 ** -8 / 4, gap
EOF
}

@test "torch_check: fused attention (torch_dump --fused, T = 300: several tiles) matches PyTorch's plain attention: loss, every gradient, 10 AdamW steps" {
    need_torch
    require_solution 05
    dump --fused "$T/fused.bin"
    check_passes "$T/fused.bin"
    [[ "$output" == *"torch_check: PASS"* ]]
}

@test "torch_check: a 1% error in one gradient element fails, naming its tensor" {
    need_torch
    dump "$T/dump.bin"
    scale_grad "$T/dump.bin" blocks.1.qkvw 1.01
    run -1 timeout 300 /usr/bin/python3 "$CHECK_PY" "$T/dump.bin"
    echo "$output"
    [[ "$output" == *"MISMATCH: gradient of blocks.1.qkvw"* ]]
    [ "$(grep -c MISMATCH <<< "$output")" -eq 1 ]   # only that tensor
    [[ "$output" == *"torch_check: FAIL"* ]]
}

@test "torch_check: a wrong loss at one AdamW step fails, naming the step" {
    need_torch
    dump "$T/dump.bin"
    scale_step_loss "$T/dump.bin" 4 1.001
    run -1 timeout 300 /usr/bin/python3 "$CHECK_PY" "$T/dump.bin"
    echo "$output"
    [[ "$output" == *"MISMATCH: loss at AdamW step 4"* ]]
    [ "$(grep -c MISMATCH <<< "$output")" -eq 1 ]
}

@test "torch_check: a truncated file is rejected with exit 2" {
    need_torch
    dump "$T/dump.bin"
    head -c 1000 "$T/dump.bin" > "$T/short.bin"
    run -2 timeout 300 /usr/bin/python3 "$CHECK_PY" "$T/short.bin"
    [[ "$output" == *"truncated"* ]]
}

# The mixture-of-experts layer (common/moe.h): build/tests/test_moe --dump
# writes one layer's inputs, output, aux loss, routing and gradients;
# tests/torch_moe.py rebuilds it in PyTorch and compares.
moe_dump() {
    local bin="$ROOT/build/tests/test_moe"
    [ -x "$bin" ] || {
        echo "$bin is missing: run 'make all' first" >&2
        return 1
    }
    timeout 60 "$bin" --dump "$1" "$2" "$3" > /dev/null
}

@test "torch_moe: the MoE layer's routing, output, aux loss and every gradient match PyTorch (k 1 and 2 with drops, k 2 dropless)" {
    need_torch
    local kcf
    for kcf in 1:1.0 2:1.0 2:0; do
        moe_dump "$T/moe.bin" "${kcf%:*}" "${kcf#*:}"
        run timeout 300 /usr/bin/python3 "$ROOT/tests/torch_moe.py" "$T/moe.bin"
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"torch_moe: PASS"* ]]
        [[ "$output" == *"routing: "*" ok"* ]]
        [ "$(grep -Ec '^(x|wr|fcw|fcb|fcprojw|fcprojb) +[0-9]+ .* ok$' <<< "$output")" -eq 6 ]
    done
}

@test "torch_moe: a 1% error in one gradient element of the router fails, naming it" {
    need_torch
    moe_dump "$T/moe.bin" 2 1.0
    timeout 60 /usr/bin/python3 -B - "$T/moe.bin" "$ROOT/tests" <<'PY'
import sys
sys.path.insert(0, sys.argv[2])
import numpy as np
from torch_moe import read_dump
d = read_dump(sys.argv[1])
i = int(np.argmax(np.abs(d["dwr"])))
with open(sys.argv[1], "r+b") as f:
    f.seek(d["dwr_offset"] + 4 * i)
    f.write(np.float32(d["dwr"].flat[i] * 1.01).astype("<f4").tobytes())
PY
    run -1 timeout 300 /usr/bin/python3 "$ROOT/tests/torch_moe.py" "$T/moe.bin"
    echo "$output"
    [[ "$output" == *"MISMATCH: gradient of wr"* ]]
    [ "$(grep -c '^MISMATCH' <<< "$output")" -eq 1 ]
    [[ "$output" == *"torch_moe: FAIL"* ]]
}
