// The 4-bit CMF dtypes' decoding (CMF_FORMAT.md §2, the payload as the file stores it), shared by matvec_q4.cu (the
// hybrid path's products) and resident.cu (the resident forward's products, embedding gather and prefill widening), so
// both read the same weights the same way: the resident forward's products give the hybrid path's bits. Included after
// common.cuh (r_u16, r_f16), as `#include "q4.cuh"`; it includes nothing itself (the build script inlines one level).
//
// q4_block: groups of 32 over the FLATTENED tensor, the nibble plane then one f16 scale per group (the "scale plane");
// element 2k of a group = the low nibble of its byte k, 2k+1 the high one; w = (q - 8)·scale.
// q4tp: cols % 32 == 0; per row gpr = cols/32 groups of 16 nibble bytes, then (on the device, CudaMatMul.uploadQ4) a
// per-row f32 pair {exp2(lo), exp2(step)} ("rungs"), and the codes plane (per row ceil(gpr·5/8) bytes, 5-bit codes LSB
// first); group scale = t[code], t[0] = exp2(lo), t[c] = t[c-1]·exp2(step) in f32, as the CPU's Q4tpMatrix builds it.
#ifndef CMF4J_Q4_CUH
#define CMF4J_Q4_CUH

typedef unsigned char r_u8;

// q - 8 as a float for a nibble q in 0..15, exactly: the bits of 2^23 + q minus (2^23 + 8) (no I2F).
__device__ __forceinline__ float q4_centred(unsigned q) { return __int_as_float(0x4B000000 | q) - 8388616.f; }

// sum over the 8 weights of one 4-byte nibble word (element 2k = low nibble of byte k, 2k+1 = high) times x[0..8)
__device__ __forceinline__ float q4_dot8(unsigned v, const float* __restrict__ x) {
    float4 a = *reinterpret_cast<const float4*>(x), b = *reinterpret_cast<const float4*>(x + 4);
    return q4_centred(v & 15) * a.x + q4_centred((v >> 4) & 15) * a.y + q4_centred((v >> 8) & 15) * a.z
         + q4_centred((v >> 12) & 15) * a.w + q4_centred((v >> 16) & 15) * b.x + q4_centred((v >> 20) & 15) * b.y
         + q4_centred((v >> 24) & 15) * b.z + q4_centred(v >> 28) * b.w;
}

__device__ __forceinline__ unsigned q4_nibble(const r_u8* __restrict__ nib, long long byteIndex, int odd) {
    unsigned b = nib[byteIndex];
    return odd ? b >> 4 : b & 15;
}

// The 5-bit code of group g from a row's LSB-first code stream of `bytes` bytes.
__device__ __forceinline__ int q4tp_code(const r_u8* __restrict__ codes, int g, int bytes) {
    int bit = g * 5, at = bit >> 3;
    unsigned v = codes[at];
    if (at + 1 < bytes) v |= (unsigned) codes[at + 1] << 8;
    return (v >> (bit & 7)) & 31;
}

// This lane's part of the dot product of q4_block row sr (cols wide) with xt (the warp's 32 parts sum to it). When
// cols % 32 == 0 a row is whole groups and lane L reads word L of each 128-byte step (coalesced); otherwise groups
// straddle rows and each weight finds its group from its flat index. U = 4: four steps' loads in flight (the decode
// products); U = 1: one (the expert kernels, whose register budget the unrolled loop exceeds on sm_90).
template <int U>
__device__ __forceinline__ float q4_block_row(const void* __restrict__ w, const r_u16* __restrict__ scales,
                                              const float* __restrict__ xt, long long sr, int cols, int lane) {
    const r_u8* __restrict__ nib = static_cast<const r_u8*>(w);
    long long first = sr * (long long) cols;   // flat index of the row's first weight
    float acc = 0.f;
    if ((cols & 31) == 0) {
        long long g0 = first >> 5;
        const unsigned* __restrict__ words = reinterpret_cast<const unsigned*>(nib + g0 * 16);
        // lane L of a step reads word L: group L/4 of the step's 8, weights (L%4)*8 .. +8 of it. Four steps' words and
        // scales are loaded before any is used (one load in flight per warp bound the products at ~1.1 TB/s on the
        // H200); the sums are added in the same order as one step at a time, so the bits do not change.
        int c = lane * 8;
        if (U == 4) for (; c + 768 < cols; c += 1024) {
            unsigned v0 = words[c >> 3], v1 = words[(c + 256) >> 3], v2 = words[(c + 512) >> 3], v3 = words[(c + 768) >> 3];
            r_u16 h0 = scales[g0 + (c >> 5)], h1 = scales[g0 + ((c + 256) >> 5)], h2 = scales[g0 + ((c + 512) >> 5)],
                  h3 = scales[g0 + ((c + 768) >> 5)];
            acc += r_f16(h0) * q4_dot8(v0, xt + c);
            acc += r_f16(h1) * q4_dot8(v1, xt + c + 256);
            acc += r_f16(h2) * q4_dot8(v2, xt + c + 512);
            acc += r_f16(h3) * q4_dot8(v3, xt + c + 768);
        }
        for (; c < cols; c += 256) {
            unsigned v = words[c >> 3];
            float s = r_f16(scales[g0 + (c >> 5)]);
            acc += s * q4_dot8(v, xt + c);
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            long long i = first + c;
            acc += q4_centred(q4_nibble(nib, (i >> 5) * 16 + ((i & 31) >> 1), (int) (i & 1))) * r_f16(scales[i >> 5]) * xt[c];
        }
    }
    return acc;
}

