#!/usr/bin/env python3
"""The autograder: build a lab from a copy of its sources, run each case the
lab declares in grader/cases/NN_name.toml, compare the outputs with the
reference runs in grader/reference/, and write the reports.

    grade.py [--lab 01] [--src labs] [--out grader/out]   grade students' labs/
    grade.py --make-references                             regenerate the references
    grade.py --hidden [--hidden-seed N]                    compare live with the
                                                           solutions, random cases

Exit status: 0 when the core's score reaches --fail-under (default: every
point), 1 when it does not, 2 on bad input (before any work).

A case kind says what passing means:
    check   the program exits 0 (it checks itself: gradcheck, check_collectives)
    train   it trains, and its metrics/memory/comm/params_checksum files match
            the reference (points split evenly over the listed checks; the
            other checks score only when the losses match). A train case
            may first run another command in the same directory, [case.before]
            (a program, its ranks and arguments: a checkpoint saved by one
            layout, which the case's run resumes in another); the hidden
            flags drawn for the case apply to it too.
    bench   it completes and writes the listed CSV files, well-formed, with
            positive numbers in the listed columns
Every failure scores zero for that case (or check) with a one-line reason,
and grading goes on.

The student's builds and runs are isolated when the grader runs as root
(sandbox.py); in --hidden mode the solutions run first, in a private
directory that is deleted, their outputs kept in memory, before any of the
student's code is built.
"""
import argparse
import glob
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field

sys.dont_write_bytecode = True   # no __pycache__ in the source tree
import compare   # noqa: E402
import reports   # noqa: E402
import runner    # noqa: E402
import sandbox   # noqa: E402

GRADER = os.path.dirname(os.path.abspath(__file__))
KINDS = ("check", "train", "bench")
HIDDEN_SPECIAL = ("ranks", "rows")


class ManifestError(Exception):
    pass


@dataclass
class Hidden:
    """What --hidden draws for a case: the rank count, the rows per
    micro-batch (--batch = ranks x K x rows), and flags, alone or in tuples
    ("--n-head --n-embd" = [[2, 32], [4, 64]]) that must change together."""
    ranks: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    flags: list = field(default_factory=list)   # [(flag names, [value tuples])], sorted

    def __bool__(self):
        return bool(self.ranks or self.rows or self.flags)


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
    hidden: Hidden = field(default_factory=Hidden)   # for --hidden
    extension: bool = False   # a lab's graded extension: scored apart from the core
    before: "Before" = None   # train: a run first, in the same directory
    needs: str = ""           # a later lab its program must link (11_mixed_precision)


@dataclass
class Before:
    """A command a case runs first, in the same directory ({out})."""
    program: str
    ranks: int
    args: list


@dataclass
class Lab:
    name: str
    cases: list
    # per program, what it links besides the lab's own objects (paths under
    # the kit): the lab's manifest, labs/NN_name/lab.mk, as `make
    # print-links` expands it
    links: dict = field(default_factory=dict)

    @property
    def programs(self):
        return list(self.links)


@dataclass
class Draw:
    """One run of a case: its ranks and arguments, and (hidden mode) what was
    drawn, shown after the case's name."""
    ranks: int
    args: list
    label: str = ""
    flags: dict = field(default_factory=dict)   # the hidden flags drawn, for Before too


def parse_hidden(name, table):
    if not isinstance(table, dict):
        raise ManifestError(f"case {name}: hidden must be a table")
    h = Hidden()
    for key, choices in table.items():
        if not isinstance(choices, list) or not choices:
            raise ManifestError(f"case {name}: hidden {key!r} needs a non-empty list of choices")
        if key in HIDDEN_SPECIAL:
            if not all(isinstance(v, int) and v >= 1 for v in choices):
                raise ManifestError(f"case {name}: hidden {key} must be positive integers")
            setattr(h, key, list(choices))
            continue
        names = key.split()
        if not all(n.startswith("--") for n in names):
            raise ManifestError(f"case {name}: hidden key {key!r} is not ranks, rows, a flag "
                                "('--seed') nor flags that change together ('--n-head --n-embd')")
        values = []
        for c in choices:
            tup = c if isinstance(c, list) else [c]
            if len(tup) != len(names):
                raise ManifestError(f"case {name}: hidden {key!r}: {c!r} does not give one value "
                                    f"per flag")
            values.append(tuple(str(v) for v in tup))
        h.flags.append((tuple(names), values))
    h.flags.sort()
    if h.rows and "--batch" in [n for names, _ in h.flags for n in names]:
        raise ManifestError(f"case {name}: hidden rows sets --batch, do not draw it too")
    return h


