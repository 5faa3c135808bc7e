#!/usr/bin/env python3
"""The autograder: build a lab from a copy of its sources, run each case the
lab declares in grader/cases/NN_name.toml, compare the outputs with the
reference runs in grader/reference/, and write the reports.

    grade.py [--lab 01] [--src labs] [--out grader/out]   grade students' labs/
    grade.py --make-references                             regenerate the references
    grade.py --hidden [--hidden-seed N]                    compare live with the
                                                           solutions, random cases

A case kind says what passing means:
    check   the program exits 0 (it checks itself: gradcheck, check_collectives)
    train   it trains, and its metrics/memory/comm files match the reference
            (points split evenly over the listed checks)
    bench   it completes and writes the listed CSV files, well-formed, with
            positive numbers in the listed columns
Every failure scores zero for that case (or check) with a one-line reason,
and grading goes on.
"""
import argparse
import glob
import os
import random
import shutil
import sys
import tomllib
from dataclasses import dataclass, field

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import compare   # noqa: E402
import reports   # noqa: E402
import runner    # noqa: E402

GRADER = os.path.dirname(os.path.abspath(__file__))
KINDS = ("check", "train", "bench")


class ManifestError(Exception):
    pass


@dataclass
class Case:
    name: str
    kind: str
    program: str
    ranks: int
    args: list
    points: float
    timeout: float
    checks: list = field(default_factory=list)       # train
    outputs: dict = field(default_factory=dict)      # bench: file -> numeric columns
    hidden: dict = field(default_factory=dict)       # flag -> choices, for --hidden


@dataclass
class Lab:
    name: str
    programs: list
    cases: list
    link: list = field(default_factory=list)   # objects of earlier labs' solutions


def load_lab(path):
    name = os.path.basename(path)[:-len(".toml")]
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        cases = []
        for c in doc["case"]:
            case = Case(name=c["name"], kind=c["kind"], program=c["program"],
                        ranks=int(c.get("ranks", 1)), args=[str(a) for a in c.get("args", [])],
                        points=float(c["points"]), timeout=float(c.get("timeout", 120)),
                        checks=list(c.get("checks", [])), outputs=dict(c.get("outputs", {})),
                        hidden={k: [str(v) for v in vs] for k, vs in c.get("hidden", {}).items()})
            if case.kind not in KINDS:
                raise ManifestError(f"case {case.name}: kind must be one of {', '.join(KINDS)}")
            if case.program not in doc["programs"]:
                raise ManifestError(f"case {case.name}: program {case.program} is not in programs")
            unknown = [k for k in case.checks if k not in compare.CHECKS]
            if unknown:
                raise ManifestError(f"case {case.name}: unknown check(s) {unknown}")
            cases.append(case)
        return Lab(name, list(doc["programs"]), cases, [str(x) for x in doc.get("link", [])])
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(f"{path}: {e!r}") from None


def all_labs(pattern):
    paths = sorted(glob.glob(os.path.join(GRADER, "cases", "*.toml")))
    labs = [load_lab(p) for p in paths]
    if pattern != "all":
        labs = [lab for lab in labs if lab.name == pattern or lab.name.startswith(pattern + "_")]
        if not labs:
            names = ", ".join(os.path.basename(p)[:2] for p in paths)
            raise ManifestError(f"no lab {pattern!r} (labs: {names})")
    return labs


def case_argv(case, programs, out_dir, extra):
    argv = [programs[case.program]] + [a.replace("{out}", out_dir) for a in case.args] + extra
    return runner.mpirun_argv(case.ranks, argv) if case.ranks > 1 else argv


