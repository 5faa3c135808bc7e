/* fileio.h: files the kit writes appear whole or not at all, and never
 * destroy anything that is not one of them.
 *
 * The rules, for every path the kit writes (--out, --dump-params, token
 * files, reports, checkpoints):
 *   - a file is written only where nothing exists yet or a regular file
 *     does (through a symbolic link: the link stays, its target is
 *     replaced); a directory, a device, a FIFO or a socket is never
 *     replaced;
 *   - its directory must exist and accept a new file (tried by creating
 *     and removing one, which is the only test that also holds for root,
 *     read-only mounts and /proc);
 *   - a directory the kit writes into is made with its parents when
 *     missing, and must accept a new file too.
 * Programs check their paths with output_*_problem before any work, so a
 * bad path costs one error line, not a run.
 *
 * atomic_open writes into "<path>.tmp.<pid>" in the same directory;
 * atomic_commit flushes, fsyncs and renames it over <path>. A crash in
 * between leaves the old file (or none), never half of a new one. A write
 * that fails (a full disk, a file size limit) dies with the path and
 * strerror, leaving the old file as it was; the temporary file is removed
 * on every fatal exit (check.h's cleanup hook), not only here.
 */
#ifndef FILEIO_H
#define FILEIO_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    FILE *f;
    char path[1024];      /* what is replaced: <path>, or the target of its link */
    char tmp_path[1100];
} AtomicFile;

FILE *atomic_open(AtomicFile *af, const char *path);
void atomic_commit(AtomicFile *af);

/* NULL when `path` may be written as a file under the rules above;
 * otherwise why not, as a phrase for an error line ("/dev/null is a
 * character device, not a regular file"), written into why[0..n). */
const char *output_file_problem(const char *path, char *why, size_t n);
/* The same for a directory the kit writes files into; makes it (and its
 * parents) when missing. */
const char *output_dir_problem(const char *path, char *why, size_t n);

/* FNV-1a, 64-bit: the checksum of the kit's files. fnv1a64_update carries
 * a running hash h over n more bytes (start from FNV1A64_INIT). */
#include <stdint.h>
#define FNV1A64_INIT 14695981039346656037ULL
uint64_t fnv1a64_update(uint64_t h, const void *data, size_t n);

/* mkdir -p; dies with a clear message when a component can't be made. */
void make_dirs(const char *path);

#endif
