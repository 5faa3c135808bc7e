#!/usr/bin/env bash
# slide_figures.sh OUT_DIR: the charts the decks show, made by the labs'
# own benchmarks and copied to OUT_DIR/fig/NN/ (slides/*.md name them so).
# Nothing is drawn by hand: each figure is the PNG its benchmark writes.
#
#   SLIDES_QUICK=1  short runs (a few steps, small buffers): the same
#                   charts with noisier numbers, for tests
#
# In a handout each benchmark runs the student's programs: a lab not done
# yet gets placeholders for its charts and numbers, saying so (run_part).
#
# Lab 00's two come from train_gpt (a loss curve of tiny; the --profile
# roofline of small), lab 01's from bench/collectives.sh, lab 02's from
# bench/ddp.sh, lab 03's from bench/zero.sh, lab 04's from bench/tp.sh,
# lab 05's from bench/act.sh and bench/attention.sh, lab 06's from pipeline_schedule --out (each
# schedule's simulated Gantt chart, p 4, m 8) and from train_pp (a measured
# timeline of tiny at pp 2 next to its simulation), lab 07's from train_cp
# (a timeline of the contiguous ring and of zigzag, tiny at cp 2, Tg 256).
# Lab 10's from tools/tour.sh (make tour) and from train_4d with and
# without --zero 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: slide_figures.sh OUT_DIR}
BENCH_NAME=slides
source bench/common.sh
quick=${SLIDES_QUICK:-0}
[[ "$quick" =~ ^[01]$ ]] || die "SLIDES_QUICK must be 0 or 1, got '$quick'"
mkdir -p "$out"/fig/{00,01,02,03,04,05,06,07} "$out/runs"

# part WHAT: announce the next part (the one before it ends, with its time):
# a rerun of every benchmark takes minutes, and says where it is
parts=11 part_no=0 part_start=$SECONDS run_start=$SECONDS
part() {
    [ "$part_no" -eq 0 ] || echo "slides: ... $((SECONDS - part_start)) s"
    part_no=$((part_no + 1)) part_start=$SECONDS
    [ -z "${1:-}" ] || echo "slides: [$part_no/$parts] $1"
}
echo "slides: drawing the decks' figures: each lab's benchmark runs once$([ "$quick" = 1 ] && echo " (SLIDES_QUICK: short runs)")"

# value KEY VALUE: a number a deck shows as {{KEY}} (tools/make_slides.sh),
# taken from the run its chart is drawn from
values="$out/fig/values.txt"
: > "$values"
value() { echo "$1=$2" >> "$values"; }

# size_label BYTES: "64 MiB", "512 KiB"
size_label() {
    awk -v b="$1" 'BEGIN { if (b >= 1048576) printf "%g MiB", b / 1048576; else printf "%g KiB", b / 1024 }'
}

# fixed DECIMALS NUMBER: NUMBER rounded for a slide
fixed() { awk -v d="$1" -v x="$2" 'BEGIN { printf "%.*f", d, x }'; }

# busbw_values NP: lab 01's all-reduce sweep on NP ranks as 01.npNP.*: ring's
# and the library's busbw at the largest size and their alpha-beta fits from
# bench/collectives.sh's summary (KEY=VALUE lines ending its log), the memcpy
# ceiling from run.json, and each one's peak and where from busbw.csv
busbw_values() {
    local dir="runs/01_collectives-allreduce-np$1" k=01.np$1 log="$out/runs/bench-collectives.log"
    local impl key from to digits peak at
    value "$k.largest" "$(size_label "$(awk -F, 'NR > 1 && $1 > m { m = $1 } END { print m }' "$dir/busbw.csv")")"
    for impl in student library; do
        for key in busbw_GBps:largest:2 alpha_us:alpha_us:1 inv_beta_GBps:inv_beta:1; do
            IFS=: read -r from to digits <<< "$key"
            value "$k.$impl.$to" "$(fixed "$digits" "$(sed -n "s/^np$1_${impl}_$from=//p" "$log")")"
        done
        read -r peak at < <(awk -F, -v i="$impl" 'NR > 1 && $3 == i && $6 > m { m = $6; s = $1 } END { print m, s }' "$dir/busbw.csv")
        value "$k.$impl.peak" "$(fixed 2 "$peak")"
        value "$k.$impl.peak_at" "$(size_label "$at")"
    done
    value "$k.memcpy" "$(fixed 1 "$(json_number "$dir/run.json" memcpy_GBps)")"
}

