/* Lab 07: ring attention. Read ring_attention.h first, then README.md.
 * The kernels (common/kernels.h) do the arithmetic of one block:
 *   attention_block_forward(out_b, lse_b, qkv, kv, B, T, C, NH, q0, k0, n, causal)
 *   attention_merge(out, lse, out_b, lse_b, B, T, C, NH, q0, n)
 *   attention_row_dot(D, dout, out, B, T, C, NH)
 *   attention_block_backward(dqkv, dkv, dout, qkv, kv, lse, D, B, T, C, NH, q0, k0, n, causal)
 * with kv (B,T,2C) = [k | v] packed (copy_strided), and the ring's
 * transfers are comm.h's comm_isend / comm_irecv on l->cp_group, posted
 * between comm_batch_begin and comm_batch_end. K and V travel as
 * comm_act_dtype(l->cfg.precision) (2 bytes in mixed precision, as the
 * activations they are); the partial sums of dK and dV as COMM_FLOAT,
 * accumulated in fp32 over the ring as fused ring kernels keep them, so
 * cp - 1 roundings do not pile up. Which blocks to compute,
 * under which mask (kernels.h ATTN_FULL, ATTN_CAUSAL, ATTN_CAUSAL_STRICT),
 * is ring_block_mask's: the rest of the ring does not depend on the
 * placement.
 *
 * Check your work: make check LAB=07 (check_ring_attention: each placement
 * against the whole sequence's attention and finite differences, on 2, 3
 * and 4 ranks), then make grade LAB=07 runs your train_cp in the grader's
 * cases;
 *   mpirun -np 2 ./build/labs/07_context_parallel/train_cp --cp 2 --cp-algo zigzag
 */
#include "ring_attention.h"

#include <math.h>

#include "alloc.h"
#include "comm.h"
#include "kernels.h"

enum { TAG_KV = 7001, TAG_DKV = 7002 };

/* SOLUTION ONLY BEGIN */
/* Runs of consecutive positions per rank: 2 chunks under zigzag, else 1
 * (a chunk, or under striping all of the rank's positions) */
static int local_chunks(const GPTLayout *l) { return l->cp_algo == CP_ZIGZAG ? 2 : 1; }

/* Post this rank's part of one step of a ring: send `send` to the next
 * rank, receive the previous rank's into `recv` (n floats each, as dtype) */
static void ring_pass(const GPTLayout *l, const float *send, float *recv, size_t n,
                      CommDtype dtype, int tag, CommRequest req[2]) {
    const int P = l->cp, r = l->cp_rank;
    comm_batch_begin();
    comm_isend(l->cp_group, send, n, dtype, (r + 1) % P, tag, &req[0]);
    comm_irecv(l->cp_group, recv, n, dtype, (r + P - 1) % P, tag, &req[1]);
    comm_batch_end();
}

static void swap(float **a, float **b) {
    float *t = *a;
    *a = *b;
    *b = t;
}

/* kv (B,T,2C) = the k and v columns of qkv (B,T,3C), adjacent there */
static float *pack_kv(const GPTLayout *l, const float *qkv, int B, int T) {
    const int C = l->attn_width;
    float *kv = mem_alloc(MEM_COMM, (size_t)B * T * 2 * C * sizeof(float));
    copy_strided(kv, 2 * C, qkv + C, 3 * C, B * T, 2 * C, 0);
    return kv;
}

/* SOLUTION ONLY END */
int ring_global_chunk(const GPTLayout *l, int rank, int j) {
    /* BEGIN SOLUTION */
    return l->cp_algo == CP_ZIGZAG && j == 1 ? 2 * l->cp - 1 - rank : rank;
    /* END SOLUTION */
}

int ring_block_mask(const GPTLayout *l, int rank, int i, int src, int j) {
    /* BEGIN SOLUTION */
    if (l->cp_algo == CP_STRIPED) return ring_striped_mask(l, rank, src);
    const int qc = ring_global_chunk(l, rank, i), kc = ring_global_chunk(l, src, j);
    return kc > qc ? RING_SKIP : kc == qc ? ATTN_CAUSAL : ATTN_FULL;
    /* END SOLUTION */
}

/* Striped: query t of rank r is position t cp + r, key t' of rank src
 * position t' cp + src. */
int ring_striped_mask(const GPTLayout *l, int rank, int src) {
    /* BEGIN SOLUTION */
    /* visible when t' cp + src <= t cp + r: t' <= t if src <= r, else t' < t */
    (void)l;
    return src <= rank ? ATTN_CAUSAL : ATTN_CAUSAL_STRICT;
    /* END SOLUTION */
}

