/* dataloader.h: batches from a token file, the same on any layout.
 *
 * The file splits into a training part (the first 1 - val_fraction of the
 * tokens) and a held-out part (the rest). A batch is a set of windows of T+1
 * tokens: inputs are the first T, targets the last T (the next token).
 * Window starts are a pure function of (seed, step, sample index), from the
 * counter-based RNG, so the global batch of a step is fixed whatever the
 * number of ranks: data-parallel rank r just asks for its contiguous slice of
 * sample indices [r*B/N, (r+1)*B/N).
 */
#ifndef DATALOADER_H
#define DATALOADER_H

#include <stdint.h>

#include "tokens.h"

typedef enum { SPLIT_TRAIN, SPLIT_VAL } DataSplit;

typedef struct {
    const uint16_t *tokens;
    uint64_t n_train, n_val;  /* tokens in each part */
    unsigned long long seed;
} DataLoader;

/* Returns NULL, or a sentence saying why the file is too small for T. */
const char *dataloader_init(DataLoader *dl, const TokenFile *tf, double val_fraction, int T,
                            unsigned long long seed);

/* Samples [first, first + count) of batch `index` (the step for training,
 * the eval batch number for the held-out split); inputs/targets (count, T). */
void dataloader_fill(const DataLoader *dl, DataSplit split, uint64_t index, int first,
                     int count, int T, int *inputs, int *targets);

#endif
