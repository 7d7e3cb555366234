// The helpers the resident-forward kernel files share (resident.cu: the weight products; resident_attn.cu: rope,
// KV append and attention; resident_gemm.cu: the cuBLAS prefill's splits and epilogues; resident_o1.cu: sealed
// layers): KV cache elements, weight loads, programmatic-launch waits, block maxima, 16-bit parts, per-head norms and
// rope. Included after common.cuh, as
// `#include "resident.cuh"` (KernelSource inlines it; no includes of its own).
#ifndef CMF4J_RESIDENT_CUH
#define CMF4J_RESIDENT_CUH

// KV cache elements: f32, or f16 (--kv f16: half the bytes every attention step reads). The kernels that read or
// write the caches are templates over the element type KV, one extern name per type (the f16 ones end in _h).
// A loop that keeps many cache loads in flight loads the stored elements first (a plain, predicable load: 0 where
// masked) and widens them all after: widening each half as it was loaded made the batched decode attention several
// times slower on the H200 (docs/GPU.md, session 11), with the same PTX branches; the SASS order was not inspected
__device__ __forceinline__ float r_kv_f32(float v) { return v; }
__device__ __forceinline__ float r_kv_f32(r_u16 v) { return r_f16(v); }
__device__ __forceinline__ void r_kv_st(float* p, long long i, float v) { p[i] = v; }
__device__ __forceinline__ void r_kv_st(r_u16* p, long long i, float v) { p[i] = r_to_f16(v); }

// --kv q8 (the _q instances): int8 codes with one f32 scale per position and head, absmax/127 with the codes rounded
// half up, KvType.quantizeQ8's rule (the CPU's KvCache): the same float operations, so a row the GPU and the CPU
// compute alike is stored alike. Position p's cache row is kvHeads blocks of r_kv_head(hd) bytes: the head's hd codes
// padded to 4 bytes, then its scale. A chunk's own keys and values are read as f32 (kch, vch: the step's rows, as the
// CPU's pending chunk) by the q8 prefill attention, never back from the cache; f32 and f16 caches read them back.
template <typename KV> struct r_kv_is_q8 { static constexpr bool v = false; };
template <> struct r_kv_is_q8<r_i8> { static constexpr bool v = true; };
// what a loop holds a loaded element in until it widens them all (r_kv_f32's comment): q8 ones are widened and scaled
// as they load (the scale is a second load)
template <typename KV> struct r_kv_ld { typedef KV t; };
template <> struct r_kv_ld<r_i8> { typedef float t; };
// one head's stride within a cache row, and one row's, in elements (q8: bytes, the scales included)
template <typename KV> __device__ __forceinline__ int r_kv_head(int hd) { return r_kv_is_q8<KV>::v ? ((hd + 3) & ~3) + 4 : hd; }
template <typename KV> __device__ __forceinline__ long long r_kv_row(int kvHeads, int hd) { return (long long) kvHeads * r_kv_head<KV>(hd); }
// A sliding layer's cache rows (window > 0) of a session with chunks of at most `chunk` tokens (> 0) are a ring of
// window + chunk rows, key j in row j mod (window + chunk): a chunk's first query still finds every key of its window
// after the chunk's own keys are written. Else (a full layer, or chunk 0) key j is row j. r_kv_ring gives the ring's
// rows (0: none), r_kv_slot key j's row.
__device__ __forceinline__ int r_kv_ring(int window, int chunk) { return window > 0 && chunk > 0 ? window + chunk : 0; }
__device__ __forceinline__ long long r_kv_slot(int j, int ring) { return ring > 0 ? j % ring : j; }
__device__ __forceinline__ float r_q8_scale(const r_i8* head, int hd) { return *reinterpret_cast<const float*>(head + ((hd + 3) & ~3)); }
__device__ __forceinline__ float r_kv_f32(r_i8 v) { return (float) v; }
// x·inv rounded half up, as Java's Math.round (y − floor(y) is exact here; __fmul_rn: never fused into an FMA)
__device__ __forceinline__ r_i8 r_q8_code(float x, float inv) {
    float y = __fmul_rn(x, inv), f = floorf(y);
    return (r_i8) ((int) f + (y - f >= 0.5f ? 1 : 0));
}
// One head's hd values src into its q8 block dst (codes, then the scale), by one warp: every lane calls it.
__device__ __forceinline__ void r_q8_store_head(r_i8* dst, const float* src, int hd, int lane) {
    float amax = 0.f;
    for (int i = lane; i < hd; i += 32) amax = fmaxf(amax, fabsf(src[i]));
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float inv = amax == 0.f ? 0.f : __fdiv_rn(127.f, amax);
    for (int i = lane; i < hd; i += 32) dst[i] = r_q8_code(src[i], inv);
    if (lane == 0) *reinterpret_cast<float*>(dst + ((hd + 3) & ~3)) = __fdiv_rn(amax, 127.f);
}

