// cmf4j resident-forward kernels for the architecture-specific operators (dev.cmf4j.backend.cuda.ResidentForward):
// standalone RMSNorm (gemma's sandwich norms, the MoE input), gated-MLP activations other than the fused SwiGLU
// (GeLU-tanh, GeLU), the mixture of experts — routing and the chosen experts' products with the expert ids
// kept in device memory, so a decode step replays as one CUDA graph — and greedy picks (each logit row's argmax). Its own module beside resident.cu (built
// into resident_arch.fatbin by tools/build-cuda-kernels.sh, NVRTC as the fallback); plain CUDA C over
// common.cuh and q4.cuh (CudaKernelEmulationTest compiles this file for the CPU). Every kernel computes in f32 and
// takes a token dimension T (prefill chunks run the same kernels as decode steps).

#include "common.cuh"
#include "q4.cuh"

// Weight element kinds, as resident.cu: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f, scales as f32 planes); the
// expert kernels also take 4 q4_block and 5 q4tp, output-major (ra_expert_row, through q4.cuh).
template <int K>
__device__ __forceinline__ float ra_load(const void* __restrict__ w, long long i) {
    if (K == 0) return static_cast<const float*>(w)[i];
    if (K == 1) return r_bf16(static_cast<const r_u16*>(w)[i]);
    if (K == 2) return r_f16(static_cast<const r_u16*>(w)[i]);
    return (float) static_cast<const signed char*>(w)[i];
}

// 4 consecutive weights from element i (i a multiple of 4): one 16/8/4-byte load.
template <int K>
__device__ __forceinline__ void ra_load4(const void* __restrict__ w, long long i, float* o) {
    if (K == 0) {
        float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + i);
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    } else if (K == 1 || K == 2) {
        uint2 v = *reinterpret_cast<const uint2*>(static_cast<const r_u16*>(w) + i);
        r_u16 h[4] = {(r_u16) (v.x & 0xffff), (r_u16) (v.x >> 16), (r_u16) (v.y & 0xffff), (r_u16) (v.y >> 16)};
        for (int j = 0; j < 4; j++) o[j] = K == 1 ? r_bf16(h[j]) : r_f16(h[j]);
    } else {
        char4 v = *reinterpret_cast<const char4*>(static_cast<const signed char*>(w) + i);
        o[0] = (float) v.x; o[1] = (float) v.y; o[2] = (float) v.z; o[3] = (float) v.w;
    }
}

// Σ_c W[row, c]·cf[c]·x[c] of one row by one warp (lane c mod 32); rs[row] applied by the caller.
template <int K>
__device__ __forceinline__ float ra_dot(const void* __restrict__ w, const float* __restrict__ cf,
                                        const float* __restrict__ x, long long base, int cols, int lane) {
    float acc = 0.f;
    for (int c = lane; c < cols; c += 32) {
        float xv = x[c];
        if (cf != nullptr) xv *= cf[c];
        acc += ra_load<K>(w, base + c) * xv;
    }
    return r_warp_sum(acc);
}

// ---- norms ----

// Row blockIdx.x of x normalised: n = x / sqrt(mean(x²) + eps) · (w | 1+w | 1); y = n, or y += n when accumulate
// (a sandwich norm's output joining the residual). y may alias x only without accumulate.
extern "C" __global__ void __launch_bounds__(256) ra_rmsnorm(const float* x, const float* w, float* y, int dim,
                                                              float eps, int offset, int accumulate) {
    __shared__ float red[32];
    const float* xr = x + (long long) blockIdx.x * dim;
    float* yr = y + (long long) blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) { float v = xr[i]; ss += v * v; }
    ss = r_block_sum(ss, red);
    float inv = 1.f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i] * inv;
        if (w != nullptr) v = offset ? v * (1.f + w[i]) : w[i] * v;
        yr[i] = accumulate ? yr[i] + v : v;
    }
}