# ddp_values: lab 02's bench/ddp.sh (bucket_sweep.csv: mode,bucket_mb,buckets,
# mean_step_ms,median_step_ms,wait_ms,exposed_ms) as 02.*: naive, bucketed
# and overlapped at the compared size (the sweep's 0.25 MB), overlapped at
# the sweep's largest, what the overlap hides, communication's share
ddp_values() {
    local csv=runs/02_ddp-bench/bucket_sweep.csv main=0.25 largest mode
    largest=$(awk -F, '$1 == "overlapped" && $2 + 0 > m + 0 { m = $2 } END { print m }' "$csv")
    value 02.main_mb "$main"
    value 02.largest_mb "$largest"
    for mode in naive:NA bucketed:$main overlapped:$main largest:$largest; do
        awk -F, -v m="${mode%%:*}" -v mb="${mode#*:}" '
            ($1 == m || (m == "largest" && $1 == "overlapped")) && $2 == mb {
                printf "02.%s.buckets=%s\n02.%s.step=%.1f\n02.%s.exposed=%.2f\n", m, $3, m, $5, m, $7 }' \
            "$csv" >> "$values"
    done
    awk -F, -v mb="$main" '$2 == mb && $1 == "bucketed" { b = $7; s = $5 } $2 == mb && $1 == "overlapped" { o = $7 }
        END { printf "02.hidden_pct=%.0f\n02.comm_pct=%.1f\n", 100 * (1 - o / b), 100 * b / s }' "$csv" >> "$values"
}

# run_part NN WHAT FUNCTION: lab NN's charts (FUNCTION), announced as WHAT.
# In a handout a lab not done yet stops its benchmark (not implemented, or a
# later lab's program linking the student's unfinished earlier one): its
# charts and numbers become placeholders saying so (below), and the parts
# of the labs done are drawn. In the instructor's tree a failure stops the
# script.
skipped=()
run_part() {
    part "$2"
    if [ ! -f .handout ]; then "$3"; return; fi
    local rc=0
    set +e
    ( set -e; "$3" ) > "$out/runs/part.log" 2>&1
    rc=$?
    set -e
    [ "$rc" -ne 0 ] || return 0
    skipped+=("$1")
    echo "slides: skipped: lab $1 does not run yet: $(grep -m 1 'not implemented' "$out/runs/part.log" ||
        grep -m 1 'error' "$out/runs/part.log" || tail -n 1 "$out/runs/part.log")"
}

# placeholder PNG TEXT: a chart's stand-in, TEXT in its middle
placeholder() {
    gnuplot -e "set terminal pngcairo size 960,360 font ',14'; set output '$1'; set border 15 lc rgb '#bbbbbb' dt 2; unset tics; unset key; set label 1 \"$2\" at graph 0.5, 0.5 center; plot [0:1][0:1] NaN" 2> /dev/null \
        || die "gnuplot could not draw $1"
}

# placeholders: in a handout, each figure and {{key}} the decks show that
# a skipped lab did not make
placeholders() {
    local deck fig key lab
    for deck in slides/[0-9][0-9]_*.md; do
        while read -r fig; do
            lab=$(cut -d/ -f2 <<< "$fig")
            [ ! -s "$out/$fig" ] || continue
            mkdir -p "$(dirname "$out/$fig")"
            placeholder "$out/$fig" "Drawn by make slides once your lab $lab runs (this chart: $(basename "$fig" .png))"
        done < <(grep -o '](fig/[^)]*\.png)' "$deck" | sed 's/^](//; s/)$//' | sort -u)
        while read -r key; do
            grep -q "^$key=" "$values" || value "$key" "(lab ${key:0:2} not run yet)"
        done < <(grep -o '{{[^}]*}}' "$deck" | tr -d '{}' | sort -u)
    done
}

# copy SRC DST: a benchmark's chart into the decks' figures, or die naming it
copy() {
    [ -s "$1" ] || die "the benchmark wrote no $1"
    cp "$1" "$2"
}

figures_00_loss() {
    train=$(bench_program 00_single_device train_gpt)
    steps=$([ "$quick" = 1 ] && echo 60 || echo 300)
    "$train" --config tiny --steps "$steps" --eval-every 20 --threads 2 --out "$out/runs/00-tiny" > /dev/null
    bash tools/plot_loss.sh "$out/runs/00-tiny" "tiny, $steps steps, 2 threads" > /dev/null
    copy "$out/runs/00-tiny/loss.png" "$out/fig/00/loss-tiny.png"
    "$train" --config small --steps "$([ "$quick" = 1 ] && echo 3 || echo 10)" --eval-every 0 \
        --threads 1 --profile --out "$out/runs/00-small-profile" > /dev/null
    bash tools/plot_roofline.sh "$out/runs/00-small-profile" "small, 1 thread" > /dev/null
    copy "$out/runs/00-small-profile/roofline.png" "$out/fig/00/roofline-small.png"
}

