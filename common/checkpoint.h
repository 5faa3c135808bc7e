/* checkpoint.h: distributed checkpoints. Every trainer saves its
 * model states with --save DIR --save-every K [--keep K] and continues a run
 * with --resume PATH, in the same layout or any other of the same model.
 *
 * What the next step depends on: the parameters, the two AdamW moments and
 * the number of steps done. Nothing else: the batches are a function of
 * (seed, step) (dataloader.h), the learning rate of (step, --steps,
 * --warmup), AdamW's bias correction of the step, the initial weights of
 * the seed, and no layer draws random numbers. So a checkpoint holds those
 * three kinds of floats and the step (and, of an fp16 run, its loss scale:
 * CkptSaveTo); the seed is recorded and must match.
 *
 * A rank's states, as the model states hand them (ModelStates.held, train.h):
 * per kind a buffer and its runs, each run `count` floats of the layout's
 * flat buffer (layout.h: units in the standard order) from `flat`, held in
 * the buffer from `local`. Replicated states (DDP, TP, PP, CP, EP) hold one
 * run of the whole local buffer; ZeRO holds per unit the run of its shard.
 *
 * On disk, DIR/step-NNNNNN/ (NNNNNN = steps done, six digits):
 *   index.txt          a text file: magic line "gpt-kit checkpoint 1", the
 *                      step, the seed, the model's shape, the layout that
 *                      wrote it, one line per rank file (name, bytes,
 *                      FNV-1a 64), and last "checksum" with the FNV-1a 64
 *                      of every byte before that line;
 *   rank-RRRRR.ckpt    one per rank: a header (magic "GPTCKPT", version,
 *                      rank, rectangle count, data bytes), the rectangles
 *                      (CkptRect: kind, global tensor, rows, columns, where
 *                      their floats start in the data), the data, and the
 *                      FNV-1a 64 of every byte before it.
 * A rectangle is rows [row0, row0 + rows) and columns [col0, col0 + cols)
 * of one tensor of the standard layout (gpt_tensor_table's global
 * tensors), its floats row-major. Each element of each kind is written by
 * exactly one rank: the ranks that hold copies of it leave it to the first
 * (TP ranks of a replicated tensor, CP ranks, the last stage's tied copy
 * of wte) or share the writing (DP ranks of replicated states, EDP ranks
 * of an expert: each writes its part of every tensor), so that DDP's
 * ranks write 12 Phi / dp bytes each, like ZeRO's.
 *
 * Loading intersects: every rank turns what it holds in its own layout
 * into rectangles, and copies each one's overlap with every saved
 * rectangle of the same kind and tensor; every element it holds must be
 * covered exactly once. So any layout loads any other layout's checkpoint.
 *
 * Atomic: the ranks write into DIR/.step-NNNNNN.tmp, rank 0 then the index,
 * every file is fsynced, and the directory is renamed into place; a
 * directory without a valid index, or any file whose size or checksum
 * differs from the index's, is refused. The newest --keep checkpoints
 * of the run's lineage are kept, older ones removed after the new one is
 * in place.
 *
 * Lineages: a checkpoint directory belongs to one chain of runs, each
 * resumed from a checkpoint of the one before. Every run draws a random
 * 64-bit id; the index's line "lineage ID0@0 ID1@S1 ... IDk@Sk" lists the
 * runs from the first (fresh) one to the writer, each with the steps done
 * when it started. Against the run about to save (lineage R), a checkpoint
 * whose writer is R's run j at step s is
 *   ours      j is R's last run (this one) or s <= the step R's run j+1
 *             started from: the path that led here, which --keep prunes;
 *   a branch  its writer is not in R but its first run is R's, or j is in
 *             R and s is past where R left run j: a rewind abandoned it;
 *   foreign   another first run (or no lineage line: an older kit's).
 * A fresh run refuses a --save DIR holding any checkpoint, a resumed one a
 * DIR holding a foreign one, before any work; a resumed run moves the
 * branches into DIR/abandoned-N/ (one rename each, nothing deleted) before
 * its first step, so that --resume DIR follows the current lineage and
 * --resume DIR/abandoned-N the abandoned one. A lineage keeps its first
 * run and its newest CKPT_LINEAGE_MAX - 1: a checkpoint of a run dropped
 * from the middle then counts as a branch, moved aside, never lost.
 *
 * The checkpoint ops (CkptOps, below: the geometry, what a rank writes,
 * the resharding load, the atomic commit, the background writer) do the
 * ideas; this module does the formats, the checks and the collective steps
 * around them, calling them through the table the program hands it. */
