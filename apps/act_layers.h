/* act_layers.h: lab 05's sequence-parallel layers and recomputations as
 * the model calls them (model.h's SequenceParallelOps and RecomputeOps),
 * for the programs that run them: train_tp and train_zero built WITH_LAB05,
 * and train_4d. */
#ifndef ACT_LAYERS_H
#define ACT_LAYERS_H

#include "model.h"

extern const SequenceParallelOps sp_layers;
extern const RecomputeOps recompute_layers;

#endif
