#include "preflight.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"
#include "device.h"
#include "fileio.h"

static int g_passed;

int preflight_passed(void) { return g_passed; }

/* one number from a file such as /proc/meminfo ("MemAvailable:  123 kB",
 * key "MemAvailable:") or cgroup's memory.max (key NULL: the first word);
 * 0 when absent or not a number ("max") */
static size_t read_number(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    while (fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, strlen(key)) != 0) continue;
        if (sscanf(line + (key ? strlen(key) : 0), "%llu", &v) != 1) v = 0;
        break;
    }
    fclose(f);
    return (size_t)v;
}

/* limit - usage of this process's cgroup (v2, or v1's memory controller);
 * SIZE_MAX without a limit */
static size_t cgroup_headroom(void) {
    char dir[600] = "", path[800];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        char line[600];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "0::", 3) == 0) {
                line[strcspn(line, "\n")] = '\0';
                snprintf(dir, sizeof dir, "%s", strcmp(line + 3, "/") ? line + 3 : "");
            }
        fclose(f);
    }
    const char *const pairs[][2] = {{"memory.max", "memory.current"},
                                    {"memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes"}};
    for (int i = 0; i < 2; i++)
        for (int own = 1; own >= 0; own--) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", own ? dir : "", pairs[i][0]);
            size_t limit = read_number(path, NULL);
            if (!limit || limit >= (size_t)1 << 60) continue;  /* "max", or v1's "unlimited" */
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/%s", own ? dir : "", pairs[i][1]);
            size_t used = read_number(path, NULL);
            return limit > used ? limit - used : 0;
        }
    return SIZE_MAX;
}

size_t preflight_host_available_bytes(void) {
    size_t avail = 1024 * read_number("/proc/meminfo", "MemAvailable:");
    size_t cg = cgroup_headroom();
    return cg < avail ? cg : avail;
}

static const char *human(double bytes, char *buf, size_t n) {
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return buf;
}

/* What this rank's memory offers: [available bytes, ranks sharing them] */
typedef struct {
    double available, sharing;
} MemoryShare;

/* The verdict on memory from every rank's share: "" when it fits. */
static void judge_memory(const GPTConfig *cfg, const MemLayout *layout, const MemoryShare *shares,
                         int n, int on_gpu, char *msg, size_t size) {
    MemPlan plan;
    memplan_predict(cfg, layout, &plan);
    double need = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) need += (double)plan.peak[c];
    int worst = 0;  /* the rank whose memory is tightest */
    for (int r = 1; r < n; r++)
        if (shares[r].available / shares[r].sharing < shares[worst].available / shares[worst].sharing)
            worst = r;
    const MemoryShare *w = &shares[worst];
    msg[0] = '\0';
    if (need * w->sharing <= w->available) return;
    char a[32], b[32], c_[32], parts[512] = "", sharing[160] = "";
    size_t len = 0;
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++)
        len += (size_t)snprintf(parts + len, sizeof parts - len, "%s%s %s", c ? ", " : "",
                                mem_category_name((MemCategory)c),
                                human((double)plan.peak[c], a, sizeof a));
    if (w->sharing > 1)
        snprintf(sharing, sizeof sharing, ", and %d ranks share one %s: %s in all", (int)w->sharing,
                 on_gpu ? "GPU" : "node's memory", human(need * w->sharing, c_, sizeof c_));
    snprintf(msg, size,
             "this run needs %s per rank (memory planner: %s)%s, but %s is available %s; use a "
             "smaller config or batch, fewer ranks per %s, or a ZeRO stage (build/bin/memplan "
             "compares the layouts)",
             human(need, a, sizeof a), parts, sharing, human(w->available, b, sizeof b),
             on_gpu ? "on the GPU" : "on the node", on_gpu ? "GPU" : "node");
}

/* The verdict on the output paths: "" when they are fine. The run
 * directory's files must be replaceable too (a FIFO named metrics.csv
 * would block the run, a directory named run.json would end it): every
 * file any trainer writes there, its own ones (moe.csv, pipeline*.csv,
 * cp_balance.csv, mesh.csv) included, as most are written after the last
 * step. --save's directory is locked for this job from here on
 * (ckpt_dir_lock). */
