/* Lab 08: expert parallelism (expert_parallel.h). */
#include "expert_parallel.h"

#include "check.h"
#include "comm.h"
#include "device.h"
#include "kernels.h"

/* SOLUTION ONLY BEGIN */
/* The all-to-all-v's tables, in floats, for rows of C floats seen from
 * the dispatch (xd -> xr): rank j gets xd's block of its experts, rows
 * offsets[j El] .. offsets[(j+1) El] (xd is ordered by expert); block s of
 * xr comes from rank s, peer_counts[s El ..] rows, one block after the
 * other. The return (xr's rows -> xd's) is the same tables swapped.
 * Returns the rows received. */
static size_t row_tables(const GPTLayout *l, const MoEActs *a, size_t C, size_t *send_counts,
                         size_t *send_offsets, size_t *recv_counts, size_t *recv_offsets) {
    const int El = gpt_local_experts(l);
    const int *offsets = a->route.offsets;
    size_t received = 0;
    for (int j = 0; j < l->ep; j++) {
        send_counts[j] = (size_t)(offsets[(j + 1) * El] - offsets[j * El]) * C;
        send_offsets[j] = (size_t)offsets[j * El] * C;
        size_t rows = 0;
        for (int e = 0; e < El; e++) rows += (size_t)a->peer_counts[j * El + e];
        recv_counts[j] = rows * C;
        recv_offsets[j] = received * C;
        received += rows;
    }
    CHECK(received <= (size_t)a->shape.R_max, "expert parallelism: %zu rows received, more than "
          "the %d the buffers hold", received, a->shape.R_max);
    return received;
}

/* SOLUTION ONLY END */

void ep_moe_forward(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p, const float *x) {
    /* BEGIN SOLUTION */
    const int ep = l->ep, El = gpt_local_experts(l);
    const size_t C = (size_t)a->shape.C;
    const CommDtype dtype = comm_act_dtype(l->cfg.precision);  /* the rows' */
    moe_route(a, x, p->wr);
    moe_dispatch(a->xd, a, x);
    /* counts[j El ..] (this rank's rows for rank j's experts) to rank j */
    comm_alltoall(l->ep_group, a->route.counts, a->peer_counts, (size_t)El, COMM_INT32);
    size_t sc[ep], so[ep], rc[ep], ro[ep];
    row_tables(l, a, C, sc, so, rc, ro);
    comm_alltoallv(l->ep_group, a->xd, sc, so, a->xr, rc, ro, dtype);
    /* each source's block through the local experts (p's expert 0 is
     * global expert ep_rank El); h and act have 4C floats per row */
    for (int s = 0; s < ep; s++)
        moe_experts_forward(a->eor + ro[s], a->h + 4 * ro[s], a->act + 4 * ro[s], a->xr + ro[s],
                            a->peer_counts + s * El, El, p, (int)C);
    /* back to their sources, arriving in xd's order */
    comm_alltoallv(l->ep_group, a->eor, rc, ro, a->eo, sc, so, dtype);
    moe_combine(y, a, a->eo);
    /* END SOLUTION */
}

void ep_moe_forward_overlapped(const GPTLayout *l, float *y, MoEActs *a, const MoEParams *p,
                               const float *x) {
    /* BEGIN SOLUTION */
    /* a dispatched block and a returned one between the same two ranks
     * never pair up wrong */
    enum { TAG_DISPATCH = 1, TAG_RETURN = 2 };
    Comm *g = l->ep_group;
    const int ep = l->ep, El = gpt_local_experts(l), me = g->rank;
    const size_t C = (size_t)a->shape.C;
    const CommDtype dtype = comm_act_dtype(l->cfg.precision);
    moe_route(a, x, p->wr);
    moe_dispatch(a->xd, a, x);
    comm_alltoall(g, a->route.counts, a->peer_counts, (size_t)El, COMM_INT32);
    size_t sc[ep], so[ep], rc[ep], ro[ep];
    row_tables(l, a, C, sc, so, rc, ro);
    /* every peer's block, empty ones too: the calls do not depend on the
     * routing */
    CommRequest rows_in[ep], rows_out[ep], back_in[ep], back_out[ep];
    comm_batch_begin();
    for (int j = 0; j < ep; j++) {
        if (j == me) continue;
        comm_irecv(g, a->xr + ro[j], rc[j], dtype, j, TAG_DISPATCH, &rows_in[j]);
        comm_isend(g, a->xd + so[j], sc[j], dtype, j, TAG_DISPATCH, &rows_out[j]);
    }
    comm_batch_end();
    /* the own block travels no wire but the backward reads it from xr */
    device_copy(a->xr + ro[me], a->xd + so[me], rc[me] * sizeof(float));
    /* step i runs source me - i's block (its own at i = 0) and returns its
     * outputs while the outputs of rank me + i, which ran this rank's block
     * at its step i, come in: each send meets its receive in the same step
     * on both sides, which NCCL's in-order streams need */
    for (int i = 0; i < ep; i++) {
        const int s = (me - i + ep) % ep, t = (me + i) % ep;
        if (i > 0) comm_wait(&rows_in[s]);
        moe_experts_forward(a->eor + ro[s], a->h + 4 * ro[s], a->act + 4 * ro[s], a->xr + ro[s],
                            a->peer_counts + s * El, El, p, (int)C);
        if (i == 0) {
            device_copy(a->eo + so[me], a->eor + ro[me], sc[me] * sizeof(float));
            continue;
        }
        comm_batch_begin();
        comm_isend(g, a->eor + ro[s], rc[s], dtype, s, TAG_RETURN, &back_out[s]);
        comm_irecv(g, a->eo + so[t], sc[t], dtype, t, TAG_RETURN, &back_in[t]);
        comm_batch_end();
    }
    /* a send's buffer is not free before its wait, and the backward reuses
     * them */
    for (int j = 0; j < ep; j++) {
        if (j == me) continue;
        comm_wait(&rows_out[j]);
        comm_wait(&back_out[j]);
        comm_wait(&back_in[j]);
    }
    moe_combine(y, a, a->eo);
    /* END SOLUTION */
}