// Gemma4's per-layer inputs, row blockIdx.x = (token, layer) of dim: v = pli · projScale, pli = (v / sqrt(mean(v²) + eps)
// · (w | 1+w | 1) + tab) · combineScale (tab already scaled by the table's scale).
extern "C" __global__ void __launch_bounds__(256) ra_ple_combine(float* pli, const float* tab, const float* w, int dim,
                                                                  float eps, int offset, float projScale, float combineScale) {
    __shared__ float red[32];
    float* pr = pli + (long long) blockIdx.x * dim;
    const float* tr = tab + (long long) blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) { float v = pr[i] * projScale; ss += v * v; }
    ss = r_block_sum(ss, red);
    float inv = 1.f / sqrtf(ss / dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = pr[i] * projScale * inv;
        if (w != nullptr) v = offset ? v * (1.f + w[i]) : w[i] * v;
        pr[i] = (v + tr[i]) * combineScale;
    }
}

// x[i] = scale · x[i], then c·tanh(x / c) when cap = c > 0 (a layer scalar; the final logit soft-cap).
extern "C" __global__ void __launch_bounds__(256) ra_scale_cap(float* x, int n, float scale, float cap) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    float v = x[i] * scale;
    x[i] = cap > 0.f ? cap * tanhf(v / cap) : v;
}

// ---- activations ----

// act: 0 SiLU, 1 GeLU (tanh approximation), 2 GeLU (erf) — the formulas of dev.cmf4j.model.Activation.
__device__ __forceinline__ float ra_act(float x, int act) {
    if (act == 1) return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    if (act == 2) return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
    return x / (1.f + expf(-x));
}

// act(g)·u; act 3 is gpt-oss's clamped SwiGLU: g ≤ limit, |u| ≤ limit, (u + 1)·g·σ(alpha·g) (Glu.ClampedSwiglu).
__device__ __forceinline__ float ra_glu(float g, float u, int act, float alpha, float limit) {
    if (act == 3) {
        g = fminf(g, limit);
        u = fmaxf(-limit, fminf(u, limit));
        return (u + 1.f) * (g / (1.f + expf(-g * alpha)));
    }
    return ra_act(g, act) * u;
}

// y[i] = act(g[i])·u[i] over n elements (a gated MLP whose gate and up came from two products).
extern "C" __global__ void __launch_bounds__(256) ra_glu_act(const float* g, const float* u, float* y, int n, int act) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) y[i] = ra_glu(g[i], u[i], act, 0.f, 0.f);
}

// Gemma4's per-layer input gate: g[t, i] = act(g[t, i]) · pli[t, layer·dim + i] over n = tokens·dim elements (pli rows of width).
extern "C" __global__ void __launch_bounds__(256) ra_pli_gate(float* g, const float* pli, int n, int dim, int width, int layer, int act) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    int t = i / dim, j = i - t * dim;
    g[i] = ra_act(g[i], act) * pli[(long long) t * width + (long long) layer * dim + j];
}

// ---- mixture of experts ----

#define RA_MAX_TOPK 32
#define RA_MAX_EXPERTS 1024

