/* The allocator's accounting: current and peak logical bytes per category. */
#include "alloc.h"
#include "unit.h"

int main(void) {
    void *a = mem_alloc(MEM_PARAMS, 1000);
    void *b = mem_alloc(MEM_PARAMS, 24);
    void *c = mem_alloc(MEM_WORKSPACE, 7);
    EXPECT(mem_current_bytes(MEM_PARAMS) == 1024, "%zu", mem_current_bytes(MEM_PARAMS));
    EXPECT(mem_current_bytes(MEM_WORKSPACE) == 7, "%zu", mem_current_bytes(MEM_WORKSPACE));
    EXPECT(((unsigned long)a % 64) == 0 && ((unsigned long)b % 64) == 0, "alignment");
    EXPECT(((unsigned char *)c)[6] == 0, "not zeroed");
    mem_free(a);
    EXPECT(mem_current_bytes(MEM_PARAMS) == 24, "%zu", mem_current_bytes(MEM_PARAMS));
    EXPECT(mem_peak_bytes(MEM_PARAMS) == 1024, "%zu", mem_peak_bytes(MEM_PARAMS));
    void *d = mem_alloc(MEM_PARAMS, 500);  /* below the old peak */
    EXPECT(mem_peak_bytes(MEM_PARAMS) == 1024, "%zu", mem_peak_bytes(MEM_PARAMS));
    mem_reset_peaks();
    EXPECT(mem_peak_bytes(MEM_PARAMS) == 524, "%zu", mem_peak_bytes(MEM_PARAMS));
    mem_free(b);
    mem_free(c);
    mem_free(d);
    mem_free(NULL);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        EXPECT(mem_current_bytes(k) == 0, "%s still holds %zu", mem_category_name(k),
               mem_current_bytes(k));
    EXPECT(mem_peak_bytes(MEM_GRADS) == 0, "untouched category has a peak");
    return unit_report("test_alloc");
}
