/* check_ckpt: lab 09's functions checked alone, without MPI or a training run.
 *
 * Geometry. For each layout below, every simulated rank's buffers are
 * filled with layout.h's initial values (a function of the global tensor
 * and element, the same in every layout; the moments with other seeds),
 * and its rectangles taken by ckpt_shard_rects. Over all ranks of a
 * layout, every element of every kind must be written exactly once. Then
 * every other layout (and the same) loads them through ckpt_reshard from
 * memory: every element a rank holds must be found once and equal, bit
 * for bit, to what that rank would hold. And the ranks that hold one copy
 * (the DP ranks of a replicated layout) each write their part of it: none
 * writes less than half its share, 1/dp of what the copy's ranks write
 * (rank 0 writing the whole copy would write each element once, and make
 * every save as slow as one rank's disk). Layouts: one rank; DDP over 3;
 * TP 2 x DP 2 (the vocabulary padded); PP 2 x TP 2; CP 2 x DP 2 (CP ranks
 * hold copies of everything); ZeRO shards over 3 ranks (units padded); and
 * with experts: EP 2 x EDP 2, TP 2 x EP 2.
 *
 * Commit. ckpt_commit must make the checkpoint appear whole or not at
 * all: with the index's write cut short (a file size limit in a child
 * process, like a full disk), the final directory must not appear with a
 * partial index; without the limit it must appear, whole, the temporary
 * directory be gone, and the writes be on disk in the order a power cut
 * cannot undo: the index file and the temporary directory flushed
 * (ckpt_fsync_path) before the rename, the parent directory after it.
 *
 * --async (the extension): ckpt_async_begin copies the states before it
 * returns: they change right after it (the next step's update), and the
 * file must still hold the values of the step saved (its checksum equals
 * a synchronous write's of them).
 *
 * Prints one line per check and "check_ckpt: ok", exit 0; or the first
 * failure, exit 1. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint_shards.h"
#include "memplan.h"

enum { MAX_RANKS = 8 };

typedef struct {
    GPTLayout l;
    CkptHeld h;
    CkptRun runs[64];
    float *buf[CKPT_KINDS];
    int dp_rank, dp;
} SimRank;

typedef struct {
    const char *name;
    int n;
    SimRank r[MAX_RANKS];
} SimLayout;

static int g_failed;
#define EXPECT(cond, ...)                                    \
    do {                                                     \
        if (!(cond) && !g_failed) {                          \
            printf("check_ckpt: FAIL: ");                    \
            printf(__VA_ARGS__);                             \
            printf("\n");                                    \
            g_failed = 1;                                    \
        }                                                    \
    } while (0)

/* the values of kind k at flat range [flat, flat + n) of l's buffer */
static void fill(const GPTLayout *l, int kind, size_t flat, size_t n, float *out) {
    gpt_init_params(l, 1000 + (unsigned long long)kind, flat, n, out);
}

/* a replicated layout: tp x cp x dp ranks (tp innermost), pp stages, ep | dp */
static void replicated(SimLayout *s, const char *name, const GPTConfig *c, int tp, int cp, int dp,
                       int pp, int ep) {
    s->name = name;
    s->n = tp * cp * dp * pp;
    CHECK(s->n <= MAX_RANKS, "too many ranks");
    for (int i = 0; i < s->n; i++) {
        SimRank *r = &s->r[i];
        const int tr = i % tp, cr = i / tp % cp, dr = i / (tp * cp) % dp, pr = i / (tp * cp * dp);
        r->l = gpt_layout_make(c, tp, tr);
        gpt_layout_set_pipeline(&r->l, pp, pr, 1);
        if (cp > 1) gpt_layout_set_context(&r->l, cp, cr, CP_RING);
        if (ep > 1) gpt_layout_set_experts(&r->l, ep, dr % ep);
        r->dp_rank = dr;
        r->dp = dp;
        r->runs[0] = (CkptRun){0, r->l.num_params, 0};
        r->h = (CkptHeld){{0}, {r->runs, r->runs, r->runs}, {1, 1, 1}, {1, 1, 1}, "replicated", {0}};
        for (int k = 0; k < CKPT_KINDS; k++) {
            r->buf[k] = malloc((r->l.num_params ? r->l.num_params : 1) * sizeof(float));
            CHECK(r->buf[k], "out of memory");
            fill(&r->l, k, 0, r->l.num_params, r->buf[k]);
            r->h.buf[k] = r->buf[k];
        }
    }
}

