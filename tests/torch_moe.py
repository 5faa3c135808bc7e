#!/usr/bin/python3
"""torch_moe: does the C mixture-of-experts layer (common/moe.h) compute what
PyTorch computes?

Usage: /usr/bin/python3 tests/torch_moe.py DUMP_FILE

DUMP_FILE comes from `build/tests/test_moe --dump FILE K CAPACITY_FACTOR`
(its format is described above dump() in tests/c/test_moe.c): the C layer's
inputs, its output y, aux loss, routing statistics and every gradient of
loss = sum(w * y) + aux. We rebuild the layer in PyTorch, in float64 from the
same float32 numbers, let autograd differentiate it, and compare:
  1. the routing: tokens dropped and each expert's load, exactly;
  2. y:                 max|y_c - y_t| / max|y_t| < 1e-5
  3. the aux loss:      |aux_c - aux_t| / |aux_t| < 1e-5
  4. every gradient:    max|g_c - g_t| / max|g_t| < 1e-4 (x, Wr, the experts)
Top-k and capacity are decisions: float32 and float64 probabilities agree on
them only away from ties, so the script prints the narrowest relative gap
at a decision (the C test's inputs have gaps far above float's rounding).

Exit status: 0 everything matches, 1 a mismatch (named), 2 the file is
missing or malformed.
"""
import struct
import sys

import numpy as np
import torch

sys.dont_write_bytecode = True   # no __pycache__ in the source tree

MAGIC = 0x31454F4D
HEAD_INTS = ("magic", "N", "S", "C", "E", "k", "cap", "dropped")
HEAD_FLOATS = ("capacity_factor", "aux_alpha", "aux")
HEAD_BYTES = 4 * (len(HEAD_INTS) + len(HEAD_FLOATS))
TENSORS = ("x", "wr", "fcw", "fcb", "fcprojw", "fcprojb")

TOL_Y = 1e-5
TOL_AUX = 1e-5
TOL_GRAD = 1e-4


class BadDump(Exception):
    pass


def shapes(d):
    N, C, E = d["N"], d["C"], d["E"]
    return {"x": (N, C), "wr": (E, C), "fcw": (E, 4 * C, C), "fcb": (E, 4 * C),
            "fcprojw": (E, C, 4 * C), "fcprojb": (E, C)}


