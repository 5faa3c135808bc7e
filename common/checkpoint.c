#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "comm.h"
#include "device.h"
#include "fileio.h"

#define CKPT_VERSION 1
#define CKPT_INDEX_MAGIC "gpt-kit checkpoint"
static const char g_file_magic[8] = "GPTCKPT";

static const char *const g_kind_names[CKPT_KINDS] = {"params", "adam_m", "adam_v"};
const char *ckpt_kind_name(int kind) {
    return kind >= 0 && kind < CKPT_KINDS ? g_kind_names[kind] : "?";
}

void ckpt_rects_push(CkptRects *v, CkptRect r) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->r = realloc(v->r, v->cap * sizeof *v->r);
        CHECK(v->r, "out of memory for a checkpoint's rectangles");
    }
    v->r[v->n++] = r;
}

void ckpt_rects_free(CkptRects *v) {
    free(v->r);
    memset(v, 0, sizeof *v);
}

/* ---- files ---------------------------------------------------------------- */

static void (*g_fsync_observer)(const char *path);

void ckpt_fsync_observe(void (*fn)(const char *path)) { g_fsync_observer = fn; }

void ckpt_fsync_path(const char *path) {
    if (g_fsync_observer) g_fsync_observer(path);
    int fd = open(path, O_RDONLY);
    IO_CHECK(fd >= 0, "opening %s to flush it", path);
    IO_CHECK(fsync(fd) == 0, "flushing %s to disk", path);
    close(fd);
}

/* rm -r of a checkpoint directory the kit made (files only inside) */
static void remove_checkpoint_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char f[1400];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(f, sizeof f, "%s/%s", path, e->d_name);
        IO_CHECK(unlink(f) == 0, "removing %s", f);
    }
    closedir(d);
    IO_CHECK(rmdir(path) == 0, "removing %s", path);
}

/* The step of a name "step-NNNNNN", else -1 */
static int step_of_name(const char *name) {
    int step, end = 0;
    if (sscanf(name, "step-%d%n", &step, &end) == 1 && end == 11 && name[end] == '\0' && step >= 0)
        return step;
    return -1;
}

/* The steps of DIR's checkpoints, newest first; returns how many */
static int list_steps(const char *dir, int *steps, int max) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        const int s = step_of_name(e->d_name);
        if (s >= 0) steps[n++] = s;
    }
    closedir(d);
    for (int i = 1; i < n; i++)  /* few: insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            const int x = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = x;
        }
    return n;
}

enum { MAX_CHECKPOINTS = 4096 };

/* ---- lineages (checkpoint.h) ---------------------------------------------- */

static unsigned long long new_run_id(void) {
    unsigned long long id = 0;
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = (unsigned long long)time(NULL) * 6364136223846793005ull ^ (unsigned long long)getpid();
    return id ? id : 1;  /* 0 is no run's: ckpt_lineage_problem's stand-in */
}

static void lineage_append(CkptLineage *l, unsigned long long run, int from) {
    if (l->n == CKPT_LINEAGE_MAX) {  /* keep the first run, drop the oldest after it */
        memmove(l->run + 1, l->run + 2, (CKPT_LINEAGE_MAX - 2) * sizeof *l->run);
        memmove(l->from + 1, l->from + 2, (CKPT_LINEAGE_MAX - 2) * sizeof *l->from);
        l->n--;
    }
    l->run[l->n] = run;
    l->from[l->n++] = from;
}

void ckpt_lineage_extend(CkptLineage *out, const CkptLineage *parent, int from) {
    CkptLineage l = {0};
    if (parent) l = *parent;
    lineage_append(&l, new_run_id(), from);
    *out = l;
}

typedef enum { CKPT_OURS, CKPT_BRANCH, CKPT_FOREIGN } CkptRelation;

/* A checkpoint's relation to the run of lineage r: c is the checkpoint's
 * lineage, step its steps done (see checkpoint.h) */
static CkptRelation lineage_relation(const CkptLineage *r, const CkptLineage *c, int step) {
    if (c->n == 0 || c->run[0] != r->run[0]) return CKPT_FOREIGN;
    const unsigned long long writer = c->run[c->n - 1];
    for (int j = 0; j < r->n; j++)
        if (r->run[j] == writer)
            return j == r->n - 1 || step <= r->from[j + 1] ? CKPT_OURS : CKPT_BRANCH;
    return CKPT_BRANCH;
}