/* ZeRO over n ranks: each unit padded to n S_u, rank r its S_u from r S_u */
static void zero_shards(SimLayout *s, const char *name, const GPTConfig *c, int n) {
    s->name = name;
    s->n = n;
    for (int i = 0; i < n; i++) {
        SimRank *r = &s->r[i];
        r->l = gpt_layout_whole(c);
        r->dp_rank = i;
        r->dp = n;
        const int U = gpt_num_units(&r->l);
        CHECK(U <= 64, "too many units");
        size_t local = 0;
        for (int u = 0; u < U; u++) {
            size_t off, count;
            gpt_unit_range(&r->l, u, &off, &count);
            const size_t S = unit_shard_size(count, n);
            const size_t lo = (size_t)i * S < count ? (size_t)i * S : count;
            const size_t hi = (size_t)(i + 1) * S < count ? (size_t)(i + 1) * S : count;
            r->runs[u] = (CkptRun){off + lo, hi - lo, local};
            local += S;
        }
        r->h = (CkptHeld){{0}, {r->runs, r->runs, r->runs}, {U, U, U}, {0, 0, 0}, "ZeRO shards", {0}};
        for (int k = 0; k < CKPT_KINDS; k++) {
            r->buf[k] = calloc(local ? local : 1, sizeof(float));
            CHECK(r->buf[k], "out of memory");
            for (int u = 0; u < U; u++)
                fill(&r->l, k, r->runs[u].flat, r->runs[u].count, r->buf[k] + r->runs[u].local);
            r->h.buf[k] = r->buf[k];
        }
    }
}

static void sim_free(SimLayout *s) {
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < CKPT_KINDS; k++) free(s->r[i].buf[k]);
}

/* What a layout saves: every rank's rectangles (local = offset in data) */
typedef struct {
    CkptRects rects;
    float *data;
} Saved;

static void mem_read(void *ctx, size_t j, int r, int c0, int n, float *out) {
    const Saved *s = ctx;
    const CkptRect *x = &s->rects.r[j];
    memcpy(out, s->data + x->local + (size_t)r * x->cols + (size_t)c0, (size_t)n * sizeof(float));
}

/* The DP ranks that hold one copy (the same TP, CP and PP coordinates)
 * each write at least half their share of what the copy's ranks write */
static void check_shares(const SimLayout *s, const size_t *written) {
    for (int i = 0; i < s->n && !g_failed; i++) {
        const GPTLayout *a = &s->r[i].l;
        size_t group = 0;
        int members = 0;
        for (int j = 0; j < s->n; j++) {
            const GPTLayout *b = &s->r[j].l;
            if (a->tp_rank == b->tp_rank && a->cp_rank == b->cp_rank && a->pp_rank == b->pp_rank)
                group += written[j], members++;
        }
        EXPECT(2 * written[i] * (size_t)members >= group,
               "%s: DP rank %d writes %zu of the %zu floats its copy's %d ranks write: each DP "
               "rank writes its part (1/dp) of what the copy holds", s->name, s->r[i].dp_rank,
               written[i], group, members);
    }
}