def read_dump(path):
    """Parse a dump into a dict, with each section's byte offset (name_offset)
    so that tests can patch the file in place."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise BadDump(f"cannot read {path}: {e.strerror}") from e
    if len(data) < HEAD_BYTES:
        raise BadDump(f"{path}: {len(data)} bytes, too short for the header")
    d = dict(zip(HEAD_INTS, struct.unpack_from(f"<{len(HEAD_INTS)}i", data, 0)))
    if d["magic"] != MAGIC:
        raise BadDump(f"{path}: not a test_moe dump (magic {d['magic']:#x})")
    d.update(zip(HEAD_FLOATS, struct.unpack_from(f"<{len(HEAD_FLOATS)}f", data, 4 * len(HEAD_INTS))))
    if min(d["N"], d["S"], d["C"], d["E"], d["k"]) <= 0 or d["N"] % d["S"] or d["k"] > d["E"]:
        raise BadDump(f"{path}: impossible sizes in the header")
    sh = shapes(d)
    NC = d["N"] * d["C"]
    sections = [("counts", "<i4", d["E"])] + [(t, "<f4", int(np.prod(sh[t]))) for t in TENSORS]
    sections += [("w", "<f4", NC), ("y", "<f4", NC)]
    sections += [("d" + t, "<f4", int(np.prod(sh[t]))) for t in TENSORS]
    want = HEAD_BYTES + 4 * sum(n for _, _, n in sections)
    if len(data) != want:
        raise BadDump(f"{path}: {len(data)} bytes, the header implies {want} (truncated?)")
    offset = HEAD_BYTES
    for name, dtype, n in sections:
        a = np.frombuffer(data, dtype=dtype, count=n, offset=offset).copy()
        base = name[1:] if name.startswith("d") and name[1:] in sh else name
        d[name] = a.reshape(sh[base]) if base in sh else a
        d[name + "_offset"] = offset
        offset += 4 * n
    d["w"] = d["w"].reshape(d["N"], d["C"])
    d["y"] = d["y"].reshape(d["N"], d["C"])
    return d


def route(probs, d):
    """kept (N, E) bools, assigned (G, E) counts before drops, and the
    narrowest relative probability gap at a decision"""
    N, S, E, k, cap = d["N"], d["S"], d["E"], d["k"], d["cap"]
    p = probs.detach()
    # top-k, ties to the lower expert index: a stable sort of -p
    order = torch.sort(-p, dim=1, stable=True).indices
    chosen = torch.zeros(N, E, dtype=torch.bool)
    chosen[torch.arange(N).unsqueeze(1), order[:, :k]] = True
    margin = float("inf")
    if k < E:
        ps = torch.gather(p, 1, order)
        margin = float(((ps[:, k - 1] - ps[:, k]) / ps[:, k - 1]).min())
    kept = torch.zeros(N, E, dtype=torch.bool)
    assigned = np.zeros((N // S, E), dtype=np.int64)
    for g in range(N // S):
        for e in range(E):
            toks = [t for t in range(g * S, (g + 1) * S) if chosen[t, e]]
            assigned[g, e] = len(toks)
            # probability descending, then token ascending (stable sort)
            toks.sort(key=lambda t: -float(p[t, e]))
            for t in toks[:cap]:
                kept[t, e] = True
            if len(toks) > cap:
                a, b = float(p[toks[cap - 1], e]), float(p[toks[cap], e])
                margin = min(margin, (a - b) / a)
    return kept, assigned, margin


def forward(params, d):
    x, wr = params["x"], params["wr"]
    N, S, E, k, C = d["N"], d["S"], d["E"], d["k"], d["C"]
    probs = torch.softmax(x @ wr.T, dim=1)
    kept, assigned, margin = route(probs, d)
    y = torch.zeros(N, C, dtype=torch.float64)
    for e in range(E):
        rows = kept[:, e].nonzero().flatten()
        if len(rows) == 0:
            continue
        h = x[rows] @ params["fcw"][e].T + params["fcb"][e]
        act = torch.nn.functional.gelu(h, approximate="tanh")
        out = act @ params["fcprojw"][e].T + params["fcprojb"][e]
        # the weight is the softmax probability itself, not renormalized over the k
        y = y.index_add(0, rows, probs[rows, e:e + 1] * out)
    f = torch.tensor(assigned, dtype=torch.float64) / (S * k)
    P = probs.reshape(N // S, S, E).mean(dim=1)
    aux = d["aux_alpha"] * E * (f * P).sum(dim=1).mean()
    return y, aux, kept, margin


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} DUMP_FILE", file=sys.stderr)
        return 2
    try:
        d = read_dump(sys.argv[1])
    except BadDump as e:
        print(f"torch_moe: {e}", file=sys.stderr)
        return 2
    torch.set_grad_enabled(True)
    params = {t: torch.tensor(d[t].astype(np.float64), requires_grad=True) for t in TENSORS}
    y, aux, kept, margin = forward(params, d)
    loss = (torch.tensor(d["w"].astype(np.float64)) * y).sum() + aux
    loss.backward()

    print(f"N {d['N']} S {d['S']} C {d['C']} E {d['E']} k {d['k']} cap {d['cap']}; "
          f"narrowest decision gap {margin:.2e}")
    bad = []
    dropped = d["N"] * d["k"] - int(kept.sum())
    load = kept.sum(dim=0).tolist()
    ok = dropped == d["dropped"] and load == d["counts"].tolist()
    print(f"routing: dropped {d['dropped']} (torch {dropped}), load {d['counts'].tolist()} "
          f"(torch {load})  {'ok' if ok else 'MISMATCH'}")
    if not ok:
        bad.append("routing")
    yt = y.detach().numpy()
    err = float(np.abs(d["y"] - yt).max() / np.abs(yt).max())
    print(f"y: max error {err:.2e} of max |y|  {'ok' if err < TOL_Y else 'MISMATCH'}")
    if not err < TOL_Y:
        bad.append("y")
    at = float(aux)
    err = abs(d["aux"] - at) / abs(at)
    print(f"aux: C {d['aux']:.8g} torch {at:.8g} relative error {err:.2e}  "
          f"{'ok' if err < TOL_AUX else 'MISMATCH'}")
    if not err < TOL_AUX:
        bad.append("aux")
    print(f"{'gradient':<10} {'elements':>8} {'max |g|':>10} {'max err':>10}")
    for t in TENSORS:
        gt = params[t].grad.numpy()
        err = float(np.abs(d["d" + t] - gt).max() / np.abs(gt).max())
        good = err < TOL_GRAD
        print(f"{t:<10} {gt.size:>8} {np.abs(gt).max():>10.3e} {err:>10.2e}  "
              f"{'ok' if good else 'MISMATCH'}")
        if not good:
            bad.append(f"gradient of {t}")
    for name in bad:
        print(f"MISMATCH: {name}")
    print("torch_moe: " + ("FAIL" if bad else "PASS"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
