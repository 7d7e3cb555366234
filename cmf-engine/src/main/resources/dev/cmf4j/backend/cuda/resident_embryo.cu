// cmf4j resident-forward kernels of the Embryo family (dev.cmf4j.backend.cuda.EmbryoSteps): the bounded anchor
// swa_sink_v1 (the ring attend and the ring commit), the resonance router, and the hierarchical head (the cluster
// log-softmax, a head product that reads only kept clusters' rows, the per-cluster log-softmax). The gated delta net
// and the experts run resident_arch.cu's kernels. Its own module beside resident.cu (built into
// resident_embryo.fatbin by tools/build-cuda-kernels.sh, NVRTC as the fallback); plain CUDA C over common.cuh
// (CudaKernelEmulationTest compiles every kernel file in one unit, so its own helpers carry an re_ prefix). Every
// kernel reads the sequence's position from device memory, so a decode step replays as one captured graph.

#include "common.cuh"

// sinks + window of one anchor (the format's bound, checked at open): one block holds a query head's scores
#define RE_MAX_SCORES 160
#define RE_MAX_HEAD_DIM 256
#define RE_MAX_EXPERTS 1024

__device__ __forceinline__ double re_warp_sum_d(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block maximum (blockDim a multiple of 32, ≤ 1024); every thread gets it. red: 32 floats of shared memory. (The sum:
// common.cuh's r_block_sum.)
__device__ __forceinline__ float re_block_max(float v, float* red) {
    v = r_warp_max(v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = R_NEG_INF;
    for (int i = 0; i < warps; i++) m = fmaxf(m, red[i]);
    return m;
}

// ---- the bounded anchor ----

// Block (query head h = blockIdx.x, row t = blockIdx.y) of one sequence's `tokens` rows at positions pos[0] + t: one
// softmax over the S sinks of its KV group g (scored unrotated) and the window max(0, p − W + 1) … p (the query rotated
// by the distance d = p − j, rotate-half pairs i, i + half, cos/sin [W, half] precomputed in double; dims past the
// rotary span unrotated); the value sum mixes sink and window values. A key at a position of this step is the chunk's
// own row (k, v [tokens, kvDim], unrotated), an earlier one the ring's slot j mod W (ringK, ringV [W, kvDim]): the
// chunk's rows enter the ring only at re_anchor_commit. q [tokens, heads·hd], out likewise; sinkK/V [kvHeads, S, hd].
extern "C" __global__ void __launch_bounds__(128) re_anchor_attend(const float* q, const float* k, const float* v,
        const float* ringK, const float* ringV, const float* sinkK, const float* sinkV, const float* cosT,
        const float* sinT, float* out, int heads, int kvHeads, int hd, int window, int sinks, int half, float scale,
        const int* pos) {
    __shared__ float sc[RE_MAX_SCORES];
    __shared__ float qs[RE_MAX_HEAD_DIM];
    __shared__ float red[32];
    int h = blockIdx.x, t = blockIdx.y, g = h / (heads / kvHeads);
    int qDim = heads * hd, kvDim = kvHeads * hd;
    int p0 = pos[0], p = p0 + t, first = p - window + 1 > 0 ? p - window + 1 : 0, n = sinks + p - first + 1;
    const float* qr = q + (long long) t * qDim + h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) qs[i] = qr[i];
    __syncthreads();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    for (int s = warp; s < n; s += warps) {   // a warp per score
        float acc = 0.f;
        if (s < sinks) {
            const float* kk = sinkK + ((long long) g * sinks + s) * hd;
            for (int i = lane; i < hd; i += 32) acc += qs[i] * kk[i];
        } else {
            int d = s - sinks, j = p - d;
            const float* kk = j >= p0 ? k + (long long) (j - p0) * kvDim + g * hd : ringK + (long long) (j % window) * kvDim + g * hd;
            const float* cs = cosT + (long long) d * half;
            const float* sn = sinT + (long long) d * half;
            for (int i = lane; i < half; i += 32) {
                float a = qs[i], b = qs[i + half], c = cs[i], si = sn[i];
                acc += kk[i] * (a * c - b * si) + kk[i + half] * (a * si + b * c);
            }
            for (int i = 2 * half + lane; i < hd; i += 32) acc += qs[i] * kk[i];
        }
        acc = r_warp_sum(acc);
        if (lane == 0) sc[s] = acc * scale;
    }
    __syncthreads();
    float m = R_NEG_INF;
    for (int s = threadIdx.x; s < n; s += blockDim.x) m = fmaxf(m, sc[s]);
    m = re_block_max(m, red);
    float sum = 0.f;
    for (int s = threadIdx.x; s < n; s += blockDim.x) { float e = expf(sc[s] - m); sc[s] = e; sum += e; }
    sum = r_block_sum(sum, red);   // (its barriers also publish sc)
    float inv = 1.f / sum;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < sinks; s++) acc += sc[s] * sinkV[((long long) g * sinks + s) * hd + i];
        for (int d = 0; d + sinks < n; d++) {
            int j = p - d;
            const float* vv = j >= p0 ? v + (long long) (j - p0) * kvDim : ringV + (long long) (j % window) * kvDim;
            acc += sc[sinks + d] * vv[g * hd + i];
        }
        out[(long long) t * qDim + h * hd + i] = acc * inv;
    }
}

