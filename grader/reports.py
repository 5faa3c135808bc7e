"""The grader's reports: a terminal table, JUnit XML for CI systems,
Gradescope's results.json, and a loss chart per training case.

Gradescope's format (its autograder specification): top-level "score",
"output", "tests": [{"name", "score", "max_score", "status", "output"}].
JUnit has no official schema; the shape every CI reader accepts is
testsuites > testsuite(name, tests, failures, time) > testcase(name,
classname, time) with a <failure message=...> child when it lost points.
"""
import json
import os
import stat
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def fmt_points(x):
    return f"{x:g}"


def table(results):
    rows = [("lab", "case", "points", "reason")]
    for lab, rs in results.items():
        for r in rs:
            reason = "; ".join(r.reasons) if r.reasons else "ok"
            rows.append((lab, r.label, f"{fmt_points(r.points)}/{fmt_points(r.max_points)}", reason))
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
    suites = ET.Element("testsuites")
    for lab, rs in results.items():
        suite = ET.SubElement(suites, "testsuite", name=lab, tests=str(len(rs)),
                              failures=str(sum(not r.passed for r in rs)), errors="0", skipped="0",
                              time=f"{sum(r.seconds for r in rs):.3f}")
        for r in rs:
            case = ET.SubElement(suite, "testcase", name=r.label, classname=f"grader.{lab}",
                                 time=f"{r.seconds:.3f}")
            ET.SubElement(case, "properties").append(
                ET.Element("property", name="points", value=f"{fmt_points(r.points)}/{fmt_points(r.max_points)}"))
            if not r.passed:
                fail = ET.SubElement(case, "failure", message="; ".join(r.reasons)[:500])
                fail.text = r.output[-2000:]
    write_atomic(path, lambda f: ET.ElementTree(suites).write(f, encoding="unicode",
                                                             xml_declaration=True))


def gradescope(results, path, summary):
    tests = []
    for lab, rs in results.items():
        for r in rs:
            tests.append({"name": f"{lab}: {r.label}", "score": r.points, "max_score": r.max_points,
                          "status": "passed" if r.passed else "failed",
                          "output": "; ".join(r.reasons) if r.reasons else "ok",
                          "visibility": "visible"})
    doc = {"score": sum(t["score"] for t in tests), "output": summary,
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


def write_all(results, out_dir, hidden_seed=None):
    text, got, best = table(results)
    if hidden_seed is not None:
        text += f"\n(hidden mode, seed {hidden_seed})"
    charts = [r.chart for rs in results.values() for r in rs if r.chart]
    print(text)
    for c in charts:
        print(f"chart: {os.path.relpath(c, ROOT)}")
    write_atomic(os.path.join(out_dir, "report.txt"), lambda f: f.write(text + "\n"))
    junit(results, os.path.join(out_dir, "junit.xml"))
    gradescope(results, os.path.join(out_dir, "results.json"), text)
    print(f"grade: wrote {os.path.relpath(out_dir, ROOT)}/{{report.txt,junit.xml,results.json}}")
    return got, best
