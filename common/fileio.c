#include "fileio.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

FILE *atomic_open(AtomicFile *af, const char *path) {
    CHECK(strlen(path) < sizeof af->path, "path too long: %s", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp_path, sizeof af->tmp_path, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "w");
    IO_CHECK(af->f != NULL, "cannot create %s", af->tmp_path);
    return af->f;
}

void atomic_commit(AtomicFile *af) {
    int ok = fflush(af->f) == 0 && fsync(fileno(af->f)) == 0;
    int saved = errno;
    ok = (fclose(af->f) == 0) && ok;
    if (!ok) {
        unlink(af->tmp_path);
        errno = saved;
        IO_CHECK(0, "cannot write %s", af->path);
    }
    IO_CHECK(rename(af->tmp_path, af->path) == 0, "cannot rename %s to %s", af->tmp_path, af->path);
}

void make_dirs(const char *path) {
    char buf[1024];
    CHECK(strlen(path) < sizeof buf, "path too long: %s", path);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                IO_CHECK(0, "cannot create directory %s", buf);
            *p = saved;
            if (saved == '\0') break;
        }
    }
    struct stat st;
    IO_CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode), "%s is not a directory", path);
}
