// cmf4j CUDA kernels. Built into kernels.fatbin by tools/build-cuda-kernels.sh (rerun it after every
// edit and commit the .fatbin and .fatbin.stamp with this file); NVRTC compiles this source at run time
// only when that fatbin is stale. Plain CUDA C over common.cuh (inlined for NVRTC by KernelSource).
// Every kernel computes in f32.

#include "common.cuh"

// Weight element kinds: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f; scales come separately).
template <int K>
__device__ __forceinline__ void load4(const void* __restrict__ w, long long i, float* o) {
    if (K == 0) {
        float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    } else if (K == 1 || K == 2) {
        uint2 v = *reinterpret_cast<const uint2*>(static_cast<const r_u16*>(w) + i);
        r_u16 h0 = v.x & 0xffff, h1 = v.x >> 16, h2 = v.y & 0xffff, h3 = v.y >> 16;
        if (K == 1) { o[0] = r_bf16(h0); o[1] = r_bf16(h1); o[2] = r_bf16(h2); o[3] = r_bf16(h3); }
        else { o[0] = r_f16(h0); o[1] = r_f16(h1); o[2] = r_f16(h2); o[3] = r_f16(h3); }
    } else {
        char4 v = *reinterpret_cast<const char4*>(static_cast<const signed char*>(w) + i);
        o[0] = (float) v.x; o[1] = (float) v.y; o[2] = (float) v.z; o[3] = (float) v.w;
    }
}

template <int K>
__device__ __forceinline__ float load1(const void* __restrict__ w, long long i) {
    if (K == 0) return static_cast<const float*>(w)[i];
    if (K == 1) return r_bf16(static_cast<const r_u16*>(w)[i]);
    if (K == 2) return r_f16(static_cast<const r_u16*>(w)[i]);
    return (float) static_cast<const signed char*>(w)[i];
}

// y[t*rows + r] = rs[row0+r] * sum_c W[row0+r, c] * cf[c] * x[t*cols + c]   (rs, cf optional: null = 1)
// One warp per (row, token): lanes read 4 consecutive weights each, 128 per warp step, so weight
// and activation reads are both coalesced (the layout GPU_NOTES measured at 80%+ of bandwidth).
// Block = 8 warps = 8 rows; grid = (ceil(rows/8), tokens).
template <int K>
__device__ __forceinline__ void matvec(const void* __restrict__ w, const float* __restrict__ rs,
                                       const float* __restrict__ cf, const float* __restrict__ x,
                                       float* __restrict__ y, long long row0, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    long long base = (row0 + r) * (long long) cols;
    const float* __restrict__ xt = x + (long long) t * cols;
    float acc = 0.f;
    if ((cols & 3) == 0) {
        for (int c = lane * 4; c < cols; c += 128) {
            float wv[4];
            load4<K>(w, base + c, wv);
            float4 xv = *reinterpret_cast<const float4*>(xt + c);
            if (cf != nullptr) {
                float4 f = *reinterpret_cast<const float4*>(cf + c);
                xv.x *= f.x; xv.y *= f.y; xv.z *= f.z; xv.w *= f.w;
            }
            acc += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float xv = xt[c];
            if (cf != nullptr) xv *= cf[c];
            acc += load1<K>(w, base + c) * xv;
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        if (rs != nullptr) acc *= rs[row0 + r];
        y[(long long) t * rows + r] = acc;
    }
}

#define MATVEC(NAME, K)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf, \
        const float* x, float* y, long long row0, int rows, int cols) {                                    \
        matvec<K>(w, rs, cf, x, y, row0, rows, cols);                                                    \
    }

MATVEC(matvec_f32, 0)
MATVEC(matvec_bf16, 1)
MATVEC(matvec_f16, 2)
MATVEC(matvec_q8, 3)
