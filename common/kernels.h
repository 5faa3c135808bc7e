/* kernels.h: the layers of a GPT, each a forward and a backward function.
 *
 * Conventions (the same for every kernel, so a reader learns them once):
 *   - Row-major; B batch, T time (sequence), C channels, NH heads, hs = C/NH,
 *     V vocabulary, N = B*T rows when a layer does not care about B and T.
 *   - Linear weights are (OC, IC) as in PyTorch: out = inp W^T + bias.
 *   - Forward functions overwrite their outputs.
 *   - Backward functions ACCUMULATE (+=) into every gradient they produce, of
 *     parameters and of inputs alike. Gradient accumulation over micro-batches
 *     is then free, and a residual branch adds into the stream's gradient
 *     without a copy. The caller zeroes gradient buffers before first use.
 *     (One exception: crossentropy_backward turns probs into dlogits in place.)
 *   - Per-element math is in math_shared.h, shared with the CUDA kernels.
 *
 * Pointers are memory of the current device (device.h): host memory with
 * --device cpu, the GPU's with --device cuda. kernels.c forwards each call to
 * the backend of that device (kernels_backend.h): name_cpu in kernels_cpu.c,
 * name_cuda in kernels_cuda.cu.
 *
 * The CPU backend's layernorm and attention backward passes are the first
 * lab's exercise, not the library's: the program hands them to the kernels
 * (kernels_set_cpu_backward, at the end of this file).
 */
#ifndef KERNELS_H
#define KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "math_shared.h"  /* ATTN_FULL... */

/* out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :] */
void encoder_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                     int B, int T, int C);
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                      int B, int T, int C);

/* y = (x - mean) * rstd * w + b per row of C; keeps mean and rstd (N each). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C);
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, const float *mean,
                        const float *rstd, int N, int C);

/* The linear layers' GEMMs read inp, w and dout in the format precision
 * (precision.h's Precision) and sum in fp32: OpenBLAS's sgemm or cuBLAS in
 * fp32 for fp32, half_gemm.h's (or cuBLAS's 2-byte GEMMs) for bf16 and
 * fp16. Process-wide, like kernels_set_cpu_backward: the trainers set the
 * run's --precision once, before any layer runs (default fp32). */
void kernels_set_precision(int precision);

/* out (N,OC) = inp (N,IC) W^T + bias; bias may be NULL. */
void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                    int N, int IC, int OC);
/* dinp += dout W, dW += dout^T inp, dbias += column sums of dout; any of
 * dinp, dw (with dbias) may be NULL: zero-bubble pipelines compute the
 * input gradient and the weight gradients at different times. */
void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                     const float *inp, const float *w, int N, int IC, int OC);

/* Causal multi-head self-attention.
 * qkv (B,T,3C): [q | k | v], head h uses columns h*hs..(h+1)*hs of each part.
 * att (B,NH,T,T): softmax probabilities P = softmax(q k^T / sqrt(hs)), zero
 * above the diagonal. out (B,T,C) = P v, heads side by side.
 * datt (B,NH,T,T) is scratch for the backward pass. */
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* att alone, bit for bit as attention_forward writes it: selective
 * activation recomputation (lab 05) rebuilds the probabilities from qkv. */
void attention_probs_forward(float *att, const float *qkv, int B, int T, int C, int NH);
void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                        const float *att, int B, int T, int C, int NH);

/* Fused causal attention (config.h's ATTENTION_FUSED; FlashAttention):
 * the same out as attention_forward from the same qkv, by tiles of query
 * rows against tiles of key rows with an online softmax, keeping per
 * (sequence, head, query row) only lse (B,NH,T) = log sum_j e^(s_j), never
 * a T x T matrix. The backward pass rebuilds each tile's probabilities
 * P = e^(S - lse) from q, k and lse, with D (B,NH,T) = per head dout . out
 * by row (its scratch, overwritten), and adds dq, dk, dv into dqkv:
 *   dV += P^T dO,  dP = dO V^T,  dS = P o (dP - D),
 *   dQ += scale dS K,  dK += scale dS^T Q      (scale = 1/sqrt(hs)).
 * On the CPU the forward pass is the one the program handed over (lab 05's
 * extension: kernels_set_cpu_fused_forward); a GPU runs its own. */
