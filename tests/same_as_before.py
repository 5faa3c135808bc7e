#!/usr/bin/env python3
"""Run the grader's fixed training cases of labs 00, 02 and 03 with two
builds of the solutions and require bit-identical outputs: metrics.csv
(step, loss, grad_norm: floats printed with 9 significant digits, which
round-trip a float exactly), memory.csv, and comm.csv's calls and bytes
(not its seconds). tests/layout.bats uses it to show that the layout
descriptor of lab 04 changed nothing for the layouts before it.

    same_as_before.py BEFORE_ROOT AFTER_ROOT OUT_DIR

Each ROOT is a kit tree whose build/solutions/ holds the programs; the runs
use this tree's build/data/synth.tok. A case with a flag the older build's
program does not know (a later extension's) is left out, with a line.
Prints one line per case and exits 1 on the first difference."""
import csv
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "grader"))
import grade   # noqa: E402
import runner  # noqa: E402

LABS = ["00_single_device", "02_ddp", "03_zero"]
# the columns that must agree, per file
COLUMNS = {"metrics.csv": ["step", "loss", "val_loss", "grad_norm"],
           "memory.csv": ["rank", "category", "current_bytes", "peak_bytes"],
           "comm.csv": ["rank", "group", "op", "calls", "bytes"]}


def rows(path, cols):
    with open(path, newline="") as f:
        return [[r[c] for c in cols] for r in csv.DictReader(f)]


def run_case(root, lab, case, out):
    programs = {p: os.path.join(root, "build", "solutions", lab.name, p) for p in lab.programs}
    argvs = grade.case_argvs(case, grade.fixed_draw(case), programs, out)
    result = grade.run_all(argvs, case.timeout, lambda argv: runner.run(argv, case.timeout))
    why = result.failure(case.timeout)
    if why:
        sys.exit(f"{lab.name}: {case.name}: the build in {root} {why}:\n{result.output[-2000:]}")


def newer_flags(root, lab, case):
    """The case's flags that root's build of its program does not list in --help"""
    prog = os.path.join(root, "build", "solutions", lab.name, case.program)
    usage = subprocess.run([prog, "--help"], capture_output=True, text=True).stdout
    return [a for a in case.args if a.startswith("--") and a not in usage]


def main():
    before, after, out = sys.argv[1:4]
    compared = 0
    for name in LABS:
        lab = grade.load_lab(os.path.join(ROOT, "grader", "cases", name + ".toml"))
        for case in lab.cases:
            if case.kind != "train":
                continue
            newer = newer_flags(before, lab, case)
            if newer:
                print(f"left out: {name}: {case.name}: {' '.join(newer)} came later")
                continue
            dirs = []
            for tag, root in (("before", before), ("after", after)):
                d = grade.fresh_dir(os.path.join(out, name, grade.slug(case.name), tag))
                run_case(root, lab, case, d)
                dirs.append(d)
            for fname, cols in COLUMNS.items():
                paths = [os.path.join(d, fname) for d in dirs]
                if not os.path.exists(paths[0]):
                    continue   # one device writes no comm.csv
                a, b = rows(paths[0], cols), rows(paths[1], cols)
                if a != b:
                    first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]),
                                 min(len(a), len(b)))
                    sys.exit(f"{name}: {case.name}: {fname} differs at row {first + 1}: "
                             f"before {a[first] if first < len(a) else 'nothing'}, "
                             f"after {b[first] if first < len(b) else 'nothing'}")
            print(f"same: {name}: {case.name}")
            compared += 1
    if compared == 0:
        sys.exit("no training case found")
    print(f"{compared} cases bit-identical")


if __name__ == "__main__":
    main()