// The same for q4tp row sr: lane L builds rung L of the row's ladder by the same L sequential products (bit-exact with
// the CPU), then each group's scale is a shuffle from the lane holding its rung. Every lane of the warp must call it
// (the loop runs the same trip count on every lane so the shuffles see the whole warp). U as for q4_block_row.
template <int U>
__device__ __forceinline__ float q4tp_row(const void* __restrict__ w, const float* __restrict__ rungs, const void* __restrict__ cf,
                                          const float* __restrict__ xt, long long sr, int cols, int lane) {
    int gpr = (cols + 31) >> 5, codeBytes = (gpr * 5 + 7) >> 3;
    const r_u8* __restrict__ nib = static_cast<const r_u8*>(w) + sr * gpr * 16;
    const r_u8* __restrict__ codes = static_cast<const r_u8*>(cf) + sr * codeBytes;
    float rung = rungs[2 * sr], ratio = rungs[2 * sr + 1];
    for (int k = 0; k < lane; k++) rung = __fmul_rn(rung, ratio);
    const unsigned* __restrict__ words = reinterpret_cast<const unsigned*>(nib);
    float acc = 0.f;
    int c0 = 0;
    if (U == 4) for (; c0 + 1024 <= cols; c0 += 1024) {   // four whole steps, their words loaded before any is used (as q4_block_row)
        int c = c0 + lane * 8;
        unsigned v0 = words[c >> 3], v1 = words[(c + 256) >> 3], v2 = words[(c + 512) >> 3], v3 = words[(c + 768) >> 3];
        int k0 = q4tp_code(codes, c >> 5, codeBytes), k1 = q4tp_code(codes, (c + 256) >> 5, codeBytes),
            k2 = q4tp_code(codes, (c + 512) >> 5, codeBytes), k3 = q4tp_code(codes, (c + 768) >> 5, codeBytes);
        acc += __shfl_sync(0xffffffffu, rung, k0) * q4_dot8(v0, xt + c);
        acc += __shfl_sync(0xffffffffu, rung, k1) * q4_dot8(v1, xt + c + 256);
        acc += __shfl_sync(0xffffffffu, rung, k2) * q4_dot8(v2, xt + c + 512);
        acc += __shfl_sync(0xffffffffu, rung, k3) * q4_dot8(v3, xt + c + 768);
    }
    for (; c0 < cols; c0 += 256) {   // cols % 32 == 0 (q4tp requires it), so a lane's 8 are all in
        int c = c0 + lane * 8;
        bool in = c < cols;
        float s = __shfl_sync(0xffffffffu, rung, in ? q4tp_code(codes, c >> 5, codeBytes) : 0);
        if (in) acc += s * q4_dot8(words[c >> 3], xt + c);
    }
    return acc;
}

// One q4_block weight by its flat index i (row·cols + column).
__device__ __forceinline__ float q4_block_weight(const void* __restrict__ w, const r_u16* __restrict__ scales, long long i) {
    return q4_centred(q4_nibble(static_cast<const r_u8*>(w), (i >> 5) * 16 + ((i & 31) >> 1), (int) (i & 1))) * r_f16(scales[i >> 5]);
}

// Rung `code` of q4tp row sr's ladder: the same sequential f32 products as q4tp_row's lanes.
__device__ __forceinline__ float q4tp_rung(const float* __restrict__ rungs, long long sr, int code) {
    float rung = rungs[2 * sr], ratio = rungs[2 * sr + 1];
    for (int k = 0; k < code; k++) rung = __fmul_rn(rung, ratio);
    return rung;
}

// One q4tp weight, column c of row sr, given its row's ladder t (32 rungs).
__device__ __forceinline__ float q4tp_weight(const void* __restrict__ w, const void* __restrict__ cf, const float* t,
                                             long long sr, int c, int cols) {
    int gpr = (cols + 31) >> 5, codeBytes = (gpr * 5 + 7) >> 3;
    const r_u8* __restrict__ nib = static_cast<const r_u8*>(w) + sr * gpr * 16;
    int code = q4tp_code(static_cast<const r_u8*>(cf) + sr * codeBytes, c >> 5, codeBytes);
    return q4_centred(q4_nibble(nib, (c >> 5) * 16 + ((c & 31) >> 1), c & 1)) * t[code];
}

#endif