/* The relation of DIR/step-NNNNNN to lineage r; FOREIGN with why when
 * its index can't be read */
static CkptRelation step_relation(const char *dir, int step, const CkptLineage *r, char *why,
                                  size_t n) {
    char ck[1100];
    snprintf(ck, sizeof ck, "%s/step-%06d", dir, step);
    CkptIndex ix;
    if (ckpt_index_read(ck, &ix, why, n)) return CKPT_FOREIGN;
    why[0] = '\0';
    const CkptRelation rel = lineage_relation(r, &ix.lineage, step);
    if (rel == CKPT_FOREIGN)  /* the program, the first word */
        snprintf(why, n, "saved by %.*s", (int)strcspn(ix.saved_by, " "), ix.saved_by);
    ckpt_index_free(&ix);
    return rel;
}

const char *ckpt_lineage_problem(const char *dir, const CkptLineage *parent, char *why, size_t n) {
    static int steps[MAX_CHECKPOINTS];
    CkptLineage r = {0};
    if (parent) r = *parent;
    lineage_append(&r, 0, 0);  /* the run to come: no checkpoint is its own yet */
    const int count = list_steps(dir, steps, MAX_CHECKPOINTS);
    char what[1400];
    for (int i = 0; i < count; i++) {
        if (step_relation(dir, steps[i], &r, what, sizeof what) != CKPT_FOREIGN) continue;
        if (!parent)
            snprintf(why, n, "%s holds another run's checkpoints (%d of them, the newest %s/step-%06d %s): "
                     "continue that run with --resume %s, or save into a new directory", dir,
                     count, dir, steps[0], what, dir);
        else
            snprintf(why, n, "%s/step-%06d is not of the resumed run's lineage (%s): save into a "
                     "new directory, or continue that run with --resume %s", dir, steps[i], what,
                     dir);
        return why;
    }
    return NULL;
}

int ckpt_set_branches_aside(const CkptSaveTo *to, int *aside) {
    static int steps[MAX_CHECKPOINTS];
    const int count = list_steps(to->dir, steps, MAX_CHECKPOINTS);
    char why[1400], from[1100], dest[1200], into[1100];
    int moved = 0;
    struct stat st;
    for (int i = 0; i < count; i++) {
        if (step_relation(to->dir, steps[i], &to->lineage, why, sizeof why) != CKPT_BRANCH)
            continue;
        if (!moved) {  /* the first free abandoned-N */
            for (*aside = 1;; (*aside)++) {
                snprintf(into, sizeof into, "%s/abandoned-%d", to->dir, *aside);
                if (stat(into, &st) != 0) break;
            }
            IO_CHECK(mkdir(into, 0755) == 0, "making %s", into);
        }
        snprintf(from, sizeof from, "%s/step-%06d", to->dir, steps[i]);
        snprintf(dest, sizeof dest, "%s/step-%06d", into, steps[i]);
        IO_CHECK(rename(from, dest) == 0, "moving %s to %s", from, dest);
        moved++;
    }
    if (moved) {
        ckpt_fsync_path(into);
        ckpt_fsync_path(to->dir);
    }
    return moved;
}

/* Remove the checkpoints of lineage r beyond its newest keep. Each is
 * first renamed out of the step-NNNNNN names (one atomic step), so that a
 * job killed while removing its files leaves a dotted leftover, never a
 * step directory with half its files; leftovers of earlier kills go too. */
static void prune(const char *dir, int keep, const CkptLineage *r) {
    static int steps[MAX_CHECKPOINTS];
    const int n = keep > 0 ? list_steps(dir, steps, MAX_CHECKPOINTS) : 0;
    char path[1100], gone[1100], why[1400];
    for (int i = 0, ours = 0; i < n; i++) {
        if (step_relation(dir, steps[i], r, why, sizeof why) != CKPT_OURS || ++ours <= keep)
            continue;
        snprintf(path, sizeof path, "%s/step-%06d", dir, steps[i]);
        snprintf(gone, sizeof gone, "%s/.step-%06d.removing", dir, steps[i]);
        IO_CHECK(rename(path, gone) == 0, "renaming %s to %s", path, gone);
    }
    DIR *d = opendir(dir);
    IO_CHECK(d, "listing %s", dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        const size_t len = strlen(e->d_name);
        if (!strncmp(e->d_name, ".step-", 6) && len > 9 && !strcmp(e->d_name + len - 9, ".removing")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            remove_checkpoint_dir(path);
        }
    }
    closedir(d);
}

