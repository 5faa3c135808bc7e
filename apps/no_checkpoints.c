/* no_checkpoints.c: a program built without checkpoint ops (checkpoints.h).
 * A build of the programs without lab 09, e.g. labs 00-08 in a student
 * handout that lacks lab 09's solution, has no checkpoints: its trainers
 * refuse --save, --resume and the other checkpoint flags with one error
 * before any work (PROGRAM_NO_CHECKPOINTS says where they are). */
#include "checkpoints.h"

const CkptOps *program_checkpoints(void) { return NULL; }
