/* Lab 08: expert parallelism (expert_parallel.h). */
#include "expert_parallel.h"

#include "check.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"

void ep_moe_forward(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p, const float *x) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ep_moe_forward_overlapped(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p,
                               const float *x) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ep_moe_backward(const GPTLayout *l, float *dx, const MoEParams *g, const float *dy,
                     MoEActs *a, const MoEScratch *sc, const MoEParams *p, const float *x,
                     float daux) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}

void ep_sync_grads(const GPTLayout *l, Comm *dp, Comm *edp, const TensorInfo *t, void *grads) {
    /* TODO: your code here (see the lab README). */
    NOT_IMPLEMENTED();
}