const char *ckpt_dir_problem(const char *dir, char *why, size_t n) {
    struct stat st;
    char index[1100];
    if (output_dir_problem(dir, why, n)) return why;
    /* a directory of other things is not a checkpoint directory: refuse
     * to write beside them unless they are checkpoints */
    snprintf(index, sizeof index, "%s/index.txt", dir);
    if (stat(index, &st) == 0) {
        snprintf(why, n, "%s is one checkpoint (it has an index.txt): --save takes the "
                 "directory that holds step-NNNNNN checkpoints", dir);
        return why;
    }
    return NULL;
}

const char *ckpt_dir_lock(const char *dir, char *why, size_t n) {
    static int held = -1;  /* never closed: the lock lasts as long as the process */
    char path[1100];
    snprintf(path, sizeof path, "%s/.lock", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(why, n, "cannot create %s: %s", path, strerror(errno));
        return why;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        snprintf(why, n, "another job is saving into %s (it holds the lock on %s): give each "
                 "job a directory of its own", dir, path);
        close(fd);
        return why;
    }
    if (held >= 0) close(held);
    held = fd;
    return NULL;
}

size_t ckpt_held_floats(const CkptHeld *h, int kind) {
    size_t n = 0;
    for (int i = 0; i < h->nruns[kind]; i++) {
        const size_t end = h->runs[kind][i].local + h->runs[kind][i].count;
        if (end > n) n = end;
    }
    return n;
}

typedef struct {
    char magic[8];
    uint32_t version, rank;
    uint64_t nrects, data_bytes;
} FileHeader;

typedef struct {
    int32_t kind, tensor, row0, rows, col0, cols;
    uint64_t offset;  /* floats into the data */
} FileRect;

size_t ckpt_rects_floats(const CkptRects *rects) {
    size_t n = 0;
    for (size_t i = 0; i < rects->n; i++) n += (size_t)rects->r[i].rows * rects->r[i].cols;
    return n;
}

void ckpt_gather_rects(const CkptHeld *held, const CkptRects *rects, float *out) {
    /* where each rectangle starts in out: after all before it */
    size_t *at = malloc((rects->n ? rects->n : 1) * sizeof *at), n = 0;
    CHECK(at, "out of memory");
    for (size_t i = 0; i < rects->n; i++) {
        at[i] = n;
        n += (size_t)rects->r[i].rows * rects->r[i].cols;
    }
    /* a kind at a time through one host copy of its buffer (which may be
     * device memory: one copy, not one per row) */
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        const size_t floats = ckpt_held_floats(held, kind);
        if (!floats) continue;
        float *host = malloc(floats * sizeof(float));
        CHECK(host, "out of memory for saving %s", ckpt_kind_name(kind));
        device_copy(host, held->buf[kind], floats * sizeof(float));
        for (size_t i = 0; i < rects->n; i++) {
            const CkptRect *r = &rects->r[i];
            if (r->kind != kind) continue;
            for (int row = 0; row < r->rows; row++)
                memcpy(out + at[i] + (size_t)row * r->cols, host + r->local + (size_t)row * r->stride,
                       (size_t)r->cols * sizeof(float));
        }
        free(host);
    }
    free(at);
}

/* The errno of a failed call (EIO if it left none) */
static int failure(void) { return errno ? errno : EIO; }

int ckpt_write_rank_file(const char *path, int rank, const CkptRects *rects, const float *data,
                         uint64_t *bytes, uint64_t *sum, char *why, size_t wl) {
    FileHeader hd = {{0}, CKPT_VERSION, (uint32_t)rank, rects->n,
                     ckpt_rects_floats(rects) * sizeof(float)};
    memcpy(hd.magic, g_file_magic, sizeof hd.magic);
    snprintf(why, wl, "writing %s", path);
    errno = 0;
    FILE *f = fopen(path, "wb");
    if (!f) return failure();
    uint64_t h64 = FNV1A64_INIT, off = 0;
    int err = 0;  /* the first failure's errno */
#define PUT(ptr, size)                                                                  \
    do {                                                                                \
        if (!err && fwrite(ptr, 1, size, f) != (size_t)(size)) err = failure();         \
        h64 = fnv1a64_update(h64, ptr, size);                                           \
    } while (0)
    PUT(&hd, sizeof hd);
    for (size_t i = 0; i < rects->n; i++) {  /* offsets in the data's order: data's own */
        const CkptRect *r = &rects->r[i];
        const FileRect fr = {r->kind, r->tensor, r->row0, r->rows, r->col0, r->cols, off};
        PUT(&fr, sizeof fr);
        off += (uint64_t)r->rows * r->cols;
    }
    PUT(data, hd.data_bytes);
#undef PUT
    if (!err && (fwrite(&h64, sizeof h64, 1, f) != 1 || fflush(f) != 0 || fsync(fileno(f)) != 0))
        err = failure();
    if (fclose(f) != 0 && !err) err = failure();
    if (err) return err;
    *bytes = sizeof hd + rects->n * sizeof(FileRect) + hd.data_bytes + sizeof h64;
    *sum = h64;
    return 0;
}

