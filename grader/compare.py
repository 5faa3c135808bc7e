"""Compare a run's outputs with a reference run of the same case.

Each check returns None when it passes, or one line saying what differs
first: a grader's reason must point the student at the step, the rank or the
operation to look at.

Loss tolerance, per step: |loss - ref| <= LOSS_ABS + LOSS_REL * |ref|.
Measured spread (tiny, 50 steps): identical across runs and thread counts on
one machine; across OpenBLAS kernels (OPENBLAS_CORETYPE Prescott, Sandybridge,
Haswell vs. the native one, i.e. different instruction sets as on other
machines) at most 9.5e-7 absolute, 2.8e-7 relative. The tolerance is about
40x that, and still tight enough to see a gradient that is off by a factor
(which AdamW mostly hides, but not from 1e-5).

The gradient norm (before clipping) is compared too, because AdamW hides a
gradient that is off by a constant factor from the loss (its update divides
by the gradient's own scale); measured spread across the same kernels is
larger than the loss's, 7.3e-5 relative, so its tolerance is relative
GRAD_NORM_REL = 1e-3 (14x that); a factor of 2 is far outside it.

Memory and communication are logical byte counts (common/alloc.h, comm.h),
the same on every machine, so they must match exactly.

Overlap: trace.csv (common/trace.h) times every collective and every phase
of the backward pass. A gradient collective "starts during the backward
pass" when it starts before the step's last backward phase does; the count
depends only on the order of the program's calls (a bucket's all-reduce is
issued between two phases or after the last), not on speed, so the student's
count per rank must reach the reference's: an overlapped mode that only
starts its buckets when the backward pass is over has the right losses,
memory and bytes, and a count of zero.

Schedule: pipeline.csv lists the schedule a pipeline run executed; every
rank's compute ops (F, B, I, W with their micro-batch and chunk) must come
in the reference's order. Ring overlap: trace.csv's transfers of group cp
and blocks of attention; per rank, as many transfers with a block computed
between their start and completion as the reference's (an order of calls).

A reason of type Zero (another kind of collective or group, another
schedule) scores the whole case zero: such a run does other work than the
layout asks, whatever its losses.

Consistency: params_checksum.csv has, per rank, a checksum of the bits of
that rank's copy of the parameters at the end (common/train.h); ranks that
hold the same model must agree exactly (the same floats, summed in the same
order, give the same bits on every rank of one machine).

A run's files are read through Outputs: from a directory (regular files
only, never through a link, nothing larger than FILE_MAX) or held in memory
(a solution's run in --hidden mode, deleted before the student's runs).
"""
import bisect
import csv
import io
import math
import os
import stat

FILE_MAX = 64 << 20

LOSS_ABS = 1e-5
LOSS_REL = 1e-5
GRAD_NORM_REL = 1e-3


class BadOutput(Exception):
    """A run's file is missing or malformed (the reason says which)."""


def read_regular(path, limit=FILE_MAX):
    """The bytes of path if it is a regular file (not a link, FIFO or
    device) of at most limit bytes; None if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BadOutput(f"{os.path.basename(path)}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadOutput(f"{os.path.basename(path)} is not a regular file")
        if st.st_size > limit:
            raise BadOutput(f"{os.path.basename(path)} is larger than {limit >> 20} MiB")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit)
    finally:
        os.close(fd)


class Outputs:
    """The files of one run, by name: read from a directory when asked, or
    held in memory (Outputs.load)."""

    def __init__(self, directory=None, files=None):
        self.directory = directory
        self.files = files

    def data(self, name):
        """The file's bytes, or None when the run did not write it."""
        if self.files is not None:
            return self.files.get(name)
        return read_regular(os.path.join(self.directory, name))

    @classmethod
    def load(cls, directory, names):
        """The named files of directory, read now and kept in memory."""
        files = {}
        for name in names:
            d = read_regular(os.path.join(directory, name))
            if d is not None:
                files[name] = d
        return cls(files=files)


def as_outputs(x):
    return x if isinstance(x, Outputs) else Outputs(directory=x)