void attention_fused_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                             int NH);
void attention_fused_backward(float *dqkv, float *D, const float *dout, const float *qkv,
                              const float *out, const float *lse, int B, int T, int C, int NH);

/* ---- ring attention's blocks (context parallelism, lab 07) ----
 * A rank holds T of each sequence's positions (its chunks, math_shared.h's
 * placement): its q, k, v in qkv (B,T,3C) as attention_forward's, and the
 * keys and values of another rank arrive packed, kv (B,T,2C) = [k | v].
 * A block pairs this rank's query rows [q0, q0 + n) of each sequence with
 * kv's key rows [k0, k0 + n), runs of n positions, under a mask (the ring
 * skips a block whose keys all come after its queries):
 *   ATTN_FULL           every key comes before every query;
 *   ATTN_CAUSAL         query i sees keys j <= i (the same chunk);
 *   ATTN_CAUSAL_STRICT  query i sees keys j < i (striped placement, where
 *                       key j of a later rank comes after query j). No probability is stored: per query row
 * the softmax's log-sum-exp lse (B,NH,T) is enough to rebuild them.
 *   attention_block_forward   out (B,T,C) and lse rows [q0, q0 + n): the
 *                             block's own result (overwritten);
 *   attention_merge           into out, lse rows [q0, q0 + n) the block
 *                             result out_b, lse_b (math_shared.h's
 *                             lse_merge_row); start from out 0, lse -inf;
 *   attention_row_dot         D (B,NH,T) = per head, dout . out by row;
 *   attention_block_backward  from the whole forward's lse and D: dq into
 *                             dqkv's q columns, rows [q0, ...), and dk, dv
 *                             into dkv (B,T,2C) rows [k0, ...) (both +=). */
void attention_block_forward(float *out, float *lse, const float *qkv, const float *kv, int B,
                             int T, int C, int NH, int q0, int k0, int n, int mask);
void attention_merge(float *out, float *lse, const float *out_b, const float *lse_b, int B,
                     int T, int C, int NH, int q0, int n);
void attention_row_dot(float *D, const float *dout, const float *out, int B, int T, int C,
                       int NH);
void attention_block_backward(float *dqkv, float *dkv, const float *dout, const float *qkv,
                              const float *kv, const float *lse, const float *D, int B, int T,
                              int C, int NH, int q0, int k0, int n, int mask);
/* The (query, key) pairs the block kernels computed on this rank since the
 * program started, forward and backward (the work a causal split gives
 * it), and the seconds they took (the host's: on a GPU, the launches) */
void attention_block_stats(unsigned long long *pairs, double *seconds);

/* dst[r, 0..cols) = (or += with accumulate) src[r, 0..cols) for `rows` rows
 * dst_stride and src_stride floats apart: packing columns for a transfer
 * (k and v out of qkv; one rank's heads), and unpacking them. */
void copy_strided(float *dst, int dst_stride, const float *src, int src_stride, int rows,
                  int cols, int accumulate);
/* x[0..n) = value */
void fill_value(float *x, float value, size_t n);

void gelu_forward(float *out, const float *inp, size_t n);
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* out = a + b (out may alias a or b). The backward of a residual connection
 * passes dout unchanged to both summands: the branch reads dout directly, and
 * residual_backward adds it into the stream's gradient, dinp += dout. */
void residual_forward(float *out, const float *a, const float *b, size_t n);
void residual_backward(float *dinp, const float *dout, size_t n);

/* Softmax over V logits per row and cross-entropy against targets.
 * probs may alias logits. Returns the mean loss over the N rows and writes
 * each row's loss to losses. */
float crossentropy_forward(float *losses, float *probs, const float *logits,
                           const int *targets, int N, int V);
/* In place: probs becomes dlogits = dloss * (probs - onehot(target)), where
 * dloss is d(total loss)/d(row loss), 1/N for a mean over N rows. */
void crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                           int N, int V);

/* ---- the vocabulary-parallel layers' pieces (lab 04) ----
 * A rank holds rows [first, first + rows) of the vocabulary (its wte rows,
 * its columns of the logits); the lab joins the ranks with all-reduces
 * between these. */