// After the step's attend: its last min(tokens, W) rows of k and v [tokens, kvDim] into ring slots (pos[0] + t) mod W.
// Block b = the b-th of those rows, threads over kvDim.
extern "C" __global__ void __launch_bounds__(256) re_anchor_commit(const float* k, const float* v, float* ringK, float* ringV,
                                                                    int tokens, int window, int kvDim, const int* pos) {
    int keep = tokens < window ? tokens : window, t = tokens - keep + blockIdx.x;
    long long slot = (pos[0] + t) % window;
    for (int i = threadIdx.x; i < kvDim; i += blockDim.x) {
        ringK[slot * kvDim + i] = k[(long long) t * kvDim + i];
        ringV[slot * kvDim + i] = v[(long long) t * kvDim + i];
    }
}

// ---- the resonance router ----

// Block (token t), a warp per expert: r = y − μ_e, err_e = ‖r‖² − Σ_i (r·u_ei)², summed in double (errors are ~100 and
// the winner must not hang on float rounding, as the CPU's ResonanceRouter); score_e = b_e − err_e; idx[t] = the first
// maximum (an exact tie to the lower expert id), wts[t] = 1. y [T, dim]; mu [E, dim]; u [E, rank, dim]; bias [E].
extern "C" __global__ void __launch_bounds__(256) re_resonance_route(const float* y, const float* mu, const float* u,
        const float* bias, int* idx, float* wts, int experts, int rank, int dim) {
    __shared__ double score[RE_MAX_EXPERTS];
    int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const float* yt = y + (long long) t * dim;
    for (int e = warp; e < experts; e += warps) {
        const float* m = mu + (long long) e * dim;
        double sq = 0;
        for (int j = lane; j < dim; j += 32) { double r = (double) yt[j] - m[j]; sq += r * r; }
        sq = re_warp_sum_d(sq);
        for (int i = 0; i < rank; i++) {
            const float* ui = u + ((long long) e * rank + i) * dim;
            double pr = 0;
            for (int j = lane; j < dim; j += 32) pr += ((double) yt[j] - m[j]) * ui[j];
            pr = re_warp_sum_d(pr);
            sq -= pr * pr;
        }
        if (lane == 0) score[e] = (double) bias[e] - sq;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int best = 0;
        for (int e = 1; e < experts; e++) if (score[e] > score[best]) best = e;
        idx[t] = best;
        wts[t] = 1.f;
    }
}

// ---- the hierarchical head ----

// logsumexp of x[0, n) by the whole block (the max in float, the sum of exponentials in double, as the CPU's
// HierarchicalHead); every thread gets it. red: 32 floats and dred 32 doubles of shared memory.
__device__ __forceinline__ float re_block_lse(const float* x, int n, float* red, double* dred) {
    float m = R_NEG_INF;
    for (int i = threadIdx.x; i < n; i += blockDim.x) m = fmaxf(m, x[i]);
    m = re_block_max(m, red);
    double s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += exp((double) (x[i] - m));
    s = re_warp_sum_d(s);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) dred[warp] = s;
    __syncthreads();
    double total = 0;
    for (int i = 0; i < warps; i++) total += dred[i];
    return m + (float) log(total);
}

// Row r = blockIdx.x of lc [rows, clusters]: lc − logsumexp(lc), in place.
extern "C" __global__ void __launch_bounds__(256) re_cluster_logsoftmax(float* lc, int clusters) {
    __shared__ float red[32];
    __shared__ double dred[32];
    float* l = lc + (long long) blockIdx.x * clusters;
    float lse = re_block_lse(l, clusters, red, dred);
    for (int c = threadIdx.x; c < clusters; c += blockDim.x) l[c] -= lse;
}