def read_csv(source, required, name=None):
    """Rows of a CSV file with the required columns: read_csv(outputs, cols,
    name) or read_csv(path, cols)."""
    if name is None:
        source, name = Outputs(directory=os.path.dirname(source)), os.path.basename(source)
    data = as_outputs(source).data(name)
    if data is None:
        raise BadOutput(f"missing {name}")
    try:
        rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    except (UnicodeDecodeError, csv.Error) as e:
        raise BadOutput(f"malformed {name}: {e}") from None
    if not rows:
        raise BadOutput(f"{name} has no rows")
    missing = [c for c in required if c not in rows[0] or any(r.get(c) is None for r in rows)]
    if missing:
        raise BadOutput(f"{name} lacks column(s) {', '.join(missing)}")
    return rows


def number(text, what):
    try:
        return float(text)
    except (TypeError, ValueError):
        raise BadOutput(f"{what} is not a number: {text!r}") from None


def check_losses(run, ref):
    """Train and validation loss, and gradient norm, of every step within
    their tolerances (run, ref: Outputs or directories)."""
    cols = ["step", "loss", "val_loss", "grad_norm"]
    got = read_csv(as_outputs(run), cols, "metrics.csv")
    ref = read_csv(as_outputs(ref), cols, "metrics.csv")
    if len(got) != len(ref):
        return f"metrics.csv has {len(got)} steps, the reference {len(ref)}"
    for g, r in zip(got, ref):
        step = g["step"]
        if step != r["step"]:
            return f"metrics.csv step {step!r} where the reference has step {r['step']}"
        for col in ("loss", "val_loss", "grad_norm"):
            if r[col] == "":
                continue
            want = number(r[col], f"reference {col}")
            have = number(g[col], f"{col} at step {step}")
            if col == "grad_norm" and not math.isfinite(want) and not math.isfinite(have):
                continue  # an fp16 step both runs skipped on an overflow (lab 11)
            if not math.isfinite(have):
                return f"{col} diverged at step {step} ({have})"
            tol = GRAD_NORM_REL * abs(want) if col == "grad_norm" else LOSS_ABS + LOSS_REL * abs(want)
            if abs(have - want) > tol:
                return f"{col} at step {step} is {have:.6f}, reference {want:.6f}"
    return None


def check_memory(run, ref):
    """Peak bytes per rank and category, exactly."""
    cols = ["rank", "category", "peak_bytes"]

    def table(x):
        return {(r["rank"], r["category"]): r["peak_bytes"]
                for r in read_csv(as_outputs(x), cols, "memory.csv")}

    got, ref = table(run), table(ref)
    for key in sorted(ref):
        if got.get(key) != ref[key]:
            return (f"peak {key[1]} bytes of rank {key[0]}: {got.get(key, 'missing')}, "
                    f"reference {ref[key]}")
    return None


class Zero(str):
    """A check's reason that scores the whole case zero, not just the
    check's share: the run did other work than the layout asks (another
    kind of collective, on another group, or another compute order), so
    whatever else agrees was reached some other way."""


def check_comm(run, ref):
    """Calls and bytes per rank, group and operation, exactly (a row only
    one side has counts as a difference). An operation, on a group, that
    one side runs and the other never does is a Zero: the design is not the
    layout's (an all-gather where the lab's reduce-scatter belongs)."""
    cols = ["rank", "group", "op", "calls", "bytes"]

    def table(x):
        return {(r["rank"], r["group"], r["op"]): (r["calls"], r["bytes"])
                for r in read_csv(as_outputs(x), cols, "comm.csv") if r["calls"] != "0"}

    got, ref = table(run), table(ref)
    for key in sorted(set(got) ^ set(ref), key=lambda k: (int(k[0]), k[1], k[2])):
        rank, group, op = key
        if key in got:
            return Zero(f"rank {rank} runs {op} on group {group} ({got[key][0]} calls), which the "
                        f"reference never does there: the layout's collectives are other ones")
        return Zero(f"rank {rank} never runs {op} on group {group}, the reference {ref[key][0]} "
                    f"times: the layout's collectives are other ones")
    for key in sorted(set(got) | set(ref)):
        g, r = got.get(key, ("0", "0")), ref.get(key, ("0", "0"))
        if g != r:
            return (f"{key[2]} on group {key[1]}, rank {key[0]}: {g[0]} calls / {g[1]} bytes, "
                    f"reference {r[0]} / {r[1]}")
    return None


