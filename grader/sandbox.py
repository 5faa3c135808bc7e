"""Isolation: run the student's builds and programs where they cannot read
what they must not (the solutions, their builds and runs, the references,
the planted bugs, other cases' outputs). grader/README.md, "Isolation".

Three levels, chosen once per grading run (Isolation.start):

  namespace    (root, mount namespaces work) each student build and case
               runs as a uid of its own (no passwd entry, no groups, no new
               privileges), chrooted into a private mount namespace that
               holds only the system (/usr, /etc, /dev, /proc, /sys and the
               /bin, /lib links), a fresh /dev/shm and /tmp, and the
               sandbox directory: no copy of the kit anywhere on the machine
               is visible, nor the grader's output tree.
  permissions  (root, no mount namespace: unshare is refused, as in Docker
               without CAP_SYS_ADMIN) the same uids and sandbox directory;
               the kit, the solutions and the output tree are made
               unreadable to other users while grading (their modes are
               restored after); other copies on the machine stay readable.
  off          (not root, or --isolation off) the student's programs run as
               the grader's user and can read whatever it can.

The sandbox directory (mkdtemp, root's, mode 0711) holds what a student's
build and runs need: copies of the kit's headers and prebuilt objects, of
the student's sources, of the token file, and the built programs. Each
build and each case gets a fresh directory there, owned by its uid, mode
0700: one case cannot read another's. After each run every process left
with that uid is killed (a daemon that escaped the process group too), and
the outputs are copied, regular files only, into the report directory.

The child side runs as `python3 sandbox.py exec ...`: it enters the
namespace (or not), drops to the uid and execs the command, keeping its pid
and process group, so the runner's timeout kills it as any other program.
"""
import ctypes
import ctypes.util
import errno
import fcntl
import os
import pwd
import random
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
LEVELS = ("namespace", "permissions", "off")
# what a student's build and run see in the namespace: the system only
SYSTEM_DIRS = ("/usr", "/etc", "/dev", "/proc", "/sys",
               "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
UID_RANGE = (40000, 59999)       # fresh uids are drawn here, skipping used ones
UID_LOCKS = "/run/lock/dtlab-sandbox-uids" if os.path.isdir("/run/lock") else "/tmp/dtlab-sandbox-uids"
OUTPUT_FILE_MAX = 64 << 20       # a run's output file larger than this is not copied
# environment a student's program gets (everything else is dropped)
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")
ENV_KEEP_PREFIXES = ("LC_", "OMP_", "OPENBLAS_", "GOTO", "OMPI_MCA_", "KIT_")


class IsolationError(Exception):
    pass


# ---- the child side: enter, drop, exec -------------------------------------

MS_NOSUID, MS_NODEV, MS_RDONLY = 2, 4, 1
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
CLONE_NEWNS = 0x00020000
PR_SET_NO_NEW_PRIVS = 38


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]
    return libc


def _mount(libc, source, target, fstype, flags, data=None):
    enc = (lambda s: s.encode() if s is not None else None)
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


