#!/usr/bin/env bats
# make check LAB=NN (scripts/check_lab.sh): a lab's own checks, declared
# once in its lab.mk (checks :=), run on the student's copy. The skeletons
# fail them, each naming what is not implemented; the solutions pass them
# (CHECK_COPY=solutions; each lab's suite runs the same programs at more
# sizes). In a handout, every lab whose solution is withheld and which the
# student has started runs its checks here, in `make test`.
load helpers

# lab_checks: "NN_name CHECKS" for every lab that declares checks
lab_checks() { make -s -C "$ROOT" print-checks; }

@test "make check: an untouched skeleton fails each of its lab's checks, naming what is not implemented" {
    local lab checks n=0
    while read -r lab checks; do
        untouched "${lab:0:2}" || continue
        run t 300 make -s -C "$ROOT" check LAB="${lab:0:2}"
        echo "$output"
        [ "$status" -ne 0 ]
        # one FAILED line per declared check, each saying not implemented
        [ "$(grep -c '^check: FAILED .*: not implemented: [a-z_0-9]' <<< "$output")" -eq "$(tr ';' '\n' <<< "$checks" | grep -c .)" ]
        [[ "$output" == *"check: $lab (labs): 0 of "* ]]
        n=$((n + 1))
    done < <(lab_checks)
    [ "$n" -gt 0 ] || skip "no lab with checks is untouched in this tree"
}

@test "make check: the solution passes its lab's checks (labs 06 and 10); a lab without checks, a bad LAB or CHECK_COPY is one error before any work" {
    require_solution 06 10
    local l
    for l in 06 10; do
        run t 300 make -s -C "$ROOT" check LAB=$l CHECK_COPY=solutions
        echo "$output"
        [ "$status" -eq 0 ]
        [[ "$output" == *"check: ok      build/solutions/$(lab_name $l)/"* ]]
        [[ "$output" == *" (solutions): 1 of 1 checks passed" ]]
    done
    run make -s -C "$ROOT" check LAB=02
    assert_user_error
    [[ "$output" == *"lab 02_ddp has no checks of its own: make grade LAB=02"* ]]
    for bad in "LAB=42" "LAB=all" "LAB=06 CHECK_COPY=mine" "LAB=06 CHECK_TIMEOUT=soon"; do
        # shellcheck disable=SC2086  # bad is a list of assignments
        run make -s -C "$ROOT" check $bad
        echo "$bad: $output"
        [ "$status" -eq 2 ]
        [ "$(grep -c 'error:' <<< "$output")" -eq 1 ]
        [[ "$output" != *"check: ok"* && "$output" != *"FAILED"* ]]
    done
}

@test "make test runs the student's own checks of every started lab whose solution is withheld (an untouched one: make check LAB=NN once started)" {
    in_handout || skip "instructors: every solution is here (the tests above and each lab's suite run the checks)"
    local lab checks ran=() untouched_labs=() failed=()
    while read -r lab checks; do
        have_solution "${lab:0:2}" && continue
        if untouched "${lab:0:2}"; then untouched_labs+=("${lab:0:2}"); continue; fi
        run t 900 make -s -C "$ROOT" check LAB="${lab:0:2}"
        echo "$output"
        grep '^check: ' <<< "$output" | sed 's/^/# /' >&3   # in make test's output, passed or not
        ran+=("${lab:0:2}")
        [ "$status" -eq 0 ] || failed+=("${lab:0:2}")
    done < <(lab_checks)
    echo "# checked: ${ran[*]:-none}; untouched: ${untouched_labs[*]:-none}" >&3
    [ ${#failed[@]} -eq 0 ] || { echo "make check failed for lab ${failed[*]}"; return 1; }
    [ ${#ran[@]} -gt 0 ] || skip "no lab with checks started yet (make check LAB=NN runs its checks once you start it: ${untouched_labs[*]})"
}
