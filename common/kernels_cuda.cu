/* kernels_cuda.cu: the CUDA backend of kernels.h (kernels.c picks the backend).
 *
 * Every function here has the contract of its _cpu twin (kernels_cpu.c, or
 * for layernorm_backward and attention_backward the CPU backward kernels a
 * program hands in: kernels.h's CpuBackwardKernels) and
 * computes the same thing, on device pointers of the current GPU:
 *   - GEMMs go to cuBLAS (column-major; see sgemm_rowmajor_cuda for how a
 *     row-major product is handed to it);
 *   - row-wise operations (layernorm, softmax, cross-entropy) give each row
 *     to one warp or one block, which reduces with warp shuffles;
 *   - per-element math calls the functions of math_shared.h, the very code
 *     the CPU loops call, so only the order of sums can differ.
 * Everything is queued on the legacy default stream (stream 0), which
 * cuBLAS also uses: calls run in the order they are made, and a blocking
 * cudaMemcpy (crossentropy_forward, sum_squares) waits for all of them.
 *
 * Where the GPU result may differ from the CPU's in the last bits: sums
 * taken in another order (GEMMs, row and column reductions), FMA contraction
 * (nvcc fuses a*b+c; gcc may or may not), expf/logf (CUDA's are within 2 ulp,
 * glibc's within 1). Everything else is bit for bit the CPU's arithmetic.
 * No kernel adds floats atomically: a sum's order never depends on which
 * thread gets there first, so two runs give the same bits.
 *
 * No function allocates device memory per call: attention uses only att and
 * datt, as on the CPU (the memory plan counts the same bytes on both
 * backends). The exceptions are fixed and tiny: cuBLAS's handle and its
 * workspace (created on first use), and sum_squares's static __device__
 * partial sums (4 KiB, part of the module image); and under mixed
 * precision the 2-byte copies of a GEMM's inputs (linear_gemm), in two
 * buffers that grow to the largest GEMM's and stay.
 */
#include <climits>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_check.h"
#include "kernels_backend.h"
#include "math_shared.h"
#include "precision.h"

/* A failed cuBLAS call dies like CUDA_CHECK: the call, where, and why. */
#define CUBLAS_CHECK(call)                                                     \
    do {                                                                       \
        cublasStatus_t cublas_check_rc_ = (call);                              \
        if (cublas_check_rc_ != CUBLAS_STATUS_SUCCESS)                         \
            die_at(__FILE__, __LINE__, "%s: %s", #call,                        \
                   cublasGetStatusString(cublas_check_rc_));                   \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Launch shapes                                                             */

#define WARP 32
#define FULL_MASK 0xffffffffu
/* elementwise kernels: 256 threads a block, at most this many blocks; a
 * grid-stride loop covers the rest (enough blocks to fill any current GPU) */
#define ELEM_THREADS 256
#define ELEM_MAX_BLOCKS 8192u
/* warp-per-row kernels: 8 warps (rows) a block */
#define ROWS_PER_BLOCK 8
/* block-per-row kernels (cross-entropy over V logits) */
#define ROW_BLOCK_THREADS 256
/* column sums (dbias, layernorm's dw and db): a block owns COLSUM_COLS
 * adjacent columns and its COLSUM_ROWS thread rows split the N rows. A warp
 * then reads 4 rows x 8 adjacent floats: four whole 32-byte sectors. */
#define COLSUM_COLS 8
#define COLSUM_ROWS 64

static unsigned int elem_blocks(size_t n) {
    size_t blocks = (n + ELEM_THREADS - 1) / ELEM_THREADS;
    return blocks < ELEM_MAX_BLOCKS ? (unsigned int)blocks : ELEM_MAX_BLOCKS;
}

static unsigned int row_warp_blocks(int rows) {
    return (unsigned int)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK);
}

/* Grid-stride loop over [0, n): thread g of G handles g, g + G, g + 2G...
 * Neighbouring threads touch neighbouring elements (coalesced). */
#define GRID_STRIDE_LOOP(i, n)                                                 \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);   \
         i += (size_t)gridDim.x * blockDim.x)

#define LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* ------------------------------------------------------------------------ */
/* Reductions                                                                */

struct SumOp {
    template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* Butterfly over the 32 lanes: after step `offset`, every lane holds the
 * reduction of its group of 2*offset lanes. Each pair adds the same two
 * values (a+b == b+a in IEEE), so all lanes end with the same bits. */
template <typename T, typename Op> __device__ T warp_allreduce(T v, Op op) {
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(FULL_MASK, v, offset));
    return v;
}

/* Reduction over a whole block (blockDim.x a multiple of 32, every thread
 * calling): each warp reduces, warp results meet in shared memory, every warp
 * reduces those. All threads get the result. The leading __syncthreads lets
 * a kernel call this twice: the second call's writes wait for the first
 * call's reads. */
template <typename T, typename Op> __device__ T block_allreduce(T v, Op op, T identity) {
    __shared__ T warp_results[WARP];
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    v = warp_allreduce(v, op);
    __syncthreads();
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x / WARP) ? warp_results[lane] : identity;
    return warp_allreduce(v, op);
}

/* In a (COLSUM_COLS, COLSUM_ROWS) block: sum `partial` over threadIdx.y for
 * each threadIdx.x, by a fixed halving tree (deterministic). Every thread of
 * the block must call it; the result is valid in the threads with y == 0. */
static __device__ float column_tile_sum(float partial, float (*sh)[COLSUM_COLS]) {
    int x = threadIdx.x, y = threadIdx.y;
    sh[y][x] = partial;
    __syncthreads();
    for (int half = COLSUM_ROWS / 2; half > 0; half /= 2) {
        if (y < half) sh[y][x] += sh[y + half][x];
        __syncthreads();
    }
    return sh[0][x];
}

/* ------------------------------------------------------------------------ */
/* cuBLAS                                                                    */

static cublasHandle_t g_cublas;   /* created on first use, on the current GPU */
static int g_tf32;                /* kernels_cuda_set_tf32 */

static void apply_math_mode(void) {
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, g_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
}

/* The handle is bound to the GPU current when it is created: one GPU per
 * process (device.h), selected before the first kernel. Its stream stays
 * the default stream. */
static cublasHandle_t cublas(void) {
    if (!g_cublas) {
        CUBLAS_CHECK(cublasCreate(&g_cublas));
        apply_math_mode();
    }
    return g_cublas;
}

void kernels_cuda_set_tf32(int on) {
    g_tf32 = on != 0;
    if (g_cublas) apply_math_mode();
}

static cublasOperation_t cublas_op(int trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* cuBLAS is column-major. A row-major matrix X (r x c, leading dimension ld)
 * is, byte for byte, the column-major matrix X^T (c x r, same ld). So for
 *     C = alpha op(A) op(B) + beta C     (row-major; C: M x N, op(A): M x K)
 * we ask cuBLAS for the column-major C^T = alpha op(B)^T op(A)^T + beta C^T
 * (N x M, inner dimension K). cuBLAS sees B's memory as B^T: op(B)^T is that
 * matrix itself when trans_b = 0 (CUBLAS_OP_N) and its transpose when
 * trans_b = 1 (CUBLAS_OP_T); likewise for A. Hence: operands swapped, sizes
 * M and N swapped, transpose flags and leading dimensions passed unchanged. */
void sgemm_rowmajor_cuda(int trans_a, int trans_b, int M, int N, int K, float alpha,
                         const float *A, int lda, const float *Bm, int ldb, float beta,
                         float *Cm, int ldc) {
    if (M == 0 || N == 0) return;
    CUBLAS_CHECK(cublasSgemm(cublas(), cublas_op(trans_b), cublas_op(trans_a), N, M, K, &alpha,
                             Bm, ldb, A, lda, &beta, Cm, ldc));
}

/* The same mapping for `batch` products; product i uses A + i*stride_a,
 * B + i*stride_b, C + i*stride_c. Attention batches the NH heads of one
 * sequence: a head's q, k, v and output columns are hs floats after the
 * previous head's, its T x T block of att T*T floats after. The heads'
 * outputs interleave in memory but never share an element. */
static void sgemm_batched_rowmajor(int trans_a, int trans_b, int M, int N, int K, float alpha,
                                   const float *A, int lda, long long stride_a,
                                   const float *Bm, int ldb, long long stride_b, float beta,
                                   float *Cm, int ldc, long long stride_c, int batch) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(cublas(), cublas_op(trans_b), cublas_op(trans_a), N,
                                           M, K, &alpha, Bm, ldb, stride_b, A, lda, stride_a,
                                           &beta, Cm, ldc, stride_c, batch));
}