/* out[n] = wte[tokens[n] - first] when this rank holds that row, else 0 */
void vocab_embedding_forward(float *out, const int *tokens, const float *wte, int first,
                             int rows, int N, int C);
/* dwte[tokens[n] - first] += dout[n] for the rows this rank holds */
void vocab_embedding_backward(float *dwte, const float *dout, const int *tokens, int first,
                              int rows, int N, int C);
/* out[i,:] += wpe[(first_row + i) % T, :] for the N rows [first_row,
 * first_row + N) of the flattened (B,T) positions (all of them: first_row 0,
 * N = B T; a sequence-parallel rank's share, lab 05: its own rows); and the
 * backward over all B T rows, dwpe[t,:] += sum_b dout[b,t,:] */
void position_forward(float *out, const float *wpe, int first_row, int N, int T, int C);
void position_backward(float *dwpe, const float *dout, int B, int T, int C);
/* out[n,:] += bias (N rows of OC) */
void bias_forward(float *out, const float *bias, int N, int OC);
/* Softmax and cross-entropy over logits split by columns: a rank holds V
 * columns of each row, of which the first `valid` are real (the rest: the
 * padding of a vocabulary that does not divide; probability 0).
 *   vocab_logits_max     maxes[n] = max of this rank's valid logits of row n
 *                        (-inf if none)
 *   vocab_target_logit   out[n] = logits[n, targets[n] - first] where this
 *                        rank holds the target, else 0
 *   vocab_softmax_exp    probs = e^(logit - maxes[n]), sums[n] = their sum
 *                        over this rank's columns (probs may be logits:
 *                        in place)
 *   vocab_crossentropy_finish  given each row's max, sum and target logit
 *                        over the whole vocabulary: probs /= sums,
 *                        losses[n] = log(sums[n]) - (target_logits[n] -
 *                        maxes[n]); returns their mean
 *   vocab_crossentropy_backward  probs becomes dloss (probs - onehot) in
 *                        place, the onehot where this rank holds the target */
void vocab_logits_max(float *maxes, const float *logits, int N, int V, int valid);
void vocab_target_logit(float *out, const float *logits, const int *targets, int first, int N,
                        int V);
void vocab_softmax_exp(float *probs, float *sums, const float *logits, const float *maxes,
                       int N, int V, int valid);
float vocab_crossentropy_finish(float *losses, float *probs, const float *sums,
                                const float *maxes, const float *target_logits, int N, int V);
void vocab_crossentropy_backward(float *probs_to_dlogits, const int *targets, float dloss,
                                 int first, int N, int V);

/* ---- mixture of experts (lab 08; moe.h) ----
 * Rows moved by index lists, each destination element written by one
 * thread, its terms in a fixed order (no atomics): deterministic, and the
 * same order on both backends. C floats a row.
 *   gather_rows       dst[i] = src[idx[i]] (times weight[i] when weight is
 *                     not NULL), i < n: dispatch, and the combine's backward
 *   gather_sum_rows   dst[t] = (or += with accumulate) sum over j < k of
 *                     weight[s] src[s], s = slots[t k + j], skipping s < 0
 *                     (weight NULL: 1), in order j = 0, 1...: the combine,
 *                     and the dispatch's backward (a scatter-add written as
 *                     a gather through the inverse index)
 *   gather_row_dot    out[i] = a[i] . b[idx[i]]: the combine weights'
 *                     gradients
 *   softmax_rows_forward   probs (N,E) = softmax of each row of logits (may
 *                     alias): the router (math_shared.h's softmax_row_*)
 *   softmax_rows_backward  in place: dprobs becomes dlogits = p (dp - p.dp)
 *                     (overwritten, as crossentropy_backward) */
void gather_rows(float *dst, const float *src, const int *idx, const float *weight, int n,
                 int C);
void gather_sum_rows(float *dst, const float *src, const int *slots, const float *weight, int N,
                     int k, int C, int accumulate);
void gather_row_dot(float *out, const float *a, const float *b, const int *idx, int n, int C);
void softmax_rows_forward(float *probs, const float *logits, int N, int E);
void softmax_rows_backward(float *dprobs_to_dlogits, const float *probs, int N, int E);

