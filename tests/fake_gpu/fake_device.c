/* fake_device.c: device.h with a pretend GPU made of host memory, for
 * testing without a GPU what --device cuda changes outside the kernels.
 *
 * Linked in place of common/device.c (the Makefile's fake-gpu target,
 * tests/fake_gpu.bats). `--device cuda` then succeeds: mem_alloc hands out
 * "GPU" blocks (through alloc.c's GPU path and its cache), the communicator
 * sees GPU pointers and stages them through host copies, the trainer uploads
 * token batches and initial parameters and downloads parameters with
 * device_copy. The kernels are the CPU backend's (a build without KIT_CUDA
 * has no other), so a run must equal the CPU run bit for bit: any transfer
 * that is missing, misplaced or too short shows.
 *
 * Memory the host cannot touch. On a real GPU, host code that reads or
 * writes device memory (a memset of a GPU buffer, a loop over GPU
 * parameters) crashes. Here it would read ordinary host memory and go
 * unnoticed, so the pretend GPU's memory is kept out of the host's reach:
 * it is one arena of address space (FAKE_GPU_MEMORY_MB MiB, default 2048,
 * reserved with mmap) that stays PROT_NONE except while the pretend GPU
 * itself works on it: a kernel (kernels.c brackets every kernel with
 * device_kernel_begin/end), device_copy (which is also how comm.c stages
 * GPU buffers for MPI), device_zero, or device_alloc's zero fill. Anything
 * else that touches it faults, and the SIGSEGV handler below says so in
 * one line (the address, and where it lies in which GPU block), prints a
 * backtrace and lets the process die of SIGSEGV, so mpirun ends the job.
 * Faults elsewhere go to the handler that was there before (Open MPI's, or
 * the default). The brackets nest (a depth count); one thread at a time
 * calls kernels and copies, as in the rest of the kit (MPI_THREAD_FUNNELED).
 * Opening and closing is one mprotect each over the part of the arena that
 * blocks have used; the arena asks for transparent huge pages, so that is
 * a few page-table entries rather than thousands (a step of `tiny` runs a
 * few hundred kernels).
 *
 * Blocks are 256-byte aligned like cudaMalloc's and placed first fit, so
 * freed space is reused (alloc.c gives its cache back and retries when
 * device_alloc fails); device_alloc returns NULL when nothing fits, as
 * cudaMalloc does, so a small FAKE_GPU_MEMORY_MB runs out of GPU memory.
 * device_copy and device_zero check that their device side lies inside one
 * live block.
 */
#define _GNU_SOURCE /* REG_RIP */
#include <execinfo.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"
#include "device.h"
#include "include/cuda_runtime_api.h"

#define BLOCK_ALIGN 256 /* cudaMalloc's alignment */
#define DEFAULT_MEMORY_MB 2048
#define HUGE_PAGE ((size_t)2 << 20)

typedef struct {
    char *base;
    size_t bytes; /* as asked (at least 1); the block takes them rounded up to BLOCK_ALIGN */
} Block;

static Device g_device = DEVICE_CPU;
static char *g_arena;         /* the pretend GPU's memory; NULL until --device cuda */
static size_t g_arena_bytes;  /* its capacity */
static size_t g_reach;        /* what opens: the arena's first bytes, as far as blocks have
                                 * ever reached, in whole huge pages */
static size_t g_in_use;       /* bytes the live blocks take */
static int g_open;            /* depth of device_kernel_begin/end and the copies */
static Block *g_blocks;       /* live blocks, by address */
static size_t g_count, g_capacity;
static char g_description[160];
static char g_memory_id[64];  /* device_memory_id(): the pretend GPU's "UUID" */
static struct sigaction g_previous_segv;

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }
static size_t taken(const Block *b) { return round_up(b->bytes, BLOCK_ALIGN); }

static int in_arena(const void *p) {
    const char *c = p;
    return g_arena && c >= g_arena && c < g_arena + g_arena_bytes;
}

/* the live block holding p, or NULL (also for freed space and host memory) */
static const Block *block_of(const void *p) {
    if (!in_arena(p)) return NULL;
    size_t lo = 0, hi = g_count; /* first block above p: lo */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_blocks[mid].base <= (const char *)p) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    const Block *b = &g_blocks[lo - 1];
    return (const char *)p < b->base + b->bytes ? b : NULL;
}

/* ---- opening the memory to the host, and locking it again ---- */

static void set_access(int prot) {
    if (g_reach)
        IO_CHECK(mprotect(g_arena, g_reach, prot) == 0, "mprotect of the pretend GPU's memory");
}

static void open_memory(void) {
    if (g_open++ == 0) set_access(PROT_READ | PROT_WRITE);
}

static void close_memory(void) {
    if (--g_open == 0) set_access(PROT_NONE);
}

void device_kernel_begin(void) { open_memory(); }
void device_kernel_end(void) { close_memory(); }

