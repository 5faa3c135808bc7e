#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* ---- the geometry: runs of a flat buffer <-> rectangles of tensors ------- */

/* The part [lo, hi) of piece pc (its floats row-major from its
 * local_offset) as at most three rectangles, row-aligned: the rest of the
 * first row, the whole rows, the start of the last row. at: where flat
 * element lo is in the rank's buffer. */
static void rects_of_range(CkptRects *out, int kind, int tensor, const ShardPiece *pc, size_t lo,
                           size_t hi, size_t at) {
    const size_t cols = (size_t)pc->cols;
    while (lo < hi) {
        const size_t k = lo - pc->local_offset, r = k / cols, c = k % cols;
        size_t rows = 1, width = cols - c;
        if (c == 0 && hi - lo >= cols) rows = (hi - lo) / cols, width = cols;
        else if (width > hi - lo) width = hi - lo;
        ckpt_rects_push(out, (CkptRect){kind, tensor, pc->row0 + (int)r, (int)rows,
                                        pc->col0 + (int)c, (int)width, at, cols});
        lo += rows * width;
        at += rows * width;
    }
}

void ckpt_rects_of_runs(const TensorInfo *t, int nt, int kind, const CkptRun *runs, int nruns,
                        const CkptShare *share, CkptRects *out) {
    for (int i = 0; i < nruns; i++) {
        const size_t a = runs[i].flat, b = runs[i].flat + runs[i].count;
        for (int j = 0; j < nt; j++) {
            const CkptShare sh = share ? share[j] : (CkptShare){0, 1};
            if (sh.parts == 0) continue;
            for (int k = 0; k < t[j].npieces; k++) {
                const ShardPiece *pc = &t[j].piece[k];
                const size_t size = (size_t)pc->rows * pc->cols;
                /* this rank's part of the piece: [part size / parts, (part + 1) size / parts) */
                const size_t p0 = pc->local_offset + size * sh.part / sh.parts;
                const size_t p1 = pc->local_offset + size * (sh.part + 1) / sh.parts;
                const size_t lo = a > p0 ? a : p0, hi = b < p1 ? b : p1;
                if (lo < hi) rects_of_range(out, kind, j, pc, lo, hi, runs[i].local + (lo - a));
            }
        }
    }
}

size_t ckpt_reshard(const CkptRects *want, const CkptRects *saved, CkptReadRow read, void *ctx,
                    float *dest) {
    size_t copied = 0;
    for (size_t i = 0; i < want->n; i++) {
        const CkptRect *w = &want->r[i];
        for (size_t j = 0; j < saved->n; j++) {
            const CkptRect *s = &saved->r[j];
            if (s->kind != w->kind || s->tensor != w->tensor) continue;
            const int r0 = w->row0 > s->row0 ? w->row0 : s->row0;
            const int r1 = w->row0 + w->rows < s->row0 + s->rows ? w->row0 + w->rows
                                                                   : s->row0 + s->rows;
            const int c0 = w->col0 > s->col0 ? w->col0 : s->col0;
            const int c1 = w->col0 + w->cols < s->col0 + s->cols ? w->col0 + w->cols
                                                                   : s->col0 + s->cols;
            if (r0 >= r1 || c0 >= c1) continue;
            for (int r = r0; r < r1; r++)
                read(ctx, j, r - s->row0, c0 - s->col0, c1 - c0,
                     dest + w->local + (size_t)(r - w->row0) * w->stride + (size_t)(c0 - w->col0));
            copied += (size_t)(r1 - r0) * (size_t)(c1 - c0);
        }
    }
    return copied;
}

/* ---- files ---------------------------------------------------------------- */

static void fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    IO_CHECK(fd >= 0, "opening %s to flush it", path);
    IO_CHECK(fsync(fd) == 0, "flushing %s to disk", path);
    close(fd);
}

