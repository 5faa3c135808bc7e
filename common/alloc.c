#include "alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "fileio.h"

/* Host blocks: a 64-byte header in front of each block remembers its size
 * and category, so mem_free can give the bytes back to the right counter.
 * GPU blocks (device.h) cannot carry a header the CPU reads: they are
 * remembered in a table instead (a few hundred live blocks at most, so a
 * linear search is fine). Either way the counters see the same logical
 * bytes, so memory.csv reads the same on both devices. */
#define MEM_HEADER 64
typedef struct {
    size_t bytes;
    MemCategory category;
    int host;  /* mem_alloc_host's: counted in g_host_*, freed by device_host_free */
    uint32_t magic;
} MemHeader;
#define MEM_MAGIC 0xA110C8EDu

static size_t g_current[MEM_NUM_CATEGORIES];
static size_t g_peak[MEM_NUM_CATEGORIES];
static size_t g_host_current[MEM_NUM_CATEGORIES];  /* mem_alloc_host's */
static size_t g_host_peak[MEM_NUM_CATEGORIES];

static const char *const g_names[MEM_NUM_CATEGORIES] = {
    "params", "grads", "optimizer", "activations", "comm", "workspace"};

typedef struct {
    void *ptr;
    size_t bytes;
    MemCategory category;
    void *comm_mark;  /* cached: the communication work queued when it was freed */
} GpuBlock;
typedef struct {
    GpuBlock *blocks;
    size_t count, capacity;
} GpuBlocks;
/* live: handed out by mem_alloc. cached: freed, kept for reuse. cudaFree
 * waits for the whole GPU to go idle, which would undo every overlap of
 * communication with compute (ZeRO-3 frees a gathered layer each time it
 * is done with it); a freed block is instead kept and handed out again for
 * the next request of the same size. Reuse is safe in stream order: the
 * block is zeroed on the compute stream, after the kernels that used it,
 * and after the communication queued when it was freed (its comm_mark: an
 * NCCL op may still read or write a block freed before the op was waited
 * for); the communication stream waits for compute before it writes. The
 * counters count logical bytes, so caching does not change memory.csv;
 * the driver's count (cudaMemGetInfo) includes the cache. */
static GpuBlocks g_live, g_cached;

static void count_in(size_t *current, size_t *peak, size_t bytes) {
    *current += bytes;
    if (*current > *peak) *peak = *current;
}
static void count_alloc(MemCategory category, size_t bytes) {
    count_in(&g_current[category], &g_peak[category], bytes);
}

static void push_block(GpuBlocks *set, GpuBlock b) {
    if (set->count == set->capacity) {
        set->capacity = set->capacity ? 2 * set->capacity : 256;
        set->blocks = realloc(set->blocks, set->capacity * sizeof *set->blocks);
        CHECK(set->blocks, "out of memory");
    }
    set->blocks[set->count++] = b;
}

/* Remove and return the block of `set` whose ptr is p (any p when p is
 * NULL) and whose size is bytes (any size when bytes is 0): 1 if found. */
static int take_block(GpuBlocks *set, const void *p, size_t bytes, GpuBlock *out) {
    for (size_t i = set->count; i-- > 0;) {
        const GpuBlock *b = &set->blocks[i];
        if ((p && b->ptr != p) || (bytes && b->bytes != bytes)) continue;
        *out = *b;
        set->blocks[i] = set->blocks[--set->count];
        return 1;
    }
    return 0;
}

static void *gpu_alloc(MemCategory category, size_t bytes) {
    GpuBlock b;
    if (take_block(&g_cached, NULL, bytes, &b)) {
        device_compute_after(b.comm_mark);
        device_zero(b.ptr, bytes);
    } else {
        b.ptr = device_alloc(bytes);
        /* out of memory: give the cache back to the driver and try again */
        while (!b.ptr && take_block(&g_cached, NULL, 0, &b)) {
            device_compute_after(b.comm_mark);
            device_free(b.ptr);
            b.ptr = device_alloc(bytes);
        }
        if (!b.ptr)
            die_at(__FILE__, __LINE__, "out of GPU memory allocating %zu bytes of %s on %s",
                   bytes, g_names[category], device_description());
    }
    push_block(&g_live, (GpuBlock){b.ptr, bytes, category, NULL});
    count_alloc(category, bytes);
    return b.ptr;
}

