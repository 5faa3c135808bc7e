#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "trace.h"

/* One rank's record in the node's shared page. Written by its owner only;
 * read by the others when they time out or outlive it. */
/* RUNNING, then LEAVING when the rank ends by itself (exit, an error it
 * reported, MPI_Finalize), or ENDED when mpirun's SIGTERM ends it */
enum { SLOT_RUNNING, SLOT_LEAVING, SLOT_ENDED };
typedef struct {
    int world_rank, pid;
    volatile int state;
    volatile int op;     /* CommOp of the wait in progress, -1 when not waiting */
    volatile int peer;   /* world rank of the peer (send, recv), -1 for a collective */
    char group[16];
    volatile double since;  /* trace_now() when the wait began */
} Slot;
/* reported: a rank of the node says why the job ends (taken atomically),
 * and the others stay silent, so that one failure is one line */
enum { UNREPORTED, REPORTING, REPORTED };
typedef struct {
    int reported;
    int nslots;
    Slot slots[];        /* by rank on the node */
} SharedPage;

/* A gap this long (or half the timeout, when shorter) between two polls of
 * one wait means that this process did not run (SIGSTOP, a debugger): that
 * is no time spent waiting for the others. */
#define PAUSE_S 1.0

static double g_timeout = COMM_TIMEOUT_DEFAULT_S;
static MPI_Win g_win = MPI_WIN_NULL;
static SharedPage *g_page;
static Slot *g_mine;
static int g_world_rank, g_world_size;
/* the wait in progress */
static const Comm *g_comm;
static CommOp g_op;
static int g_peer;        /* rank in g_comm, or -1 */
static double g_since;    /* start of the wait, moved on by this rank's own pauses */
static double g_allowed;  /* seconds the wait may last; 0 = forever */
static double g_last_poll;

void watchdog_set_timeout(double seconds) { g_timeout = seconds; }
double watchdog_timeout(void) { return g_timeout; }

void watchdog_mark_leaving(void) {
    if (g_mine) g_mine->state = SLOT_LEAVING;
}

/* The process's state letter from /proc/PID/stat (R, S, D, T, t, Z...), or
 * 0 when there is no such process. Async-signal-safe (open, read, close). */
static char proc_state(int pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');  /* the name may hold spaces */
    return paren && paren[1] == ' ' ? paren[2] : 0;
}

/* The process of a slot: 'X' gone, 'T' stopped (a signal, a debugger), 'R'
 * there and able to run (running or sleeping) */
static char slot_status(const Slot *s) {
    char st = proc_state(s->pid);
    if (st == 0 || st == 'Z' || st == 'X') return 'X';
    return st == 'T' || st == 't' ? 'T' : 'R';
}

static const Slot *slot_of(int world_rank) {
    for (int i = 0; g_page && i < g_page->nslots; i++)
        if (g_page->slots[i].world_rank == world_rank) return &g_page->slots[i];
    return NULL;
}

/* This rank is the one of its node that says why the job ends. */
static int take_report(void) {
    int none = UNREPORTED;
    return !g_page || __atomic_compare_exchange_n(&g_page->reported, &none, REPORTING, 0,
                                                  __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

/* Until the rank that says why the job ends has said it (1 s at most): the
 * first rank that dies of mpirun's SIGTERM makes mpirun SIGKILL the others
 * at once, the one writing the line too. Async-signal-safe. */
static void await_report(void) {
    const struct timespec ms = {0, 1000000};
    for (int i = 0; i < 1000; i++) {
        if (__atomic_load_n(&g_page->reported, __ATOMIC_SEQ_CST) != REPORTING) return;
        nanosleep(&ms, NULL);
    }
}

/* "<program>: <message>\n" in one write(2): callable from a signal handler */
__attribute__((format(printf, 1, 2)))
static void write_line(const char *fmt, ...) {
    char line[512];
    int n = snprintf(line, sizeof line, "%s: ", g_program_name);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, (size_t)n) < 0) return;
}

