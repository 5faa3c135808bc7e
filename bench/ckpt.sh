#!/usr/bin/env bash
# help: lab 09: checkpoints: bytes per rank (every element once), save and load time vs the disk, Young/Daly's interval
# bench/ckpt.sh (`make bench-ckpt`): lab 09's checkpoints (common/checkpoint.h
# and the lab's checkpoint_shards.c), measured, for config medium (7.3 M
# parameters) on 4 ranks, with lab 09's trainers (the student's copy in a
# handout; DDP's train_ddp links the lab through build/earlier/):
#   1. the bytes each rank writes against the ideal: every parameter and
#      both AdamW moments written exactly once over all ranks, so the data
#      of the rank files add up to 12 Phi bytes (checked), split evenly
#      where the ranks hold copies or shards alike (DDP and ZeRO: 12 Phi / N
#      each), a little over where they do not (TP: the replicated tensors
#      on the first TP rank; PP: the embeddings on the first stage); beside
#      it, the states the busiest rank holds (memory.csv's params and
#      optimizer, which the trainers check against the memory planner);
#   2. the time to save (written, flushed, renamed) and to load (verified,
#      read, resharded), and the bandwidth against this disk's sequential
#      write speed (dd with fdatasync);
#   3. Young/Daly's interval sqrt(2 C M) for the measured save cost C and a
#      few mean times between failures M, with the share of time lost
#      (bench/failures.sh simulates the failures and measures it).
# Timings are printed, not checked (the machine is shared).
# Settings (environment):
#   BENCH_TIMEOUT  seconds allowed to each run (default 300)
#   BENCH_OUT      output directory (default runs/checkpoint-bench)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH_NAME=bench-ckpt
SKIP=0
source bench/common.sh

LIMIT=${BENCH_TIMEOUT:-300}
OUT=${BENCH_OUT:-runs/checkpoint-bench}
CKPT=build/bin/ckpt
[ -x "$CKPT" ] || die "$CKPT not built (make all)"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}

# the disk: 256 MiB written and flushed
dd if=/dev/zero of="$OUT/dd.tmp" bs=1M count=256 conv=fdatasync 2> "$OUT/dd.log" \
    || die "dd could not write $OUT/dd.tmp"
rm -f "$OUT/dd.tmp"
DISK=$(awk '/copied/ { for (i = 1; i <= NF; i++) if ($i == "s,") print 268435456 / $(i - 1) / 1e6 }' "$OUT/dd.log")
[ -n "$DISK" ] || die "could not read dd's speed from $OUT/dd.log"
printf 'disk: %.0f MB/s sequential write with fdatasync (dd, 256 MiB)\n' "$DISK"

ARGS=(--config medium --steps 1 --eval-batches 1 --threads 1)
PHI=$(awk '$1 == "|" && $2 == "medium" { gsub(",", "", $12); print $12 }' docs/TRAINER.md)
[[ "$PHI" =~ ^[0-9]+$ ]] || die "medium's parameter count not found in docs/TRAINER.md"

printf '\n%-14s %5s %12s %12s %12s %12s %9s %9s %8s %8s\n' layout ranks "bytes/rank" "max rank" \
    "12 Phi/N" "held max" "save s" "load s" "save MB/s" "load MB/s"
SAVE_COSTS=()
# layout NAME RANKS PROGRAM ARGS...: save at the end of one step, load it back
layout() {
    local name=$1 np=$2 prog=$3
    shift 3
    [ -x "$prog" ] || die "$prog not built (make all)"
    local d="$OUT/$name"
    rm -rf "$d.ck"
    run_ranks "$np" "$d" "$prog" "${ARGS[@]}" "$@" --save "$d.ck"
    local save load
    save=$(sed -n 's/.*: saved .* in \([0-9.]*\) s$/\1/p' "$d.log")
    run_ranks "$np" "$d-resumed" "$prog" "${ARGS[@]}" "$@" --resume "$d.ck"
    load=$(sed -n 's/.*resumed from .*(loaded in \([0-9.]*\) s)$/\1/p' "$d-resumed.log")
    [ -n "$save" ] && [ -n "$load" ] || die "$name: no save or load time in $d.log"
    # each rank file's data: its bytes less the 32-byte header, 32 bytes a
    # rectangle and the 8-byte checksum
    "$CKPT" inspect "$d.ck" > "$d.inspect" || die "$name: ckpt inspect failed"
    # what a rank holds of the states (memory.csv's params + optimizer, the
    # trainer's figures checked against the memory planner): the most any
    # rank could write if copies were not left to one owner
    local held
    held=$(awk -F, 'NR > 1 && ($2 == "params" || $2 == "optimizer") { h[$1] += $3 }
        END { for (r in h) if (h[r] > m) m = h[r]; print m + 0 }' "$d/memory.csv")
    awk -v name="$name" -v np="$np" -v phi="$PHI" -v save="$save" -v load="$load" -v held="$held" '
        / bytes, checksum / { b = $2; r = $(NF - 1); data = b - 40 - 32 * r; total += data; bytes += b
                              if (data > max) max = data }
        END {
            if (total != 12 * phi) { printf "%s: the rank files hold %d data bytes, not 12 Phi = %d\n", name, total, 12 * phi; exit 1 }
            printf "%-14s %5d %12.0f %12d %12.0f %12d %9.3f %9.3f %8.0f %8.0f\n", name, np, bytes / np, max, 12 * phi / np, held, save, load, bytes / save / 1e6, bytes / load / 1e6
        }' "$d.inspect" || die "$name: the checkpoint does not hold every element once"
    SAVE_COSTS+=("$save")
}

GPT=$(bench_program 09_checkpoint train_gpt)
ZERO=$(bench_program 09_checkpoint train_zero)
TP=$(bench_program 09_checkpoint train_tp)
PP=$(bench_program 09_checkpoint train_pp)
layout one-device 1 "$GPT"
layout ddp-4 4 "$(earlier_program 02_ddp train_ddp)"
layout zero1-4 4 "$ZERO" --zero 1
layout zero3-4 4 "$ZERO" --zero 3
layout tp2xdp2 4 "$TP" --tp 2
layout pp2xdp2 4 "$PP" --pp 2 --grad-accum 2
echo "(every layout's rank files hold 12 Phi = $((12 * PHI)) data bytes: each parameter and moment once;"
echo " held max: the most params + AdamW moments a rank holds, current bytes of memory.csv, which the"
echo " trainer checks against the planner: a rank writes its held states less the copies others write)"

C=$(printf '%s\n' "${SAVE_COSTS[@]}" | middle_value)
echo
echo "Young/Daly: checkpoint every tau = sqrt(2 C M) for save cost C = $C s (median above)"
printf '%-22s %12s %18s\n' "mean time to failure" "tau" "time lost (C/tau + tau/2M)"
for m in 3600 86400 604800; do
    awk -v c="$C" -v m="$m" 'BEGIN { t = sqrt(2 * c * m); printf "%-22s %10.0f s %17.2f%%\n",
        (m == 3600 ? "1 hour" : m == 86400 ? "1 day" : "1 week"), t, 100 * (c / t + t / (2 * m)) }'
done
echo "(simulated with real failures and restarts, against the prediction: make bench-failures)"
