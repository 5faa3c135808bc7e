#!/usr/bin/env python3
"""Gradescope's autograder zip for one lab (`make gradescope LAB=NN`).

    make_zip.py --lab 01 --out DIR [--flags "--hidden"]

Gradescope unpacks the zip into /autograder/source, runs setup.sh from
there once when it builds the image, and run_autograder for each
submission (grader/README.md, "Gradescope"). The zip holds the kit's
tracked files as they are in the working tree (solutions/ included: the
grader links earlier labs' and, with --hidden, runs the lab's; grader/planted/,
.github/ and build outputs left out), and at its top setup.sh and
run_autograder with the lab and the grader's flags written in.
Writes DIR/autograder-NN_name.zip (replacing only that file); bad input is
one "gradescope: error:" line and exit status 2, before anything is written.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "grader", "gradescope")
LEFT_OUT = ("grader/planted/", "grader/out/", ".github/")


class Refused(Exception):
    pass


def the_lab(number):
    labs = sorted(d for d in os.listdir(os.path.join(ROOT, "labs")) if re.fullmatch(r"\d\d_\w+", d))
    match = [d for d in labs if number in (d, d[:2])]
    if len(match) != 1:
        raise Refused(f"LAB must name one lab (a Gradescope assignment grades one), got {number!r}; "
                      f"labs: {' '.join(d[:2] for d in labs)}")
    lab = match[0]
    for need in (f"solutions/{lab}", f"grader/cases/{lab}.toml"):
        if not os.path.exists(os.path.join(ROOT, need)):
            raise Refused(f"{need} is missing: the autograder of {lab} needs it")
    return lab


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise Refused(f"{ROOT} is not a git checkout of the kit: the zip holds its tracked files")
    return [f for f in out.decode().split("\0")
            if f and not f.startswith(LEFT_OUT) and os.path.isfile(os.path.join(ROOT, f))]


def baked(script, lab, flags):
    """The script with its LAB= and GRADE_FLAGS= lines set for this lab."""
    text = open(os.path.join(HERE, script)).read()
    for name, value in (("LAB", lab[:2]), ("GRADE_FLAGS", flags)):
        text, n = re.subn(rf"^{name}=.*$", f"{name}={shlex.quote(value)}", text, flags=re.M)
        if n > 1:
            raise Refused(f"{script} sets {name} {n} times")
    return text


def add(z, name, data, mode, mtime=None):
    info = zipfile.ZipInfo(name, time.localtime(mtime)[:6])
    info.external_attr = (0o100000 | mode) << 16   # a regular file and its permissions
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def main():
    ap = argparse.ArgumentParser(description="Write Gradescope's autograder zip for one lab.")
    ap.add_argument("--lab", required=True, help="the assignment's lab (01 or 01_collectives)")
    ap.add_argument("--out", required=True, help="the directory of the zip")
    ap.add_argument("--flags", default="", help="the grader's options, e.g. --hidden")
    args = ap.parse_args()
    try:
        if os.path.exists(os.path.join(ROOT, ".handout")):
            raise Refused("this is a student handout: the autograder is built from the instructor's tree")
        lab = the_lab(args.lab)
        files = tracked_files()
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise Refused(f"{args.out} exists and is not a directory")
        zip_path = os.path.join(args.out, f"autograder-{lab}.zip")
        if os.path.lexists(zip_path) and not os.path.isfile(zip_path):
            raise Refused(f"{zip_path} exists and is not a regular file: not replaced")
        scripts = {s: baked(s, lab, args.flags) for s in ("setup.sh", "run_autograder")}
    except Refused as e:
        print(f"gradescope: error: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    tmp = f"{zip_path}.tmp.{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w") as z:
            for f in files:
                st = os.stat(os.path.join(ROOT, f))
                with open(os.path.join(ROOT, f), "rb") as src:
                    add(z, f, src.read(), st.st_mode & 0o777, max(st.st_mtime, 315532800))
            for name, text in scripts.items():
                add(z, name, text, 0o755)
        os.replace(tmp, zip_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    size = os.path.getsize(zip_path)
    print(f"gradescope: wrote {os.path.relpath(zip_path)} ({len(files)} files of the kit, "
          f"{size / 2**20:.1f} MiB) for {lab}, grader flags: {args.flags or 'none'}")
    print("gradescope: upload it as the assignment's autograder (grader/README.md, \"Gradescope\")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
