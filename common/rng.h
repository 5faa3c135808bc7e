/* rng.h: a counter-based random number generator (Philox4x32-10).
 *
 * A counter-based generator has no state to carry: the value is a pure
 * function of (key, counter). That is what makes initialization independent of
 * sharding: element i of tensor t is drawn from key = seed, counter = (i, t),
 * so a rank that owns elements [a, b) of a tensor computes exactly those
 * values, identical to what a single device computes for them, in any order,
 * on the CPU or the GPU (the functions are host+device).
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
 * SC'11) is the generator cuRAND and JAX use; it passes BigCrush.
 */
#ifndef RNG_H
#define RNG_H

#include <stdint.h>
#include "math_shared.h"

/* Streams keep unrelated uses of one seed apart (counter word 3). */
enum {
    RNG_STREAM_INIT = 1,   /* parameter initialization: counter = (i, tensor) */
    RNG_STREAM_DATA = 2,   /* training batches: counter = (sample, step) */
    RNG_STREAM_TEST = 3,   /* test inputs */
    RNG_STREAM_CORPUS = 4, /* synthetic corpus generation */
    RNG_STREAM_EVAL = 5    /* held-out batches: counter = (sample, eval batch) */
};

typedef struct { uint32_t v[4]; } Philox4;

static inline HD uint32_t philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* Ten rounds of the Philox4x32 bijection keyed by (k0, k1). */
static inline HD Philox4 philox4x32_10(Philox4 ctr, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = philox_mulhilo(0xD2511F53u, ctr.v[0], &hi0);
        uint32_t lo1 = philox_mulhilo(0xCD9E8D57u, ctr.v[2], &hi1);
        Philox4 next = {{ hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0 }};
        ctr = next;
        k0 += 0x9E3779B9u;  /* Weyl sequence key schedule */
        k1 += 0xBB67AE85u;
    }
    return ctr;
}

/* Four 32-bit random words for (seed, stream, a, b). */
static inline HD Philox4 rng_block(uint64_t seed, uint32_t stream, uint64_t a, uint32_t b) {
    Philox4 ctr = {{ (uint32_t)a, (uint32_t)(a >> 32), b, stream }};
    return philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform in (0, 1): 24 random bits, never exactly 0 (safe for logf). */
static inline HD float rng_u32_to_unit(uint32_t x) {
    return ((float)(x >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

static inline HD float rng_uniform(uint64_t seed, uint32_t stream, uint64_t a, uint32_t b) {
    return rng_u32_to_unit(rng_block(seed, stream, a, b).v[0]);
}

/* Standard normal by Box-Muller from two words of the same block. */
static inline HD float rng_normal(uint64_t seed, uint32_t stream, uint64_t a, uint32_t b) {
    Philox4 r = rng_block(seed, stream, a, b);
    float u1 = rng_u32_to_unit(r.v[0]);
    float u2 = rng_u32_to_unit(r.v[1]);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

/* An integer in [0, n), n > 0 (64 random bits, so the modulo bias is < n/2^64). */
static inline HD uint64_t rng_below(uint64_t seed, uint32_t stream, uint64_t a, uint32_t b, uint64_t n) {
    Philox4 r = rng_block(seed, stream, a, b);
    uint64_t x = ((uint64_t)r.v[1] << 32) | r.v[0];
    return x % n;
}

#endif
