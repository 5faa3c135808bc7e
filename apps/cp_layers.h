/* cp_layers.h: lab 07's attention across a split sequence as the model
 * calls it (model.h's ContextParallelOps), for the programs that run it:
 * train_cp and train_4d. */
#ifndef CP_LAYERS_H
#define CP_LAYERS_H

#include "layout.h"
#include "model.h"

/* ring (contiguous, zigzag or striped chunks: the layout says which) or
 * Ulysses' all-to-alls */
extern const ContextParallelOps cp_ring_layers, cp_ulysses_layers;

/* the table that runs algo */
const ContextParallelOps *cp_layers_of(CpAlgo algo);

#endif