static int other_rank_left(void) {
    for (int i = 0; i < g_page->nslots; i++)
        if (&g_page->slots[i] != g_mine && g_page->slots[i].state == SLOT_LEAVING) return 1;
    return 0;
}

/* a rank of the node that is gone without leaving: killed, or crashed */
static const Slot *dead_rank(void) {
    for (int i = 0; i < g_page->nslots; i++) {
        const Slot *s = &g_page->slots[i];
        if (s != g_mine && s->state == SLOT_RUNNING && slot_status(s) == 'X') return s;
    }
    return NULL;
}

/* SIGTERM that no rank of the node explained by leaving: say why, from one
 * rank of the node. A rank gone while still "running" died without a word;
 * a SIGTERM not from our parent (mpirun, or its daemon on other nodes) was
 * sent to this rank itself; otherwise mpirun ends the job because it got a
 * signal (mpirun turns SIGTERM, SIGINT and SIGHUP into SIGCONT and SIGTERM
 * to every rank), said by rank 0's node only, since on other nodes a rank
 * may have failed unseen from here. */
static void say_why_ended(pid_t sender) {
    const Slot *dead = dead_rank();
    if (dead)
        write_line("fatal: rank %d (pid %d) died without a message (killed by a signal, or "
                   "crashed); the job is ending", dead->world_rank, dead->pid);
    else if (sender != getppid())
        write_line("ended: rank %d (pid %d) got SIGTERM from pid %d, not from mpirun; the job "
                   "is ending", g_world_rank, (int)getpid(), (int)sender);
    else if (slot_of(0))
        write_line("ended: mpirun ended the job with SIGTERM: mpirun itself got a signal "
                   "(kill, Ctrl-C, a batch system's time limit); %s",
                   g_page->nslots == g_world_size ? "no rank had failed"
                                                  : "no rank of this node had failed");
}

/* One rank of the node says why the job ends; the others live until it has
 * (await_report). */
static void explain_end(pid_t sender) {
    if (!take_report()) {
        await_report();
        return;
    }
    say_why_ended(sender);
    __atomic_store_n(&g_page->reported, REPORTED, __ATOMIC_SEQ_CST);
}

/* SIGTERM: mpirun ends the job because a rank ended, or because it was told
 * to. When a rank of the node left by itself, it has said why (and a rank
 * gone while still "running" may then be one that mpirun ended with SIGKILL
 * before its own handler ran): nothing to add. */