def check_consistency(run, ref):
    """Every rank holds the same parameters at the end: one checksum per
    rank (as many ranks as the reference has), all equal."""
    cols = ["rank", "checksum"]
    got = read_csv(as_outputs(run), cols, "params_checksum.csv")
    want = len(read_csv(as_outputs(ref), cols, "params_checksum.csv"))
    ranks = {r["rank"] for r in got}
    if len(got) != want or len(ranks) != want:
        return f"params_checksum.csv has {len(got)} rows for {len(ranks)} ranks, expected {want} ranks"
    first = got[0]
    for r in got[1:]:
        if r["checksum"] != first["checksum"]:
            return (f"rank {r['rank']} holds other parameters than rank {first['rank']} at the end "
                    f"(checksum {r['checksum']} vs {first['checksum']}): the ranks drifted apart")
    return None


def check_scaler(run, ref):
    """fp16's dynamic loss scale (lab 11): the scale every step's backward
    pass used and whether the step was skipped, exactly as the reference's
    (metrics.csv's loss_scale and skipped): powers of two and counts, which
    no summation order changes."""
    cols = ["step", "loss_scale", "skipped"]
    got = read_csv(as_outputs(run), cols, "metrics.csv")
    ref = read_csv(as_outputs(ref), cols, "metrics.csv")
    if len(got) != len(ref):
        return f"metrics.csv has {len(got)} steps, the reference {len(ref)}"
    for g, r in zip(got, ref):
        if (g["loss_scale"], g["skipped"]) != (r["loss_scale"], r["skipped"]):
            return (f"step {g['step']}: loss scale {g['loss_scale']}, skipped {g['skipped']}; "
                    f"the reference's {r['loss_scale']}, skipped {r['skipped']}")
    return None


def check_flushed(run, ref):
    """Lab 11's extension: the gradients fp16 would flush to zero, counted
    every step (metrics.csv's flushed column), exactly as the reference."""
    cols = ["step", "flushed"]
    got = read_csv(as_outputs(run), cols, "metrics.csv")
    ref = read_csv(as_outputs(ref), cols, "metrics.csv")
    if len(got) != len(ref):
        return f"metrics.csv has {len(got)} steps, the reference {len(ref)}"
    for g, r in zip(got, ref):
        if g["flushed"] != r["flushed"]:
            return f"step {g['step']}: {g['flushed']} gradients flushed, the reference {r['flushed']}"
    return None


MESH_DIMS = ["tp", "cp", "dp", "pp"]   # the mesh's dimensions, the busiest first


def group_spans(outputs):
    """[the most nodes one group of each dimension spans], from mesh.csv
    (rank,node,tp,cp,dp,pp): a group is the ranks whose other coordinates
    agree."""
    rows = read_csv(outputs, ["rank", "node"] + MESH_DIMS, "mesh.csv")
    spans = []
    for dim in MESH_DIMS:
        groups = {}
        for r in rows:
            key = tuple(r[d] for d in MESH_DIMS if d != dim)
            groups.setdefault(key, set()).add(r["node"])
        spans.append(max((len(nodes) for nodes in groups.values()), default=0))
    return len(rows), spans


def check_placement(run, ref):
    """The mesh's placement on the nodes (mesh.csv): every rank listed, and
    the groups' spans, compared busiest dimension first (TP, CP, DP, PP),
    no worse than the reference's: a group that spans more nodes runs on
    the slow links between them."""
    (n, got), (want_n, want) = group_spans(as_outputs(run)), group_spans(as_outputs(ref))
    if n != want_n:
        return f"mesh.csv has {n} ranks, expected {want_n}"
    for dim, g, w in zip(MESH_DIMS, got, want):
        if g < w:
            return None
        if g > w:
            return (f"a {dim} group spans {g} nodes, the reference's {w}: its collectives cross "
                    f"the slow links between nodes (mesh order: the busiest dimension innermost)")
    return None


