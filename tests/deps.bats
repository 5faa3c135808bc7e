#!/usr/bin/env bats
# A fresh Debian 12 (minbase + build-essential + git) gets everything the
# kit calls from scripts/deps.sh: every command of the shell scripts, Bats
# suites and Makefile recipes (tests/commands_used.py reads them) must come
# from a package deps.sh installs, one those pull in, or the base system
# (Priority: required, build-essential, git). A script that starts to call
# a command of another package fails here, on the machine that has it,
# before a fresh machine finds out. The README lists what deps.sh installs.
load helpers

# a fresh Debian's PATH: a developer's own tools (pyenv, ~/bin) do not count
SYSTEM_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# not Debian's: NVIDIA's toolkit and driver, found where they are installed
NOT_DEBIAN="nvcc nvidia-smi compute-sanitizer"

# package_of PATH: the Debian package that installed the file (usrmerge: it
# may be registered under /bin or /usr/bin), or nothing
package_of() {
    local real p
    real=$(readlink -f "$1")
    for p in "$real" "${real/#\/usr\/bin/\/bin}" "${real/#\/bin/\/usr\/bin}" \
             "${real/#\/usr\/sbin/\/sbin}" "${real/#\/sbin/\/usr\/sbin}"; do
        p=$(dpkg-query -S "$p" 2> /dev/null | head -n 1 | cut -d: -f1)
        [ -z "$p" ] || { echo "$p"; return 0; }
    done
}

@test "deps: every command the scripts, suites and Makefile call comes from deps.sh's packages or the base system" {
    command -v dpkg-query > /dev/null || skip "not a Debian system (no dpkg-query): a command's package cannot be looked up"
    command -v apt-cache > /dev/null || skip "no apt-cache: what the packages pull in cannot be looked up"
    local cmds wanted pulled cmd path pkg bad=() checked=0
    cmds=$(python3 "$ROOT/tests/commands_used.py" "$ROOT")
    [ -n "$cmds" ]
    mapfile -t wanted < <(bash "$ROOT/scripts/deps.sh" --list)
    pulled=" $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
        --no-breaks --no-replaces --no-enhances "${wanted[@]}" git 2> /dev/null |
        grep -v '^ ' | tr '\n' ' ') "
    for cmd in $cmds; do
        path=$(PATH=$SYSTEM_PATH command -v "$cmd") || continue  # a word, or not installed here
        [[ " $NOT_DEBIAN " == *" $cmd "* ]] && continue
        checked=$((checked + 1))
        pkg=$(package_of "$path")
        if [ -z "$pkg" ]; then
            bad+=("$cmd ($path): no Debian package installed it")
        elif [[ "$pulled" != *" $pkg "* ]] &&
             [ "$(dpkg-query -W -f='${Priority}' "$pkg" 2> /dev/null)" != required ]; then
            bad+=("$cmd: from package $pkg, which deps.sh does not install (add it to scripts/deps.sh)")
        fi
    done
    echo "$checked commands checked"
    printf '%s\n' "${bad[@]}"
    [ "$checked" -gt 40 ]
    [ ${#bad[@]} -eq 0 ]
}

@test "deps: the README lists exactly the packages deps.sh installs; bad usage is one clear error" {
    local listed
    listed=$(python3 - "$ROOT/README.md" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
part = text[text.index("packages the kit needs"):text.index("installs the missing ones")]
print(" ".join(w for span in re.findall(r"`([^`]*)`", part) for w in span.split()))
PY
)
    [ "$listed" = "$(bash "$ROOT/scripts/deps.sh" --list | tr '\n' ' ' | sed 's/ $//')" ]
    run bash "$ROOT/scripts/deps.sh" --frobnicate
    [ "$status" -eq 2 ]
    [[ "$output" == "deps: usage: deps.sh [--test | --gpu | --list]" ]]
}

@test "deps: --gpu needs only the build's packages (a subset), and names each missing CUDA piece where it looked" {
    local p all
    all=" $(bash "$ROOT/scripts/deps.sh" --list | tr '\n' ' ') "
    local gpu
    gpu=$(bash -c 'eval "$(sed -n "/^gpu_packages=(/,/)/p" "$1")"; echo "${gpu_packages[@]}"' _ "$ROOT/scripts/deps.sh")
    [ "$(wc -w <<< "$gpu")" -ge 5 ]
    for p in $gpu; do
        [[ "$all" == *" $p "* ]] || { echo "$p is not one of deps.sh's packages" >&2; return 1; }
    done
    run env CUDA_HOME=/nonexistent NCCL_HOME=/nowhere NVCC= bash "$ROOT/scripts/deps.sh" --gpu
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"nvcc not found at /nonexistent/bin/nvcc"* ]]
    [[ "$output" == *"cuBLAS not found (/nonexistent/include/cublas_v2.h)"* ]]
    [[ "$output" == *"nccl.h not found in /nowhere/include nor /usr/include"* ]]
    # where the toolkit is (CI's), nothing is missing
    if [ -x /usr/local/cuda/bin/nvcc ] && [ -e /usr/local/cuda/include/nccl.h ]; then
        run env CUDA_HOME=/usr/local/cuda bash "$ROOT/scripts/deps.sh" --gpu
        [ "$status" -eq 0 ]
        [ -z "$output" ]
    fi
}