/* AdamW over n elements, step t >= 1 (bias corrections from t). */
void adamw_update(float *params, const float *grads, float *m, float *v, size_t n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, int t);

/* Sum of squares in double (for the global gradient norm; ranks add theirs). */
double sum_squares(const float *x, size_t n);
void scale_inplace(float *x, float s, size_t n);
void add_inplace(float *x, const float *y, size_t n);  /* x += y */
void set_zero(float *x, size_t n);

/* Mixed precision (precision.h's formats; precision a Precision):
 *   round_inplace    x[i] = x rounded to the format, kept as fp32 (where a
 *                    2-byte trainer would store the value and read it back)
 *   narrow_to_half   dst[i] = src[i] in the 2-byte format (bf16 or fp16)
 *   widen_from_half  dst[i] = src[i] as fp32 (exact) */
void round_inplace(float *x, size_t n, int precision);
void narrow_to_half(uint16_t *dst, const float *src, size_t n, int precision);
void widen_from_half(float *dst, const uint16_t *src, size_t n, int precision);
/* The same on n elements of precision's type (2-byte gradients: each
 * element widened, computed in fp32, rounded back where stored; fp32 is
 * the plain kernel's bits):
 *   scale_inplace_as  x[i] *= s
 *   add_inplace_as    x[i] += y[i]
 *   sum_squares_as    sum of x[i]^2, in double
 *   adamw_update_as   AdamW from the gradients times grad_scale (fp32:
 *                     scaled in place first, when grad_scale != 1) */
/* scale_inplace_as, sum_squares_as and adamw_update_as (and the fp32
 * kernels they call: scale_inplace, sum_squares, adamw_update), and
 * narrow_to_half above, run where their first buffer is: on host memory under --device cuda (mem_alloc_host:
 * ZeRO-Offload's optimizer) their CPU version, threaded with OpenMP; all of
 * a call's buffers must then be host memory. */
void scale_inplace_as(void *x, float s, size_t n, int precision);
void add_inplace_as(void *x, const void *y, size_t n, int precision);
double sum_squares_as(const void *x, size_t n, int precision);
void adamw_update_as(float *params, void *grads, float grad_scale, float *m, float *v, size_t n,
                     int precision, float lr, float beta1, float beta2, float eps,
                     float weight_decay, int t);

/* ZeRO++'s blockwise int8 (math_shared.h): n floats of x into `packed`
 * (quant_packed_bytes(n) bytes: the blocks' scales, then the int8), and
 * back: x = the values, or with accumulate x += them (qgZ's local sums). */
void quantize_int8(void *packed, const float *x, size_t n);
void dequantize_int8(float *x, const void *packed, size_t n, int accumulate);

/* C = alpha op(A) op(B) + beta C, row-major, op = transpose when trans != 0.
 * A thin wrapper over cblas_sgemm so lab code needs no BLAS header. */
void sgemm_rowmajor(int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *Bm, int ldb, float beta,
                    float *Cm, int ldc);

/* The CPU backward passes of layernorm and attention, which the first lab
 * writes: each with the signature and the contract of its kernels.h
 * namesake on host memory. */
typedef struct {
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
    void (*attention_backward)(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);
} CpuBackwardKernels;

/* Hands the kernels the program's CPU backward passes, for the whole
 * process: call once at the start of main, like device_select (device.h).
 * Process-wide, not an argument, because the model reaches these kernels
 * from deep inside its layers, layouts and pipeline schedules, whose every
 * signature would otherwise carry the table. k must outlive the process.
 * Until it is called, layernorm_backward and attention_backward on the CPU
 * stop the program with one message (a GPU runs its own, kernels_cuda.cu). */
void kernels_set_cpu_backward(const CpuBackwardKernels *k);

/* The CPU forward pass of fused attention, which lab 05's extension writes
 * (attention_fused_forward's contract on host memory), handed over the same
 * way; until it is, attention_fused_forward on the CPU stops the program
 * with one message (the trainers refuse --attention fused before any work
 * where their build lacks it: plugins.h). */
typedef void (*CpuFusedForward)(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH);
void kernels_set_cpu_fused_forward(CpuFusedForward f);

#endif