def overlap_counts(outputs):
    """{rank: (gradient collectives started during the backward pass, all
    gradient collectives)}, from overlap.csv (a reference's summary) or
    computed from trace.csv. Steps end at the optimizer's phase; gradient
    collectives are those of the group 'dp'."""
    if outputs.data("overlap.csv") is not None:
        return read_counts(outputs, "overlap.csv", "early", "collectives")
    rows = read_csv(outputs, ["rank", "category", "name", "group", "start_s"], "trace.csv")
    events = {}
    for r in rows:
        kind = ("optimizer" if r["category"] == "compute" and r["name"] == "optimizer" else
                "backward" if r["category"] == "compute" and r["name"] == "backward" else
                "grads" if r["category"] == "comm" and r["group"] == "dp" else None)
        if kind:
            events.setdefault(r["rank"], {"optimizer": [], "backward": [], "grads": []})[kind] \
                .append(number(r["start_s"], "trace.csv start_s"))
    counts = {}
    for rank, ev in events.items():
        for v in ev.values():
            v.sort()
        early, prev = 0, -math.inf
        for t in ev["optimizer"]:
            b = ev["backward"][bisect.bisect_right(ev["backward"], prev):bisect.bisect_left(ev["backward"], t)]
            if b:   # collectives of this step that started before its last backward phase
                early += (bisect.bisect_left(ev["grads"], b[-1]) - bisect.bisect_right(ev["grads"], prev))
            prev = t
        counts[rank] = (early, len(ev["grads"]))
    return counts


def read_counts(outputs, name, a, b):
    """{rank: (a, b)} from a reference's summary of per-rank counts."""
    return {r["rank"]: (int(number(r[a], f"{name} {a}")), int(number(r[b], f"{name} {b}")))
            for r in read_csv(outputs, ["rank", a, b], name)}


def counts_csv(a, b, counts):
    """The summary a reference keeps of per-rank counts {rank: (a, b)}."""
    lines = [f"rank,{a},{b}"] + [f"{rank},{x},{y}" for rank, (x, y) in
                                 sorted(counts.items(), key=lambda kv: int(kv[0]))]
    return ("\n".join(lines) + "\n").encode()


def first_rank_below(got, want):
    """(rank, got's counts, want's) of the first rank whose first count is
    below the reference's, or None."""
    for rank in sorted(want, key=int):
        if got.get(rank, (0, 0))[0] < want[rank][0]:
            return rank, got.get(rank, (0, 0)), want[rank]
    return None


def overlap_summary(outputs):
    """overlap.csv, what a reference keeps of trace.csv."""
    return counts_csv("early", "collectives", overlap_counts(outputs))


def check_overlap(run, ref):
    """Per rank, at least as many gradient collectives started during the
    backward pass as the reference's (see above)."""
    low = first_rank_below(overlap_counts(as_outputs(run)), overlap_counts(as_outputs(ref)))
    if low is None:
        return None
    rank, g, w = low
    return (f"rank {rank} started {g[0]} of its {g[1]} gradient collectives while the backward "
            f"pass was still running, the reference {w[0]} of {w[1]}: the communication waits "
            "for the end of the backward pass instead of overlapping it")


def ring_overlap_counts(outputs):
    """{rank: (the ring's transfers during which a block of attention ran,
    all of them)}, from ring_overlap.csv (a reference's summary) or from
    trace.csv: the sends and receives of group cp, each an interval from
    its start to its completion, and the starts of the "attention block"
    compute events. A block starts inside a transfer when the program
    computes between posting the transfer and waiting for it: an order of
    calls, the same on any machine."""
    if outputs.data("ring_overlap.csv") is not None:
        return read_counts(outputs, "ring_overlap.csv", "overlapped", "transfers")
    rows = read_csv(outputs, ["rank", "category", "name", "group", "start_s", "end_s"], "trace.csv")
    blocks, transfers = {}, {}
    for r in rows:
        if r["category"] == "compute" and r["name"].startswith("attention block"):
            blocks.setdefault(r["rank"], []).append(number(r["start_s"], "trace.csv start_s"))
        elif r["category"] == "comm" and r["group"] == "cp" and r["name"] in ("send", "recv"):
            transfers.setdefault(r["rank"], []).append(
                (number(r["start_s"], "trace.csv start_s"), number(r["end_s"], "trace.csv end_s")))
    counts = {}
    for rank, spans in transfers.items():
        starts = sorted(blocks.get(rank, []))
        during = sum(bisect.bisect_left(starts, b) > bisect.bisect_right(starts, a) for a, b in spans)
        counts[rank] = (during, len(spans))
    return counts


def ring_overlap_summary(outputs):
    """ring_overlap.csv, what a reference keeps of trace.csv."""
    return counts_csv("overlapped", "transfers", ring_overlap_counts(outputs))