static void config_line(char *buf, size_t n, const GPTConfig *c) {
    snprintf(buf, n, "model vocab_size %d ctx_len %d n_layer %d n_head %d n_embd %d n_experts %d "
             "top_k %d capacity_factor %.9g aux_loss_coef %.9g moe_every %d\n", c->vocab_size,
             c->ctx_len, c->n_layer, c->n_head, c->n_embd, c->n_experts, c->top_k,
             (double)c->capacity_factor, (double)c->aux_loss_coef, c->moe_every);
}

/* The paths of a save of `steps` into dir: its temporary directory, where
 * the files are written, and the final one the commit renames it to */
static void save_paths(const char *dir, int steps, char *tmp, char *final_dir, size_t n) {
    snprintf(tmp, n, "%s/.step-%06d.tmp", dir, steps);
    snprintf(final_dir, n, "%s/step-%06d", dir, steps);
}

/* A save's first collective step: an empty temporary directory, and this
 * rank's rectangles (the ops' rule) and file in it */
static void save_begin(const CkptSaveTo *to, int steps, const GPTLayout *l, const CkptHeld *held,
                       const CkptRank *who, CkptRects *rects, char *path, size_t n) {
    const int rank = who->world ? who->world->rank : 0;
    char tmp[1100], final_dir[1100];
    save_paths(to->dir, steps, tmp, final_dir, sizeof tmp);
    if (rank == 0) {
        remove_checkpoint_dir(tmp);  /* a save that died before */
        make_dirs(tmp);
    }
    if (who->world) comm_barrier(who->world);
    CkptHeld mine = *held;
    if (held->hybrid.replica > 0)  /* replica 0 writes the same shards */
        for (int kind = 0; kind < CKPT_KINDS; kind++)
            if (!held->replicated[kind]) mine.nruns[kind] = 0;
    to->ops->shard_rects(l, &mine, who->dp_rank, who->dp, rects);
    snprintf(path, n, "%s/rank-%05d.ckpt", tmp, rank);
}

/* A save's last collective step, every rank file written (this rank's:
 * mine, its bytes and checksum): rank 0 writes the index and commits */
static void save_commit(const CkptSaveTo *to, int steps, const GPTLayout *l, const char *what,
                        const char *scale_line, Comm *world, const uint64_t mine[2]) {
    const int rank = world ? world->rank : 0, size = world ? world->size : 1;
    uint64_t *all = malloc(2 * (size_t)size * sizeof *all);
    CHECK(all, "out of memory");
    /* 8-byte words, moved as doubles (bits unchanged) */
    if (world) comm_allgather_untraced(world, mine, all, 2 * (size_t)size, COMM_DOUBLE);
    else memcpy(all, mine, 2 * sizeof *mine);

    if (rank == 0) {
        char text[8192], line[512], tmp[1100], final_dir[1100];
        size_t len = 0;
#define ADD(...)                                                              \
    do {                                                                      \
        snprintf(line, sizeof line, __VA_ARGS__);                             \
        CHECK(len + strlen(line) < sizeof text, "checkpoint index too long"); \
        memcpy(text + len, line, strlen(line) + 1);                           \
        len += strlen(line);                                                  \
    } while (0)
        ADD("%s %d\n", CKPT_INDEX_MAGIC, CKPT_VERSION);
        ADD("step %d\n", steps);
        ADD("seed %llu\n", to->seed);
        char model[512];
        config_line(model, sizeof model, &l->cfg);
        ADD("%s", model);
        ADD("saved_by %s ranks %d tp %d pp %d chunks %d cp %d ep %d states %s\n", to->program, size,
            l->tp, l->pp, l->chunks, l->cp, l->ep, what);
        ADD("lineage");
        for (int i = 0; i < to->lineage.n; i++)
            ADD(" %016llx@%d", to->lineage.run[i], to->lineage.from[i]);
        ADD("\n");
        ADD("%s", scale_line);
        ADD("files %d\n", size);
        for (int r = 0; r < size; r++)
            ADD("file rank-%05d.ckpt %llu %016llx\n", r, (unsigned long long)all[2 * r],
                (unsigned long long)all[2 * r + 1]);
        ADD("checksum %016llx\n", (unsigned long long)fnv1a64_update(FNV1A64_INIT, text, len));
#undef ADD
        save_paths(to->dir, steps, tmp, final_dir, sizeof tmp);
        /* never reached: a run saves past its start, and what its lineage
         * left there went aside (ckpt_set_branches_aside) */
        struct stat st;
        CHECK(stat(final_dir, &st) != 0, "%s exists: a save may not replace it", final_dir);
        to->ops->commit(tmp, final_dir, text, len);
        prune(to->dir, to->keep, &to->lineage);
    }
    free(all);
    if (world) comm_barrier(world);
}