// Block (token t), one warp: softmax over the experts' router logits, the top k by probability (largest first,
// ties to the lower index, as the CPU's Softmax.topK), their weights (renormalised over the k when normTopK); or,
// with topKFirst (gpt-oss), the top k logits and a softmax over those k. idx[t·k + j] = expert, wts[t·k + j] =
// weight. experts ≤ 1024, k ≤ 32.
extern "C" __global__ void __launch_bounds__(32) ra_moe_route(const float* logits, int* idx, float* wts,
                                                               int experts, int topK, int normTopK, int topKFirst) {
    __shared__ int picked[RA_MAX_TOPK];
    __shared__ float pw[RA_MAX_TOPK];
    int t = blockIdx.x, lane = threadIdx.x & 31;
    const float* l = logits + (long long) t * experts;
    float m = R_NEG_INF;
    for (int e = lane; e < experts; e += 32) m = fmaxf(m, l[e]);
    m = r_warp_max(m);
    float s = 0.f;
    for (int e = lane; e < experts; e += 32) s += expf(l[e] - m);
    s = r_warp_sum(s);
    for (int j = 0; j < topK; j++) {
        // this lane's best not yet picked, then the warp's: larger probability, else lower index
        float bv = R_NEG_INF;
        int bi = 0x7fffffff;
        for (int e = lane; e < experts; e += 32) {
            bool taken = false;
            for (int p = 0; p < j; p++) taken |= picked[p] == e;
            float pe = topKFirst ? l[e] : expf(l[e] - m) / s;
            if (!taken && (bi == 0x7fffffff || pe > bv)) { bv = pe; bi = e; }
        }
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
        }
        __syncwarp();
        if (lane == 0) { picked[j] = bi; pw[j] = bv; }
        __syncwarp();
    }
    if (lane == 0) {
        if (topKFirst) {   // softmax over the k picked logits (the first picked is their max)
            float mx = pw[0], sum = 0.f;
            for (int j = 0; j < topK; j++) { pw[j] = expf(pw[j] - mx); sum += pw[j]; }
            for (int j = 0; j < topK; j++) pw[j] /= sum;
        }
        float sum = 0.f;
        for (int j = 0; j < topK; j++) sum += pw[j];
        for (int j = 0; j < topK; j++) {
            idx[t * topK + j] = picked[j];
            wts[t * topK + j] = normTopK ? pw[j] / sum : pw[j];
        }
    }
}

// ---- Qwen3-Next: gated delta net, attention output gate, shared expert ----

// Row t of the fused projections into the conv input [q; k; v], z [vDim], b and a [nv] (per key head h, qkvz holds
// q_h (dk), k_h (dk), v (rep·dv), z (rep·dv); ba holds b (rep), a (rep); rep = nv / nk). Block t.
extern "C" __global__ void __launch_bounds__(256) ra_gdn_unfuse(const float* qkvz, const float* ba, float* mixed, float* z,
                                                                 float* b, float* a, int nk, int nv, int dk, int dv) {
    int t = blockIdx.x, rep = nv / nk, qk = nk * dk, vd = nv * dv, group = 2 * dk + 2 * rep * dv;
    const float* src = qkvz + (long long) t * (2 * qk + 2 * vd);
    float* dst = mixed + (long long) t * (2 * qk + vd);
    for (int i = threadIdx.x; i < nk * group; i += blockDim.x) {
        int h = i / group, j = i - h * group;
        float v = src[i];
        if (j < dk) dst[h * dk + j] = v;
        else if (j < 2 * dk) dst[qk + h * dk + j - dk] = v;
        else if (j < 2 * dk + rep * dv) dst[2 * qk + h * rep * dv + j - 2 * dk] = v;
        else z[(long long) t * vd + h * rep * dv + j - 2 * dk - rep * dv] = v;
    }
    for (int i = threadIdx.x; i < 2 * nv; i += blockDim.x) {
        int h = i / (2 * rep), j = i - h * 2 * rep;
        float v = ba[(long long) t * 2 * nv + i];
        if (j < rep) b[(long long) t * nv + h * rep + j] = v;
        else a[(long long) t * nv + h * rep + j - rep] = v;
    }
}

#define RA_MAX_CONV 8
// The depthwise causal conv + SiLU of one sequence's `tokens` rows of x [tokens, channels], in place, a thread per
// channel, over the carried previous kernel−1 inputs in state [channels, kernel−1] (oldest first; zeros when the span
// starts at position 0), which it updates. w [channels, kernel] (tap kernel−1 is the current token), bias or null.
extern "C" __global__ void __launch_bounds__(256) ra_gdn_conv(float* x, const float* w, const float* bias, float* state,
                                                               int tokens, int channels, int kernel, const int* pos) {
    int c = blockIdx.x * 256 + threadIdx.x;
    if (c >= channels) return;
    int hist = kernel - 1;
    float win[RA_MAX_CONV];
    bool fresh = pos[0] == 0;
    for (int j = 0; j < hist; j++) win[j] = fresh ? 0.f : state[(long long) c * hist + j];
    for (int t = 0; t < tokens; t++) {
        float* xt = x + (long long) t * channels + c;
        win[hist] = *xt;
        float s = bias == nullptr ? 0.f : bias[c];
        for (int j = 0; j < kernel; j++) s += w[(long long) c * kernel + j] * win[j];
        *xt = s / (1.f + expf(-s));
        for (int j = 0; j < hist; j++) win[j] = win[j + 1];
    }
    for (int j = 0; j < hist; j++) state[(long long) c * hist + j] = win[j];
}

