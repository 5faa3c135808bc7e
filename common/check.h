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
#define EXIT_COMM_TIMEOUT 4     /* the communication watchdog ended the job (comm.h) */

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

/* The job failed, not this code nor its input (a peer stopped answering):
 * "<program>: <kind>: <message>" and the whole job ends with `status`. */
__attribute__((noreturn, format(printf, 3, 4)))
void die_job(int status, const char *kind, const char *fmt, ...);

/* The console's progress line (runlog.h) is open: an error line starts on
 * a new line instead of running on after it. */
void check_set_open_line(int open);

/* Before another stdout line while the training runs (a checkpoint's
 * "saved ..."): ends the open progress line, if any, on stdout. */
void check_end_open_line(void);

/* Work to do before any exit through these paths (fatal, user error, not
 * implemented), such as removing the temporary file of an atomic write
 * (fileio.h) or telling the other ranks this one leaves on purpose
 * (watchdog.h). Each function is added once, however often it is given. */
void check_add_exit_hook(void (*hook)(void));

/* Under MPI (comm_init sets the hooks, comm_finalize removes them) a failure
 * must end the whole job with one message and a status mpirun passes on,
 * never a hang:
 *   - fatal errors, possibly on one rank only: that rank prints its line and
 *     calls abort_job (MPI_Abort), which ends every rank; mpirun exits 1;
 *   - user errors and NOT_IMPLEMENTED: assumed to happen on every rank alike
 *     (all ranks run the same flag and config checks and reach the same
 *     unwritten lab function), so world rank 0 prints the line and exits at
 *     once; mpirun then stops the other ranks and exits with rank 0's status
 *     (2 or 3). The other ranks stay quiet and wait CHECK_GRACE_SECONDS for
 *     that; a rank still alive after it (rank 0 did not fail the same way)
 *     prints the line itself and exits, so the job ends all the same.
 * These paths do not call MPI_Finalize: it waits for every rank, so it would
 * hang whenever only some ranks fail (a pipeline stage's own function, say).
 * Hence a multi-rank program calls comm_init before it parses its flags. */
#define CHECK_GRACE_SECONDS 5
void check_set_mpi_hooks(int world_rank, void (*abort_job)(int status));

#define CHECK(cond, ...) \
    do { if (!(cond)) die_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)

/* For calls that set errno (fopen, fwrite, rename...): the message gets
 * ": strerror(errno)" appended. */
#define IO_CHECK(cond, ...) \
    do { if (!(cond)) die_errno_at(__FILE__, __LINE__, errno, __VA_ARGS__); } while (0)

#define USER_ERROR(...) user_error(__VA_ARGS__)

#define NOT_IMPLEMENTED() not_implemented_at(__func__, __FILE__, __LINE__)

/* For the programs that check a lab's functions alone (check_ckpt,
 * check_act): from now on a SIGSEGV prints line (with a newline) on
 * stdout and exits 1, so that memory the checked code must not read is a
 * reason, not a crash. line must outlive the process. */
void check_segv_says(const char *line);

#endif
