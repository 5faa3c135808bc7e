/* cuda_runtime_api.h of the pretend GPU (tests/fake_gpu): the part of the
 * CUDA runtime that the kit's host-side NCCL code (common/comm_nccl.cu)
 * calls, for building that file with g++ where no GPU is. Only names and
 * types are the runtime's; tests/fake_gpu/fake_nccl.c implements them.
 *
 * Streams and events. The kit queues all its NCCL work on one communication
 * stream (device.h), so the pretend runtime keeps one queue of launches for
 * every stream: an event recorded on it marks the launches queued so far,
 * and is complete once they all are. Kernels on the pretend GPU run at once
 * on the host, so the compute stream never has anything pending. */
#ifndef FAKE_CUDA_RUNTIME_API_H
#define FAKE_CUDA_RUNTIME_API_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
} cudaError_t;

typedef struct FakeCudaStream *cudaStream_t;
typedef struct FakeCudaEvent *cudaEvent_t;

#define cudaEventDisableTiming 0x02

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
/* cudaSuccess when every launch queued before the record has completed,
 * cudaErrorNotReady otherwise (also left as the thread's last error, as
 * the runtime does) */
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t error);

#ifdef __cplusplus
}
#endif

#endif
