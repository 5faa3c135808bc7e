/* tp_layers.h: lab 04's split layers as the model calls them (model.h's
 * TensorParallelOps), for the programs that run tensor parallelism inside
 * another lab's layout (train_pp, train_cp, train_moe, train_4d; train_tp
 * builds its own table: it also offers the extension's cross-entropy). */
#ifndef TP_LAYERS_H
#define TP_LAYERS_H

#include "model.h"

extern const TensorParallelOps tp_layers;

#endif
