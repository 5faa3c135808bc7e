#!/usr/bin/python3
"""torch_check: does the C GPT compute what PyTorch computes?

Usage: /usr/bin/python3 tests/torch_check.py DUMP_FILE

DUMP_FILE comes from build/tests/torch_dump (its format is described at the
top of tests/c/torch_dump.c). We load the C model's initial parameters into
the same model written in PyTorch (tests/torch_gpt_model.py), run the same
batch, and compare:
  1. the loss at step 0:           |l_c - l_t| < 1e-5 * max(1, |l_t|)
  2. every parameter's gradient:   max|g_c - g_t| / max|g_t| < 1e-3
  3. 10 steps of torch.optim.AdamW (one param group, decay on everything, as
     the C trainer does) on that batch: each loss within 1e-4 relative.
A dump of torch_dump --bf16 (mixed precision) is compared with PyTorch
training in bf16 the same way: a bf16 copy of the fp32 master weights runs
forward and backward in bf16 (the loss in fp32), its gradients, widened,
go to AdamW on the master. The two round at other places (PyTorch every
op's output, the C model its stored activations; their GEMMs and softmax
sum in other orders), so each value differs by up to bf16's unit roundoff
u = 2^-8 = 3.9e-3. A loss is a mean over B T tokens, where those errors
average out: the loss at step 0 within u/8 (as 1e-5 above, times
max(1, |loss|); measured 8e-6), each AdamW step's loss within u/4 = 9.8e-4
relative (measured up to 6.7e-4 as the steps amplify the differences,
where bf16 against fp32 is 3.2e-3 apart by step 9); a gradient is a sum of
many rounded terms, largest for the layernorms' small vectors: each
tensor within 16u = 6.3e-2 of its largest (measured up to 2.3e-2).

Exit status: 0 everything matches, 1 a mismatch (named on the last line),
2 the file is missing or malformed.
"""
import os
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_model import GPT  # noqa: E402  (after the path is set)

MAGIC = 0x54524348
VERSION = 2
HEADER_INTS = ("magic", "version", "vocab_size", "ctx_len", "n_layer", "n_head", "n_embd",
               "B", "T", "nsteps", "nparams", "precision")
HEADER_FLOATS = ("lr", "beta1", "beta2", "eps", "weight_decay")
HEADER_BYTES = 4 * (len(HEADER_INTS) + len(HEADER_FLOATS))

TOL_LOSS0 = 1e-5    # absolute, times max(1, |loss|)
TOL_GRAD = 1e-3     # per tensor, max abs diff over max abs torch gradient
TOL_STEPS = 1e-4    # relative, each AdamW step's loss
U_BF16 = 2.0 ** -8  # bf16's unit roundoff: the --bf16 tolerances (above)
TOLERANCES = {0: (TOL_LOSS0, TOL_GRAD, TOL_STEPS), 1: (U_BF16 / 8, 16 * U_BF16, U_BF16 / 4)}


class BadDump(Exception):
    pass


