/* ep_sync.h: lab 08's gradient averaging (ep_sync_grads) as the loop's
 * GradSync (train.h), for the programs that train a mixture of experts over
 * data parallelism: train_moe and train_4d. Once the backward pass is done,
 * the tensors every rank holds are averaged over dp, the experts over the
 * edp group of the ranks that hold the same experts. */
#ifndef EP_SYNC_H
#define EP_SYNC_H

#include "comm.h"
#include "layout.h"
#include "train.h"

typedef struct {
    const GPTLayout *layout;
    Comm *dp, *edp;
    TensorInfo *tensors;
    GradSync sync; /* what train_run_parallel takes */
} EpSync;

void ep_sync_init(EpSync *s, const GPTLayout *l, Comm *dp, Comm *edp);
void ep_sync_free(EpSync *s);

#endif