// Warp (value head h = blockIdx.x, row t = blockIdx.y): q and k of its key head L2-normed (q · dk^-½) into
// q, k [T, nv, dk]; beta = σ(b), g = negA·softplus(a + dtBias) [T, nv].
extern "C" __global__ void __launch_bounds__(32) ra_gdn_gates(const float* mixed, const float* b, const float* a,
        const float* negA, const float* dtBias, float* q, float* k, float* g, float* beta, int nk, int nv, int dk, int convDim) {
    int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x, kh = h / (nv / nk), qk = nk * dk;
    const float* xq = mixed + (long long) t * convDim + kh * dk;
    const float* xk = xq + qk;
    float sq = 0.f, sk = 0.f;
    for (int i = lane; i < dk; i += 32) { sq += xq[i] * xq[i]; sk += xk[i] * xk[i]; }
    sq = r_warp_sum(sq);
    sk = r_warp_sum(sk);
    float iq = 1.f / sqrtf(sq + 1e-6f) * (1.f / sqrtf((float) dk)), ik = 1.f / sqrtf(sk + 1e-6f);
    long long o = ((long long) t * nv + h) * dk;
    for (int i = lane; i < dk; i += 32) { q[o + i] = xq[i] * iq; k[o + i] = xk[i] * ik; }
    if (lane == 0) {
        long long i = (long long) t * nv + h;
        float x = a[i] + dtBias[h];
        beta[i] = 1.f / (1.f + expf(-b[i]));
        g[i] = negA[h] * (x > 20.f ? x : log1pf(expf(x)));
    }
}

// The gated delta rule of one sequence's `tokens` rows, token by token, block h = value head, thread c = value dim c
// (its column of S [nv, dk, dv], zeroed when the span starts at position 0): S ← S·e^g; δ = β(v − Sᵀk); S ← S + kδᵀ;
// o = Sᵀq. q, k [T, nv, dk]; v at mixed[t·convDim + vOff + h·dv]; g, beta [T, nv]; out [T, nv·dv].
extern "C" __global__ void __launch_bounds__(256) ra_gdn_rule(const float* q, const float* k, const float* mixed,
        const float* g, const float* beta, float* S, float* out, int tokens, int nv, int dk, int dv, int convDim, int vOff,
        const int* pos) {
    int h = blockIdx.x, c = threadIdx.x;
    if (c >= dv) return;
    float* s = S + (long long) h * dk * dv + c;
    if (pos[0] == 0) for (int i = 0; i < dk; i++) s[(long long) i * dv] = 0.f;
    for (int t = 0; t < tokens; t++) {
        long long gi = (long long) t * nv + h;
        float decay = expf(g[gi]), bt = beta[gi];
        const float* kt = k + gi * dk;
        const float* qt = q + gi * dk;
        float mem = 0.f;
#pragma unroll 1
        for (int i = 0; i < dk; i++) { float v = s[(long long) i * dv] * decay; s[(long long) i * dv] = v; mem += kt[i] * v; }
        float delta = (mixed[(long long) t * convDim + vOff + h * dv + c] - mem) * bt;
        float o = 0.f;
#pragma unroll 1
        for (int i = 0; i < dk; i++) { float v = s[(long long) i * dv] + kt[i] * delta; s[(long long) i * dv] = v; o += qt[i] * v; }
        out[gi * dv + c] = o;
    }
}

