// Element-wise ops on contiguous f32 rows. Binary ops broadcast src1 over rows: element i of
// src0 meets element i % n1 of src1 (ggml's repeat of a smaller src1 along dims 1..3).

#define BINARY(name, expr)                                                                    \
    extern "C" __global__ void name(const float *a, const float *b, float *dst, i64 n,       \
                                    i64 n1) {                                                \
        const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;                            \
        if (i >= n) return;                                                                   \
        const float x = a[i], y = b[i % n1];                                                  \
        dst[i] = (expr);                                                                      \
    }

BINARY(add_f32, x + y)
BINARY(sub_f32, x - y)
BINARY(mul_f32, x * y)
BINARY(div_f32, x / y)

#define UNARY(name, expr)                                                                     \
    extern "C" __global__ void name(const float *src, float *dst, i64 n) {                  \
        const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;                            \
        if (i >= n) return;                                                                   \
        const float x = src[i];                                                               \
        dst[i] = (expr);                                                                      \
    }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// ggml's tanh approximation of GELU.
__device__ __forceinline__ float gelu(float x) {
    const float c = 0.797884560802865f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(c * x * (1.0f + 0.044715f * x * x)));
}

UNARY(silu_f32, silu(x))
UNARY(gelu_f32, gelu(x))
UNARY(relu_f32, fmaxf(x, 0.0f))
UNARY(neg_f32, -x)
UNARY(sqr_f32, x * x)
UNARY(sqrt_f32, sqrtf(x))
UNARY(tanh_f32, tanhf(x))

// dst = x * scale + bias (ggml_scale_bias).
extern "C" __global__ void scale_f32(const float *src, float *dst, float scale, float bias,
                                     i64 n) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] * scale + bias;
}

// Gated units on separate gate and up rows (ggml_swiglu_split / ggml_geglu_split).
extern "C" __global__ void swiglu_f32(const float *g, const float *u, float *dst, i64 n) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = silu(g[i]) * u[i];
}

extern "C" __global__ void geglu_f32(const float *g, const float *u, float *dst, i64 n) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = gelu(g[i]) * u[i];
}

// Conversions for copies into the KV cache and back.
extern "C" __global__ void cpy_f32_f16(const float *src, u16 *dst, i64 n) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = f2h(src[i]);
}

extern "C" __global__ void cpy_f16_f32(const u16 *src, float *dst, i64 n) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = h2f(src[i]);
}
