/* device.h: where this process computes, and moving bytes to and from it.
 *
 * `--device cpu` (the default) keeps everything in host memory. `--device
 * cuda` makes the process's GPU current: from then on mem_alloc returns GPU
 * memory and every kernel of kernels.h runs there. The GPU is chosen from
 * the process's rank on its node modulo the GPUs it sees
 * (device_gpu_of_local_rank), so `mpirun -np 4` on a 4-GPU workstation puts
 * one rank on each, and on a 1-GPU machine all four share it.
 *
 * Streams. Kernels run on the compute stream (CUDA's default stream, which
 * cuBLAS also uses). NCCL collectives run on a separate communication
 * stream, so a gradient bucket's all-reduce or ZeRO-3's prefetch proceeds
 * while the next layer computes. The communication stream first waits for
 * what compute has queued so far (an event: device_comm_after_compute), and
 * comm_wait returns only when the collective is done, so compute queued
 * after comm_wait sees its result.
 *
 * A build without CUDA (plain `make`) has only the CPU: --device cuda is
 * then a user error that says to rebuild with `make CUDA=1`.
 */
#ifndef DEVICE_H
#define DEVICE_H

#include <stddef.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DEVICE_CPU, DEVICE_CUDA } Device;

/* "cpu" or "cuda"; anything else, or cuda without a CUDA build or without a
 * visible GPU, is a user error (one line, exit 2). Call once, early. */
void device_select(const char *name);
Device device_current(void);
/* "cpu", or the GPU's name and index, e.g. "NVIDIA H100 80GB HBM3 (GPU 0)" */
const char *device_description(void);
/* Which memory this process computes in, the same string for the ranks that
 * share it: "host" on the CPU (the node's), the GPU's UUID on a GPU. Not
 * the index: where each rank sees only its own GPU (CUDA_VISIBLE_DEVICES
 * per task, as Slurm sets it), every rank's is "GPU 0 of 1". */
const char *device_memory_id(void);

/* Copy bytes between any two of host memory and the current GPU's memory
 * (the direction is read off the pointers); synchronous. */
void device_copy(void *dst, const void *src, size_t bytes);
/* 1 when p is memory of a GPU (always 0 on the CPU) */
int device_is_gpu_pointer(const void *p);
/* Wait for everything queued on the GPU (no-op on the CPU). */
void device_synchronize(void);
/* Bytes of GPU memory in use as the driver counts them (cudaMemGetInfo:
 * total - free, all processes and the CUDA context included); 0 on the CPU. */
size_t device_driver_used_bytes(void);
/* Bytes of the current GPU's memory still free (cudaMemGetInfo's free, all
 * processes counted); 0 on the CPU. */
size_t device_free_bytes(void);

/* Raw memory of the current GPU, zero-filled; NULL when the GPU is out of
 * memory (alloc.c counts it, caches it and says what ran out). */
void *device_alloc(size_t bytes);
void device_free(void *p);
/* Zero bytes at p, in order with the kernels queued so far (async). */
void device_zero(void *p, size_t bytes);

/* The communication stream (a cudaStream_t; NULL on the CPU), and making it
 * wait for the kernels queued so far on the compute stream. */
void *device_comm_stream(void);
void device_comm_after_compute(void);

/* Host memory for staging GPU buffers through MPI (comm.c, when ranks
 * share a GPU): pinned (page-locked, cudaMallocHost), so that copies run at
 * full speed and asynchronously; plain malloc on the CPU. Freed buffers are
 * kept for reuse once the copies queued before their free have passed
 * (cudaFreeHost would wait for the whole GPU). */
void *device_host_alloc(size_t bytes);
void device_host_free(void *p);
/* Copy between a GPU buffer and host memory on the communication stream,
 * after the kernels queued so far (the data they produce); asynchronous. A
 * copy to the host is there after device_comm_synchronize; kernels queued
 * after a copy to the GPU see it once the compute stream waits for a mark
 * (device_compute_after(device_comm_mark())). */
void device_comm_copy(void *dst, const void *src, size_t bytes);
void device_comm_synchronize(void);

/* A mark on the communication stream: everything queued there so far (a
 * CUDA event; NULL on the CPU). A freed GPU block keeps one (alloc.c): NCCL
 * may still read or write the block when the program frees it, so before
 * the block is zeroed and handed out again the compute stream waits for
 * the mark (device_compute_after, which also releases it). Nothing waits
 * on the host. */
void *device_comm_mark(void);
void device_compute_after(void *mark);

/* kernels.c calls these around every kernel of kernels.h. device.c's are
 * empty (a GPU kernel runs on the GPU; on the CPU all memory is the
 * host's). The pretend GPU of tests/fake_gpu opens its memory to the host
 * between them and keeps it locked otherwise, so that host code touching
 * device memory outside a kernel or a copy crashes there as it would on a
 * real GPU. Pairs may nest. */
void device_kernel_begin(void);
void device_kernel_end(void);

/* This process's rank among the processes of its node, as the launcher
 * says it: Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID,
 * Slurm's SLURM_LOCALID; -1 when none does (device_cuda.cu then asks MPI). */
static inline int device_local_rank(void) {
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

/* The GPU of a process: its local rank modulo the GPUs it sees. The
 * runtime numbers only the visible ones, so under CUDA_VISIBLE_DEVICES set
 * per task (as Slurm does) count is 1 and each rank takes its own; with
 * more ranks than GPUs, ranks share them (comm.h then stages through host
 * memory, NCCL refusing two ranks on one GPU). */
static inline int device_gpu_of_local_rank(int local_rank, int count) {
    return (local_rank < 0 ? 0 : local_rank) % count;
}

#ifdef KIT_CUDA
/* The GPU half, in device_cuda.cu. */
int device_cuda_bind(void);  /* select this process's GPU, return its index */
const char *device_cuda_description(void);
const char *device_cuda_memory_id(void);
void device_cuda_copy(void *dst, const void *src, size_t bytes);
int device_cuda_is_gpu_pointer(const void *p);
void device_cuda_synchronize(void);
size_t device_cuda_driver_used_bytes(void);
size_t device_cuda_free_bytes(void);
void *device_cuda_alloc(size_t bytes);
void device_cuda_free(void *p);
void device_cuda_zero(void *p, size_t bytes);
void *device_cuda_comm_stream(void);
void device_cuda_comm_after_compute(void);
void *device_cuda_comm_mark(void);
void device_cuda_compute_after(void *mark);
void *device_cuda_host_alloc(size_t bytes);
void device_cuda_host_free(void *p);
void device_cuda_comm_copy(void *dst, const void *src, size_t bytes);
void device_cuda_comm_synchronize(void);
#endif

#ifdef __cplusplus
}
#endif

#endif
