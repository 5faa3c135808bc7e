#include "zero_scaled.h"

void zero_scaled_init(ZeroScaled *s, const TrainOptions *o, Comm *world) {
    *s = (ZeroScaled){.scaler = {(float)o->loss_scale, o->loss_scale_interval, 0, 0, 0, -1}};
    if (o->model.precision != PRECISION_FP16) return;
    s->mixed = o->mixed;
    s->overflow = comm_split(world, 0, world->rank, "overflow");
    s->count_flushed = o->count_flushed;
}

void zero_scaled_free(ZeroScaled *s) {
    if (s->overflow) comm_free(s->overflow);
    s->overflow = NULL;
}

float *zero_scaled_scale(ZeroScaled *s) { return s->mixed ? &s->scaler.scale : NULL; }
LossScaler *zero_scaled_scaler(ZeroScaled *s) { return s->mixed ? &s->scaler : NULL; }

/* what this rank accumulates of the gradients, and how many elements */
static void *grads_held(const Zero *z, size_t *n) {
    *n = z->stage == 1 ? z->padded_total : z->shard_total;
    return z->stage == 1 ? z->grads_full : z->grads_shard;
}

double zero_scaled_finish(ZeroScaled *s, const Zero *z, double sumsq) {
    if (!s->mixed) return sumsq;
    size_t n;
    void *g = grads_held(z, &n);
    const int format = comm_dtype_precision(z->grad_dtype);
    if (s->count_flushed) s->scaler.flushed = (long long)s->mixed->count_flushed(g, n, PRECISION_FP16);
    s->scaler.overflowed = s->mixed->found_overflow(g, n, format, s->overflow);
    return sumsq / ((double)s->scaler.scale * s->scaler.scale);
}

void zero_scaled_update(ZeroScaled *s, Zero *z, const AdamWStep *step) {
    if (!s->mixed) {
        zero_update(z, step);
        return;
    }
    AdamWStep unscaled = *step;
    unscaled.clip = step->clip / s->scaler.scale;
    if (!s->scaler.overflowed) zero_update(z, &unscaled);
    s->mixed->scaler_after_step(&s->scaler);
}