figures_01_busbw() {
    bash bench/collectives.sh > "$out/runs/bench-collectives.log"
    for np in 2 4; do
        copy "runs/01_collectives-allreduce-np$np/busbw.png" "$out/fig/01/busbw-np$np.png"
        busbw_values "$np"
    done
}

figures_02_ddp() {
    bash bench/ddp.sh > "$out/runs/bench-ddp.log"
    for f in bucket_sweep timeline-naive timeline-overlapped; do
        copy "runs/02_ddp-bench/$f.png" "$out/fig/02/$f.png"
    done
    ddp_values
}

figures_03_zero() {
    BENCH_SPEED=0 BENCH_OUT="$out/runs/03_zero-bench" bash bench/zero.sh > "$out/runs/bench-zero.log"
    for f in memory comm hsdp offload; do
        # a handout's lab 03 without its second or third extension draws no
        # hsdp.png or offload.png: placeholders stands in for them
        case $f in memory | comm) ;; *) [ ! -f .handout ] || [ -s "$out/runs/03_zero-bench/$f.png" ] || continue ;; esac
        copy "$out/runs/03_zero-bench/$f.png" "$out/fig/03/$f.png"
    done
}

figures_04_tp() {
    BENCH_OUT="$out/runs/04_tensor_parallel-bench" bash bench/tp.sh > "$out/runs/bench-tp.log"
    for f in memory comm step_time; do
        copy "$out/runs/04_tensor_parallel-bench/$f.png" "$out/fig/04/$f.png"
    done
}

figures_05_act() {
    BENCH_OUT="$out/runs/05_activation_memory-bench" bash bench/act.sh > "$out/runs/bench-act.log"
    for f in memory step_time seq; do
        copy "$out/runs/05_activation_memory-bench/$f.png" "$out/fig/05/$f.png"
    done
}

figures_05_attention() {
    attention=()
    [ "$quick" = 0 ] || attention=(BENCH_SEQS="64 128 256" BENCH_REPS=1 BENCH_TRAIN_SEQS="64 128")
    env "${attention[@]}" BENCH_OUT="$out/runs/attention-bench" bash bench/attention.sh \
        > "$out/runs/bench-attention.log"
    copy "$out/runs/attention-bench/attention.png" "$out/fig/05/attention.png"
}

figures_06_pipeline() {
    # lab 06: the simulator's timelines (no run: they are the same every time)
    sched=$(bench_program 06_pipeline pipeline_schedule)
    for s in gpipe 1f1b "interleaved -v 2 --forward 0.5 --backward 1" zb-h1 dualpipe; do
        name=${s%% *}
        # shellcheck disable=SC2086  # the schedule's own options, split on purpose
        "$sched" --schedule $s -p 4 -m 8 --out "$out/runs/06-$name" > /dev/null
        copy "$out/runs/06-$name/gantt.png" "$out/fig/06/gantt-$name.png"
    done
    # and one measured step against its simulation (2 ranks: the measured
    # bubble means nothing with more ranks than cores). The trainer times its
    # last step; a step during which the machine ran something else is mostly
    # idle bars, so the chart shows the shortest of 3 runs' last steps
    LIMIT=300
    best="" best_span=""
    for run in 1 2 3; do
        dir="$out/runs/06-train-1f1b-$run"
        run_ranks 2 "$dir" "$(bench_program 06_pipeline train_pp)" --pp 2 --schedule 1f1b \
            --micro-batches 4 --config tiny --steps "$([ "$quick" = 1 ] && echo 5 || echo 20)" \
            --eval-every 0 --threads 1
        span=$(awk -F, 'NR > 1 { if (lo == "" || $7 < lo) lo = $7; if ($8 > hi) hi = $8 } END { print hi - lo }' \
            "$dir/pipeline.csv")
        if [ -z "$best" ] || awk -v a="$span" -v b="$best_span" 'BEGIN { exit !(a < b) }'; then
            best=$dir best_span=$span
        fi
    done
    bash tools/plot_pipeline.sh "$best/pipeline.csv" "$out/fig/06/measured-1f1b.png" \
        "tiny, pp 2, 1F1B, m 4: the last step as measured, the shortest of 3 runs (seconds)" > /dev/null
    bash tools/plot_pipeline.sh "$best/pipeline_sim.csv" "$out/fig/06/simulated-1f1b.png" \
        "the same schedule simulated with that run's mean costs" > /dev/null
}