static void save(const SimLayout *s, const GPTConfig *c, Saved *out) {
    memset(out, 0, sizeof *out);
    size_t floats = 0, written[MAX_RANKS] = {0};
    for (int i = 0; i < s->n; i++) {
        const SimRank *r = &s->r[i];
        CkptRects mine = {0};
        ckpt_shard_rects(&r->l, &r->h, r->dp_rank, r->dp, &mine);
        written[i] = ckpt_rects_floats(&mine);
        for (size_t j = 0; j < mine.n; j++) {
            const CkptRect *x = &mine.r[j];
            const size_t size = (size_t)x->rows * x->cols;
            out->data = realloc(out->data, (floats + size) * sizeof(float));
            CHECK(out->data, "out of memory");
            for (int row = 0; row < x->rows; row++)
                memcpy(out->data + floats + (size_t)row * x->cols,
                       r->buf[x->kind] + x->local + (size_t)row * x->stride,
                       (size_t)x->cols * sizeof(float));
            CkptRect saved = *x;
            saved.local = floats;
            saved.stride = (size_t)x->cols;
            ckpt_rects_push(&out->rects, saved);
            floats += size;
        }
        ckpt_rects_free(&mine);
    }
    /* each element of each kind written once over the ranks */
    const GPTLayout whole = gpt_layout_whole(c);
    const int nt = gpt_num_tensors(&whole);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    const size_t phi = gpt_num_params(c);
    unsigned char *seen = calloc(phi * CKPT_KINDS, 1);
    CHECK(t && seen, "out of memory");
    gpt_tensor_table(&whole, t);
    for (size_t j = 0; j < out->rects.n && !g_failed; j++) {
        const CkptRect *x = &out->rects.r[j];
        EXPECT(x->kind >= 0 && x->kind < CKPT_KINDS && x->tensor >= 0 && x->tensor < nt &&
                   x->row0 >= 0 && x->col0 >= 0 && x->row0 + x->rows <= t[x->tensor].global_rows &&
                   x->col0 + x->cols <= t[x->tensor].global_cols,
               "%s: a rectangle outside its tensor (kind %d, tensor %d, rows %d+%d, cols %d+%d)",
               s->name, x->kind, x->tensor, x->row0, x->rows, x->col0, x->cols);
        if (g_failed) break;
        for (int row = 0; row < x->rows; row++)
            for (int col = 0; col < x->cols; col++)
                seen[(size_t)x->kind * phi + t[x->tensor].global_offset +
                     (size_t)(x->row0 + row) * t[x->tensor].global_cols + x->col0 + col]++;
    }
    for (size_t e = 0; e < phi * CKPT_KINDS && !g_failed; e++)
        EXPECT(seen[e] == 1, "%s: %s element %zu of the model written %d times, not once",
               s->name, ckpt_kind_name((int)(e / phi)), e % phi, seen[e]);
    check_shares(s, written);
    free(seen);
    free(t);
}

/* every rank of `into` loads from saved; its buffers must equal its own */
static void load(const SimLayout *from, const Saved *saved, const SimLayout *into) {
    for (int i = 0; i < into->n && !g_failed; i++) {
        const SimRank *r = &into->r[i];
        const int nt = gpt_num_tensors(&r->l);
        TensorInfo *t = malloc((size_t)nt * sizeof *t);
        CHECK(t, "out of memory");
        gpt_tensor_table(&r->l, t);
        for (int k = 0; k < CKPT_KINDS && !g_failed; k++) {
            CkptRects want = {0};
            ckpt_rects_of_runs(t, nt, k, r->h.runs[k], r->h.nruns[k], NULL, &want);
            size_t need = 0;
            for (size_t j = 0; j < want.n; j++) need += (size_t)want.r[j].rows * want.r[j].cols;
            const size_t n = ckpt_held_floats(&r->h, k);
            float *got = calloc(n ? n : 1, sizeof(float));
            CHECK(got, "out of memory");
            const size_t copied = ckpt_reshard(&want, &saved->rects, mem_read, (void *)saved, got);
            EXPECT(copied == need, "%s -> %s: rank %d found %zu of its %zu %s floats", from->name,
                   into->name, i, copied, need, ckpt_kind_name(k));
            for (int u = 0; u < r->h.nruns[k] && !g_failed; u++) {
                const CkptRun *run = &r->h.runs[k][u];
                EXPECT(!memcmp(got + run->local, r->buf[k] + run->local, run->count * sizeof(float)),
                       "%s -> %s: rank %d's %s differ from its own in flat [%zu, %zu)", from->name,
                       into->name, i, ckpt_kind_name(k), run->flat, run->flat + run->count);
            }
            free(got);
            ckpt_rects_free(&want);
        }
        free(t);
    }
}

