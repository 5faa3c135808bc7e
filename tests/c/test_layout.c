/* The shard map (layout.h), for tensor-parallel degrees 1, 2, 3 and 4, and
 * expert-parallel degrees 2 and 4 of a mixture of experts:
 *   - a rank's tensors tile its flat buffer, units stay contiguous, and
 *     num_params is their sum;
 *   - the pieces of all TP (EP) ranks together cover every element of
 *     every split (expert-split) tensor exactly once, and each rank holds
 *     every replicated tensor whole; padding rows of the vocabulary belong
 *     to no piece;
 *   - each rank's init, copied to the standard layout through the map,
 *     is bit for bit the whole model's init (every layout starts from lab
 *     00's weights), also when made in pieces (a ZeRO shard of the rank);
 *   - degrees that do not divide the heads (the experts) are refused with
 *     a reason. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layout.h"
#include "unit.h"

/* rank r of the tp x ep ranks: TP rank r % tp, EP rank r / tp */
static GPTLayout layout_of(const GPTConfig *cfg, int tp, int ep, int r) {
    GPTLayout l = gpt_layout_make(cfg, tp, r % tp);
    if (ep > 1) gpt_layout_set_experts(&l, ep, r / tp);
    return l;
}

static void check_degree(const GPTConfig *cfg, int tp, int ep) {
    const size_t whole_n = gpt_num_params(cfg);
    const GPTLayout whole_layout = gpt_layout_whole(cfg);
    float *whole = malloc(whole_n * sizeof(float)), *assembled = malloc(whole_n * sizeof(float));
    unsigned char *covered = calloc(whole_n, 1);
    CHECK(whole && assembled && covered, "out of memory");
    gpt_init_params(&whole_layout, 11, 0, whole_n, whole);
    memset(assembled, 0xff, whole_n * sizeof(float));  /* NaN: an element never written shows */
    const int nt = gpt_num_tensors(&whole_layout);
    TensorInfo *t = malloc((size_t)nt * sizeof *t);
    CHECK(t, "out of memory");
    for (int r = 0; r < tp * ep; r++) {
        const GPTLayout l = layout_of(cfg, tp, ep, r);
        EXPECT(l.vocab_padded % tp == 0 && l.vocab_padded >= cfg->vocab_size &&
                   l.vocab_padded - cfg->vocab_size < tp,
               "tp %d: vocabulary %d padded to %d", tp, cfg->vocab_size, l.vocab_padded);
        gpt_tensor_table(&l, t);
        size_t next = 0;
        for (int i = 0; i < nt; i++) {
            EXPECT(t[i].offset == next, "tp %d rank %d: %s starts at %zu, not %zu", tp, r,
                   t[i].name, t[i].offset, next);
            next = t[i].offset + t[i].count;
            size_t in_pieces = 0;
            for (int k = 0; k < t[i].npieces; k++) {
                const ShardPiece *pc = &t[i].piece[k];
                in_pieces += (size_t)pc->rows * pc->cols;
                for (int row = 0; row < pc->rows; row++)
                    for (int col = 0; col < pc->cols; col++)
                        covered[t[i].global_offset + (size_t)(pc->row0 + row) * t[i].global_cols +
                                pc->col0 + col]++;
            }
            /* only wte may hold elements outside its pieces: vocabulary padding */
            size_t padding = i == 0 ? (size_t)(l.vocab_rows - l.vocab_real) * cfg->n_embd : 0;
            EXPECT(in_pieces + padding == t[i].count, "tp %d rank %d: %s: %zu in pieces, %zu "
                   "padding, %zu local", tp, r, t[i].name, in_pieces, padding, t[i].count);
            EXPECT((t[i].split || t[i].expert_split) ==
                           (tp * ep > 1 &&
                            t[i].count < (size_t)t[i].global_rows * t[i].global_cols + padding) &&
                       !(t[i].split && t[i].expert_split),
                   "tp %d ep %d: %s split flags %d %d", tp, ep, t[i].name, t[i].split,
                   t[i].expert_split);
        }
        EXPECT(next == l.num_params, "tp %d: tensors end at %zu, num_params %zu", tp, next,
               l.num_params);
        size_t unit_end = 0;
        for (int u = 0; u < gpt_num_units(&l); u++) {
            size_t offset, count;
            gpt_unit_range(&l, u, &offset, &count);
            EXPECT(offset == unit_end, "tp %d: unit %d starts at %zu, not %zu", tp, u, offset,
                   unit_end);
            unit_end = offset + count;
        }
        EXPECT(unit_end == l.num_params, "tp %d: units end at %zu", tp, unit_end);

        /* init in three pieces (as a ZeRO shard would), then to the standard layout */
        float *local = malloc(l.num_params * sizeof(float));
        CHECK(local, "out of memory");
        size_t cut1 = l.num_params / 3, cut2 = 2 * l.num_params / 3 + 1;
        gpt_init_params(&l, 11, 0, cut1, local);
        gpt_init_params(&l, 11, cut1, cut2 - cut1, local + cut1);
        gpt_init_params(&l, 11, cut2, l.num_params - cut2, local + cut2);
        for (size_t e = (size_t)l.vocab_rows * cfg->n_embd; e-- > 0;)
            if (l.vocab_first + (int)(e / cfg->n_embd) >= cfg->vocab_size)
                EXPECT(local[e] == 0.0f, "tp %d rank %d: padding element %zu is %g", tp, r, e,
                       local[e]);
        /* every rank's own tensors: the replicated ones are alike */
        gpt_layout_to_standard(&l, local, assembled);
        free(local);
    }
    int real = 0;
    for (int r = 0; r < tp; r++) real += gpt_layout_make(cfg, tp, r).vocab_real;
    EXPECT(real == cfg->vocab_size, "tp %d: the ranks hold %d real vocabulary rows, not %d", tp,
           real, cfg->vocab_size);
    size_t wrong = 0, uncovered = 0;
    const GPTLayout l0 = layout_of(cfg, tp, ep, 0);
    gpt_tensor_table(&l0, t);
    for (int i = 0; i < nt; i++)
        for (size_t e = t[i].global_offset;
             e < t[i].global_offset + (size_t)t[i].global_rows * t[i].global_cols; e++) {
            size_t want = t[i].split || t[i].expert_split ? 1 : (size_t)tp * ep;
            if (covered[e] != want) uncovered++;
        }
    for (size_t e = 0; e < whole_n; e++)
        if (memcmp(&assembled[e], &whole[e], sizeof(float)) != 0) wrong++;
    EXPECT(uncovered == 0, "tp %d: %zu global elements covered the wrong number of times", tp,
           uncovered);
    EXPECT(wrong == 0, "tp %d: %zu of %zu elements differ from the whole model's init", tp, wrong,
           whole_n);
    free(t);
    free(whole);
    free(assembled);
    free(covered);
}

