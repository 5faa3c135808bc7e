#!/usr/bin/env python3
"""check_doc_figures.py [--run] [--list] FILE.md...: the figures a lab's
README or HINTS states are either rerun or say where they came from.

A block of Markdown (a paragraph, a list, a table, a fenced code block)
is *checked* when the line before it is a comment naming the command that
produces its figures (invisible on GitHub; several such lines add their
outputs together):

    <!-- check: build/labs/06_pipeline/pipeline_schedule --schedule 1f1b -p 4 -m 8 -->

With --run, each command runs once (from a scratch directory that sees
the kit's build/, so its runs/ go nowhere near the user's; a lab's
build/labs/NN_name/ is its solution's build/solutions/NN_name/, and in a
handout a block of a lab whose solution is not released is skipped: the
figures are the solution's) and every significant figure of the block (a
number with a decimal point, or an integer of 100 or more; inline code,
dates, citations' years and timings aside) must be one of the output's numbers, to the
figure's own precision: 0.27 is any x with |x - 0.27| <= 0.005, 27% also
0.27, 47,358,048 exactly.

Without a command, two kinds of figure must be *labelled* with where they
came from, in their block, the one before a table (its caption) or the
first paragraph of their section (a section of measurements says where
once; a date may break across lines):
  - times and rates (ms, µs, s, GB/s, MB/s, GFLOP/s, TFLOP/s, tok/s):
    another machine's measurement; the label names a machine and a date
    ("the kit's reference VM, 2 cores, November 2026"), or a source (a
    paper, a spec sheet);
  - counts the kit prints (10,000 or more bytes, calls, parameters,
    checks): a figure that drifts when the code changes; check it.
Code blocks without a command are not scanned (they are commands and
code). --list prints each checked block's command and figures.

Exit status 0 when every file passes, 1 with one line per problem
("FILE:LINE: ..."), 2 on bad usage. DOC_CHECK_TIMEOUT: seconds a command
may take (default 120).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = re.compile(r"^<!--\s*check:\s*(.*?)\s*-->\s*$")
TIME_UNIT = r"(?:GB/s|MB/s|GFLOP/s|TFLOP/s|k?\s?tok/s|ms|µs|us|s)(?![\w/])"
TIMING = re.compile(r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s?" + TIME_UNIT)
COUNT = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d{5,})\s*(?:bytes|B|calls|parameters|params|checks)\b")
# 47,358,048 or 0.27 or 4.7e-7 or 27%; in "1,2,3" only the 1 (not a figure)
NUMBER = re.compile(r"(?<![\w.,])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?%?(?!\d)")
MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
DATE = re.compile(rf"\b(?:(?:{MONTHS})\s+20\d\d|20\d\d-\d\d(?:-\d\d)?)\b")
MACHINE = re.compile(r"\b(?:VM|cores?|GPUs?|machine|laptop|H100|H200|A100|workstation|node)\b")
SOURCE = re.compile(r"\b(?:et al\.|paper|spec sheet|datasheet|specification|report)\b", re.I)
INLINE_CODE = re.compile(r"`[^`]*`")
CITATION = re.compile(r"(?:et al\.,?|[A-Z][a-z]+,?)\s+\(?(?:19|20)\d\d[a-z]?\)?")   # Qi et al. 2023
COMMENT = re.compile(r"<!--.*?-->", re.S)
LAB_BUILD = re.compile(r"build/labs/(\d\d_[a-z0-9_]+)/")


class Block:
    def __init__(self, line, text, code, commands, section):
        self.line, self.text, self.code, self.commands = line, text, code, commands
        self.section = section   # the index of its section's first block


def blocks(path):
    """The file's blocks, each with the commands of the check lines above it."""
    out, pending, cur, start, fence, section = [], [], [], 0, None, 0
    lines = open(path, encoding="utf-8").read().split("\n")

    def close(code=False):
        nonlocal cur, pending, section
        if cur:
            if cur[0].startswith("#"):
                section = len(out) + 1     # the block after the heading
            out.append(Block(start, "\n".join(cur), code, pending, section))
            pending = []
        cur = []

    for i, line in enumerate(lines, 1):
        if fence:
            cur.append(line)
            if line.strip().startswith(fence):
                fence = None
                close(code=True)
            continue
        m = CHECK.match(line.strip())
        if m:
            close()
            pending.append(m.group(1))
            continue
        if line.strip().startswith(("```", "~~~")):
            close()
            fence, start, cur = line.strip()[:3], i, [line]
            continue
        if not line.strip() or line.startswith("#"):
            close()
            if not line.strip():
                continue
        if not cur:
            start = i
        cur.append(line)
    close()
    return out