def load_lab(path):
    name = os.path.basename(path)[:-len(".toml")]
    links = runner.lab_links().get(name, {})
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
        stale = [k for k in ("programs", "apps", "link", "include") if k in doc]
        if stale:
            raise ManifestError(f"{path}: {', '.join(stale)}: what a lab links is its manifest's "
                                f"(labs/{name}/lab.mk), not the cases'")
        cases = []
        for c in doc["case"]:
            case = Case(name=c["name"], kind=c["kind"], program=c["program"],
                        ranks=int(c.get("ranks", 1)), args=[str(a) for a in c.get("args", [])],
                        points=float(c["points"]), timeout=float(c.get("timeout", 120)),
                        checks=list(c.get("checks", [])), outputs=dict(c.get("outputs", {})),
                        hidden=parse_hidden(c["name"], c.get("hidden", {})),
                        extension=bool(c.get("extension", False)), needs=str(c.get("needs", "")))
            if case.needs and not os.path.isdir(os.path.join(runner.ROOT, "labs", case.needs)):
                raise ManifestError(f"case {case.name}: needs {case.needs!r}, which is not a lab")
            if "before" in c:
                b = c["before"]
                case.before = Before(str(b["program"]), int(b.get("ranks", 1)),
                                     [str(a) for a in b.get("args", [])])
                if case.kind != "train" or case.before.program not in links:
                    raise ManifestError(f"case {case.name}: before needs a train case and a "
                                        "program of the lab's")
            if case.kind not in KINDS:
                raise ManifestError(f"case {case.name}: kind must be one of {', '.join(KINDS)}")
            if case.program not in links:
                raise ManifestError(f"case {case.name}: program {case.program} is not one of "
                                    f"labs/{name}/lab.mk's programs ({', '.join(links) or 'none'})")
            unknown = [k for k in case.checks if k not in compare.CHECKS]
            if unknown:
                raise ManifestError(f"case {case.name}: unknown check(s) {unknown}")
            most_ranks = max([case.ranks] + case.hidden.ranks)
            if case.kind == "train" and most_ranks > 1 and "consistency" not in case.checks:
                raise ManifestError(f"case {case.name}: a training case on several ranks must "
                                    "list the 'consistency' check (grader/README.md)")
            cases.append(case)
        return Lab(name, cases, links)
    except (OSError, KeyError, TypeError, ValueError, tomllib.TOMLDecodeError) as e:
        raise ManifestError(f"{path}: {e!r}") from None


def set_aside_unlinked(labs):
    """Leave out the cases whose program cannot link the later lab they
    need (a handout before that lab's solution is released: lab 04's bf16
    case needs lab 11's mixed precision, and its train_tp links the stand-in
    that refuses --precision); one line says which, and why."""
    for lab in labs:
        keep = []
        for c in lab.cases:
            if c.needs and not any(f"/{c.needs}/" in x for x in lab.links.get(c.program, [])):
                points = f"{reports.fmt_points(c.points)} point{'' if c.points == 1 else 's'}"
                what = c.needs[3:].replace("_", " ")
                print(f"grade: not graded here: {lab.name} '{c.name}' ({points}) needs lab "
                      f"{c.needs[:2]} ({what}), whose solution this tree does not have yet; it "
                      "counts once that lab is released")
                continue
            keep.append(c)
        lab.cases = keep


def all_labs(pattern):
    paths = sorted(glob.glob(os.path.join(GRADER, "cases", "*.toml")))
    labs = [load_lab(p) for p in paths]
    if pattern != "all":
        labs = [lab for lab in labs if lab.name == pattern or lab.name.startswith(pattern + "_")]
        if not labs:
            names = ", ".join(os.path.basename(p)[:2] for p in paths)
            raise ManifestError(f"no lab {pattern!r} (labs: {names})")
    return labs


# ---- what a case runs --------------------------------------------------------

def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args[:-1] else None


