#!/usr/bin/env python3
"""commands_used.py ROOT: every external command that the kit's shell
scripts, Bats suites and Makefile recipes call, one per line, sorted.

What counts as a call: the first word of a simple command (after
variable assignments and the wrappers that run another command: timeout,
t SECS, mpirun_t SECS NP, exec, env, nohup, setsid, sudo, xargs, command),
and the word after `command -v`. Not counted: shell builtins and
keywords, functions the kit defines, the kit's own programs and scripts
(paths, $VARS), and words inside quotes or heredocs. A heuristic reader,
not a shell parser: tests/deps.bats holds its output against scripts/deps.sh's
table of commands, so a command a script starts to call without its package
fails the test.
"""
import glob
import os
import re
import subprocess
import sys

SOURCES = ["scripts/*.sh", "tools/*.sh", "bench/*.sh", "tests/*.bats", "tests/*.bash",
           "tests/sanitize/*.sh", ".ci/run", "grader/gradescope/*"]
WRAPPERS = {"exec", "env", "nohup", "setsid", "sudo", "command", "time", "builtin", "then",
            "do", "else", "elif", "if", "while", "until", "!", "{", "(", "run", "xargs"}
TAKES_ARGS = {"timeout": 1, "t": 1, "mpirun_t": 2}   # wrappers followed by N numbers
SEPARATORS = re.compile(r"\|\||&&|;|\||\$\(|`|\(|\)\s*\{?|\bthen\b|\bdo\b|\belse\b")
WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")


def shell_names():
    out = subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True,
                         text=True, check=True).stdout
    return set(out.split()) | {"run", "skip", "load", "setup", "teardown", "setup_file",
                               "teardown_file", "bats_require_minimum_version", "fail"}


def code_only(text):
    """text with comments and the insides of quotes blanked (newlines kept),
    but the command substitutions inside double quotes kept as code: a
    small lexer, not a shell parser (no nested quotes in arithmetic)."""
    out, i, n = [], 0, len(text)
    stack = ["code"]          # code | dq | sub (a $( ... ) inside dq: code until its ')')
    depth = []                # open parentheses of each sub
    while i < n:
        c, state = text[i], stack[-1]
        if state == "dq":
            if c == "\\":
                i += 2
                continue
            if c == '"':
                stack.pop()
            elif text.startswith("$(", i):
                stack.append("sub")
                depth.append(0)
                out.append(";")
                i += 2
                continue
            out.append("\n" if c == "\n" else "")
        elif c == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            out.append("\n" * text.count("\n", i, j) + "''")
            i = j
        elif c == '"':
            stack.append("dq")
            out.append('""')
        elif c == "#" and (i == 0 or text[i - 1] in " \t\n;"):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        elif c == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        else:
            if state == "sub" and c == "(":
                depth[-1] += 1
            elif state == "sub" and c == ")":
                if depth[-1] == 0:
                    stack.pop()
                    depth.pop()
                    c = ";"
                else:
                    depth[-1] -= 1
            out.append(c)
        i += 1
    return "".join(out)


def lines_of(path):
    """Code lines of a shell file: heredoc bodies, comments and quoted text
    left out."""
    kept, end = [], None
    for raw in open(path, errors="replace"):
        if end is not None:
            if raw.strip() == end:
                end = None
            continue
        m = re.search(r"<<-?\s*['\"]?([A-Za-z_]+)['\"]?", raw)
        if m:
            end = m.group(1)
        kept.append(raw)
    return code_only("".join(kept)).split("\n")


def makefile_lines(path):
    """The recipe lines of a Makefile, make's $(...) and $$ undone."""
    for raw in open(path):
        if raw.startswith("\t"):
            line = re.sub(r"\$\([^()]*\)", "MAKEVAR", raw.lstrip("\t@-"))
            yield line.replace("$$", "$")


ARRAY = re.compile(r"=\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")   # x=( ... ), nested twice


def first_words(line):
    for seg in SEPARATORS.split(ARRAY.sub("=ARRAY", line)):
        words = seg.split()
        while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in WRAPPERS
                         or words[0].startswith("-")):
            words.pop(0)
        if words and words[0] in TAKES_ARGS:
            words = words[1 + TAKES_ARGS[words[0]]:]
        if words and WORD.match(words[0]):
            yield words[0]
    for m in re.finditer(r"command -v (\S+)", line):
        if WORD.match(m.group(1)):
            yield m.group(1)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = sorted({f for p in SOURCES for f in glob.glob(os.path.join(root, p))
                    if os.path.isfile(f)})
    defined = set()
    for f in files:
        defined |= set(re.findall(r"^\s*(?:function\s+)?([A-Za-z_][A-Za-z0-9_-]*)\s*\(\)",
                                  open(f, errors="replace").read(), re.M))
    ignore = shell_names() | defined | {"MAKEVAR"}
    used = set()
    for f in files:
        used |= {w for line in lines_of(f) for w in first_words(line)}
    recipes = code_only("".join(makefile_lines(os.path.join(root, "Makefile")))).split("\n")
    used |= {w for line in recipes for w in first_words(line)}
    for name in sorted(used - ignore):
        print(name)


if __name__ == "__main__":
    main()