static void on_sigterm(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (g_page) {
        g_mine->state = SLOT_ENDED;
        if (!other_rank_left()) explain_end(info->si_pid);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void leave_at_exit(void) { watchdog_mark_leaving(); }

static void read_timeout_from_env(void) {
    const char *env = getenv("KIT_COMM_TIMEOUT");
    if (!env) return;
    char *end;
    errno = 0;
    double v = strtod(env, &end);
    if (errno || end == env || *end || !(v >= 0 && v <= 1e7))
        USER_ERROR("KIT_COMM_TIMEOUT expects seconds in [0, 1e7] (0 = no timeout), got '%s'", env);
    g_timeout = v;
}

void watchdog_start(MPI_Comm world) {
    MPI_CHECK(MPI_Comm_rank(world, &g_world_rank));
    MPI_CHECK(MPI_Comm_size(world, &g_world_size));
    read_timeout_from_env();
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, g_world_rank, MPI_INFO_NULL, &node));
    int rank, size;
    MPI_CHECK(MPI_Comm_rank(node, &rank));
    MPI_CHECK(MPI_Comm_size(node, &size));
    MPI_Aint bytes = rank == 0 ? (MPI_Aint)(sizeof(SharedPage) + (size_t)size * sizeof(Slot)) : 0;
    void *base;
    MPI_CHECK(MPI_Win_allocate_shared(bytes, 1, MPI_INFO_NULL, node, &base, &g_win));
    MPI_Aint got;
    int disp;
    MPI_CHECK(MPI_Win_shared_query(g_win, 0, &got, &disp, &base));
    SharedPage *page = base;
    Slot *mine = &page->slots[rank];
    memset(mine, 0, sizeof *mine);
    mine->world_rank = g_world_rank;
    mine->pid = (int)getpid();
    mine->op = mine->peer = -1;
    if (rank == 0) {
        page->reported = UNREPORTED;
        page->nslots = size;
    }
    MPI_CHECK(MPI_Barrier(node));  /* every slot is written before anyone reads */
    MPI_CHECK(MPI_Comm_free(&node));
    g_page = page;
    g_mine = mine;
    atexit(leave_at_exit);
    check_add_exit_hook(leave_at_exit);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigterm;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

void watchdog_stop(void) {
    if (!g_page) return;
    watchdog_mark_leaving();
    signal(SIGTERM, SIG_DFL);
    g_page = NULL;
    g_mine = NULL;
    MPI_CHECK(MPI_Win_free(&g_win));
}

/* The report of a timeout, built piece by piece ("; rank 2 ..."); what does
 * not fit is cut. */
typedef struct {
    char text[1536];
    size_t len;
} Report;

__attribute__((format(printf, 2, 3)))
static void add(Report *r, const char *fmt, ...) {
    if (r->len >= sizeof r->text - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->text + r->len, sizeof r->text - r->len, fmt, ap);
    va_end(ap);
    if (n > 0) r->len += (size_t)n;
}

/* "recv from rank 3", "send to rank 1", "allreduce" */
static void describe_op(char *buf, size_t n, int op, int peer_world) {
    const char *prep = op == OP_SEND ? " to" : op == OP_RECV ? " from" : " with";
    if (peer_world >= 0) snprintf(buf, n, "%s%s rank %d", comm_op_name((CommOp)op), prep, peer_world);
    else snprintf(buf, n, "%s", comm_op_name((CommOp)op));
}

/* Adds what the rank of s is doing. Returns the slot of the rank it waits
 * for in a send or receive, NULL when it waits for no rank of this node. */
static const Slot *describe(Report *r, const Slot *s, double now) {
    char st = slot_status(s);
    int op = s->op, peer = s->peer;  /* read once: the owner changes them */
    if (st == 'X') {
        add(r, "; rank %d (pid %d) is gone", s->world_rank, s->pid);
    } else if (st == 'T') {
        add(r, "; rank %d (pid %d) is stopped (a signal or a debugger)", s->world_rank, s->pid);
    } else if (op < 0) {
        add(r, "; rank %d is running, not in a communication call", s->world_rank);
    } else {
        char what[96];
        describe_op(what, sizeof what, op, peer);
        add(r, "; rank %d waits in %s on group '%s' for %.1f s", s->world_rank, what, s->group,
            now - s->since);
        return peer >= 0 ? slot_of(peer) : NULL;
    }
    return NULL;
}

/* Describes s, then the rank it waits for, and so on: a chain of waits that
 * ends at a rank waiting for no rank of this node (stopped, gone, computing,
 * in a collective), at one described already, or back in itself or at this
 * rank: a deadlock. seen[] holds the chain that described each slot (this
 * rank's: -1). */
static void follow(Report *r, const Slot *s, int *seen, int chain, double now) {
    while (s && !seen[s - g_page->slots]) {
        seen[s - g_page->slots] = chain;
        s = describe(r, s, now);
    }
    if (s && (seen[s - g_page->slots] == chain || s == g_mine))
        add(r, " (a cycle of waits: a deadlock)");
}

/* a rank of this rank's group, in the same collective and able to run */
static int waits_with_me(const Slot *s) {
    return g_peer < 0 && s->op == (int)g_op && strcmp(s->group, g_comm->name) == 0 &&
           slot_status(s) == 'R';
}

/* The ranks this rank waits for (its peer, or the other ranks of its
 * group), each with its chain of waits; those that wait in the same
 * collective are only counted. */
static void describe_group(Report *r, int *seen, double now) {
    const Comm *c = g_comm;
    Report with_me = {.len = 0};
    int nwith = 0;
    for (int i = 0; i < c->size; i++) {
        const Slot *s = slot_of(c->world_ranks[i]);
        if (!s || seen[s - g_page->slots] || (g_peer >= 0 && i != g_peer)) continue;
        if (waits_with_me(s)) {
            seen[s - g_page->slots] = i + 1;
            add(&with_me, "%s%d", nwith++ ? ", " : "", s->world_rank);
        } else {
            follow(r, s, seen, i + 1, now);
        }
    }
    if (nwith == 1) add(r, "; rank %s waits in it too", with_me.text);
    if (nwith > 1) add(r, "; ranks %s wait in it too", with_me.text);
}

/* Every rank of the node that is stopped or dead and not described yet: the
 * cause may sit behind a collective of another group. */
static void describe_stuck(Report *r, int *seen, double now) {
    for (int i = 0; i < g_page->nslots; i++) {
        const Slot *s = &g_page->slots[i];
        if (seen[i] || s->state != SLOT_RUNNING || slot_status(s) == 'R') continue;
        seen[i] = -2;
        describe(r, s, now);
    }
}

static void describe_others(Report *r, double now) {
    int *seen = calloc((size_t)g_page->nslots, sizeof *seen);
    CHECK(seen, "out of memory");
    seen[g_mine - g_page->slots] = -1;
    describe_group(r, seen, now);
    describe_stuck(r, seen, now);
    free(seen);
    if (!r->len) add(r, "; the ranks it waits for run on other nodes, not seen from here");
}

/* Another rank of the node has said why the job ends and is ending it: this
 * one stays silent (and ends the job itself should that fail). */
__attribute__((noreturn))
static void end_silently(void) {
    comm_abort_gpus();
    sleep(CHECK_GRACE_SECONDS);
    MPI_Abort(MPI_COMM_WORLD, EXIT_COMM_TIMEOUT);
    exit(EXIT_COMM_TIMEOUT);
}

__attribute__((noreturn))
static void timed_out(double now) {
    watchdog_mark_leaving();
    if (!take_report()) end_silently();
    const Comm *c = g_comm;
    char what[96];
    describe_op(what, sizeof what, g_op, g_peer >= 0 ? c->world_ranks[g_peer] : -1);
    Report others = {.len = 0};
    if (g_page) describe_others(&others, now);
    die_job(EXIT_COMM_TIMEOUT, "comm timeout",
            "rank %d waited %.1f s in %s on group '%s' (%d rank%s), over --comm-timeout %g%s",
            g_world_rank, now - g_since, what, c->name, c->size, c->size == 1 ? "" : "s",
            g_timeout, others.text);
}

void watchdog_begin(const Comm *c, CommOp op, int peer) {
    g_comm = c;
    g_op = op;
    g_peer = peer;
    g_since = g_last_poll = trace_now();
    int stagger = g_world_rank < 8 ? g_world_rank : 8;
    g_allowed = g_timeout > 0 ? g_timeout + 0.25 * stagger : 0;
    if (g_mine) {
        g_mine->since = g_since;
        g_mine->peer = peer >= 0 ? c->world_ranks[peer] : -1;
        snprintf(g_mine->group, sizeof g_mine->group, "%s", c->name);
        g_mine->op = op;
    }
}

/* A pause of this process (PAUSE_S without a poll) moves the wait's start
 * on: a rank that was stopped itself must not, once it runs again, report
 * the others for the time it did not run (they have named it already), and
 * a job paused as a whole goes on when resumed. */
void watchdog_check(void) {
    if (g_allowed <= 0) return;
    double now = trace_now();
    double pause = g_timeout < 2 * PAUSE_S ? g_timeout / 2 : PAUSE_S;
    if (now - g_last_poll > pause) g_since += now - g_last_poll;
    g_last_poll = now;
    if (now - g_since > g_allowed) timed_out(now);
}

void watchdog_end(void) {
    g_comm = NULL;
    if (g_mine) g_mine->op = -1;
}