// Weight element kinds: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f; the scales come separately as f32).
template <int K>
__device__ __forceinline__ float r_load1(const void* __restrict__ w, long long i) {
    if (K == 0) return static_cast<const float*>(w)[i];
    if (K == 1) return r_bf16(static_cast<const r_u16*>(w)[i]);
    if (K == 2) return r_f16(static_cast<const r_u16*>(w)[i]);
    return (float) static_cast<const signed char*>(w)[i];
}

// Programmatic dependent launch (sm_90+; no-ops before, in the CPU emulator, and when the kernel was launched
// without CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION). A decode step launches its kernels with that
// attribute (ResidentForward): the next kernel's blocks may then start while this one still runs, as soon as
// every block of this one has called r_pdl_trigger, and run up to r_pdl_wait, which returns once the previous
// kernel has finished and its writes are visible. So every kernel launched with the attribute calls r_pdl_wait
// (in every block) before it reads or writes anything another kernel of the step writes or reads; the products
// issue their first weight loads (the weights never change) before it, so the next product's first weights
// are on their way while the previous kernel drains.
__device__ __forceinline__ void r_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#elif !defined(__CUDA_ARCH__)
    emulated_pdl_wait();   // the tests' warp emulator notes the block waited (kernel_emulator.cpp; the mock checks it)
#endif
}
__device__ __forceinline__ void r_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---- weight products ----


// 1 / sqrt(mean(x²) + eps) of one activation row, computed by the whole block (every thread gets it): the
// RMSNorm before a product, folded into it — the norm weight is multiplied into the matrix's column scales
// at load time, so the norm costs the product one reduction and one multiply per output.
__device__ __forceinline__ float r_inv_rms(const float* __restrict__ xt, int cols, float eps) {
    __shared__ float red[32];
    float ss = 0.f;
    for (int i = threadIdx.x; i < cols; i += blockDim.x) { float v = xt[i]; ss += v * v; }
    ss = r_block_sum(ss, red);
    return 1.f / sqrtf(ss / cols + eps);
}


// 16 weight bytes, streamed past L1 (L1 keeps the activations, which every row rereads).
__device__ __forceinline__ uint4 r_ld16(const void* p) {
    uint4 v;
#ifdef __CUDA_ARCH__
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
#else
    v = *static_cast<const uint4*>(p);
#endif
    return v;
}

