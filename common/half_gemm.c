#include "half_gemm.h"

#include <cblas.h>
#include <dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels_backend.h"
#include "precision.h"

#define DNNL_CHECK(call)                                                              \
    do {                                                                              \
        dnnl_status_t s_ = (call);                                                    \
        CHECK(s_ == dnnl_success, "%s failed: oneDNN status %d", #call, (int)s_);     \
    } while (0)

/* ---- buffers that only grow ------------------------------------------------ */

typedef struct {
    void *p;
    size_t bytes;
} Grown;

static void *grown(Grown *g, size_t bytes) {
    if (bytes > g->bytes) {
        free(g->p);
        g->p = malloc(bytes);
        CHECK(g->p, "out of memory for a GEMM's 2-byte copy (%zu bytes)", bytes);
        g->bytes = bytes;
    }
    return g->p;
}

static Grown g_a, g_b;

/* ---- oneDNN's matmul, one primitive per shape ------------------------------ */

static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;

typedef struct {
    int precision, trans_a, trans_b, M, N, K, accumulate;
    int native;                 /* 0: oneDNN has only reference code for it */
    char impl[48];              /* oneDNN's implementation, or "" */
    dnnl_primitive_t matmul;
    dnnl_memory_t a, b, c;      /* their data handles set at each call */
} Shape;

/* The shapes seen, up to MAX_SHAPES; then each new one takes the place of
 * the oldest (a mixture of experts gives every expert its own row count) */
enum { MAX_SHAPES = 128 };
static Shape g_shapes[MAX_SHAPES];
static int g_num_shapes, g_next_evicted;

static void shape_destroy(Shape *s) {
    if (!s->native) return;
    dnnl_memory_destroy(s->a);
    dnnl_memory_destroy(s->b);
    dnnl_memory_destroy(s->c);
    dnnl_primitive_destroy(s->matmul);
}

/* A row-major (rows, cols) operand, stored transposed when trans */
static void operand_desc(dnnl_memory_desc_t *md, int rows, int cols, int trans,
                         dnnl_data_type_t type) {
    const dnnl_dims_t dims = {rows, cols};
    const dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
    DNNL_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, type, strides));
}

static void shape_create(Shape *s) {
    if (!g_engine) {
        DNNL_CHECK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
        DNNL_CHECK(dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags));
    }
    const dnnl_data_type_t half = s->precision == PRECISION_FP16 ? dnnl_f16 : dnnl_bf16;
    dnnl_memory_desc_t a, b, c;
    operand_desc(&a, s->M, s->K, s->trans_a, half);
    operand_desc(&b, s->K, s->N, s->trans_b, half);
    operand_desc(&c, s->M, s->N, 0, dnnl_f32);
    dnnl_matmul_desc_t desc;
    DNNL_CHECK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t post;
    DNNL_CHECK(dnnl_primitive_attr_create(&attr));
    DNNL_CHECK(dnnl_post_ops_create(&post));
    if (s->accumulate) DNNL_CHECK(dnnl_post_ops_append_sum(post, 1.0f));  /* C += */
    DNNL_CHECK(dnnl_primitive_attr_set_post_ops(attr, post));
    dnnl_primitive_desc_t pd;
    const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL);
    dnnl_post_ops_destroy(post);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) return;  /* no such matmul here: emulated */
    const char *impl = "";
    DNNL_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    s->native = strncmp(impl, "ref", 3) != 0;
    snprintf(s->impl, sizeof s->impl, "%s", impl);
    if (s->native) {
        DNNL_CHECK(dnnl_primitive_create(&s->matmul, pd));
        DNNL_CHECK(dnnl_memory_create(&s->a, &a, g_engine, DNNL_MEMORY_NONE));
        DNNL_CHECK(dnnl_memory_create(&s->b, &b, g_engine, DNNL_MEMORY_NONE));
        DNNL_CHECK(dnnl_memory_create(&s->c, &c, g_engine, DNNL_MEMORY_NONE));
    }
    dnnl_primitive_desc_destroy(pd);
}

