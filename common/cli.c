#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
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

/* text from column lead, words wrapped at CLI_HELP_COLUMNS onto lines
 * that start at column indent */
static void print_wrapped(const char *text, int lead, int indent) {
    int col = printf("%*s", lead, "");
    for (const char *w = text; *w;) {
        int spaces = (int)strspn(w, " ");
        int n = (int)strcspn(w + spaces, " ");
        const char *word = w + spaces;
        if (col > indent && col + spaces + n > CLI_HELP_COLUMNS) {
            col = printf("\n%*s", indent, "") - 1;
            spaces = 0;
        }
        col += printf("%*s%.*s", spaces, "", n, word);
        w = word + n;
    }
    printf("\n");
}

void cli_print_option(const char *line) {
    const char *gap = strstr(line, "  ");  /* the flag's padding: the description follows */
    print_wrapped(line, 2, 2 + (gap ? (int)(gap + strspn(gap, " ") - line) : 0));
}

void cli_print_paragraph(const char *text) { print_wrapped(text, 0, 0); }

void cli_no_options(int argc, char **argv, const char *usage, const char *what) {
    if (argc < 2) return;
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: %s\n", usage);
        cli_print_paragraph(what);
        exit(0);
    }
    USER_ERROR("unexpected argument '%s': this program takes no options (see --help)", argv[1]);
}