// Row blockIdx.x (a value head of a token) of core [rows, dv]: norm(core) · (w | 1+w) · silu(z), in place.
extern "C" __global__ void __launch_bounds__(256) ra_gdn_norm(float* core, const float* z, const float* w, int dv,
                                                               float eps, int offset) {
    __shared__ float red[32];
    float* r = core + (long long) blockIdx.x * dv;
    const float* zr = z + (long long) blockIdx.x * dv;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dv; i += blockDim.x) ss += r[i] * r[i];
    ss = r_block_sum(ss, red);
    float inv = 1.f / sqrtf(ss / dv + eps);
    for (int i = threadIdx.x; i < dv; i += blockDim.x) {
        float v = r[i] * inv;
        if (w != nullptr) v = offset ? v * (1.f + w[i]) : w[i] * v;
        float zz = zr[i];
        r[i] = v * (zz / (1.f + expf(-zz)));
    }
}

// The attention output gate's q projection [rows = T·heads, 2·hd] (per head q then gate) into q and gate [rows, hd].
extern "C" __global__ void __launch_bounds__(256) ra_split_gate(const float* qg, float* q, float* gate, int n, int hd) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    int r = i / hd, j = i - r * hd;
    q[i] = qg[(long long) r * 2 * hd + j];
    gate[i] = qg[(long long) r * 2 * hd + hd + j];
}

// y[i] ·= σ(gate[i]) over n elements (the attention output gate).
extern "C" __global__ void __launch_bounds__(256) ra_sigmoid_mul(float* y, const float* gate, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) y[i] *= 1.f / (1.f + expf(-gate[i]));
}

// y[t, i] += σ(gateLogit[t]) · src[t, i] over n = T·hidden elements (weight 1 when gateLogit is null): the shared expert.
extern "C" __global__ void __launch_bounds__(256) ra_gated_add(float* y, const float* src, const float* gateLogit, int hidden, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i >= n) return;
    float wt = gateLogit == nullptr ? 1.f : 1.f / (1.f + expf(-gateLogit[i / hidden]));
    y[i] += wt * src[i];
}

// wts[i] ·= scale[idx[i]] over the n = tokens·k routed pairs (gemma4's per-expert scale of the chosen experts).
extern "C" __global__ void __launch_bounds__(256) ra_expert_scale(const int* idx, float* wts, const float* scale, int n) {
    int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) wts[i] *= scale[idx[i]];
}

// Expert e's matrices by table: w[e] the weights, rs[e] f32 scales per stored row, cf[e] f32 scales per stored
// column (0 = none), as device addresses (each expert may be a row window of one fused tensor). Stored [out, in]
// (y = W·x) or input-major [in, out] (y = x·W, gpt-oss's HF layout); outs = the stored matrix's output count.
struct RaExperts { const unsigned long long* w; const unsigned long long* rs; const unsigned long long* cf; int outs, inputMajor; };

// Output r of expert e over the input x[cols], by one warp: Σ_c W[r, c]·x[c] with the row and column scales
// (swapped roles when input-major: rows are inputs there).
// The 4-bit kinds (output-major only: ResidentWeights.supportsExpert): rs and cf are the expert's own planes (q4_block's
// f16 scales; q4tp's rungs and codes), the table's addresses already at its first row; every lane of the warp calls.
template <int K>
__device__ __forceinline__ float ra_expert_row(const RaExperts& m, int e, const float* x, int r, int cols, int lane) {
    const void* w = reinterpret_cast<const void*>(m.w[e]);
    const float* rs = reinterpret_cast<const float*>(m.rs[e]);
    const float* cf = reinterpret_cast<const float*>(m.cf[e]);
    if constexpr (K >= 4)
        return r_warp_sum(K == 4 ? q4_block_row<1>(w, reinterpret_cast<const r_u16*>(rs), x, r, cols, lane) : q4tp_row<1>(w, rs, cf, x, r, cols, lane));
    const float* inScale = m.inputMajor ? rs : cf;
    const float* outScale = m.inputMajor ? cf : rs;
    float acc = 0.f;
    if (!m.inputMajor && (cols & 3) == 0) {   // a row is contiguous: 4 weights per lane per step, 128 per warp
        long long base = (long long) r * cols;
        for (int c = lane * 4; c < cols; c += 128) {
            float wv[4];
            ra_load4<K>(w, base + c, wv);
            float4 xv = *reinterpret_cast<const float4*>(x + c);
            if (inScale != nullptr) {
                float4 f = *reinterpret_cast<const float4*>(inScale + c);
                xv.x *= f.x; xv.y *= f.y; xv.z *= f.z; xv.w *= f.w;
            }
            acc += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
        }
    } else {                                  // one weight per lane per step
        for (int c = lane; c < cols; c += 32) {
            float xv = x[c];
            if (inScale != nullptr) xv *= inScale[c];
            long long i = m.inputMajor ? (long long) c * m.outs + r : (long long) r * cols + c;
            acc += ra_load<K>(w, i) * xv;
        }
    }
    acc = r_warp_sum(acc);
    return outScale != nullptr ? acc * outScale[r] : acc;
}

