/* gpu_present.h: the GPU test programs' first step. Without a usable CUDA
 * device a program prints one line, "skip: no CUDA device (why)", and
 * exits with status 77 (the test is skipped, not failed). */
#ifndef GPU_PRESENT_H
#define GPU_PRESENT_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define EXIT_SKIP 77

static inline void exit_unless_gpu_present(void) {
    int devices = 0;
    cudaError_t rc = cudaGetDeviceCount(&devices);
    if (rc == cudaSuccess && devices > 0) return;
    printf("skip: no CUDA device (%s)\n",
           rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    exit(EXIT_SKIP);
}

#endif