/* The index's loss scale line as the scale is now (ckpt_save), or "" */
static void scale_line_now(const CkptSaveTo *to, char *line, size_t n) {
    line[0] = '\0';
    if (to->loss_scale)
        snprintf(line, n, "loss_scale %.9g clean %d\n", *to->loss_scale, *to->loss_scale_clean);
}

void ckpt_save(const CkptSaveTo *to, int steps, const GPTLayout *l, const CkptHeld *held,
               const CkptRank *who) {
    CkptRects rects = {0};
    char path[1200], why[1300];
    save_begin(to, steps, l, held, who, &rects, path, sizeof path);
    float *data = malloc((ckpt_rects_floats(&rects) + 1) * sizeof(float));
    CHECK(data, "out of memory for saving %s", path);
    ckpt_gather_rects(held, &rects, data);
    uint64_t mine[2];
    const int err = ckpt_write_rank_file(path, who->world ? who->world->rank : 0, &rects, data,
                                         &mine[0], &mine[1], why, sizeof why);
    if (err) die_errno_at(__FILE__, __LINE__, err, "%s", why);
    free(data);
    ckpt_rects_free(&rects);
    char scale_line[64];
    scale_line_now(to, scale_line, sizeof scale_line);
    save_commit(to, steps, l, held->what, scale_line, who->world, mine);
}

void ckpt_save_async(CkptAsync *a, const CkptSaveTo *to, int steps, const GPTLayout *l,
                     const CkptHeld *held, const CkptRank *who) {
    CHECK(!a->pending, "a checkpoint save began before the last one was committed");
    CkptRects rects = {0};
    char path[1200];
    save_begin(to, steps, l, held, who, &rects, path, sizeof path);
    a->rank = who->world ? who->world->rank : 0;
    to->ops->async_begin(a, path, &rects, held);
    ckpt_rects_free(&rects);
    a->pending = 1;
    a->steps = steps;
    a->to = to;
    a->l = l;
    a->what = held->what;
    a->world = who->world;
    scale_line_now(to, a->scale_line, sizeof a->scale_line);  /* the scale of the snapshot */
}

void ckpt_save_finish(CkptAsync *a) {
    if (!a->pending) return;
    uint64_t mine[2];
    a->to->ops->async_wait(a, &mine[0], &mine[1]);
    if (a->err) die_errno_at(__FILE__, __LINE__, a->err, "%s", a->why);  /* the writer's */
    save_commit(a->to, a->steps, a->l, a->what, a->scale_line, a->world, mine);
    a->pending = 0;
}

/* ---- reading -------------------------------------------------------------- */

/* The index's "lineage ID@FROM ..." line into l (n 0 when there is none,
 * as in an older kit's checkpoints); -1 when malformed */
static int lineage_read(const char *text, CkptLineage *l) {
    memset(l, 0, sizeof *l);
    const char *p = strstr(text, "\nlineage");
    if (!p) return 0;
    p += strlen("\nlineage");
    unsigned long long run;
    int from, used;
    while (*p == ' ') {
        if (l->n == CKPT_LINEAGE_MAX || sscanf(p, " %llx@%d%n", &run, &from, &used) != 2 || from < 0)
            return -1;
        l->run[l->n] = run;
        l->from[l->n++] = from;
        p += used;
    }
    return *p == '\n' ? 0 : -1;
}

