#!/usr/bin/env bash
# help: lab 01's ring all-reduce vs the library on 2 and 4 ranks, busbw chart
# bench/collectives.sh: lab 01's ring all-reduce against the library's, on 2
# and 4 ranks, float32 buffers up to 64 MiB. `make bench-collectives` builds,
# then runs this.
#
#   BENCH_RANKS    rank counts to run (default "2 4"; ranks beyond the cores
#                  are oversubscribed)
#   BENCH_MAX      largest buffer (default 64M)
#   BENCH_TIMEOUT  seconds allowed to each run (default 600)
#   BENCH_COPY     labs or solutions: whose bench_collectives (bench/common.sh)
#
# Writes runs/01_collectives-allreduce-npP/{busbw.csv,run.json,busbw.png}
# and ends with a summary block of key=value lines per rank count P:
#   npP_student_busbw_GBps, npP_library_busbw_GBps (at the largest size),
#   npP_ratio (student/library), npP_{student,library}_alpha_us and
#   _inv_beta_GBps (the alpha-beta fit), and memcpy_GBps (the ceiling).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-collectives
source bench/common.sh

RANKS=${BENCH_RANKS:-2 4}
MAX=${BENCH_MAX:-64M}
LIMIT=${BENCH_TIMEOUT:-600}
BENCH=$(bench_program 01_collectives bench_collectives)

[ -x "$BENCH" ] || die "$BENCH is missing: run 'make all' (or 'make bench-collectives')"
for np in $RANKS; do
    [[ "$np" =~ ^[1-9][0-9]?$ ]] && [ "$np" -ge 2 ] || die "BENCH_RANKS must list rank counts from 2 to 99, got '$np'"
done
check_timeout "$LIMIT"

# Open MPI refuses root without these; CI containers run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One thread per rank: the ranks already share the cores.
export OMP_NUM_THREADS=1

# busbw_GBps of implementation $2 at the largest size in CSV $1
busbw_at_largest() {
    awk -F, -v impl="$2" 'NR > 1 && $3 == impl && $1 + 0 >= max { max = $1 + 0; bw = $6 }
        END { if (bw == "") exit 1; printf "%.3f\n", bw }' "$1"
}

summary=()
memcpy=NA
for np in $RANKS; do
    out=runs/01_collectives-allreduce-np$np
    echo "bench-collectives: mpirun -np $np $BENCH --op allreduce --impl both --max-bytes $MAX --out $out"
    timeout --kill-after=10 "$LIMIT" mpirun --oversubscribe -np "$np" "$BENCH" --op allreduce \
        --impl both --max-bytes "$MAX" --out "$out" || die "bench_collectives failed on $np ranks"
    bash tools/plot_busbw.sh "$out" "ring all-reduce vs library, $np ranks (float32): medians of 5 timed blocks, bars from the slowest to the fastest"
    student=$(busbw_at_largest "$out/busbw.csv" student) || die "no student rows in $out/busbw.csv"
    library=$(busbw_at_largest "$out/busbw.csv" library) || die "no library rows in $out/busbw.csv"
    ratio=$(awk -v a="$student" -v b="$library" 'BEGIN { printf "%.2f", a / b }')
    memcpy=$(json_number "$out/run.json" memcpy_GBps)
    echo "bench-collectives: $np ranks, largest buffer: ring $student GB/s, library $library GB/s, ring/library = $ratio (memcpy ceiling $memcpy GB/s)"
    summary+=("np${np}_student_busbw_GBps=$student" "np${np}_library_busbw_GBps=$library" "np${np}_ratio=$ratio")
    for impl in student library; do
        summary+=("np${np}_${impl}_alpha_us=$(json_number "$out/run.json" "${impl}_alpha_us")"
                  "np${np}_${impl}_inv_beta_GBps=$(json_number "$out/run.json" "${impl}_inv_beta_GBps")")
    done
    echo
done

echo "max_bytes=$MAX"
printf '%s\n' "${summary[@]}"
echo "memcpy_GBps=$memcpy"
