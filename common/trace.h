/* trace.h: timestamped events per rank, for timelines.
 *
 * Every communicator call records one event (category "comm"), and training
 * code records its phases (category "compute": forward, backward of a block,
 * optimizer). Times are seconds from a zero all ranks share (set by
 * comm_init after a barrier), so events of different ranks line up.
 *
 * Outputs (collective over the world; rank 0 writes):
 *   trace.json  Chrome/Perfetto trace: open it in ui.perfetto.dev or
 *               chrome://tracing; one process per rank, "rank R" (pid R + 1),
 *               with two threads, "compute" and "communication"
 *   trace.csv   rank,category,name,group,start_s,end_s,bytes  (gnuplot timelines)
 * The buffer holds TRACE_MAX_EVENTS per rank; later events are counted as
 * dropped (the outputs say how many) rather than growing without bound.
 */
#ifndef TRACE_H
#define TRACE_H

#include <stddef.h>

#define TRACE_MAX_EVENTS (1 << 20)

/* Seconds since the shared zero. */
double trace_now(void);
/* Set the zero to now (comm_init calls it right after a barrier). */
void trace_start_clock(void);

/* Record one event; name and group are copied (truncated to 31 characters). */
void trace_event(const char *category, const char *name, const char *group,
                 double start, double end, size_t bytes);
void trace_clear(void);
size_t trace_count(void);

void trace_write_json(const char *path);
void trace_write_csv(const char *path);

#endif