def check_ring_overlap(run, ref):
    """Per rank, at least as many of the ring's K/V transfers with attention
    computed during them as the reference (see ring_overlap_counts)."""
    low = first_rank_below(ring_overlap_counts(as_outputs(run)),
                           ring_overlap_counts(as_outputs(ref)))
    if low is None:
        return None
    rank, g, w = low
    return (f"rank {rank} computed attention during {g[0]} of its {g[1]} ring transfers, the "
            f"reference during {w[0]} of {w[1]}: the ring waits for each block of keys and "
            "values before computing, instead of computing the one it holds while the next one "
            "travels")


COMPUTE_KINDS = ("forward", "backward", "backward-input", "backward-weight")


def compute_orders(outputs):
    """{rank: [F0, F1, B0, ...]}: each rank's compute ops in its schedule's
    order (messages and batches left out), from schedule.csv (a
    reference's summary) or from pipeline.csv (the schedule the run
    executed, common/schedule.h's labels)."""
    if outputs.data("schedule.csv") is not None:
        return {r["rank"]: r["order"].split()
                for r in read_csv(outputs, ["rank", "order"], "schedule.csv")}
    rows = read_csv(outputs, ["rank", "index", "label", "kind"], "pipeline.csv")
    key = lambda r: (int(number(r["rank"], "pipeline.csv rank")),
                     int(number(r["index"], "pipeline.csv index")))
    orders = {}
    for r in sorted(rows, key=key):
        orders.setdefault(r["rank"], [])
        if r["kind"] in COMPUTE_KINDS:
            orders[r["rank"]].append(r["label"])
    return orders


def schedule_summary(outputs):
    """schedule.csv, what a reference keeps of pipeline.csv."""
    lines = ["rank,order"]
    for rank, order in sorted(compute_orders(outputs).items(), key=lambda x: int(x[0])):
        lines.append(f"{rank},{' '.join(order)}")
    return ("\n".join(lines) + "\n").encode()


def check_schedule(run, ref):
    """Every rank runs its forwards and backwards (B, or I and W) in the
    reference schedule's order, whatever its messages. A Zero when not:
    another schedule (GPipe's order for 1F1B, B for ZB-H1's split) can
    train to the same losses, and the schedule is what the lab grades."""
    got, want = compute_orders(as_outputs(run)), compute_orders(as_outputs(ref))
    if len(got) != len(want):
        return Zero(f"pipeline.csv has {len(got)} ranks, the reference {len(want)}")
    for rank in sorted(want, key=int):
        g, w = got.get(rank, []), want[rank]
        for i, (a, b) in enumerate(zip(g + ["(end)"] * len(w), w + ["(end)"] * len(g))):
            if a != b:
                start = max(0, i - 3)
                return Zero(f"rank {rank}'s compute op {i + 1} is {a}, the reference schedule's "
                            f"is {b} (its order there: {' '.join(w[start:i + 4])} ...): the "
                            "schedule is another one")
    return None


CHECKS = {"loss": check_losses, "memory": check_memory, "comm": check_comm,
          "consistency": check_consistency, "overlap": check_overlap,
          "placement": check_placement, "schedule": check_schedule,
          "ring_overlap": check_ring_overlap, "scaler": check_scaler, "flushed": check_flushed}
# the file each check reads from a run, and the summary a reference keeps
# instead where the file is large
FILES = {"loss": "metrics.csv", "memory": "memory.csv", "comm": "comm.csv",
         "consistency": "params_checksum.csv", "overlap": "trace.csv", "placement": "mesh.csv",
         "schedule": "pipeline.csv", "ring_overlap": "trace.csv", "scaler": "metrics.csv",
         "flushed": "metrics.csv"}
SUMMARIES = {"overlap": ("overlap.csv", overlap_summary),
             "schedule": ("schedule.csv", schedule_summary),
             "ring_overlap": ("ring_overlap.csv", ring_overlap_summary)}


def has_reference(check, outputs):
    """Whether a reference holds what check compares with."""
    names = [FILES[check]] + ([SUMMARIES[check][0]] if check in SUMMARIES else [])
    return any(outputs.data(n) is not None for n in names)


def reference_files(check, outputs):
    """{name: bytes} that a committed reference keeps for check: the run's
    file, or its summary (trace.csv is large and mostly times; pipeline.csv
    holds times too)."""
    if check in SUMMARIES:
        name, summary = SUMMARIES[check]
        return {name: summary(outputs)}
    data = outputs.data(FILES[check])
    return {FILES[check]: data if data is not None else b""}