void ring_attention_forward(const GPTLayout *l, float *out, float *lse, const float *qkv, int B,
                            int T) {
    /* BEGIN SOLUTION */
    const int P = l->cp, r = l->cp_rank, C = l->attn_width, NH = l->n_head;
    const int nc = local_chunks(l), c = T / nc;
    const size_t kv_n = (size_t)B * T * 2 * C;
    float *kv = pack_kv(l, qkv, B, T);
    float *kv_next = mem_alloc(MEM_COMM, kv_n * sizeof(float));
    float *out_b = mem_alloc(MEM_WORKSPACE, (size_t)B * T * C * sizeof(float));
    float *lse_b = mem_alloc(MEM_WORKSPACE, (size_t)B * NH * T * sizeof(float));
    set_zero(out, (size_t)B * T * C);
    fill_value(lse, -INFINITY, (size_t)B * NH * T);
    for (int s = 0; s < P; s++) {
        const int src = (r + P - s) % P;  /* kv holds rank src's keys and values */
        CommRequest req[2];
        if (s + 1 < P)
            ring_pass(l, kv, kv_next, kv_n, comm_act_dtype(l->cfg.precision), TAG_KV, req);
        for (int i = 0; i < nc; i++)
            for (int j = 0; j < nc; j++) {
                const int mask = ring_block_mask(l, r, i, src, j);
                if (mask == RING_SKIP) continue;
                attention_block_forward(out_b, lse_b, qkv, kv, B, T, C, NH, i * c, j * c, c,
                                        mask);
                attention_merge(out, lse, out_b, lse_b, B, T, C, NH, i * c, c);
            }
        if (s + 1 < P) {
            comm_waitall(req, 2);
            swap(&kv, &kv_next);
        }
    }
    mem_free(kv);
    mem_free(kv_next);
    mem_free(out_b);
    mem_free(lse_b);
    /* END SOLUTION */
}

void ring_attention_backward(const GPTLayout *l, float *dqkv, float *scratch, const float *dout,
                             const float *qkv, const float *out, const float *lse, int B, int T) {
    /* BEGIN SOLUTION */
    (void)scratch;
    const int P = l->cp, r = l->cp_rank, C = l->attn_width, NH = l->n_head;
    const int nc = local_chunks(l), c = T / nc;
    const size_t kv_n = (size_t)B * T * 2 * C;
    float *D = mem_alloc(MEM_WORKSPACE, (size_t)B * NH * T * sizeof(float));
    attention_row_dot(D, dout, out, B, T, C, NH);
    float *kv = pack_kv(l, qkv, B, T);
    float *kv_next = mem_alloc(MEM_COMM, kv_n * sizeof(float));
    /* dkv: this step's block's gradient, then with what earlier ranks added;
     * dkv_out: the previous step's, on its way to the next rank; dkv_in: the
     * next block's sum so far, on its way from the previous rank */
    float *dkv = mem_alloc(MEM_COMM, kv_n * sizeof(float));
    float *dkv_out = mem_alloc(MEM_COMM, kv_n * sizeof(float));
    float *dkv_in = mem_alloc(MEM_COMM, kv_n * sizeof(float));
    CommRequest dreq[2];
    for (int s = 0; s < P; s++) {
        const int src = (r + P - s) % P;
        CommRequest req[2];
        if (s + 1 < P)
            ring_pass(l, kv, kv_next, kv_n, comm_act_dtype(l->cfg.precision), TAG_KV, req);
        set_zero(dkv, kv_n);
        for (int i = 0; i < nc; i++)
            for (int j = 0; j < nc; j++) {
                const int mask = ring_block_mask(l, r, i, src, j);
                if (mask == RING_SKIP) continue;
                attention_block_backward(dqkv, dkv, dout, qkv, kv, lse, D, B, T, C, NH, i * c,
                                         j * c, c, mask);
            }
        if (s > 0) {  /* block src's sum over the ranks before, and our part passed on */
            comm_waitall(dreq, 2);
            add_inplace(dkv, dkv_in, kv_n);
        }
        swap(&dkv, &dkv_out);
        ring_pass(l, dkv_out, dkv_in, kv_n, COMM_FLOAT, TAG_DKV, dreq);
        if (s + 1 < P) {
            comm_waitall(req, 2);
            swap(&kv, &kv_next);
        }
    }
    /* after cp passes, what arrived is this rank's own block, complete */
    comm_waitall(dreq, 2);
    copy_strided(dqkv + C, 3 * C, dkv_in, 2 * C, B * T, 2 * C, 1);
    mem_free(D);
    mem_free(kv);
    mem_free(kv_next);
    mem_free(dkv);
    mem_free(dkv_out);
    mem_free(dkv_in);
    /* END SOLUTION */
}

float context_parallel_loss_mean(const GPTLayout *l, float loss) {
    /* BEGIN SOLUTION */
    comm_allreduce(l->cp_group, &loss, &loss, 1, COMM_FLOAT, COMM_SUM);
    return loss / l->cp;
    /* END SOLUTION */
}