static Shape *shape_of(const Shape *key) {
    for (int i = 0; i < g_num_shapes; i++) {
        const Shape *s = &g_shapes[i];
        if (s->precision == key->precision && s->trans_a == key->trans_a &&
            s->trans_b == key->trans_b && s->M == key->M && s->N == key->N && s->K == key->K &&
            s->accumulate == key->accumulate)
            return &g_shapes[i];
    }
    Shape *s;
    if (g_num_shapes < MAX_SHAPES) {
        s = &g_shapes[g_num_shapes++];
    } else {
        s = &g_shapes[g_next_evicted];
        g_next_evicted = (g_next_evicted + 1) % MAX_SHAPES;
        shape_destroy(s);
    }
    *s = *key;
    shape_create(s);
    return s;
}

static void onednn_gemm(Shape *s, const float *A, const float *B, float *C) {
    const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
    uint16_t *a = grown(&g_a, na * sizeof(uint16_t)), *b = grown(&g_b, nb * sizeof(uint16_t));
    narrow_to_half_cpu(a, A, na, s->precision);
    narrow_to_half_cpu(b, B, nb, s->precision);
    DNNL_CHECK(dnnl_memory_set_data_handle(s->a, a));
    DNNL_CHECK(dnnl_memory_set_data_handle(s->b, b));
    DNNL_CHECK(dnnl_memory_set_data_handle(s->c, C));
    const dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, s->a}, {DNNL_ARG_WEIGHTS, s->b}, {DNNL_ARG_DST, s->c}};
    DNNL_CHECK(dnnl_primitive_execute(s->matmul, g_stream, 3, args));
    DNNL_CHECK(dnnl_stream_wait(g_stream));
}

/* ---- emulated ---------------------------------------------------------------- */

static void emulated_gemm(const Shape *s, const float *A, const float *B, float beta, float *C) {
    const size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N;
    float *a = grown(&g_a, na * sizeof(float)), *b = grown(&g_b, nb * sizeof(float));
    memcpy(a, A, na * sizeof(float));
    memcpy(b, B, nb * sizeof(float));
    round_inplace_cpu(a, na, s->precision);
    round_inplace_cpu(b, nb, s->precision);
    cblas_sgemm(CblasRowMajor, s->trans_a ? CblasTrans : CblasNoTrans,
                s->trans_b ? CblasTrans : CblasNoTrans, s->M, s->N, s->K, 1.0f, a,
                s->trans_a ? s->M : s->K, b, s->trans_b ? s->K : s->N, beta, C, s->N);
}

void half_gemm(int precision, int trans_a, int trans_b, int M, int N, int K, const float *A,
               const float *B, float beta, float *C) {
    CHECK(precision == PRECISION_BF16 || precision == PRECISION_FP16,
          "half_gemm of precision %d", precision);
    CHECK(beta == 0.0f || beta == 1.0f, "half_gemm: beta %g (0 or 1)", beta);
    if (M == 0 || N == 0) return;
    const Shape key = {precision, trans_a, trans_b, M, N, K, beta == 1.0f, 0, "", NULL, NULL, NULL,
                       NULL};
    Shape *s = K > 0 ? shape_of(&key) : NULL;
    if (s && s->native) onednn_gemm(s, A, B, C);
    else emulated_gemm(&key, A, B, beta, C);
}

const char *half_gemm_backend(int precision) {
    static char names[PRECISION_NUM][64];
    char *name = names[precision];
    if (!name[0]) {  /* a GPT-like shape: what most of a run's GEMMs get */
        const Shape key = {precision, 0, 1, 256, 256, 256, 0, 0, "", NULL, NULL, NULL, NULL};
        const Shape *s = shape_of(&key);
        snprintf(name, sizeof names[0], "%s%s", s->native ? "onednn " : "emulated",
                 s->native ? s->impl : "");
    }
    return name;
}
