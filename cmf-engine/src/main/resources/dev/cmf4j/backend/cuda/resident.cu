// cmf4j resident-forward kernels (dev.cmf4j.backend.cuda.ResidentForward): the whole dense decoder step
// on the GPU. Its own module (built into resident.fatbin by tools/build-cuda-kernels.sh, NVRTC as the
// fallback), self-contained: plain CUDA C, no headers. Every kernel computes in f32; activations are
// [T, width] row-major f32. Positions and token ids are read from device memory (`pos` = the chunk's first
// position, `ids` = its T token ids) so one captured CUDA graph replays for every decode step.

typedef unsigned short r_u16;

__device__ __forceinline__ float r_bf16(r_u16 h) { return __uint_as_float(((unsigned) h) << 16); }

__device__ __forceinline__ float r_f16(r_u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// Weight element kinds: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f; the scales come separately as f32).
template <int K>
__device__ __forceinline__ void r_load4(const void* __restrict__ w, long long i, float* o) {
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
__device__ __forceinline__ float r_load1(const void* __restrict__ w, long long i) {
    if (K == 0) return static_cast<const float*>(w)[i];
    if (K == 1) return r_bf16(static_cast<const r_u16*>(w)[i]);
    if (K == 2) return r_f16(static_cast<const r_u16*>(w)[i]);
    return (float) static_cast<const signed char*>(w)[i];
}

// ---- weight products ----

// One warp per (output row, token), as matvec in kernels.cu: lanes read 4 consecutive weights each.
template <int K>
__device__ __forceinline__ float r_dot(const void* __restrict__ w, const float* __restrict__ cf,
                                       const float* __restrict__ xt, long long base, int cols, int lane) {
    float acc = 0.f;
    if ((cols & 3) == 0) {
        for (int c = lane * 4; c < cols; c += 128) {
            float wv[4];
            r_load4<K>(w, base + c, wv);
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
            acc += r_load1<K>(w, base + c) * xv;
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    return acc;
}

// y[t, r] = rs[r]·Σ_c W[r, c]·cf[c]·x[t, c] (+ bias[r]) (+ y[t, r] when accumulate: the residual add)
// Block = 8 warps = 8 rows; grid = (ceil(rows/8), T).
template <int K>
__device__ __forceinline__ void r_matvec(const void* __restrict__ w, const float* __restrict__ rs,
                                         const float* __restrict__ cf, const float* __restrict__ bias,
                                         const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                         int accumulate) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    float acc = r_dot<K>(w, cf, x + (long long) t * cols, (long long) r * cols, cols, lane);
    if (lane == 0) {
        if (rs != nullptr) acc *= rs[r];
        if (bias != nullptr) acc += bias[r];
        long long o = (long long) t * rows + r;
        y[o] = accumulate ? y[o] + acc : acc;
    }
}

#define R_MATVEC(NAME, K)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf, \
        const float* bias, const float* x, float* y, int rows, int cols, int accumulate) {                 \
        r_matvec<K>(w, rs, cf, bias, x, y, rows, cols, accumulate);                                       \
    }

R_MATVEC(r_matvec_f32, 0)
R_MATVEC(r_matvec_bf16, 1)
R_MATVEC(r_matvec_f16, 2)
R_MATVEC(r_matvec_q8, 3)

__device__ __forceinline__ float r_silu(float g) { return g / (1.f + expf(-g)); }

// SwiGLU with both products in one pass: y[t, r] = silu(gate_r·x_t)·(up_r·x_t); gate and up of one dtype.
template <int K>
__device__ __forceinline__ void r_glu(const void* __restrict__ wg, const float* __restrict__ rsg, const float* __restrict__ cfg,
                                      const void* __restrict__ wu, const float* __restrict__ rsu, const float* __restrict__ cfu,
                                      const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int lane = threadIdx.x & 31;
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    const float* xt = x + (long long) t * cols;
    float g = r_dot<K>(wg, cfg, xt, (long long) r * cols, cols, lane);
    float u = r_dot<K>(wu, cfu, xt, (long long) r * cols, cols, lane);
    if (lane == 0) {
        if (rsg != nullptr) g *= rsg[r];
        if (rsu != nullptr) u *= rsu[r];
        y[(long long) t * rows + r] = r_silu(g) * u;
    }
}

#define R_GLU(NAME, K)                                                                                     \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* wg, const float* rsg, const float* cfg, \
        const void* wu, const float* rsu, const float* cfu, const float* x, float* y, int rows, int cols) {   \
        r_glu<K>(wg, rsg, cfg, wu, rsu, cfu, x, y, rows, cols);                                              \
    }

R_GLU(r_glu_f32, 0)
R_GLU(r_glu_bf16, 1)
R_GLU(r_glu_f16, 2)
R_GLU(r_glu_q8, 3)

// y = silu(g)·u elementwise (gate and up of different dtypes, computed by two r_matvec launches).
extern "C" __global__ void __launch_bounds__(256) r_silu_mul(const float* g, const float* u, float* y, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) y[i] = r_silu(g[i]) * u[i];
}