// Four int8 of u as floats without I2F (quarter rate on sm_90): each byte, made offset binary, goes under
// the exponent of 2^23 (prmt), and one subtraction removes 2^23 + 128. Exact.
__device__ __forceinline__ void r_i8x4(unsigned u, float* o) {
    u ^= 0x80808080u;
    o[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.f;
    o[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.f;
    o[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.f;
    o[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.f;
}


// 8 bytes (4 bf16/f16 weights).
__device__ __forceinline__ uint2 r_ld8(const void* p) {
    uint2 v;
#ifdef __CUDA_ARCH__
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
#else
    v = *static_cast<const uint2*>(p);
#endif
    return v;
}

// Four consecutive weights at element i as floats: 16 bytes of f32, 8 of bf16/f16, 4 of int8.
template <int K>
__device__ __forceinline__ void r_ld4w(const void* __restrict__ w, long long i, float* o) {
    if (K == 0) {
        uint4 v = r_ld16(static_cast<const float*>(w) + i);
        o[0] = __uint_as_float(v.x); o[1] = __uint_as_float(v.y); o[2] = __uint_as_float(v.z); o[3] = __uint_as_float(v.w);
    } else if (K == 1 || K == 2) {
        uint2 v = r_ld8(static_cast<const r_u16*>(w) + i);
        if (K == 1) {
            o[0] = __uint_as_float(v.x << 16); o[1] = __uint_as_float(v.x & 0xffff0000u);
            o[2] = __uint_as_float(v.y << 16); o[3] = __uint_as_float(v.y & 0xffff0000u);
        } else {
            o[0] = r_f16((r_u16) (v.x & 0xffff)); o[1] = r_f16((r_u16) (v.x >> 16));
            o[2] = r_f16((r_u16) (v.y & 0xffff)); o[3] = r_f16((r_u16) (v.y >> 16));
        }
    } else {
        r_i8x4(r_ld4(static_cast<const signed char*>(w) + i), o);
    }
}

// v ⊙ cf[c..c+3]: four activations times their column scales (q8_2f's, or a folded norm's weight); v as it is when
// cf is null (no column scales).
__device__ __forceinline__ float4 r_cf4(float4 v, const float* cf, int c) {
    if (cf != nullptr) {
        float4 f = *reinterpret_cast<const float4*>(cf + c);
        v.x *= f.x; v.y *= f.y; v.z *= f.z; v.w *= f.w;
    }
    return v;
}

// Σ_c W[base + c]·cf[c]·x[c] over one row, by one warp: the product of f32 weights, and of any weights whose
// width is not a multiple of 4 (16-bit and int8 weights of a width divisible by 4 take r_rows8). Fast path (cols
// a multiple of 4): lane l takes the 4 weights at columns 4l + 128k, so a warp's weight loads and its float4 reads
// of x (and cf) are each contiguous; 8 such loads are in flight per lane before any is used. Else one weight per
// lane per step.
template <int K>
__device__ __forceinline__ float r_dot(const void* __restrict__ w, const float* __restrict__ cf,
                                       const float* __restrict__ xt, long long base, int cols, int lane) {
    float acc = 0.f;
    if ((cols & 3) == 0) {
        for (int c0 = lane * 4; c0 < cols; c0 += 8 * 128) {
            float wv[8][4];
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int c = c0 + u * 128;
                if (c < cols) r_ld4w<K>(w, base + c, wv[u]);
            }
#pragma unroll
            for (int u = 0; u < 8; u++) {
                int c = c0 + u * 128;
                if (c < cols) {
                    float4 xv = r_cf4(*reinterpret_cast<const float4*>(xt + c), cf, c);
                    acc += wv[u][0] * xv.x + wv[u][1] * xv.y + wv[u][2] * xv.z + wv[u][3] * xv.w;
                }
            }
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float xv = xt[c];
            if (cf != nullptr) xv *= cf[c];
            acc += r_load1<K>(w, base + c) * xv;
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

__device__ __forceinline__ float r_silu(float g) { return g / (1.f + expf(-g)); }

// ---- 16-bit parts and block maxima (the prefill splits and the tensor-core attention) ----

__device__ __forceinline__ r_u16 r_to_bf16(float v) {   // round to nearest even (finite inputs)
    unsigned u = __float_as_uint(v);
    return (r_u16) ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float r_absmax4(float4 v) { return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))); }

// Block-wide max (any blockDim that is a multiple of 32, ≤ 1024); every thread gets it.
__device__ __forceinline__ float r_block_max(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = 0.f;
    for (int i = 0; i < warps; i++) m = fmaxf(m, red[i]);
    return m;
}

// ---- per-head norms and rope (resident_attn.cu's rope + KV append and attention, resident_o1.cu's sealed steps) ----

// Σ buf[i]² of a head row (hd ≤ 256) by one warp, every lane getting it, in one fixed order: as 128 threads would
// sum it with r_block_sum (thread j: buf[j], then buf[j + 128]; each group of 32 by the xor shuffle tree; the 4 group
// sums in order), lane l standing for threads l, l + 32, l + 64, l + 96. The prefill's r_qk_rope_append (a warp per
// row), the decode attention (every warp of the block) and the sealed layers' rope call it, so they norm a row to the
// same numbers, with no block barrier.
__device__ __forceinline__ float r_head_sumsq(const float* buf, int hd, int lane) {
    float ss = 0.f;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        float u = 0.f;
        for (int i = 32 * g + lane; i < hd; i += 128) u += buf[i] * buf[i];
        for (int o = 16; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
        ss += u;
    }
    return ss;
}

// Element i < rotaryDim's rotate_half angle at position p: cos and sin (· ropeScale) of p·invFreq[i mod rotaryDim/2].
__device__ __forceinline__ void r_rope_cs(int i, int p, const float* invFreq, int half, float ropeScale, float& c, float& s) {
    float a = (float) p * invFreq[i < half ? i : i - half];
    c = cosf(a) * ropeScale;
    s = sinf(a) * ropeScale;
}

// Element i of the rotate_half-roped row buf (dims past rotaryDim unrotated), with element i's r_rope_cs.
__device__ __forceinline__ float r_rope_at(const float* buf, int i, int half, int rotaryDim, float c, float s) {
    if (i < half) return buf[i] * c - buf[i + half] * s;
    if (i < rotaryDim) return buf[i] * c + buf[i - half] * s;
    return buf[i];
}

#endif
