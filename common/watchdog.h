/* watchdog.h: a rank that stops answering ends the job, and one line says
 * why, naming the rank at fault.
 *
 * MPI has no timeout: a rank that freezes (SIGSTOP, a debugger, a lost
 * node) or a deadlock in a student's code (every rank in a blocking send,
 * two ranks each receiving from the other) leaves the job waiting forever.
 * Like NCCL's and PyTorch's watchdogs, every wait of the communicator
 * (comm.h) is bounded: a collective, send or receive that has not completed
 * after the timeout ends the whole job (exit status EXIT_COMM_TIMEOUT, 4)
 * with one line naming the rank, the group, the operation and how long it
 * waited, then what holds it up, as seen on this node:
 *   - the ranks it waits for (its peer, or the others of its group; those
 *     in the same collective only counted), each followed along its chain
 *     of waits (a rank in a send or receive waits for its peer) until a rank
 *     that is stopped, gone, computing or in a collective, or until the
 *     chain closes on itself: a deadlock;
 *   - then every other rank of the node that is stopped or dead (its
 *     process state in /proc), wherever it sits behind other groups:
 *   train_cp: comm timeout: rank 0 waited 5.0 s in send to rank 1 on group
 *   'cp' (4 ranks), over --comm-timeout 5; rank 1 waits in send to rank 2 on
 *   group 'cp' for 5.0 s; rank 2 (pid 4242) is stopped (a signal or a
 *   debugger)
 *   check_collectives: comm timeout: rank 0 waited 2.0 s in send to rank 1
 *   ...; rank 1 waits in send to rank 2 on group 'world' for 2.0 s; rank 2
 *   waits in send to rank 0 on group 'world' for 2.0 s (a cycle of waits: a
 *   deadlock)
 * One failure is one line, whichever rank notices: the first rank of a
 * node to report takes the node's report (the others stay silent and are
 * ended with the job), and rank r waits 0.25 min(r, 8) s longer than the
 * timeout, so that across nodes too the lowest one reports and the others
 * are ended before they do. A rank that was stopped itself says nothing
 * when it runs again (mpirun resumes it to end it): time in which it did
 * not run (no poll for a second, or half the timeout) does not count as
 * waiting.
 *
 * The timeout: 300 s by default (generous: only load imbalance is waited
 * for, never the computation itself), the environment variable
 * KIT_COMM_TIMEOUT, or a program's --comm-timeout S (0 = wait forever).
 *
 * When mpirun ends the job with SIGTERM (mpirun sends SIGCONT and SIGTERM
 * to every rank), one rank of the node says why, unless a rank left by
 * itself (it has said why):
 *   - a rank died (SIGKILL, a crash): mpirun noticed and ends the others;
 *       train_zero: fatal: rank 1 (pid 4242) died without a message
 *       (killed by a signal, or crashed); the job is ending
 *   - SIGTERM sent to a rank itself, not by mpirun:
 *       train_ddp: ended: rank 1 (pid 4242) got SIGTERM from pid 4200, not
 *       from mpirun; the job is ending
 *   - mpirun itself got SIGTERM, SIGINT or SIGHUP (kill, Ctrl-C, a batch
 *     system; said on rank 0's node only, as a rank may have failed on
 *     another node unseen):
 *       train_cp: ended: mpirun ended the job with SIGTERM: mpirun itself
 *       got a signal (kill, Ctrl-C, a batch system's time limit); no rank
 *       had failed
 * mpirun gives the other ranks SIGKILL as soon as one has died of its
 * SIGTERM, so the ranks of the node live until that line is written.
 *
 * All of it relies on a page of memory shared by the ranks of a node (MPI's
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