static void geometry(const GPTConfig *c, SimLayout *layouts, int n) {
    for (int a = 0; a < n && !g_failed; a++) {
        Saved s;
        save(&layouts[a], c, &s);
        for (int b = 0; b < n && !g_failed; b++) load(&layouts[a], &s, &layouts[b]);
        if (!g_failed)
            printf("check_ckpt: %-16s saves every element once, each DP rank its part (%zu "
                   "rectangles); all %d layouts load it\n", layouts[a].name, s.rects.n, n);
        ckpt_rects_free(&s.rects);
        free(s.data);
    }
}

/* A new directory in $TMPDIR (the grader gives each case its own), else /tmp */
static void temp_dir(char out[PATH_MAX]) {
    const char *top = getenv("TMPDIR");
    snprintf(out, PATH_MAX, "%s/check_ckpt.XXXXXX", top && top[0] ? top : "/tmp");
    CHECK(mkdtemp(out), "making a temporary directory in %s", top && top[0] ? top : "/tmp");
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* What ckpt_commit flushed, in order: each path's file, and whether the
 * final directory existed then (before or after the rename) */
enum { MAX_FLUSHES = 16 };
static struct {
    dev_t dev;
    ino_t ino;
    int after_rename;
} g_flushed[MAX_FLUSHES];
static int g_nflushed;
static const char *g_final;

static void observe_fsync(const char *path) {
    struct stat st;
    if (g_nflushed == MAX_FLUSHES || stat(path, &st) != 0) return;
    g_flushed[g_nflushed].dev = st.st_dev;
    g_flushed[g_nflushed].ino = st.st_ino;
    g_flushed[g_nflushed++].after_rename = exists(g_final);
}

/* Whether path's file was flushed before (after = 0) or after the rename */
static int flushed(const char *path, int after) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    for (int i = 0; i < g_nflushed; i++)
        if (g_flushed[i].dev == st.st_dev && g_flushed[i].ino == st.st_ino &&
            g_flushed[i].after_rename == after)
            return 1;
    return 0;
}

/* In the commit's child, after a commit that succeeded: its flushes */
static void check_flushes(const char *base, const char *final, const char *index) {
    EXPECT(flushed(index, 0), "ckpt_commit did not flush the index file (ckpt_fsync_path) before "
           "the rename: after a power cut the checkpoint could appear with an empty index");
    EXPECT(flushed(final, 0), "ckpt_commit did not flush the temporary directory before the "
           "rename: after a power cut its files' entries could be missing");
    EXPECT(flushed(base, 1), "ckpt_commit did not flush the parent directory after the rename: "
           "after a power cut the checkpoint's new name could be lost");
}

