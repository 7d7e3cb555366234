// cmf4j CUDA kernels for the 4-bit CMF dtypes (q4_block, q4tp), reading the payload as the file stores it
// (CMF_FORMAT.md §2). Built into matvec_q4.fatbin by tools/build-cuda-kernels.sh (rerun it after every edit
// and commit the .fatbin and .fatbin.stamp with this file); NVRTC compiles this source at run time only when
// that fatbin is stale. Plain CUDA C over common.cuh. Every kernel computes in f32.
//
// Same signature and launch shape as kernels.cu's matvec_* (ArgPack): one warp per (row, token), block =
// 8 warps = 8 rows, grid = (ceil(rows/8), tokens); y[t*rows + r] = sum_c W[row0+r, c] * x[t*cols + c].
// Lanes read 4 bytes of nibbles (8 weights) each, 128 bytes per warp step, so weight reads are coalesced.

#include "common.cuh"

typedef unsigned char u8;

// q - 8 as a float for a nibble q in 0..15, exactly: the bits of 2^23 + q minus (2^23 + 8) (no I2F).
__device__ __forceinline__ float centred(unsigned q) { return __int_as_float(0x4B000000 | q) - 8388616.f; }

// sum over the 8 weights of one 4-byte nibble word (element 2k = low nibble of byte k, 2k+1 = high) times x[0..8)
__device__ __forceinline__ float dot8(unsigned v, const float* __restrict__ x) {
    float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
    return centred(v & 15) * a.x + centred((v >> 4) & 15) * a.y + centred((v >> 8) & 15) * a.z
         + centred((v >> 12) & 15) * a.w + centred((v >> 16) & 15) * b.x + centred((v >> 20) & 15) * b.y
         + centred((v >> 24) & 15) * b.z + centred(v >> 28) * b.w;
}

__device__ __forceinline__ unsigned nibble(const u8* __restrict__ nib, long long byteIndex, int odd) {
    unsigned b = nib[byteIndex];
    return odd ? b >> 4 : b & 15;
}

// q4_block: groups of 32 over the FLATTENED tensor; w = the nibble plane, rs = the f16 scale plane (one per
// group, right after the nibbles); cf unused. When cols % 32 == 0 a row is whole groups and the vector path
// runs; otherwise groups straddle rows and each weight finds its group from its flat index.
__device__ __forceinline__ void matvec_q4_block_body(const void* __restrict__ w, const float* __restrict__ rs,
        const float* __restrict__ x, float* __restrict__ y, long long row0, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    const u8* __restrict__ nib = static_cast<const u8*>(w);
    const r_u16* __restrict__ scales = reinterpret_cast<const r_u16*>(rs);
    const float* __restrict__ xt = x + (long long) t * cols;
    long long first = (row0 + r) * (long long) cols;   // flat index of the row's first weight
    float acc = 0.f;
    if ((cols & 31) == 0) {
        long long g0 = first >> 5;
        const unsigned* __restrict__ words = reinterpret_cast<const unsigned*>(nib + g0 * 16);
        // lane L of a step reads word L: group L/4 of the step's 8, weights (L%4)*8 .. +8 of it
        for (int c = lane * 8; c < cols; c += 256) {
            unsigned v = words[c >> 3];
            float s = r_f16(scales[g0 + (c >> 5)]);
            acc += s * dot8(v, xt + c);
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            long long i = first + c;
            acc += centred(nibble(nib, (i >> 5) * 16 + ((i & 31) >> 1), (int) (i & 1))) * r_f16(scales[i >> 5]) * xt[c];
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[(long long) t * rows + r] = acc;
}

// The 5-bit code of group g from a row's LSB-first code stream of `bytes` bytes.
__device__ __forceinline__ int tp_code(const u8* __restrict__ codes, int g, int bytes) {
    int bit = g * 5, at = bit >> 3;
    unsigned v = codes[at];
    if (at + 1 < bytes) v |= (unsigned) codes[at + 1] << 8;
    return (v >> (bit & 7)) & 31;
}

// q4tp (cols a multiple of 32, as the format requires): w = the nibble plane (rows·gpr·16); rs = per stored
// row {exp2(lo), exp2(step)} as f32 pairs (computed on the host, correctly rounded as CMF defines them);
// cf = the codes plane (per row ceil(gpr·5/8) bytes). Group scale = t[code] with t[0] = exp2(lo),
// t[c] = t[c-1]·exp2(step) in f32: lane L builds rung L by the same L sequential products (bit-exact with
// the CPU), then each group's scale is a shuffle from the lane holding its rung. Loops run the same trip
// count on every lane so the shuffles see the whole warp.
__device__ __forceinline__ void matvec_q4tp_body(const void* __restrict__ w, const float* __restrict__ rs,
        const float* __restrict__ cf, const float* __restrict__ x, float* __restrict__ y, long long row0, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;   // whole warps leave together: r is the same on every lane of a warp
    int t = blockIdx.y;
    long long sr = row0 + r;
    int gpr = (cols + 31) >> 5, codeBytes = (gpr * 5 + 7) >> 3;
    const u8* __restrict__ nib = static_cast<const u8*>(w) + sr * gpr * 16;
    const u8* __restrict__ codes = reinterpret_cast<const u8*>(cf) + sr * codeBytes;
    float rung = rs[2 * sr], ratio = rs[2 * sr + 1];
    for (int k = 0; k < lane; k++) rung = __fmul_rn(rung, ratio);
    const float* __restrict__ xt = x + (long long) t * cols;
    const unsigned* __restrict__ words = reinterpret_cast<const unsigned*>(nib);
    float acc = 0.f;
    for (int c0 = 0; c0 < cols; c0 += 256) {   // cols % 32 == 0 (q4tp requires it), so a lane's 8 are all in
        int c = c0 + lane * 8;
        bool in = c < cols;
        float s = __shfl_sync(0xffffffffu, rung, in ? tp_code(codes, c >> 5, codeBytes) : 0);
        if (in) acc += s * dot8(words[c >> 3], xt + c);
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[(long long) t * rows + r] = acc;
}

#define MATVEC_Q4(NAME, BODY)                                                                            \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf, \
        const float* x, float* y, long long row0, int rows, int cols) {                                    \
        BODY;                                                                                            \
    }

MATVEC_Q4(matvec_q4_block, matvec_q4_block_body(w, rs, x, y, row0, rows, cols))
MATVEC_Q4(matvec_q4tp, matvec_q4tp_body(w, rs, cf, x, y, row0, rows, cols))
