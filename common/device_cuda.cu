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

void *device_cuda_comm_mark(void) {
    cudaEvent_t mark;
    CUDA_CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(mark, g_comm_stream));
    return mark;
}

/* the compute stream (0) waits on the GPU; the event is freed once it fires */
void device_cuda_compute_after(void *mark) {
    CUDA_CHECK(cudaStreamWaitEvent(0, (cudaEvent_t)mark, 0));
    CUDA_CHECK(cudaEventDestroy((cudaEvent_t)mark));
}

/* Pinned staging buffers (device_host_alloc): kept when freed, each with a
 * mark of the communication work queued then (an async copy may still use
 * it), and handed out again, the smallest that fits, once that has passed. */
typedef struct {
    void *ptr;
    size_t bytes;
    cudaEvent_t mark;  /* NULL: nothing pending */
    int busy;
} Pinned;
static Pinned *g_pinned;
static size_t g_pinned_count, g_pinned_capacity;

void *device_cuda_host_alloc(size_t bytes) {
    Pinned *best = NULL;
    for (size_t i = 0; i < g_pinned_count; i++) {
        Pinned *p = &g_pinned[i];
        if (!p->busy && p->bytes >= bytes && (!best || p->bytes < best->bytes)) best = p;
    }
    if (!best) {
        if (g_pinned_count == g_pinned_capacity) {
            g_pinned_capacity = g_pinned_capacity ? 2 * g_pinned_capacity : 16;
            g_pinned = (Pinned *)realloc(g_pinned, g_pinned_capacity * sizeof(Pinned));
            CHECK(g_pinned, "out of memory");
        }
        best = &g_pinned[g_pinned_count++];
        *best = Pinned{NULL, bytes ? bytes : 1, NULL, 0};
        CUDA_CHECK(cudaMallocHost(&best->ptr, best->bytes));
    }
    if (best->mark) {
        CUDA_CHECK(cudaEventSynchronize(best->mark));
        CUDA_CHECK(cudaEventDestroy(best->mark));
        best->mark = NULL;
    }
    best->busy = 1;
    return best->ptr;
}

void device_cuda_host_free(void *ptr) {
    for (size_t i = 0; i < g_pinned_count; i++)
        if (g_pinned[i].ptr == ptr && g_pinned[i].busy) {
            g_pinned[i].busy = 0;
            g_pinned[i].mark = (cudaEvent_t)device_cuda_comm_mark();
            return;
        }
    die_at(__FILE__, __LINE__, "device_host_free of a pointer device_host_alloc did not return");
}

void device_cuda_comm_copy(void *dst, const void *src, size_t bytes) {
    device_cuda_comm_after_compute();
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g_comm_stream));
}

void device_cuda_comm_synchronize(void) { CUDA_CHECK(cudaStreamSynchronize(g_comm_stream)); }
