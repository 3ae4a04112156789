// Kernels that compute a window of nodes in one pass (crate::plan::fusion_windows), each with the
// arithmetic of the nodes it replaces, in their order.

// RMS_NORM of each row of a, then MUL by w (broadcast as binary_op's second source): the norm's
// value is rounded to f32 as the unfused RMS_NORM stores it, then multiplied. One block per row.
extern "C" __global__ void rms_norm_mul_op(TT d, TT a, TT w, float eps) {
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    float s2 = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(a, i, i1, i2, i3);
        s2 += x * x;
    }
    const float scale = rsqrtf(block_sum(s2) / n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float normed = ld(a, i, i1, i2, i3) * scale;
        const float m = ld(w, i % w.ne[0], i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        st(d, i, i1, i2, i3, normed * m);
    }
}

// ADD of two rows of the same shape (the residual), then RMS_NORM of the sum and MUL by w: the
// sum is stored (later nodes read it) and, as f32, is what the norm reads, as the unfused
// nodes do; the norm as rms_norm_mul_op. One block per row. The sum may take a source's
// memory (the allocator runs ADD in place), so the second pass reads the stored sum (each
// thread its own elements, written by itself in the first pass), never a or b again.
extern "C" __global__ void add_rms_norm_mul_op(TT sum, TT a, TT b, TT d, TT w, float eps) {
    const i64 r = blockIdx.x, i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
    const i64 n = a.ne[0];
    float s2 = 0.0f;
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(a, i, i1, i2, i3) + ld(b, i, i1, i2, i3);
        st(sum, i, i1, i2, i3, x);
        s2 += x * x;
    }
    const float scale = rsqrtf(block_sum(s2) / n + eps);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = ld(sum, i, i1, i2, i3);
        const float m = ld(w, i % w.ne[0], i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
        st(d, i, i1, i2, i3, x * scale * m);
    }
}
