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
"""
import csv
import math

LOSS_ABS = 1e-5
LOSS_REL = 1e-5
GRAD_NORM_REL = 1e-3


class BadOutput(Exception):
    """A run's file is missing or malformed (the reason says which)."""


def read_csv(path, required):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise BadOutput(f"missing {path.rsplit('/', 1)[-1]}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise BadOutput(f"malformed {path.rsplit('/', 1)[-1]}: {e}") from None
    if not rows:
        raise BadOutput(f"{path.rsplit('/', 1)[-1]} has no rows")
    missing = [c for c in required if c not in rows[0] or any(r.get(c) is None for r in rows)]
    if missing:
        raise BadOutput(f"{path.rsplit('/', 1)[-1]} lacks column(s) {', '.join(missing)}")
    return rows


def number(text, what):
    try:
        return float(text)
    except (TypeError, ValueError):
        raise BadOutput(f"{what} is not a number: {text!r}") from None


def check_losses(run_dir, ref_dir):
    """Train and validation loss, and gradient norm, of every step within
    their tolerances."""
    cols = ["step", "loss", "val_loss", "grad_norm"]
    got = read_csv(f"{run_dir}/metrics.csv", cols)
    ref = read_csv(f"{ref_dir}/metrics.csv", cols)
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
            if not math.isfinite(have):
                return f"{col} diverged at step {step} ({have})"
            tol = GRAD_NORM_REL * abs(want) if col == "grad_norm" else LOSS_ABS + LOSS_REL * abs(want)
            if abs(have - want) > tol:
                return f"{col} at step {step} is {have:.6f}, reference {want:.6f}"
    return None


def check_memory(run_dir, ref_dir):
    """Peak bytes per rank and category, exactly."""
    cols = ["rank", "category", "peak_bytes"]
    got = {(r["rank"], r["category"]): r["peak_bytes"] for r in read_csv(f"{run_dir}/memory.csv", cols)}
    ref = {(r["rank"], r["category"]): r["peak_bytes"] for r in read_csv(f"{ref_dir}/memory.csv", cols)}
    for key in sorted(ref):
        if got.get(key) != ref[key]:
            return (f"peak {key[1]} bytes of rank {key[0]}: {got.get(key, 'missing')}, "
                    f"reference {ref[key]}")
    return None


def check_comm(run_dir, ref_dir):
    """Calls and bytes per rank, group and operation, exactly (a row only
    one side has counts as a difference)."""
    cols = ["rank", "group", "op", "calls", "bytes"]

    def table(path):
        return {(r["rank"], r["group"], r["op"]): (r["calls"], r["bytes"]) for r in read_csv(path, cols)}

    got, ref = table(f"{run_dir}/comm.csv"), table(f"{ref_dir}/comm.csv")
    for key in sorted(set(got) | set(ref)):
        g, r = got.get(key, ("0", "0")), ref.get(key, ("0", "0"))
        if g != r:
            return (f"{key[2]} on group {key[1]}, rank {key[0]}: {g[0]} calls / {g[1]} bytes, "
                    f"reference {r[0]} / {r[1]}")
    return None


CHECKS = {"loss": check_losses, "memory": check_memory, "comm": check_comm}
# the files each check reads, copied into a reference
FILES = {"loss": "metrics.csv", "memory": "memory.csv", "comm": "comm.csv"}