void ckpt_commit(const char *tmp_dir, const char *final_dir) {
    /* the files are flushed by their writers; the directory's entries now,
     * then one rename makes the whole checkpoint appear at once */
    fsync_path(tmp_dir);
    IO_CHECK(rename(tmp_dir, final_dir) == 0, "renaming %s to %s", tmp_dir, final_dir);
    char parent[1100];
    snprintf(parent, sizeof parent, "%s", final_dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = '\0';
    fsync_path(slash ? parent : ".");
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

/* Remove the checkpoints beyond the newest keep. Each is first renamed out
 * of the step-NNNNNN names (one atomic step), so that a job killed while
 * removing its files leaves a dotted leftover, never a step directory
 * with half its files; leftovers of earlier kills go too. */
static void prune(const char *dir, int keep) {
    static int steps[MAX_CHECKPOINTS];
    const int n = keep > 0 ? list_steps(dir, steps, MAX_CHECKPOINTS) : 0;
    char path[1100], gone[1100];
    for (int i = keep; i < n; i++) {
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

/* The writer's rule (checkpoint.h): of the ranks holding the same copy of
 * tensor t, each writes a part. Copies on several TP ranks (a replicated
 * tensor), CP ranks (the whole model) or the last stage (wte's tied copy)
 * are left to the first TP / CP rank and the first stage; a replicated
 * kind's copies on the DP ranks are split over them, part dp_rank of dp,
 * and an expert's over its EDP group (the dp / ep ranks with this
 * ep_rank: part dp_rank / ep). Sharded kinds (ZeRO) are each rank's own. */
static void shares_of(const GPTLayout *l, const TensorInfo *t, int nt, int replicated,
                      int dp_rank, int dp, CkptShare *share) {
    for (int i = 0; i < nt; i++) {
        const int first = !t[i].tied_copy && (t[i].split || l->tp_rank == 0) && l->cp_rank == 0;
        if (!first) share[i] = (CkptShare){0, 0};
        else if (!replicated) share[i] = (CkptShare){0, 1};
        else if (t[i].expert_split) share[i] = (CkptShare){dp_rank / l->ep, dp / l->ep};
        else share[i] = (CkptShare){dp_rank, dp};
    }
}

static size_t buffer_floats(const CkptHeld *h, int kind) {
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

/* Write this rank's file; returns its bytes and checksum */
static void write_rank_file(const char *path, int rank, const GPTLayout *l, const CkptHeld *h,
                            const CkptRects *rects, uint64_t *bytes, uint64_t *sum) {
    FILE *f = fopen(path, "wb");
    IO_CHECK(f, "creating %s", path);
    FileHeader hd = {{0}, CKPT_VERSION, (uint32_t)rank, rects->n, 0};
    memcpy(hd.magic, g_file_magic, sizeof hd.magic);
    FileRect *fr = calloc(rects->n ? rects->n : 1, sizeof *fr);
    CHECK(fr, "out of memory");
    uint64_t off = 0;
    for (size_t i = 0; i < rects->n; i++) {
        const CkptRect *r = &rects->r[i];
        fr[i] = (FileRect){r->kind, r->tensor, r->row0, r->rows, r->col0, r->cols, off};
        off += (uint64_t)r->rows * r->cols;
    }
    hd.data_bytes = off * sizeof(float);
    uint64_t h64 = FNV1A64_INIT;
#define PUT(ptr, size)                                                        \
    do {                                                                      \
        IO_CHECK(fwrite(ptr, 1, size, f) == (size_t)(size), "writing %s", path); \
        h64 = fnv1a64_update(h64, ptr, size);                                 \
    } while (0)
    PUT(&hd, sizeof hd);
    PUT(fr, rects->n * sizeof *fr);
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        const size_t n = buffer_floats(h, kind);
        float *host = malloc((n ? n : 1) * sizeof(float));
        CHECK(host, "out of memory for saving %s", ckpt_kind_name(kind));
        if (n) device_copy(host, h->buf[kind], n * sizeof(float));
        for (size_t i = 0; i < rects->n; i++) {
            const CkptRect *r = &rects->r[i];
            if (r->kind != kind) continue;
            for (int row = 0; row < r->rows; row++)
                PUT(host + r->local + (size_t)row * r->stride, (size_t)r->cols * sizeof(float));
        }
        free(host);
    }
#undef PUT
    IO_CHECK(fwrite(&h64, sizeof h64, 1, f) == 1, "writing %s", path);
    IO_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0, "flushing %s to disk", path);
    IO_CHECK(fclose(f) == 0, "closing %s", path);
    (void)l;
    free(fr);
    *bytes = sizeof hd + rects->n * sizeof *fr + hd.data_bytes + sizeof h64;
    *sum = h64;
}

static void config_line(char *buf, size_t n, const GPTConfig *c) {
    snprintf(buf, n, "model vocab_size %d ctx_len %d n_layer %d n_head %d n_embd %d n_experts %d "
             "top_k %d capacity_factor %.9g aux_loss_coef %.9g moe_every %d\n", c->vocab_size,
             c->ctx_len, c->n_layer, c->n_head, c->n_embd, c->n_experts, c->top_k,
             (double)c->capacity_factor, (double)c->aux_loss_coef, c->moe_every);
}

void ckpt_save(const char *dir, int steps, int keep, unsigned long long seed, const GPTLayout *l,
               const CkptHeld *held, const CkptRank *who, const char *program) {
    Comm *world = who->world;
    const int rank = world ? world->rank : 0, size = world ? world->size : 1;
    char final_dir[1100], tmp[1100], path[1200];
    snprintf(final_dir, sizeof final_dir, "%s/step-%06d", dir, steps);
    snprintf(tmp, sizeof tmp, "%s/.step-%06d.tmp", dir, steps);
    if (rank == 0) {
        remove_checkpoint_dir(tmp);  /* a save that died before */
        make_dirs(tmp);
    }
    if (world) comm_barrier(world);

    const int nt = gpt_num_tensors(l);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CkptShare *share = malloc((size_t)nt * sizeof *share);
    CHECK(t && share, "out of memory");
    gpt_tensor_table(l, t);
    CkptRects rects = {0};
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        shares_of(l, t, nt, held->replicated[kind], who->dp_rank, who->dp, share);
        ckpt_rects_of_runs(t, nt, kind, held->runs[kind], held->nruns[kind], share, &rects);
    }
    snprintf(path, sizeof path, "%s/rank-%05d.ckpt", tmp, rank);
    uint64_t mine[2], *all = malloc(2 * (size_t)size * sizeof *all);
    CHECK(all, "out of memory");
    write_rank_file(path, rank, l, held, &rects, &mine[0], &mine[1]);
    ckpt_rects_free(&rects);
    free(share);
    free(t);
    /* 8-byte words, moved as doubles (bits unchanged) */
    if (world) comm_allgather_untraced(world, mine, all, 2 * (size_t)size, COMM_DOUBLE);
    else memcpy(all, mine, sizeof mine);

    if (rank == 0) {
        char text[8192], line[512];
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
        ADD("seed %llu\n", seed);
        char model[512];
        config_line(model, sizeof model, &l->cfg);
        ADD("%s", model);
        ADD("saved_by %s ranks %d tp %d pp %d chunks %d cp %d ep %d states %s\n", program, size,
            l->tp, l->pp, l->chunks, l->cp, l->ep, held->what);
        ADD("files %d\n", size);
        for (int r = 0; r < size; r++)
            ADD("file rank-%05d.ckpt %llu %016llx\n", r, (unsigned long long)all[2 * r],
                (unsigned long long)all[2 * r + 1]);
        ADD("checksum %016llx\n", (unsigned long long)fnv1a64_update(FNV1A64_INIT, text, len));
#undef ADD
        snprintf(path, sizeof path, "%s/index.txt", tmp);
        FILE *f = fopen(path, "w");
        IO_CHECK(f && fwrite(text, 1, len, f) == len, "writing %s", path);
        IO_CHECK(fflush(f) == 0 && fsync(fileno(f)) == 0 && fclose(f) == 0, "flushing %s", path);
        struct stat st;
        if (stat(final_dir, &st) == 0) remove_checkpoint_dir(final_dir);  /* the same step again */
        ckpt_commit(tmp, final_dir);
        prune(dir, keep);
    }
    free(all);
    if (world) comm_barrier(world);
}

/* ---- reading -------------------------------------------------------------- */

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

int ckpt_file_rects(const char *ckdir, const CkptFileEntry *e, CkptRects *out, char *why,
                    size_t wl) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", ckdir, e->name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, wl, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size != e->bytes) {
        snprintf(why, wl, "%s has %lld bytes, the index says %llu (truncated?)", path,
                 (long long)st.st_size, (unsigned long long)e->bytes);
        fclose(f);
        return -1;
    }
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
    if (left > 0 || fread(&stored, sizeof stored, 1, f) != 1 || stored != h ||
        h != e->checksum) {
        snprintf(why, wl, "%s is damaged (its checksum does not match)", path);
        fclose(f);
        return -1;
    }
    FileHeader hd;
    rewind(f);
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
        snprintf(why, wl, "--resume %s: no such checkpoint or directory", path);
        return -1;
    }
    static int steps[MAX_CHECKPOINTS];
    if (list_steps(path, steps, MAX_CHECKPOINTS) == 0) {
        snprintf(why, wl, "--resume %s: neither a checkpoint (no index.txt) nor a directory of "
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
        bad = ckpt_file_rects(ckdir, &ix.files[i], &r, why, wl) != 0;
        for (size_t j = 0; j < r.n && !bad; j++)
            if (r.r[j].kind < 0 || r.r[j].kind >= CKPT_KINDS) bad = 1;
        if (bad && !why[0]) snprintf(why, wl, "%s/%s is malformed", ckdir, ix.files[i].name);
        ckpt_rects_free(&r);
    }
    *step = ix.step;
    ckpt_index_free(&ix);
    return bad ? -1 : 0;
}