def slug(name):
    """A case's directory name: its name with spaces as underscores."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def fresh_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def run_case(case, programs, out_dir, extra=()):
    """Run one case into a fresh out_dir (so no stale or planted file can be
    graded); returns (RunResult, failure reason or None)."""
    fresh_dir(out_dir)
    res = runner.run(case_argv(case, programs, out_dir, list(extra)), case.timeout,
                     env=runner.watchdog_env(case.timeout))
    with open(os.path.join(out_dir, "log.txt"), "w") as f:
        f.write(res.output)
    return res, res.failure(case.timeout)


def check_bench_outputs(case, out_dir):
    for name, columns in case.outputs.items():
        rows = compare.read_csv(os.path.join(out_dir, name), columns)
        for i, row in enumerate(rows):
            for col in columns:
                v = compare.number(row[col], f"{name} row {i + 1} {col}")
                if not v > 0:
                    return f"{name} row {i + 1}: {col} = {row[col]} (expected a positive number)"
    return None


def score_case(case, programs, out_dir, ref_dir, extra=()):
    """Returns a reports.Result: points earned and the reasons for any loss."""
    res, failure = run_case(case, programs, out_dir, extra)
    result = reports.Result(case.name, 0.0, case.points, [], res.seconds, res.output)
    if failure:
        result.reasons.append(failure)
        return result
    try:
        if case.kind == "check":
            result.points = case.points
        elif case.kind == "bench":
            reason = check_bench_outputs(case, out_dir)
            result.points = case.points if reason is None else 0.0
            if reason:
                result.reasons.append(reason)
        else:
            share = case.points / len(case.checks)
            for check in case.checks:
                try:
                    reason = compare.CHECKS[check](out_dir, ref_dir)
                except compare.BadOutput as e:
                    reason = str(e)
                if reason is None:
                    result.points += share
                else:
                    result.reasons.append(f"{check}: {reason}")
            if "loss" in case.checks:
                result.chart = reports.loss_chart(out_dir, ref_dir, case.name)
    except compare.BadOutput as e:
        result.reasons.append(str(e))
    return result


def lab_sources(src_root, lab):
    return os.path.join(src_root, lab.name)


def build_or_zero(src_root, lab, build_dir):
    programs, reason = runner.build_lab(lab_sources(src_root, lab), lab, build_dir)
    if reason:
        return None, [reports.Result(c.name, 0.0, c.points, [reason], 0.0, "") for c in lab.cases]
    return programs, None


def grade(args, labs):
    results = {}
    for lab in labs:
        out = os.path.join(args.out, lab.name)
        programs, zeros = build_or_zero(args.src, lab, os.path.join(out, "build"))
        if zeros:
            results[lab.name] = zeros
            continue
        results[lab.name] = [score_case(c, programs, os.path.join(out, slug(c.name)),
                                        os.path.join(GRADER, "reference", lab.name, slug(c.name)))
                             for c in lab.cases]
    return results


def grade_hidden(args, labs):
    """Student and solution on the same randomized cases, compared live: no
    stored file can stand in for a run."""
    rng = random.Random(args.hidden_seed)
    results = {}
    for lab in labs:
        out = os.path.join(args.out, lab.name)
        programs, zeros = build_or_zero(args.src, lab, os.path.join(out, "build"))
        ref_programs, ref_zeros = runner.build_lab(lab_sources(args.solutions, lab), lab,
                                                   os.path.join(out, "build-solution"))
        if ref_zeros:
            raise ManifestError(f"the solutions of {lab.name} do not build: {ref_zeros}")
        if zeros:
            results[lab.name] = zeros
            continue
        results[lab.name] = []
        for c in lab.cases:
            extra = []
            for flag, choices in sorted(c.hidden.items()):
                extra += [flag, rng.choice(choices)]
            ref_dir = os.path.join(out, slug(c.name) + "-solution")
            if c.kind == "train":
                ref_res, failure = run_case(c, ref_programs, ref_dir, extra)
                if failure:
                    raise ManifestError(f"the solution failed hidden case {c.name}: {failure}")
            r = score_case(c, programs, os.path.join(out, slug(c.name)), ref_dir, extra)
            if extra:
                r.name += " [" + " ".join(extra) + "]"
            results[lab.name].append(r)
    return results


def make_references(args, labs):
    for lab in labs:
        programs, reason = runner.build_lab(lab_sources(args.solutions, lab), lab,
                                            os.path.join(args.out, lab.name, "build-solution"))
        if reason:
            raise ManifestError(f"the solutions of {lab.name} do not build: {reason}")
        for c in lab.cases:
            if c.kind != "train":
                continue
            run_dir = os.path.join(args.out, lab.name, slug(c.name) + "-solution")
            _, failure = run_case(c, programs, run_dir)
            if failure:
                raise ManifestError(f"the solution failed case {lab.name}/{c.name}: {failure}")
            ref = fresh_dir(os.path.join(args.reference_out, lab.name, slug(c.name)))
            for check in c.checks:
                shutil.copy(os.path.join(run_dir, compare.FILES[check]), ref)
            print(f"grade: reference {lab.name}/{c.name}: {', '.join(compare.FILES[k] for k in c.checks)}")


def main():
    ap = argparse.ArgumentParser(description="Grade the labs against reference runs.")
    ap.add_argument("--lab", default="all", help="lab number or name (default: all)")
    ap.add_argument("--case", default=None, help="grade only the cases whose name contains this")
    ap.add_argument("--src", default=os.path.join(runner.ROOT, "labs"),
                    help="directory holding the NN_name lab sources to grade (default: labs/)")
    ap.add_argument("--solutions", default=os.path.join(runner.ROOT, "solutions"),
                    help="the solutions, for --hidden and --make-references")
    ap.add_argument("--out", default=os.path.join(GRADER, "out"), help="work and report directory")
    ap.add_argument("--hidden", action="store_true",
                    help="compare live with the solutions on randomized cases")
    ap.add_argument("--hidden-seed", type=int, default=None, help="seed of the randomized cases")
    ap.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every case's time limit (slow machines > 1)")
    ap.add_argument("--make-references", action="store_true",
                    help="rerun the solutions and rewrite the references")
    ap.add_argument("--reference-out", default=os.path.join(GRADER, "reference"),
                    help="where --make-references writes (default grader/reference)")
    args = ap.parse_args()
    for d in ("src", "solutions", "out", "reference_out"):
        setattr(args, d, os.path.abspath(getattr(args, d)))
    try:
        labs = all_labs(args.lab)
        if not args.timeout_scale > 0:
            raise ManifestError("--timeout-scale must be positive")
        for lab in labs:
            for c in lab.cases:
                c.timeout *= args.timeout_scale
            if args.case:
                lab.cases = [c for c in lab.cases if args.case in c.name]
        if not any(lab.cases for lab in labs):
            raise ManifestError(f"no case matches {args.case!r}")
        if not os.path.isdir(args.src):
            raise ManifestError(f"no such directory: {args.src}")
        for flag, path in (("--out", args.out), ("--reference-out", args.reference_out)):
            if flag == "--out" or args.make_references:
                problem = reports.output_dir_problem(path)
                if problem:
                    raise ManifestError(f"{flag}: {problem}")
        if args.make_references:
            make_references(args, labs)
            return 0
        if args.hidden and args.hidden_seed is None:
            args.hidden_seed = random.SystemRandom().randrange(1 << 31)
        results = grade_hidden(args, labs) if args.hidden else grade(args, labs)
    except ManifestError as e:
        print(f"grade: error: {e}", file=sys.stderr)
        return 2
    reports.write_all(results, args.out, hidden_seed=args.hidden_seed if args.hidden else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