// Weight element kinds, as resident.cu: 0 f32, 1 bf16, 2 f16, 3 int8 (q8_row / q8_2f, scales as f32 planes).
template <int K>
__device__ __forceinline__ float re_load(const void* __restrict__ w, long long i) {
    if (K == 0) return static_cast<const float*>(w)[i];
    if (K == 1) return r_bf16(static_cast<const r_u16*>(w)[i]);
    if (K == 2) return r_f16(static_cast<const r_u16*>(w)[i]);
    return (float) static_cast<const signed char*>(w)[i];
}

// 4 consecutive weights from element i (i a multiple of 4): one 16/8/4-byte load.
template <int K>
__device__ __forceinline__ void re_load4(const void* __restrict__ w, long long i, float* o) {
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

// out[r, v] = rs[v]·Σ_c W[v, c]·cf[c]·x[r, c] for each vocabulary row v whose cluster v / size is kept for head row r
// (its log-probability lc[r, v / size] ≥ the row's gate, gate[perRow ? r : 0], a double as State.headGate); the rows of
// dropped clusters are not read (re_head_finish fills their outputs). A warp per vocabulary row, 8 per block; grid
// (ceil(vocab / 8), rows). rs, cf: the matrix's f32 row scales and column field, or null.
template <int K>
__device__ __forceinline__ void re_head_rows(const void* __restrict__ w, const float* __restrict__ rs, const float* __restrict__ cf,
        const float* __restrict__ x, const float* __restrict__ lc, const double* __restrict__ gate, int perRow,
        float* __restrict__ out, int vocab, int cols, int clusters, int size) {
    int v = blockIdx.x * 8 + (threadIdx.x >> 5), r = blockIdx.y, lane = threadIdx.x & 31;
    if (v >= vocab) return;   // whole warps leave together
    if ((double) lc[(long long) r * clusters + v / size] < gate[perRow ? r : 0]) return;
    const float* xr = x + (long long) r * cols;
    long long base = (long long) v * cols;
    float acc = 0.f;
    if ((cols & 3) == 0) {   // 4 weights per lane per step, 128 per warp (rows and x 16-byte aligned then)
        for (int c = lane * 4; c < cols; c += 128) {
            float wv[4];
            re_load4<K>(w, base + c, wv);
            float4 xv = *reinterpret_cast<const float4*>(xr + c);
            if (cf != nullptr) {
                float4 f = *reinterpret_cast<const float4*>(cf + c);
                xv.x *= f.x; xv.y *= f.y; xv.z *= f.z; xv.w *= f.w;
            }
            acc += wv[0] * xv.x + wv[1] * xv.y + wv[2] * xv.z + wv[3] * xv.w;
        }
    } else {
        for (int c = lane; c < cols; c += 32) {
            float xv = xr[c];
            if (cf != nullptr) xv *= cf[c];
            acc += re_load<K>(w, base + c) * xv;
        }
    }
    acc = r_warp_sum(acc);
    if (lane == 0) out[(long long) r * vocab + v] = rs != nullptr ? acc * rs[v] : acc;
}

#define RE_HEAD(SUFFIX, K)                                                                                        \
    extern "C" __global__ void __launch_bounds__(256) re_head_rows_##SUFFIX(                                      \
            const void* w, const float* rs, const float* cf, const float* x, const float* lc, const double* gate,  \
            int perRow, float* out, int vocab, int cols, int clusters, int size) {                                \
        re_head_rows<K>(w, rs, cf, x, lc, gate, perRow, out, vocab, cols, clusters, size);                        \
    }

RE_HEAD(f32, 0)
RE_HEAD(bf16, 1)
RE_HEAD(f16, 2)
RE_HEAD(q8, 3)

// Block (cluster c = blockIdx.x, head row r = blockIdx.y) of out [rows, vocab] holding z = head·x on kept clusters:
// kept (lp = lc[r, c] ≥ the row's gate): log p = z − logsumexp of the cluster's z + lp; dropped: every token of the
// cluster gets its mass spread evenly, lp − spread (spread = ln size, as the CPU's float), so the row still sums to 1.
extern "C" __global__ void __launch_bounds__(256) re_head_finish(float* out, const float* lc, const double* gate, int perRow,
                                                                  int vocab, int clusters, int size, float spread) {
    __shared__ float red[32];
    __shared__ double dred[32];
    int c = blockIdx.x, r = blockIdx.y;
    float lp = lc[(long long) r * clusters + c];
    float* o = out + (long long) r * vocab + (long long) c * size;
    if ((double) lp < gate[perRow ? r : 0]) {
        for (int i = threadIdx.x; i < size; i += blockDim.x) o[i] = lp - spread;
        return;
    }
    float lse = re_block_lse(o, size, red, dred);
    for (int i = threadIdx.x; i < size; i += blockDim.x) o[i] = o[i] - lse + lp;
}
