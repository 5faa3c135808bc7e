/* Lab 07: Ulysses all-to-all attention. Read ulysses.h first, then
 * README.md. Tools: comm_alltoall(l->cp_group, send, recv, n, dtype)
 * (block j of n floats goes to rank j; dtype for activations and their
 * gradients: comm_act_dtype(l->cfg.precision), 2 bytes on the wire in
 * mixed precision), copy_strided (kernels.h) to pack a slice of columns
 * and unpack it, device_copy for whole rows, and attention on the rank's
 * heads as --attention runs it: gpt_attention_whole_forward / _backward
 * (model.h; lab 00's kernels, or lab 05's fused ones).
 *
 * Check your work: make check LAB=07 (Ulysses against the whole
 * sequence's attention), then make grade LAB=07 (train_cp --cp-algo
 * ulysses in the grader's cases);
 *   mpirun -np 2 ./build/labs/07_context_parallel/train_cp --cp 2 --cp-algo ulysses
 */
#include "ulysses.h"

#include "alloc.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"

/* SOLUTION ONLY BEGIN */
/* "my positions, all heads" -> "all positions, my heads": x (B,T,parts C)
 * holds `parts` tensors side by side (q, k, v: 3; an output: 1); block j of
 * send is this rank's rows of head slice j of each part, (B T, parts w),
 * and block i of recv, rank i's rows of ours, goes to positions
 * [i T, (i+1) T) of all (B,Tg,parts w) */
static void to_heads(const GPTLayout *l, float *all, const float *x, int parts, int B, int T,
                     float *send, float *recv) {
    const int P = l->cp, C = l->attn_width, w = C / P, Tg = P * T;
    const size_t block = (size_t)B * T * parts * w;
    for (int j = 0; j < P; j++)
        for (int p = 0; p < parts; p++)
            copy_strided(send + j * block + p * w, parts * w, x + p * C + j * w, parts * C,
                         B * T, w, 0);
    comm_alltoall(l->cp_group, send, recv, block, comm_act_dtype(l->cfg.precision));
    for (int i = 0; i < P; i++)
        for (int b = 0; b < B; b++)
            device_copy(all + ((size_t)b * Tg + (size_t)i * T) * parts * w,
                        recv + i * block + (size_t)b * T * parts * w,
                        (size_t)T * parts * w * sizeof(float));
}

/* and back: positions [i T, (i+1) T) of all (B,Tg,parts w) to rank i;
 * what rank j sends is head slice j of our rows, into x (B,T,parts C)
 * (added when accumulate) */
static void to_positions(const GPTLayout *l, float *x, const float *all, int parts, int B, int T,
                         float *send, float *recv, int accumulate) {
    const int P = l->cp, C = l->attn_width, w = C / P, Tg = P * T;
    const size_t block = (size_t)B * T * parts * w;
    for (int i = 0; i < P; i++)
        for (int b = 0; b < B; b++)
            device_copy(send + i * block + (size_t)b * T * parts * w,
                        all + ((size_t)b * Tg + (size_t)i * T) * parts * w,
                        (size_t)T * parts * w * sizeof(float));
    comm_alltoall(l->cp_group, send, recv, block, comm_act_dtype(l->cfg.precision));
    for (int j = 0; j < P; j++)
        for (int p = 0; p < parts; p++)
            copy_strided(x + p * C + j * w, parts * C, recv + j * block + p * w, parts * w,
                         B * T, w, accumulate);
}

/* SOLUTION ONLY END */
void ulysses_attention_forward(const GPTLayout *l, float *out, float *keep, const float *qkv,
                               int B, int T) {
    /* BEGIN SOLUTION */
    const int P = l->cp, C = l->attn_width, w = C / P, Tg = P * T, NH = l->n_head / P;
    const int fused = l->cfg.attention == ATTENTION_FUSED;
    const size_t n3 = (size_t)B * T * 3 * C;
    float *qkv_all = keep, *att = keep + (size_t)B * Tg * 3 * w;
    float *send = mem_alloc(MEM_COMM, n3 * sizeof(float));
    float *recv = mem_alloc(MEM_COMM, n3 * sizeof(float));
    /* fused attention's backward pass reads the output: kept, after att */
    float *out_all = fused ? att + gpt_attention_whole_keep_floats(l->cfg.attention, B, Tg, NH)
                           : mem_alloc(MEM_WORKSPACE, (size_t)B * Tg * w * sizeof(float));
    to_heads(l, qkv_all, qkv, 3, B, T, send, recv);
    gpt_attention_whole_forward(l->cfg.attention, out_all, att, qkv_all, B, Tg, w, NH);
    to_positions(l, out, out_all, 1, B, T, send, recv, 0);
    mem_free(send);
    mem_free(recv);
    if (!fused) mem_free(out_all);
    /* END SOLUTION */
}

void ulysses_attention_backward(const GPTLayout *l, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *out,
                                const float *keep, int B, int T) {
    /* BEGIN SOLUTION */
    (void)qkv;
    (void)out;
    const int P = l->cp, C = l->attn_width, w = C / P, Tg = P * T, NH = l->n_head / P;
    const size_t n3 = (size_t)B * T * 3 * C;
    const float *qkv_all = keep, *att = keep + (size_t)B * Tg * 3 * w;
    /* fused: the output the forward pass kept (materialized: not read) */
    const float *out_all = att + gpt_attention_whole_keep_floats(l->cfg.attention, B, Tg, NH);
    float *send = mem_alloc(MEM_COMM, n3 * sizeof(float));
    float *recv = mem_alloc(MEM_COMM, n3 * sizeof(float));
    float *dout_all = mem_alloc(MEM_WORKSPACE, (size_t)B * Tg * w * sizeof(float));
    float *dqkv_all = mem_alloc(MEM_WORKSPACE, (size_t)B * Tg * 3 * w * sizeof(float));
    to_heads(l, dout_all, dout, 1, B, T, send, recv);
    set_zero(dqkv_all, (size_t)B * Tg * 3 * w);
    gpt_attention_whole_backward(l->cfg.attention, dqkv_all, scratch, dout_all, qkv_all, out_all,
                                 att, B, Tg, w, NH);
    to_positions(l, dqkv, dqkv_all, 3, B, T, send, recv, 1);
    mem_free(send);
    mem_free(recv);
    mem_free(dout_all);
    mem_free(dqkv_all);
    /* END SOLUTION */
}
