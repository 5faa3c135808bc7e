"""The grader's reports: a terminal table, JUnit XML for CI systems,
Gradescope's results.json, and a loss chart per training case.

Gradescope's format (its autograder specification): top-level "score",
"output", "output_format", "execution_time" (seconds), "tests": [{"name",
"score", "max_score", "status", "output", "output_format"}].
JUnit has no official schema; the shape every CI reader accepts is
testsuites > testsuite(name, tests, failures, skipped, time) >
testcase(name, classname, time) with a <failure message=...> child when it
lost points, or <skipped> for an extension not attempted.

The reports are rewritten after every case (write_files), so a grader
killed at a time limit leaves the cases it finished scored and the others
marked as not reached.
"""
import json
import os
import re
import stat
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass



@dataclass
class Result:
    name: str
    points: float
    max_points: float
    reasons: list
    seconds: float
    output: str
    chart: str = None
    extension: bool = False   # scored apart: the core's totals leave it out

    @property
    def label(self):
        return ("extension: " if self.extension else "") + self.name

    @property
    def passed(self):
        return not self.reasons and self.points >= self.max_points

    @property
    def unattempted(self):
        """An extension still as the skeleton left it: every reason is its
        `not implemented`. CI shows it as skipped, not failed: it is optional."""
        return self.extension and bool(self.reasons) and all(
            r.startswith("not implemented") for r in self.reasons)

    @property
    def fraction(self):
        return f"{fmt_points(self.points)}/{fmt_points(self.max_points)}"

    @property
    def points_text(self):
        return f"{self.fraction} points"

    @property
    def reason(self):
        return "; ".join(self.reasons) if self.reasons else "ok"


NOT_REACHED = "not graded: the grader stopped before this case (a time limit?)"


def not_reached(name, max_points, extension):
    return Result(name, 0.0, max_points, [NOT_REACHED], 0.0, "", extension=extension)


def fmt_points(x):
    return f"{x:g}"


def table(results):
    rows = [("lab", "case", "points", "reason")]
    for lab, rs in results.items():
        for r in rs:
            rows.append((lab, r.label, r.fraction, r.reason))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  ------")
    # the core's totals first (what a lab requires), the extensions' apart:
    # an unfinished extension never lowers the core's score
    for lab, rs in results.items():
        got, best = totals(r for r in rs if not r.extension)
        lines.append(f"{lab}: {fmt_points(got)}/{fmt_points(best)}")
        if any(r.extension for r in rs):
            ext = totals(r for r in rs if r.extension)
            lines.append(f"{lab} extension: {fmt_points(ext[0])}/{fmt_points(ext[1])}")
    got, best = totals(r for rs in results.values() for r in rs if not r.extension)
    lines.append(f"total: {fmt_points(got)}/{fmt_points(best)}")
    ext = totals(r for rs in results.values() for r in rs if r.extension)
    if ext[1] > 0:
        lines.append(f"extensions: {fmt_points(ext[0])}/{fmt_points(ext[1])}")
    return "\n".join(lines), got, best


def totals(results):
    rs = list(results)
    return sum(r.points for r in rs), sum(r.max_points for r in rs)