void ep_moe_backward(const GPTLayout *l, float *dx, const MoEParams *g, const float *dy,
                     MoEActs *a, const MoEScratch *sc, const MoEParams *p, const float *x,
                     float daux) {
    /* BEGIN SOLUTION */
    const int ep = l->ep, El = gpt_local_experts(l);
    const size_t C = (size_t)a->shape.C;
    const CommDtype dtype = comm_act_dtype(l->cfg.precision);
    moe_combine_backward(sc->d_eo, sc->dweight, dy, a, a->eo);
    /* the forward's counts still hold: the same rows travel */
    size_t s_counts[ep], s_offsets[ep], r_counts[ep], r_offsets[ep];
    const size_t received = row_tables(l, a, C, s_counts, s_offsets, r_counts, r_offsets);
    comm_alltoallv(l->ep_group, sc->d_eo, s_counts, s_offsets, sc->d_eor, r_counts, r_offsets, dtype);
    set_zero(sc->d_xr, received * C);  /* the experts' backward accumulates */
    for (int s = 0; s < ep; s++) {
        const size_t row = r_offsets[s], hrow = 4 * r_offsets[s];
        moe_experts_backward(sc->d_xr + row, g, sc->d_act + hrow, sc->d_pre + hrow,
                             sc->d_eor + row, a->xr + row, a->h + hrow, a->act + hrow,
                             a->peer_counts + s * El, El, p, (int)C);
    }
    /* d xd (A, C) back from the owners, every row of it */
    comm_alltoallv(l->ep_group, sc->d_xr, r_counts, r_offsets, sc->d_xd, s_counts, s_offsets, dtype);
    moe_dispatch_backward(dx, sc->d_xd, a);
    moe_route_backward(dx, g->wr, sc->dprobs, sc->dweight, a, x, p->wr, daux);
    /* END SOLUTION */
}

void ep_sync_grads(const GPTLayout *l, Comm *dp, Comm *edp, const TensorInfo *t, void *grads) {
    /* BEGIN SOLUTION */
    /* The objective is the mean over the dp ranks of their mean losses,
     * L = (1/dp) sum_r L_r. A tensor whole on every rank gets dL_r/dw on rank
     * r: its gradient is (1/dp) sum over dp. An expert's owner o received the
     * rows of the ep ranks of its EP group, so its backward gave
     * sum_{r in ep group(o)} dL_r/dw already; the dp / ep owners of the same
     * experts (edp) together cover all dp ranks, so the gradient is (1/dp) x
     * the sum over edp: divided by dp = ep x edp, not by edp's size (that
     * would make experts' steps ep times too large). */
    /* runs of consecutive tensors of one kind are contiguous in the buffer:
     * one all-reduce each */
    const int nt = gpt_num_tensors(l), format = gpt_grad_precision(&l->cfg);
    const CommDtype dtype = comm_dtype_of(format);
    for (int i = 0; i < nt;) {
        const int experts = t[i].expert_split;
        size_t count = 0;
        void *x = comm_at(grads, dtype, t[i].offset);
        for (; i < nt && t[i].expert_split == experts; i++) count += t[i].count;
        if (count > 0) comm_allreduce(experts ? edp : dp, x, x, count, dtype, COMM_SUM);
    }
    scale_inplace_as(grads, 1.0f / (float)dp->size, l->num_params, format);
    /* END SOLUTION */
}