/* ---- host code touching the memory: the report ---- */

static void write_stderr(const char *s, size_t n) {
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, s, n);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

/* where the faulting instruction is, to start the backtrace there rather
 * than in this handler (NULL where unknown: the whole backtrace is shown) */
static void *faulting_instruction(void *context) {
    const ucontext_t *uc = context;
#if defined(__x86_64__)
    return (void *)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (void *)uc->uc_mcontext.pc;
#else
    (void)uc;
    return NULL;
#endif
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    (void)sig;
    const char *addr = info->si_addr;
    if (!in_arena(addr)) {
        /* not the pretend GPU's: the fault repeats on return, and goes to
         * the handler that was there before */
        sigaction(SIGSEGV, &g_previous_segv, NULL);
        return;
    }
    char where[160], line[512];
    const Block *b = block_of(addr);
    const size_t offset = (size_t)(addr - (b ? b->base : g_arena));
    if (b) snprintf(where, sizeof where, "offset %zu of a %zu-byte GPU block", offset, b->bytes);
    else snprintf(where, sizeof where, "%zu bytes into the pretend GPU, in no live block", offset);
    int n;
    if (g_open) /* the memory was open: a kernel or a copy ran past what was ever allocated */
        n = snprintf(line, sizeof line,
                     "%s: fatal: a kernel or copy touched pretend-GPU memory at %p (%s): on a "
                     "real GPU this is an out-of-bounds access\n",
                     g_program_name, (const void *)addr, where);
    else
        n = snprintf(line, sizeof line,
                     "%s: fatal: host code touched pretend-GPU memory at %p (%s): on a real GPU "
                     "this is an illegal host access to device memory\n",
                     g_program_name, (const void *)addr, where);
    write_stderr(line, (size_t)n);
    n = snprintf(line, sizeof line,
                 "%s: backtrace, innermost first (PROGRAM(+0xOFFSET) is a static function: "
                 "addr2line -f -e PROGRAM 0xOFFSET names it):\n", g_program_name);
    write_stderr(line, (size_t)n);
    void *frames[64];
    int count = backtrace(frames, 64), first = 0;
    void *pc = faulting_instruction(context);
    for (int i = 0; i < count; i++)
        if (frames[i] == pc) {
            first = i;
            break;
        }
    backtrace_symbols_fd(frames + first, count - first, STDERR_FILENO);
    /* die of it: the fault repeats on return, with the default action */
    signal(SIGSEGV, SIG_DFL);
}

/* ---- the device ---- */

static size_t memory_bytes(void) {
    const char *env = getenv("FAKE_GPU_MEMORY_MB");
    long mb = env ? cli_int("FAKE_GPU_MEMORY_MB", env, 1, 1L << 20) : DEFAULT_MEMORY_MB;
    return (size_t)mb << 20;
}

/* FAKE_GPUS: how many pretend GPUs the node has (default 1, which all its
 * ranks share: the MPI path with host staging); as many as ranks gives each
 * its own, and NCCL (the pretend one, fake_nccl.c) serves every group. */
static int gpu_count(void) {
    const char *env = getenv("FAKE_GPUS");
    return env ? (int)cli_int("FAKE_GPUS", env, 1, 1024) : 1;
}

/* The arena, locked, and the handler that reports touching it. */
static void make_gpu(void) {
    g_arena_bytes = memory_bytes();
    /* one huge page more, to start on a huge page's boundary */
    size_t span = g_arena_bytes + HUGE_PAGE;
    char *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    IO_CHECK(p != MAP_FAILED, "reserving %zu MiB of address space for the pretend GPU",
             g_arena_bytes >> 20);
    g_arena = p + (HUGE_PAGE - (uintptr_t)p % HUGE_PAGE) % HUGE_PAGE;
    madvise(g_arena, g_arena_bytes, MADV_HUGEPAGE); /* a hint: fewer page table entries to flip */
    const int count = gpu_count(), gpu = device_gpu_of_local_rank(device_local_rank(), count);
    snprintf(g_description, sizeof g_description,
             "pretend GPU %d of %d (%zu MiB of host memory, tests/fake_gpu)", gpu, count,
             g_arena_bytes >> 20);
    char host[32] = "";
    gethostname(host, sizeof host - 1);
    snprintf(g_memory_id, sizeof g_memory_id, "GPU-pretend-%s-%d", host, gpu);
    void *warm[1];
    backtrace(warm, 1); /* loads what backtrace needs now, not inside the handler */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    IO_CHECK(sigaction(SIGSEGV, &sa, &g_previous_segv) == 0, "installing the SIGSEGV handler");
}

void device_select(const char *name) {
    if (strcmp(name, "cpu") != 0 && strcmp(name, "cuda") != 0)
        USER_ERROR("--device expects cpu or cuda, got '%s'", name);
    g_device = strcmp(name, "cuda") == 0 ? DEVICE_CUDA : DEVICE_CPU;
    if (g_device == DEVICE_CUDA && !g_arena) make_gpu();
}