#ifndef CHECKPOINT_H
#define CHECKPOINT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "layout.h"

typedef struct Comm Comm;

typedef enum { CKPT_PARAMS, CKPT_ADAM_M, CKPT_ADAM_V, CKPT_KINDS } CkptKind;
const char *ckpt_kind_name(int kind);

typedef struct {
    size_t flat, count, local;
} CkptRun;

/* hybrid sharding (--dp-shard, labs 03 and 10): `replicas` ranks, one per
 * shard group, hold the same shards; replica 0's group writes the sharded
 * kinds, the other replicas none. A replicated kind is written as without
 * hybrid sharding, every rank its part of the dp group's copy (the shard
 * groups need not line up with the ranks that write it: lab 10's CP ranks
 * write no replicated state). All 0: no hybrid sharding */
typedef struct {
    int replica, replicas;
} CkptHybrid;

/* A rank's model states for checkpoints (see above) */
typedef struct {
    float *buf[CKPT_KINDS];  /* device or host memory */
    const CkptRun *runs[CKPT_KINDS];
    int nruns[CKPT_KINDS];
    int replicated[CKPT_KINDS];  /* every DP rank holds the same (else disjoint shards) */
    const char *what;        /* "replicated", "ZeRO-3 shards", ... for the index */
    CkptHybrid hybrid;       /* all 0 but under hybrid sharding (above) */
} CkptHeld;

/* A rectangle of a global tensor, and where its floats are: in a rank's
 * buffer (local: the first element, stride: floats from one row to the
 * next) when writing or loading, in the file's data (local, stride = cols)
 * when saved. */
typedef struct {
    int kind, tensor, row0, rows, col0, cols;
    size_t local, stride;
} CkptRect;

typedef struct {
    CkptRect *r;
    size_t n, cap;
} CkptRects;
void ckpt_rects_push(CkptRects *v, CkptRect r);
void ckpt_rects_free(CkptRects *v);

/* Who this rank is, for the checkpoint's collective steps and the rule of
 * who writes a copy: world (every rank writes a file), its DP rank of dp */
typedef struct {
    Comm *world;
    int dp_rank, dp;
} CkptRank;

/* A run's lineage (see above): run[i] started from from[i] steps done */
enum { CKPT_LINEAGE_MAX = 32 };
typedef struct {
    int n;  /* 0: none (an older kit's checkpoint) */
    unsigned long long run[CKPT_LINEAGE_MAX];
    int from[CKPT_LINEAGE_MAX];
} CkptLineage;

/* A new run's lineage: parent's (NULL or n 0: a fresh run), then a new
 * random id that started from `from` steps done */
void ckpt_lineage_extend(CkptLineage *out, const CkptLineage *parent, int from);

typedef struct CkptOps CkptOps;  /* below */

/* Where and how a run saves: --save DIR, --keep K (0: all), the index's
 * seed and program, and the run's lineage (rank 0's: it writes the index);
 * ops: the checkpoint ops that do the work (not NULL). loss_scale and
 * loss_scale_clean (NULL but under fp16): the dynamic loss scale and its
 * clean steps (model_states.h's LossScaler), which the index keeps beside
 * the step ("loss_scale S clean C"), so that an fp16 run resumes bit for
 * bit; the same on every rank. */
typedef struct {
    const CkptOps *ops;
    const char *dir;
    int keep;
    unsigned long long seed;
    const char *program;
    CkptLineage lineage;
    const float *loss_scale;
    const int *loss_scale_clean;
} CkptSaveTo;

/* --save's DIR: NULL when it can be written (a directory, made if missing),
 * else why not, into why. */
const char *ckpt_dir_problem(const char *dir, char *why, size_t n);

/* Lock --save's DIR (an existing directory) for this job: an exclusive
 * flock on DIR/.lock, held until the process ends (the kernel drops it
 * then, a killed process's too). NULL, or why not when another job holds
 * it: two jobs saving into one directory would remove each other's
 * temporary directories and prune each other's checkpoints. Rank 0's. */
const char *ckpt_dir_lock(const char *dir, char *why, size_t n);

/* Whether a run may save into DIR (locked, ckpt_dir_lock): NULL, or why
 * not when DIR holds a checkpoint foreign to the lineage the run will have
 * (parent: the resumed checkpoint's, NULL for a fresh run, which refuses
 * every checkpoint), naming --resume and a new directory as the ways out. */