/* ------------------------------------------------------------------------ */
/* Encoder                                                                   */

/* Element i = bt*C + c of out; token and position embeddings are read along
 * their rows, so a warp reads 32 adjacent floats of each. */
static __global__ void encoder_forward_kernel(float *out, const int *tokens, const float *wte,
                                              const float *wpe, int T, int C, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        size_t bt = i / C, c = i % C;
        out[i] = wte[(size_t)tokens[bt] * C + c] + wpe[(bt % T) * C + c];
    }
}

/* Thread (t, c) owns dwpe[t, c] and adds dout[b, t, c] for b = 0..B-1 in
 * order: exactly the CPU's sequence of additions. The same values go to
 * dwte[token(b, t), c]; a token can sit at several (b, t), owned by
 * different threads, so those adds are atomic. Their order is then up to the
 * hardware: a token seen k times gets its k terms summed in any order, which
 * changes the last bits of that row from run to run (no change at all for
 * tokens seen once). */
/* The embedding's gradient, without atomics. Several positions can hold
 * the same token, so their rows of dout add into one row of dwte: element
 * (r, c), with r = token - first in [0, rows), is one thread's, which adds
 * the rows n = 0, 1, ... N - 1 whose token it is, in that order (the CPU's:
 * the same bits). Thread (s, c) owns column c of the rows r with r % shards
 * == s: consecutive threads take consecutive columns (coalesced), and every
 * thread scans all N tokens, which stay in cache. */
static __global__ void embedding_rows_backward_kernel(float *dwte, const float *dout,
                                                      const int *tokens, int first, int rows,
                                                      int N, int C, int shards) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)C * shards) return;
    const int c = (int)(i % C), s = (int)(i / C);
    for (int n = 0; n < N; n++) {
        const int r = tokens[n] - first;
        if (r >= 0 && r < rows && r % shards == s) dwte[(size_t)r * C + c] += dout[(size_t)n * C + c];
    }
}

/* Shards for about 64 Ki threads (fewer when there are fewer rows) */
static void embedding_rows_backward(float *dwte, const float *dout, const int *tokens, int first,
                                    int rows, int N, int C) {
    if (N == 0 || C == 0 || rows == 0) return;
    int shards = (1 << 16) / C;
    shards = shards < 1 ? 1 : shards > rows ? rows : shards;
    const size_t threads = (size_t)C * shards;
    embedding_rows_backward_kernel<<<(unsigned)((threads + ELEM_THREADS - 1) / ELEM_THREADS),
                                     ELEM_THREADS>>>(dwte, dout, tokens, first, rows, N, C, shards);
    LAUNCH_CHECK();
}

/* thread (t, c) adds dout[b, t, c] for b in order, as the CPU */
static __global__ void encoder_position_backward_kernel(float *dwpe, const float *dout, int B,
                                                        int T, int C) {
    size_t n = (size_t)T * C;
    GRID_STRIDE_LOOP(i, n) {
        float pe = dwpe[i];
        for (int b = 0; b < B; b++) pe += dout[(size_t)b * n + i];
        dwpe[i] = pe;
    }
}

void encoder_forward_cuda(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    encoder_forward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, tokens, wte, wpe, T, C, n);
    LAUNCH_CHECK();
}

void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C) {
    size_t n = (size_t)T * C;
    if (n == 0 || B == 0) return;
    encoder_position_backward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
    embedding_rows_backward(dwte, dout, tokens, 0, INT_MAX, B * T, C);
}

/* ------------------------------------------------------------------------ */
/* Layernorm                                                                 */

/* One warp per row (rows are C = 768-ish floats: 24 per lane). Two passes
 * as on the CPU: mean = sum x / C, then var = sum (x - mean)^2 / C, each a
 * lane-strided partial sum and a warp butterfly. The row is re-read from L1/L2
 * rather than kept in registers, so any C works. */
static __global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd,
                                                const float *inp, const float *w, const float *b,
                                                int N, int C) {
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= N) return;   /* the whole warp leaves together */
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;

    float sum = 0.0f;
    for (int i = lane; i < C; i += WARP) sum += x[i];
    float m = warp_allreduce(sum, SumOp()) / C;

    float sq = 0.0f;
    for (int i = lane; i < C; i += WARP) {
        float d = x[i] - m;
        sq += d * d;
    }
    float var = warp_allreduce(sq, SumOp()) / C;
    float s = 1.0f / sqrtf(var + 1e-5f);

    for (int i = lane; i < C; i += WARP) o[i] = (x[i] - m) * s * w[i] + b[i];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

/* dinp, one warp per row. With xhat = (x - mean) rstd and g = dy * w:
 *   dx_i += rstd * (g_i - mean_j g_j - xhat_i * mean_j (g_j xhat_j)).
 * The two means are two warp sums over the row. */
static __global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout,
                                                      const float *inp, const float *w,
                                                      const float *mean, const float *rstd, int N,
                                                      int C) {
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];

    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = lane; i < C; i += WARP) {
        float xhat = (x[i] - m) * s;
        float g = dy[i] * w[i];
        sum_g += g;
        sum_gx += g * xhat;
    }
    float mean_g = warp_allreduce(sum_g, SumOp()) / C;
    float mean_gx = warp_allreduce(sum_gx, SumOp()) / C;

    for (int i = lane; i < C; i += WARP) {
        float xhat = (x[i] - m) * s;
        dx[i] += s * (dy[i] * w[i] - mean_g - xhat * mean_gx);
    }
}

/* dw and db are sums over the N rows, one per column:
 *   db_c += sum_n dy[n,c],   dw_c += sum_n dy[n,c] * xhat[n,c].
 * Column-tile blocks (see COLSUM_*): each thread sums every COLSUM_ROWS-th
 * row of its column, the tile tree adds the partials. No atomics: the same
 * bits every run. */
static __global__ void layernorm_backward_params_kernel(float *dw, float *db, const float *dout,
                                                        const float *inp, const float *mean,
                                                        const float *rstd, int N, int C) {
    __shared__ float sh_w[COLSUM_ROWS][COLSUM_COLS], sh_b[COLSUM_ROWS][COLSUM_COLS];
    int c = blockIdx.x * COLSUM_COLS + threadIdx.x;
    float acc_w = 0.0f, acc_b = 0.0f;
    if (c < C) {
        for (int n = threadIdx.y; n < N; n += COLSUM_ROWS) {
            size_t i = (size_t)n * C + c;
            float xhat = (inp[i] - mean[n]) * rstd[n];
            acc_w += dout[i] * xhat;
            acc_b += dout[i];
        }
    }
    float tile_w = column_tile_sum(acc_w, sh_w);   /* every thread takes part */
    float tile_b = column_tile_sum(acc_b, sh_b);
    if (threadIdx.y == 0 && c < C) {
        dw[c] += tile_w;
        db[c] += tile_b;
    }
}

void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C) {
    if (N == 0) return;
    layernorm_forward_kernel<<<row_warp_blocks(N), ROWS_PER_BLOCK * WARP>>>(out, mean, rstd,
                                                                            inp, w, b, N, C);
    LAUNCH_CHECK();
}

void layernorm_backward_cuda(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C) {
    if (N == 0 || C == 0) return;
    layernorm_backward_dinp_kernel<<<row_warp_blocks(N), ROWS_PER_BLOCK * WARP>>>(
        dinp, dout, inp, w, mean, rstd, N, C);
    LAUNCH_CHECK();
    dim3 block(COLSUM_COLS, COLSUM_ROWS);
    layernorm_backward_params_kernel<<<(C + COLSUM_COLS - 1) / COLSUM_COLS, block>>>(
        dw, db, dout, inp, mean, rstd, N, C);
    LAUNCH_CHECK();
}

/* ------------------------------------------------------------------------ */
/* Matmul                                                                    */

/* out[n, o] = bias[o]: the GEMM then adds inp W^T on top (beta = 1), as the
 * CPU does. */
static __global__ void broadcast_rows_kernel(float *out, const float *bias, int OC, size_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = bias[i % OC];
}