int ckpt_index_read(const char *ckdir, CkptIndex *ix, char *why, size_t wl) {
    memset(ix, 0, sizeof *ix);
    char path[1100];
    snprintf(path, sizeof path, "%s/index.txt", ckdir);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, wl, "%s: %s (not a checkpoint: no index)", path, strerror(errno));
        return -1;
    }
    char text[8192];
    const size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    char *sum_line = strstr(text, "checksum ");
    unsigned long long want = 0;
    if (strncmp(text, CKPT_INDEX_MAGIC " ", strlen(CKPT_INDEX_MAGIC) + 1) ||
        sscanf(text + strlen(CKPT_INDEX_MAGIC), "%d", &ix->version) != 1) {
        snprintf(why, wl, "%s is not a checkpoint index (no '%s' line)", path, CKPT_INDEX_MAGIC);
        return -1;
    }
    if (ix->version != CKPT_VERSION) {
        snprintf(why, wl, "%s is version %d; this kit reads version %d", path, ix->version,
                 CKPT_VERSION);
        return -1;
    }
    if (!sum_line || sscanf(sum_line, "checksum %llx", &want) != 1 ||
        fnv1a64_update(FNV1A64_INIT, text, (size_t)(sum_line - text)) != want) {
        snprintf(why, wl, "%s is damaged (its checksum does not match)", path);
        return -1;
    }
    GPTConfig *c = &ix->cfg;
    double cf, aux;
    char *p = strstr(text, "\nstep ");
    char *q = strstr(text, "\nseed ");
    char *m = strstr(text, "\nmodel ");
    char *s = strstr(text, "\nsaved_by ");
    char *fl = strstr(text, "\nfiles ");
    if (!p || !q || !m || !s || !fl || sscanf(p, "\nstep %d", &ix->step) != 1 ||
        sscanf(q, "\nseed %llu", &ix->seed) != 1 ||
        sscanf(m, "\nmodel vocab_size %d ctx_len %d n_layer %d n_head %d n_embd %d n_experts %d "
               "top_k %d capacity_factor %lf aux_loss_coef %lf moe_every %d", &c->vocab_size,
               &c->ctx_len, &c->n_layer, &c->n_head, &c->n_embd, &c->n_experts, &c->top_k, &cf,
               &aux, &c->moe_every) != 10 ||
        sscanf(fl, "\nfiles %d", &ix->nfiles) != 1 || ix->nfiles < 1 || ix->nfiles > 1 << 20) {
        snprintf(why, wl, "%s is malformed", path);
        return -1;
    }
    c->capacity_factor = (float)cf;
    c->aux_loss_coef = (float)aux;
    sscanf(s, "\nsaved_by %255[^\n]", ix->saved_by);
    const char *ls = strstr(text, "\nloss_scale ");
    ix->has_loss_scale = ls && sscanf(ls, "\nloss_scale %f clean %d", &ix->loss_scale,
                                      &ix->loss_scale_clean) == 2;
    if (lineage_read(text, &ix->lineage)) {
        snprintf(why, wl, "%s is malformed (its lineage line)", path);
        return -1;
    }
    ix->files = calloc((size_t)ix->nfiles, sizeof *ix->files);
    CHECK(ix->files, "out of memory");
    char *at = fl + 1;
    for (int i = 0; i < ix->nfiles; i++) {
        at = strstr(at, "\nfile ");
        unsigned long long bytes, sum;
        if (!at || sscanf(at, "\nfile %63s %llu %llx", ix->files[i].name, &bytes, &sum) != 3 ||
            strchr(ix->files[i].name, '/')) {
            snprintf(why, wl, "%s is malformed (file %d of %d)", path, i, ix->nfiles);
            ckpt_index_free(ix);
            return -1;
        }
        ix->files[i].bytes = bytes;
        ix->files[i].checksum = sum;
        at++;
    }
    return 0;
}

void ckpt_index_free(CkptIndex *ix) {
    free(ix->files);
    ix->files = NULL;
}

