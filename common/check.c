#include "check.h"

const char *g_program_name = "dtlab";

void program_set_name(const char *argv0) {
    const char *slash = strrchr(argv0, '/');
    g_program_name = slash ? slash + 1 : argv0;
}

static int g_world_rank;                       /* 0 without MPI */
static void (*g_end_rank)(int status);         /* NULL without MPI */
static void (*g_abort_job)(int status);

void check_set_mpi_hooks(int world_rank, void (*end_rank)(int status),
                         void (*abort_job)(int status)) {
    g_world_rank = world_rank;
    g_end_rank = end_rank;
    g_abort_job = abort_job;
}

__attribute__((noreturn))
static void end_rank(int status) {
    fflush(stdout);
    if (g_end_rank) g_end_rank(status);
    exit(status);
}

__attribute__((noreturn))
static void vdie(const char *file, int line, int errnum, const char *fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s: fatal: %s:%d: ", g_program_name, file, line);
    vfprintf(stderr, fmt, ap);
    if (errnum) fprintf(stderr, ": %s", strerror(errnum));
    fputc('\n', stderr);
    if (g_abort_job) g_abort_job(1);
    exit(1);
}

void die_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(file, line, 0, fmt, ap);
}

void die_errno_at(const char *file, int line, int errnum, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vdie(file, line, errnum, fmt, ap);
}

void user_error(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    if (g_world_rank == 0) {
        fprintf(stderr, "%s: error: ", g_program_name);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    end_rank(EXIT_USER_ERROR);
}

void not_implemented_at(const char *func, const char *file, int line) {
    fflush(stdout);
    if (g_world_rank == 0)
        fprintf(stderr, "%s: not implemented: %s (%s:%d) - this is your task in the lab\n",
                g_program_name, func, file, line);
    end_rank(EXIT_NOT_IMPLEMENTED);
}
