/* cuda_check.h: CUDA_CHECK(cudaMalloc(...)), a failed CUDA runtime call dies
 * naming the call, where it was made and CUDA's own explanation:
 *     prog: fatal: file.cu:42: cudaMalloc(&p, bytes): out of memory
 * Shared by the NCCL communicator and the CUDA kernels.
 *
 * Kernel launches return nothing: check them with CUDA_CHECK(cudaGetLastError())
 * right after the launch (bad configuration), and let the next synchronizing
 * call report faults inside the kernel (they surface asynchronously).
 */
#ifndef CUDA_CHECK_H
#define CUDA_CHECK_H

#include <cuda_runtime_api.h>

/* check.h is C: under nvcc (C++) its declarations need C linkage. The system
 * headers it includes come first, outside the extern "C" block, because their
 * C++ versions declare overloads; check.h's own includes are then no-ops. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __cplusplus
extern "C" {
#endif
#include "check.h"
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                       \
    do {                                                                       \
        cudaError_t cuda_check_rc_ = (call);                                   \
        if (cuda_check_rc_ != cudaSuccess)                                     \
            die_at(__FILE__, __LINE__, "%s: %s", #call,                        \
                   cudaGetErrorString(cuda_check_rc_));                        \
    } while (0)

#endif
