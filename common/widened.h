/* widened.h: fp32 working copies of the units of a 2-byte buffer, as mixed
 * precision's states hand them to the passes (model.h's views are fp32):
 * the compute copy of the weights, which a pass reads a unit at a time,
 * and 2-byte gradients, which a backward pass accumulates into a unit at a
 * time in fp32 and rounds once. Two copies live at most: the embeddings'
 * (read, and written, at both ends of a pass: they stay open until
 * closed) and one other unit's.
 *   memory: P_0 + max_{u > 0} P_u floats of the category given, for the
 *           units of the rank's layout (memplan's widened units).
 */
#ifndef WIDENED_H
#define WIDENED_H

#include <stdint.h>

#include "alloc.h"
#include "layout.h"

typedef struct {
    const GPTLayout *layout;
    int precision;          /* the 2-byte format stored (precision.h) */
    float *embed, *other;   /* the copies */
    int open;               /* the unit `other` holds, or -1 */
    int embed_open;
} WidenedUnits;

void widened_init(WidenedUnits *w, const GPTLayout *l, int precision, MemCategory category);
void widened_free(WidenedUnits *w);

/* Widen unit u from src (the unit's first element) into its copy, point
 * unit u's views in `views` at the copy and return it. Opening the open
 * embeddings again returns their copy as it is (a backward pass's LM head
 * and encoder both add to it); another unit while one is open is a bug.
 * A unit this rank does not hold (no elements): NULL, nothing opened. */
float *widened_open(WidenedUnits *w, int u, const uint16_t *src, GPTParams *views);

/* Round unit u's copy into dst (the unit's first element; NULL: drop it)
 * and close it; nothing when u is not open. */
void widened_close(WidenedUnits *w, int u, uint16_t *dst);

/* Sequence parallelism's layernorm sums (the layout's sp_ops, which read
 * fp32 views) on 2-byte gradients: each unit but the embeddings' (which
 * hold no layernorm) widened alone, its views the only ones set, summed
 * over the TP group, rounded back. unit_start[u]: unit u's first element
 * in the gradient buffer. What they move is fp32, 4 (4 L + 2) C bytes a
 * step, beside the gradients' 2 Phi. */
void widened_sum_layernorm_grads(WidenedUnits *w, uint16_t *const *unit_start);

#endif