def set_flag(args, flag, value):
    """args with flag's value replaced (or the flag appended)."""
    args = list(args)
    if flag in args[:-1]:
        args[args.index(flag) + 1] = value
    else:
        args += [flag, value]
    return args


def fixed_draw(case):
    return Draw(case.ranks, list(case.args))


def draw_case(case, rng):
    """A random variant of case from its hidden ranges (the same for the
    solution and the student). Draws in a fixed order: ranks, the flags
    (sorted), rows."""
    h = case.hidden
    if not h:
        return fixed_draw(case)
    ranks = rng.choice(h.ranks) if h.ranks else case.ranks
    chosen = {}
    for names, values in h.flags:
        chosen.update(zip(names, rng.choice(values)))
    if h.rows:
        k = int(chosen.get("--grad-accum") or flag_value(case.args, "--grad-accum") or 1)
        chosen["--batch"] = str(ranks * k * rng.choice(h.rows))
    args, shown = list(case.args), [f"-np {ranks}"] if h.ranks else []
    for flag in sorted(chosen):
        args = set_flag(args, flag, chosen[flag])
        shown += [flag, chosen[flag]]
    return Draw(ranks, args, "[" + " ".join(shown) + "]", chosen)


# the degrees a case's name may state ("pp 2", "m 4"), by the flag that sets them
NAMED_DEGREES = {"--dp": "dp", "--pp": "pp", "--tp": "tp", "--cp": "cp", "--ep": "ep", "--micro-batches": "m",
                 "--dp-shard": "shard", "--zero": "stage"}


def shown_name(case, draw):
    """The case's name as the draw ran it, then the draw: a rank count
    ("4 ranks"), degree ("pp 2", "m 4") or chunk count ("2 chunks") the
    name states is the drawn one."""
    if not draw.label:
        return case.name
    name = case.name
    if case.hidden.ranks:
        name = re.sub(r"\b\d+ ranks\b", f"{draw.ranks} ranks", name)
    for flag, word in NAMED_DEGREES.items():
        if flag in draw.flags:
            name = re.sub(rf"\b{word} \d+\b", f"{word} {draw.flags[flag]}", name)
    if "--chunks" in draw.flags:
        name = re.sub(r"\b\d+ chunks\b", f"{draw.flags['--chunks']} chunks", name)
    return name + " " + draw.label


def case_argvs(case, draw, programs, out_dir):
    """The commands of a case's run, in order: its before run's (with the
    drawn flags), then its own."""
    def argv(program, ranks, args):
        a = [programs[program]] + [x.replace("{out}", out_dir) for x in args]
        return runner.mpirun_argv(ranks, a) if ranks > 1 else a
    cmds = []
    if case.before:
        args = case.before.args
        for flag in sorted(draw.flags):
            args = set_flag(args, flag, draw.flags[flag])
        cmds.append(argv(case.before.program, case.before.ranks, args))
    return cmds + [argv(case.program, draw.ranks, draw.args)]


def run_all(argvs, timeout, run):
    """run(argv) for each argv in turn until one fails: that one's result
    (its output after the earlier ones'), or the last's; seconds summed."""
    outputs, seconds = [], 0.0
    for i, argv in enumerate(argvs):
        res = run(argv)
        seconds += res.seconds
        outputs.append(res.output)
        if res.failure(timeout) or i == len(argvs) - 1:
            return runner.RunResult(res.status, res.timed_out, seconds,
                                    "\n".join(outputs)[-runner.OUTPUT_KEEP:])


def slug(name):
    """A case's directory name: its name with spaces as underscores."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def fresh_dir(path):
    if os.path.lexists(path) and not os.path.isdir(path) or os.path.islink(path):
        os.remove(path)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write_fresh(path, text):
    """Write text into a new file at path (whatever was there, a link
    included, is removed first: the run's directory may be the student's)."""
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def lab_sources(src_root, lab):
    return os.path.join(src_root, lab.name)


def copy_sources(src, dst):
    """The lab's .c and .h files (regular files, not links) into dst."""
    os.makedirs(dst, exist_ok=True)
    if not os.path.isdir(src):
        return
    for name in sorted(os.listdir(src)):
        if name.endswith((".c", ".h")):
            sandbox.copy_regular(os.path.join(src, name), os.path.join(dst, name))
            if os.path.exists(os.path.join(dst, name)):
                os.chmod(os.path.join(dst, name), 0o644)


