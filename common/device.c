#include "device.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels_backend.h"

static Device g_device = DEVICE_CPU;

Device device_current(void) { return g_device; }

void device_select(const char *name) {
    if (strcmp(name, "cpu") == 0) {
        g_device = DEVICE_CPU;
        return;
    }
    if (strcmp(name, "cuda") != 0) USER_ERROR("--device expects cpu or cuda, got '%s'", name);
#ifdef KIT_CUDA
    device_cuda_bind();
    const char *tf32 = getenv("KIT_TF32");
    kernels_cuda_set_tf32(tf32 && strcmp(tf32, "1") == 0);
    g_device = DEVICE_CUDA;
#else
    USER_ERROR("--device cuda: this build has no CUDA backend; rebuild with `make CUDA=1` "
               "(needs the CUDA toolkit), or use --device cpu");
#endif
}

#ifdef KIT_CUDA
#define ON_GPU (g_device == DEVICE_CUDA)
#else
#define ON_GPU 0
#define device_cuda_description() "cpu"
#define device_cuda_memory_id() "host"
#define device_cuda_copy(dst, src, bytes) memcpy(dst, src, bytes)
#define device_cuda_is_gpu_pointer(p) ((void)(p), 0)
#define device_cuda_synchronize() ((void)0)
#define device_cuda_driver_used_bytes() ((size_t)0)
#define device_cuda_free_bytes() ((size_t)0)
#define device_cuda_alloc(bytes) ((void)(bytes), (void *)NULL)
#define device_cuda_free(p) ((void)(p))
#define device_cuda_zero(p, bytes) ((void)(p), (void)(bytes))
#define device_cuda_comm_stream() ((void *)NULL)
#define device_cuda_comm_after_compute() ((void)0)
#define device_cuda_comm_mark() ((void *)NULL)
#define device_cuda_compute_after(mark) ((void)(mark))
#define device_cuda_host_alloc(bytes) ((void)(bytes), (void *)NULL)
#define device_cuda_host_free(p) ((void)(p))
#define device_cuda_comm_copy(dst, src, bytes) memcpy(dst, src, bytes)
#define device_cuda_comm_synchronize() ((void)0)
#endif

const char *device_description(void) { return ON_GPU ? device_cuda_description() : "cpu"; }
const char *device_memory_id(void) { return ON_GPU ? device_cuda_memory_id() : "host"; }

void device_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    if (ON_GPU) device_cuda_copy(dst, src, bytes);
    else memcpy(dst, src, bytes);
}

int device_is_gpu_pointer(const void *p) { return ON_GPU && device_cuda_is_gpu_pointer(p); }
void device_synchronize(void) { if (ON_GPU) device_cuda_synchronize(); }
size_t device_driver_used_bytes(void) { return ON_GPU ? device_cuda_driver_used_bytes() : 0; }
size_t device_free_bytes(void) { return ON_GPU ? device_cuda_free_bytes() : 0; }

void *device_alloc(size_t bytes) {
    CHECK(ON_GPU, "device_alloc without a GPU selected");
    return device_cuda_alloc(bytes);
}

void device_free(void *p) {
    CHECK(ON_GPU, "device_free without a GPU selected");
    device_cuda_free(p);
}

void device_zero(void *p, size_t bytes) {
    if (ON_GPU) device_cuda_zero(p, bytes);
    else memset(p, 0, bytes);
}

void *device_comm_stream(void) { return ON_GPU ? device_cuda_comm_stream() : NULL; }
void device_comm_after_compute(void) { if (ON_GPU) device_cuda_comm_after_compute(); }
void *device_comm_mark(void) { return ON_GPU ? device_cuda_comm_mark() : NULL; }
void device_compute_after(void *mark) { if (mark) device_cuda_compute_after(mark); }

void *device_host_alloc(size_t bytes) {
    void *p = ON_GPU ? device_cuda_host_alloc(bytes) : malloc(bytes ? bytes : 1);
    CHECK(p, "out of host memory for %zu bytes of staging", bytes);
    return p;
}

void device_host_free(void *p) {
    if (ON_GPU) device_cuda_host_free(p);
    else free(p);
}

void device_comm_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    if (ON_GPU) device_cuda_comm_copy(dst, src, bytes);
    else memcpy(dst, src, bytes);
}

void device_comm_synchronize(void) { if (ON_GPU) device_cuda_comm_synchronize(); }

/* nothing to open: see device.h (tests/fake_gpu/fake_device.c has the real ones) */
void device_kernel_begin(void) {}
void device_kernel_end(void) {}