// ---- embedding ----

// x[t, c] = E[ids[t], c]·(rs[id])·(cf[c])·scale; block per token.
template <int K>
__device__ __forceinline__ void r_embed(const void* __restrict__ w, const float* __restrict__ rs,
                                        const float* __restrict__ cf, const int* __restrict__ ids,
                                        float* __restrict__ x, int cols, float scale) {
    int t = blockIdx.x;
    long long id = ids[t];
    float s = rs != nullptr ? rs[id] : 1.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = r_load1<K>(w, id * cols + c);
        if (cf != nullptr) v *= cf[c];
        if (rs != nullptr) v *= s;
        x[(long long) t * cols + c] = scale != 1.f ? v * scale : v;
    }
}

#define R_EMBED(NAME, K)                                                                                   \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf,  \
        const int* ids, float* x, int cols, float scale) {                                                  \
        r_embed<K>(w, rs, cf, ids, x, cols, scale);                                                         \
    }

R_EMBED(r_embed_f32, 0)
R_EMBED(r_embed_bf16, 1)
R_EMBED(r_embed_f16, 2)
R_EMBED(r_embed_q8, 3)

// ---- norms ----

// Sum over the block (any blockDim that is a multiple of 32, ≤ 1024); every thread gets the total.
__device__ __forceinline__ float r_block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();   // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < warps; i++) s += red[i];
    return s;
}

__device__ __forceinline__ float r_scaled(float x, float inv, const float* w, int i, int offset) {
    if (w == nullptr) return x * inv;
    return offset ? (x * inv) * (1.f + w[i]) : w[i] * (x * inv);
}

// RMSNorm of row blockIdx.x: y = x / sqrt(mean(x²) + eps) · (w | 1+w | 1); y may alias x.
extern "C" __global__ void __launch_bounds__(256) r_rmsnorm(const float* x, const float* w, float* y, int dim,
                                                             float eps, int offset) {
    __shared__ float red[32];
    const float* xr = x + (long long) blockIdx.x * dim;
    float* yr = y + (long long) blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) { float v = xr[i]; ss += v * v; }
    ss = r_block_sum(ss, red);
    float inv = 1.f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = r_scaled(xr[i], inv, w, i, offset);
}

// ---- q/k norm, rope, KV append ----

// Block (head, t) over heads + kvHeads heads: the per-head RMSNorm (qwen3 q_norm / k_norm) when its flag is
// set, then the rotate_half rope at position pos[0] + t (angle = pos·invFreq in f32, cos/sin · ropeScale).
// q heads are rewritten in place; k heads go to the key cache at that position, and the block also copies
// the head's v into the value cache. headDim ≤ 256.
extern "C" __global__ void __launch_bounds__(128) r_qk_rope_append(
        float* q, const float* k, const float* v, float* kc, float* vc,
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset,
        const float* invFreq, int rotaryDim, float ropeScale,
        int heads, int kvHeads, int hd, const int* pos) {
    __shared__ float buf[256];
    __shared__ float red[32];
    int h = blockIdx.x, t = blockIdx.y;
    int p = pos[0] + t;
    bool isQ = h < heads;
    int kvh = h - heads;
    int kvDim = kvHeads * hd;
    const float* src = isQ ? q + ((long long) t * heads + h) * hd : k + ((long long) t * kvHeads + kvh) * hd;
    float* dst = isQ ? q + ((long long) t * heads + h) * hd : kc + (long long) p * kvDim + (long long) kvh * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = src[i];
    __syncthreads();
    if (isQ ? qNorm : kNorm) {
        const float* w = isQ ? qw : kw;
        float ss = 0.f;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) ss += buf[i] * buf[i];
        ss = r_block_sum(ss, red);
        float inv = 1.f / sqrtf(ss / hd + eps);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = r_scaled(buf[i], inv, w, i, offset);
        __syncthreads();
    }
    int half = rotaryDim / 2;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float o;
        if (i < half) {
            float a = (float) p * invFreq[i];
            float c = cosf(a) * ropeScale, s = sinf(a) * ropeScale;
            o = buf[i] * c - buf[i + half] * s;
        } else if (i < rotaryDim) {
            int j = i - half;
            float a = (float) p * invFreq[j];
            float c = cosf(a) * ropeScale, s = sinf(a) * ropeScale;
            o = buf[i] * c + buf[j] * s;
        } else {
            o = buf[i];
        }
        dst[i] = o;
    }
    if (!isQ) {
        const float* vs = v + ((long long) t * kvHeads + kvh) * hd;
        float* vd = vc + (long long) p * kvDim + (long long) kvh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) vd[i] = vs[i];
    }
}