def output_dir_problem(path):
    """None when the reports can be written into path (made when missing),
    else why not: the same rules as the kit's programs (common/fileio.h)."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{path} exists and is not a directory"
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".grade-probe.{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        return f"cannot write into {path}: {e.strerror}"
    return None


def write_atomic(path, write):
    """write(f) into path.tmp.PID, then rename it over path: a report is
    whole or absent, and a directory, device or FIFO at path is never
    replaced (fileio.h's rules)."""
    if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(f"{path} is not a regular file: not replaced")
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def junit(results, path):
    """One testsuite per lab. The points are in each case's system-out and
    failure message (CI viewers show those; few show <properties>)."""
    suites = ET.Element("testsuites")
    for lab, rs in results.items():
        skipped = sum(r.unattempted for r in rs)
        failures = sum(not r.passed for r in rs) - skipped
        suite = ET.SubElement(suites, "testsuite", name=lab, tests=str(len(rs)),
                              failures=str(failures), errors="0", skipped=str(skipped),
                              time=f"{sum(r.seconds for r in rs):.3f}")
        for r in rs:
            case = ET.SubElement(suite, "testcase", name=r.label, classname=f"grader.{lab}",
                                 time=f"{r.seconds:.3f}")
            ET.SubElement(case, "properties").append(
                ET.Element("property", name="points", value=r.fraction))
            if r.unattempted:
                ET.SubElement(case, "skipped",
                              message=f"optional extension not attempted: {r.reason}"[:500])
            elif not r.passed:
                fail = ET.SubElement(case, "failure", message=f"{r.points_text}: {r.reason}"[:500])
                fail.text = r.output[-2000:]
            ET.SubElement(case, "system-out").text = f"{r.points_text}: {r.reason}\n"
    write_atomic(path, lambda f: ET.ElementTree(suites).write(f, encoding="unicode",
                                                             xml_declaration=True))


def markdown_block(text):
    """text shown verbatim in Markdown (Gradescope's "md"): a fence longer
    than any run of backticks inside it."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall("`+", text)), default=0))
    return f"{fence}\n{text}\n{fence}"


def gradescope_output(r):
    """A case's text on Gradescope: its reason, then the end of its log when
    it lost points (the first FAIL line, a fatal: line, the progress)."""
    text = f"**{r.points_text}**: {r.reason}"
    if not r.passed and r.output.strip():
        text += "\n\nThe end of its log:\n\n" + markdown_block(r.output[-1500:].rstrip())
    return text


def gradescope(results, path, summary, seconds):
    tests = []
    for lab, rs in results.items():
        for r in rs:
            tests.append({"name": f"{lab}: {r.label}", "score": r.points, "max_score": r.max_points,
                          "status": "passed" if r.passed else "failed",
                          "output": gradescope_output(r), "output_format": "md",
                          "visibility": "visible"})
    doc = {"score": sum(t["score"] for t in tests), "execution_time": round(seconds),
           "output": markdown_block(summary), "output_format": "md",
           "visibility": "visible", "tests": tests}
    write_atomic(path, lambda f: json.dump(doc, f, indent=2))


def loss_chart(run_dir, ref_metrics, title):
    """The student's loss (run_dir/metrics.csv) over the reference's (the
    file ref_metrics); returns the PNG path, or None when gnuplot fails (a
    chart never costs points)."""
    png = os.path.join(run_dir, "loss_vs_reference.png")
    script = f"""
set terminal pngcairo size 800,480 font ",10"
set output '{png}'
set datafile separator ','
set key top right
set xlabel 'step'
set ylabel 'training loss'
set title '{title}: your run vs the reference'
set grid
plot '{ref_metrics}' using 'step':'loss' with lines lw 4 lc rgb '#a0c4ff' title 'reference', \\
     '{run_dir}/metrics.csv' using 'step':'loss' with lines lw 1.5 lc rgb '#d62728' title 'yours'
"""
    try:
        res = subprocess.run(["gnuplot"], input=script, text=True, capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return png if res.returncode == 0 and os.path.exists(png) else None


def shown_path(path):
    """path relative to the current directory when under it, else whole"""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def write_files(results, out_dir, seconds, notes=(), results_copy=None):
    """report.txt, junit.xml and results.json in out_dir (and results.json
    also at results_copy, Gradescope's path); returns the table's text."""
    text = table(results)[0]
    text = "\n".join([text, *notes])
    write_atomic(os.path.join(out_dir, "report.txt"), lambda f: f.write(text + "\n"))
    junit(results, os.path.join(out_dir, "junit.xml"))
    for path in filter(None, (os.path.join(out_dir, "results.json"), results_copy)):
        gradescope(results, path, text, seconds)
    return text


def write_all(results, out_dir, seconds, notes=(), results_copy=None):
    """write_files, then the table, the charts and where they are on the console"""
    print(write_files(results, out_dir, seconds, notes, results_copy))
    for c in (r.chart for rs in results.values() for r in rs if r.chart):
        print(f"chart: {shown_path(c)}")
    print(f"grade: wrote {shown_path(out_dir)}/{{report.txt,junit.xml,results.json}}")
