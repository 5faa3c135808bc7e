/* selftest: the pretend GPU itself (fake_device.c; tests/fake_gpu.bats runs
 * it with FAKE_GPU_MEMORY_MB=4).
 *   selftest        blocks, copies, kernels, nested brackets, reuse of freed
 *                   space, the free count and running out of memory, through
 *                   device.h, alloc.h and kernels.h as the programs use them;
 *                   prints "selftest: ok" (any failure is a fatal: line)
 *   selftest touch  the same, then host code reads a GPU buffer outside any
 *                   kernel or copy: the pretend GPU must stop the process
 *                   (SIGSEGV) with one line and a backtrace naming
 *                   host_reads_gpu_memory */
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "kernels.h"

#define N 1000
#define MIB ((size_t)1 << 20)

/* the planted bug: a host read of device memory (a crash on a real GPU) */
__attribute__((noinline)) float host_reads_gpu_memory(const float *gpu) {
    return ((const volatile float *)gpu)[1];
}

static void check_kernels_and_copies(void) {
    float hx[N], hy[N], back[N];
    for (int i = 0; i < N; i++) {
        hx[i] = (float)(i % 7);
        hy[i] = (float)(i % 5);
    }
    float *x = mem_alloc(MEM_WORKSPACE, N * sizeof(float));
    float *y = mem_alloc(MEM_WORKSPACE, N * sizeof(float));
    CHECK(device_is_gpu_pointer(x) && device_is_gpu_pointer(y) && !device_is_gpu_pointer(hx),
          "mem_alloc did not return GPU memory");
    device_copy(x, hx, sizeof hx);
    device_copy(y, hy, sizeof hy);
    add_inplace(x, y, N);       /* x = hx + hy */
    scale_inplace(x, 2.0f, N);  /* x = 2 (hx + hy) */
    double want = 0;
    for (int i = 0; i < N; i++) want += 4.0 * (hx[i] + hy[i]) * (hx[i] + hy[i]);
    CHECK(sum_squares(x, N) == want, "sum_squares on the pretend GPU: %g, want %g",
          sum_squares(x, N), want);
    device_copy(back, x, sizeof back);
    for (int i = 0; i < N; i++)
        CHECK(back[i] == 2.0f * (hx[i] + hy[i]), "element %d after the kernels: %g", i, back[i]);
    device_copy(y, x, sizeof back); /* device to device */
    set_zero(x, N / 2);
    device_zero(x + N / 2, N / 2 * sizeof(float));
    device_copy(back, x, sizeof back);
    for (int i = 0; i < N; i++) CHECK(back[i] == 0.0f, "element %d not zeroed", i);
    device_copy(back, y, sizeof back);
    CHECK(back[N - 1] == 2.0f * (hx[N - 1] + hy[N - 1]), "device-to-device copy");
    /* brackets nest: the memory stays open until the outer one ends */
    device_kernel_begin();
    device_kernel_begin();
    device_kernel_end();
    CHECK(y[1] == back[1], "a read inside a bracket");
    device_kernel_end();
    mem_free(x);
    mem_free(y);
}

/* FAKE_GPU_MEMORY_MB=4: the free count, NULL when nothing fits, first fit
 * reusing freed space, zeroed */
static void check_capacity(void) {
    CHECK(device_free_bytes() == 4 * MIB - device_driver_used_bytes(),
          "free %zu + used %zu bytes is not FAKE_GPU_MEMORY_MB=4", device_free_bytes(),
          device_driver_used_bytes());
    size_t free0 = device_free_bytes();
    CHECK(device_alloc(free0 + 1) == NULL, "an allocation larger than the free memory succeeded");
    char *a = device_alloc(MIB), *b = device_alloc(MIB);
    CHECK(a && b, "2 MiB out of 4 MiB failed");
    CHECK(device_free_bytes() == free0 - 2 * MIB, "free bytes after 2 MiB: %zu of %zu",
          device_free_bytes(), free0);
    CHECK(device_alloc(free0 - MIB) == NULL, "more than the free memory was handed out");
    char ones[256];
    memset(ones, 1, sizeof ones);
    device_copy(a, ones, sizeof ones);
    device_free(a);
    char *again = device_alloc(MIB / 2);
    CHECK(again == a, "freed space was not reused (first fit)");
    char back[256];
    device_copy(back, again, sizeof back);
    for (size_t i = 0; i < sizeof back; i++) CHECK(back[i] == 0, "reused space not zeroed");
    device_free(again);
    device_free(b);
    CHECK(device_free_bytes() == free0, "free bytes not back to %zu after freeing", free0);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    int touch = argc > 1 && strcmp(argv[1], "touch") == 0;
    CHECK(argc == 1 || touch, "usage: selftest [touch]");
    CHECK(device_free_bytes() == 0, "free GPU bytes on the CPU");
    device_select("cuda");
    check_kernels_and_copies();
    check_capacity();
    printf("selftest: ok\n");
    if (touch) {
        fflush(stdout);
        float *x = mem_alloc(MEM_WORKSPACE, N * sizeof(float));
        printf("selftest: read %g on the host: not caught\n", host_reads_gpu_memory(x));
    }
    return 0;
}