// Output r of an input-major expert by one thread (the caller gives each thread its own output, so a warp reads
// 32 consecutive outputs of every input row: coalesced): Σ_c W[c, r]·rs[c]·x[c]·cf[r].
template <int K>
__device__ __forceinline__ float ra_expert_col(const RaExperts& m, int e, const float* x, int r, int cols) {
    if constexpr (K >= 4) return 0.f;   // never launched: 4-bit experts are output-major (ResidentWeights.supportsExpert)
    const void* w = reinterpret_cast<const void*>(m.w[e]);
    const float* rs = reinterpret_cast<const float*>(m.rs[e]);
    const float* cf = reinterpret_cast<const float*>(m.cf[e]);
    float acc = 0.f;
    for (int c = 0; c < cols; c++) {
        float xv = x[c];
        if (rs != nullptr) xv *= rs[c];
        acc += ra_load<K>(w, (long long) c * m.outs + r) * xv;
    }
    return cf != nullptr ? acc * cf[r] : acc;
}

// h[t·k + j, r] = glu(G_e[r]·x_t + gb, U_e[r]·x_t + ub) with e = idx[t·k + j]: the k chosen experts' gate and up
// of token t. layout 0: separate gate and up tables; 1: one fused [2·I] product, gate = outputs [0, I), up =
// [I, 2I); 2: fused, interleaved (gate 2r, up 2r + 1) — fused, the caller passes the gate table and bias as up's
// too. Biases [experts, n] (n = the product's outputs), or null.
// Output-major: block = 8 warps = 8 rows, grid = (ceil(rows / 8), T·k). Input-major (gate and up both): a thread
// per row, grid = (ceil(rows / 256), T·k).
template <int K>
__device__ __forceinline__ void ra_moe_glu(RaExperts g, RaExperts u, const float* __restrict__ gb, const float* __restrict__ ub,
                                           const int* __restrict__ idx, const float* __restrict__ x, float* __restrict__ h,
                                           int rows, int cols, int topK, int layout, int act, float alpha, float limit) {
    int lane = threadIdx.x & 31;
    bool im = g.inputMajor;
    int r = im ? blockIdx.x * 256 + threadIdx.x : blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;   // output-major: whole warps leave together
    int slot = blockIdx.y, t = slot / topK, e = idx[slot];
    const float* xt = x + (long long) t * cols;
    int gr = layout == 2 ? 2 * r : r, ur = layout == 2 ? 2 * r + 1 : layout == 1 ? rows + r : r;
    float gv = im ? ra_expert_col<K>(g, e, xt, gr, cols) : ra_expert_row<K>(g, e, xt, gr, cols, lane);
    float uv = im ? ra_expert_col<K>(u, e, xt, ur, cols) : ra_expert_row<K>(u, e, xt, ur, cols, lane);
    if (im || lane == 0) {
        if (gb != nullptr) gv += gb[(long long) e * g.outs + gr];
        if (ub != nullptr) uv += ub[(long long) e * u.outs + ur];
        h[(long long) slot * rows + r] = ra_glu(gv, uv, act, alpha, limit);
    }
}

