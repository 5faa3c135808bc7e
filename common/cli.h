/* cli.h: parse one command-line value, or fail with one clear line.
 * Each helper names the flag and the offending text, e.g.
 *   train_gpt: error: --steps expects an integer in 1..10000000, got 'abc'
 * and exits with status 2 (check.h). */
#ifndef CLI_H
#define CLI_H

#include <stddef.h>

long cli_int(const char *flag, const char *arg, long min, long max);
unsigned long long cli_u64(const char *flag, const char *arg);
double cli_double(const char *flag, const char *arg, double min, double max);
void cli_string(char *dst, size_t size, const char *flag, const char *arg);

/* For getopt_long's '?' and ':' results: one line naming the bad option. */
void cli_bad_option(const char *argv_word, const char *help_hint);

/* Print one option's --help line ("--flag ARG   what it does"), indented
 * by two and wrapped at CLI_HELP_COLUMNS, continuation lines aligned with
 * the start of its description; or a paragraph, wrapped */
enum { CLI_HELP_COLUMNS = 100 };
void cli_print_option(const char *line);
void cli_print_paragraph(const char *text);

/* A program that takes no options: --help (or -h) prints its usage line
 * and what it does (a paragraph, wrapped) and exits 0; any other word is
 * one error line. */
void cli_no_options(int argc, char **argv, const char *usage, const char *what);

#endif