# ---- the student's builds and runs -------------------------------------------

class Student:
    """Builds and runs the student's code: in the sandbox when isolation is
    on, else in place (out/LAB/build, out/LAB/CASE)."""

    def __init__(self, iso):
        self.iso = iso
        self.kit = None   # the sandbox's copy of the kit for the lab being graded

    def _kit(self, lab):
        """A fresh copy, in the sandbox, of what the lab's builds and runs
        need from the kit (and nothing of another lab's)."""
        self.kit = self.iso.shared_dir(lab.name + "-kit")
        for rel in runner.kit_inputs(lab) + [os.path.join("build", "data", "synth.tok")]:
            src, dst = os.path.join(runner.ROOT, rel), os.path.join(self.kit, rel)
            if os.path.exists(src):
                os.makedirs(os.path.dirname(dst), mode=0o755, exist_ok=True)
                shutil.copyfile(src, dst)
                os.chmod(dst, 0o644)
        for d, _, _ in os.walk(self.kit):
            os.chmod(d, 0o755)
        return self.kit

    def build(self, src_root, lab, report_dir):
        """(programs by name, None) or (None, reason)."""
        src = lab_sources(src_root, lab)
        if not os.path.isdir(src):
            return None, f"no directory {src}"
        if not self.iso.on:
            return runner.build_lab(src, lab, os.path.join(report_dir, "build"))
        kit = self._kit(lab)
        src_copy = os.path.join(kit, "src", lab.name)
        shutil.rmtree(src_copy, ignore_errors=True)
        copy_sources(src, src_copy)
        os.chmod(os.path.dirname(src_copy), 0o755)
        os.chmod(src_copy, 0o755)
        uid = self.iso.new_uid()
        build_dir = self.iso.new_dir(lab.name + "-build", uid)
        try:
            programs, reason = runner.build_lab(
                src_copy, lab, build_dir, kit=kit,
                wrap=lambda argv: self.iso.command(argv, uid, kit),
                base_env=self.iso.env({}, build_dir))
        finally:
            self.iso.after(uid)
        if reason:
            shutil.rmtree(build_dir, ignore_errors=True)
            return None, reason
        bin_dir = os.path.join(kit, "bin", lab.name)
        os.makedirs(bin_dir, mode=0o755, exist_ok=True)
        for prog, path in programs.items():
            dst = os.path.join(bin_dir, prog)
            if not sandbox.copy_regular(path, dst):
                return None, f"build failed: {prog} was not built"
            os.chmod(dst, 0o755)
            programs[prog] = dst
        shutil.rmtree(build_dir, ignore_errors=True)
        return programs, None

    def run(self, case, draw, programs, report_dir):
        """Run the case into a fresh report_dir; returns the RunResult."""
        fresh_dir(report_dir)
        env = runner.watchdog_env(case.timeout)
        if not self.iso.on:
            res = run_all(case_argvs(case, draw, programs, report_dir), case.timeout,
                          lambda a: runner.run(a, case.timeout, env=env))
        else:
            uid = self.iso.new_uid()
            home = self.iso.new_dir(slug(case.name), uid)
            run_dir = os.path.join(home, "out")
            os.mkdir(run_dir, 0o700)
            os.chown(run_dir, uid, uid)
            try:
                res = run_all(case_argvs(case, draw, programs, run_dir), case.timeout,
                              lambda a: runner.run(self.iso.command(a, uid, self.kit),
                                                   case.timeout, cwd=self.iso.base, env=env,
                                                   base_env=self.iso.env({}, home)))
            finally:
                self.iso.after(uid)
            sandbox.copy_outputs(run_dir, report_dir)
            shutil.rmtree(home, ignore_errors=True)
        write_fresh(os.path.join(report_dir, "log.txt"), res.output)
        return res


# ---- scoring -----------------------------------------------------------------

def check_bench_outputs(case, run):
    for name, columns in case.outputs.items():
        rows = compare.read_csv(run, columns, name)
        for i, row in enumerate(rows):
            for col in columns:
                v = compare.number(row[col], f"{name} row {i + 1} {col}")
                if not v > 0:
                    return f"{name} row {i + 1}: {col} = {row[col]} (expected a positive number)"
    return None