int main(void) {
    GPTConfig tiny;
    CHECK(gpt_config_by_name("tiny", &tiny) == 0, "tiny config missing");
    for (int tp = 1; tp <= 4; tp *= 2) check_degree(&tiny, tp, 1);
    /* a vocabulary that no degree divides: padded, and rank 3 of 4 holds one real row */
    GPTConfig odd = {.vocab_size = 13, .ctx_len = 8, .n_layer = 2, .n_head = 12, .n_embd = 24};
    for (int tp = 2; tp <= 4; tp++) check_degree(&odd, tp, 1);
    /* experts: 4 of them over 2 and 4 ranks */
    GPTConfig moe;
    CHECK(gpt_config_by_name("tiny-moe", &moe) == 0, "tiny-moe config missing");
    for (int ep = 1; ep <= 4; ep *= 2) check_degree(&moe, 1, ep);
    EXPECT(gpt_expert_problem(&moe, 3) != NULL, "ep 3 splits tiny-moe's 4 experts");
    EXPECT(gpt_expert_problem(&tiny, 2) != NULL, "ep 2 splits tiny's experts, of which it has none");
    EXPECT(gpt_expert_problem(&moe, 4) == NULL, "ep 4 should split tiny-moe");
    EXPECT(gpt_layout_problem(&tiny, 3) != NULL, "tp 3 splits tiny's 4 heads");
    EXPECT(gpt_layout_problem(&tiny, 2) == NULL, "tp 2 should split tiny");
    const GPTLayout whole = gpt_layout_whole(&tiny);
    EXPECT(whole.num_params == gpt_num_params(&tiny), "tp 1 holds %zu, the model has %zu",
           whole.num_params, gpt_num_params(&tiny));
    return unit_report("test_layout");
}