def read_dump(path):
    """Parse a torch_dump file into a dict. Offsets of each section (in bytes)
    are included, so tests can patch the file in place."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadDump(f"cannot read {path}: {e.strerror}") from e
    if len(data) < HEADER_BYTES:
        raise BadDump(f"{path}: {len(data)} bytes, too short for the header ({HEADER_BYTES})")
    ints = struct.unpack_from(f"<{len(HEADER_INTS)}i", data, 0)
    d = dict(zip(HEADER_INTS, ints))
    if d["magic"] != MAGIC:
        raise BadDump(f"{path}: not a torch_dump file (magic {d['magic']:#x})")
    if d["version"] != VERSION:
        raise BadDump(f"{path}: version {d['version']}, this script reads {VERSION}")
    floats = struct.unpack_from(f"<{len(HEADER_FLOATS)}f", data, 4 * len(HEADER_INTS))
    d.update(zip(HEADER_FLOATS, floats))
    n, bt, ns = d["nparams"], d["B"] * d["T"], d["nsteps"]
    if min(n, bt, ns) <= 0 or d["T"] > d["ctx_len"] or d["precision"] not in TOLERANCES:
        raise BadDump(f"{path}: impossible sizes or precision in the header {ints}")
    sections = [("params", "<f4", n), ("inputs", "<i4", bt), ("targets", "<i4", bt),
                ("loss0", "<f4", 1), ("grads", "<f4", n), ("losses", "<f4", ns)]
    want = HEADER_BYTES + 4 * sum(count for _, _, count in sections)
    if len(data) != want:
        raise BadDump(f"{path}: {len(data)} bytes, the header implies {want} (truncated?)")
    offset = HEADER_BYTES
    for name, dtype, count in sections:
        d[name] = np.frombuffer(data, dtype=dtype, count=count, offset=offset).copy()
        d[name + "_offset"] = offset
        offset += 4 * count
    d["loss0"] = float(d["loss0"][0])
    for name in ("inputs", "targets"):
        if d[name].min() < 0 or d[name].max() >= d["vocab_size"]:
            raise BadDump(f"{path}: {name} holds tokens outside 0..{d['vocab_size'] - 1}")
    return d


def make_model(d):
    model = GPT(d["vocab_size"], d["ctx_len"], d["n_layer"], d["n_head"], d["n_embd"])
    if model.num_params() != d["nparams"]:
        raise BadDump(f"header says {d['nparams']} parameters, the config gives "
                      f"{model.num_params()}")
    model.load_flat(d["params"])
    return model


class Trainer:
    """The PyTorch side: the fp32 model, or in bf16 a bf16 copy of an fp32
    master (PyTorch rounds copy_ to nearest even, as the C model's compute
    copy), its gradients widened into the master's for AdamW."""

    def __init__(self, d, adamw):
        self.master = make_model(d)
        self.work = make_model(d).to(torch.bfloat16) if d["precision"] else self.master
        self.opt = torch.optim.AdamW(self.master.parameters(), lr=d["lr"],
                                     betas=(d["beta1"], d["beta2"]), eps=d["eps"],
                                     weight_decay=d["weight_decay"]) if adamw else None

    def loss_and_grads(self, inputs, targets):
        if self.work is not self.master:
            with torch.no_grad():
                for (_, w), (_, m) in zip(self.work.ordered_parameters(),
                                          self.master.ordered_parameters()):
                    w.copy_(m)
        self.work.zero_grad(set_to_none=True)
        loss = self.work(inputs, targets)
        loss.backward()
        if self.work is not self.master:
            for (_, w), (_, m) in zip(self.work.ordered_parameters(),
                                      self.master.ordered_parameters()):
                m.grad = w.grad.float()
        return loss.item()

    def step(self, inputs, targets):
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_and_grads(inputs, targets)
        self.opt.step()
        return loss