def prose(text):
    """A block's text as read: no inline code, no comments."""
    return INLINE_CODE.sub(" ", COMMENT.sub(" ", text))


def says_where(text):
    return bool((DATE.search(text) and MACHINE.search(text)) or SOURCE.search(text))


def labelled(bs, i):
    """Block i, the one before it if it is a table (its caption) or its section's
    first paragraph (a section of measurements says where once) names
    where its numbers came from."""
    table = bs[i].text.lstrip().startswith("|")
    first = next((b for b in bs[bs[i].section:] if not b.code), None)   # the section's first paragraph
    near = [bs[i], bs[i - 1] if i and table else None, first]
    return any(b is not None and not b.code and says_where(prose(b.text)) for b in near)


def figures(block):
    """The block's significant figures: (text, value, tolerance, percent)."""
    text = DATE.sub(" ", prose(block.text) if not block.code else block.text)
    text = CITATION.sub(" ", text)
    text = TIMING.sub(" ", text)                       # timings vary run to run
    text = re.sub(r"\b[A-Za-z_][\w-]*\d[\w-]*", " ", text)   # names: gpt2-124m, tp2, x86_64
    out = []
    for m in NUMBER.finditer(text):
        s = m.group(0)
        pct = s.endswith("%")
        num = s.rstrip("%").replace(",", "")
        try:
            value = float(num)
        except ValueError:
            continue
        mant = num.split("e")[0].split("E")[0]
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        if decimals == 0 and abs(value) < 100 and not pct:
            continue
        exp = int(re.split("[eE]", num)[1]) if re.search("[eE]", num) else 0
        # a count is exact; a decimal or a percentage is rounded at its last digit
        tol = 0.5 * 10 ** (exp - decimals) * 1.000001 if decimals or exp or pct else 0
        out.append((s, value, tol, pct))
    return out


def output_numbers(text):
    """The numbers a command printed, read both ways a comma can go: as a
    separator (CSV) and as thousands' (1,234,567); not the digits of a name
    (F27, tp2)."""
    vals = []
    for t in (text, re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)):
        for m in re.finditer(r"(?<![A-Za-z_\d.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", t):
            vals.append(float(m.group(0)))
    return vals


def found(fig, numbers):
    _, value, tol, pct = fig
    for x in numbers:
        if abs(x - value) <= tol or (pct and abs(100 * x - value) <= tol):
            return True
    return False


def lab_copy(lab):
    """build/solutions/LAB when that solution is here, else None: the figures
    are the solution's (a student's unfinished copy would fail them)."""
    if os.path.isdir(os.path.join(ROOT, "solutions", lab)):
        return f"build/solutions/{lab}/"
    return None