static void judge_outputs(const TrainOptions *o, char *msg, size_t size) {
    static const char *const run_files[] = {
        "metrics.csv", "memory.csv",   "run.json",        "comm.csv",
        "trace.json",  "trace.csv",    "params_checksum.csv", "profile.csv",
        "moe.csv",     "pipeline.csv", "pipeline_sim.csv", "cp_balance.csv",
        "mesh.csv"};
    char why[1400], path[1100];
    msg[0] = '\0';
    if (output_dir_problem(o->out_dir, why, sizeof why)) {
        snprintf(msg, size, "--out: %s", why);
        return;
    }
    for (size_t i = 0; i < sizeof run_files / sizeof *run_files; i++) {
        snprintf(path, sizeof path, "%s/%s", o->out_dir, run_files[i]);
        if (output_file_problem(path, why, sizeof why)) {
            snprintf(msg, size, "--out: %s", why);
            return;
        }
    }
    if (o->dump_params[0] && output_file_problem(o->dump_params, why, sizeof why)) {
        snprintf(msg, size, "--dump-params: %s", why);
        return;
    }
    if (o->save[0] && (ckpt_dir_problem(o->save, why, sizeof why) ||
                       ckpt_dir_lock(o->save, why, sizeof why))) {
        snprintf(msg, size, "--save: %s", why);
        return;
    }
    CkptIndex resumed = {0};
    if (o->resume[0]) {
        /* the whole checkpoint (index, every file's checksum, the model
         * and the seed) before any work */
        char dir[1100];
        int step;
        if (ckpt_resolve(o->resume, dir, sizeof dir, why, sizeof why) ||
            ckpt_verify(dir, &o->model, o->seed, &step, why, sizeof why) ||
            ckpt_index_read(dir, &resumed, why, sizeof why)) {
            snprintf(msg, size, "--resume: %s", why);
            return;
        }
        if (step > o->steps) {
            snprintf(msg, size, "--resume %s: %d steps done, more than --steps %d (the run's "
                     "total, not the steps to add)", dir, step, o->steps);
            ckpt_index_free(&resumed);
            return;
        }
    }
    /* nothing of another run is pruned, replaced or continued by mistake */
    if (o->save[0] &&
        ckpt_lineage_problem(o->save, o->resume[0] ? &resumed.lineage : NULL, why, sizeof why))
        snprintf(msg, size, "--save: %s", why);
    ckpt_index_free(&resumed);
}

/* ranks of a node with the same memory id (device.h: the host's, or a
 * GPU's UUID) share one memory */
static int device_color(void) {
    unsigned h = 2166136261u;
    for (const char *p = device_memory_id(); *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return (int)(h & 0x7fffffff);
}

void preflight_run(const TrainOptions *o, const MemLayout *layout, Comm *world) {
    const int on_gpu = device_current() == DEVICE_CUDA;
    MemoryShare mine = {(double)(on_gpu ? device_free_bytes() : preflight_host_available_bytes()), 1};
    enum { MSG = 2048 };
    char msg[MSG] = "";
    if (!world) {
        judge_outputs(o, msg, MSG);
        if (!msg[0]) judge_memory(&o->model, layout, &mine, 1, on_gpu, msg, MSG);
    } else {
        /* the checks' own messages stay out of comm.csv and the trace */
        Comm *all = comm_split(world, 0, world->rank, "preflight");
        comm_set_untraced(all);
        Comm *node = comm_split_node(all, "node");
        comm_set_untraced(node);
        Comm *same = comm_split(node, device_color(), node->rank, "memory");
        comm_set_untraced(same);
        mine.sharing = same->size;
        MemoryShare *shares = malloc((size_t)all->size * sizeof *shares);
        CHECK(shares, "out of memory");
        comm_allgather(all, &mine, shares, 2 * (size_t)all->size, COMM_DOUBLE);
        if (all->rank == 0) {
            judge_outputs(o, msg, MSG);
            if (!msg[0]) judge_memory(&o->model, layout, shares, all->size, on_gpu, msg, MSG);
        }
        comm_broadcast(all, msg, MSG / 4, COMM_INT32, 0);
        free(shares);
        comm_free(same);
        comm_free(node);
        comm_free(all);
    }
    if (msg[0]) USER_ERROR("%s", msg);
    g_passed = 1;
}
