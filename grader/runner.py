"""Build a lab from any copy of its sources, and run its programs so that no
student program can take the grader down with it.

Every run is a new session (process group) under a wall-clock limit: on
timeout the whole group (mpirun and every rank) gets SIGTERM, then SIGKILL,
so nothing is left running. The outcome is classified into one short reason.
"""
import functools
import glob
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB_SYMBOLS = os.path.join("scripts", "lab_symbols.sh")   # relative to the kit
EXIT_USER_ERROR = 2        # common/check.h
EXIT_NOT_IMPLEMENTED = 3   # common/check.h
EXIT_COMM_TIMEOUT = 4      # common/check.h: the communication watchdog ended the job
OUTPUT_KEEP = 4000         # characters of a program's output kept for reports


@dataclass
class RunResult:
    status: int            # exit status; -N when killed by signal N
    timed_out: bool
    seconds: float
    output: str            # stdout and stderr together, the tail only

    def failure(self, timeout):
        """One line saying why the run failed, or None when it exited 0."""
        if self.timed_out:
            return f"timed out after {timeout:g} s (all ranks killed)"
        if self.status == 0:
            return None
        m = re.search(r"not implemented: (\S+)", self.output)
        if self.status == EXIT_NOT_IMPLEMENTED or m:
            return f"not implemented: {m.group(1) if m else 'a lab function'}"
        sig = signal_of(self)
        if sig:
            return f"crashed with signal {sig}"
        if self.status == EXIT_USER_ERROR:
            return "rejected its arguments: " + first_line(self.output, "error:")
        if self.status == EXIT_COMM_TIMEOUT:
            return first_line(self.output, "comm timeout:") or "a communication timed out"
        fatal = fatal_line(self.output)
        if fatal:
            return fatal
        fail = first_line(self.output, "FAIL")
        return f"exited with status {self.status}" + (f": {fail}" if fail else "")


def first_line(text, needle):
    for line in text.splitlines():
        if needle in line:
            return line.strip()[:200]
    return ""


def fatal_line(text):
    """The program's own words when it stopped itself (check.h: "PROG:
    fatal: file:line: message"), from "fatal:" on; "" when there is none."""
    m = re.search(r"(?m)\bfatal: \S+:\d+: .*$", text)
    return m.group(0).strip()[:200] if m else ""


def signal_of(result):
    """The signal that ended the program: ours (negative status), the shell
    convention 128+N, or mpirun's report of a rank that died."""
    if result.status < 0:
        return signal.Signals(-result.status).name
    m = re.search(r"exited on signal (\d+)", result.output)
    if m:
        return signal.Signals(int(m.group(1))).name
    if 128 < result.status < 128 + 65:
        try:
            return signal.Signals(result.status - 128).name
        except ValueError:
            return None
    return None


def watchdog_env(timeout):
    """The communication watchdog's limit for a case (common/watchdog.h):
    a third of the case's, so that a deadlock is reported with the ranks'
    states (who waits in what) long before the case is killed."""
    return {"KIT_COMM_TIMEOUT": f"{max(5.0, timeout / 3):g}"}


def mpirun_argv(ranks, argv):
    # --oversubscribe: more ranks than cores (graded on small CI machines),
    # where a waiting rank must yield its core to the rank it waits for;
    # -q: no banner when a rank exits non-zero (the reason is ours to give)
    return (["mpirun", "-q", "--oversubscribe", "--mca", "mpi_yield_when_idle", "1", "-np",
             str(ranks)] + argv)


def run(argv, timeout, cwd=ROOT, env=None, base_env=None):
    """argv in its own session under a wall-clock limit. The environment is
    base_env (default: the grader's, with root allowed to run MPI) plus env."""
    if base_env is None:
        full_env = dict(os.environ)
        full_env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    else:
        full_env = dict(base_env)
    full_env.update(env or {})
    start = time.monotonic()
    # the output goes to an unlinked file, not a pipe: a process that leaves
    # the group and keeps it open (a daemon) cannot make the grader wait
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            proc.wait()
        except BaseException:   # the grader itself is stopped: nothing is left running
            kill_group(proc.pid)
            raise
        kill_group(proc.pid)    # whatever of the group outlived its leader
        size = log.seek(0, os.SEEK_END)
        log.seek(max(0, size - 4 * OUTPUT_KEEP))
        text = as_shown(log.read().decode("utf-8", errors="replace"))
    return RunResult(proc.returncode, timed_out, time.monotonic() - start, text[-OUTPUT_KEEP:])


def as_shown(text):
    """text as a terminal leaves it: of a line redrawn in place ('\\r', a
    progress bar), its last state only. Logs, reports and JUnit failure texts
    then hold plain lines whatever a program prints."""
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))


