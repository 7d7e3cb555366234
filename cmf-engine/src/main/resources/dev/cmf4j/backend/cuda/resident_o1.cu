// cmf4j resident-forward kernels of the sealed ("--o1", Nyström) attention layers (dev.cmf4j.backend.cuda.SealedSteps;
// the math: docs/MEMORY.md, backend.cpu.NystromHead). The prompt runs exact (resident.cu's kernels, the queries kept by
// ro_keep_queries); at sealing the segment means come from ro_means (float64), the host builds M in float64, then
// ro_absorb_prompt folds the prompt's far keys into the per-landmark sums and ro_seal_copy fills the ring and the sinks.
// Sealed steps: ro_rope (q/k norm and rope in place, no cache), ro_attend (per query head, the rows in position order:
// the key leaving the window into the far sums, then one softmax over sinks, window and far field), ro_commit (the
// step's rows into the ring). Its own module; plain CUDA C over common.cuh (CudaKernelEmulationTest
// compiles every kernel file in one unit, so its own helpers carry an ro_ prefix). Positions are read from device memory,
// so a decode step replays as one captured graph.
//
// A head's far state, at far + h·(2·m·hd + m·m + m·dv + 2·m): Q̃ [m, hd], K̃ [m, hd], M [m, m], T̂ [m, dv], Ẑ [m],
// running max [m] (m: the sequence's landmark count).

#include "common.cuh"
#include "resident.cuh"

#define RO_MAX_HEAD_DIM 256
// sinks + window (SealedSteps checks it) and landmarks a block keeps in shared memory
#define RO_MAX_NEAR 2048
#define RO_MAX_M 256

__device__ __forceinline__ float ro_block_max(float v, float* red) {
    v = r_warp_max(v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();   // red may still be read by a previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float m = R_NEG_INF;
    for (int i = 0; i < warps; i++) m = fmaxf(m, red[i]);
    return m;
}

__device__ __forceinline__ long long ro_head_floats(int m, int hd, int dv) { return 2LL * m * hd + (long long) m * m + (long long) m * dv + 2LL * m; }

// ---- the exact phase ----

// The step's rotated query rows q [T, qDim] into the query store at rows pos[0] + t (the landmarks' Q̃ comes from them).
// Grid (ceil(qDim / 256), T).
extern "C" __global__ void __launch_bounds__(256) ro_keep_queries(const float* q, float* store, int qDim, const int* pos) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (i < qDim) store[(long long) (pos[0] + t) * qDim + i] = q[(long long) t * qDim + i];
}

// ---- sealing ----

// Block (head h, landmark i) of x [p, stride] (head h's columns at h·hd): the mean of segment i, rows
// [i·p/m, (i+1)·p/m), summed in float64 in row order: out[(h·m + i)·hd + c].
extern "C" __global__ void __launch_bounds__(128) ro_means(const float* x, int stride, int hd, int p, int m, double* out) {
    int h = blockIdx.x, i = blockIdx.y;
    int lo = (int) ((long long) i * p / m), hi = (int) ((long long) (i + 1) * p / m);
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        double s = 0;
        for (int j = lo; j < hi; j++) s += x[(long long) j * stride + h * hd + c];
        out[((long long) h * m + i) * hd + c] = s / (hi - lo);
    }
}