class Runner:
    def __init__(self, timeout):
        self.timeout, self.cache = timeout, {}
        self.scratch = tempfile.mkdtemp(prefix="doc-check.")
        os.symlink(os.path.join(ROOT, "build"), os.path.join(self.scratch, "build"))
        for extra in ("datasets", "tools", "bench", "scripts"):
            os.symlink(os.path.join(ROOT, extra), os.path.join(self.scratch, extra))
        self.env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                        OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")

    def close(self):
        shutil.rmtree(self.scratch, ignore_errors=True)

    def run(self, command):
        """The command's output; raises Skip (a lab whose solution is not
        here) or Failed (it did not run, or exited non-zero)."""
        for lab in LAB_BUILD.findall(command):
            copy = lab_copy(lab)
            if copy is None:
                raise Skip()
            command = command.replace(f"build/labs/{lab}/", copy)
        if command not in self.cache:
            try:
                res = subprocess.run(["bash", "-c", command], cwd=self.scratch, env=self.env,
                                     capture_output=True, text=True, timeout=self.timeout)
                out = res.stdout + res.stderr
                why = f"exit status {res.returncode}" if res.returncode else None
            except subprocess.TimeoutExpired:
                out, why = "", f"timed out after {self.timeout} s"
            self.cache[command] = (out, why)
        out, why = self.cache[command]
        if why:
            tail = (out.strip().splitlines() or [""])[-1]
            raise Failed(f"`{command}` failed ({why}): {tail[:160]}")
        return out


class Skip(Exception):
    pass


class Failed(Exception):
    pass


def check_rerun(block, where, runner):
    """A checked block's problems: its figures that its commands' output
    lacks (Skip propagates)."""
    figs = figures(block)
    if not figs:
        return [f"{where}: a check line above a block with no figure to check"]
    if runner is None:
        return []
    try:
        numbers = output_numbers("\n".join(runner.run(c) for c in block.commands))
    except Failed as e:
        return [f"{where}: {e}"]
    commands = " ; ".join(block.commands)
    return [f"{where}: {f[0]} is not in the output of `{commands}`" for f in figs if not found(f, numbers)]


def check_unlabelled(bs, i, where):
    """An unchecked prose block's timings and large counts, unless labelled."""
    if bs[i].code or labelled(bs, i):
        return []
    text = prose(bs[i].text)
    return ([f"{where}: {' '.join(m.group(0).split())} is a measurement with no machine and "
             "date (or source) beside it, and no check line" for m in TIMING.finditer(text)]
            + [f"{where}: {' '.join(m.group(0).split())} is a figure of the kit's output with no "
               "check line (<!-- check: COMMAND -->) to rerun it" for m in COUNT.finditer(text)])


def check_file(path, runner, listing):
    """(problems, checked blocks skipped, checked blocks rerun)"""
    problems, skipped, checked = [], 0, 0
    rel = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
    bs = blocks(path)
    for i, b in enumerate(bs):
        where = f"{rel}:{b.line}"
        if not b.commands:
            problems += check_unlabelled(bs, i, where)
            continue
        if listing:
            shown = " ".join(f[0] for f in figures(b)) or "(no figure)"
            print(f"{where}: {' ; '.join(b.commands)}: {shown}")
        try:
            problems += check_rerun(b, where, runner)
            checked += runner is not None
        except Skip:
            skipped += 1
    return problems, skipped, checked


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    flags = [a for a in argv if a.startswith("--")]
    if not args or any(f not in ("--run", "--list") for f in flags):
        print("usage: check_doc_figures.py [--run] [--list] FILE.md...", file=sys.stderr)
        return 2
    for a in args:
        if not os.path.isfile(a):
            print(f"check_doc_figures: error: no such file: {a}", file=sys.stderr)
            return 2
    timeout = os.environ.get("DOC_CHECK_TIMEOUT", "120")
    if not timeout.isdigit() or int(timeout) < 1:
        print(f"check_doc_figures: error: DOC_CHECK_TIMEOUT must be whole seconds, got '{timeout}'",
              file=sys.stderr)
        return 2
    timeout = int(timeout)
    runner = Runner(timeout) if "--run" in flags else None
    problems, skipped, checked = [], 0, 0
    try:
        for a in args:
            p, s, c = check_file(os.path.abspath(a), runner, "--list" in flags)
            problems += p
            skipped += s
            checked += c
    finally:
        if runner:
            runner.close()
    for p in problems:
        print(p)
    ran = f", {checked} checked blocks rerun, {skipped} skipped" if runner else ""
    print(f"check_doc_figures: {len(args)} files{ran}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