/* dbias[o] += sum_n dout[n, o], column-tile blocks (see COLSUM_*). */
static __global__ void column_sum_kernel(float *dbias, const float *dout, int N, int OC) {
    __shared__ float sh[COLSUM_ROWS][COLSUM_COLS];
    int c = blockIdx.x * COLSUM_COLS + threadIdx.x;
    float acc = 0.0f;
    if (c < OC)
        for (int n = threadIdx.y; n < N; n += COLSUM_ROWS) acc += dout[(size_t)n * OC + c];
    float tile = column_tile_sum(acc, sh);
    if (threadIdx.y == 0 && c < OC) dbias[c] += tile;
}

/* Mixed precision's GEMMs (kernels.h): A and B narrowed to the 2-byte
 * format into device buffers that only grow, and cuBLAS multiplying them
 * (tensor cores) with fp32 sums (CUBLAS_COMPUTE_32F) into fp32 C */
static __global__ void narrow_kernel(uint16_t *dst, const float *src, size_t n, int precision);

static const uint16_t *half_copy(int which, const float *src, size_t n, int precision) {
    static uint16_t *buf[2];
    static size_t cap[2];
    if (n > cap[which]) {
        if (buf[which]) CUDA_CHECK(cudaFree(buf[which]));
        CUDA_CHECK(cudaMalloc(&buf[which], n * sizeof(uint16_t)));
        cap[which] = n;
    }
    narrow_kernel<<<elem_blocks(n), ELEM_THREADS>>>(buf[which], src, n, precision);
    LAUNCH_CHECK();
    return buf[which];
}

/* C (M,N) = op(A) op(B) + beta C of contiguous operands, in precision */
static void linear_gemm(int precision, int trans_a, int trans_b, int M, int N, int K,
                        const float *A, const float *B, float beta, float *C) {
    const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
    if (precision == PRECISION_FP32) {
        sgemm_rowmajor_cuda(trans_a, trans_b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
        return;
    }
    if (M == 0 || N == 0) return;
    const cudaDataType_t half = precision == PRECISION_FP16 ? CUDA_R_16F : CUDA_R_16BF;
    const uint16_t *a = half_copy(0, A, (size_t)M * K, precision);
    const uint16_t *b = half_copy(1, B, (size_t)K * N, precision);
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(cublas(), cublas_op(trans_b), cublas_op(trans_a), N, M, K, &one, b,
                              half, ldb, a, half, lda, &beta, C, CUDA_R_32F, N,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void matmul_forward_cuda(float *out, const float *inp, const float *w, const float *bias,
                         int N, int IC, int OC, int precision) {
    size_t n = (size_t)N * OC;
    if (n == 0) return;
    if (bias) {
        broadcast_rows_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, bias, OC, n);
        LAUNCH_CHECK();
    }
    /* out (N,OC) = inp (N,IC) W^T, W (OC,IC) */
    linear_gemm(precision, 0, 1, N, OC, IC, inp, w, bias ? 1.0f : 0.0f, out);
}

void matmul_backward_cuda(float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, int N, int IC, int OC,
                          int precision) {
    /* dinp (N,IC) += dout (N,OC) W (OC,IC);  dW (OC,IC) += dout^T inp (N,IC) */
    if (dinp) linear_gemm(precision, 0, 0, N, IC, OC, dout, w, 1.0f, dinp);
    if (dw) linear_gemm(precision, 1, 0, OC, IC, N, dout, inp, 1.0f, dw);
    if (dbias && OC > 0) {
        dim3 block(COLSUM_COLS, COLSUM_ROWS);
        column_sum_kernel<<<(OC + COLSUM_COLS - 1) / COLSUM_COLS, block>>>(dbias, dout, N, OC);
        LAUNCH_CHECK();
    }
}

/* ------------------------------------------------------------------------ */
/* Attention                                                                 */

/* One warp per row of att, rows ordered (b, h, t), so t = row % T. The
 * scores S[t, 0..t] are replaced by softmax probabilities (max subtracted
 * for range, expf as on the CPU), S[t, t+1..T-1] by 0: the causal mask. */
static __global__ void causal_softmax_kernel(float *att, int rows, int T) {
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= rows) return;
    int t = row % T;
    float *p = att + (size_t)row * T;

    float mx = -INFINITY;
    for (int j = lane; j <= t; j += WARP) mx = fmaxf(mx, p[j]);
    mx = warp_allreduce(mx, MaxOp());

    float sum = 0.0f;
    for (int j = lane; j <= t; j += WARP) {
        float e = expf(p[j] - mx);
        p[j] = e;
        sum += e;
    }
    float inv = 1.0f / warp_allreduce(sum, SumOp());

    for (int j = lane; j < T; j += WARP) p[j] = j <= t ? p[j] * inv : 0.0f;
}

/* Softmax backward, one warp per row: with dP in datt and P in att,
 *   dS[t, j] = P[t, j] (dP[t, j] - sum_k P[t, k] dP[t, k])   for j <= t,
 * 0 above the diagonal. dS overwrites dP. */
static __global__ void causal_softmax_backward_kernel(float *datt, const float *att, int rows,
                                                      int T) {
    int lane = threadIdx.x % WARP;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP;
    if (row >= rows) return;
    int t = row % T;
    const float *p = att + (size_t)row * T;
    float *dp = datt + (size_t)row * T;

    float dot = 0.0f;
    for (int j = lane; j <= t; j += WARP) dot += p[j] * dp[j];
    dot = warp_allreduce(dot, SumOp());

    for (int j = lane; j < T; j += WARP) dp[j] = j <= t ? p[j] * (dp[j] - dot) : 0.0f;
}

/* Per sequence b, the NH heads go to cuBLAS as one strided batch. With
 * hs = C/NH, head h of sequence b uses
 *   q = qkv + b*T*3C + h*hs  (rows 3C apart; k = q + C, v = q + 2C),
 *   P = att + (b*NH + h)*T*T (rows T apart),
 *   y = out + b*T*C + h*hs   (rows C apart),
 * so from one head to the next: stride hs for q, k, v, y and T*T for P.
 * Each product below is written exactly as the CPU's sgemm_rowmajor call. */
void attention_probs_forward_cuda(float *att, const float *qkv, int B, int T, int C, int NH) {
    if (B == 0 || T == 0) return;
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long tt = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * 3 * C, *k = q + C;
        float *p = att + (size_t)b * NH * tt;
        /* S = scale q k^T  (T x T per head) */
        sgemm_batched_rowmajor(0, 1, T, T, hs, scale, q, 3 * C, hs, k, 3 * C, hs, 0.0f, p, T,
                               tt, NH);
    }
    int rows = B * NH * T;
    causal_softmax_kernel<<<row_warp_blocks(rows), ROWS_PER_BLOCK * WARP>>>(att, rows, T);
    LAUNCH_CHECK();
}

void attention_forward_cuda(float *out, float *att, const float *qkv, int B, int T, int C,
                            int NH) {
    if (B == 0 || T == 0) return;
    const int hs = C / NH;
    const long long tt = (long long)T * T;
    attention_probs_forward_cuda(att, qkv, B, T, C, NH);
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * 3 * C + 2 * C;
        const float *p = att + (size_t)b * NH * tt;
        /* y = P v  (T x hs per head, into the head's columns of out) */
        sgemm_batched_rowmajor(0, 0, T, hs, T, 1.0f, p, T, tt, v, 3 * C, hs, 0.0f,
                               out + (size_t)b * T * C, C, hs, NH);
    }
}

/* Backward, same layout (dqkv like qkv, dout like out), per head:
 *   dP = dy v^T (overwrites datt)     dv += P^T dy
 *   dS = softmax backward of dP       (in datt)
 *   dq += scale dS k                  dk += scale dS^T q */