figures_07_cp() {
    LIMIT=300
    # lab 07: the ring's causal imbalance and zigzag's balance, as timed (2
    # ranks, one core each: the waits mean something)
    for a in ring zigzag; do
        run_ranks 2 "$out/runs/07-$a" "$(bench_program 07_context_parallel train_cp)" --cp 2 \
            --cp-algo "$a" --config tiny --ctx 256 --seq 256 --steps "$([ "$quick" = 1 ] && echo 3 || echo 6)" \
            --eval-every 0 --eval-batches 1 --threads 1
        bash tools/plot_cp_timeline.sh "$out/runs/07-$a" "$out/fig/07/timeline-$a.png" \
            "tiny, cp 2, Tg 256, $a: one step" > /dev/null
    done
}

figures_10_tour() {
    # lab 10: the tour (tools/tour.sh: one model in 10 layouts of the composed
    # trainer and on one device: the losses overlaid, the busiest rank's memory,
    # the bytes per group), then ZeRO-1 over dp x cp against replicated states in
    # the tour's three composed layouts (8 ranks, the busiest rank's memory.csv)
    mkdir -p "$out/fig/10"
    TOUR_OUT="$out/runs/10-tour" TOUR_STEPS="$([ "$quick" = 1 ] && echo 20 || echo 100)" \
        bash tools/tour.sh > "$out/runs/10-tour.log"
    for f in losses memory traffic; do
        copy "$out/runs/10-tour/$f.png" "$out/fig/10/tour-$f.png"
    done
}

figures_10_zero1() {
    LIMIT=300
    t4d=$(bench_program 10_composed train_4d)
    z1="$out/runs/10-zero1.dat"
    echo "layout params grads optimizer activations comm workspace" > "$z1"
    for entry in "dp 2 x tp 2 x pp 2|--dp 2 --tp 2 --pp 2" \
        "tp 2 x cp 2 x pp 2|--tp 2 --cp 2 --pp 2 --cp-algo zigzag" \
        "dp 2 x cp 2 x tp 2 + sp|--dp 2 --cp 2 --tp 2 --sp"; do
        name=${entry%%|*}
        for zero in 0 1; do
            dir="$out/runs/10-zero$zero-${name// /}"
            # shellcheck disable=SC2046  # the layout's flags, split on purpose
            run_ranks 8 "$dir" "$t4d" ${entry#*|} $([ "$zero" = 1 ] && echo --zero 1) --config tiny \
                --steps 3 --batch 8 --grad-accum 2 --eval-every 0 --threads 1
            ! grep -q DIFFERENT "$dir.log" || die "$dir: a memory check differs from the planner's"
            bash tools/plot_stacked_bars.sh --memory-row "$name$([ "$zero" = 1 ] && echo ", ZeRO-1")" \
                "$dir/memory.csv" >> "$z1"
        done
    done
    bash tools/plot_stacked_bars.sh "$out/fig/10/zero1.png" "$z1" 7 MB \
        "The busiest rank's peak memory (tiny, 8 ranks): replicated states, then ZeRO-1 over dp x cp"
}

run_part 00 "lab 00: train_gpt's loss curve (tiny) and --profile roofline (small)" figures_00_loss
if [ "$quick" = 1 ]; then
    export BENCH_MAX=1M BENCH_STEPS=6 BENCH_SIZES="0.01 0.25" BENCH_CONFIG=tiny
fi
run_part 01 "lab 01: bench/collectives.sh (all-reduce bus bandwidth, 2 and 4 ranks)" figures_01_busbw
run_part 02 "lab 02: bench/ddp.sh (bucket sizes, naive and overlapped timelines)" figures_02_ddp
run_part 03 "lab 03: bench/zero.sh (memory and traffic per ZeRO stage)" figures_03_zero
run_part 04 "lab 04: bench/tp.sh" figures_04_tp
run_part 05 "lab 05: bench/act.sh (activation memory, recomputation)" figures_05_act
run_part 05 "lab 05: bench/attention.sh (materialized and fused attention)" figures_05_attention
run_part 06 "lab 06: pipeline_schedule's simulated Gantt charts, then a measured 1F1B step" figures_06_pipeline
run_part 07 "lab 07: train_cp's ring and zigzag timelines" figures_07_cp
run_part 10 "lab 10: the tour (make tour: 10 layouts of train_4d)" figures_10_tour
run_part 10 "lab 10: train_4d's memory with and without ZeRO-1 (8 ranks)" figures_10_zero1
part
if [ ${#skipped[@]} -gt 0 ]; then
    placeholders
    echo "slides: placeholders for lab $(printf '%s\n' "${skipped[@]}" | sort -u | paste -sd ' '): drawn once they run"
fi
echo "slides: figures in $out/fig/ after $((SECONDS - run_start)) s (benchmark logs in $out/runs/)"
