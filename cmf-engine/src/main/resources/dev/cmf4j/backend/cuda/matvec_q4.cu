// cmf4j CUDA kernels for the 4-bit CMF dtypes (q4_block, q4tp), reading the payload as the file stores it
// (CMF_FORMAT.md §2). Built into matvec_q4.fatbin by tools/build-cuda-kernels.sh (rerun it after every edit
// and commit the .fatbin and .fatbin.stamp with this file); NVRTC compiles this source at run time only when
// that fatbin is stale. Plain CUDA C over common.cuh and q4.cuh (the decoding, shared with resident.cu). Every kernel
// computes in f32.
//
// Same signature and launch shape as kernels.cu's matvec_* (ArgPack): one warp per (row, token), block =
// 8 warps = 8 rows, grid = (ceil(rows/8), tokens); y[t*rows + r] = sum_c W[row0+r, c] * x[t*cols + c].
// Lanes read 4 bytes of nibbles (8 weights) each, 128 bytes per warp step, so weight reads are coalesced.

#include "common.cuh"
#include "q4.cuh"

// q4_block (q4.cuh): w = the nibble plane, rs = the f16 scale plane (one per group, right after the nibbles); cf unused.
__device__ __forceinline__ void matvec_q4_block_body(const void* __restrict__ w, const float* __restrict__ rs,
        const float* __restrict__ x, float* __restrict__ y, long long row0, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    float acc = r_warp_sum(q4_block_row<4>(w, reinterpret_cast<const r_u16*>(rs), x + (long long) t * cols, row0 + r, cols, lane));
    if (lane == 0) y[(long long) t * rows + r] = acc;
}

// q4tp (q4.cuh; cols a multiple of 32, as the format requires): w = the nibble plane (rows·gpr·16); rs = per stored
// row {exp2(lo), exp2(step)} as f32 pairs (computed on the host, correctly rounded as CMF defines them); cf = the
// codes plane (per row ceil(gpr·5/8) bytes).
__device__ __forceinline__ void matvec_q4tp_body(const void* __restrict__ w, const float* __restrict__ rs,
        const float* __restrict__ cf, const float* __restrict__ x, float* __restrict__ y, long long row0, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;   // whole warps leave together: r is the same on every lane of a warp
    int t = blockIdx.y;
    float acc = r_warp_sum(q4tp_row<4>(w, rs, cf, x + (long long) t * cols, row0 + r, cols, lane));
    if (lane == 0) y[(long long) t * rows + r] = acc;
}

#define MATVEC_Q4(NAME, BODY)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf, \
        const float* x, float* y, long long row0, int rows, int cols) {                                    \
        BODY;                                                                                            \
    }

MATVEC_Q4(matvec_q4_block, matvec_q4_block_body(w, rs, x, y, row0, rows, cols))
MATVEC_Q4(matvec_q4tp, matvec_q4tp_body(w, rs, cf, x, y, row0, rows, cols))
