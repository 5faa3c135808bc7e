/* device_cuda.cu: the GPU half of device.h: binding a process to its GPU,
 * copies, raw memory and the communication stream. */
#include <cuda_runtime_api.h>

#include "cuda_check.h"
#include "device.h"
#include <stdint.h>
#include <mpi.h>
extern "C" {
#include "comm.h"   /* MPI_CHECK */
}

static int g_gpu = -1;                      /* this process's GPU, chosen once */
static cudaStream_t g_comm_stream;          /* NCCL's stream, created with the binding */
static cudaEvent_t g_compute_mark;          /* "compute queued up to here" */
static char g_description[320];
static char g_memory_id[48];                /* "GPU-" and the UUID's 32 hex digits */

/* Rank of this process among the processes of its node: the launcher's
 * (device_local_rank); otherwise, if MPI is running, a shared-memory split
 * of the world (collective); a process started without mpirun is rank 0. */
static int node_rank(void) {
    const int local = device_local_rank();
    if (local >= 0) return local;
    int running = 0;
    MPI_CHECK(MPI_Initialized(&running));
    if (!running) return 0;
    MPI_Comm node;
    int rank;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &rank));
    MPI_CHECK(MPI_Comm_free(&node));
    return rank;
}

int device_cuda_bind(void) {
    if (g_gpu >= 0) return g_gpu;
    int count = 0;
    cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess || count == 0)
        USER_ERROR("--device cuda needs a CUDA GPU and none is visible (%s)",
                   rc != cudaSuccess ? cudaGetErrorString(rc) : "0 devices");
    g_gpu = device_gpu_of_local_rank(node_rank(), count);
    CUDA_CHECK(cudaSetDevice(g_gpu));
    /* non-blocking: no implicit ordering with the default (compute) stream;
     * the order we need is made explicit with events */
    CUDA_CHECK(cudaStreamCreateWithFlags(&g_comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&g_compute_mark, cudaEventDisableTiming));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, g_gpu));
    snprintf(g_description, sizeof g_description, "%s (GPU %d of %d)", prop.name, g_gpu, count);
    int n = snprintf(g_memory_id, sizeof g_memory_id, "GPU-");
    for (int i = 0; i < 16; i++)
        n += snprintf(g_memory_id + n, sizeof g_memory_id - (size_t)n, "%02x",
                      (unsigned char)prop.uuid.bytes[i]);
    return g_gpu;
}

const char *device_cuda_description(void) { return g_description; }
const char *device_cuda_memory_id(void) { return g_memory_id; }

void device_cuda_copy(void *dst, const void *src, size_t bytes) {
    /* unified addressing: the runtime tells host from device pointers */
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

int device_cuda_is_gpu_pointer(const void *p) {
    cudaPointerAttributes attr;
    CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
    return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

void device_cuda_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

/* cudaMemGetInfo: the current GPU's free bytes, and its total in *total */
static size_t free_and_total(size_t *total) {
    size_t free_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, total));
    return free_bytes;
}

size_t device_cuda_driver_used_bytes(void) {
    size_t total = 0, free_bytes = free_and_total(&total);
    return total - free_bytes;
}

size_t device_cuda_free_bytes(void) {
    size_t total = 0;
    return free_and_total(&total);
}

void *device_cuda_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes ? bytes : 1);
    if (rc == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();   /* clear it: the caller may free and retry */
        return NULL;
    }
    CUDA_CHECK(rc);
    device_cuda_zero(p, bytes);
    return p;
}

void device_cuda_zero(void *p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, 0)); }

void device_cuda_free(void *p) { CUDA_CHECK(cudaFree(p)); }

void *device_cuda_comm_stream(void) { return g_comm_stream; }

void device_cuda_comm_after_compute(void) {
    CUDA_CHECK(cudaEventRecord(g_compute_mark, 0));
    CUDA_CHECK(cudaStreamWaitEvent(g_comm_stream, g_compute_mark, 0));
}
