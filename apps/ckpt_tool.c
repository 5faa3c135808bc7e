/* ckpt: look into a checkpoint (checkpoint.h) without training.
 *   ckpt inspect PATH        the index, then every rank file's rectangles
 *                            by tensor and kind, their sizes and checksums
 *   ckpt verify PATH         every check --resume makes before any work;
 *                            exit 0 when it would load, 2 otherwise
 *   ckpt convert PATH OUT    the whole model in the standard layout: OUT
 *                            the parameters (raw float32, as --dump-params
 *                            writes them), OUT.adam_m and OUT.adam_v
 * PATH is a checkpoint directory, or a directory of them (its newest). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "checkpoint.h"
#include "checkpoints.h"
#include "fileio.h"

static const char *const g_usage =
    "usage: ckpt inspect PATH | ckpt verify PATH | ckpt convert PATH OUT\n"
    "  PATH: a checkpoint (DIR/step-NNNNNN), or a directory of them (its newest)\n";

static void open_index(const char *path, char *dir, size_t n, CkptIndex *ix) {
    char why[1400];
    if (ckpt_resolve(path, dir, n, why, sizeof why) || ckpt_index_read(dir, ix, why, sizeof why))
        USER_ERROR("%s", why);
}

static void inspect(const char *path) {
    char dir[1100], why[1400];
    CkptIndex ix;
    open_index(path, dir, sizeof dir, &ix);
    const GPTConfig *c = &ix.cfg;
    printf("%s: version %d, %d steps done, seed %llu\n", dir, ix.version, ix.step, ix.seed);
    printf("model: vocab %d, ctx %d, %d layers, %d heads, %d channels, %d experts (top-%d), "
           "%zu parameters\n", c->vocab_size, c->ctx_len, c->n_layer, c->n_head, c->n_embd,
           c->n_experts, c->top_k, gpt_num_params(c));
    printf("saved by: %s\n", ix.saved_by);
    printf("lineage:");  /* the runs that led here, the first (fresh) one first */
    for (int i = 0; i < ix.lineage.n; i++)
        printf("%s run %016llx from step %d", i ? " ->" : "", ix.lineage.run[i],
               ix.lineage.from[i]);
    printf("%s\n", ix.lineage.n ? "" : " none (an older kit's checkpoint)");
    const GPTLayout whole = gpt_layout_whole(c);
    const int nt = gpt_num_tensors(&whole);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CHECK(t, "out of memory");
    gpt_tensor_table(&whole, t);
    size_t total[CKPT_KINDS] = {0};
    for (int i = 0; i < ix.nfiles; i++) {
        CkptRects r = {0};
        if (ckpt_file_check(dir, &ix.files[i], why, sizeof why) ||
            ckpt_file_rects(dir, &ix.files[i], &r, why, sizeof why))
            USER_ERROR("%s", why);
        printf("%s: %llu bytes, checksum %016llx ok, %zu rectangles\n", ix.files[i].name,
               (unsigned long long)ix.files[i].bytes, (unsigned long long)ix.files[i].checksum,
               r.n);
        for (size_t j = 0; j < r.n; j++) {
            const CkptRect *x = &r.r[j];
            CHECK(x->tensor >= 0 && x->tensor < nt, "%s: tensor %d out of range",
                  ix.files[i].name, x->tensor);
            printf("  %-7s %-22s rows %6d..%-6d cols %5d..%-5d %10zu floats\n",
                   ckpt_kind_name(x->kind), t[x->tensor].name, x->row0, x->row0 + x->rows,
                   x->col0, x->col0 + x->cols, (size_t)x->rows * x->cols);
            total[x->kind] += (size_t)x->rows * x->cols;
        }
        ckpt_rects_free(&r);
    }
    for (int k = 0; k < CKPT_KINDS; k++)
        printf("%s: %zu of %zu floats saved%s\n", ckpt_kind_name(k), total[k], gpt_num_params(c),
               total[k] == gpt_num_params(c) ? "" : "  INCOMPLETE");
    free(t);
    ckpt_index_free(&ix);
}

/* verify (out NULL), or convert into out: every check --resume makes, then
 * each kind loaded whole into the standard layout by the program's
 * checkpoint ops (every element present once, or one error), and written
 * to out's files */
static void load_whole(const char *path, const char *out) {
    const CkptOps *ops = program_checkpoints();
    if (!ops)
        USER_ERROR("%s: this build has no checkpoints: %s", out ? "convert" : "verify",
                   PROGRAM_NO_CHECKPOINTS);
    char dir[1100], why[1400], name[1200];
    CkptIndex ix;
    open_index(path, dir, sizeof dir, &ix);
    int step;
    if (ckpt_verify(dir, &ix.cfg, ix.seed, &step, why, sizeof why)) USER_ERROR("%s", why);
    const size_t n = gpt_num_params(&ix.cfg);
    float *all = malloc(n * sizeof(float));
    CHECK(all, "out of memory");
    for (int k = 0; k < CKPT_KINDS; k++) {
        if (k == CKPT_PARAMS) snprintf(name, sizeof name, "%s", out ? out : "");
        else snprintf(name, sizeof name, "%s.%s", out ? out : "", ckpt_kind_name(k));
        if (out && output_file_problem(name, why, sizeof why)) USER_ERROR("%s", why);
        ckpt_load_standard(ops, dir, &ix.cfg, k, all);
        if (!out) continue;
        AtomicFile af;
        FILE *f = atomic_open(&af, name);
        IO_CHECK(fwrite(all, sizeof(float), n, f) == n, "writing %s", name);
        atomic_commit(&af);
        printf("wrote %s (%s, %zu floats)\n", name, ckpt_kind_name(k), n);
    }
    free(all);
    if (!out)
        printf("%s: ok (%d steps done, %d files, every parameter and moment present once)\n", dir,
               step, ix.nfiles);
    ckpt_index_free(&ix);
}

int main(int argc, char **argv) {
    program_set_name(argv[0]);
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("%s", g_usage);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "inspect")) inspect(argv[2]);
    else if (argc == 3 && !strcmp(argv[1], "verify")) load_whole(argv[2], NULL);
    else if (argc == 4 && !strcmp(argv[1], "convert")) load_whole(argv[2], argv[3]);
    else USER_ERROR("%s", "expected inspect PATH, verify PATH or convert PATH OUT (--help)");
    return 0;
}
