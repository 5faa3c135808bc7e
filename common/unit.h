/* unit.h: the smallest test harness: EXPECT records a failure with its
 * location and goes on; unit_report prints the count and gives the exit
 * status. */
#ifndef UNIT_H
#define UNIT_H

#include <stdio.h>

static int g_unit_failures, g_unit_checks;

#define EXPECT(cond, ...)                                                  \
    do {                                                                   \
        g_unit_checks++;                                                   \
        if (!(cond)) {                                                     \
            g_unit_failures++;                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);         \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
        }                                                                  \
    } while (0)

static inline int unit_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, g_unit_checks, g_unit_failures);
    return g_unit_failures ? 1 : 0;
}

#endif
