#include "check.h"

const char *g_program_name = "dtlab";

void program_set_name(const char *argv0) {
    const char *slash = strrchr(argv0, '/');
    g_program_name = slash ? slash + 1 : argv0;
}

__attribute__((noreturn))
static void vdie(const char *file, int line, int errnum, const char *fmt, va_list ap) {
    fflush(stdout);
    fprintf(stderr, "%s: fatal: %s:%d: ", g_program_name, file, line);
    vfprintf(stderr, fmt, ap);
    if (errnum) fprintf(stderr, ": %s", strerror(errnum));
    fputc('\n', stderr);
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
    fprintf(stderr, "%s: error: ", g_program_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(EXIT_USER_ERROR);
}

void not_implemented_at(const char *func, const char *file, int line) {
    fflush(stdout);
    fprintf(stderr, "%s: not implemented: %s (%s:%d) - this is your task in the lab\n",
            g_program_name, func, file, line);
    exit(EXIT_NOT_IMPLEMENTED);
}