/* path opened, its size the index's; NULL (why said) else */
static FILE *open_rank_file(const char *ckdir, const CkptFileEntry *e, char *path, size_t n,
                            char *why, size_t wl) {
    snprintf(path, n, "%s/%s", ckdir, e->name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, wl, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size != e->bytes) {
        snprintf(why, wl, "%s has %lld bytes, the index says %llu (truncated?)", path,
                 (long long)st.st_size, (unsigned long long)e->bytes);
        fclose(f);
        return NULL;
    }
    return f;
}

int ckpt_file_check(const char *ckdir, const CkptFileEntry *e, char *why, size_t wl) {
    char path[1200];
    FILE *f = open_rank_file(ckdir, e, path, sizeof path, why, wl);
    if (!f) return -1;
    /* the checksum over everything but its own 8 bytes */
    uint64_t h = FNV1A64_INIT, stored = 0;
    char buf[1 << 16];
    uint64_t left = e->bytes - sizeof stored;
    while (left > 0) {
        const size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (fread(buf, 1, n, f) != n) break;
        h = fnv1a64_update(h, buf, n);
        left -= n;
    }
    const int ok = left == 0 && fread(&stored, sizeof stored, 1, f) == 1 && stored == h &&
                   h == e->checksum;
    fclose(f);
    if (!ok) snprintf(why, wl, "%s is damaged (its checksum does not match)", path);
    return ok ? 0 : -1;
}

int ckpt_file_rects(const char *ckdir, const CkptFileEntry *e, CkptRects *out, char *why,
                    size_t wl) {
    char path[1200];
    FILE *f = open_rank_file(ckdir, e, path, sizeof path, why, wl);
    if (!f) return -1;
    FileHeader hd;
    if (fread(&hd, sizeof hd, 1, f) != 1 || memcmp(hd.magic, g_file_magic, sizeof hd.magic) ||
        hd.version != CKPT_VERSION ||
        sizeof hd + hd.nrects * sizeof(FileRect) + hd.data_bytes + 8 != e->bytes) {
        snprintf(why, wl, "%s is not a version-%d checkpoint file", path, CKPT_VERSION);
        fclose(f);
        return -1;
    }
    for (uint64_t i = 0; i < hd.nrects; i++) {
        FileRect r;
        IO_CHECK(fread(&r, sizeof r, 1, f) == 1, "reading %s", path);
        ckpt_rects_push(out, (CkptRect){r.kind, r.tensor, r.row0, r.rows, r.col0, r.cols,
                                        (size_t)r.offset, (size_t)r.cols});
    }
    fclose(f);
    return 0;
}

int ckpt_resolve(const char *path, char *out, size_t n, char *why, size_t wl) {
    char index[1100];
    struct stat st;
    snprintf(index, sizeof index, "%s/index.txt", path);
    if (stat(index, &st) == 0) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, wl, "%s: no such checkpoint or directory", path);
        return -1;
    }
    static int steps[MAX_CHECKPOINTS];
    if (list_steps(path, steps, MAX_CHECKPOINTS) == 0) {
        snprintf(why, wl, "%s is neither a checkpoint (no index.txt) nor a directory of "
                 "step-NNNNNN checkpoints", path);
        return -1;
    }
    snprintf(out, n, "%s/step-%06d", path, steps[0]);
    return 0;
}

static int same_config(const GPTConfig *a, const GPTConfig *b) {
    return a->vocab_size == b->vocab_size && a->ctx_len == b->ctx_len &&
           a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_embd == b->n_embd &&
           a->n_experts == b->n_experts && a->top_k == b->top_k &&
           a->moe_every == b->moe_every && a->capacity_factor == b->capacity_factor &&
           a->aux_loss_coef == b->aux_loss_coef;
}

