/* Lab 05: activation memory. Read activation_memory.h first, then
 * README.md. You write the sequence-parallel collectives and layers, with
 * the kernels of common/kernels.h and the collectives of common/comm.h:
 *   comm_allgather(l->tp_group, send, recv, n, dtype)
 *   comm_reduce_scatter(l->tp_group, send, recv, n, dtype, COMM_SUM)
 *   comm_allreduce(l->tp_group, send, recv, n, dtype, COMM_SUM)
 * (n is the whole buffer; rank r's part is elements [r n/p, (r+1) n/p);
 * dtype: activations as comm_act_dtype(l->cfg.precision), 2 bytes on the
 * wire in mixed precision as in lab 04; the layernorms' gradients as
 * COMM_FLOAT, fp32 units in mixed precision, widened.h), and the two
 * recomputations. Lab 04's layers are the model you start from:
 * solutions/04_tensor_parallel/tensor_parallel.c, once released, or yours.
 * The fused-attention extension computes on the host: sgemm_rowmajor_cpu
 * (kernels_backend.h) on strided tiles, exp_nonpositive, row_max and
 * row_sum (math_shared.h) on their rows.
 *
 * Check your work: make check LAB=05 (check_act: the layernorm sum on a
 * pipeline's stages), then make grade LAB=05 runs your train_tp --sp and
 * --recompute in the grader's cases against the references;
 *   mpirun -np 2 ./build/labs/05_activation_memory/train_tp --tp 2 --sp --steps 20
 */
#include "activation_memory.h"

#include <math.h>

#include "check.h"
#include "comm.h"
#include "kernels.h"
#include "kernels_backend.h"
#include "math_shared.h"

/* SOLUTION ONLY BEGIN */
/* The first of this rank's R = N/tp rows. */
static size_t my_first_row(const GPTLayout *l, int N) {
    return (size_t)l->tp_rank * (size_t)(N / l->tp);
}
/* SOLUTION ONLY END */

void seq_all_gather(const GPTLayout *l, const float *mine, float *full, int N, int C) {
    /* BEGIN SOLUTION */
    comm_allgather(l->tp_group, mine, full, (size_t)N * C, comm_act_dtype(l->cfg.precision));
    /* END SOLUTION */
}

void seq_reduce_scatter(const GPTLayout *l, const float *full, float *mine, int N, int C) {
    /* BEGIN SOLUTION */
    comm_reduce_scatter(l->tp_group, full, mine, (size_t)N * C, comm_act_dtype(l->cfg.precision),
                        COMM_SUM);
    /* END SOLUTION */
}

/* Lab 04's column layer with the all-gather in f's place: the input rows
 * must be whole before the GEMM, and dX = sum over ranks of dY_r A_r is
 * wanted on each rank's rows only, a reduce-scatter (the gather's conjugate). */
void sp_column_parallel_forward(const GPTLayout *l, float *out, float *inp, const float *w,
                                const float *b, int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    seq_all_gather(l, inp + my_first_row(l, N) * IC, inp, N, IC);
    matmul_forward(out, inp, w, b, N, IC, OC);
    /* END SOLUTION */
}

void sp_column_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                                 const float *dout, const float *inp, const float *w, float *full,
                                 int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    set_zero(full, (size_t)N * IC);
    matmul_backward(full, dw, db, dout, inp, w, N, IC, OC);
    seq_reduce_scatter(l, full, dinp, N, IC);
    /* END SOLUTION */
}

/* Lab 04's row layer with a reduce-scatter in g's place: each rank keeps
 * its rows of the sum, and adds the bias to them (once per row, as before).
 * Backward: the GEMMs need dZ on every row, an all-gather. */
void sp_row_parallel_forward(const GPTLayout *l, float *out, const float *inp, const float *w,
                             const float *b, float *full, int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    matmul_forward(full, inp, w, NULL, N, IC, OC);
    seq_reduce_scatter(l, full, out, N, OC);
    if (b) bias_forward(out, b, N / l->tp, OC);
    /* END SOLUTION */
}

void sp_row_parallel_backward(const GPTLayout *l, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, float *full,
                              int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    seq_all_gather(l, dout, full, N, OC);
    matmul_backward(dinp, dw, db, full, inp, w, N, IC, OC);
    /* END SOLUTION */
}

/* Every rank looks up the rows of the vocabulary it holds for every token
 * (zeros for the others); the reduce-scatter sums them and leaves each rank
 * its rows, to which it adds their positions. Backward: every rank needs
 * every row's gradient for its vocabulary rows: an all-gather. */
void sp_vocab_embedding_forward(const GPTLayout *l, float *out, const int *tokens,
                                const float *wte, const float *wpe, float *full, int B, int T) {
    /* BEGIN SOLUTION */
    const int C = l->cfg.n_embd, N = B * T;
    vocab_embedding_forward(full, tokens, wte, l->vocab_first, l->vocab_rows, N, C);
    seq_reduce_scatter(l, full, out, N, C);
    position_forward(out, wpe, (int)my_first_row(l, N), N / l->tp, T, C);
    /* END SOLUTION */
}

void sp_vocab_embedding_backward(const GPTLayout *l, float *dwte, float *dwpe, const float *dout,
                                 const int *tokens, float *full, int B, int T) {
    /* BEGIN SOLUTION */
    const int C = l->cfg.n_embd, N = B * T;
    seq_all_gather(l, dout, full, N, C);
    position_backward(dwpe, full, B, T, C);
    vocab_embedding_backward(dwte, full, tokens, l->vocab_first, l->vocab_rows, N, C);
    /* END SOLUTION */
}