def enter_namespace(libc, base, hide):
    """A private mount namespace whose root is a tmpfs holding the system
    directories (bound), a fresh /tmp and /dev/shm, and base (bound at its
    own path); chroot into it. hide: paths that get an empty tmpfs even if
    they lie inside a system directory."""
    if libc.unshare(CLONE_NEWNS) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare(CLONE_NEWNS): {os.strerror(e)}")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)   # nothing leaks out
    new = os.path.join(base, ".root")
    _mount(libc, "dtlab-root", new, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            os.symlink(os.readlink(d), new + d)
        elif os.path.isdir(d):
            os.makedirs(new + d)
            _mount(libc, d, new + d, None, MS_BIND | MS_REC)
    if os.path.isdir(new + "/dev/shm"):
        _mount(libc, "dtlab-shm", new + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    os.makedirs(new + "/tmp", exist_ok=True)
    os.chmod(new + "/tmp", 0o1777)
    os.makedirs(new + base, exist_ok=True)
    _mount(libc, base, new + base, None, MS_BIND)
    for p in hide:
        if os.path.isdir(new + p):
            _mount(libc, "dtlab-hidden", new + p, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY,
                   "mode=0,size=4k")
    os.chroot(new)


def child_main(argv):
    """exec --level L --uid U --base DIR --cwd DIR [--hide P]... -- CMD..."""
    opts = {"hide": []}
    i = 0
    while argv[i] != "--":
        key, val = argv[i].lstrip("-"), argv[i + 1]
        if key == "hide":
            opts["hide"].append(val)
        else:
            opts[key] = val
        i += 2
    cmd = argv[i + 1:]
    uid = int(opts["uid"])
    libc = _libc()
    try:
        if opts["level"] == "namespace":
            enter_namespace(libc, opts["base"], opts["hide"])
        os.chdir(opts["cwd"])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    except OSError as e:
        print(f"sandbox: cannot isolate: {e}", file=sys.stderr)
        return 125
    if not cmd:   # a probe
        return 0
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"sandbox: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr)
        return 127


# ---- the grader's side -----------------------------------------------------

def uids_in_use():
    used = {p.pw_uid for p in pwd.getpwall()}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                used.add(os.stat(f"/proc/{pid}").st_uid)
            except OSError:
                pass
    return used


def kill_uid(uid):
    """SIGKILL every process whose real uid is uid, until none is left
    running (runner.live_processes: zombies run nothing and are not
    waited for)."""
    import runner   # the grader's side only (the child runs with python3 -I)
    for _ in range(50):
        found = False
        for pid, owner, _ in runner.live_processes():
            if owner == uid:
                found = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return
        time.sleep(0.05)


def copy_regular(src, dst, limit=OUTPUT_FILE_MAX):
    """Copy src to dst if src is a regular file (not a link, FIFO or device)
    of at most limit bytes; returns whether it did."""
    import compare   # the grader's side only (the child runs with python3 -I)
    try:
        data = compare.read_regular(src, limit)
    except compare.BadOutput:
        return False
    if data is None:
        return False
    with open(dst, "wb") as out:
        out.write(data)
    return True


def copy_outputs(src_dir, dst_dir):
    """The regular files at the top of src_dir into dst_dir (made)."""
    os.makedirs(dst_dir, exist_ok=True)
    try:
        names = os.listdir(src_dir)
    except OSError:
        return
    for name in names:
        if name not in (".", "..") and "/" not in name:
            copy_regular(os.path.join(src_dir, name), os.path.join(dst_dir, name))


def student_env(env, home):
    out = {k: v for k, v in os.environ.items()
           if k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)}
    out.update(env or {})
    out.update({"HOME": home, "TMPDIR": home, "USER": "student", "LOGNAME": "student"})
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return out


def is_under(path, top):
    path, top = os.path.realpath(path), os.path.realpath(top)
    return path == top or path.startswith(top.rstrip("/") + "/")


class Isolation:
    """One per grading run: start() picks the level and says it in one line;
    then per build or case: new_dir(), command(), after()."""

    def __init__(self, request, hide):
        self.request = request       # auto | namespace | permissions | off
        self.hide = [os.path.realpath(p) for p in hide if p]
        self.level = "off"
        self.base = None
        self.why = ""
        self._modes = {}             # path -> mode, restored by stop()
        self._rng = random.SystemRandom()
        self._claimed = {}           # uid -> fd of its lock (new_uid), until after()
        self._n = 0

    # -- choosing the level
    def start(self):
        if self.request == "off":
            self.why = "--isolation off"
        elif os.geteuid() != 0:
            self.why = ("not root, so the graded code runs as you and reads what you can (fine "
                        "for your own work; to grade others', run as root: grader/README.md)")
        else:
            try:
                self.base = self._make_base()
            except IsolationError as e:
                if self.request != "auto":
                    raise
                self.why = str(e)
                print("grade: " + self.describe(), flush=True)
                return self
            tried = ["namespace", "permissions"] if self.request == "auto" else [self.request]
            problems = []
            for level in tried:
                problem = self._probe(level)
                if problem is None:
                    self.level = level
                    self.why = "; ".join(problems)
                    break
                problems.append(f"{level}: {problem}")
            if self.level == "off":
                shutil.rmtree(self.base, ignore_errors=True)
                self.base = None
                self.why = "; ".join(problems)
                if self.request != "auto":
                    raise IsolationError(f"--isolation {self.request} is not possible here: "
                                         + self.why)
        if self.level == "permissions":
            for p in self.hide:
                self._lock(p)
        print("grade: " + self.describe(), flush=True)
        return self

    def describe(self):
        if self.level == "namespace":
            return ("isolation on: each student build and case runs as a uid of its own, in a "
                    "private mount namespace that shows only the system and its sandbox")
        if self.level == "permissions":
            why = self.why or "as asked"
            return ("isolation partial: each student build and case runs as a uid of its own; "
                    f"no mount namespace ({why}), so the kit, the solutions and the output tree "
                    "are unreadable to other users while grading, other copies on this machine "
                    "are not")
        return f"isolation off: {self.why}"

    def _make_base(self):
        """The sandbox directory: in a temporary directory outside the hidden
        paths, on a file system that runs programs (not mounted noexec)."""
        for top in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):
            if not os.path.isdir(top) or any(is_under(top, h) for h in self.hide):
                continue
            base = tempfile.mkdtemp(prefix="dtlab-sandbox-", dir=top)
            os.chmod(base, 0o711)
            os.mkdir(os.path.join(base, ".root"), 0o700)
            true = os.path.join(base, "true")
            try:
                shutil.copy(shutil.which("true") or "/bin/true", true)
                os.chmod(true, 0o755)
                if subprocess.run([true], timeout=30).returncode == 0:
                    os.remove(true)
                    return base
            except (OSError, subprocess.SubprocessError):
                pass
            shutil.rmtree(base, ignore_errors=True)
        raise IsolationError("no temporary directory outside the hidden paths that runs programs")

    def _probe(self, level):
        uid = self.new_uid()
        probe = self.new_dir("probe", uid)
        hidden = os.path.join(self.base, "probe-hidden")
        os.makedirs(hidden, exist_ok=True)
        # the payload is the system's shell: what a student's program sees
        check = 'ls "$1" >/dev/null 2>&1 && exit 1; cd "$HOME" && : > probe'
        argv = self.command(["/bin/sh", "-c", check, "sh", hidden], uid, probe, level=level,
                            extra_hide=[hidden])
        if level == "permissions":
            os.chmod(hidden, 0o700)
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                 env=student_env({}, probe))
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
        finally:
            kill_uid(uid)
            self.release_uid(uid)
            shutil.rmtree(probe, ignore_errors=True)
            shutil.rmtree(hidden, ignore_errors=True)
        if res.returncode != 0:
            line = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
            return line.replace("sandbox: cannot isolate: ", "")
        return None

    def _lock(self, path):
        """permissions level: path unreadable to others until stop()."""
        try:
            st = os.stat(path)
        except OSError:
            return
        if path not in self._modes:
            self._modes[path] = stat.S_IMODE(st.st_mode)
            os.chmod(path, self._modes[path] & 0o700)

    def stop(self):
        for path, mode in self._modes.items():
            try:
                os.chmod(path, mode)
            except OSError:
                pass
        self._modes = {}
        if self.base:
            shutil.rmtree(self.base, ignore_errors=True)
            self.base = None

    # -- per build or case
    @property
    def on(self):
        return self.level != "off"

    def new_uid(self):
        """A uid no process uses, claimed for this grader until after(uid):
        an exclusive flock on UID_LOCKS/<uid>, so that two graders at once
        (a test suite's lanes, an instructor's batch) never draw the same
        one and kill each other's runs. The kernel drops the lock of a
        grader that dies."""
        used = uids_in_use()
        os.makedirs(UID_LOCKS, mode=0o755, exist_ok=True)
        for _ in range(1000):
            uid = self._rng.randrange(UID_RANGE[0], UID_RANGE[1] + 1)
            if uid in used or uid in self._claimed:
                continue
            fd = os.open(os.path.join(UID_LOCKS, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                         0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            if uid in uids_in_use():   # taken between the two looks
                os.close(fd)
                continue
            self._claimed[uid] = fd
            return uid
        raise IsolationError("no free uid")

    def release_uid(self, uid):
        fd = self._claimed.pop(uid, None)
        if fd is not None:
            os.close(fd)

    def new_dir(self, what, uid):
        """A fresh directory in the sandbox owned by uid, mode 0700."""
        self._n += 1
        path = os.path.join(self.base, f"{self._n:03d}-{what}")
        os.mkdir(path, 0o700)
        os.chown(path, uid, uid)
        return path

    def shared_dir(self, what):
        """A fresh directory in the sandbox, root's, readable by all: copies
        of what builds and runs need."""
        self._n += 1
        path = os.path.join(self.base, f"{self._n:03d}-{what}")
        os.mkdir(path, 0o755)
        return path

    def command(self, argv, uid, cwd, level=None, extra_hide=()):
        level = level or self.level
        args = [sys.executable, "-I", HERE, "exec", "--level", level, "--uid", str(uid),
                "--base", self.base, "--cwd", cwd]
        for p in list(self.hide) + list(extra_hide):
            args += ["--hide", p]
        return args + ["--"] + list(argv)

    def env(self, env, home):
        return student_env(env, home)

    def after(self, uid):
        """After a run: no process of uid is left, nor its shared memory; the
        uid is free for the next draw."""
        kill_uid(uid)
        try:
            for name in os.listdir("/dev/shm"):
                p = os.path.join("/dev/shm", name)
                try:
                    if os.lstat(p).st_uid == uid:
                        os.remove(p) if not os.path.isdir(p) else shutil.rmtree(p)
                except OSError:
                    pass
        except OSError:
            pass
        self.release_uid(uid)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "exec":
        sys.exit(child_main(sys.argv[2:]))
    print("usage: sandbox.py exec --level L --uid U --base DIR --cwd DIR [--hide P]... -- CMD",
          file=sys.stderr)
    sys.exit(2)