typedef struct {
    FILE **files;
    const char *ckdir;
    const CkptIndex *ix;
    const int *file_of;      /* per saved rectangle */
    const size_t *data0;     /* per file: where its data start, bytes */
    const CkptRects *saved;
} Reader;

static void read_saved_row(void *ctx, size_t j, int r, int c0, int n, float *out) {
    const Reader *rd = ctx;
    const CkptRect *s = &rd->saved->r[j];
    const int fi = rd->file_of[j];
    const long pos = (long)(rd->data0[fi] +
                            (s->local + (size_t)r * s->cols + (size_t)c0) * sizeof(float));
    IO_CHECK(fseek(rd->files[fi], pos, SEEK_SET) == 0 &&
                 fread(out, sizeof(float), (size_t)n, rd->files[fi]) == (size_t)n,
             "reading %s/%s", rd->ckdir, rd->ix->files[fi].name);
}

/* Every saved rectangle of the checkpoint, with its file */
static void open_saved(const char *ckdir, const CkptIndex *ix, CkptRects *saved, int **file_of,
                       size_t *data0, FILE **files) {
    char why[1400], path[1200];
    size_t cap = 0;
    *file_of = NULL;
    for (int i = 0; i < ix->nfiles; i++) {
        const size_t before = saved->n;
        if (ckpt_file_rects(ckdir, &ix->files[i], saved, why, sizeof why)) USER_ERROR("%s", why);
        if (saved->n > cap) {
            cap = saved->cap;
            *file_of = realloc(*file_of, cap * sizeof **file_of);
            CHECK(*file_of, "out of memory");
        }
        for (size_t j = before; j < saved->n; j++) (*file_of)[j] = i;
        data0[i] = sizeof(FileHeader) + (saved->n - before) * sizeof(FileRect);
        snprintf(path, sizeof path, "%s/%s", ckdir, ix->files[i].name);
        files[i] = fopen(path, "rb");
        IO_CHECK(files[i], "opening %s", path);
    }
}

