#include "dataloader.h"

#include <math.h>
#include <stddef.h>

#include "rng.h"

const char *dataloader_init(DataLoader *dl, const TokenFile *tf, double val_fraction, int T,
                            unsigned long long seed) {
    dl->tokens = tf->tokens;
    dl->n_val = (uint64_t)floor((double)tf->count * val_fraction);
    dl->n_train = tf->count - dl->n_val;
    dl->seed = seed;
    if (dl->n_train < (uint64_t)T + 1)
        return "the training part of the token file is shorter than one sequence (seq + 1 tokens)";
    if (dl->n_val < (uint64_t)T + 1)
        return "the held-out part of the token file is shorter than one sequence (seq + 1 tokens); "
               "use a larger file or a larger --val-fraction";
    return NULL;
}

void dataloader_fill(const DataLoader *dl, DataSplit split, uint64_t index, int first,
                     int count, int T, int *inputs, int *targets) {
    const uint16_t *base = split == SPLIT_TRAIN ? dl->tokens : dl->tokens + dl->n_train;
    uint64_t n = split == SPLIT_TRAIN ? dl->n_train : dl->n_val;
    uint32_t stream = split == SPLIT_TRAIN ? RNG_STREAM_DATA : RNG_STREAM_EVAL;
    for (int s = 0; s < count; s++) {
        uint64_t start = rng_below(dl->seed, stream, (uint64_t)(first + s), (uint32_t)index,
                                   n - (uint64_t)T);
        const uint16_t *w = base + start;
        for (int t = 0; t < T; t++) {
            inputs[(size_t)s * T + t] = w[t];
            targets[(size_t)s * T + t] = w[t + 1];
        }
    }
}