// y[t, r] (+)= Σ_j wts[t·k + j]·(D_e[r]·h[t·k + j] + db[e, r]) with e = idx[t·k + j], j in pick order (no atomics:
// one warp, or when input-major one thread, owns each output). accumulate: add to y (the residual), else overwrite.
// Grid = (ceil(rows / 8), T), input-major (ceil(rows / 256), T).
template <int K>
__device__ __forceinline__ void ra_moe_down(RaExperts d, const float* __restrict__ db, const int* __restrict__ idx,
                                            const float* __restrict__ wts, const float* __restrict__ h, float* __restrict__ y,
                                            int rows, int cols, int topK, int accumulate) {
    int lane = threadIdx.x & 31;
    bool im = d.inputMajor;
    int r = im ? blockIdx.x * 256 + threadIdx.x : blockIdx.x * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = blockIdx.y;
    float acc = 0.f;
    for (int j = 0; j < topK; j++) {
        int slot = t * topK + j, e = idx[slot];
        const float* hs = h + (long long) slot * cols;
        float v = im ? ra_expert_col<K>(d, e, hs, r, cols) : ra_expert_row<K>(d, e, hs, r, cols, lane);
        if (db != nullptr) v += db[(long long) e * rows + r];
        acc += wts[slot] * v;
    }
    if (im || lane == 0) {
        long long o = (long long) t * rows + r;
        y[o] = accumulate ? y[o] + acc : acc;
    }
}

typedef const unsigned long long* RaTab;

#define RA_MOE(SUFFIX, K)                                                                                         \
    extern "C" __global__ void __launch_bounds__(256) ra_moe_glu_##SUFFIX(                                        \
            RaTab gw, RaTab grs, RaTab gcf, int gouts, int gim, RaTab uw, RaTab urs, RaTab ucf, int uouts, int uim, \
            const float* gb, const float* ub, const int* idx, const float* x, float* h, int rows, int cols,      \
            int topK, int layout, int act, float alpha, float limit) {                                            \
        ra_moe_glu<K>(RaExperts{gw, grs, gcf, gouts, gim}, RaExperts{uw, urs, ucf, uouts, uim}, gb, ub, idx, x, h, \
                      rows, cols, topK, layout, act, alpha, limit);                                               \
    }                                                                                                             \
    extern "C" __global__ void __launch_bounds__(256) ra_moe_down_##SUFFIX(                                       \
            RaTab dw, RaTab drs, RaTab dcf, int douts, int dim, const float* db, const int* idx, const float* wts,  \
            const float* h, float* y, int rows, int cols, int topK, int accumulate) {                             \
        ra_moe_down<K>(RaExperts{dw, drs, dcf, douts, dim}, db, idx, wts, h, y, rows, cols, topK, accumulate);    \
    }

RA_MOE(f32, 0)
RA_MOE(bf16, 1)
RA_MOE(f16, 2)
RA_MOE(q8, 3)
RA_MOE(q4_block, 4)
RA_MOE(q4tp, 5)

// Greedy picks on the device: ids[r] = the index of row r's largest logit, the lower index among equal maxima (as the
// CPU's argmax), so a step of greedy rows copies back one int a row instead of the vocabulary's floats. Block = 256
// threads per row: each scans a strided share in increasing order, then warps and the block reduce (value, index).
extern "C" __global__ void __launch_bounds__(256) ra_argmax_rows(const float* logits, int* ids, int vocab) {
    __shared__ float wv[8];
    __shared__ int wi[8];
    int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* l = logits + (long long) r * vocab;
    float bv = R_NEG_INF;
    int bi = 0x7fffffff;
    for (int c = threadIdx.x; c < vocab; c += 256) {
        float v = l[c];
        if (bi == 0x7fffffff || v > bv) { bv = v; bi = c; }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
    }
    if (lane == 0) { wv[warp] = bv; wi[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        bv = lane < 8 ? wv[lane] : R_NEG_INF;
        bi = lane < 8 ? wi[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) { bv = ov; bi = oi; }
        }
        if (lane == 0) ids[r] = bi;
    }
}