// ---- attention over the KV cache (split over the keys, then combined) ----

#define R_NEG_INF __int_as_float(0xff800000)   // -inf (NVRTC has no math.h)
#define R_ATT_WARPS 4
#define R_ATT_MAXI 8   // headDim ≤ 32·8

// Block (head, t, split): query t (position p = pos[0] + t) of head h against keys [lo, hi), the split's share
// of [0, p]. Each warp takes every 4th key: a warp-wide dot product, then an online-softmax update of its
// running max m, sum l and weighted values; the 4 warps are merged in shared memory and the split's
// (m, l, acc[hd]) written to the partials for r_attn_combine.
extern "C" __global__ void __launch_bounds__(128) r_attn_partial(
        const float* q, const float* kc, const float* vc, float* pm, float* pl, float* pacc,
        int heads, int kvHeads, int hd, float scale, const int* pos, int splits) {
    __shared__ float sm[R_ATT_WARPS], sl[R_ATT_WARPS];
    __shared__ float sacc[R_ATT_WARPS][256];
    int h = blockIdx.x, t = blockIdx.y, s = blockIdx.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int n = pos[0] + t + 1;
    int lo = (int) ((long long) s * n / splits), hi = (int) ((long long) (s + 1) * n / splits);
    int kvh = h / (heads / kvHeads);
    long long kvDim = (long long) kvHeads * hd;
    const float* qh = q + ((long long) t * heads + h) * hd;
    float qv[R_ATT_MAXI], acc[R_ATT_MAXI];
#pragma unroll
    for (int i = 0; i < R_ATT_MAXI; i++) {
        int d = lane + 32 * i;
        qv[i] = d < hd ? qh[d] : 0.f;
        acc[i] = 0.f;
    }
    float m = R_NEG_INF, l = 0.f;
    for (int j = lo + warp; j < hi; j += R_ATT_WARPS) {
        const float* kr = kc + j * kvDim + (long long) kvh * hd;
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < R_ATT_MAXI; i++) {
            int c = lane + 32 * i;
            if (c < hd) d += qv[i] * kr[c];
        }
        for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        float sc = d * scale;
        float mn = fmaxf(m, sc);
        float corr = expf(m - mn);   // m = -inf the first time: corr = 0
        float e = expf(sc - mn);
        l = l * corr + e;
        const float* vr = vc + j * kvDim + (long long) kvh * hd;
#pragma unroll
        for (int i = 0; i < R_ATT_MAXI; i++) {
            int c = lane + 32 * i;
            if (c < hd) acc[i] = acc[i] * corr + e * vr[c];
        }
        m = mn;
    }
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < R_ATT_MAXI; i++) {
        int c = lane + 32 * i;
        if (c < hd) sacc[warp][c] = acc[i];
    }
    __syncthreads();
    float M = R_NEG_INF;
    for (int w = 0; w < R_ATT_WARPS; w++) M = fmaxf(M, sm[w]);
    long long o = ((long long) t * heads + h) * splits + s;
    if (threadIdx.x == 0) {
        float L = 0.f;
        if (M != R_NEG_INF)
            for (int w = 0; w < R_ATT_WARPS; w++) if (sm[w] != R_NEG_INF) L += sl[w] * expf(sm[w] - M);
        pm[o] = M;
        pl[o] = L;
    }
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float a = 0.f;
        if (M != R_NEG_INF)
            for (int w = 0; w < R_ATT_WARPS; w++) if (sm[w] != R_NEG_INF) a += sacc[w][c] * expf(sm[w] - M);
        pacc[o * hd + c] = a;
    }
}

// Block (head, t): merges the splits' partials into out[t, h·hd + c] = Σ_s acc_s[c]·e^(m_s−M) / Σ_s l_s·e^(m_s−M).
extern "C" __global__ void __launch_bounds__(128) r_attn_combine(const float* pm, const float* pl, const float* pacc,
                                                                 float* out, int heads, int hd, int splits) {
    int h = blockIdx.x, t = blockIdx.y;
    long long base = ((long long) t * heads + h) * splits;
    float M = R_NEG_INF;
    for (int s = 0; s < splits; s++) M = fmaxf(M, pm[base + s]);
    float L = 0.f;
    for (int s = 0; s < splits; s++) if (pm[base + s] != R_NEG_INF) L += pl[base + s] * expf(pm[base + s] - M);
    float invL = 1.f / L;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < splits; s++)
            if (pm[base + s] != R_NEG_INF) a += pacc[(base + s) * hd + c] * expf(pm[base + s] - M);
        out[((long long) t * heads + h) * hd + c] = a * invL;
    }
}