void attention_backward_cuda(float *dqkv, float *datt, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH) {
    if (B == 0 || T == 0) return;
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
    const long long tt = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *v = qkv + (size_t)b * T * 3 * C + 2 * C;
        float *dv = dqkv + (size_t)b * T * 3 * C + 2 * C;
        const float *dy = dout + (size_t)b * T * C;
        const float *p = att + (size_t)b * NH * tt;
        float *dp = datt + (size_t)b * NH * tt;
        sgemm_batched_rowmajor(0, 1, T, T, hs, 1.0f, dy, C, hs, v, 3 * C, hs, 0.0f, dp, T, tt,
                               NH);                                        /* dP = dy v^T */
        sgemm_batched_rowmajor(1, 0, T, hs, T, 1.0f, p, T, tt, dy, C, hs, 1.0f, dv, 3 * C, hs,
                               NH);                                        /* dv += P^T dy */
    }
    int rows = B * NH * T;
    causal_softmax_backward_kernel<<<row_warp_blocks(rows), ROWS_PER_BLOCK * WARP>>>(datt, att,
                                                                                     rows, T);
    LAUNCH_CHECK();
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * 3 * C, *k = q + C;
        float *dq = dqkv + (size_t)b * T * 3 * C, *dk = dq + C;
        const float *ds = datt + (size_t)b * NH * tt;
        sgemm_batched_rowmajor(0, 0, T, hs, T, scale, ds, T, tt, k, 3 * C, hs, 1.0f, dq, 3 * C,
                               hs, NH);                                    /* dq += scale dS k */
        sgemm_batched_rowmajor(1, 0, T, hs, T, scale, ds, T, tt, q, 3 * C, hs, 1.0f, dk, 3 * C,
                               hs, NH);                                    /* dk += scale dS^T q */
    }
}


/* ---- attention by tiles: fused attention and ring attention's blocks ----
 * One tiled kernel set serves both (kernels.h): a "block" pairs query rows
 * [q0, q0 + n) of each sequence with key rows [k0, k0 + n) under a mask
 * (attention_keys_seen: query i sees keys j < seen(i)), keys and values in
 * rows kv_rs floats apart (v = k + C): ring attention's packed kv (2C), or
 * for one device's fused attention qkv itself (3C), q0 = k0 = 0, n = T,
 * causal. Many threads per (sequence, head), FlashAttention's tiles:
 *   forward  a thread per query row, the key and value rows of a tile of
 *            TILE_ROWS in shared memory for the whole thread block, an
 *            online softmax over them (running max, sum and output in
 *            registers), then out and lse;
 *   backward two passes that rebuild p = e^(s - lse) (no atomics, the same
 *            order every run): a thread per query row over tiles of keys
 *            (dq), and a thread per key row over tiles of queries, with
 *            their dout, lse and D (dk, dv).
 * Head sizes up to HS_MAX (the kit's configs: 16 to 64); the rows a thread
 * holds are HS-wide register arrays (a template per size class). */
#define TILE_ROWS 64
#define HS_MAX 128

struct AttnTiles {
    const float *q, *k, *v;  /* row 0 of sequence 0, head 0 */
    int q_rs, kv_rs;         /* floats between rows */
    float *out, *lse;
    float *dq, *dk, *dv;     /* backward; rows q_rs, kv_rs apart like q, k */
    const float *dout, *D;
    int T, C, NH, q0, k0, n, mask;
};

/* row i of sequence b's query run, key run: element offsets */
static __device__ size_t q_row(const AttnTiles &a, int b, int i) {
    return ((size_t)b * a.T + a.q0 + i) * a.q_rs;
}
static __device__ size_t kv_row(const AttnTiles &a, int b, int j) {
    return ((size_t)b * a.T + a.k0 + j) * a.kv_rs;
}

/* row i of sequence b's query run in out and dout (C wide) */
static __device__ size_t out_row(const AttnTiles &a, int b, int i) {
    return ((size_t)b * a.T + a.q0 + i) * a.C;
}
/* the keys the thread block's query rows see together: its last row's */
static __device__ int block_keys(const AttnTiles &a) {
    const int last = blockIdx.x * TILE_ROWS + TILE_ROWS - 1;
    return attention_keys_seen(last < a.n ? last : a.n - 1, a.n, a.mask);
}

/* Key rows [j0, j0 + TILE_ROWS) of head h into shared ks and vs (hs floats
 * a row; zeros past the run), the thread block's threads together */
static __device__ void load_key_tile(const AttnTiles &a, float *ks, float *vs, int b, int h,
                                     int j0) {
    const int hs = a.C / a.NH;
    for (int e = threadIdx.x; e < TILE_ROWS * hs; e += TILE_ROWS) {
        const int j = j0 + e / hs, d = e % hs;
        const size_t r = j < a.n ? kv_row(a, b, j) + h * hs + d : 0;
        ks[e] = j < a.n ? a.k[r] : 0.0f;
        vs[e] = j < a.n ? a.v[r] : 0.0f;
    }
}

/* grid (n / TILE_ROWS, B NH), TILE_ROWS threads; shared: a tile of k and v */
template <int HS>
static __global__ void attention_tiles_forward_kernel(AttnTiles a) {
    extern __shared__ float tile[];
    const int hs = a.C / a.NH, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    const int i = blockIdx.x * TILE_ROWS + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)hs);
    float *ks = tile, *vs = tile + TILE_ROWS * hs;
    float q[HS], y[HS], m = -INFINITY, sum = 0.0f;
    const int seen = i < a.n ? attention_keys_seen(i, a.n, a.mask) : 0;
    for (int d = 0; d < hs; d++) {
        q[d] = i < a.n ? a.q[q_row(a, b, i) + h * hs + d] : 0.0f;
        y[d] = 0.0f;
    }
    const int keys = block_keys(a);
    for (int j0 = 0; j0 < keys; j0 += TILE_ROWS) {
        load_key_tile(a, ks, vs, b, h, j0);
        __syncthreads();
        for (int j = 0; j < TILE_ROWS && j0 + j < seen; j++) {
            float s = 0.0f;
            for (int d = 0; d < hs; d++) s += q[d] * ks[j * hs + d];
            s *= scale;
            if (s > m) {  /* a new max: rescale what the earlier keys added */
                const float r = expf(m - s);
                sum *= r;
                for (int d = 0; d < hs; d++) y[d] *= r;
                m = s;
            }
            const float p = expf(s - m);
            sum += p;
            for (int d = 0; d < hs; d++) y[d] += p * vs[j * hs + d];
        }
        __syncthreads();
    }
    if (i >= a.n) return;
    const float inv = seen > 0 ? 1.0f / sum : 0.0f;
    float *o = a.out + out_row(a, b, i) + h * hs;
    for (int d = 0; d < hs; d++) o[d] = y[d] * inv;
    a.lse[(size_t)bh * a.T + a.q0 + i] = seen > 0 ? m + logf(sum) : -INFINITY;
}

/* dq: grid (n / TILE_ROWS, B NH), a thread per query row; shared: k, v */
template <int HS>
static __global__ void attention_tiles_dq_kernel(AttnTiles a) {
    extern __shared__ float tile[];
    const int hs = a.C / a.NH, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    const int i = blockIdx.x * TILE_ROWS + threadIdx.x;
    const float scale = 1.0f / sqrtf((float)hs);
    float *ks = tile, *vs = tile + TILE_ROWS * hs;
    float q[HS], dy[HS], dq[HS];
    const int seen = i < a.n ? attention_keys_seen(i, a.n, a.mask) : 0;
    const size_t l = (size_t)bh * a.T + a.q0 + i;
    const float lse = i < a.n ? a.lse[l] : 0.0f, Dl = i < a.n ? a.D[l] : 0.0f;
    for (int d = 0; d < hs; d++) {
        q[d] = i < a.n ? a.q[q_row(a, b, i) + h * hs + d] : 0.0f;
        dy[d] = i < a.n ? a.dout[out_row(a, b, i) + h * hs + d] : 0.0f;
        dq[d] = 0.0f;
    }
    const int keys = block_keys(a);
    for (int j0 = 0; j0 < keys; j0 += TILE_ROWS) {
        load_key_tile(a, ks, vs, b, h, j0);
        __syncthreads();
        for (int j = 0; j < TILE_ROWS && j0 + j < seen; j++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hs; d++) {
                s += q[d] * ks[j * hs + d];
                dp += dy[d] * vs[j * hs + d];
            }
            const float ds = expf(s * scale - lse) * (dp - Dl) * scale;
            for (int d = 0; d < hs; d++) dq[d] += ds * ks[j * hs + d];
        }
        __syncthreads();
    }
    if (i >= a.n) return;
    float *o = a.dq + q_row(a, b, i) + h * hs;
    for (int d = 0; d < hs; d++) o[d] += dq[d];
}

/* dk, dv: grid (n / TILE_ROWS, B NH), a thread per key row; shared: the
 * tile's q and dout rows, then its lse and D */
