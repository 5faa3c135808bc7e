/* backward_kernels.h: the CPU backward passes a program hands to the kernels
 * (kernels.h: kernels_set_cpu_backward), lab 00's: the solution's, or the
 * student's copy in labs/, whichever backprop.o the program links. Every
 * program that runs a backward pass starts with
 *     kernels_set_cpu_backward(program_backward_kernels());
 * and links build/apps/backward_kernels.o with that backprop.o. */
#ifndef BACKWARD_KERNELS_H
#define BACKWARD_KERNELS_H

#include "kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Lab 00's functions (its backprop.c), each the CpuBackwardKernels member
 * of its name: the contract the lab's README states. */
void layernorm_backward_cpu(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);
void attention_backward_cpu(float *dqkv, float *datt, const float *dout, const float *qkv,
                            const float *att, int B, int T, int C, int NH);

const CpuBackwardKernels *program_backward_kernels(void);

#ifdef __cplusplus
}
#endif

#endif
