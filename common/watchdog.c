#include "watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
typedef struct {
    int reported;        /* a survivor has named the dead rank (taken atomically) */
    int nslots;
    Slot slots[];        /* by rank on the node */
} SharedPage;

static double g_timeout = COMM_TIMEOUT_DEFAULT_S;
static MPI_Win g_win = MPI_WIN_NULL;
static SharedPage *g_page;
static Slot *g_mine;
static int g_world_rank;
/* the wait in progress */
static const Comm *g_comm;
static CommOp g_op;
static int g_peer;        /* rank in g_comm, or -1 */
static double g_since, g_deadline;

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

static int is_gone(const Slot *s) {
    char st = proc_state(s->pid);
    return st == 0 || st == 'Z' || st == 'X';
}

/* SIGTERM: mpirun ends the job because a rank ended. Name it if it died
 * without saying anything (its slot still says running), once per node;
 * but not when a rank of the node left by itself: that rank said why, and
 * a rank gone while still "running" may then be one that mpirun ended
 * (SIGKILL after SIGTERM) before its own handler ran. */
static void on_sigterm(int sig) {
    if (g_page) {
        g_mine->state = SLOT_ENDED;
        int left = 0;
        for (int i = 0; i < g_page->nslots; i++)
            left |= &g_page->slots[i] != g_mine && g_page->slots[i].state == SLOT_LEAVING;
        for (int i = 0; i < g_page->nslots && !left; i++) {
            const Slot *s = &g_page->slots[i];
            if (s == g_mine || s->state != SLOT_RUNNING || !is_gone(s)) continue;
            if (__atomic_exchange_n(&g_page->reported, 1, __ATOMIC_SEQ_CST)) break;
            char line[512];
            int n = snprintf(line, sizeof line,
                             "%s: fatal: rank %d (pid %d) died without a message (killed by a "
                             "signal, or crashed); the job is ending\n",
                             g_program_name, s->world_rank, s->pid);
            if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) break;
            break;
        }
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
    if (rank == 0) page->nslots = size;
    MPI_CHECK(MPI_Barrier(node));  /* every slot is written before anyone reads */
    MPI_CHECK(MPI_Comm_free(&node));
    g_page = page;
    g_mine = mine;
    atexit(leave_at_exit);
    check_add_exit_hook(leave_at_exit);
    signal(SIGTERM, on_sigterm);
}

void watchdog_stop(void) {
    if (!g_page) return;
    watchdog_mark_leaving();
    signal(SIGTERM, SIG_DFL);
    g_page = NULL;
    g_mine = NULL;
    MPI_CHECK(MPI_Win_free(&g_win));
}

static const Slot *slot_of(int world_rank) {
    for (int i = 0; g_page && i < g_page->nslots; i++)
        if (g_page->slots[i].world_rank == world_rank) return &g_page->slots[i];
    return NULL;
}

/* "recv from rank 3", "send to rank 1", "allreduce" */
static void describe_op(char *buf, size_t n, int op, int peer_world) {
    const char *prep = op == OP_SEND ? " to" : op == OP_RECV ? " from" : " with";
    if (peer_world >= 0) snprintf(buf, n, "%s%s rank %d", comm_op_name((CommOp)op), prep, peer_world);
    else snprintf(buf, n, "%s", comm_op_name((CommOp)op));
}

/* what world rank w is doing, as seen from this node; "" when not seen */
static void describe_rank(char *buf, size_t n, int w, double now) {
    const Slot *s = slot_of(w);
    buf[0] = '\0';
    if (!s) return;
    char st = proc_state(s->pid);
    if (st == 0 || st == 'Z' || st == 'X')
        snprintf(buf, n, "rank %d (pid %d) is gone", w, s->pid);
    else if (st == 'T' || st == 't')
        snprintf(buf, n, "rank %d (pid %d) is stopped (a signal or a debugger)", w, s->pid);
    else if (s->op >= 0) {
        char what[96];
        describe_op(what, sizeof what, s->op, s->peer);
        snprintf(buf, n, "rank %d waits in %s on group '%s' for %.1f s", w, what, s->group,
                 now - s->since);
    } else
        snprintf(buf, n, "rank %d is running, not in a communication call", w);
}

__attribute__((noreturn))
static void timed_out(double now) {
    const Comm *c = g_comm;
    char what[96], others[1024] = "";
    int peer_world = g_peer >= 0 ? c->world_ranks[g_peer] : -1;
    describe_op(what, sizeof what, g_op, peer_world);
    size_t len = 0;
    int described = 0;
    for (int r = 0; r < c->size && len < sizeof others - 200; r++) {
        if (r == c->rank || (g_peer >= 0 && r != g_peer)) continue;
        char one[200];
        describe_rank(one, sizeof one, c->world_ranks[r], now);
        if (!one[0]) continue;
        len += (size_t)snprintf(others + len, sizeof others - len, "; %s", one);
        described++;
    }
    if (!described)
        snprintf(others, sizeof others, "; the other ranks run on other nodes, not seen from here");
    watchdog_mark_leaving();
    die_job(EXIT_COMM_TIMEOUT, "comm timeout",
            "rank %d waited %.1f s in %s on group '%s' (%d rank%s), over --comm-timeout %g%s",
            g_world_rank, now - g_since, what, c->name, c->size, c->size == 1 ? "" : "s",
            g_timeout, others);
}

void watchdog_begin(const Comm *c, CommOp op, int peer) {
    g_comm = c;
    g_op = op;
    g_peer = peer;
    g_since = trace_now();
    int stagger = g_world_rank < 8 ? g_world_rank : 8;
    g_deadline = g_timeout > 0 ? g_since + g_timeout + 0.25 * stagger : 0;
    if (g_mine) {
        g_mine->since = g_since;
        g_mine->peer = peer >= 0 ? c->world_ranks[peer] : -1;
        snprintf(g_mine->group, sizeof g_mine->group, "%s", c->name);
        g_mine->op = op;
    }
}

void watchdog_check(void) {
    if (g_deadline <= 0) return;
    double now = trace_now();
    if (now > g_deadline) timed_out(now);
}

void watchdog_end(void) {
    g_comm = NULL;
    if (g_mine) g_mine->op = -1;
}
