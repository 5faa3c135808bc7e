/* fake_device.c: device.h with a pretend GPU made of host memory, for
 * testing without a GPU what --device cuda changes outside the kernels.
 *
 * Linked in place of common/device.c (tests/fake_gpu.bats builds the
 * programs with it). `--device cuda` then succeeds: mem_alloc hands out
 * "GPU" blocks (from this file's registry, through alloc.c's GPU path and
 * its cache), the communicator sees GPU pointers and stages them through
 * host copies, the trainer uploads token batches and initial parameters and
 * downloads parameters with device_copy. The kernels are the CPU backend's
 * (a build without KIT_CUDA has no other), so a run must equal the CPU run
 * bit for bit: any transfer that is missing, misplaced or too short shows.
 * device_copy checks that its device side lies inside one block.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"

typedef struct {
    char *base;
    size_t bytes;
} Block;

static Device g_device = DEVICE_CPU;
static Block *g_blocks;
static size_t g_count, g_capacity, g_in_use;

void device_select(const char *name) {
    if (strcmp(name, "cpu") != 0 && strcmp(name, "cuda") != 0)
        USER_ERROR("--device expects cpu or cuda, got '%s'", name);
    g_device = strcmp(name, "cuda") == 0 ? DEVICE_CUDA : DEVICE_CPU;
}

Device device_current(void) { return g_device; }

const char *device_description(void) {
    return g_device == DEVICE_CUDA ? "pretend GPU (host memory, tests/fake_gpu)" : "cpu";
}

/* the block holding p, or NULL */
static const Block *block_of(const void *p) {
    for (size_t i = 0; i < g_count; i++)
        if ((const char *)p >= g_blocks[i].base && (const char *)p < g_blocks[i].base + g_blocks[i].bytes)
            return &g_blocks[i];
    return NULL;
}

int device_is_gpu_pointer(const void *p) { return p && block_of(p) != NULL; }

static void check_inside(const void *p, size_t bytes, const char *side) {
    const Block *b = block_of(p);
    if (!b) return;
    CHECK((const char *)p + bytes <= b->base + b->bytes,
          "device_copy: %zu bytes from the %s pointer run past its GPU block (%zu bytes, "
          "offset %zu)", bytes, side, b->bytes, (size_t)((const char *)p - b->base));
}

void device_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    check_inside(dst, bytes, "destination");
    check_inside(src, bytes, "source");
    memcpy(dst, src, bytes);
}

void device_synchronize(void) {}
size_t device_driver_used_bytes(void) { return g_device == DEVICE_CUDA ? g_in_use : 0; }
size_t device_free_bytes(void) { return g_device == DEVICE_CUDA ? ((size_t)1 << 31) - g_in_use : 0; }

void *device_alloc(size_t bytes) {
    CHECK(g_device == DEVICE_CUDA, "device_alloc without a GPU selected");
    if (g_count == g_capacity) {
        g_capacity = g_capacity ? 2 * g_capacity : 256;
        g_blocks = realloc(g_blocks, g_capacity * sizeof *g_blocks);
        CHECK(g_blocks, "out of memory");
    }
    size_t size = bytes ? bytes : 1;
    char *p = calloc(1, size);
    CHECK(p, "out of memory");
    g_blocks[g_count++] = (Block){p, size};
    g_in_use += size;
    return p;
}

void device_free(void *p) {
    for (size_t i = 0; i < g_count; i++)
        if (g_blocks[i].base == p) {
            g_in_use -= g_blocks[i].bytes;
            free(p);
            g_blocks[i] = g_blocks[--g_count];
            return;
        }
    CHECK(0, "device_free of a pointer device_alloc did not return");
}

void device_zero(void *p, size_t bytes) {
    check_inside(p, bytes, "zeroed");
    memset(p, 0, bytes);
}

void *device_comm_stream(void) { return NULL; }
void device_comm_after_compute(void) {}
