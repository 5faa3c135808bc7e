#include "check.h"

#include <signal.h>
#include <unistd.h>

const char *g_program_name = "dtlab";

static const char *g_segv_line;
static size_t g_segv_len;

static void segv_says(int sig) {
    (void)sig;
    if (write(STDOUT_FILENO, g_segv_line, g_segv_len) < 0 || write(STDOUT_FILENO, "\n", 1) < 0)
        _exit(1);
    _exit(1);
}

void check_segv_says(const char *line) {
    g_segv_line = line;
    g_segv_len = strlen(line);
    signal(SIGSEGV, segv_says);
}

void program_set_name(const char *argv0) {
    const char *slash = strrchr(argv0, '/');
    g_program_name = slash ? slash + 1 : argv0;
}

static int g_world_rank;                 /* 0 without MPI */
static void (*g_abort_job)(int status);  /* NULL without MPI */
enum { MAX_EXIT_HOOKS = 4 };
static void (*g_exit_hooks[MAX_EXIT_HOOKS])(void);

void check_add_exit_hook(void (*hook)(void)) {
    for (int i = 0; i < MAX_EXIT_HOOKS; i++) {
        if (g_exit_hooks[i] == hook) return;
        if (!g_exit_hooks[i]) {
            g_exit_hooks[i] = hook;
            return;
        }
    }
    CHECK(0, "more than %d exit hooks", MAX_EXIT_HOOKS);
}

/* Each hook once, however many exit paths a failure goes through */
static void run_exit_hooks(void) {
    for (int i = 0; i < MAX_EXIT_HOOKS && g_exit_hooks[i]; i++) {
        void (*hook)(void) = g_exit_hooks[i];
        g_exit_hooks[i] = NULL;
        hook();
    }
}

void check_set_mpi_hooks(int world_rank, void (*abort_job)(int status)) {
    g_world_rank = world_rank;
    g_abort_job = abort_job;
}

/* Errors every rank hits alike: rank 0's exit ends the job, so the other
 * ranks give it time to report first (check.h). */
static void let_rank0_report_first(void) {
    run_exit_hooks();
    fflush(stdout);
    if (g_abort_job && g_world_rank != 0) sleep(CHECK_GRACE_SECONDS);
}

static int g_open_line;  /* stdout ends in a progress bar's line without its newline */

void check_set_open_line(int open) { g_open_line = open; }

void check_end_open_line(void) {
    if (g_open_line) fputc('\n', stdout);
    g_open_line = 0;
}

/* The line break a message owes a progress bar left open on stdout
 * (runlog.h: only a bar leaves one): "\n" once, then "". It heads the
 * message's own write to stderr rather than going to stdout: a bar is drawn
 * for a person at a terminal, where the two streams meet, and under mpirun
 * they reach it by separate channels in either order, so a newline written
 * to stdout could land after the message. */
static const char *open_line_break(void) {
    const char *brk = g_open_line ? "\n" : "";
    g_open_line = 0;
    return brk;
}

/* "<program>: <kind>: <message>[: <strerror>]" in a single write, so the
 * lines of several ranks sharing one terminal never interleave mid-line. */
static void print_line(const char *kind, int errnum, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "%s%s: %s: %s%s%s\n", open_line_break(), g_program_name, kind, msg,
            errnum ? ": " : "", errnum ? strerror(errnum) : "");
}

/* The end of every failure path: undo, then end the job (or the process).
 * Through MPI_Abort even for the errors every rank hits alike: a rank
 * that exits without MPI_Finalize makes mpirun wait two seconds before it
 * ends the others (Open MPI's odls_base_sigkill_timeout), an abort does
 * not. */
__attribute__((noreturn))
static void end_job(int status) {
    run_exit_hooks();
    if (g_abort_job) g_abort_job(status);
    exit(status);
}

__attribute__((noreturn))
static void vdie(const char *file, int line, int errnum, const char *fmt, va_list ap) {
    fflush(stdout);
    char kind[1100];
    snprintf(kind, sizeof kind, "fatal: %s:%d", file, line);
    print_line(kind, errnum, fmt, ap);
    end_job(1);
}

void die_job(int status, const char *kind, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    va_start(ap, fmt);
    print_line(kind, 0, fmt, ap);
    va_end(ap);
    end_job(status);
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
    let_rank0_report_first();
    va_start(ap, fmt);
    print_line("error", 0, fmt, ap);
    va_end(ap);
    end_job(EXIT_USER_ERROR);
}

void not_implemented_at(const char *func, const char *file, int line) {
    let_rank0_report_first();
    fprintf(stderr, "%s%s: not implemented: %s (%s:%d) - this is your task in the lab\n",
            open_line_break(), g_program_name, func, file, line);
    end_job(EXIT_NOT_IMPLEMENTED);
}
