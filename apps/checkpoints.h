/* checkpoints.h: the checkpoint ops a program is built with, which it hands
 * to the library (train.h's TrainProgram.checkpoints, checkpoint.h's
 * ckpt_load_standard). Two definitions, one per build:
 *   apps/checkpoints.c     lab 09's functions (labs/09_checkpoint/
 *                          checkpoint_shards.h), linked with its object;
 *   apps/no_checkpoints.c  none (NULL): a program built without lab 09. */
#ifndef CHECKPOINTS_H
#define CHECKPOINTS_H

#include "checkpoint.h"

const CkptOps *program_checkpoints(void);

/* What a program without them answers a checkpoint flag: where they are */
#define PROGRAM_NO_CHECKPOINTS \
    "they come with lab 09 (its programs are build/labs/09_checkpoint/train_*)"

#endif