def live_processes():
    """(pid, real uid, process group) of every process that runs. Zombies
    (dead, awaiting their parent's wait: a group's leader is the grader's
    own child until proc.wait()) run nothing and hold no file: they are
    left out, as waiting for their reaper would cost a whole grace period.
    The uid is the real one (/proc/PID/status): a process that makes
    itself non-dumpable gets a /proc entry owned by root."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()   # state, ppid, pgrp, ...
            with open(f"/proc/{pid}/status") as f:
                uid = next(int(x.split()[1]) for x in f if x.startswith("Uid:"))
        except (OSError, StopIteration, ValueError, IndexError):
            continue
        if fields[0] != "Z":
            out.append((int(pid), uid, int(fields[2])))
    return out


def group_running(pgid):
    """Whether a process of group pgid still runs (live_processes)."""
    return any(group == pgid for _, _, group in live_processes())


def kill_group(pgid):
    """SIGTERM to the whole group (mpirun forwards it to the ranks), then
    SIGKILL to whatever still runs after 5 s."""
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not group_running(pgid):
                return
            time.sleep(0.05)


def make_flags():
    """CC, CPPFLAGS, CFLAGS and LDLIBS exactly as the Makefile builds the
    student copies of labs."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "print-flags"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    flags = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {k: shlex.split(v) for k, v in flags.items()}


@functools.cache
def lab_links():
    """{lab: {program: [the objects it links besides the lab's own]}}, from
    the labs' manifests (labs/NN_name/lab.mk) as `make print-links` expands
    them: app objects, earlier labs' objects (build/earlier/), paths
    relative to the kit."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "print-links"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    links = {}
    for line in out.splitlines():
        lab, prog, *objects = line.split()
        links.setdefault(lab, {})[prog] = objects
    return links


def kit_inputs(lab):
    """What building a lab needs from the kit besides its sources, relative
    to ROOT: the headers (CPPFLAGS name common/, build/gen/ and every lab's
    folder in labs/, relative to the kit), the objects the programs link,
    the library."""
    files = []
    dirs = ["common", os.path.join("build", "gen")] + sorted(glob.glob("labs/[0-9][0-9]_*", root_dir=ROOT))
    for d in dirs:
        files += [os.path.join(d, f) for f in sorted(os.listdir(os.path.join(ROOT, d)))
                  if f.endswith(".h")]
    linked = sorted({o for objects in lab.links.values() for o in objects})
    return files + linked + [os.path.join("build", "libcommon.a"), LAB_SYMBOLS]


def build_lab(src_dir, lab, out_dir, kit=ROOT, wrap=None, env=None, base_env=None):
    """Compile every .c of a copy of a lab's sources and link each of the
    lab's programs that its cases run, with what lab.links names (app
    objects and earlier labs' objects, prebuilt by `make all`).
    Each object must pass scripts/lab_symbols.sh. Returns
    (program paths by name, None) or (None, a one-line reason). kit: where
    kit_inputs(lab) lie (the kit, or a sandbox's copy of them; commands run
    there); wrap(argv) -> argv runs each command elsewhere (the sandbox)."""
    flags = make_flags()
    wrap = wrap or (lambda argv: argv)
    os.makedirs(out_dir, exist_ok=True)
    sources = sorted(f for f in os.listdir(src_dir) if f.endswith(".c"))
    if not sources:
        return None, f"no .c files in {src_dir}"
    objects = []
    for src in sources:
        obj = os.path.join(out_dir, src[:-2] + ".o")
        path = os.path.join(src_dir, src)
        if os.path.realpath(path).startswith(os.path.realpath(kit) + os.sep):
            path = os.path.relpath(path, kit)   # __FILE__ in a fatal: line, without the sandbox
        cmd = (flags["CC"] + ["-I" + src_dir] + flags["CPPFLAGS"] + flags["CFLAGS"]
               + ["-c", path, "-o", obj])
        res = run(wrap(cmd), timeout=300, cwd=kit, env=env, base_env=base_env)
        if res.status != 0:
            return None, "build failed: " + (first_line(res.output, "error") or res.output.strip()[:200])
        # communication past the counted API (MPI, NCCL, the kit's uncounted calls)
        res = run(wrap(["bash", LAB_SYMBOLS, obj]), timeout=60, cwd=kit, env=env, base_env=base_env)
        if res.status != 0:
            line = first_line(res.output, " calls ") or res.output.strip()[:200]
            return None, "build refused: " + line.replace(out_dir + os.sep, "")
        objects.append(obj)
    programs = {}
    # the programs the lab's cases run (all of them, unless --case chose some)
    needed = {c.program for c in lab.cases} | {c.before.program for c in lab.cases if c.before}
    for prog in [p for p in lab.programs if p in needed]:
        exe = os.path.join(out_dir, prog)
        linked = [os.path.join(kit, x) for x in lab.links[prog]]
        missing = [x for x in linked if not os.path.exists(x)]
        if missing:
            return None, f"missing {missing[0]}: run `make` first"
        cmd = flags["CC"] + linked + objects + [os.path.join(kit, "build", "libcommon.a")] \
            + flags["LDLIBS"] + ["-o", exe]
        res = run(wrap(cmd), timeout=300, cwd=kit, env=env, base_env=base_env)
        if res.status != 0:
            return None, "link failed: " + (first_line(res.output, "undefined reference")
                                           or first_line(res.output, "error") or res.output.strip()[:200])
        programs[prog] = exe
    return programs, None
