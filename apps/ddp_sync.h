/* ddp_sync.h: lab 02's gradient averaging as the loop's GradSync
 * (train.h), over a data-parallel group and a layout's tensor table. The
 * programs that average gradients with DDP use it: train_ddp (the whole
 * model) and train_tp (each rank's TP shard, over the ranks that hold the
 * same shard). */
#ifndef DDP_SYNC_H
#define DDP_SYNC_H

#include "ddp.h"
#include "train.h"

typedef struct {
    Ddp ddp;
    TensorInfo *tensors;
    GradSync sync;     /* what train_run_parallel takes */
} DdpSync;

/* Buckets of >= bucket_bytes (the first one built of >= first_bytes when
 * first_bytes > 0: lab 02's extension) over l's tensors, unless naive. */
void ddp_sync_init(DdpSync *s, Comm *dp, const GPTLayout *l, DdpMode mode, size_t bucket_bytes,
                   size_t first_bytes);
void ddp_sync_free(DdpSync *s);

#endif