Device device_current(void) { return g_device; }

const char *device_description(void) { return g_device == DEVICE_CUDA ? g_description : "cpu"; }
const char *device_memory_id(void) { return g_device == DEVICE_CUDA ? g_memory_id : "host"; }

int device_is_gpu_pointer(const void *p) { return block_of(p) != NULL; }

/* p's side of a copy or a zero fill: host memory, or inside one live block */
static void check_inside(const char *call, const void *p, size_t bytes, const char *side) {
    if (!in_arena(p)) return;
    const Block *b = block_of(p);
    CHECK(b, "%s: the %s pointer %p is pretend-GPU memory in no live block (freed, or never "
          "allocated)", call, side, p);
    CHECK((const char *)p + bytes <= b->base + b->bytes,
          "%s: %zu bytes from the %s pointer run past its GPU block (%zu bytes, offset %zu)", call,
          bytes, side, b->bytes, (size_t)((const char *)p - b->base));
}

void device_copy(void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return;
    check_inside("device_copy", dst, bytes, "destination");
    check_inside("device_copy", src, bytes, "source");
    open_memory();
    memcpy(dst, src, bytes);
    close_memory();
}

void device_zero(void *p, size_t bytes) {
    check_inside("device_zero", p, bytes, "zeroed");
    open_memory();
    memset(p, 0, bytes);
    close_memory();
}

void device_synchronize(void) {}
size_t device_driver_used_bytes(void) { return g_device == DEVICE_CUDA ? g_in_use : 0; }
size_t device_free_bytes(void) { return g_device == DEVICE_CUDA ? g_arena_bytes - g_in_use : 0; }

void *device_alloc(size_t bytes) {
    CHECK(g_device == DEVICE_CUDA, "device_alloc without a GPU selected");
    Block b = {NULL, bytes ? bytes : 1};
    const size_t need = taken(&b);
    /* first fit: the lowest gap between live blocks, or after the last one */
    size_t i = 0, start = 0;
    for (; i < g_count; i++) {
        size_t next = (size_t)(g_blocks[i].base - g_arena);
        if (next - start >= need) break;
        start = next + taken(&g_blocks[i]);
    }
    if (g_arena_bytes - start < need) return NULL; /* out of memory: alloc.c says so */
    if (g_count == g_capacity) {
        g_capacity = g_capacity ? 2 * g_capacity : 256;
        g_blocks = realloc(g_blocks, g_capacity * sizeof *g_blocks);
        CHECK(g_blocks, "out of memory");
    }
    memmove(&g_blocks[i + 1], &g_blocks[i], (g_count - i) * sizeof *g_blocks);
    b.base = g_arena + start;
    g_blocks[i] = b;
    g_count++;
    g_in_use += need;
    size_t reach = round_up(start + need, HUGE_PAGE);
    if (reach > g_arena_bytes) reach = g_arena_bytes;
    if (reach > g_reach) {
        g_reach = reach;
        if (g_open) set_access(PROT_READ | PROT_WRITE); /* the new pages too */
    }
    device_zero(b.base, b.bytes); /* freed space comes back zeroed, like fresh pages */
    return b.base;
}

void device_free(void *p) {
    const Block *b = block_of(p);
    CHECK(b && b->base == p, "device_free of a pointer device_alloc did not return");
    size_t i = (size_t)(b - g_blocks);
    g_in_use -= taken(b);
    memmove(&g_blocks[i], &g_blocks[i + 1], (g_count - i - 1) * sizeof *g_blocks);
    g_count--;
}

void *device_comm_stream(void) { return NULL; }
void device_comm_after_compute(void) {}

/* Staging: plain host memory, copied at once (copies here are synchronous) */
void *device_host_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    CHECK(p, "out of host memory for %zu bytes of staging", bytes);
    return p;
}
void device_host_free(void *p) { free(p); }
void device_comm_copy(void *dst, const void *src, size_t bytes) { device_copy(dst, src, bytes); }
void device_comm_synchronize(void) {}

/* The pretend NCCL's events (fake_nccl.c). Kernels here run at once on the
 * host, so "the compute stream waits for the mark" is the host waiting:
 * the block is reused only once the NCCL ops queued before its free have
 * completed (and written what they write). */
void *device_comm_mark(void) {
    cudaEvent_t mark;
    CHECK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming) == cudaSuccess &&
          cudaEventRecord(mark, NULL) == cudaSuccess, "pretend GPU: a communication mark");
    return mark;
}

void device_compute_after(void *mark) {
    if (!mark) return;
    while (cudaEventQuery(mark) == cudaErrorNotReady) sched_yield();
    (void)cudaGetLastError();
    cudaEventDestroy(mark);
}