def check(d):
    """Run the comparisons, print the report; returns the list of failures."""
    failures = []
    TOL_LOSS0, TOL_GRAD, TOL_STEPS = TOLERANCES[d["precision"]]
    B, T = d["B"], d["T"]
    inputs = torch.from_numpy(d["inputs"].astype(np.int64)).view(B, T)
    targets = torch.from_numpy(d["targets"].astype(np.int64)).view(B, T)
    trainer = Trainer(d, adamw=False)
    model = trainer.master
    print(f"torch_check: torch {torch.__version__}, V {d['vocab_size']} ctx {d['ctx_len']} "
          f"L {d['n_layer']} NH {d['n_head']} C {d['n_embd']}, B {B} T {T}, "
          f"{d['nparams']} parameters, {'bf16 over an fp32 master' if d['precision'] else 'fp32'}")

    # 1. loss at step 0
    lt = trainer.loss_and_grads(inputs, targets)
    lc = d["loss0"]
    diff = abs(lc - lt)
    tol = TOL_LOSS0 * max(1.0, abs(lt))
    ok = diff < tol
    print(f"loss at step 0: C {lc:.7f}  torch {lt:.7f}  |diff| {diff:.2e}  "
          f"(tol {tol:.1e})  {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(f"loss at step 0 (C {lc:.7f}, torch {lt:.7f}, |diff| {diff:.2e})")

    # 2. every parameter's gradient
    gt_flat = model.flat_grads().double().numpy()
    gc_flat = d["grads"].astype(np.float64)
    print(f"\n{'tensor':<22} {'elements':>8} {'max|g_torch|':>13} {'max|diff|':>10} "
          f"{'rel err':>9}")
    worst = (-1.0, "")
    for name, offset, shape in model.table():
        count = int(np.prod(shape))
        gc = gc_flat[offset:offset + count]
        gt = gt_flat[offset:offset + count]
        scale = float(np.max(np.abs(gt)))
        maxdiff = float(np.max(np.abs(gc - gt)))
        if not np.all(np.isfinite(gc)):
            rel = float("inf")
        elif scale > 0:
            rel = maxdiff / scale
        else:
            rel = 0.0 if maxdiff == 0 else float("inf")
        ok = rel < TOL_GRAD
        print(f"{name:<22} {count:>8} {scale:>13.3e} {maxdiff:>10.2e} {rel:>9.2e}  "
              f"{'ok' if ok else 'FAIL'}")
        worst = max(worst, (rel, name))
        if not ok:
            failures.append(f"gradient of {name} (rel err {rel:.2e} >= {TOL_GRAD:.0e})")
    print(f"gradients: {len(model.table())} tensors, max rel err {worst[0]:.2e} "
          f"({worst[1]}), tol {TOL_GRAD:.0e}")

    # 3. AdamW steps on the same batch, from the initial parameters again
    trainer = Trainer(d, adamw=True)
    print(f"\nAdamW lr {d['lr']:g} betas ({d['beta1']:g}, {d['beta2']:g}) eps {d['eps']:g} "
          f"weight_decay {d['weight_decay']:g}, {d['nsteps']} steps on the same batch")
    print(f"{'step':>4} {'loss C':>11} {'loss torch':>11} {'rel diff':>9}")
    worst_step = (-1.0, 0)
    for step in range(d["nsteps"]):
        lt, lc = trainer.step(inputs, targets), float(d["losses"][step])
        rel = abs(lc - lt) / max(abs(lt), 1e-30)
        if not np.isfinite(lc):
            rel = float("inf")
        ok = rel < TOL_STEPS
        print(f"{step:>4} {lc:>11.7f} {lt:>11.7f} {rel:>9.2e}  {'ok' if ok else 'FAIL'}")
        worst_step = max(worst_step, (rel, step))
        if not ok:
            failures.append(f"loss at AdamW step {step} (C {lc:.7f}, torch {lt:.7f}, "
                            f"rel diff {rel:.2e} >= {TOL_STEPS:.0e})")
    print(f"adamw: max rel loss diff {worst_step[0]:.2e} (step {worst_step[1]}), "
          f"tol {TOL_STEPS:.0e}")
    return failures


def main(argv):
    if len(argv) != 2 or argv[1].startswith("-"):
        print(f"usage: {os.path.basename(argv[0])} DUMP_FILE  (from build/tests/torch_dump)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    try:
        d = read_dump(argv[1])
        failures = check(d)
    except BadDump as e:
        print(f"torch_check: error: {e}", file=sys.stderr)
        return 2
    print()
    if failures:
        for f in failures:
            print(f"torch_check: MISMATCH: {f}")
        print(f"torch_check: FAIL ({len(failures)} mismatch{'es' if len(failures) > 1 else ''})")
        return 1
    print("torch_check: PASS (loss, all gradients and AdamW steps match PyTorch)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