const char *ckpt_lineage_problem(const char *dir, const CkptLineage *parent, char *why, size_t n);

/* Before a run's first step (rank 0, DIR locked and checked by
 * ckpt_lineage_problem): move the branches of to->lineage in to->dir into
 * a new to->dir/abandoned-N/; returns how many, N into *aside */
int ckpt_set_branches_aside(const CkptSaveTo *to, int *aside);

/* Save `steps` steps done into DIR/step-NNNNNN (collective over world),
 * keeping the newest to->keep of to->lineage (0: all). */
void ckpt_save(const CkptSaveTo *to, int steps, const GPTLayout *l, const CkptHeld *held,
               const CkptRank *who);

/* --save-async: a save in two steps, so that training goes on while the
 * files are written. ckpt_save_async takes this rank's snapshot (the
 * floats of its rectangles, copied to the host in file order: the states
 * change at the next step) and leaves the writing of its file to a thread
 * (the ops' async_begin); ckpt_save_finish, at the next save or at
 * the end of the run, joins it (async_wait) and commits as ckpt_save
 * does (collective over world, so the caller's main thread calls it: the
 * thread makes no MPI call, MPI being initialized without thread support).
 * Until the commit the files are in the temporary directory, so a job
 * killed meanwhile leaves no partial checkpoint, and the checkpoint is
 * byte for byte the one ckpt_save would have written. The price: host
 * memory for the snapshot (what the rank writes: 12 Phi / N bytes for N
 * ranks sharing the states) until the commit. */
typedef struct CkptAsync {
    /* the writer's (the ops' async_begin / async_wait) */
    int rank;               /* this rank's: set before async_begin */
    pthread_t thread;
    int running;            /* the thread is started and not yet joined */
    char path[1200];        /* the rank file */
    CkptRects rects;        /* a copy: local = where each starts in snapshot */
    float *snapshot;        /* the rectangles' floats in file order (host) */
    uint64_t bytes, checksum;  /* the file's, when written */
    int err;                /* errno of a failed write (0: none), why: which */
    char why[1300];
    /* the commit's (ckpt_save_finish): what ckpt_save_async was given */
    int pending, steps;
    char scale_line[64];    /* the index's loss scale line then, or "" */
    const CkptSaveTo *to;
    const GPTLayout *l;
    const char *what;
    Comm *world;
} CkptAsync;

/* Begin saving `steps` steps done (as ckpt_save, whose arguments these
 * are: `to` must outlive the commit) into a, which must have no save
 * pending (ckpt_save_finish first) */
void ckpt_save_async(CkptAsync *a, const CkptSaveTo *to, int steps, const GPTLayout *l,
                     const CkptHeld *held, const CkptRank *who);

/* Commit a's pending save, if any (collective over world) */
void ckpt_save_finish(CkptAsync *a);

/* The checkpoint ops: the functions that do the ideas (each described
 * where a program's table of them is declared), called by this module and
 * by the training loop. The program hands its table to the library
 * (TrainProgram.checkpoints, train.h; ckpt_load_standard's ops); a build
 * without them has none (NULL), and its programs refuse every checkpoint
 * flag before any work. */
struct CkptOps {
    /* what this rank writes of every kind of held (rank dp_rank of dp in
     * its data-parallel group), appended to out */
    void (*shard_rects)(const GPTLayout *l, const CkptHeld *held, int dp_rank, int dp,
                        CkptRects *out);
    /* make tmp_dir, its rank files written, appear whole as final_dir
     * with index (len bytes) as its index.txt */
    void (*commit)(const char *tmp_dir, const char *final_dir, const char *index, size_t len);
    /* --save-async's writer: snapshot rects of held into a and start the
     * thread that writes path; async_wait joins it, the file's size and
     * checksum into bytes and checksum */
    void (*async_begin)(CkptAsync *a, const char *path, const CkptRects *rects,
                        const CkptHeld *held);
    void (*async_wait)(CkptAsync *a, uint64_t *bytes, uint64_t *checksum);
    /* load what held's buffers hold from the verified checkpoint ckdir,
     * from any layout; returns its steps done */
    int (*load)(const char *ckdir, const GPTLayout *l, const CkptHeld *held);
};

/* A checkpoint directory from PATH (--resume's, the tool's): PATH itself
 * when it has an index, else the newest step-NNNNNN in it. Returns 0 with
 * the directory in out, or -1 with why (which names PATH, not a flag). */
int ckpt_resolve(const char *path, char *out, size_t n, char *why, size_t whylen);