template <int HS>
static __global__ void attention_tiles_dkv_kernel(AttnTiles a) {
    extern __shared__ float tile[];
    const int hs = a.C / a.NH, bh = blockIdx.y, b = bh / a.NH, h = bh % a.NH;
    const int j = blockIdx.x * TILE_ROWS + threadIdx.x, first = blockIdx.x * TILE_ROWS;
    const float scale = 1.0f / sqrtf((float)hs);
    float *qs = tile, *dys = tile + TILE_ROWS * hs;
    float *ls = dys + TILE_ROWS * hs, *Ds = ls + TILE_ROWS;
    float k[HS], v[HS], dk[HS], dv[HS];
    for (int d = 0; d < hs; d++) {
        k[d] = j < a.n ? a.k[kv_row(a, b, j) + h * hs + d] : 0.0f;
        v[d] = j < a.n ? a.v[kv_row(a, b, j) + h * hs + d] : 0.0f;
        dk[d] = dv[d] = 0.0f;
    }
    /* the first query that sees this tile's first key: causal i >= j, strict i > j */
    const int start = a.mask == ATTN_FULL ? 0 : first + (a.mask == ATTN_CAUSAL_STRICT);
    for (int i0 = start / TILE_ROWS * TILE_ROWS; i0 < a.n; i0 += TILE_ROWS) {
        for (int e = threadIdx.x; e < TILE_ROWS * hs; e += TILE_ROWS) {
            const int i = i0 + e / hs, d = e % hs;
            qs[e] = i < a.n ? a.q[q_row(a, b, i) + h * hs + d] : 0.0f;
            dys[e] = i < a.n ? a.dout[out_row(a, b, i) + h * hs + d] : 0.0f;
        }
        if (i0 + (int)threadIdx.x < a.n) {
            const size_t l = (size_t)bh * a.T + a.q0 + i0 + threadIdx.x;
            ls[threadIdx.x] = a.lse[l];
            Ds[threadIdx.x] = a.D[l];
        }
        __syncthreads();
        for (int i = 0; i < TILE_ROWS && i0 + i < a.n; i++) {
            if (j >= a.n || j >= attention_keys_seen(i0 + i, a.n, a.mask)) continue;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < hs; d++) {
                s += qs[i * hs + d] * k[d];
                dp += dys[i * hs + d] * v[d];
            }
            const float p = expf(s * scale - ls[i]), ds = p * (dp - Ds[i]) * scale;
            for (int d = 0; d < hs; d++) {
                dv[d] += p * dys[i * hs + d];
                dk[d] += ds * qs[i * hs + d];
            }
        }
        __syncthreads();
    }
    if (j >= a.n) return;
    float *odk = a.dk + kv_row(a, b, j) + h * hs, *odv = a.dv + kv_row(a, b, j) + h * hs;
    for (int d = 0; d < hs; d++) {
        odk[d] += dk[d];
        odv[d] += dv[d];
    }
}

/* The head size's template: the smallest of 32, 64, HS_MAX that holds it */
#define ATTN_TILES_LAUNCH(kernel, grid, shared, a)                                             \
    do {                                                                                      \
        const int hs_ = (a).C / (a).NH;                                                       \
        if (hs_ > HS_MAX)                                                                     \
            die_at(__FILE__, __LINE__, "attention on the GPU takes heads of up to %d "      \
                   "channels, not %d", HS_MAX, hs_);                                          \
        if (hs_ <= 32) kernel<32><<<(grid), TILE_ROWS, (shared)>>>(a);                        \
        else if (hs_ <= 64) kernel<64><<<(grid), TILE_ROWS, (shared)>>>(a);                   \
        else { /* up to 66 KiB of tiles: past the 48 KiB a launch gets unasked */            \
            CUDA_CHECK(cudaFuncSetAttribute(kernel<HS_MAX>,                                   \
                                            cudaFuncAttributeMaxDynamicSharedMemorySize,      \
                                            (int)(shared)));                                  \
            kernel<HS_MAX><<<(grid), TILE_ROWS, (shared)>>>(a);                               \
        }                                                                                     \
        LAUNCH_CHECK();                                                                       \
    } while (0)

static void attention_tiles_forward(const AttnTiles &a, int B) {
    if (B == 0 || a.n == 0) return;
    const dim3 grid((a.n + TILE_ROWS - 1) / TILE_ROWS, B * a.NH);
    const size_t shared = 2 * TILE_ROWS * (size_t)(a.C / a.NH) * sizeof(float);
    ATTN_TILES_LAUNCH(attention_tiles_forward_kernel, grid, shared, a);
}

static void attention_tiles_backward(const AttnTiles &a, int B) {
    if (B == 0 || a.n == 0) return;
    const dim3 grid((a.n + TILE_ROWS - 1) / TILE_ROWS, B * a.NH);
    const size_t hs = a.C / a.NH;
    ATTN_TILES_LAUNCH(attention_tiles_dq_kernel, grid, 2 * TILE_ROWS * hs * sizeof(float), a);
    ATTN_TILES_LAUNCH(attention_tiles_dkv_kernel, grid, (2 * hs + 2) * TILE_ROWS * sizeof(float),
                      a);
}

void attention_fused_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C,
                                  int NH) {
    AttnTiles a = {};
    a.q = qkv, a.k = qkv + C, a.v = qkv + 2 * C, a.q_rs = a.kv_rs = 3 * C;
    a.out = out, a.lse = lse;
    a.T = T, a.C = C, a.NH = NH, a.n = T, a.mask = ATTN_CAUSAL;
    attention_tiles_forward(a, B);
}

void attention_fused_backward_cuda(float *dqkv, float *D, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int C,
                                   int NH) {
    attention_row_dot_cuda(D, dout, out, B, T, C, NH);
    AttnTiles a = {};
    a.q = qkv, a.k = qkv + C, a.v = qkv + 2 * C, a.q_rs = a.kv_rs = 3 * C;
    a.dq = dqkv, a.dk = dqkv + C, a.dv = dqkv + 2 * C, a.dout = dout, a.D = D;
    a.lse = (float *)lse;
    a.T = T, a.C = C, a.NH = NH, a.n = T, a.mask = ATTN_CAUSAL;
    attention_tiles_backward(a, B);
}

void attention_block_forward_cuda(float *out, float *lse, const float *qkv, const float *kv,
                                  int B, int T, int C, int NH, int q0, int k0, int n,
                                  int mask) {
    AttnTiles a = {};
    a.q = qkv, a.k = kv, a.v = kv + C, a.q_rs = 3 * C, a.kv_rs = 2 * C;
    a.out = out, a.lse = lse;
    a.T = T, a.C = C, a.NH = NH, a.q0 = q0, a.k0 = k0, a.n = n, a.mask = mask;
    attention_tiles_forward(a, B);
}

static __global__ void attention_merge_kernel(float *out, float *lse, const float *out_b,
                                              const float *lse_b, int B, int T, int C, int NH,
                                              int q0, int n) {
    const int hs = C / NH;
    GRID_STRIDE_LOOP(r, (size_t)B * NH * n) {
        const int b = (int)(r / ((size_t)NH * n)), h = (int)(r / n % NH), i = (int)(r % n);
        const size_t row = (size_t)b * T + q0 + i, l = ((size_t)b * NH + h) * T + q0 + i;
        lse[l] = lse_merge_row(out + row * C + h * hs, lse[l], out_b + row * C + h * hs,
                               lse_b[l], hs);
    }
}

void attention_merge_cuda(float *out, float *lse, const float *out_b, const float *lse_b, int B,
                          int T, int C, int NH, int q0, int n) {
    const size_t rows = (size_t)B * NH * n;
    if (rows == 0) return;
    attention_merge_kernel<<<elem_blocks(rows), ELEM_THREADS>>>(out, lse, out_b, lse_b, B, T, C,
                                                               NH, q0, n);
    LAUNCH_CHECK();
}

static __global__ void attention_row_dot_kernel(float *D, const float *dout, const float *out,
                                                int B, int T, int C, int NH) {
    const int hs = C / NH;
    GRID_STRIDE_LOOP(r, (size_t)B * NH * T) {
        const int b = (int)(r / ((size_t)NH * T)), h = (int)(r / T % NH), t = (int)(r % T);
        const size_t o = ((size_t)b * T + t) * C + h * hs;
        float dot = 0.0f;
        for (int d = 0; d < hs; d++) dot += dout[o + d] * out[o + d];
        D[r] = dot;
    }
}

void attention_row_dot_cuda(float *D, const float *dout, const float *out, int B, int T, int C,
                            int NH) {
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return;
    attention_row_dot_kernel<<<elem_blocks(rows), ELEM_THREADS>>>(D, dout, out, B, T, C, NH);
    LAUNCH_CHECK();
}

