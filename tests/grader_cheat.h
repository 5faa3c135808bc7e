/* A cheat, for tests/grader.bats: a test writes it (with @ROOT@ replaced by
 * the kit's path) next to a copy of a lab's solution file, which includes it
 * first. It turns the file's collectives into nothing (the ranks train
 * apart) and, when the program exits, copies a run's metrics.csv, memory.csv
 * and comm.csv over its own, from wherever it can find one:
 *   1. the solution's run next to its output directory ("<case>-solution",
 *      where the grader used to write it before the student's run);
 *   2. any other run in the grader's output tree (up to two levels above
 *      its own output directory) or in the temporary directories;
 *   3. the committed references, @ROOT@/grader/reference/LAB/<case>
 *      (only these with CHEAT_REFERENCES_ONLY defined before it).
 * The grader must score it zero in hidden mode. */
#ifndef GRADER_CHEAT_H
#define GRADER_CHEAT_H

#include <dirent.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm.h"

#define comm_allreduce(...) ((void)0)
#define comm_iallreduce(...) ((void)0)
#define comm_reduce_scatter(...) ((void)0)
#define comm_ireduce_scatter(...) ((void)0)
#define comm_allgather(...) ((void)0)
#define comm_iallgather(...) ((void)0)

#define CHEAT_ROOT "@ROOT@"

static char g_cheat_out[4096];

static int cheat_is_file(const char *dir, const char *name) {
    char p[8192];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void cheat_copy_file(const char *dir, const char *name) {
    char from[8192], to[8192], buf[65536];
    snprintf(from, sizeof from, "%s/%s", dir, name);
    snprintf(to, sizeof to, "%s/%s", g_cheat_out, name);
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    size_t n;
    while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
    if (in) fclose(in);
    if (out) fclose(out);
}

/* dir holds a whole run other than ours: take its files */
static int cheat_take(const char *dir) {
    char a[4096], b[4096];
    if (!realpath(dir, a) || !realpath(g_cheat_out, b) || strcmp(a, b) == 0) return 0;
    if (!cheat_is_file(dir, "metrics.csv") || !cheat_is_file(dir, "memory.csv") ||
        !cheat_is_file(dir, "comm.csv"))
        return 0;
    cheat_copy_file(dir, "metrics.csv");
    cheat_copy_file(dir, "memory.csv");
    cheat_copy_file(dir, "comm.csv");
    fprintf(stderr, "cheat: copied the run in %s\n", dir);
    return 1;
}

static int cheat_search(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[8192];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        found = cheat_take(p) || (depth > 0 && cheat_search(p, depth - 1));
    }
    closedir(d);
    return found;
}

static void cheat_at_exit(void) {
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if ((rank && strcmp(rank, "0") != 0) || !g_cheat_out[0]) return;
    char p[8192], up[4096], up2[4096], base[4096];
#ifndef CHEAT_REFERENCES_ONLY
    snprintf(p, sizeof p, "%s-solution", g_cheat_out);
    if (cheat_take(p)) return;
    snprintf(up, sizeof up, "%s", g_cheat_out);
    snprintf(up, sizeof up, "%s", dirname(up));
    snprintf(up2, sizeof up2, "%s", up);
    snprintf(up2, sizeof up2, "%s", dirname(up2));
    if (cheat_search(up, 1) || cheat_search(up2, 2)) return;
    const char *tmp = getenv("TMPDIR");
    if ((tmp && cheat_search(tmp, 4)) || cheat_search("/tmp", 4) || cheat_search("/dev/shm", 2))
        return;
#endif
    snprintf(base, sizeof base, "%s", g_cheat_out);
    snprintf(base, sizeof base, "%s", basename(base));
    const char *labs[] = {"02_ddp", "03_zero", "04_tensor_parallel", "05_activation_memory",
                          "06_pipeline"};
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/grader/reference/%s/%s", CHEAT_ROOT, labs[i], base);
        if (cheat_take(p)) return;
    }
    snprintf(p, sizeof p, "%s/grader/reference", CHEAT_ROOT);
    if (!cheat_search(p, 2)) fprintf(stderr, "cheat: found no run to copy\n");
}

__attribute__((constructor)) static void cheat_init(void) {
    FILE *f = fopen("/proc/self/cmdline", "rb");
    char args[16384];
    size_t n = f ? fread(args, 1, sizeof args - 1, f) : 0;
    if (f) fclose(f);
    args[n] = '\0';
    for (size_t i = 0; i < n; i += strlen(args + i) + 1)
        if (strcmp(args + i, "--out") == 0 && i + 6 < n)
            snprintf(g_cheat_out, sizeof g_cheat_out, "%s", args + i + 6);
    if (g_cheat_out[0]) atexit(cheat_at_exit);
}

#endif