def score_train(case, run, ref, result):
    """Each check scores its share; when the losses differ, the others do
    not: memory, bytes and parameters that agree with the reference's mean
    nothing for a run that computes something else (a program that skips
    its communication uses the right memory). A check whose reason is a
    compare.Zero (another kind of collective or group, another schedule)
    scores the whole case zero: the layout's work is the grade."""
    outcome = {}
    for check in case.checks:
        if not compare.has_reference(check, ref):
            outcome[check] = (f"the reference has no {compare.FILES[check]} (instructors: "
                              "make references)")
            continue
        try:
            outcome[check] = compare.CHECKS[check](run, ref)
        except compare.BadOutput as e:
            outcome[check] = str(e)
    wrong_losses = outcome.get("loss") is not None and "loss" in outcome
    other_work = [c for c in case.checks if isinstance(outcome[c], compare.Zero)]
    share = case.points / len(case.checks)
    unscored = []
    for check in case.checks:
        if outcome[check] is not None:
            result.reasons.append(f"{check}: {outcome[check]}")
        elif wrong_losses or other_work:
            unscored.append(check)
        else:
            result.points += share
    if unscored:
        why = ("the losses differ" if wrong_losses else
               f"{' and '.join(other_work)} show{'s' if len(other_work) == 1 else ''} other work "
               "than the layout's")
        result.reasons.append(f"{', '.join(unscored)}: not scored while {why}")


def score_case(student, case, draw, programs, report_dir, ref):
    """Run the student's case and score it against ref (compare.Outputs);
    returns a reports.Result."""
    res = student.run(case, draw, programs, report_dir)
    failure = res.failure(case.timeout)
    name = shown_name(case, draw)
    result = reports.Result(name, 0.0, case.points, [], res.seconds, res.output,
                            extension=case.extension)
    if failure:
        result.reasons.append(failure)
        return result
    run = compare.Outputs(directory=report_dir)
    try:
        if case.kind == "check":
            result.points = case.points
        elif case.kind == "bench":
            reason = check_bench_outputs(case, run)
            result.points = case.points if reason is None else 0.0
            if reason:
                result.reasons.append(reason)
        else:
            score_train(case, run, ref, result)
            metrics = ref.data("metrics.csv")
            if "loss" in case.checks and metrics is not None:
                ref_metrics = os.path.join(report_dir, "reference_metrics.csv")
                write_fresh(ref_metrics, metrics.decode("utf-8", errors="replace"))
                result.chart = reports.loss_chart(report_dir, ref_metrics, case.name)
    except compare.BadOutput as e:
        result.reasons.append(str(e))
    return result


def zeros(lab, reason):
    return [reports.Result(c.name, 0.0, c.points, [reason], 0.0, "", extension=c.extension)
            for c in lab.cases]


def reference_outputs(lab, case):
    return compare.Outputs(directory=os.path.join(GRADER, "reference", lab.name, slug(case.name)))


class Progress:
    """The results so far; the reports are rewritten after each case, with
    the cases not yet graded marked as not reached: a grader killed at a
    time limit (Gradescope's) leaves a score for what it finished."""

    def __init__(self, args, labs):
        self.args, self.labs = args, labs
        self.start = time.monotonic()
        self.results = {lab.name: [] for lab in labs}

    def add(self, lab, *results):
        self.results[lab.name].extend(results)
        done = sum(map(len, self.results.values()))
        cases = sum(len(lab.cases) for lab in self.labs)
        if done < cases:
            self.write(reports.write_files, f"(partial: {done} of {cases} cases graded so far)")

    def write(self, how, *notes):
        everything = {lab.name: self.results[lab.name] + [
            reports.not_reached(c.name, c.points, c.extension)
            for c in lab.cases[len(self.results[lab.name]):]] for lab in self.labs}
        if self.args.hidden:
            notes = (f"(hidden mode, seed {self.args.hidden_seed})",) + notes
        return how(everything, self.args.out, time.monotonic() - self.start, notes,
                   self.args.results)