int ckpt_verify(const char *ckdir, const GPTConfig *cfg, unsigned long long seed, int *step,
                char *why, size_t wl) {
    CkptIndex ix;
    if (ckpt_index_read(ckdir, &ix, why, wl)) return -1;
    int bad = 0;
    char mine[512], theirs[512];
    if (!same_config(&ix.cfg, cfg)) {
        config_line(mine, sizeof mine, cfg);
        config_line(theirs, sizeof theirs, &ix.cfg);
        mine[strlen(mine) - 1] = theirs[strlen(theirs) - 1] = '\0';
        snprintf(why, wl, "%s holds another model (%s; this run: %s)", ckdir, theirs, mine);
        bad = 1;
    } else if (ix.seed != seed) {
        snprintf(why, wl, "%s was trained with --seed %llu (the data order and the "
                 "initialization follow it): resume with the same seed, not %llu", ckdir, ix.seed,
                 seed);
        bad = 1;
    }
    for (int i = 0; i < ix.nfiles && !bad; i++) {
        CkptRects r = {0};
        bad = ckpt_file_check(ckdir, &ix.files[i], why, wl) != 0 ||
              ckpt_file_rects(ckdir, &ix.files[i], &r, why, wl) != 0;
        for (size_t j = 0; j < r.n && !bad; j++)
            if (r.r[j].kind < 0 || r.r[j].kind >= CKPT_KINDS) bad = 1;
        if (bad && !why[0]) snprintf(why, wl, "%s/%s is malformed", ckdir, ix.files[i].name);
        ckpt_rects_free(&r);
    }
    *step = ix.step;
    ckpt_index_free(&ix);
    return bad ? -1 : 0;
}

struct CkptSaved {
    char dir[1100];
    CkptIndex ix;
    CkptRects rects;
    int *file_of;   /* per rectangle: its file */
    size_t *data0;  /* per file: the byte where its data start */
    FILE **files;
};

CkptSaved *ckpt_saved_open(const char *ckdir) {
    char why[1400], path[1200];
    CkptSaved *s = calloc(1, sizeof *s);
    CHECK(s, "out of memory");
    snprintf(s->dir, sizeof s->dir, "%s", ckdir);
    if (ckpt_index_read(ckdir, &s->ix, why, sizeof why)) USER_ERROR("%s", why);
    s->data0 = calloc((size_t)s->ix.nfiles, sizeof *s->data0);
    s->files = calloc((size_t)s->ix.nfiles, sizeof *s->files);
    CHECK(s->data0 && s->files, "out of memory");
    for (int i = 0; i < s->ix.nfiles; i++) {
        const size_t before = s->rects.n;
        if (ckpt_file_rects(ckdir, &s->ix.files[i], &s->rects, why, sizeof why))
            USER_ERROR("%s", why);
        s->file_of = realloc(s->file_of, (s->rects.n ? s->rects.n : 1) * sizeof *s->file_of);
        CHECK(s->file_of, "out of memory");
        for (size_t j = before; j < s->rects.n; j++) s->file_of[j] = i;
        s->data0[i] = sizeof(FileHeader) + (s->rects.n - before) * sizeof(FileRect);
        snprintf(path, sizeof path, "%s/%s", ckdir, s->ix.files[i].name);
        s->files[i] = fopen(path, "rb");
        IO_CHECK(s->files[i], "opening %s", path);
    }
    return s;
}

const CkptRects *ckpt_saved_rects(const CkptSaved *s) { return &s->rects; }
int ckpt_saved_step(const CkptSaved *s) { return s->ix.step; }
const char *ckpt_saved_by(const CkptSaved *s) { return s->ix.saved_by; }

void ckpt_saved_read_row(void *ctx, size_t j, int r, int c0, int n, float *out) {
    const CkptSaved *s = ctx;
    const CkptRect *x = &s->rects.r[j];
    const int fi = s->file_of[j];
    const long pos = (long)(s->data0[fi] + (x->local + (size_t)r * x->cols + (size_t)c0) *
                                               sizeof(float));
    IO_CHECK(fseek(s->files[fi], pos, SEEK_SET) == 0 &&
                 fread(out, sizeof(float), (size_t)n, s->files[fi]) == (size_t)n,
             "reading %s/%s", s->dir, s->ix.files[fi].name);
}

void ckpt_saved_close(CkptSaved *s) {
    for (int i = 0; i < s->ix.nfiles; i++)
        if (s->files[i]) fclose(s->files[i]);
    free(s->files);
    free(s->data0);
    free(s->file_of);
    ckpt_rects_free(&s->rects);
    ckpt_index_free(&s->ix);
    free(s);
}

void ckpt_load_standard(const CkptOps *ops, const char *ckdir, const GPTConfig *cfg, int kind,
                        float *out) {
    const GPTLayout whole = gpt_layout_whole(cfg);
    const CkptRun run = {0, whole.num_params, 0};
    CkptHeld h = {{0}, {0}, {0}, {1, 1, 1}, "standard", {0}};
    h.buf[kind] = out;
    h.runs[kind] = &run;
    h.nruns[kind] = 1;
    ops->load(ckdir, &whole, &h);
}