void attention_block_backward_cuda(float *dqkv, float *dkv, const float *dout, const float *qkv,
                                   const float *kv, const float *lse, const float *D, int B,
                                   int T, int C, int NH, int q0, int k0, int n, int mask) {
    AttnTiles a = {};
    a.q = qkv, a.k = kv, a.v = kv + C, a.q_rs = 3 * C, a.kv_rs = 2 * C;
    a.dq = dqkv, a.dk = dkv, a.dv = dkv + C, a.dout = dout, a.D = D, a.lse = (float *)lse;
    a.T = T, a.C = C, a.NH = NH, a.q0 = q0, a.k0 = k0, a.n = n, a.mask = mask;
    attention_tiles_backward(a, B);
}

static __global__ void copy_strided_kernel(float *dst, int dst_stride, const float *src,
                                           int src_stride, int cols, int accumulate, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        const size_t r = i / cols, c = i % cols;
        const float x = src[r * src_stride + c];
        float *d = dst + r * dst_stride + c;
        *d = accumulate ? *d + x : x;
    }
}

void copy_strided_cuda(float *dst, int dst_stride, const float *src, int src_stride, int rows,
                       int cols, int accumulate) {
    const size_t n = (size_t)rows * cols;
    if (n == 0) return;
    copy_strided_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dst, dst_stride, src, src_stride, cols,
                                                          accumulate, n);
    LAUNCH_CHECK();
}

static __global__ void fill_value_kernel(float *x, float value, size_t n) {
    GRID_STRIDE_LOOP(i, n) x[i] = value;
}

void fill_value_cuda(float *x, float value, size_t n) {
    if (n == 0) return;
    fill_value_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, value, n);
    LAUNCH_CHECK();
}

/* ------------------------------------------------------------------------ */
/* Elementwise                                                               */

static __global__ void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = gelu_tanh(inp[i]);
}

static __global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t n) {
    GRID_STRIDE_LOOP(i, n) dinp[i] += gelu_tanh_grad(inp[i]) * dout[i];
}

static __global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] = a[i] + b[i];
}

static __global__ void scale_kernel(float *x, float s, size_t n) {
    GRID_STRIDE_LOOP(i, n) x[i] *= s;
}

void gelu_forward_cuda(float *out, const float *inp, size_t n) {
    if (n == 0) return;
    gelu_forward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, inp, n);
    LAUNCH_CHECK();
}

void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t n) {
    if (n == 0) return;
    gelu_backward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dinp, inp, dout, n);
    LAUNCH_CHECK();
}

void residual_forward_cuda(float *out, const float *a, const float *b, size_t n) {
    if (n == 0) return;
    add_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, a, b, n);
    LAUNCH_CHECK();
}

void residual_backward_cuda(float *dinp, const float *dout, size_t n) {
    add_inplace_cuda(dinp, dout, n);
}

void add_inplace_cuda(float *x, const float *y, size_t n) {
    if (n == 0) return;
    add_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, x, y, n);   /* each i read, then written */
    LAUNCH_CHECK();
}

void scale_inplace_cuda(float *x, float s, size_t n) {
    if (n == 0) return;
    scale_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, s, n);
    LAUNCH_CHECK();
}

/* one thread per block of QUANT_BLOCK values: its scale, then its int8 */
static __global__ void quantize_kernel(float *scales, signed char *q, const float *x, size_t n) {
    GRID_STRIDE_LOOP(b, quant_blocks(n)) {
        const size_t lo = b * QUANT_BLOCK, hi = lo + QUANT_BLOCK < n ? lo + QUANT_BLOCK : n;
        const float scale = scales[b] = quant_scale(x + lo, hi - lo);
        for (size_t i = lo; i < hi; i++) q[i] = quant_value(x[i], scale);
    }
}
static __global__ void dequantize_kernel(float *x, const float *scales, const signed char *q,
                                         size_t n, int accumulate) {
    GRID_STRIDE_LOOP(i, n) {
        const float v = q[i] * scales[i / QUANT_BLOCK];
        x[i] = accumulate ? x[i] + v : v;
    }
}

void quantize_int8_cuda(void *packed, const float *x, size_t n) {
    if (n == 0) return;
    quantize_kernel<<<elem_blocks(quant_blocks(n)), ELEM_THREADS>>>(
        (float *)packed, (signed char *)packed + 4 * quant_blocks(n), x, n);
    LAUNCH_CHECK();
}

void dequantize_int8_cuda(float *x, const void *packed, size_t n, int accumulate) {
    if (n == 0) return;
    dequantize_kernel<<<elem_blocks(n), ELEM_THREADS>>>(
        x, (const float *)packed, (const signed char *)packed + 4 * quant_blocks(n), n, accumulate);
    LAUNCH_CHECK();
}

static __global__ void round_kernel(float *x, size_t n, int precision) {
    GRID_STRIDE_LOOP(i, n) x[i] = round_to_precision(x[i], precision);
}
static __global__ void narrow_kernel(uint16_t *dst, const float *src, size_t n, int precision) {
    GRID_STRIDE_LOOP(i, n) dst[i] = float_to_half(src[i], precision);
}
static __global__ void widen_kernel(float *dst, const uint16_t *src, size_t n, int precision) {
    GRID_STRIDE_LOOP(i, n) dst[i] = half_to_float(src[i], precision);
}

static __global__ void scale_half_kernel(uint16_t *x, float s, size_t n, int precision) {
    GRID_STRIDE_LOOP(i, n) x[i] = float_to_half(half_to_float(x[i], precision) * s, precision);
}

void round_inplace_cuda(float *x, size_t n, int precision) {
    if (n == 0) return;
    round_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, n, precision);
    LAUNCH_CHECK();
}
void narrow_to_half_cuda(uint16_t *dst, const float *src, size_t n, int precision) {
    if (n == 0) return;
    narrow_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dst, src, n, precision);
    LAUNCH_CHECK();
}
void widen_from_half_cuda(float *dst, const uint16_t *src, size_t n, int precision) {
    if (n == 0) return;
    widen_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dst, src, n, precision);
    LAUNCH_CHECK();
}

static __global__ void add_half_kernel(uint16_t *x, const uint16_t *y, size_t n, int precision) {
    GRID_STRIDE_LOOP(i, n)
        x[i] = float_to_half(half_to_float(x[i], precision) + half_to_float(y[i], precision),
                             precision);
}

void add_half_inplace_cuda(uint16_t *x, const uint16_t *y, size_t n, int precision) {
    if (n == 0) return;
    add_half_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, y, n, precision);
    LAUNCH_CHECK();
}

void scale_half_inplace_cuda(uint16_t *x, float s, size_t n, int precision) {
    if (n == 0) return;
    scale_half_kernel<<<elem_blocks(n), ELEM_THREADS>>>(x, s, n, precision);
    LAUNCH_CHECK();
}

void set_zero_cuda(float *x, size_t n) {
    if (n == 0) return;
    CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(float), 0));
}

/* ------------------------------------------------------------------------ */
/* Cross-entropy                                                             */

/* Softmax and loss of one row of V logits per block (V is large: 50257 for
 * GPT-2). Three passes over the row: the max, then p = e^(z - max) and its
 * sum, then p /= sum; loss = log(sum) - (z_target - max), which is -log p_t
 * without p_t's underflow.
 * probs may alias logits. Thread j only ever touches elements j, j + 256...,
 * reading each before writing it; z_target is read by thread 0 before the
 * first block reduction, and no thread writes before that reduction's
 * barrier. */
static __global__ void softmax_crossentropy_forward_kernel(float *losses, float *probs,
                                                           const float *logits, const int *targets,
                                                           int V) {
    int row = blockIdx.x;
    const float *z = logits + (size_t)row * V;
    float *p = probs + (size_t)row * V;
    float zt = threadIdx.x == 0 ? z[targets[row]] : 0.0f;

    float mx = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, z[i]);
    mx = block_allreduce(mx, MaxOp(), -INFINITY);

    float sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = expf(z[i] - mx);
        p[i] = e;
        sum += e;
    }
    sum = block_allreduce(sum, SumOp(), 0.0f);

    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
    if (threadIdx.x == 0) losses[row] = logf(sum) - (zt - mx);
}

/* dlogits = dloss * (p - onehot(target)), in place, one block per row.
 * __fmul_rn keeps the product rounded on its own (no fused multiply-add with
 * the subtraction), as the CPU's two statements round it: the same bits. */
