#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* ---- checks (the rules in fileio.h) ---- */

static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISREG(mode)) return "a regular file";
    return "of an unknown kind";
}

/* Can files be created in dir? Creating one is the only reliable test: the
 * permission bits say nothing to root, nor about read-only mounts. */
static const char *probe_dir(const char *dir, char *why, size_t n) {
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof probe, "%s/.dtlab-probe.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(why, n, "cannot create files in %s: %s", dir, strerror(errno));
        return why;
    }
    close(fd);
    unlink(probe);
    return NULL;
}

/* mkdir -p: 0, or the errno of the component that failed (named in failed) */
static int mkdirs(const char *path, char *failed, size_t n) {
    char buf[1024];
    if (strlen(path) >= sizeof buf) return ENAMETOOLONG;
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            snprintf(failed, n, "%s", buf);
            return e;
        }
        *p = saved;
        if (saved == '\0') return 0;
    }
}

const char *output_dir_problem(const char *path, char *why, size_t n) {
    struct stat st;
    if (path[0] == '\0') return snprintf(why, n, "an empty path"), why;
    if (stat(path, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            snprintf(why, n, "%s is %s, not a directory", path, kind_of(st.st_mode));
            return why;
        }
    } else {
        char failed[1024];
        int e = mkdirs(path, failed, sizeof failed);
        if (e == 0 && stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) e = ENOTDIR;
        if (e) {
            snprintf(why, n, "cannot create directory %s: %s", e == ENAMETOOLONG ? path : failed,
                     strerror(e));
            return why;
        }
    }
    return probe_dir(path, why, n);
}

const char *output_file_problem(const char *path, char *why, size_t n) {
    struct stat st;
    if (path[0] == '\0') return snprintf(why, n, "an empty path"), why;
    size_t len = strlen(path);
    if (path[len - 1] == '/') {
        snprintf(why, n, "%s names a directory, not a file", path);
        return why;
    }
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            snprintf(why, n, "%s is %s, not a regular file", path, kind_of(st.st_mode));
            return why;
        }
    } else if (errno != ENOENT) {
        snprintf(why, n, "%s: %s", path, strerror(errno));
        return why;
    } else if (lstat(path, &st) == 0) {
        snprintf(why, n, "%s is a symbolic link to nothing", path);
        return why;
    }
    /* the directory the file goes in (of the link's target, for a link) */
    char resolved[PATH_MAX], dir[PATH_MAX];
    const char *real = realpath(path, resolved) ? resolved : path;
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (stat(dir, &st) != 0) {
        snprintf(why, n, "cannot write %s: directory %s: %s", path, dir, strerror(errno));
        return why;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "cannot write %s: %s is not a directory", path, dir);
        return why;
    }
    return probe_dir(dir, why, n);
}

void make_dirs(const char *path) {
    char failed[1024];
    int e = mkdirs(path, failed, sizeof failed);
    if (e) die_errno_at(__FILE__, __LINE__, e, "cannot create directory %s", failed);
    struct stat st;
    IO_CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "%s is not a directory", path);
}

/* ---- atomic writes ---- */

/* Temporary files of writes in progress, removed by a fatal exit (check.h
 * runs remove_pending before the process or the job ends). */
#define MAX_PENDING 8
static char g_pending[MAX_PENDING][1100];

static void remove_pending(void) {
    for (int i = 0; i < MAX_PENDING; i++)
        if (g_pending[i][0]) {
            unlink(g_pending[i]);
            g_pending[i][0] = '\0';
        }
}

static void set_pending(const char *tmp, int add) {
    check_add_exit_hook(remove_pending);
    for (int i = 0; i < MAX_PENDING; i++) {
        if (add && !g_pending[i][0]) {
            snprintf(g_pending[i], sizeof g_pending[i], "%s", tmp);
            return;
        }
        if (!add && strcmp(g_pending[i], tmp) == 0) {
            g_pending[i][0] = '\0';
            return;
        }
    }
    CHECK(!add, "more than %d atomic writes at once", MAX_PENDING);
}

FILE *atomic_open(AtomicFile *af, const char *path) {
    char why[1400];
    CHECK(!output_file_problem(path, why, sizeof why), "%s", why);
    /* through a link, the target is replaced and the link stays */
    char resolved[PATH_MAX];
    const char *real = realpath(path, resolved) ? resolved : path;
    CHECK(strlen(real) < sizeof af->path, "path too long: %s", real);
    snprintf(af->path, sizeof af->path, "%s", real);
    snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.%ld", real, (long)getpid());
    af->f = fopen(af->tmp_path, "w");
    IO_CHECK(af->f != NULL, "cannot create %s", af->tmp_path);
    set_pending(af->tmp_path, 1);
    return af->f;
}

void atomic_commit(AtomicFile *af) {
    int ok = fflush(af->f) == 0 && fsync(fileno(af->f)) == 0;
    int saved = errno;
    ok = (fclose(af->f) == 0) && ok;
    if (!ok) {
        if (!saved) saved = errno;
        remove_pending();
        die_errno_at(__FILE__, __LINE__, saved, "cannot write %s", af->path);
    }
    /* what appeared at the path meanwhile is not ours to replace */
    struct stat st;
    if (lstat(af->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        remove_pending();
        die_at(__FILE__, __LINE__, "%s is %s now, not a regular file: left as it is", af->path,
               kind_of(st.st_mode));
    }
    if (rename(af->tmp_path, af->path) != 0) {
        int e = errno;
        remove_pending();
        die_errno_at(__FILE__, __LINE__, e, "cannot rename %s to %s", af->tmp_path, af->path);
    }
    set_pending(af->tmp_path, 0);
}

uint64_t fnv1a64_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}
