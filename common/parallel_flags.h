/* parallel_flags.h: the flags that lay a trainer out over its ranks, parsed
 * in one place for every trainer (train_options.h) with one set of bounds:
 *   --dp N  --tp N  --sp  --recompute MODE  --pp P  --schedule NAME
 *   --micro-batches M  --chunks V  --cp N  --cp-algo NAME  --ep N
 * A trainer exposes the dimensions it implements (ParallelDim bits in its
 * TrainProgram); the others keep their defaults (degree 1). From the one
 * value they fill in, ParallelFlags, come the mesh's degrees (mesh.h) and
 * the memory planner's layout (memplan.h).
 */
#ifndef PARALLEL_FLAGS_H
#define PARALLEL_FLAGS_H

#include "layout.h"
#include "memplan.h"
#include "mesh.h"

/* The dimensions, each with the flags it brings */
typedef enum {
    PAR_DP = 1 << 0,         /* --dp */
    PAR_TP = 1 << 1,         /* --tp */
    PAR_SP = 1 << 2,         /* --sp (inside the TP group) */
    PAR_RECOMPUTE = 1 << 3,  /* --recompute */
    PAR_PP = 1 << 4,         /* --pp, --schedule, --micro-batches, --chunks */
    PAR_CP = 1 << 5,         /* --cp, --cp-algo */
    PAR_EP = 1 << 6,         /* --ep */
} ParallelDim;

typedef struct {
    unsigned exposed;    /* the program's ParallelDim bits (TrainProgram.parallel) */
    int dp;              /* 0 (not given): the ranks the other degrees leave */
    int tp, pp, cp, ep;  /* 1 when not given */
    int sp;
    Recompute recompute;
    char schedule[32];   /* default "1f1b" */
    int schedule_given;
    int micro_batches;   /* 0: not given (--grad-accum's) */
    int chunks;          /* 0 until given, then train_options_parse's default (2 for
                            the interleaved schedule, else 1) */
    CpAlgo cp_algo;
} ParallelFlags;

/* One flag: its long option (without the dashes), whether it takes a value,
 * the dimension that brings it and its line in --help */
typedef struct {
    const char *name;
    int has_arg;
    unsigned dim;
    const char *help;
} ParallelFlag;
enum { PARALLEL_FLAG_COUNT = 11 };
extern const ParallelFlag PARALLEL_FLAGS[PARALLEL_FLAG_COUNT];

/* Every flag at its default */
ParallelFlags parallel_flags_default(void);

/* Set the flag called name (one of PARALLEL_FLAGS) from arg, or one clear
 * error when arg is not a value it takes */
void parallel_flags_set(ParallelFlags *f, const char *name, const char *arg);

/* The mesh's degrees (mesh.h; dp 0: the ranks left) */
MeshDegrees parallel_mesh_degrees(const ParallelFlags *f);

/* This rank's layout (layout.h) on mesh, made from the flags: its piece
 * of every split the program exposes and the group it runs on (tp_group
 * always; pp, cp, and for a MoE config ep, where exposed), sp and
 * recompute, and the split layers from tp 2 on. The program adds the ops
 * (its labs' layers) and what its layout needs besides. */
GPTLayout parallel_layout(const ParallelFlags *f, const GPTConfig *cfg, const Mesh *mesh);

/* The memory planner's layout of one rank with these flags: the degrees,
 * sp, recompute, chunks, cp_algo, and tp 0 (the whole model's layers)
 * unless split_layers (the layers tensor parallelism splits: from tp 2,
 * or at any tp in the tensor-parallel program); the caller adds ranks,
 * rows, seq and what ZeRO and the pipeline's rank and schedule say */
MemLayout parallel_mem_layout(const ParallelFlags *f, int split_layers);

#endif