static __global__ void crossentropy_backward_kernel(float *d, const int *targets, float dloss,
                                                    int V) {
    int row = blockIdx.x;
    int target = targets[row];
    float *dr = d + (size_t)row * V;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float g = __fmul_rn(dr[i], dloss);
        if (i == target) g -= dloss;
        dr[i] = g;
    }
}

/* The mean of N row losses, summed on the host in double, in row order, as
 * on the CPU (the copy waits for the kernels before it). */
static float mean_on_host(const float *losses, int N) {
    float *host = (float *)malloc((size_t)N * sizeof(float));
    CHECK(host, "out of memory");
    CUDA_CHECK(cudaMemcpy(host, losses, (size_t)N * sizeof(float), cudaMemcpyDeviceToHost));
    double total = 0.0;
    for (int n = 0; n < N; n++) total += host[n];
    free(host);
    return (float)(total / N);
}

float crossentropy_forward_cuda(float *losses, float *probs, const float *logits,
                                const int *targets, int N, int V) {
    if (N == 0) return NAN;   /* as the CPU's 0/0: a mean over no rows */
    softmax_crossentropy_forward_kernel<<<N, ROW_BLOCK_THREADS>>>(losses, probs, logits,
                                                                  targets, V);
    LAUNCH_CHECK();
    return mean_on_host(losses, N);
}

void crossentropy_backward_cuda(float *probs_to_dlogits, const int *targets, float dloss,
                                int N, int V) {
    if (N == 0) return;
    crossentropy_backward_kernel<<<N, ROW_BLOCK_THREADS>>>(probs_to_dlogits, targets, dloss,
                                                           V);
    LAUNCH_CHECK();
}

/* ------------------------------------------------------------------------ */
/* Vocabulary-parallel pieces (lab 04; kernels.h)                            */

static __global__ void vocab_embedding_forward_kernel(float *out, const int *tokens,
                                                      const float *wte, int first, int rows,
                                                      int C, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        size_t row = i / C, c = i % C;
        int r = tokens[row] - first;
        out[i] = r >= 0 && r < rows ? wte[(size_t)r * C + c] : 0.0f;
    }
}


static __global__ void position_forward_kernel(float *out, const float *wpe, int first_row,
                                               int T, int C, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        size_t row = i / C, c = i % C;
        out[i] += wpe[((first_row + row) % T) * C + c];
    }
}

/* thread (t, c) adds dout[b, t, c] for b in order, as the CPU */
static __global__ void position_backward_kernel(float *dwpe, const float *dout, int B, int T,
                                                int C) {
    size_t n = (size_t)T * C;
    GRID_STRIDE_LOOP(i, n) {
        float pe = dwpe[i];
        for (int b = 0; b < B; b++) pe += dout[(size_t)b * n + i];
        dwpe[i] = pe;
    }
}

static __global__ void bias_forward_kernel(float *out, const float *bias, int OC, size_t n) {
    GRID_STRIDE_LOOP(i, n) out[i] += bias[i % OC];
}

/* one block per row for the row reductions */
static __global__ void vocab_logits_max_kernel(float *maxes, const float *logits, int V,
                                               int valid) {
    const float *z = logits + (size_t)blockIdx.x * V;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < valid; i += blockDim.x) mx = fmaxf(mx, z[i]);
    mx = block_allreduce(mx, MaxOp(), -INFINITY);
    if (threadIdx.x == 0) maxes[blockIdx.x] = mx;
}

static __global__ void vocab_target_logit_kernel(float *out, const float *logits,
                                                 const int *targets, int first, int N, int V) {
    GRID_STRIDE_LOOP(n, (size_t)N) {
        int j = targets[n] - first;
        out[n] = j >= 0 && j < V ? logits[n * V + j] : 0.0f;
    }
}

static __global__ void vocab_softmax_exp_kernel(float *probs, float *sums, const float *logits,
                                                const float *maxes, int V, int valid) {
    const float *z = logits + (size_t)blockIdx.x * V;
    float *p = probs + (size_t)blockIdx.x * V, mx = maxes[blockIdx.x], sum = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float e = i < valid ? exp_nonpositive(z[i] - mx) : 0.0f;
        p[i] = e;
        sum += e;
    }
    sum = block_allreduce(sum, SumOp(), 0.0f);
    if (threadIdx.x == 0) sums[blockIdx.x] = sum;
}

static __global__ void vocab_crossentropy_finish_kernel(float *losses, float *probs,
                                                        const float *sums, const float *maxes,
                                                        const float *target_logits, int V) {
    float *p = probs + (size_t)blockIdx.x * V, inv = 1.0f / sums[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x) p[i] *= inv;
    if (threadIdx.x == 0)
        losses[blockIdx.x] =
            logf(sums[blockIdx.x]) - (target_logits[blockIdx.x] - maxes[blockIdx.x]);
}

static __global__ void vocab_crossentropy_backward_kernel(float *d, const int *targets,
                                                          float dloss, int first, int V) {
    int target = targets[blockIdx.x] - first;
    float *dr = d + (size_t)blockIdx.x * V;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float g = __fmul_rn(dr[i], dloss);  /* rounded alone, as the CPU's */
        if (i == target) g -= dloss;
        dr[i] = g;
    }
}

void vocab_embedding_forward_cuda(float *out, const int *tokens, const float *wte, int first,
                                  int rows, int N, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    vocab_embedding_forward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, tokens, wte, first,
                                                                     rows, C, n);
    LAUNCH_CHECK();
}

void vocab_embedding_backward_cuda(float *dwte, const float *dout, const int *tokens, int first,
                                   int rows, int N, int C) {
    embedding_rows_backward(dwte, dout, tokens, first, rows, N, C);
}

void position_forward_cuda(float *out, const float *wpe, int first_row, int N, int T, int C) {
    size_t n = (size_t)N * C;
    if (n == 0) return;
    position_forward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, wpe, first_row, T, C, n);
    LAUNCH_CHECK();
}

void position_backward_cuda(float *dwpe, const float *dout, int B, int T, int C) {
    size_t n = (size_t)T * C;
    if (n == 0 || B == 0) return;
    position_backward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(dwpe, dout, B, T, C);
    LAUNCH_CHECK();
}

void bias_forward_cuda(float *out, const float *bias, int N, int OC) {
    size_t n = (size_t)N * OC;
    if (n == 0) return;
    bias_forward_kernel<<<elem_blocks(n), ELEM_THREADS>>>(out, bias, OC, n);
    LAUNCH_CHECK();
}

void vocab_logits_max_cuda(float *maxes, const float *logits, int N, int V, int valid) {
    if (N == 0) return;
    vocab_logits_max_kernel<<<N, ROW_BLOCK_THREADS>>>(maxes, logits, V, valid);
    LAUNCH_CHECK();
}

void vocab_target_logit_cuda(float *out, const float *logits, const int *targets, int first,
                             int N, int V) {
    if (N == 0) return;
    vocab_target_logit_kernel<<<elem_blocks((size_t)N), ELEM_THREADS>>>(out, logits, targets,
                                                                       first, N, V);
    LAUNCH_CHECK();
}

void vocab_softmax_exp_cuda(float *probs, float *sums, const float *logits, const float *maxes,
                            int N, int V, int valid) {
    if (N == 0) return;
    vocab_softmax_exp_kernel<<<N, ROW_BLOCK_THREADS>>>(probs, sums, logits, maxes, V, valid);
    LAUNCH_CHECK();
}

float vocab_crossentropy_finish_cuda(float *losses, float *probs, const float *sums,
                                     const float *maxes, const float *target_logits, int N,
                                     int V) {
    if (N == 0) return NAN;
    vocab_crossentropy_finish_kernel<<<N, ROW_BLOCK_THREADS>>>(losses, probs, sums, maxes,
                                                              target_logits, V);
    LAUNCH_CHECK();
    return mean_on_host(losses, N);
}

void vocab_crossentropy_backward_cuda(float *probs_to_dlogits, const int *targets, float dloss,
                                      int first, int N, int V) {
    if (N == 0) return;
    vocab_crossentropy_backward_kernel<<<N, ROW_BLOCK_THREADS>>>(probs_to_dlogits, targets,
                                                                dloss, first, V);
    LAUNCH_CHECK();
}

/* ------------------------------------------------------------------------ */
/* Optimizer and norms                                                       */

