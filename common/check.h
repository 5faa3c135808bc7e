/* check.h: error checks that name the failed call and where it happened.
 *
 * Two kinds of failure, two exits:
 *   - the user gave bad input (a flag, a config, a file): USER_ERROR prints one
 *     line "<program>: error: <message>" and exits with status 2;
 *   - the program itself failed (out of memory, an I/O call, a broken
 *     invariant): CHECK / IO_CHECK print "fatal: file:line: message" and exit 1.
 * A lab function the student has not written yet calls NOT_IMPLEMENTED(), which
 * says so and exits with status 3, so that tests and the grader can tell
 * "not implemented" from a crash.
 */
#ifndef CHECK_H
#define CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USER_ERROR 2
#define EXIT_NOT_IMPLEMENTED 3

/* Set by each program's main() (argv[0]'s base name) for its messages. */
extern const char *g_program_name;

void program_set_name(const char *argv0);

__attribute__((noreturn, format(printf, 3, 4)))
void die_at(const char *file, int line, const char *fmt, ...);

__attribute__((noreturn, format(printf, 4, 5)))
void die_errno_at(const char *file, int line, int errnum, const char *fmt, ...);

__attribute__((noreturn, format(printf, 1, 2)))
void user_error(const char *fmt, ...);

__attribute__((noreturn))
void not_implemented_at(const char *func, const char *file, int line);

/* Under MPI (comm_init sets these): user errors and "not implemented" are
 * printed by world rank 0 only and end each rank through end_rank (which
 * finalizes MPI: every rank runs the same checks and reaches the same
 * function, so all of them get there); fatal errors, possibly on one rank
 * only, end the whole job through abort_job (MPI_Abort), so no rank is left
 * waiting for a dead one. */
void check_set_mpi_hooks(int world_rank, void (*end_rank)(int status),
                         void (*abort_job)(int status));

#define CHECK(cond, ...) \
    do { if (!(cond)) die_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* For calls that set errno (fopen, fwrite, rename...): the message gets
 * ": strerror(errno)" appended. */
#define IO_CHECK(cond, ...) \
    do { if (!(cond)) die_errno_at(__FILE__, __LINE__, errno, __VA_ARGS__); } while (0)

#define USER_ERROR(...) user_error(__VA_ARGS__)

#define NOT_IMPLEMENTED() not_implemented_at(__func__, __FILE__, __LINE__)

#endif
