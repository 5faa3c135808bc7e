/* fileio.h: files the kit writes appear whole or not at all.
 *
 * atomic_open writes into "<path>.tmp.<pid>" in the same directory;
 * atomic_commit flushes, fsyncs and renames it over <path>. A crash in
 * between leaves the old file (or none), never half of a new one. Both die
 * with the path and strerror on failure.
 */
#ifndef FILEIO_H
#define FILEIO_H

#include <stdio.h>

typedef struct {
    FILE *f;
    char path[1024];
    char tmp_path[1100];
} AtomicFile;

FILE *atomic_open(AtomicFile *af, const char *path);
void atomic_commit(AtomicFile *af);

/* mkdir -p; dies with a clear message when a component can't be made. */
void make_dirs(const char *path);

#endif