static __global__ void adamw_kernel(float *params, const float *grads, float *m, float *v,
                                    size_t n, float lr, float beta1, float beta2, float eps,
                                    float wd, float c1, float c2) {
    GRID_STRIDE_LOOP(i, n)
        adamw_update_element(&params[i], &m[i], &v[i], grads[i], lr, beta1, beta2, eps, wd, c1,
                             c2);
}

static __global__ void adamw_half_kernel(float *params, const uint16_t *grads, float grad_scale,
                                         float *m, float *v, size_t n, int precision, float lr,
                                         float beta1, float beta2, float eps, float wd, float c1,
                                         float c2) {
    GRID_STRIDE_LOOP(i, n)
        adamw_update_element(&params[i], &m[i], &v[i],
                             half_to_float(grads[i], precision) * grad_scale, lr, beta1, beta2,
                             eps, wd, c1, c2);
}

void adamw_update_half_cuda(float *params, const uint16_t *grads, float grad_scale, float *m,
                            float *v, size_t n, int precision, float lr, float beta1, float beta2,
                            float eps, float weight_decay, int t) {
    if (n == 0) return;
    float c1 = 1.0f - powf(beta1, (float)t);
    float c2 = 1.0f - powf(beta2, (float)t);
    adamw_half_kernel<<<elem_blocks(n), ELEM_THREADS>>>(params, grads, grad_scale, m, v, n,
                                                        precision, lr, beta1, beta2, eps,
                                                        weight_decay, c1, c2);
    LAUNCH_CHECK();
}

void adamw_update_cuda(float *params, const float *grads, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       int t) {
    if (n == 0) return;
    /* bias corrections on the host with the CPU's powf: the same floats */
    float c1 = 1.0f - powf(beta1, (float)t);
    float c2 = 1.0f - powf(beta2, (float)t);
    adamw_kernel<<<elem_blocks(n), ELEM_THREADS>>>(params, grads, m, v, n, lr, beta1, beta2,
                                                   eps, weight_decay, c1, c2);
    LAUNCH_CHECK();
}

/* Sum of squares in two deterministic passes: a fixed grid of SUMSQ_BLOCKS
 * blocks, each grid-striding over x and reducing to one double, then one
 * block adding the SUMSQ_BLOCKS partials. The grid does not depend on the
 * GPU, so neither does the order of additions. Each term x^2 is exact in
 * double (24-bit mantissa squared), so the result differs from the CPU's
 * serial sum only by double rounding, ~1e-16 relative per term.
 * The partials and the total live in static __device__ memory (4 KiB, part
 * of the loaded module): no allocation per call. */
#define SUMSQ_BLOCKS 512
#define SUMSQ_THREADS 256
static __device__ double g_sumsq_partial[SUMSQ_BLOCKS];
static __device__ double g_sumsq_total;

static __global__ void sum_squares_partial_kernel(const float *x, size_t n) {
    double acc = 0.0;
    GRID_STRIDE_LOOP(i, n) {
        double xi = x[i];
        acc += xi * xi;
    }
    acc = block_allreduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0) g_sumsq_partial[blockIdx.x] = acc;
}

/* one block of SUMSQ_BLOCKS threads, thread j holding partial j */
static __global__ void sum_squares_final_kernel(void) {
    double total = block_allreduce(g_sumsq_partial[threadIdx.x], SumOp(), 0.0);
    if (threadIdx.x == 0) g_sumsq_total = total;
}

static __global__ void sum_squares_half_partial_kernel(const uint16_t *x, size_t n, int precision) {
    double acc = 0.0;
    GRID_STRIDE_LOOP(i, n) {
        double xi = half_to_float(x[i], precision);
        acc += xi * xi;
    }
    acc = block_allreduce(acc, SumOp(), 0.0);
    if (threadIdx.x == 0) g_sumsq_partial[blockIdx.x] = acc;
}

static double sum_squares_total(void) {
    LAUNCH_CHECK();
    sum_squares_final_kernel<<<1, SUMSQ_BLOCKS>>>();
    LAUNCH_CHECK();
    double total = 0.0;
    CUDA_CHECK(cudaMemcpyFromSymbol(&total, g_sumsq_total, sizeof total));
    return total;
}

double sum_squares_half_cuda(const uint16_t *x, size_t n, int precision) {
    if (n == 0) return 0.0;
    sum_squares_half_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS>>>(x, n, precision);
    return sum_squares_total();
}

double sum_squares_cuda(const float *x, size_t n) {
    if (n == 0) return 0.0;
    sum_squares_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS>>>(x, n);
    return sum_squares_total();
}

/* ------------------------------------------------------------------------ */
/* Mixture of experts                                                        */

/* Element i = r*C + c of the destination: a warp reads 32 adjacent floats
 * of one source row. Each destination element is one thread's, its terms
 * added in slot order: deterministic, no atomics, and the CPU's order. */
static __global__ void gather_rows_kernel(float *dst, const float *src, const int *idx,
                                          const float *weight, int C, size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        size_t r = i / C, c = i % C;
        dst[i] = (weight ? weight[r] : 1.0f) * src[(size_t)idx[r] * C + c];
    }
}

void gather_rows_cuda(float *dst, const float *src, const int *idx, const float *weight, int n,
                      int C) {
    size_t total = (size_t)n * C;
    if (total == 0) return;
    gather_rows_kernel<<<elem_blocks(total), ELEM_THREADS>>>(dst, src, idx, weight, C, total);
    LAUNCH_CHECK();
}

static __global__ void gather_sum_rows_kernel(float *dst, const float *src, const int *slots,
                                              const float *weight, int k, int C, int accumulate,
                                              size_t n) {
    GRID_STRIDE_LOOP(i, n) {
        size_t t = i / C, c = i % C;
        float acc = accumulate ? dst[i] : 0.0f;
        for (int j = 0; j < k; j++) {
            const int s = slots[t * k + j];
            if (s >= 0) acc += (weight ? weight[s] : 1.0f) * src[(size_t)s * C + c];
        }
        dst[i] = acc;
    }
}

void gather_sum_rows_cuda(float *dst, const float *src, const int *slots, const float *weight,
                          int N, int k, int C, int accumulate) {
    size_t total = (size_t)N * C;
    if (total == 0) return;
    gather_sum_rows_kernel<<<elem_blocks(total), ELEM_THREADS>>>(dst, src, slots, weight, k, C,
                                                                 accumulate, total);
    LAUNCH_CHECK();
}

/* one warp per row: strided partial dots, then the butterfly */
static __global__ void gather_row_dot_kernel(float *out, const float *a, const float *b,
                                             const int *idx, int n, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= n) return;
    const float *x = a + (size_t)row * C, *y = b + (size_t)idx[row] * C;
    float dot = 0.0f;
    for (int c = lane; c < C; c += WARP) dot += x[c] * y[c];
    dot = warp_allreduce(dot, SumOp());
    if (lane == 0) out[row] = dot;
}

void gather_row_dot_cuda(float *out, const float *a, const float *b, const int *idx, int n,
                         int C) {
    if (n == 0) return;
    gather_row_dot_kernel<<<row_warp_blocks(n), ROWS_PER_BLOCK * WARP>>>(out, a, b, idx, n, C);
    LAUNCH_CHECK();
}

/* one thread per row of E (tens of) experts: math_shared.h's serial row */
static __global__ void softmax_rows_forward_kernel(float *probs, const float *logits, int N,
                                                   int E) {
    GRID_STRIDE_LOOP(n, (size_t)N)
        softmax_row_forward(probs + n * E, logits + n * E, E);
}

static __global__ void softmax_rows_backward_kernel(float *d, const float *probs, int N, int E) {
    GRID_STRIDE_LOOP(n, (size_t)N) softmax_row_backward(d + n * E, probs + n * E, E);
}

void softmax_rows_forward_cuda(float *probs, const float *logits, int N, int E) {
    if (N == 0) return;
    softmax_rows_forward_kernel<<<elem_blocks((size_t)N), ELEM_THREADS>>>(probs, logits, N, E);
    LAUNCH_CHECK();
}

void softmax_rows_backward_cuda(float *dprobs_to_dlogits, const float *probs, int N, int E) {
    if (N == 0) return;
    softmax_rows_backward_kernel<<<elem_blocks((size_t)N), ELEM_THREADS>>>(dprobs_to_dlogits,
                                                                           probs, N, E);
    LAUNCH_CHECK();
}
