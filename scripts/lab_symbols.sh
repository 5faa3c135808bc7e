#!/usr/bin/env bash
# lab_symbols.sh OBJECT...: refuse a lab's objects that communicate past the
# counted API.
#
# A lab talks to other ranks only through comm.h's counted calls: comm.csv,
# the trace and the grader see every one. An object that calls MPI or NCCL
# itself, one of the kit's own calls that change what is counted (comm.h,
# "the kit's own"), or an operating-system channel between processes
# (sockets, shared memory, another process's memory, a raw system call, a
# library loaded by name) could move data no one counts: a layer computed
# unsharded behind one dummy all-reduce. The Makefile runs this on every lab
# object it compiles, the grader on every object of a student's build.
#
# Reads the objects' undefined symbols (nm), prints one line per object and
# forbidden symbol, and exits 1 when there is one (2: bad usage).
set -euo pipefail

FORBIDDEN='^(P?MPI_|ompi_|opal_|P?nccl|comm_record$|comm_reset_stats$|comm_set_untraced$|.*_untraced$|socket$|socketpair$|connect$|bind$|shm_open$|shmget$|shmat$|mmap$|mmap64$|process_vm_(readv|writev)$|ptrace$|syscall$|dlopen$|dlmopen$|dlsym$|dlvsym$)'

[ $# -gt 0 ] || { echo "usage: lab_symbols.sh OBJECT..." >&2; exit 2; }
bad=0
for obj in "$@"; do
    [ -f "$obj" ] || { echo "lab_symbols.sh: $obj: no such object" >&2; exit 2; }
    syms=$(nm -u --format=just-symbols "$obj") || { echo "lab_symbols.sh: $obj: nm failed" >&2; exit 2; }
    while read -r sym; do
        [ -n "$sym" ] || continue
        echo "$obj calls $sym: a lab communicates only through comm.h's counted calls (scripts/lab_symbols.sh)"
        bad=1
    done < <(printf '%s\n' "$syms" | grep -E "$FORBIDDEN" || true)
done
exit "$bad"