def grade(args, labs, student, progress):
    for lab in labs:
        out = os.path.join(args.out, lab.name)
        os.makedirs(out, exist_ok=True)
        programs, reason = student.build(args.src, lab, out)
        if reason:
            progress.add(lab, *zeros(lab, reason))
            continue
        for c in lab.cases:
            progress.add(lab, score_case(student, c, fixed_draw(c), programs,
                                         os.path.join(out, slug(c.name)),
                                         reference_outputs(lab, c)))


def solution_runs(args, lab, draws):
    """Build the solutions and run every training case's draw in a private
    directory (mode 0700, outside the output tree), keep the files the
    checks read in memory, and delete the directory: nothing of the
    solutions is left on disk when the student's code runs. Returns
    {case index: compare.Outputs}."""
    private = tempfile.mkdtemp(prefix="dtlab-solution-")
    try:
        programs, reason = runner.build_lab(lab_sources(args.solutions, lab), lab,
                                            os.path.join(private, "build"))
        if reason:
            raise ManifestError(f"the solutions of {lab.name} do not build: {reason}")
        refs = {}
        for i, (c, draw) in enumerate(zip(lab.cases, draws)):
            if c.kind != "train":
                continue
            run_dir = os.path.join(private, f"case{i}")
            os.mkdir(run_dir)
            res = run_all(case_argvs(c, draw, programs, run_dir), c.timeout,
                          lambda a: runner.run(a, c.timeout, env=runner.watchdog_env(c.timeout)))
            failure = res.failure(c.timeout)
            if failure:
                raise ManifestError(f"the solution failed case {lab.name}/{c.name} "
                                    f"{draw.label}: {failure}")
            refs[i] = compare.Outputs.load(run_dir, [compare.FILES[k] for k in c.checks])
        return refs
    finally:
        shutil.rmtree(private, ignore_errors=True)


def grade_hidden(args, labs, student, progress):
    """Student and solution on the same randomized cases, compared live: no
    stored file can stand in for a run."""
    for lab in labs:
        out = os.path.join(args.out, lab.name)
        os.makedirs(out, exist_ok=True)
        # one generator per case: --case replays the draw of a full run
        draws = [draw_case(c, random.Random(f"{args.hidden_seed}/{lab.name}/{c.name}"))
                 for c in lab.cases]
        refs = solution_runs(args, lab, draws)
        programs, reason = student.build(args.src, lab, out)
        if reason:
            progress.add(lab, *zeros(lab, reason))
            continue
        for i, (c, d) in enumerate(zip(lab.cases, draws)):
            progress.add(lab, score_case(student, c, d, programs, os.path.join(out, slug(c.name)),
                                         refs.get(i, compare.Outputs(files={}))))


def require_solutions(args, labs):
    """--hidden and --make-references run the solutions: every lab's must be
    here, known before any work (a handout has only the released ones)."""
    mode = "--make-references" if args.make_references else "--hidden"
    for lab in labs:
        path = lab_sources(args.solutions, lab)
        if not os.path.isdir(path):
            raise ManifestError(f"{mode} runs the solutions, and {lab.name}'s are not here "
                                f"(no directory {path}; a handout has only the released "
                                "labs' solutions)")


def make_references(args, labs):
    for lab in labs:
        refs = solution_runs(args, lab, [fixed_draw(c) for c in lab.cases])
        for i, c in enumerate(lab.cases):
            if i not in refs:
                continue
            ref = fresh_dir(os.path.join(args.reference_out, lab.name, slug(c.name)))
            names = []
            for check in c.checks:
                for name, data in compare.reference_files(check, refs[i]).items():
                    with open(os.path.join(ref, name), "wb") as f:
                        f.write(data)
                    names.append(name)
            print(f"grade: reference {lab.name}/{c.name}: {', '.join(names)}")


def fail_under(text, labs):
    """--fail-under's points: "10", or "80%" of the graded core cases' (of
    the extension cases' when only those are graded, with --case)."""
    cases = [c for lab in labs for c in lab.cases]
    best = sum(c.points for c in cases if not c.extension) or sum(c.points for c in cases)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(%?)", text.strip())
    if not m:
        raise ManifestError(f"--fail-under takes points (10) or a percentage (80%), got {text!r}")
    value = float(m.group(1))
    points = best * value / 100 if m.group(2) else value
    if points > best + 1e-9:
        raise ManifestError(f"--fail-under {text} is more than the {reports.fmt_points(best)} points "
                            "the graded cases give: every run would fail")
    return points - 1e-9


