/* watchdog.h: a rank that stops answering ends the job, and says why.
 *
 * MPI has no timeout: a rank that freezes (SIGSTOP, a debugger, a lost
 * node) or a deadlock in a student's code (every rank in a blocking send,
 * two ranks each receiving from the other) leaves the job waiting forever.
 * Like NCCL's and PyTorch's watchdogs, every wait of the communicator
 * (comm.h) is bounded: a collective, send or receive that has not completed
 * after the timeout ends the whole job (exit status EXIT_COMM_TIMEOUT, 4)
 * with one line naming the rank, the group, the operation and how long it
 * waited, and what the other ranks of the group on this node are doing:
 *   train_ddp: comm timeout: rank 0 waited 10.0 s in allreduce on group 'dp'
 *   (3 ranks), over --comm-timeout 10; rank 1 (pid 4242) is stopped; rank 2
 *   waits in allreduce on group 'dp' for 10.1 s
 * Ranks that wait on the same frozen peer time out together; rank r waits
 * 0.25 min(r, 8) s longer than the timeout, so the lowest one reports
 * alone and the others are ended before they do.
 *
 * The timeout: 300 s by default (generous: only load imbalance is waited
 * for, never the computation itself), the environment variable
 * KIT_COMM_TIMEOUT, or a program's --comm-timeout S (0 = wait forever).
 *
 * A rank that dies (SIGKILL, a crash) is noticed by mpirun, which ends the
 * others with SIGTERM; the first survivor to handle it names the dead rank:
 *   train_ddp: fatal: rank 1 (pid 4242) died without a message (killed by a
 *   signal, or crashed); the job is ending
 * Both rely on a page of memory shared by the ranks of a node (MPI's
 * shared-memory window), where each rank keeps its pid, whether it is
 * leaving normally, and what it waits for. Ranks on other nodes are not
 * seen, so their state is not described.
 */
#ifndef WATCHDOG_H
#define WATCHDOG_H

#include "comm.h"

#define COMM_TIMEOUT_DEFAULT_S 300.0

/* comm_init and comm_finalize call these (collective over the world). */
void watchdog_start(MPI_Comm world);
void watchdog_stop(void);

/* seconds; 0 waits forever */
void watchdog_set_timeout(double seconds);
double watchdog_timeout(void);

/* Around every blocking wait on a request of c: begin records what this
 * rank waits for (peer: the peer's rank in c for send and recv, -1 for a
 * collective), check ends the job once the wait is over the timeout, end
 * clears the record. */
void watchdog_begin(const Comm *c, CommOp op, int peer);
void watchdog_check(void);
void watchdog_end(void);

/* This rank leaves on purpose (an error it reported, MPI_Abort): peers must
 * not report it as dead. */
void watchdog_mark_leaving(void);

#endif