/* 1 when ptr was a live GPU block (now cached), 0 when it is not one */
static int gpu_free(void *ptr) {
    GpuBlock b;
    if (!take_block(&g_live, ptr, 0, &b)) return 0;
    g_current[b.category] -= b.bytes;
    b.comm_mark = device_comm_mark();
    push_block(&g_cached, b);
    return 1;
}

/* A block of category: on the GPU under --device cuda unless `host` asks
 * for host memory (then pinned: device_host_alloc); a host block carries
 * its header, plain and aligned on the CPU */
static void *alloc_block(MemCategory category, size_t bytes, int host) {
    CHECK(category >= 0 && category < MEM_NUM_CATEGORIES, "bad memory category %d", (int)category);
    if (!host && device_current() == DEVICE_CUDA) return gpu_alloc(category, bytes);
    void *raw = NULL;
    if (host && device_current() == DEVICE_CUDA) raw = device_host_alloc(MEM_HEADER + bytes);
    else if (posix_memalign(&raw, 64, MEM_HEADER + bytes) != 0) raw = NULL;
    if (raw == NULL)
        die_at(__FILE__, __LINE__, "out of %smemory allocating %zu bytes of %s",
               host ? "host " : "", bytes, g_names[category]);
    memset(raw, 0, MEM_HEADER + bytes);
    MemHeader *h = raw;
    *h = (MemHeader){bytes, category, host, MEM_MAGIC};
    if (host) count_in(&g_host_current[category], &g_host_peak[category], bytes);
    else count_alloc(category, bytes);
    return (char *)raw + MEM_HEADER;
}

void *mem_alloc(MemCategory category, size_t bytes) { return alloc_block(category, bytes, 0); }

void *mem_alloc_host(MemCategory category, size_t bytes) { return alloc_block(category, bytes, 1); }

void mem_free(void *ptr) {
    if (!ptr || gpu_free(ptr)) return;
    MemHeader *h = (MemHeader *)((char *)ptr - MEM_HEADER);
    CHECK(h->magic == MEM_MAGIC, "mem_free of a pointer mem_alloc did not return");
    h->magic = 0;
    if (!h->host) {
        g_current[h->category] -= h->bytes;
        free(h);
        return;
    }
    g_host_current[h->category] -= h->bytes;
    if (device_current() == DEVICE_CUDA) device_host_free(h);
    else free(h);
}

const char *mem_category_name(MemCategory category) { return g_names[category]; }
size_t mem_current_bytes(MemCategory category) { return g_current[category]; }
size_t mem_peak_bytes(MemCategory category) { return g_peak[category]; }
size_t mem_host_current_bytes(MemCategory category) { return g_host_current[category]; }
size_t mem_host_peak_bytes(MemCategory category) { return g_host_peak[category]; }

void mem_reset_peaks(void) {
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) {
        g_peak[c] = g_current[c];
        g_host_peak[c] = g_host_current[c];
    }
}

void mem_csv_rows(char *buf, size_t size, int rank) {
    size_t len = 0;
    buf[0] = '\0';
    for (int c = 0; c < 2 * MEM_NUM_CATEGORIES; c++) {
        const int host = c >= MEM_NUM_CATEGORIES, k = c % MEM_NUM_CATEGORIES;
        if (host && g_host_peak[k] == 0) continue;
        int n = snprintf(buf + len, size - len, "%d,%s%s,%zu,%zu\n", rank, host ? "host_" : "",
                         g_names[k], host ? g_host_current[k] : g_current[k],
                         host ? g_host_peak[k] : g_peak[k]);
        CHECK(n > 0 && (size_t)n < size - len, "memory.csv rows do not fit in %zu bytes", size);
        len += (size_t)n;
    }
}

void mem_write_csv(const char *path, int rank) {
    char rows[2048];
    mem_csv_rows(rows, sizeof rows, rank);
    AtomicFile af;
    FILE *f = atomic_open(&af, path);
    IO_CHECK(fprintf(f, "%s%s", MEM_CSV_HEADER, rows) >= 0, "writing %s", path);
    atomic_commit(&af);
}
