#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

long cli_int(const char *flag, const char *arg, long min, long max) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end != '\0' || v < min || v > max)
        USER_ERROR("%s expects an integer in %ld..%ld, got '%s'", flag, min, max, arg);
    return v;
}

unsigned long long cli_u64(const char *flag, const char *arg) {
    char *end;
    errno = 0;
    if (arg[0] == '-' || arg[0] == '\0')
        USER_ERROR("%s expects a non-negative integer, got '%s'", flag, arg);
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno || *end != '\0') USER_ERROR("%s expects a non-negative integer, got '%s'", flag, arg);
    return v;
}

double cli_double(const char *flag, const char *arg, double min, double max) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (errno || end == arg || *end != '\0' || !isfinite(v) || v < min || v > max)
        USER_ERROR("%s expects a number in [%g, %g], got '%s'", flag, min, max, arg);
    return v;
}

void cli_string(char *dst, size_t size, const char *flag, const char *arg) {
    if (arg[0] == '\0') USER_ERROR("%s expects a non-empty value", flag);
    if (strlen(arg) >= size) USER_ERROR("%s: value too long (at most %zu characters)", flag, size - 1);
    memcpy(dst, arg, strlen(arg) + 1);
}

void cli_bad_option(const char *argv_word, const char *help_hint) {
    USER_ERROR("bad option '%s' (unknown, or missing its value); %s", argv_word, help_hint);
}
