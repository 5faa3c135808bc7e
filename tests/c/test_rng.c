/* The counter-based RNG: known-answer vectors of Philox4x32-10 (Random123's
 * kat_vectors), and the property the kit relies on: initializing a tensor in
 * shards gives the same bits as initializing it whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model.h"
#include "rng.h"
#include "unit.h"

static void kat(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1,
                uint32_t e0, uint32_t e1, uint32_t e2, uint32_t e3) {
    Philox4 r = philox4x32_10((Philox4){{c0, c1, c2, c3}}, k0, k1);
    EXPECT(r.v[0] == e0 && r.v[1] == e1 && r.v[2] == e2 && r.v[3] == e3,
           "got %08x %08x %08x %08x", r.v[0], r.v[1], r.v[2], r.v[3]);
}

int main(void) {
    kat(0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8);
    kat(~0u, ~0u, ~0u, ~0u, ~0u, ~0u, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd);
    kat(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
        0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1);

    /* normal draws: mean ~0, variance ~1 over 200k samples (5 sigma bounds) */
    const int n = 200000;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        double x = rng_normal(42, RNG_STREAM_TEST, i, 0);
        s += x;
        s2 += x * x;
    }
    double mean = s / n, var = s2 / n - mean * mean;
    EXPECT(fabs(mean) < 5.0 / sqrt(n), "mean %g", mean);
    EXPECT(fabs(var - 1.0) < 5.0 * sqrt(2.0 / n), "variance %g", var);
    EXPECT(rng_below(1, RNG_STREAM_TEST, 5, 0, 7) < 7, "rng_below out of range");

    /* sharding independence: whole vs 3 uneven shards, same bits */
    GPTConfig cfg;
    CHECK(gpt_config_by_name("tiny", &cfg) == 0, "tiny config missing");
    const GPTLayout m = gpt_layout_whole(&cfg);
    size_t np = gpt_num_params(&cfg);
    float *whole = malloc(np * sizeof(float)), *sharded = malloc(np * sizeof(float));
    CHECK(whole && sharded, "out of memory");
    gpt_init_params(&m, 7, 0, np, whole);
    size_t cuts[] = {0, 12345, np / 2 + 17, np};
    for (int k = 0; k < 3; k++)
        gpt_init_params(&m, 7, cuts[k], cuts[k + 1] - cuts[k], sharded + cuts[k]);
    EXPECT(memcmp(whole, sharded, np * sizeof(float)) == 0, "sharded init differs");

    /* the init follows the table: ones, zeros and std-0.02 normals */
    TensorInfo t[64];
    CHECK(gpt_num_tensors(&m) <= 64, "table too small");
    gpt_tensor_table(&m, t);
    EXPECT(strcmp(t[2].name, "blocks.0.ln1w") == 0 && whole[t[2].offset] == 1.0f, "ln1w");
    EXPECT(whole[t[3].offset] == 0.0f, "ln1b");
    double ss = 0;
    for (size_t i = 0; i < t[0].count; i++) ss += (double)whole[i] * whole[i];
    double std = sqrt(ss / t[0].count);
    EXPECT(fabs(std - 0.02) < 0.001, "wte std %g", std);
    /* another seed gives other weights */
    float other;
    gpt_init_params(&m, 8, 0, 1, &other);
    EXPECT(other != whole[0], "seed ignored");
    free(whole);
    free(sharded);
    return unit_report("test_rng");
}