static void commit(void) {
    char base[PATH_MAX], tmp[PATH_MAX + 32], final[PATH_MAX + 32], index[PATH_MAX + 64],
        file[PATH_MAX + 64];
    temp_dir(base);
    snprintf(tmp, sizeof tmp, "%s/.step-000003.tmp", base);
    snprintf(final, sizeof final, "%s/step-000003", base);
    snprintf(index, sizeof index, "%s/index.txt", final);
    char text[4096];
    memset(text, 'x', sizeof text);
    text[sizeof text - 1] = '\n';
    for (int cut = 1; cut >= 0 && !g_failed; cut--) {
        CHECK(mkdir(tmp, 0755) == 0, "making %s", tmp);
        snprintf(file, sizeof file, "%s/rank-00000.ckpt", tmp);
        FILE *f = fopen(file, "w");
        CHECK(f && fputs("data", f) >= 0 && fclose(f) == 0, "writing %s", file);
        fflush(stdout);
        const pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            if (cut) {  /* the index's write fails halfway, as on a full disk */
                signal(SIGXFSZ, SIG_IGN);
                const struct rlimit lim = {sizeof text / 2, sizeof text / 2};
                setrlimit(RLIMIT_FSIZE, &lim);
                freopen("/dev/null", "w", stderr);
            }
            g_final = final;
            ckpt_fsync_observe(observe_fsync);
            ckpt_commit(tmp, final, text, sizeof text);
            if (!cut) check_flushes(base, final, index);
            fflush(stdout);
            _exit(g_failed ? 3 : 0);
        }
        int status;
        waitpid(pid, &status, 0);
        struct stat st;
        const int whole = stat(index, &st) == 0 && (size_t)st.st_size == sizeof text;
        if (cut) {
            EXPECT(!exists(final) || whole, "a commit whose index could not be written left %s "
                   "with %lld of the index's %zu bytes: a loadable-looking half checkpoint",
                   final, exists(index) ? (long long)st.st_size : 0LL, sizeof text);
            EXPECT(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
                   "a commit whose index could not be written did not stop with an error");
            /* clean up for the second try, whatever it left */
            char cmd[3 * PATH_MAX];
            snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", tmp, final);
            CHECK(system(cmd) == 0, "removing %s", tmp);
        } else {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 3) g_failed = 1;  /* it said why */
            EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a commit failed");
            EXPECT(whole && !exists(tmp), "after a commit %s should hold the whole index and %s "
                   "be gone", final, tmp);
        }
    }
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    CHECK(system(cmd) == 0, "removing %s", base);
    if (!g_failed)
        printf("check_ckpt: commit: whole or nothing, also when the index's write fails; the "
               "index and the directory flushed before the rename, the parent after\n");
}

/* ---- --async: the snapshot is taken before ckpt_async_begin returns ---- */

/* One rank's states in pages of their own; after ckpt_async_begin returns
 * they are made unreadable, as the next step's update would change them:
 * a writer that reads them then stops with the reason (a SIGSEGV caught).
 * Large enough (some MB) that a writer thread copying them itself is still
 * at it when the pages close. The file must then equal a synchronous
 * write's of the same values. */
