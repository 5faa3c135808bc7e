/* preflight.h: a run that cannot succeed is refused before any work.
 *
 * Two checks, each ending the run with one error line from rank 0 and exit
 * status 2 on every rank (check.h), before a byte is allocated or trained:
 *   outputs  --out is, or can be made, a directory that accepts files, and
 *            --dump-params a file the kit may replace (fileio.h's rules);
 *            --save a directory of checkpoints, not one checkpoint, and
 *            --resume a whole checkpoint of this model and seed
 *            (checkpoint.h: index, every file's size and checksum);
 *   memory   the planner's peak bytes per rank (memplan.h), times the ranks
 *            sharing one memory, fit in what that memory has available:
 *              CPU  ranks on one node share its RAM: MemAvailable from
 *                   /proc/meminfo, lowered to the cgroup's limit when the
 *                   process runs under one (containers, batch systems);
 *              GPU  ranks on one GPU share its free memory (cudaMemGetInfo).
 *            The planner counts the kit's own buffers exactly; MPI, BLAS
 *            and the CUDA context come on top, so passing is necessary for
 *            a run to fit, not a promise that it will.
 * Rank 0 decides from every node's figures, so the verdict is the same on
 * every rank. Every trainer calls preflight_run after parsing its options
 * and before allocating its model states; train_run_parallel (train.h)
 * refuses to start a run that skipped it.
 */
#ifndef PREFLIGHT_H
#define PREFLIGHT_H

#include "comm.h"
#include "memplan.h"
#include "train.h"

/* world: every rank of the job, or NULL for a single-process program. */
void preflight_run(const TrainOptions *o, const MemLayout *layout, Comm *world);
int preflight_passed(void);

/* Bytes of host memory this process could still get (see above). */
size_t preflight_host_available_bytes(void);

#endif
