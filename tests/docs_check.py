#!/usr/bin/env python3
"""docs_check.py ROOT CHECK: the lists in the kit's docs against the tree.

tests/docs.bats runs one CHECK per test; each prints what is wrong, one
line per problem, and exits 1 (0 when all is well, 2 on bad usage):

  labs        README.md's lab table lists exactly labs/[0-9][0-9]_*/, in order
  programs    each block <!-- programs ... --> ... <!-- /programs --> in
              README.md and docs/*.md lists exactly the programs `make -s
              print-programs` prints (read from stdin: "NN_name program" per
              lab program; a tool's line has a first field that is not a lab,
              or one field); every build/... path of a program in README.md,
              docs/*.md and tools/make_handout.sh (START.md) is one of them
  benchmarks  each block <!-- benchmarks ... --> ... <!-- /benchmarks -->
              lists exactly the targets `make -s print-benchmarks` prints
              (stdin, one a line), and every `make bench...` named in
              README.md, docs/*.md and tools/make_handout.sh is one of them
  links       every relative Markdown link in README.md, docs/*.md,
              labs/*/*.md, grader/README.md, datasets/README.md and the
              START.md that tools/make_handout.sh writes points to a file or
              directory that exists, and its #anchor to a heading there
  suites      docs/TESTING.md names every tests/*.bats
"""
import glob
import os
import re
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def rel(root, path):
    return os.path.relpath(path, root)


def lab_dirs(root):
    return sorted(os.path.basename(os.path.dirname(d))
                  for d in glob.glob(os.path.join(root, "labs", "[0-9][0-9]_*", "")))


def strip_code(text):
    """Text with fenced code blocks and inline code spans blanked out (lines kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return "\n".join(out)


def blocks(text, name):
    """The lines of each <!-- name ... --> ... <!-- /name --> block."""
    found = []
    for m in re.finditer(r"<!--\s*%s\b[^>]*-->(.*?)<!--\s*/%s\s*-->" % (name, name), text, re.S):
        found.append(m.group(1).strip("\n").split("\n"))
    return found


def table_rows(lines):
    """Cells of each table row but the header and its rule."""
    rows = []
    for line in lines:
        line = line.strip()
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows[1:]  # the header


def link_text(cell):
    m = re.fullmatch(r"\[([^\]]*)\]\([^)]*\)", cell)
    return m.group(1) if m else cell


def check_labs(root, problems):
    want = lab_dirs(root)
    listed = []
    for line in read(os.path.join(root, "README.md")).split("\n"):
        m = re.match(r"\|\s*\[([^\]]*)\]\(labs/([^/)]*)/README\.md\)\s*\|", line)
        if m:
            if m.group(1) != m.group(2):
                problems.append("README.md: lab row [%s] links to labs/%s/" % (m.group(1), m.group(2)))
            listed.append(m.group(2))
    if listed != want:
        problems.append("README.md's lab table lists %s; labs/ has %s"
                        % (" ".join(listed) or "nothing", " ".join(want)))


def parse_programs(stdin, labs):
    progs = set()
    for line in stdin.split("\n"):
        f = line.split()
        if not f:
            continue
        if len(f) == 2 and f[0] in labs:
            progs.add((f[0], f[1]))
        else:
            progs.add(("tools", os.path.basename(f[-1])))
    return progs


def check_programs(root, stdin, problems):
    labs = lab_dirs(root)
    want = parse_programs(stdin, labs)
    if not want:
        problems.append("make -s print-programs printed nothing")
        return
    nblocks = 0
    for path in doc_files(root):
        for block in blocks(read(path), "programs"):
            nblocks += 1
            listed = []
            for cells in table_rows(block):
                lab = link_text(cells[0])
                names = re.findall(r"`([^`]*)`", cells[1]) if len(cells) > 1 else []
                if len(names) != 1:
                    problems.append("%s: program row without one `program`: %s" % (rel(root, path), " | ".join(cells)))
                    continue
                name = names[0]
                if name.startswith("build/bin/"):
                    listed.append(("tools", name[len("build/bin/"):]))
                else:
                    listed.append((lab, name))
            for p in sorted(set(listed)):
                if listed.count(p) > 1:
                    problems.append("%s: %s %s listed %d times" % (rel(root, path), p[0], p[1], listed.count(p)))
            for p in sorted(set(listed) - want):
                problems.append("%s: lists %s %s, which make print-programs does not" % (rel(root, path), *p))
            for p in sorted(want - set(listed)):
                problems.append("%s: does not list %s %s (make print-programs does)" % (rel(root, path), *p))
    if nblocks == 0:
        problems.append("no <!-- programs --> table in README.md or docs/*.md")
    # every program path named anywhere in the docs (examples included)
    path_re = re.compile(r"build/(?:sanitize/|gpu/)?(?:labs|solutions)/(\d\d_[a-z0-9_]+)/([A-Za-z0-9_]+)(?![A-Za-z0-9_./])")
    bin_re = re.compile(r"build/bin/([A-Za-z0-9_]+)(?![A-Za-z0-9_./])")
    for path in doc_files(root) + [os.path.join(root, "tools", "make_handout.sh")]:
        text = read(path)
        for m in path_re.finditer(text):
            if (m.group(1), m.group(2)) not in want:
                problems.append("%s: names %s, not a program of make print-programs" % (rel(root, path), m.group(0)))
        for m in bin_re.finditer(text):
            if ("tools", m.group(1)) not in want:
                problems.append("%s: names %s, not a tool of make print-programs" % (rel(root, path), m.group(0)))


def check_benchmarks(root, stdin, problems):
    want = set(stdin.split())
    if not want:
        problems.append("make -s print-benchmarks printed nothing")
        return
    nblocks = 0
    for path in doc_files(root):
        text = read(path)
        for block in blocks(text, "benchmarks"):
            nblocks += 1
            listed = []
            for cells in table_rows(block):
                m = re.fullmatch(r"`make (\S+)`", cells[0])
                if not m:
                    problems.append("%s: benchmark row without `make TARGET` first: %s" % (rel(root, path), " | ".join(cells)))
                    continue
                listed.append(m.group(1))
            for t in sorted(set(listed)):
                if listed.count(t) > 1:
                    problems.append("%s: make %s listed %d times" % (rel(root, path), t, listed.count(t)))
            for t in sorted(set(listed) - want):
                problems.append("%s: lists make %s, not a benchmark of make print-benchmarks" % (rel(root, path), t))
            for t in sorted(want - set(listed)):
                problems.append("%s: does not list make %s (make print-benchmarks does)" % (rel(root, path), t))
    if nblocks == 0:
        problems.append("no <!-- benchmarks --> table in README.md or docs/*.md")
    for path in doc_files(root) + [os.path.join(root, "tools", "make_handout.sh")]:
        for m in re.finditer(r"\bmake (bench[-A-Za-z0-9_]*)", read(path)):
            if m.group(1) not in want:
                problems.append("%s: names make %s, not a benchmark of make print-benchmarks" % (rel(root, path), m.group(1)))


def slug(heading):
    """GitHub's anchor of a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    fenced = False
    for line in read(path).split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def check_link(root, src_name, base_dir, target, problems):
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return  # a URL (http:, mailto:) or an absolute path: not the repository's
    path, _, anchor = target.partition("#")
    dest = os.path.normpath(os.path.join(base_dir, path)) if path else None
    if dest is not None and not os.path.exists(dest):
        problems.append("%s: link to %s: no such file" % (src_name, target))
        return
    if anchor:
        page = dest if dest else None
        if page is None or not page.endswith(".md") or not os.path.isfile(page):
            return
        if anchor not in anchors(page):
            problems.append("%s: link to %s: no heading #%s in %s" % (src_name, target, anchor, rel(root, page)))


LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def link_files(root):
    """The pages whose links are checked: the docs, and the labs', the
    grader's and the datasets' pages, which link into them."""
    more = sorted(glob.glob(os.path.join(root, "labs", "*", "*.md")))
    more += [os.path.join(root, d, "README.md") for d in ("grader", "datasets")]
    return doc_files(root) + [p for p in more if os.path.isfile(p)]


def check_links(root, problems):
    for path in link_files(root):
        text = strip_code(read(path))
        for m in LINK_RE.finditer(text):
            target = m.group(1)
            if target.startswith("#"):
                if target[1:] not in anchors(path):
                    problems.append("%s: link to %s: no such heading" % (rel(root, path), target))
                continue
            check_link(root, rel(root, path), os.path.dirname(path), target, problems)
    # START.md, as tools/make_handout.sh writes it at the top of a handout
    # (links built from variables, such as each lab's README, are left out)
    gen = os.path.join(root, "tools", "make_handout.sh")
    for line in read(gen).split("\n"):
        if not line.strip().startswith("echo"):
            continue
        for m in LINK_RE.finditer(line):
            if "$" not in m.group(1):
                check_link(root, "START.md (tools/make_handout.sh)", root, m.group(1), problems)


def check_suites(root, problems):
    testing = read(os.path.join(root, "docs", "TESTING.md"))
    for f in sorted(glob.glob(os.path.join(root, "tests", "*.bats"))):
        name = "tests/" + os.path.basename(f)
        if name not in testing:
            problems.append("docs/TESTING.md does not describe %s" % name)


def main():
    if len(sys.argv) != 3:
        print("usage: docs_check.py ROOT labs|programs|benchmarks|links|suites", file=sys.stderr)
        return 2
    root, check = sys.argv[1], sys.argv[2]
    problems = []
    if check == "labs":
        check_labs(root, problems)
    elif check == "programs":
        check_programs(root, sys.stdin.read(), problems)
    elif check == "benchmarks":
        check_benchmarks(root, sys.stdin.read(), problems)
    elif check == "links":
        check_links(root, problems)
    elif check == "suites":
        check_suites(root, problems)
    else:
        print("docs_check.py: unknown check '%s'" % check, file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
