/* nccl.h of the pretend NCCL (tests/fake_gpu): the subset of NCCL's API the
 * kit calls, with NCCL's names, types and semantics, implemented over MPI
 * on the pretend GPU's memory by tests/fake_gpu/fake_nccl.c. Building
 * common/comm_nccl.cu against it runs the kit's whole NCCL path in CI,
 * where no GPU is. What it keeps of NCCL (fake_nccl.c has the details):
 *   - communicators: one over the whole world (ncclCommInitRankConfig), the
 *     others split from it (ncclCommSplit); two ranks on one GPU refused;
 *     non-blocking ones (config.blocking = 0) answer ncclInProgress and
 *     must be polled with ncclCommGetAsyncError before the next call;
 *   - buffers must be the pretend GPU's memory, inside live blocks, and
 *     in place only in NCCL's in-place layouts;
 *   - an operation is queued on a stream and completes later: its results
 *     land when a query finds it complete, never before;
 *   - ncclGroupStart/End: the operations between them are launched
 *     together at the outermost ncclGroupEnd, not before;
 *   - sends and receives between two ranks match in the order issued. */
#ifndef FAKE_NCCL_H
#define FAKE_NCCL_H

#include <stddef.h>

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_SPLIT_NOCOLOR -1

typedef struct FakeNcclComm *ncclComm_t;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

typedef struct { char internal[128]; } ncclUniqueId;

typedef enum {
    ncclUint8 = 1, ncclInt32 = 2, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8,
    ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;

typedef struct {
    size_t size;
    int blocking;  /* 0: calls may return ncclInProgress */
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {sizeof(ncclConfig_t), 1}

const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
