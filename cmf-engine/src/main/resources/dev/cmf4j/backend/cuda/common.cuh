// The helpers the engine's kernel files share (kernels.cu, matvec_q4.cu, resident.cu, resident_arch.cu,
// resident_embryo.cu, resident_o1.cu): 16-bit element types and their conversions, -inf, the warp reductions. Included
// as `#include "common.cuh"`:
// nvcc finds it beside the .cu, the engine's NVRTC fallback and the stamps take the .cu with it inlined
// (KernelSource), and the tests' warp emulator, which compiles every kernel file in one unit, includes it once.
#ifndef CMF4J_COMMON_CUH
#define CMF4J_COMMON_CUH

typedef unsigned short r_u16;
typedef signed char r_i8;

#define R_NEG_INF __int_as_float(0xff800000)   // -inf (NVRTC has no math.h)

__device__ __forceinline__ float r_bf16(r_u16 h) { return __uint_as_float(((unsigned) h) << 16); }

__device__ __forceinline__ float r_f16(r_u16 h) {
#ifdef __CUDA_ARCH__
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    return emulated_f16_to_f32(h);   // compiled for the CPU by the tests' warp emulator (kernel_emulator.cpp)
#endif
}

__device__ __forceinline__ r_u16 r_to_f16(float v) {   // round to nearest even
#ifdef __CUDA_ARCH__
    r_u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
    return h;
#else
    _Float16 h = (_Float16) v;
    r_u16 b;
    memcpy(&b, &h, 2);
    return b;
#endif
}

// The sum and the maximum over a warp, every lane getting it (the xor-shuffle tree: the same order in every lane).
__device__ __forceinline__ float r_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float r_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (any blockDim that is a multiple of 32, ≤ 1024); every thread gets the total. red: 32 floats of
// shared memory.
__device__ __forceinline__ float r_block_sum(float v, float* red) {
    v = r_warp_sum(v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();   // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < warps; i++) s += red[i];
    return s;
}

// 4 int8 weights (one 4-byte load), streamed past L1 (L1 keeps the activations).
__device__ __forceinline__ unsigned r_ld4(const void* p) {
    unsigned v;
#ifdef __CUDA_ARCH__
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
#else
    v = *static_cast<const unsigned*>(p);
#endif
    return v;
}

#endif