void ckpt_load(const char *ckdir, const GPTLayout *l, const CkptHeld *held) {
    char why[1400];
    CkptIndex ix;
    if (ckpt_index_read(ckdir, &ix, why, sizeof why)) USER_ERROR("%s", why);
    CkptRects saved = {0};
    int *file_of;
    size_t *data0 = calloc((size_t)ix.nfiles, sizeof *data0);
    FILE **files = calloc((size_t)ix.nfiles, sizeof *files);
    CHECK(data0 && files, "out of memory");
    open_saved(ckdir, &ix, &saved, &file_of, data0, files);
    Reader rd = {files, ckdir, &ix, file_of, data0, &saved};

    const int nt = gpt_num_tensors(l);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CHECK(t, "out of memory");
    gpt_tensor_table(l, t);
    for (int kind = 0; kind < CKPT_KINDS; kind++) {
        CkptRects want = {0};
        ckpt_rects_of_runs(t, nt, kind, held->runs[kind], held->nruns[kind], NULL, &want);
        size_t need = 0;
        for (size_t i = 0; i < want.n; i++) need += (size_t)want.r[i].rows * want.r[i].cols;
        const size_t n = buffer_floats(held, kind);
        float *host = calloc(n ? n : 1, sizeof(float));  /* padding stays 0 */
        CHECK(host, "out of memory for loading %s", ckpt_kind_name(kind));
        const size_t got = ckpt_reshard(&want, &saved, read_saved_row, &rd, host);
        if (got != need)
            USER_ERROR("%s: the checkpoint covers %zu of the %zu %s floats this rank holds (saved "
                       "by %s)", ckdir, got, need, ckpt_kind_name(kind), ix.saved_by);
        if (n) device_copy(held->buf[kind], host, n * sizeof(float));
        free(host);
        ckpt_rects_free(&want);
    }
    free(t);
    for (int i = 0; i < ix.nfiles; i++) fclose(files[i]);
    free(files);
    free(data0);
    free(file_of);
    ckpt_rects_free(&saved);
    ckpt_index_free(&ix);
}

void ckpt_load_standard(const char *ckdir, const GPTConfig *cfg, int kind, float *out) {
    const GPTLayout whole = gpt_layout_whole(cfg);
    const CkptRun run = {0, whole.num_params, 0};
    CkptHeld h = {{0}, {0}, {0}, {1, 1, 1}, "standard"};
    h.buf[kind] = out;
    h.runs[kind] = &run;
    h.nruns[kind] = 1;
    ckpt_load(ckdir, &whole, &h);
}
