#include "trace.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm.h"
#include "fileio.h"

typedef struct {
    char category[12], name[32], group[16];
    double start, end;
    size_t bytes;
} TraceEvent;

static TraceEvent *g_events;
static size_t g_count, g_capacity, g_dropped;
static double g_zero;
static int g_enabled;  /* off until the clock starts: a single-process run keeps no trace */

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void trace_start_clock(void) {
    g_zero = monotonic_seconds();
    g_enabled = 1;
}

double trace_now(void) { return monotonic_seconds() - g_zero; }

void trace_event(const char *category, const char *name, const char *group, double start,
                 double end, size_t bytes) {
    if (!g_enabled) return;
    if (g_count == g_capacity) {
        if (g_capacity == TRACE_MAX_EVENTS) {
            g_dropped++;
            return;
        }
        /* plain malloc: the trace is instrumentation, not a model buffer */
        g_capacity = g_capacity ? 2 * g_capacity : 1024;
        g_events = realloc(g_events, g_capacity * sizeof *g_events);
        CHECK(g_events, "out of memory for %zu trace events", g_capacity);
    }
    TraceEvent *e = &g_events[g_count++];
    snprintf(e->category, sizeof e->category, "%s", category);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->group, sizeof e->group, "%s", group ? group : "");
    e->start = start;
    e->end = end;
    e->bytes = bytes;
}

void trace_clear(void) { g_count = g_dropped = 0; }

size_t trace_count(void) { return g_count; }

/* This rank's events as text, one per line, in the format `line` writes. */
typedef int (*EventFormat)(char *dst, size_t size, int rank, const TraceEvent *e);

static char *events_text(int rank, EventFormat line, const char *head) {
    size_t cap = 256 * (g_count + 1) + strlen(head), len = strlen(head);
    char *text = malloc(cap);
    CHECK(text, "out of memory formatting the trace");
    memcpy(text, head, len + 1);
    for (size_t i = 0; i < g_count; i++) {
        int n = line(text + len, cap - len, rank, &g_events[i]);
        CHECK(n > 0 && (size_t)n < cap - len, "trace line too long");
        len += (size_t)n;
    }
    return text;
}

/* trace.json's ids: rank r is process r + 1 (viewers treat pid 0 as
 * none), its compute thread 1 and its communication thread 2 */
static int json_tid(const char *category) { return strcmp(category, "comm") == 0 ? 2 : 1; }

static int json_line(char *dst, size_t size, int rank, const TraceEvent *e) {
    /* ph "X" = a complete event; tid by category so comm and compute stack */
    return snprintf(dst, size,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                    "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"group\":\"%s\",\"bytes\":%zu}}",
                    e->name, e->category, rank + 1, json_tid(e->category), e->start * 1e6,
                    (e->end - e->start) * 1e6, e->group, e->bytes);
}

/* The metadata events that name rank r's process and threads and keep
 * the processes in rank order (Perfetto and chrome://tracing read them) */
static void json_names(char *dst, size_t size, int rank) {
    const int pid = rank + 1;
    snprintf(dst, size,
             ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
             "\"args\":{\"name\":\"rank %d\"}}"
             ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,"
             "\"args\":{\"sort_index\":%d}}"
             ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":1,"
             "\"args\":{\"name\":\"compute\"}}"
             ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":2,"
             "\"args\":{\"name\":\"communication\"}}",
             pid, rank, pid, rank, pid, pid);
}

static int csv_line(char *dst, size_t size, int rank, const TraceEvent *e) {
    return snprintf(dst, size, "%d,%s,%s,%s,%.9f,%.9f,%zu\n", rank, e->category, e->name,
                    e->group, e->start, e->end, e->bytes);
}

static void write_gathered(const char *path, EventFormat line, const char *head,
                           const char *tail_fmt) {
    Comm *world = comm_world();
    char names[768] = "";
    if (line == json_line) json_names(names, sizeof names, world->rank);
    char *mine = events_text(world->rank, line, names);
    char *all = comm_gather_text(world, mine);
    free(mine);
    unsigned long long dropped = g_dropped, total_dropped = 0;
    MPI_CHECK(MPI_Reduce(&dropped, &total_dropped, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0,
                         world->mpi));
    if (world->rank == 0) {
        AtomicFile af;
        FILE *f = atomic_open(&af, path);
        /* JSON: the first event's leading comma is skipped */
        const char *body = all;
        if (line == json_line && body[0] == ',') body += 2;
        IO_CHECK(fprintf(f, "%s%s", head, body) >= 0, "writing %s", path);
        if (tail_fmt) IO_CHECK(fprintf(f, tail_fmt, total_dropped) >= 0, "writing %s", path);
        atomic_commit(&af);
        free(all);
    }
}

void trace_write_json(const char *path) {
    write_gathered(path, json_line, "{\"traceEvents\":[\n",
                   "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"dropped_events\":%llu}}\n");
}

void trace_write_csv(const char *path) {
    /* (how many events were dropped is in trace.json) */
    write_gathered(path, csv_line, "rank,category,name,group,start_s,end_s,bytes\n", NULL);
}