/* Check a checkpoint before any work: the index (magic, version, checksum),
 * every rank file (size, checksum, header), the model (cfg) and the seed.
 * Returns 0 and the step, or -1 with why (one sentence naming the file). */
int ckpt_verify(const char *ckdir, const GPTConfig *cfg, unsigned long long seed, int *step,
                char *why, size_t whylen);

/* ---- for the checkpoint ops' geometry and loading ---- */

/* Which part of a tensor's pieces a rank takes: part of parts equal
 * ranges of each piece's floats (row-major); parts 0: none */
typedef struct {
    int part, parts;
} CkptShare;

/* Reads n floats of row r of saved rectangle j, from its column c0 */
typedef void (*CkptReadRow)(void *ctx, size_t j, int r, int c0, int n, float *out);

/* A checkpoint's saved rectangles (every rank file's, local = the offset
 * in its file's data), opened for reading; ckpt_saved_read_row is a
 * CkptReadRow on it. Open checks each file's size and header and dies with
 * one clear error on a bad one; the checksums, which read every byte, are
 * ckpt_verify's, run before (by rank 0 alone in a trainer's preflight). */
typedef struct CkptSaved CkptSaved;
CkptSaved *ckpt_saved_open(const char *ckdir);
const CkptRects *ckpt_saved_rects(const CkptSaved *s);
int ckpt_saved_step(const CkptSaved *s);
const char *ckpt_saved_by(const CkptSaved *s);  /* the index's saved_by line */
void ckpt_saved_read_row(void *s, size_t j, int r, int c0, int n, float *out);
void ckpt_saved_close(CkptSaved *s);

/* Floats of a held kind's buffer: the end of its furthest run */
size_t ckpt_held_floats(const CkptHeld *h, int kind);

/* Gather the floats of rects (local, stride: in held's buffers) into out
 * (host), rectangle after rectangle, each row-major: the file's order */
void ckpt_gather_rects(const CkptHeld *held, const CkptRects *rects, float *out);

/* The floats of rects, each rows x cols */
size_t ckpt_rects_floats(const CkptRects *rects);

/* Write and flush a rank file of rects whose floats are data (in file
 * order: ckpt_gather_rects), its bytes and checksum into bytes and sum.
 * Returns 0, or the errno of the failure with why (on any thread: it
 * neither dies nor calls MPI). */
int ckpt_write_rank_file(const char *path, int rank, const CkptRects *rects, const float *data,
                         uint64_t *bytes, uint64_t *sum, char *why, size_t whylen);

/* fsync a file or a directory (dies with the path on failure) */
void ckpt_fsync_path(const char *path);
/* For check_ckpt: fn(path) is called by each ckpt_fsync_path before it
 * flushes (NULL: nothing), to see what a commit flushes and when. */
void ckpt_fsync_observe(void (*fn)(const char *path));

/* ---- for the tool (apps/ckpt_tool.c) and the tests ---- */

typedef struct {
    char name[64];
    uint64_t bytes, checksum;
} CkptFileEntry;

typedef struct {
    int version, step;
    unsigned long long seed;
    GPTConfig cfg;
    char saved_by[256];
    CkptLineage lineage;
    int nfiles;
    CkptFileEntry *files;
    int has_loss_scale;     /* the index had a loss scale line (an fp16 run's) */
    float loss_scale;
    int loss_scale_clean;
} CkptIndex;

/* Read and check an index; 0, or -1 with why. ckpt_index_free after. */
int ckpt_index_read(const char *ckdir, CkptIndex *ix, char *why, size_t whylen);
void ckpt_index_free(CkptIndex *ix);

/* A rank file's size and checksum against its index entry (the whole file
 * read); 0, or -1 with why. */
int ckpt_file_check(const char *ckdir, const CkptFileEntry *e, char *why, size_t whylen);

/* A rank file's rectangles (local = offset in its data), after checking its
 * size and header (not its checksum: ckpt_file_check's, which a trainer's
 * preflight runs once, on rank 0, through ckpt_verify); 0, or -1 with why. */
int ckpt_file_rects(const char *ckdir, const CkptFileEntry *e, CkptRects *out, char *why,
                    size_t whylen);

/* The whole model of one kind in the standard layout (gpt_num_params(cfg)
 * floats), from a verified checkpoint, loaded by ops */
void ckpt_load_standard(const CkptOps *ops, const char *ckdir, const GPTConfig *cfg, int kind,
                        float *out);

#endif