static void async_snapshot(void) {
    const GPTConfig c = {.vocab_size = 1024, .ctx_len = 64, .n_layer = 2, .n_head = 4,
                         .n_embd = 256};
    SimRank r = {.l = gpt_layout_whole(&c), .dp = 1};
    const size_t n = r.l.num_params, bytes = n * sizeof(float);
    r.runs[0] = (CkptRun){0, n, 0};
    r.h = (CkptHeld){{0}, {r.runs, r.runs, r.runs}, {1, 1, 1}, {1, 1, 1}, "replicated", {0}};
    for (int k = 0; k < CKPT_KINDS; k++) {
        r.buf[k] = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(r.buf[k] != MAP_FAILED, "out of memory");
        fill(&r.l, k, 0, n, r.buf[k]);
        r.h.buf[k] = r.buf[k];
    }
    CkptRects rects = {0};
    ckpt_shard_rects(&r.l, &r.h, 0, 1, &rects);
    float *data = malloc(ckpt_rects_floats(&rects) * sizeof(float));
    char dir[PATH_MAX], sync_path[PATH_MAX + 32], async_path[PATH_MAX + 32], why[256];
    CHECK(data, "out of memory");
    temp_dir(dir);
    snprintf(sync_path, sizeof sync_path, "%s/sync.ckpt", dir);
    snprintf(async_path, sizeof async_path, "%s/async.ckpt", dir);
    ckpt_gather_rects(&r.h, &rects, data);
    uint64_t want_bytes, want_sum, got_bytes = 0, got_sum = 0;
    CHECK(ckpt_write_rank_file(sync_path, 0, &rects, data, &want_bytes, &want_sum, why,
                               sizeof why) == 0, "%s", why);
    check_segv_says("check_ckpt: FAIL: the states were read after ckpt_async_begin returned (the "
                    "writer thread copied them late): the next step's update would already have "
                    "changed them; copy them into a->snapshot (ckpt_gather_rects) before "
                    "starting the thread");
    CkptAsync a = {.rank = 0};
    ckpt_async_begin(&a, async_path, &rects, &r.h);
    for (int k = 0; k < CKPT_KINDS; k++) CHECK(mprotect(r.buf[k], bytes, PROT_NONE) == 0, "mprotect");
    ckpt_async_wait(&a, &got_bytes, &got_sum);
    EXPECT(a.err == 0, "the writer failed: %s", a.why);
    EXPECT(got_bytes == want_bytes && got_sum == want_sum, "the file ckpt_async_begin's writer "
           "wrote (%llu bytes, checksum %016llx) is not the states' as they were when it was "
           "called (%llu bytes, checksum %016llx)", (unsigned long long)got_bytes,
           (unsigned long long)got_sum, (unsigned long long)want_bytes,
           (unsigned long long)want_sum);
    for (int k = 0; k < CKPT_KINDS; k++) munmap(r.buf[k], bytes);
    free(data);
    ckpt_rects_free(&rects);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "removing %s", dir);
    if (!g_failed)
        printf("check_ckpt: async: the states copied before ckpt_async_begin returns; the file "
               "equals a synchronous write's (%llu bytes)\n", (unsigned long long)got_bytes);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    if (argc > 2 || (argc == 2 && strcmp(argv[1], "--async") != 0))
        USER_ERROR("usage: check_ckpt [--async]  (--async: the extension's writer)");
    if (argc == 2) {
        async_snapshot();
        printf("check_ckpt: %s\n", g_failed ? "FAILED" : "ok");
        return g_failed;
    }
    /* odd vocabulary: padded under TP; units not divisible by 3 under ZeRO */
    const GPTConfig dense = {.vocab_size = 37, .ctx_len = 8, .n_layer = 2, .n_head = 4, .n_embd = 8};
    SimLayout d[6];
    replicated(&d[0], "one rank", &dense, 1, 1, 1, 1, 1);
    replicated(&d[1], "DDP 3", &dense, 1, 1, 3, 1, 1);
    replicated(&d[2], "TP 2 x DP 2", &dense, 2, 1, 2, 1, 1);
    replicated(&d[3], "PP 2 x TP 2", &dense, 2, 1, 1, 2, 1);
    replicated(&d[4], "CP 2 x DP 2", &dense, 1, 2, 2, 1, 1);
    zero_shards(&d[5], "ZeRO over 3", &dense, 3);
    geometry(&dense, d, 6);
    for (int i = 0; i < 6; i++) sim_free(&d[i]);
    GPTConfig moe = dense;
    moe.n_experts = 4, moe.top_k = 2, moe.capacity_factor = 1.25f, moe.aux_loss_coef = 0.01f;
    moe.moe_every = 2;
    SimLayout m[3];
    replicated(&m[0], "MoE, one rank", &moe, 1, 1, 1, 1, 1);
    replicated(&m[1], "EP 2 x EDP 2", &moe, 1, 1, 4, 1, 2);
    replicated(&m[2], "TP 2 x EP 2", &moe, 2, 1, 2, 1, 2);
    if (!g_failed) geometry(&moe, m, 3);
    for (int i = 0; i < 3; i++) sim_free(&m[i]);
    if (!g_failed) commit();
    printf("check_ckpt: %s\n", g_failed ? "FAILED" : "ok");
    return g_failed;
}
