/* half_gemm.h: mixed precision's GEMM on the CPU. C (M,N) = op(A) op(B)
 * + beta C, row-major and contiguous (op(A) is (M,K), op(B) (K,N); a
 * transposed operand is stored the other way round), with A and B read in
 * a 2-byte format (precision.h: their values rounded to it) and the
 * products summed in fp32, C fp32.
 *
 * Two ways, the same numbers but the order of the sums:
 *   oneDNN   its matmul on bf16 (or fp16) copies of A and B, where it has a
 *            kernel for the format on this CPU (AVX512-BF16, AMX-BF16,
 *            AVX512-FP16); its reference code is not used, being slower
 *            than the other way;
 *   emulated A and B rounded to the format in fp32 copies, then OpenBLAS's
 *            sgemm: a product of two 2-byte numbers is exact in fp32.
 * half_gemm_backend says which one a format gets (decided once per
 * process). The copies live in buffers that only grow, outside memory.csv
 * like the BLAS libraries' own; one thread calls at a time.
 */
#ifndef HALF_GEMM_H
#define HALF_GEMM_H

void half_gemm(int precision, int trans_a, int trans_b, int M, int N, int K, const float *A,
               const float *B, float beta, float *C);

/* "onednn IMPL" (oneDNN's implementation name) or "emulated" */
const char *half_gemm_backend(int precision);

#endif
