/* check_precision: lab 11's conversions, checked on every fp32 bit pattern.
 * mp_float_to_bf16 and mp_float_to_fp16 (mixed_precision.h) against rules
 * written another way (precision_rules.h: bf16 by exact distances in
 * double, fp16 by the compiler's _Float16), on all 2^32 patterns, then the
 * landmarks of precision.h's table one by one, each failure named with the
 * value, what came out and what was expected. --flushed checks the
 * extension instead: mp_count_flushed on every pattern around each
 * format's flush threshold (half its smallest subnormal: 2^-25 for fp16,
 * 2^-134 for bf16; ties go to the even zero) and on the specials, against
 * the count that rule gives. Exit status 0 when all agree, 1 otherwise.
 * --threads N: OpenMP threads (default: all cores). */
#include <getopt.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "cli.h"
#include "mixed_precision.h"
#include "precision_rules.h"

PRECISION_SWEEP(sweep, mp_float_to_bf16, mp_float_to_fp16)

/* The first failure, repeated as the last line (what the grader shows) */
static char g_first[256];

static int fail(const char *line) {
    printf("check_precision: %s\n", line);
    if (!g_first[0]) snprintf(g_first, sizeof g_first, "%s", line);
    return 1;
}

/* one landmark: x through the student's conversion */
static int landmark(const char *what, uint16_t (*to)(float), float x, uint16_t want) {
    const uint16_t got = to(x);
    if (got == want) return 0;
    char line[200];
    snprintf(line, sizeof line, "%s: %a gave 0x%04x, expected 0x%04x", what, (double)x, got, want);
    return fail(line);
}

static int report(int bad, const char *good) {
    if (bad) printf("check_precision: FAILED: %s\n", g_first);
    else printf("check_precision: %s\n", good);
    return bad;
}

static const char *const g_usage =
    "usage: check_precision [--flushed] [--threads N]\n"
    "lab 11: mp_float_to_bf16 and mp_float_to_fp16 on all 2^32 fp32 bit patterns, against\n"
    "rules written another way (apps/precision_rules.h), then the table's landmarks;\n"
    "--flushed: the extension's mp_count_flushed around each format's flush threshold.\n";

/* The extension: the patterns [lo, hi) and their negatives, then +-0,
 * +-inf and a NaN, counted by the student; flushed are the nonzero ones
 * with |x| <= the threshold's pattern (a tie rounds to the even zero) */
static int check_flushed(const char *name, int format, uint32_t threshold, uint32_t lo,
                         uint32_t hi) {
    const size_t n = 2 * (size_t)(hi - lo) + 5;
    float *x = malloc(n * sizeof(float));
    CHECK(x, "out of memory");
    size_t want = 0, k = 0;
    for (uint32_t u = lo; u < hi; u++) {
        x[k++] = rules_from_bits(u);
        x[k++] = rules_from_bits(u | 0x80000000u);
        want += 2 * (u != 0 && u <= threshold);
    }
    x[k++] = 0.0f, x[k++] = -0.0f, x[k++] = INFINITY, x[k++] = -INFINITY, x[k++] = NAN;
    const size_t got = mp_count_flushed(x, n, format);
    free(x);
    if (got == want) return 0;
    char line[200];
    snprintf(line, sizeof line, "%s: mp_count_flushed counted %zu of the patterns 0x%08x..0x%08x, "
             "their negatives and the specials; %zu flush to zero", name, got, lo, hi - 1, want);
    return fail(line);
}

static int flushed_only(void) {
    int bad = check_flushed("fp16", PRECISION_FP16, 0x33000000u, 0x32F00000u, 0x33100000u);
    bad |= check_flushed("fp16, small values", PRECISION_FP16, 0x33000000u, 0, 0x10000u);
    bad |= check_flushed("bf16", PRECISION_BF16, 0x00008000u, 0, 0x20000u);
    return report(bad, "mp_count_flushed counts what fp16 and bf16 round to zero");
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    static const struct option opts[] = {{"threads", required_argument, 0, 't'},
                                         {"flushed", no_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int c, flushed = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 't') omp_set_num_threads((int)cli_int("--threads", optarg, 1, 1024));
        else if (c == 'f') flushed = 1;
        else if (c == 'h') return printf("%s", g_usage), 0;
        else cli_bad_option(argv[optind - 1], "see check_precision --help");
    }
    if (optind < argc) USER_ERROR("unexpected argument '%s'; see check_precision --help", argv[optind]);
    if (flushed) return flushed_only();
    const PrecisionSweep s = sweep();
    int bad = 0;
    char line[200];
    if (s.bad_bf16) {
        snprintf(line, sizeof line, "%ld fp32 values +-x round to the wrong bf16, e.g. 0x%08x -> "
                 "0x%04x", s.bad_bf16, s.first_bf16, mp_float_to_bf16(rules_from_bits(s.first_bf16)));
        bad = fail(line);
    }
    if (s.bad_fp16) {
        snprintf(line, sizeof line, "%ld fp32 values +-x round to the wrong fp16, e.g. 0x%08x -> "
                 "0x%04x", s.bad_fp16, s.first_fp16, mp_float_to_fp16(rules_from_bits(s.first_fp16)));
        bad = fail(line);
    }
    bad |= landmark("fp16's largest finite value", mp_float_to_fp16, 65504.0f, 0x7BFFu);
    bad |= landmark("65520, a tie, rounds to even: infinity", mp_float_to_fp16, 65520.0f, 0x7C00u);
    bad |= landmark("fp16's smallest subnormal", mp_float_to_fp16, 0x1p-24f, 0x0001u);
    bad |= landmark("2^-25, a tie between 0 and 2^-24: the even 0", mp_float_to_fp16, 0x1p-25f, 0);
    bad |= landmark("1 + 2^-8, a tie: the even 1", mp_float_to_bf16, 1.0f + 0x1p-8f, 0x3F80u);
    bad |= landmark("fp32's largest value: bf16's infinity", mp_float_to_bf16, 3.4028235e38f, 0x7F80u);
    return report(bad, "all 2^32 fp32 patterns round as the rules say, to bf16 and to fp16");
}