// Block (query head h, landmark i): the far keys [from, to) of the exact cache kc [·, kvHeads·hd], vc [·, kvHeads·dv]
// into the head's sums: l_j = scale·Q̃_i·k_j, max = max_j l_j, T̂[i] = Σ exp(l_j − max)·v_j, Ẑ[i] = Σ exp(l_j − max),
// running max = max (−∞ and zeros when there is none). 4 warps, a warp per key.
extern "C" __global__ void __launch_bounds__(128) ro_absorb_prompt(const float* kc, const float* vc, float* far, int heads,
        int kvHeads, int hd, int dv, int m, int from, int to, float scale) {
    __shared__ float red[32];
    __shared__ float part[4][RO_MAX_HEAD_DIM + 1];
    int h = blockIdx.x, i = blockIdx.y, g = h / (heads / kvHeads);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    float* st = far + h * ro_head_floats(m, hd, dv);
    const float* qt = st + (long long) i * hd;
    float* th = st + 2LL * m * hd + (long long) m * m;
    float* zh = th + (long long) m * dv;
    float* mx = zh + m;
    long long kvDim = (long long) kvHeads * hd, vDim = (long long) kvHeads * dv;
    float best = R_NEG_INF;
    for (int j = from + warp; j < to; j += warps) {
        const float* kk = kc + j * kvDim + g * hd;
        float d = 0.f;
        for (int c = lane; c < hd; c += 32) d += qt[c] * kk[c];
        best = fmaxf(best, r_warp_sum(d) * scale);
    }
    float top = ro_block_max(best, red);
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, z = 0.f;
    for (int j = from + warp; j < to; j += warps) {
        const float* kk = kc + j * kvDim + g * hd;
        const float* vv = vc + j * vDim + g * dv;
        float d = 0.f;
        for (int c = lane; c < hd; c += 32) d += qt[c] * kk[c];
        float e = expf(r_warp_sum(d) * scale - top);
        z += e;
        for (int r = 0; r < 8 && lane + 32 * r < dv; r++) acc[r] += e * vv[lane + 32 * r];
    }
    for (int r = 0; r < 8 && lane + 32 * r < dv; r++) part[warp][lane + 32 * r] = acc[r];
    if (lane == 0) part[warp][RO_MAX_HEAD_DIM] = z;
    __syncthreads();
    for (int c = threadIdx.x; c < dv; c += blockDim.x) {
        float s = 0.f;
        for (int w = 0; w < warps; w++) s += part[w][c];
        th[(long long) i * dv + c] = s;
    }
    if (threadIdx.x == 0) {
        float s = 0.f;
        for (int w = 0; w < warps; w++) s += part[w][RO_MAX_HEAD_DIM];
        zh[i] = s;
        mx[i] = top;   // −∞ with no far key: the first absorbed key then sets it
    }
}

// At sealing, from the exact cache (positions [0, p)): the ring's slots j mod W of positions [max(0, p − W), p), then
// the first S rows into the sinks. Block b over W + S rows, threads over the row.
extern "C" __global__ void __launch_bounds__(256) ro_seal_copy(const float* kc, const float* vc, float* ringK, float* ringV,
        float* sinkK, float* sinkV, int kvDim, int vDim, int window, int sinks, int p) {
    int b = blockIdx.x, first = p - window > 0 ? p - window : 0;
    const float *ks, *vs;
    float *kd, *vd;
    if (b < window) {
        int j = first + b;
        if (j >= p) return;
        ks = kc + (long long) j * kvDim; vs = vc + (long long) j * vDim;
        kd = ringK + (long long) (j % window) * kvDim; vd = ringV + (long long) (j % window) * vDim;
    } else {
        int s = b - window;
        if (s >= p) return;
        ks = kc + (long long) s * kvDim; vs = vc + (long long) s * vDim;
        kd = sinkK + (long long) s * kvDim; vd = sinkV + (long long) s * vDim;
    }
    for (int c = threadIdx.x; c < kvDim; c += blockDim.x) kd[c] = ks[c];
    for (int c = threadIdx.x; c < vDim; c += blockDim.x) vd[c] = vs[c];
}

// ---- sealed steps ----

// Warp (head, t) over heads + kvHeads head rows, 4 per block (grid ceil((heads + kvHeads) / 4) × T): resident.cu's
// r_qk_rope_append for a sealed layer, whose keys go to no cache: the per-head RMSNorm when its flag is set (offset:
// gemma's (1 + w)), then the rotate_half rope at position pos[0] + t (dims past rotaryDim unrotated); q and k rows
// rewritten in place.
extern "C" __global__ void __launch_bounds__(128) ro_rope(float* q, float* k, const float* qw, const float* kw, int qNorm,
        int kNorm, float eps, int offset, const float* invFreq, int rotaryDim, float ropeScale, int heads, int kvHeads, int hd,
        const int* pos) {
    __shared__ float rows[4][RO_MAX_HEAD_DIM];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = blockIdx.x * 4 + warp, t = blockIdx.y;
    if (h >= heads + kvHeads) return;   // no block barrier below
    float* buf = rows[warp];
    int p = pos[0] + t;
    bool isQ = h < heads;
    float* row = isQ ? q + ((long long) t * heads + h) * hd : k + ((long long) t * kvHeads + (h - heads)) * hd;
    for (int i = lane; i < hd; i += 32) buf[i] = row[i];
    __syncwarp();
    if (isQ ? qNorm : kNorm) {
        float inv = 1.f / sqrtf(r_head_sumsq(buf, hd, lane) / hd + eps);
        const float* w = isQ ? qw : kw;
        for (int i = lane; i < hd; i += 32) {
            float x = buf[i];
            buf[i] = w == nullptr ? x * inv : offset ? (x * inv) * (1.f + w[i]) : w[i] * (x * inv);
        }
        __syncwarp();
    }
    int half = rotaryDim / 2;
    for (int i = lane; i < half; i += 32) {   // one angle per rotated pair (i, i + half)
        float a0 = (float) p * invFreq[i];
        float c = cosf(a0) * ropeScale, s = sinf(a0) * ropeScale;
        float a = r_rope_at(buf, i, half, rotaryDim, c, s), b = r_rope_at(buf, i + half, half, rotaryDim, c, s);
        row[i] = a;
        row[i + half] = b;
    }
    for (int i = rotaryDim + lane; i < hd; i += 32) row[i] = buf[i];
}