/* The extension: the all-gather happens again in the backward pass, into
 * scratch, instead of its result living from the forward pass to the
 * backward pass. */
void sp_column_parallel_forward_regather(const GPTLayout *l, float *out, const float *inp,
                                         const float *w, const float *b, float *full, int N,
                                         int IC, int OC) {
    /* BEGIN SOLUTION */
    seq_all_gather(l, inp, full, N, IC);
    matmul_forward(out, full, w, b, N, IC, OC);
    /* END SOLUTION */
}

void sp_column_parallel_backward_regather(const GPTLayout *l, float *dinp, float *dw, float *db,
                                          const float *dout, const float *inp, const float *w,
                                          float *full, float *full2, int N, int IC, int OC) {
    /* BEGIN SOLUTION */
    seq_all_gather(l, inp, full, N, IC);
    sp_column_parallel_backward(l, dinp, dw, db, dout, full, w, full2, N, IC, OC);
    /* END SOLUTION */
}

void sp_sum_layernorm_grads(const GPTLayout *l, const GPTParams *g) {
    /* BEGIN SOLUTION */
    const size_t C = (size_t)l->cfg.n_embd;
    for (int i = 0; i < l->cfg.n_layer; i++) {
        const BlockParams *b = &g->blocks[i];
        if (!b->ln1w) continue;  /* another pipeline stage's block */
        float *ln[4] = {b->ln1w, b->ln1b, b->ln2w, b->ln2b};
        for (int k = 0; k < 4; k++) comm_allreduce(l->tp_group, ln[k], ln[k], C, COMM_FLOAT, COMM_SUM);
    }
    if (g->lnfw) {  /* the last stage's */
        comm_allreduce(l->tp_group, g->lnfw, g->lnfw, C, COMM_FLOAT, COMM_SUM);
        comm_allreduce(l->tp_group, g->lnfb, g->lnfb, C, COMM_FLOAT, COMM_SUM);
    }
    /* END SOLUTION */
}

void recompute_block_forward(const GPTLayout *l, const BlockParams *p, BlockActs *a,
                             const float *x, int B, int T) {
    /* BEGIN SOLUTION */
    block_forward(l, p, a, x, B, T);
    /* END SOLUTION */
}

void recompute_attention_probs(const GPTLayout *l, BlockActs *a, int B, int T) {
    /* BEGIN SOLUTION */
    attention_probs_forward(a->att, a->qkv, B, T, l->attn_width, l->n_head);
    /* END SOLUTION */
}

void attention_fused_forward_cpu(float *out, float *lse, const float *qkv, int B, int T, int C,
                                 int NH) {
    /* BEGIN SOLUTION */
    /* A job is one head's tile of QT query rows I = [i0, i0 + m); its key
     * tiles J = [j0, j0 + n) of up to KT rows run from 0 to its last query
     * (causal: no later key counts), and a row sees the keys j <= i0 + i of
     * them. The output rows of I are the running sum of e^(s - m) v,
     * divided by s at the end. */
    enum { QT = 128, KT = 256 };
    const int hs = C / NH, rs = 3 * C, tiles = (T + QT - 1) / QT;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(dynamic)
    for (int job = 0; job < B * NH * tiles; job++) {
        const int bh = job / tiles, b = bh / NH, h = bh % NH, i0 = job % tiles * QT;
        const int m = T - i0 < QT ? T - i0 : QT;
        const float *q = qkv + ((size_t)b * T + i0) * rs + h * hs;
        const float *k = qkv + (size_t)b * T * rs + C + h * hs, *v = k + C;
        float *y = out + ((size_t)b * T + i0) * C + h * hs;
        float S[QT * KT], run_max[QT], run_sum[QT];
        for (int j0 = 0; j0 < i0 + m; j0 += KT) {
            const int n = i0 + m - j0 < KT ? i0 + m - j0 : KT;
            sgemm_rowmajor_cpu(0, 1, m, n, hs, scale, q, rs, k + (size_t)j0 * rs, rs, 0.0f, S,
                               KT);
            for (int i = 0; i < m; i++) {
                float *s = S + i * KT, *yi = y + (size_t)i * C;
                int seen = i0 + i - j0 + 1;  /* keys j <= i0 + i: at least 1 in the first */
                seen = seen < 0 ? 0 : seen > n ? n : seen;
                /* row_max, row_sum: vector-wide (math_shared.h) */
                float mx = j0 == 0 ? s[0] : run_max[i];
                if (seen > 0) mx = fmaxf(mx, row_max(s, seen));
                for (int j = 0; j < seen; j++) s[j] = exp_nonpositive(s[j] - mx);
                for (int j = seen; j < n; j++) s[j] = 0.0f;
                const float sum = row_sum(s, seen);
                /* the earlier tiles' sum and output, from their max to this one */
                const float rescale = j0 == 0 ? 0.0f : exp_nonpositive(run_max[i] - mx);
                run_sum[i] = (j0 == 0 ? 0.0f : run_sum[i] * rescale) + sum;
                run_max[i] = mx;
                for (int d = 0; d < hs; d++) yi[d] = j0 == 0 ? 0.0f : yi[d] * rescale;
            }
            /* y_I += P_IJ v_J */
            sgemm_rowmajor_cpu(0, 0, m, hs, n, 1.0f, S, KT, v + (size_t)j0 * rs, rs, 1.0f, y, C);
        }
        for (int i = 0; i < m; i++) {
            const float inv = 1.0f / run_sum[i];
            for (int d = 0; d < hs; d++) y[(size_t)i * C + d] *= inv;
            lse[(size_t)bh * T + i0 + i] = run_max[i] + logf(run_sum[i]);
        }
    }
    /* END SOLUTION */
}