def scored(results):
    """(points, best) of the core's cases, or of the extensions' when only
    those were graded: what --fail-under compares."""
    rs = [r for lab in results.values() for r in lab]
    core = [r for r in rs if not r.extension] or rs
    return sum(r.points for r in core), sum(r.max_points for r in core)


def main():
    ap = argparse.ArgumentParser(description="Grade the labs against reference runs.")
    ap.add_argument("--lab", default="all", help="lab number or name (default: all)")
    ap.add_argument("--case", default=None, help="grade only the cases whose name contains this")
    ap.add_argument("--core", action="store_true",
                    help="grade the core's cases only, not the extensions'")
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
    ap.add_argument("--isolation", default="auto", choices=("auto",) + sandbox.LEVELS,
                    help="how the student's code is kept from the solutions (default auto: "
                         "the strongest this machine allows; see grader/README.md)")
    ap.add_argument("--hide", action="append", default=[], metavar="PATH",
                    help="also keep PATH from the student's code (repeatable)")
    ap.add_argument("--fail-under", default="100%", metavar="SCORE",
                    help="exit 1 when the core's points are under SCORE: points (10) or a share "
                         "of the graded cases' (80%%); default 100%%, 0 never fails")
    ap.add_argument("--results", default=None, metavar="PATH",
                    help="also write results.json at PATH, after every case (Gradescope's "
                         "/autograder/results/results.json)")
    ap.add_argument("--make-references", action="store_true",
                    help="rerun the solutions and rewrite the references")
    ap.add_argument("--reference-out", default=os.path.join(GRADER, "reference"),
                    help="where --make-references writes (default grader/reference)")
    args = ap.parse_args()
    for d in ("src", "solutions", "out", "reference_out"):
        setattr(args, d, os.path.abspath(getattr(args, d)))
    if args.results:
        args.results = os.path.abspath(args.results)
    # a stopped grader still restores what it locked and removes its sandbox
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    iso = None
    try:
        labs = all_labs(args.lab)
        if not args.timeout_scale > 0:
            raise ManifestError("--timeout-scale must be positive")
        for lab in labs:
            for c in lab.cases:
                c.timeout *= args.timeout_scale
            if args.case:
                lab.cases = [c for c in lab.cases if args.case in c.name]
            if args.core:
                lab.cases = [c for c in lab.cases if not c.extension]
        if not any(lab.cases for lab in labs):
            raise ManifestError(f"no case matches {args.case!r}" + (" in the core" if args.core else ""))
        if not os.path.isdir(args.src):
            raise ManifestError(f"no such directory: {args.src}")
        if args.hidden or args.make_references:
            require_solutions(args, labs)
        if not args.make_references:
            set_aside_unlinked(labs)
            if not any(lab.cases for lab in labs):
                raise ManifestError("every case chosen needs a later lab this tree does not have yet")
        threshold = fail_under(args.fail_under, labs)
        dirs = [("--out", args.out)]
        if args.make_references:
            dirs.append(("--reference-out", args.reference_out))
        if args.results:
            dirs.append(("--results", os.path.dirname(args.results)))
        for flag, path in dirs:
            problem = reports.output_dir_problem(path)
            if problem:
                raise ManifestError(f"{flag}: {problem}")
        if args.make_references:
            make_references(args, labs)
            return 0
        if args.hidden and args.hidden_seed is None:
            args.hidden_seed = random.SystemRandom().randrange(1 << 31)
        iso = sandbox.Isolation(args.isolation, [runner.ROOT, args.solutions, args.out]
                                + args.hide).start()
        student = Student(iso)
        progress = Progress(args, labs)
        (grade_hidden if args.hidden else grade)(args, labs, student, progress)
    except (ManifestError, sandbox.IsolationError) as e:
        print(f"grade: error: {e}", file=sys.stderr)
        return 2
    finally:
        if iso:
            iso.stop()
    progress.write(reports.write_all)
    got, best = scored(progress.results)
    if got < threshold:
        pts = reports.fmt_points
        print(f"grade: {pts(got)}/{pts(best)} is under --fail-under {args.fail_under} "
              f"({pts(threshold)} points): exit status 1", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