// Block (query head h) of one sequence's `tokens` rows at positions pos[0] + t, in order. Row at p: the key p − W
// (when ≥ S) leaves the window and enters the head's far sums (each landmark at its running max, rescaled when it
// grows); then one softmax over the S sinks (sinkK/V [S, ·]), the window max(S, p − W + 1) … p and the far field:
// near logits ℓ_j = scale·q·k_j, landmark row F = exp(scale·q·K̃ᵀ − f) at its own shift f, u = F·M, the joint shift
// c = max(max ℓ, sink logit, max_b f + mx_b), far weights u_b·exp(f + mx_b − c), far denominator Σ u_b·Ẑ_b (negative:
// the row drops its far field, the Aggregate rectifier); out = (Σ u_b·T̂_b + Σ e_j·v_j) / max(den, 1e-30). A key of
// this step is the chunk's own row (k [T, kvHeads·hd], v [T, kvHeads·dv], rotated), an earlier one the ring's slot
// j mod W (ringK/V [W, ·]): the rows enter the ring at ro_commit. headSinks: gpt-oss's per-head sink logits, or null.
// q [T, heads·hd], out [T, heads·dv].
extern "C" __global__ void __launch_bounds__(128, 1) ro_attend(const float* q, const float* k, const float* v, const float* ringK,
        const float* ringV, const float* sinkK, const float* sinkV, float* far, const float* headSinks, float* out, int heads,
        int kvHeads, int hd, int dv, int window, int sinks, int m, float scale, int tokens, const int* pos) {
    __shared__ float sc[RO_MAX_NEAR];
    __shared__ float qs[RO_MAX_HEAD_DIM];
    __shared__ float fh[RO_MAX_M], u[RO_MAX_M];
    __shared__ float red[32];
    int h = blockIdx.x, g = h / (heads / kvHeads);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    long long kvDim = (long long) kvHeads * hd, vDim = (long long) kvHeads * dv, qDim = (long long) heads * hd;
    float* st = far + h * ro_head_floats(m, hd, dv);
    const float* qt = st;
    const float* kt = st + (long long) m * hd;
    const float* mu = st + 2LL * m * hd;
    float* th = st + 2LL * m * hd + (long long) m * m;
    float* zh = th + (long long) m * dv;
    float* mx = zh + m;
    float sinkLogit = headSinks == nullptr ? R_NEG_INF : headSinks[h];
    int p0 = pos[0];
    for (int t = 0; t < tokens; t++) {
        int p = p0 + t, ev = p - window;
        const float* qr = q + t * qDim + h * hd;
        for (int c = threadIdx.x; c < hd; c += blockDim.x) qs[c] = qr[c];
        if (ev >= sinks) {   // the key leaving the window: a warp per landmark
            const float* kk = ev >= p0 ? k + (ev - p0) * kvDim + g * hd : ringK + (long long) (ev % window) * kvDim + g * hd;
            const float* vv = ev >= p0 ? v + (ev - p0) * vDim + g * dv : ringV + (long long) (ev % window) * vDim + g * dv;
            for (int i = warp; i < m; i += warps) {
                float d = 0.f;
                for (int c = lane; c < hd; c += 32) d += qt[(long long) i * hd + c] * kk[c];
                float l = r_warp_sum(d) * scale, old = mx[i];
                float r = l > old ? expf(old - l) : 1.f;   // 0 on the first key (old −∞)
                float top = l > old ? l : old;
                float e = expf(l - top);
                for (int c = lane; c < dv; c += 32) th[(long long) i * dv + c] = th[(long long) i * dv + c] * r + e * vv[c];
                __syncwarp();
                if (lane == 0) { zh[i] = zh[i] * r + e; mx[i] = top; }
            }
        }
        __syncthreads();   // qs and the far sums
        int from = ev + 1 > sinks ? ev + 1 : sinks, n = sinks + p - from + 1;
        for (int s = warp; s < n; s += warps) {   // near logits, a warp each
            const float* kk;
            if (s < sinks) kk = sinkK + s * kvDim + g * hd;
            else {
                int j = from + s - sinks;
                kk = j >= p0 ? k + (j - p0) * kvDim + g * hd : ringK + (long long) (j % window) * kvDim + g * hd;
            }
            float d = 0.f;
            for (int c = lane; c < hd; c += 32) d += qs[c] * kk[c];
            d = r_warp_sum(d);
            if (lane == 0) sc[s] = d * scale;
        }
        for (int a = warp; a < m; a += warps) {   // the landmark row's logits
            float d = 0.f;
            for (int c = lane; c < hd; c += 32) d += qs[c] * kt[(long long) a * hd + c];
            d = r_warp_sum(d);
            if (lane == 0) fh[a] = d * scale;
        }
        __syncthreads();
        float nm = R_NEG_INF;
        for (int s = threadIdx.x; s < n; s += blockDim.x) nm = fmaxf(nm, sc[s]);
        float nearMax = fmaxf(ro_block_max(nm, red), sinkLogit);   // (its barriers also publish sc and fh)
        float f = R_NEG_INF, shift = nearMax;
        for (int a = 0; a < m; a++) f = fmaxf(f, fh[a]);
        for (int b = 0; b < m; b++) shift = fmaxf(shift, f + mx[b]);
        __syncthreads();   // every thread has read fh
        for (int a = threadIdx.x; a < m; a += blockDim.x) fh[a] = expf(fh[a] - f);
        for (int s = threadIdx.x; s < n; s += blockDim.x) sc[s] = expf(sc[s] - shift);
        __syncthreads();
        for (int b = threadIdx.x; b < m; b += blockDim.x) {
            float s = 0.f;
            for (int a = 0; a < m; a++) s += fh[a] * mu[(long long) a * m + b];
            u[b] = s * expf(f + mx[b] - shift);
        }
        __syncthreads();
        float farDen = 0.f;
        for (int b = 0; b < m; b++) farDen += u[b] * zh[b];
        bool keepFar = farDen >= 0.f;   // Aggregate rectifier (a NaN drops it too)
        float den = keepFar ? farDen : 0.f;
        if (headSinks != nullptr) den += expf(sinkLogit - shift);
        for (int s = 0; s < n; s++) den += sc[s];
        float inv = 1.f / fmaxf(den, 1e-30f);
        for (int c = threadIdx.x; c < dv; c += blockDim.x) {
            float acc = 0.f;
            if (keepFar) for (int b = 0; b < m; b++) acc += u[b] * th[(long long) b * dv + c];
            for (int s = 0; s < n; s++) {
                const float* vv;
                if (s < sinks) vv = sinkV + s * vDim + g * dv;
                else {
                    int j = from + s - sinks;
                    vv = j >= p0 ? v + (j - p0) * vDim + g * dv : ringV + (long long) (j % window) * vDim + g * dv;
                }
                acc += sc[s] * vv[c];
            }
            out[(long long) t * heads * dv + (long long) h * dv + c] = acc * inv;
        }
        __syncthreads();   // sc, u, qs reused by the next row
    }
}

// After the step's attention: its last min(tokens, W) rows of k [T, kvDim] and v [T, vDim] into ring slots
// (pos[0] + t) mod W. Block b = the b-th of those rows.
extern "C" __global__ void __launch_bounds__(256) ro_commit(const float* k, const float* v, float* ringK, float* ringV,
        int tokens, int window, int kvDim, int vDim, const int* pos) {
    int keep = tokens < window ? tokens : window, t = tokens - keep + blockIdx.x;
    long long slot = (pos[0] + t) % window;
    for (int i = threadIdx.x; i < kvDim; i += blockDim.x) ringK[slot * kvDim + i] = k[(long long) t * kvDim + i];
    for (int i = threadIdx.x; i < vDim; i += blockDim.x) ringV[slot * vDim + i] = v[(long long) t * vDim + i];
}
