// cmf4j resident-forward kernels, attention (dev.cmf4j.backend.cuda.ResidentForward): the q/k norms, rope and KV
// append of a prompt chunk, the decode attention of one row and of a batch of rows (split over the keys, merged),
// and the prefill attention (flash-attention tiles, on f32 units and on tensor cores). Its own module (built into
// resident_attn.fatbin by tools/build-cuda-kernels.sh, NVRTC as the fallback), over common.cuh and resident.cuh.

#include "common.cuh"
#include "resident.cuh"

// ---- norms ----

__device__ __forceinline__ float r_scaled(float x, float inv, const float* w, int i, int offset) {
    if (w == nullptr) return x * inv;
    return offset ? (x * inv) * (1.f + w[i]) : w[i] * (x * inv);
}

// ---- q/k norm, rope, KV append ----

// The per-head RMSNorm (qwen3 q_norm / k_norm; offset: gemma's (1 + w)) of a head row in shared memory, in place,
// by the whole block (buf written and synced before; synced after).
__device__ __forceinline__ void r_head_norm(float* buf, const float* w, float eps, int offset, int hd) {
    float inv = 1.f / sqrtf(r_head_sumsq(buf, hd, threadIdx.x & 31) / hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x) buf[i] = r_scaled(buf[i], inv, w, i, offset);
    __syncthreads();
}

// Warp (head, t) over heads + kvHeads heads, 4 heads per block (grid ceil((heads + kvHeads)/4) × T): the per-head
// RMSNorm (qwen3 q_norm / k_norm) when its flag is set, then the rotate_half rope at position pos[0] + t (angle =
// pos·invFreq in f32, cos/sin · ropeScale). q heads are rewritten in place; k heads go to the key cache at that
// position, and the warp also copies the head's v into the value cache. headDim ≤ 256. Prefill chunks only (T > 1):
// a decode step's attention (r_attn_partial) norms and ropes its own rows and appends k and v itself, with the
// same helpers (r_head_sumsq: the same sum in the same order, so the normed and roped rows are the same numbers).
// Here a warp owns a row, in its own slice of shared memory. No block barrier: with a block of 128 threads per row (before) a llama-8b 512-token chunk
// ran 20,480 blocks per layer, 29 µs; a warp per row takes 17 µs (H200, -Dcmf.cuda.profile=true).
#define R_ROPE_WARPS 4
template <typename KV>
__device__ __forceinline__ void r_qk_rope_append_warp(
        float* q, const float* k, const float* v, KV* kc, KV* vc,
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset,
        const float* invFreq, int rotaryDim, float ropeScale,
        int heads, int kvHeads, int hd, const int* pos, float* kch, int window, int chunk) {
    __shared__ float rows[R_ROPE_WARPS][256];
    r_pdl_trigger();
    r_pdl_wait();
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int h = blockIdx.x * R_ROPE_WARPS + warp, t = blockIdx.y;
    if (h >= heads + kvHeads) return;   // no block barrier below
    float* buf = rows[warp];
    int p = pos[0] + t;
    bool isQ = h < heads;
    int kvh = h - heads;
    const float* src = isQ ? q + ((long long) t * heads + h) * hd : k + ((long long) t * kvHeads + kvh) * hd;
    float* qd = q + ((long long) t * heads + h) * hd;   // a q row: in place
    const long long slot = r_kv_slot(p, r_kv_ring(window, chunk));
    KV* kd = kc + slot * r_kv_row<KV>(kvHeads, hd) + (long long) (isQ ? 0 : kvh) * r_kv_head<KV>(hd);   // a k row: key p's cache row
    for (int i = lane; i < hd; i += 32) buf[i] = src[i];
    __syncwarp();
    if (isQ ? qNorm : kNorm) {
        float inv = 1.f / sqrtf(r_head_sumsq(buf, hd, lane) / hd + eps);
        const float* w = isQ ? qw : kw;
        for (int i = lane; i < hd; i += 32) buf[i] = r_scaled(buf[i], inv, w, i, offset);
        __syncwarp();
    }
    int half = rotaryDim / 2;
    for (int i = lane; i < half; i += 32) {   // one angle per rotated pair (i, i + half)
        float c, s;
        r_rope_cs(i, p, invFreq, half, ropeScale, c, s);
        float a = r_rope_at(buf, i, half, rotaryDim, c, s), b = r_rope_at(buf, i + half, half, rotaryDim, c, s);
        if (isQ) { qd[i] = a; qd[i + half] = b; }
        else if constexpr (r_kv_is_q8<KV>::v) { buf[i] = a; buf[i + half] = b; }   // (the pair is this lane's alone)
        else { r_kv_st(kd, i, a); r_kv_st(kd, i + half, b); }
    }
    for (int i = rotaryDim + lane; i < hd; i += 32) {   // past the rotary dims: unrotated
        if (isQ) qd[i] = buf[i];
        else if constexpr (!r_kv_is_q8<KV>::v) r_kv_st(kd, i, buf[i]);
    }
    if (!isQ) {
        const float* vs = v + ((long long) t * kvHeads + kvh) * hd;
        KV* vd = vc + slot * r_kv_row<KV>(kvHeads, hd) + (long long) kvh * r_kv_head<KV>(hd);
        if constexpr (r_kv_is_q8<KV>::v) {   // the roped k row (in buf) as f32 for the chunk's attention, then both quantized
            __syncwarp();
            float* kr = kch + ((long long) t * kvHeads + kvh) * hd;
            for (int i = lane; i < hd; i += 32) kr[i] = buf[i];
            r_q8_store_head(kd, buf, hd, lane);
            r_q8_store_head(vd, vs, hd, lane);
        } else {
            for (int i = lane; i < hd; i += 32) r_kv_st(vd, i, vs[i]);
        }
    }
}
#define R_QK_ROPE_APPEND(NAME, KV) \
extern "C" __global__ void __launch_bounds__(32 * R_ROPE_WARPS) NAME( \
        float* q, const float* k, const float* v, KV* kc, KV* vc, \
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset, \
        const float* invFreq, int rotaryDim, float ropeScale, \
        int heads, int kvHeads, int hd, const int* pos, float* kch, int window, int chunk) { \
    r_qk_rope_append_warp<KV>(q, k, v, kc, vc, qw, kw, qNorm, kNorm, eps, offset, invFreq, rotaryDim, ropeScale, \
            heads, kvHeads, hd, pos, kch, window, chunk); \
}
R_QK_ROPE_APPEND(r_qk_rope_append, float)
R_QK_ROPE_APPEND(r_qk_rope_append_h, r_u16)
R_QK_ROPE_APPEND(r_qk_rope_append_q, r_i8)

// ---- attention over the KV cache (split over the keys, then combined) ----

#define R_ATT_WARPS 4
#define R_ATT_MAXI 8   // headDim ≤ 32·8

// Merges the splits' partials of (head h, query t) into out[t, h·hd + c] = Σ_s acc_s[c]·e^(m_s−M) / Σ_s l_s·e^(m_s−M),
// by the calling block. The split weights e^(m_s−M)/L are computed once (splits ≤ 32: one warp) and shared. sinks
// (gpt-oss, else null): the head's sink logit joins M and L only (it has no value row). The partials were written by
// other blocks of this grid: read past L1 (__ldcg).
__device__ __forceinline__ float r_ldcg(const float* p) {
#ifdef __CUDA_ARCH__
    return __ldcg(p);
#else
    return *p;
#endif
}

__device__ __forceinline__ void r_attn_merge(const float* pm, const float* pl, const float* pacc, float* out, int heads,
                                             int hd, int splits, const float* sinks, int h, int t) {
    __shared__ float ws[32];
    long long base = ((long long) t * heads + h) * splits;
    if (threadIdx.x < 32) {
        int s = threadIdx.x;
        float m = s < splits ? r_ldcg(pm + base + s) : R_NEG_INF, l = s < splits ? r_ldcg(pl + base + s) : 0.f;
        float M = m;
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
        if (sinks != nullptr) M = fmaxf(M, sinks[h]);
        float e = m == R_NEG_INF ? 0.f : expf(m - M);
        float L = l * e;
        for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
        if (sinks != nullptr) L += expf(sinks[h] - M);   // the sink logit joins the denominator only
        ws[s] = e / L;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float a = 0.f;
        for (int s = 0; s < splits; s++) a += r_ldcg(pacc + (base + s) * hd + c) * ws[s];
        out[((long long) t * heads + h) * hd + c] = a;
    }
}

// The start of a decode-attention block (r_attn_partial): (head h, split s) = blockIdx (one query: T = 1, position
// p = pos[0]), the split's keys [lo, hi) of [first, p] (first = 0, or p − window + 1 on a sliding-window layer: the
// cache stays full length), the query row qh (the block's normed, roped row in shared memory) in registers
// (lane + 32·i), the weighted values zeroed.
struct RAttnKeys { int lo, hi, kvh; };
template <int MI>
__device__ __forceinline__ RAttnKeys r_attn_split_begin(const float* qh, int heads, int kvHeads, int hd, int p,
                                                        int splits, int window, float (&qv)[MI], float (&acc)[MI]) {
    int h = blockIdx.x, s = blockIdx.z, lane = threadIdx.x & 31;
    int first = window > 0 && p >= window ? p - window + 1 : 0;
    int n = p + 1 - first;
    RAttnKeys k;
    k.lo = first + (int) ((long long) s * n / splits);
    k.hi = first + (int) ((long long) (s + 1) * n / splits);
    k.kvh = h / (heads / kvHeads);
#pragma unroll
    for (int i = 0; i < MI; i++) {
        int d = lane + 32 * i;
        qv[i] = d < hd ? qh[d] : 0.f;
        acc[i] = 0.f;
    }
    return k;
}

// The end of a decode-attention block (r_attn_partial): its warps' running (m, l, acc)
// merged in shared memory into the split's partials, then the last split of (t, h) to finish (a counter in `done`,
// reset by that block for the next step) merges every split into out (r_attn_merge).
template <int MI>
__device__ __forceinline__ void r_attn_split_end(float m, float l, const float (&acc)[MI], float* pm, float* pl,
                                                 float* pacc, float* out, int* done, const float* sinks, int heads,
                                                 int hd, int splits, int h, int t, int s) {
    __shared__ float sm[R_ATT_WARPS], sl[R_ATT_WARPS];
    __shared__ float sacc[R_ATT_WARPS][256];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < MI; i++) {
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
    // the split's partials are written: the last of the head's splits to get here merges them
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int* d = done + (long long) t * heads + h;
        last = atomicAdd(d, 1) == splits - 1;
        if (last) *d = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    r_attn_merge(pm, pl, pacc, out, heads, hd, splits, sinks, h, t);
}

// N per-lane partial sums d[0..N) (N a power of two ≤ 32) summed over the warp, transposed: each of the first
// log2 N exchanges halves the values a lane holds (it keeps one half, sends the other), so lane l ends holding the
// whole sum of value l >> (5 − log2 N) in N − 1 + 5 − log2 N shuffles instead of 5·N.
template <int N>
__device__ __forceinline__ float r_warp_sum_transposed(float (&d)[N], int lane) {
#pragma unroll
    for (int n = N, o = 16; n > 1; n >>= 1, o >>= 1) {
        const bool upper = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            float keep = upper ? d[i + n / 2] : d[i], send = upper ? d[i] : d[i + n / 2];
            d[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float v = d[0];
#pragma unroll
    for (int o = 16 / N; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The key walk of a decode-attention block (r_attn_decode_row) for head dims ≤ 32·MI: each warp takes every 4th group
// of KEYS = min(32 / MI, MAXKEYS) consecutive keys below p (at most 4 for a q8 cache), their K and V rows loaded at once (keys past the end masked: rows read
// as 0, score −inf); the group's dot products summed transposed (r_warp_sum_transposed: lane l holds key
// l / (32 / KEYS)'s score), so the max, the exp and the sum of the online softmax cost one exp and a few shuffles per
// group, and each key's weight reaches every lane by one broadcast shuffle. Key p joins one warp after the walk;
// r_attn_split_end merges the 4 warps. l is summed per lane (each key counted by the first lane holding it) and over
// the warp at the end.
template <typename KV, int MI, int MAXKEYS>
__device__ __forceinline__ void r_attn_walk(const float* rq, const float* rk, const float* v, const KV* kc, const KV* vc,
                                            float* pm, float* pl, float* pacc, int heads, int kvHeads, int hd, float scale,
                                            int p, int splits, int window, int ring, bool withKey, float* out, int* done,
                                            const float* sinks, int t) {
    // at most MAXKEYS; q8 caches hold each key's two scales too: 4 keys a step keep them within 128 registers
    constexpr int WIDE = 32 / MI < MAXKEYS ? 32 / MI : MAXKEYS;
    constexpr int KEYS = r_kv_is_q8<KV>::v && WIDE > 4 ? 4 : WIDE, LANES = 32 / KEYS;   // LANES: lanes holding a key's score
    const int h = blockIdx.x, s = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float qv[MI], acc[MI];
    const RAttnKeys ks = r_attn_split_begin<MI>(rq, heads, kvHeads, hd, p, splits, window, qv, acc);
    const int lo = ks.lo, hi = withKey ? ks.hi - 1 : ks.hi, kvh = ks.kvh;   // the walk: cache rows below p only
    const long long rowStride = r_kv_row<KV>(kvHeads, hd), headAt = (long long) kvh * r_kv_head<KV>(hd);
    const int mine = lane / LANES;   // the key of the group whose score this lane ends up holding
    float m = R_NEG_INF, l = 0.f;
    for (int j0 = lo + warp * KEYS; j0 < hi; j0 += R_ATT_WARPS * KEYS) {
        KV kraw[KEYS][MI], vraw[KEYS][MI];
        float ksc[KEYS], vsc[KEYS];   // q8: the keys' scales (unused otherwise)
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            bool live = j0 + u < hi;
            const long long at = r_kv_slot(j0 + u, ring) * rowStride + headAt;
            const KV* kp = kc + at;
            const KV* vp = vc + at;
            if constexpr (r_kv_is_q8<KV>::v) {
                ksc[u] = live ? r_q8_scale(kp, hd) : 0.f;
                vsc[u] = live ? r_q8_scale(vp, hd) : 0.f;
            }
#pragma unroll
            for (int i = 0; i < MI; i++) {
                int c = lane + 32 * i;
                bool ok = live && c < hd;
                kraw[u][i] = ok ? kp[c] : KV(0);   // a dead key's rows are never read (row p is being written; past p unwritten)
                vraw[u][i] = ok ? vp[c] : KV(0);
            }
        }
        float d[KEYS];
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            d[u] = 0.f;
#pragma unroll
            for (int i = 0; i < MI; i++) d[u] += qv[i] * r_kv_f32(kraw[u][i]);
            if constexpr (r_kv_is_q8<KV>::v) d[u] *= ksc[u];   // q·(codes·s) as (q·codes)·s
        }
        float sc = r_warp_sum_transposed<KEYS>(d, lane);
        sc = j0 + mine < hi ? sc * scale : R_NEG_INF;   // key j0 is live: the group's max is finite
        float mx = sc;
#pragma unroll
        for (int o = 16; o >= LANES; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float mn = fmaxf(m, mx);
        const float corr = expf(m - mn);   // m = -inf the first time: corr = 0
        const float e = expf(sc - mn);     // a dead key: e = 0
        l = l * corr + (lane % LANES == 0 ? e : 0.f);
#pragma unroll
        for (int i = 0; i < MI; i++) acc[i] *= corr;
#pragma unroll
        for (int u = 0; u < KEYS; u++) {
            float ev = __shfl_sync(0xffffffffu, e, u * LANES);
            if constexpr (r_kv_is_q8<KV>::v) ev *= vsc[u];
#pragma unroll
            for (int i = 0; i < MI; i++) acc[i] += ev * r_kv_f32(vraw[u][i]);
        }
        m = mn;
    }
    // key p (k row from shared memory, v row from the v product) joins the warp that would take the next group
    if (withKey && warp == ((hi - lo) / KEYS) % R_ATT_WARPS) {
        const float* vp = v + (long long) kvh * hd;
        float d = 0.f, vr[MI];
#pragma unroll
        for (int i = 0; i < MI; i++) {
            int c = lane + 32 * i;
            d += qv[i] * (c < hd ? rk[c] : 0.f);
            vr[i] = c < hd ? vp[c] : 0.f;
        }
        d = r_warp_sum(d) * scale;
        float mn = fmaxf(m, d);
        float corr = expf(m - mn), e = expf(d - mn);
        l = l * corr + (lane == 0 ? e : 0.f);
#pragma unroll
        for (int i = 0; i < MI; i++) acc[i] = acc[i] * corr + e * vr[i];
        m = mn;
    }
    l = r_warp_sum(l);
    r_attn_split_end<MI>(m, l, acc, pm, pl, pacc, out, done, sinks, heads, hd, splits, h, t, s);
}

// Block (head, 1, split) of a decode step (one query, T = 1, at position p = pos[0]) over raw q, k and v (the
// products' outputs): every block norms (qk-norm flag) and ropes its own head's q row (with r_qk_rope_append's
// helpers r_head_sumsq, r_rope_cs and r_rope_at: the same operations in the same order), and the blocks of the last split — the one
// holding key p — also the k row of their kv head at p; they take key p's k row from shared memory and its v row
// from the v product, never from the caches' row p (which one block per kv head, the last q head of its group,
// writes there for the later steps, possibly while others of this grid run). So a decode step launches no
// r_qk_rope_append. Then query p of head h against keys [lo, hi), the split's share of [first, p] (first = 0, or
// p − window + 1 on a sliding-window layer: a ring's rows by r_kv_slot) by r_attn_walk: each warp's groups of keys,
// one online-softmax update of its running max m, sum l and weighted values per group, key p joined after the walk.
// r_attn_split_end merges the 4 warps into the split's partials and, in the last split of h to finish, every split
// into out: no separate combine launch. (Was one
// K row, then its V row, per key: two dependent DRAM round trips per key, the walk bound by latency at a few dozen
// keys per split. H200, gemv_bench's llama-8b decode chain at position 576, 16 splits: 2872 → 2719 µs per token;
// 32 splits: 2808.) headDim ≤ 256.
// One query row's decode attention, the body of r_attn_partial (row t = 0) and r_attn_rows (row t = blockIdx.y, each
// row its own sequence's caches and position): q, k and v point at the row's raw product outputs, kc and vc at its
// sequence's caches, p is its position; the partials and the output are the row's (t).
template <typename KV, int MAXKEYS>
__device__ __forceinline__ void r_attn_decode_row(
        const float* q, const float* k, const float* v, KV* kc, KV* vc,
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset,
        const float* invFreq, int rotaryDim, float ropeScale,
        float* pm, float* pl, float* pacc,
        int heads, int kvHeads, int hd, float scale, const int p, int splits, int window,
        float* out, int* done, const float* sinks, int t, int chunk) {
    const int ring = r_kv_ring(window, chunk);
    __shared__ float sq[256], sk[256];   // the raw rows, normed in place
    __shared__ float rq[256], rk[256];   // the roped q row, and k row of key p
    __shared__ float cs[128], sn[128];   // the rope's cos and sin (· ropeScale) at p
    // the rope's angles need only the position, which the host copied in before the step: computed while the q/k/v
    // product may still run (programmatic launch), so its sinf/cosf (slow path past ~105k) overlap that kernel's drain
    const int half = rotaryDim / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) r_rope_cs(i, p, invFreq, half, ropeScale, cs[i], sn[i]);
    r_pdl_wait();
    const int h = blockIdx.x, s = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int group = heads / kvHeads;
    const bool withKey = s == splits - 1;   // the last split ends at key p (hi = p + 1)
    {
        const int kvh = h / group;
        const float* qs = q + (long long) h * hd;
        const float* ks = k + (long long) kvh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            sq[i] = qs[i];
            if (withKey) sk[i] = ks[i];
        }
        __syncthreads();
        if (qNorm) r_head_norm(sq, qw, eps, offset, hd);
        if (withKey && kNorm) r_head_norm(sk, kw, eps, offset, hd);   // withKey is the same for the whole block
        // one block per kv head appends key p to the caches: the last q head of the group (the CPU emulator runs the
        // blocks in order, so the group's other heads run before the row is written: reading it would read NaN there)
        const bool append = withKey && h == kvh * group + group - 1;
        const long long row = r_kv_slot(p, ring) * kvHeads * hd + (long long) kvh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            int j = i < half ? i : i - half;
            float c = i < rotaryDim ? cs[j] : 0.f, n = i < rotaryDim ? sn[j] : 0.f;
            rq[i] = r_rope_at(sq, i, half, rotaryDim, c, n);
            if (withKey) rk[i] = r_rope_at(sk, i, half, rotaryDim, c, n);
        }
        __syncthreads();
        if (append) {
            if constexpr (r_kv_is_q8<KV>::v) {   // a warp each for the k and the v row (the scale needs the row's max)
                const long long at = r_kv_slot(p, ring) * r_kv_row<KV>(kvHeads, hd) + (long long) kvh * r_kv_head<KV>(hd);
                if (warp == 0) r_q8_store_head(kc + at, rk, hd, lane);
                else if (warp == 1) r_q8_store_head(vc + at, v + (long long) kvh * hd, hd, lane);
            } else {
                for (int i = threadIdx.x; i < hd; i += blockDim.x) {
                    r_kv_st(kc, row + i, rk[i]);
                    r_kv_st(vc, row + i, v[(long long) kvh * hd + i]);
                }
            }
        }
    }
    // the walk held to the head's width: 32·MI ≥ hd columns a lane step
    if (hd <= 64) r_attn_walk<KV, 2, MAXKEYS>(rq, rk, v, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, splits, window, ring, withKey, out, done, sinks, t);
    else if (hd <= 128) r_attn_walk<KV, 4, MAXKEYS>(rq, rk, v, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, splits, window, ring, withKey, out, done, sinks, t);
    else r_attn_walk<KV, 8, MAXKEYS>(rq, rk, v, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, splits, window, ring, withKey, out, done, sinks, t);
}

// A decode step's splits hold a few dozen keys each: 4 keys a warp step keep its 4 warps busy. A batched row walks its
// whole sequence in one or two splits: 32 / MI keys a step (8 at head dim 128) halve its DRAM round trips.
#define R_ATTN_PARTIAL(NAME, KV) \
extern "C" __global__ void __launch_bounds__(128, 4) NAME( \
        const float* q, const float* k, const float* v, KV* kc, KV* vc, \
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset, \
        const float* invFreq, int rotaryDim, float ropeScale, \
        float* pm, float* pl, float* pacc, \
        int heads, int kvHeads, int hd, float scale, const int* pos, int splits, int window, \
        float* out, int* done, const float* sinks, int chunk) { \
    r_pdl_trigger(); \
    R_TRAP_UNLESS_ONE_ROW(); \
    r_attn_decode_row<KV, 4>(q, k, v, kc, vc, qw, kw, qNorm, kNorm, eps, offset, invFreq, rotaryDim, ropeScale, pm, pl, \
            pacc, heads, kvHeads, hd, scale, pos[0], splits, window, out, done, sinks, 0, chunk); \
}
#ifdef __CUDA_ARCH__
#define R_TRAP_UNLESS_ONE_ROW() if (gridDim.y != 1) __trap()   // one decode token (T = 1): a chunk's queries go through r_attn_prefill*
#else
#define R_TRAP_UNLESS_ONE_ROW()
#endif
R_ATTN_PARTIAL(r_attn_partial, float)
R_ATTN_PARTIAL(r_attn_partial_h, r_u16)
R_ATTN_PARTIAL(r_attn_partial_q, r_i8)

// Block (head, row, split) of a batched decode step: row t = blockIdx.y is one token of its own sequence, at position
// pos[t], over that sequence's caches kcs[t] / vcs[t] (this layer's); q, k and v hold every row's raw product
// outputs, out, the partials and the done counters every row's. Otherwise r_attn_partial.
#define R_ATTN_ROWS(NAME, KV) \
extern "C" __global__ void __launch_bounds__(128, 4) NAME( \
        const float* q, const float* k, const float* v, KV* const* kcs, KV* const* vcs, \
        const float* qw, const float* kw, int qNorm, int kNorm, float eps, int offset, \
        const float* invFreq, int rotaryDim, float ropeScale, \
        float* pm, float* pl, float* pacc, \
        int heads, int kvHeads, int hd, float scale, const int* pos, int splits, int window, \
        float* out, int* done, const float* sinks, const int* chunks) { \
    r_pdl_trigger(); \
    const int t = blockIdx.y; \
    r_attn_decode_row<KV, 32>(q + (long long) t * heads * hd, k + (long long) t * kvHeads * hd, \
            v + (long long) t * kvHeads * hd, kcs[t], vcs[t], qw, kw, qNorm, kNorm, eps, offset, invFreq, rotaryDim, \
            ropeScale, pm, pl, pacc, heads, kvHeads, hd, scale, pos[t], splits, window, out, done, sinks, t, chunks[t]); \
}
R_ATTN_ROWS(r_attn_rows, float)
R_ATTN_ROWS(r_attn_rows_h, r_u16)
R_ATTN_ROWS(r_attn_rows_q, r_i8)

// Block (head, row, split) of a chunk of a few rows of one sequence (a draft's verification: K + 1 rows), after
// r_qk_rope_append appended the chunk's keys and values to the caches and normed and roped its q rows in place: row
// t, at position p = pos[0] + t, walks the keys [first, p] from the caches, split over blocks and merged as a decode
// row's (r_attn_walk with no key held apart, r_attn_split_end). r_attn_prefill gives such a chunk kvHeads blocks in
// all (one query tile); this gives it heads × rows × splits. f32 and f16 caches (a q8 chunk reads its own keys in f32:
// r_attn_prefill).
#define R_ATTN_CHUNK(NAME, KV) \
extern "C" __global__ void __launch_bounds__(128, 4) NAME( \
        const float* q, const KV* kc, const KV* vc, float* pm, float* pl, float* pacc, \
        int heads, int kvHeads, int hd, float scale, const int* pos, int splits, int window, \
        float* out, int* done, const float* sinks, int chunk) { \
    r_pdl_trigger(); \
    const int t = blockIdx.y, p = pos[0] + t, ring = r_kv_ring(window, chunk); \
    __shared__ float rq[256]; \
    r_pdl_wait(); \
    const float* qh = q + ((long long) t * heads + blockIdx.x) * hd; \
    for (int i = threadIdx.x; i < hd; i += blockDim.x) rq[i] = qh[i]; \
    __syncthreads(); \
    if (hd <= 64) r_attn_walk<KV, 2, 32>(rq, nullptr, nullptr, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, splits, \
            window, ring, false, out, done, sinks, t); \
    else if (hd <= 128) r_attn_walk<KV, 4, 32>(rq, nullptr, nullptr, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, \
            splits, window, ring, false, out, done, sinks, t); \
    else r_attn_walk<KV, 8, 32>(rq, nullptr, nullptr, kc, vc, pm, pl, pacc, heads, kvHeads, hd, scale, p, splits, window, \
            ring, false, out, done, sinks, t); \
}
R_ATTN_CHUNK(r_attn_chunk, float)
R_ATTN_CHUNK(r_attn_chunk_h, r_u16)

// ---- prefill attention: flash-attention tiles (a chunk of T > 1 queries) ----
//
// Block (query tile, kv head · head group): R query rows = nT tokens × nH query heads that share one kv head
// (nH = min(heads/kvHeads, R), nT = R / nH; a row is (token t0 + r / nH, head r % nH of the group)), so each K/V
// tile staged in shared memory serves every query head of the kv head. Query t (position p = pos[0] + t) sees the
// keys [first, p] (first = 0, or p − window + 1 on a sliding-window layer); the block walks the keys
// [first(t0), p(last row)] in tiles of BK: S = Q·Kᵀ for the tile (thread (ty, tx) owns rows ty·RT.. and keys
// tx + 8i), the causal/window mask, the online-softmax update of each row's running max and sum (the 8 lanes of
// a row group combine by shuffles), P to shared memory, then O = O·corr + P·V (the same thread owns the same rows'
// columns 4tx + 32k..+3). f32 throughout. Output straight into out[t, h·hd + c], as r_attn_merge writes it, with
// the optional sink logit (gpt-oss) joining the softmax denominator only. D is the head dimension rounded up to a
// bucket (32/64/128/256): Q and K/V are zero-padded to it in shared memory, so any hd ≤ D works. Tiles run
// heaviest first (the last query tile sees the most keys). 128 threads = 16 row groups × 8 lanes.
#define R_PF_THREADS 128

// A [BK][D] tile of keys or values (rows k0.. of the cache, zero past pLast and past hd) into ld[LT]: element
// e = tid + 128·u is row e / D, column e % D, so a warp's loads are contiguous. (The row and column are spelled
// out per case: the compiler does not know tid < 128, and generic e / D kept a 64-bit address per element.)
template <int D>
__device__ __forceinline__ void r_pf_at(int tid, int u, int& j, int& c) {
    constexpr int per = D > R_PF_THREADS ? D / R_PF_THREADS : 1;   // passes per row when D > 128
    if (D <= R_PF_THREADS) { j = tid / D + u * (R_PF_THREADS / D); c = tid % D; }
    else { j = u / per; c = tid + R_PF_THREADS * (u % per); }
}

// (ld holds the cache's stored elements: widened to f32 only when stored to shared memory, so the loads stay in flight
// while the block computes; q8: keys from p0 on from the chunk's f32 rows, [T, kvDim] from chunk)
template <int D, int LT, typename KV>
__device__ __forceinline__ void r_pf_load(typename r_kv_ld<KV>::t* ld, const KV* __restrict__ base,
                                          const float* __restrict__ chunk, int p0, int k0, int pLast, int hd,
                                          long long rowStride, long long kvDim, int tid, int ring) {
#pragma unroll
    for (int u = 0; u < LT; u++) {
        int j, c;
        r_pf_at<D>(tid, u, j, c);
        int key = k0 + j;
        if constexpr (r_kv_is_q8<KV>::v) {
            const r_i8* row = base + r_kv_slot(key, ring) * rowStride;
            ld[u] = key > pLast || c >= hd ? 0.f : key >= p0 ? chunk[(key - p0) * kvDim + c] : (float) row[c] * r_q8_scale(row, hd);
        } else {
            ld[u] = key <= pLast && c < hd ? base[r_kv_slot(key, ring) * rowStride + c] : KV(0);
        }
    }
}

template <int D, int LT, typename KV>
__device__ __forceinline__ void r_pf_store(const typename r_kv_ld<KV>::t* ld, float* kvs, int tid) {
#pragma unroll
    for (int u = 0; u < LT; u++) {
        int j, c;
        r_pf_at<D>(tid, u, j, c);
        kvs[j * (D + 4) + c] = r_kv_f32(ld[u]);
    }
}

// The weight of a prefill-attention row's weighted sum O (both kernels): e^(m − M) / (l·e^(m − M) + e^(sink − M)),
// M = max(m, sink), as r_attn_merge (the sink logit, gpt-oss, joins the denominator only); 1/l without a sink.
__device__ __forceinline__ float r_row_weight(float m, float l, const float* sinks, int h) {
    float M = m;
    if (sinks != nullptr) M = fmaxf(M, sinks[h]);
    float e = m == R_NEG_INF ? 0.f : expf(m - M);
    float L = l * e;
    if (sinks != nullptr) L += expf(sinks[h] - M);
    return e / L;
}

// What a prefill-attention block (r_attn_prefill_tile, r_attn_prefill_tc_tile) owns: R query rows = nT tokens × nH
// query heads of kv head kvh's group of G (its hg-th slice when G > R), the heaviest (latest) query tile first (block
// x counts down), positions p0 + t0 … pLast; keys lo (the window's start for the tile's first row, else 0) … pLast.
struct RPrefillBlock { int G, nH, nT, kvh, hg, t0, p0, pLast, lo; };
__device__ __forceinline__ RPrefillBlock r_prefill_block(int R, int T, int heads, int kvHeads, const int* pos, int window) {
    RPrefillBlock b;
    b.G = heads / kvHeads;
    b.nH = b.G < R ? b.G : R;
    b.nT = R / b.nH;
    int groups = (b.G + b.nH - 1) / b.nH;
    int tile = gridDim.x - 1 - blockIdx.x;
    b.kvh = blockIdx.y / groups;
    b.hg = blockIdx.y % groups;
    b.t0 = tile * b.nT;
    b.p0 = pos[0];
    int tLast = b.t0 + b.nT - 1 < T - 1 ? b.t0 + b.nT - 1 : T - 1, pFirst = b.p0 + b.t0;
    b.pLast = b.p0 + tLast;
    b.lo = window > 0 && pFirst >= window ? pFirst - window + 1 : 0;
    return b;
}

template <int D, int R, int BK, typename KV>
__device__ __forceinline__ void r_attn_prefill_tile(
        const float* __restrict__ q, const KV* __restrict__ kc, const KV* __restrict__ vc, float* __restrict__ out,
        int T, int heads, int kvHeads, int hd, float scale, const int* pos, int window, const float* sinks,
        const float* __restrict__ kch, const float* __restrict__ vch, float* qs, float* kvs, float* ps, int chunk) {
    constexpr int RT = R / 16;     // rows per thread
    const int ring = r_kv_ring(window, chunk);
    constexpr int KT = BK / 8;     // keys per thread in S
    constexpr int CT = D / 32;     // float4 column chunks per thread in O
    constexpr int KS = D + 4;      // K/V row stride: rows 8 apart start 4 banks apart, so float4 reads are conflict-free
    int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const RPrefillBlock b = r_prefill_block(R, T, heads, kvHeads, pos, window);
    const int G = b.G, nH = b.nH, nT = b.nT, kvh = b.kvh, hg = b.hg, t0 = b.t0, p0 = b.p0, pLast = b.pLast, lo = b.lo;
    long long kvDim = (long long) kvHeads * hd;

    // Q rows into shared memory (zero past hd and for rows past the chunk or the group)
    for (int e = tid; e < R * D; e += R_PF_THREADS) {
        int r = e / D, c = e % D;
        int t = t0 + r / nH, hl = hg * nH + r % nH;
        float v = 0.f;
        if (r < nT * nH && t < T && hl < G && c < hd) v = q[((long long) t * heads + kvh * G + hl) * hd + c];
        qs[r * D + c] = v;
    }
    // this thread's rows: position and first visible key (rows past the chunk see nothing)
    int rp[RT], rf[RT];
#pragma unroll
    for (int i = 0; i < RT; i++) {
        int r = ty * RT + i;
        int t = t0 + r / nH, hl = hg * nH + r % nH;
        bool live = r < nT * nH && t < T && hl < G;
        rp[i] = live ? p0 + t : -1;
        rf[i] = live && window > 0 && p0 + t >= window ? p0 + t - window + 1 : 0;
    }
    float o[RT][CT][4], m[RT], l[RT];
#pragma unroll
    for (int i = 0; i < RT; i++) {
        m[i] = R_NEG_INF;
        l[i] = 0.f;
#pragma unroll
        for (int k = 0; k < CT; k++) o[i][k][0] = o[i][k][1] = o[i][k][2] = o[i][k][3] = 0.f;
    }
    const long long rowStride = r_kv_row<KV>(kvHeads, hd);
    const KV* kbase = kc + (long long) kvh * r_kv_head<KV>(hd);
    const KV* vbase = vc + (long long) kvh * r_kv_head<KV>(hd);
    const float* kcb = r_kv_is_q8<KV>::v ? kch + (long long) kvh * hd : nullptr;   // q8: the chunk's own rows
    const float* vcb = r_kv_is_q8<KV>::v ? vch + (long long) kvh * hd : nullptr;
    // K and V tiles pass through registers (LT values per thread) so that each tile's global loads are in flight
    // while the block computes: V(tile) during S, K(tile + 1) during P·V
    constexpr int LT = BK * D / R_PF_THREADS;
    typename r_kv_ld<KV>::t ld[LT];
    r_pf_load<D, LT, KV>(ld, kbase, kcb, p0, lo, pLast, hd, rowStride, kvDim, tid, ring);
    for (int k0 = lo; k0 <= pLast; k0 += BK) {
        __syncthreads();   // the previous tile's V (and, the first time, nothing) is no longer read
        r_pf_store<D, LT, KV>(ld, kvs, tid);
        __syncthreads();
        r_pf_load<D, LT, KV>(ld, vbase, vcb, p0, k0, pLast, hd, rowStride, kvDim, tid, ring);
        // S = Q·Kᵀ for this thread's RT rows × KT keys
        float s[RT][KT];
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int j = 0; j < KT; j++) s[i][j] = 0.f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 kv[KT];
#pragma unroll
            for (int j = 0; j < KT; j++) kv[j] = *reinterpret_cast<const float4*>(kvs + (tx + 8 * j) * KS + d);
#pragma unroll
            for (int i = 0; i < RT; i++) {
                float4 qv = *reinterpret_cast<const float4*>(qs + (ty * RT + i) * D + d);
#pragma unroll
                for (int j = 0; j < KT; j++)
                    s[i][j] += qv.x * kv[j].x + qv.y * kv[j].y + qv.z * kv[j].z + qv.w * kv[j].w;
            }
        }
        // mask, online softmax; P (transposed: ps[key][row]) for the P·V step
        float corr[RT];
#pragma unroll
        for (int i = 0; i < RT; i++) {
            float mt = R_NEG_INF;
#pragma unroll
            for (int j = 0; j < KT; j++) {
                int key = k0 + tx + 8 * j;
                s[i][j] = key >= rf[i] && key <= rp[i] ? s[i][j] * scale : R_NEG_INF;
                mt = fmaxf(mt, s[i][j]);
            }
            for (int x = 1; x < 8; x <<= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, x));
            float mn = fmaxf(m[i], mt);
            float sum = 0.f;
            if (mn == R_NEG_INF) {   // nothing visible to this row yet
                corr[i] = 1.f;
#pragma unroll
                for (int j = 0; j < KT; j++) s[i][j] = 0.f;
            } else {
                corr[i] = expf(m[i] - mn);   // m = -inf the first time: 0
#pragma unroll
                for (int j = 0; j < KT; j++) { s[i][j] = expf(s[i][j] - mn); sum += s[i][j]; }
            }
            for (int x = 1; x < 8; x <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
            l[i] = l[i] * corr[i] + sum;
            m[i] = mn;
#pragma unroll
            for (int j = 0; j < KT; j++) ps[(tx + 8 * j) * R + ty * RT + i] = s[i][j];
        }
        __syncthreads();   // K is no longer read: V replaces it
        r_pf_store<D, LT, KV>(ld, kvs, tid);
        __syncthreads();
        if (k0 + BK <= pLast) r_pf_load<D, LT, KV>(ld, kbase, kcb, p0, k0 + BK, pLast, hd, rowStride, kvDim, tid, ring);
        // O = O·corr + P·V
#pragma unroll
        for (int i = 0; i < RT; i++)
#pragma unroll
            for (int k = 0; k < CT; k++) { o[i][k][0] *= corr[i]; o[i][k][1] *= corr[i]; o[i][k][2] *= corr[i]; o[i][k][3] *= corr[i]; }
#pragma unroll 2
        for (int j = 0; j < BK; j++) {
            float pr[RT];
            if (RT == 4) {
                float4 v = *reinterpret_cast<const float4*>(ps + j * R + ty * RT);
                pr[0] = v.x; pr[1] = v.y; pr[2 % RT] = v.z; pr[3 % RT] = v.w;
            } else {
#pragma unroll
                for (int i = 0; i < RT; i++) pr[i] = ps[j * R + ty * RT + i];
            }
#pragma unroll
            for (int k = 0; k < CT; k++) {
                float4 v = *reinterpret_cast<const float4*>(kvs + j * KS + 4 * tx + 32 * k);
#pragma unroll
                for (int i = 0; i < RT; i++) {
                    o[i][k][0] += pr[i] * v.x; o[i][k][1] += pr[i] * v.y; o[i][k][2] += pr[i] * v.z; o[i][k][3] += pr[i] * v.w;
                }
            }
        }
    }
    // out = O / L, L = l (+ the sink's e^(sink − M) with M = max(m, sink)), as r_attn_merge
#pragma unroll
    for (int i = 0; i < RT; i++) {
        if (rp[i] < 0) continue;
        int r = ty * RT + i;
        int t = t0 + r / nH, h = kvh * G + hg * nH + r % nH;
        float w = r_row_weight(m[i], l[i], sinks, h);
        float* orow = out + ((long long) t * heads + h) * hd;
#pragma unroll
        for (int k = 0; k < CT; k++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                int col = 4 * tx + 32 * k + c;
                if (col < hd) orow[col] = o[i][k][c] * w;
            }
    }
}

// One kernel per head-dimension bucket D (the Java side picks the smallest D ≥ hd); R query rows, BK keys per tile,
// sized so the static shared memory (Q [R][D], one K/V tile [BK][D+4], P [BK][R]) stays under 48 KB. MINB blocks per
// SM: 3, but 2 for the q8 ones of D 64 and 256 (their loads pick the cache or the chunk per element: spills at 3 on
// sm_90/100/120).
#define R_ATTN_PREFILL_KV(NAME, D, R, BK, KV, MINB) \
extern "C" __global__ void __launch_bounds__(R_PF_THREADS, MINB) NAME( \
        const float* q, const KV* kc, const KV* vc, float* out, int T, int heads, int kvHeads, int hd, \
        float scale, const int* pos, int window, const float* sinks, const float* kch, const float* vch, int chunk) { \
    __shared__ __align__(16) float qs[R * D]; \
    __shared__ __align__(16) float kvs[BK * (D + 4)]; \
    __shared__ __align__(16) float ps[BK * R]; \
    r_attn_prefill_tile<D, R, BK, KV>(q, kc, vc, out, T, heads, kvHeads, hd, scale, pos, window, sinks, kch, vch, qs, kvs, ps, \
            chunk); \
}
R_ATTN_PREFILL_KV(r_attn_prefill_32, 32, 64, 32, float, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_64, 64, 64, 32, float, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_128, 128, 32, 16, float, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_256, 256, 32, 8, float, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_h_32, 32, 64, 32, r_u16, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_h_64, 64, 64, 32, r_u16, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_h_128, 128, 32, 16, r_u16, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_h_256, 256, 32, 8, r_u16, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_q_32, 32, 64, 32, r_i8, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_q_64, 64, 64, 32, r_i8, 2)
R_ATTN_PREFILL_KV(r_attn_prefill_q_128, 128, 32, 16, r_i8, 3)
R_ATTN_PREFILL_KV(r_attn_prefill_q_256, 256, 32, 8, r_i8, 2)

// ---- prefill attention on tensor cores (sm_80 and up; head dims up to 128) ----
//
// r_attn_prefill_tc_D: the contract of r_attn_prefill_D (same arguments, the same query rows per block: nT tokens ×
// nH query heads of one kv head, 64 rows, output straight into out[t, h·hd + c]), its products on tensor cores with
// f32 accuracy: each f32 operand x enters as two f16 parts of x·f (f a power of two that brings the operand's max
// |x| into [2^13, 2^14): no f16 overflow, and what is left after the first part stays a normal f16 down to 2^-17 of
// that max), hi = f16(x·f), lo = f16(x·f − hi), and a product is the three mma.sync.m16n8k16 (f16 in, f32
// accumulation) hi·hi + hi·lo + lo·hi: 22 significant bits per operand, the dropped lo·lo below 2^-22 relative.
// The scales: per query row (Q, with the softmax scale folded in) and per key (K, and V: key j's values times
// f_j = 2^(140 − E_j)). V's key scales come back out through P, row by row: key j's p enters as p·2^(13 + E_j − E),
// E an O row's units, chosen per tile from the weighted magnitudes p_j·2^(E_j − 127) (≈ p_j·max|v_j|) of its keys and
// of the row so far (corr·2^(E − 127)) so that the largest lands in [2^13, 2^14) — raised or lowered, the row
// rescaled with the softmax correction. So a row's precision is relative to what its output is made of, Σ p_j|v_j|:
// neither larger values of later keys in its tile (causal) nor huge values of keys it weights negligibly (a tiny p,
// or one that a later tile's larger scores made negligible) hurt it.
// Block = 4 warps, warp w owns query rows 16w..16w+15 (the mma's M); per key tile of BK = 32 keys: K (per-key
// parts, row-major) and V (parts, transposed: key pairs as the B fragment's f16x2) staged in shared memory, each
// warp computes its S = Q·Kᵀ (16 × 32) in mma C fragments, masks it, updates its rows' running max and sum (the 4
// lanes of a row combine by shuffles), turns P into A fragments in registers (the C layout of two n8 tiles is the A
// layout of one k16 step: no shared memory), and O += P·V (16 × D f32 accumulators). Q's parts stay in registers.
// The CPU emulation of the tests
// (kernel_emulator.cpp) computes each mma from the PTX ISA's fragment layouts.
#define R_TC_BK 32
#define R_TC_WARPS 4

// c += A·B for one warp: A 16×16 f16 (a: this lane's 4 registers of f16 pairs), B 16×8 f16 (b0, b1), c 16×8 f32.
// Lane = 4·g + i: a[0] = A[g][2i..2i+1], a[1] = A[g+8][2i..], a[2] = A[g][2i+8..], a[3] = A[g+8][2i+8..];
// b0 = B[2i..2i+1][g], b1 = B[2i+8..2i+9][g]; c[0..1] = C[g][2i..2i+1], c[2..3] = C[g+8][2i..2i+1].
__device__ __forceinline__ void r_mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(__CUDA_ARCH__)
    __trap();   // never launched below sm_80: ResidentForward runs r_attn_prefill_D there
#else
    emulated_mma_m16n8k16(c, a, b0, b1);   // kernel_emulator.cpp
#endif
}

// c += A·B at f32 accuracy from f16 hi/lo parts, as 3 mma.sync (the lo·lo term is below f32's precision): A as its
// hi and lo fragments, B's fragments from b (hi at b[0], b[4]; lo at b[lo], b[lo + 4]).
__device__ __forceinline__ void r_mma3(float (&c)[4], const unsigned (&ah)[4], const unsigned (&al)[4], const unsigned* b, int lo) {
    unsigned bh0 = b[0], bh1 = b[4], bl0 = b[lo], bl1 = b[lo + 4];
    r_mma16816(c, al, bh0, bh1);
    r_mma16816(c, ah, bl0, bl1);
    r_mma16816(c, ah, bh0, bh1);
}

// f16 bits of x0 (low half) and x1 (high half), rounded to nearest even.
__device__ __forceinline__ unsigned r_f16x2(float x0, float x1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(x1), "f"(x0));
    return r;
#else
    return (unsigned) r_to_f16(x0) | ((unsigned) r_to_f16(x1) << 16);
#endif
}

// The two f16 parts of (x0, x1): hi = f16(x), lo = f16(x − hi), each as an f16x2.
__device__ __forceinline__ void r_parts2(float x0, float x1, unsigned& hi, unsigned& lo) {
    hi = r_f16x2(x0, x1);
    lo = r_f16x2(x0 - r_f16((r_u16) (hi & 0xffffu)), x1 - r_f16((r_u16) (hi >> 16)));
}

// For a max |x| = m ≥ 0: E = m's biased exponent clamped to [14, 254]; r_tc_up(E) = 2^(140 − E) brings m into
// [2^13, 2^14) (smaller m stay below), r_tc_down(E) = 2^(E − 140) undoes it. Both exact powers of two.
__device__ __forceinline__ int r_tc_exp(float m) {
    int e = (int) (__float_as_uint(m) >> 23);
    return e < 14 ? 14 : e > 254 ? 254 : e;
}
__device__ __forceinline__ float r_tc_up(int e) { return __uint_as_float((unsigned) (267 - e) << 23); }
__device__ __forceinline__ float r_tc_down(int e) { return __uint_as_float((unsigned) (e - 13) << 23); }


// Columns c..c+3 of key `key`, cache row `row` (zero past pLast and past hd); float4 when hd % 4 == 0. (chunk and p0:
// the q8 cache's, below)
__device__ __forceinline__ float4 r_tc_ld4(const float* __restrict__ base, const float* chunk, int p0, int key, int pLast,
                                           int c, int hd, long long rowStride, long long kvDim, int row) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (key <= pLast && c < hd) {
        const float* p = base + row * rowStride + c;
        if ((hd & 3) == 0) v = *reinterpret_cast<const float4*>(p);
        else {
            v.x = p[0];
            if (c + 1 < hd) v.y = p[1];
            if (c + 2 < hd) v.z = p[2];
            if (c + 3 < hd) v.w = p[3];
        }
    }
    return v;
}

// The same of an f16 cache (--kv f16): 8 bytes when hd % 4 == 0.
__device__ __forceinline__ float4 r_tc_ld4(const r_u16* __restrict__ base, const float* chunk, int p0, int key, int pLast,
                                           int c, int hd, long long rowStride, long long kvDim, int row) {
    uint2 u = make_uint2(0u, 0u);   // the stored halves (0 where masked), widened after the loads (r_kv_f32's comment)
    if (key <= pLast && c < hd) {
        const r_u16* p = base + row * rowStride + c;
        if ((hd & 3) == 0) u = *reinterpret_cast<const uint2*>(p);
        else {
            u.x = p[0];
            if (c + 1 < hd) u.x |= (unsigned) p[1] << 16;
            if (c + 2 < hd) u.y = p[2];
            if (c + 3 < hd) u.y |= (unsigned) p[3] << 16;
        }
    }
    return make_float4(r_f16((r_u16) (u.x & 0xffffu)), r_f16((r_u16) (u.x >> 16)),
                       r_f16((r_u16) (u.y & 0xffffu)), r_f16((r_u16) (u.y >> 16)));
}

// The same of a q8 cache (--kv q8): 4 codes (one 4-byte load when hd % 4 == 0) times the row's scale below position
// p0, the chunk's own f32 rows (chunk, [T, kvDim]) from p0 on.
__device__ __forceinline__ float4 r_tc_ld4(const r_i8* __restrict__ base, const float* chunk, int p0, int key, int pLast,
                                           int c, int hd, long long rowStride, long long kvDim, int row) {
    if (key >= p0) return r_tc_ld4(chunk, nullptr, 0, key - p0, pLast - p0, c, hd, kvDim, kvDim, key - p0);
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (c < hd) {
        const r_i8* rp = base + row * rowStride;
        char4 u;
        if ((hd & 3) == 0) u = *reinterpret_cast<const char4*>(rp + c);
        else {
            u.x = rp[c];
            u.y = c + 1 < hd ? rp[c + 1] : 0;
            u.z = c + 2 < hd ? rp[c + 2] : 0;
            u.w = c + 3 < hd ? rp[c + 3] : 0;
        }
        float s = r_q8_scale(rp, hd);
        v = make_float4(u.x * s, u.y * s, u.z * s, u.w * s);
    }
    return v;
}

// Key k0 + i's cache row, from the tile's first row s0 = r_kv_slot(k0, ring) and wrap = the ring's rows (a huge number
// without a ring): one division a tile instead of one a load (the keys a tile loads, lo..pLast at most, span fewer rows
// than the ring holds, so one wrap is enough; the rows of masked keys past pLast are never read).
__device__ __forceinline__ int r_tc_row(int s0, int i, int wrap) { int r = s0 + i; return r >= wrap ? r - wrap : r; }

// K tile: chunk e = (warp·LK + u)·32 + lane is key e / (D/4), columns 4·(e % (D/4)).. (a warp's loads contiguous)
template <int D, int LK, typename KV>
__device__ __forceinline__ void r_tc_loadk(float4* ld, const KV* __restrict__ base, const float* chunk, int p0, int k0,
                                           int pLast, int hd, long long rowStride, long long kvDim, int warp, int lane,
                                           int s0, int wrap) {
#pragma unroll
    for (int u = 0; u < LK; u++) {
        int e = (warp * LK + u) * 32 + lane;
        ld[u] = r_tc_ld4(base, chunk, p0, k0 + e / (D / 4), pLast, 4 * (e % (D / 4)), hd, rowStride, kvDim,
                         r_tc_row(s0, e / (D / 4), wrap));
    }
}

// V tile: lane (p = lane / 2, h = lane % 2) takes keys 2p and 2p + 1, columns warp·D/W + 8i + 4h.. (i < CV)
template <int D, int CV, typename KV>
__device__ __forceinline__ void r_tc_loadv(float4* ld, const KV* __restrict__ base, const float* chunk, int p0, int k0,
                                           int pLast, int hd, long long rowStride, long long kvDim, int warp, int lane,
                                           int s0, int wrap) {
    const int r0 = r_tc_row(s0, 2 * (lane >> 1), wrap), r1 = r_tc_row(s0, 2 * (lane >> 1) + 1, wrap);
#pragma unroll
    for (int i = 0; i < CV; i++) {
        int c = warp * (D / R_TC_WARPS) + 8 * i + 4 * (lane & 1), key = k0 + 2 * (lane >> 1);
        ld[2 * i] = r_tc_ld4(base, chunk, p0, key, pLast, c, hd, rowStride, kvDim, r0);
        ld[2 * i + 1] = r_tc_ld4(base, chunk, p0, key + 1, pLast, c, hd, rowStride, kvDim, r1);
    }
}

template <int D, typename KV>
__device__ __forceinline__ void r_attn_prefill_tc_tile(
        const float* __restrict__ q, const KV* __restrict__ kc, const KV* __restrict__ vc, float* __restrict__ out,
        int T, int heads, int kvHeads, int hd, float scale, const int* pos, int window, const float* sinks,
        const float* __restrict__ kch, const float* __restrict__ vch, unsigned* kw, unsigned* vw, float* ksc, float* vkm, float* vlv,
        int chunk) {
    const int ring = r_kv_ring(window, chunk);
    constexpr int W = R_TC_WARPS, BK = R_TC_BK, R = 16 * W;
    constexpr int KS = D / 16;                  // k16 steps over the head dimension (S = Q·Kᵀ)
    constexpr int NT = BK / 8;                  // n8 tiles of keys in S
    constexpr int NO = D / 8;                   // n8 tiles of columns in O
    constexpr int SK = D / 2 + 4;               // K row stride in words (f16 pairs): the 8 keys of a fragment 4 banks apart
    constexpr int SV = BK / 2 + 4;              // V column stride in words (key pairs): 8 columns 20 banks apart
    constexpr int LK = BK * D / 4 / (32 * W);   // float4 of K per thread
    constexpr int CV = D / W / 8;               // column groups of V per lane
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const RPrefillBlock b = r_prefill_block(R, T, heads, kvHeads, pos, window);
    const int G = b.G, nH = b.nH, nT = b.nT, kvh = b.kvh, hg = b.hg, t0 = b.t0, p0 = b.p0, pLast = b.pLast, lo = b.lo;
    long long kvDim = (long long) kvHeads * hd;

    // this lane's rows g and g + 8 of the warp's 16: position, first visible key (rows past the chunk see nothing)
    int rp[2], rf[2];
    float qs[2];
    unsigned qh[KS][4], ql[KS][4];
    {
        float x[KS][2][4];
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            int r = warp * 16 + g + 8 * ri;
            int t = t0 + r / nH, hl = hg * nH + r % nH;
            bool live = r < nT * nH && t < T && hl < G;
            rp[ri] = live ? p0 + t : -1;
            rf[ri] = live && window > 0 && p0 + t >= window ? p0 + t - window + 1 : 0;
            const float* qr = q + ((long long) (live ? t : 0) * heads + kvh * G + (live ? hl : 0)) * hd;
            float mx = 0.f;
#pragma unroll
            for (int ks = 0; ks < KS; ks++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int c = 16 * ks + 8 * (j >> 1) + 2 * tg + (j & 1);
                    x[ks][ri][j] = live && c < hd ? qr[c] : 0.f;
                    mx = fmaxf(mx, fabsf(x[ks][ri][j]));
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            int e = r_tc_exp(mx);
            float f = r_tc_up(e);
            qs[ri] = scale * r_tc_down(e);
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                r_parts2(x[ks][ri][0] * f, x[ks][ri][1] * f, qh[ks][ri], ql[ks][ri]);
                r_parts2(x[ks][ri][2] * f, x[ks][ri][3] * f, qh[ks][ri + 2], ql[ks][ri + 2]);
            }
        }
    }
    float o[NO][4], m[2] = {R_NEG_INF, R_NEG_INF}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    int ev[2] = {14, 14};   // each O row's units: the true row is O·2^-13·r_tc_down(ev) (14: the lowest, O = 0)
    const long long rowStride = r_kv_row<KV>(kvHeads, hd);
    const KV* kbase = kc + (long long) kvh * r_kv_head<KV>(hd);
    const KV* vbase = vc + (long long) kvh * r_kv_head<KV>(hd);
    const float* kcb = r_kv_is_q8<KV>::v ? kch + (long long) kvh * hd : nullptr;   // q8: the chunk's own rows
    const float* vcb = r_kv_is_q8<KV>::v ? vch + (long long) kvh * hd : nullptr;
    for (int k0 = lo; k0 <= pLast; k0 += BK) {
        // K and V of the tile into registers (both loads in flight at once; the K tile is not prefetched during the
        // previous P·V: its 32 registers would not fit beside Q's parts and O), then K: each key's scale (the lanes
        // of its row combine their max), parts to shared memory. The previous tile's S is done by every warp (the
        // barrier before its P·V).
        float4 ldk[LK], ldv[2 * CV];
        const int s0 = (int) r_kv_slot(k0, ring), wrap = ring > 0 ? ring : 0x7fffffff;
        r_tc_loadk<D, LK, KV>(ldk, kbase, kcb, p0, k0, pLast, hd, rowStride, kvDim, warp, lane, s0, wrap);
        r_tc_loadv<D, CV, KV>(ldv, vbase, vcb, p0, k0, pLast, hd, rowStride, kvDim, warp, lane, s0, wrap);
#pragma unroll
        for (int u = 0; u < LK; u++) {
            int e = (warp * LK + u) * 32 + lane, key = e / (D / 4), ch = e % (D / 4);
            float mx = r_absmax4(ldk[u]);
#pragma unroll
            for (int x = 1; x < D / 4; x <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
            int ek = r_tc_exp(mx);
            float f = r_tc_up(ek);
            uint2 hi, lo2;
            r_parts2(ldk[u].x * f, ldk[u].y * f, hi.x, lo2.x);
            r_parts2(ldk[u].z * f, ldk[u].w * f, hi.y, lo2.y);
            *reinterpret_cast<uint2*>(kw + key * SK + 2 * ch) = hi;
            *reinterpret_cast<uint2*>(kw + BK * SK + key * SK + 2 * ch) = lo2;
            if (ch == 0) ksc[key] = r_tc_down(ek);
        }
        // V: each key's max |v| over this warp's columns (the key pair's two lanes combine) into vkm[warp][key]
        {
            float v0 = 0.f, v1 = 0.f;
#pragma unroll
            for (int i = 0; i < CV; i++) { v0 = fmaxf(v0, r_absmax4(ldv[2 * i])); v1 = fmaxf(v1, r_absmax4(ldv[2 * i + 1])); }
            v0 = fmaxf(v0, __shfl_xor_sync(0xffffffffu, v0, 1));
            v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, 1));
            if ((lane & 1) == 0) { vkm[warp * BK + (lane & ~1)] = v0; vkm[warp * BK + (lane & ~1) + 1] = v1; }
        }
        __syncthreads();   // K parts and V maxima visible; every warp is past the previous tile's P·V
        {
            // V: each key's scale (its max over the warps' columns), parts to shared memory, its level 2^(E_j − 127) to vlv
            int p = lane >> 1;
            float m0 = 0.f, m1 = 0.f;
#pragma unroll
            for (int w = 0; w < W; w++) { m0 = fmaxf(m0, vkm[w * BK + 2 * p]); m1 = fmaxf(m1, vkm[w * BK + 2 * p + 1]); }
            int e0 = r_tc_exp(m0), e1 = r_tc_exp(m1);
            float f0 = r_tc_up(e0), f1 = r_tc_up(e1);
            if (warp == 0 && (lane & 1) == 0) { vlv[2 * p] = __uint_as_float((unsigned) e0 << 23); vlv[2 * p + 1] = __uint_as_float((unsigned) e1 << 23); }
#pragma unroll
            for (int i = 0; i < CV; i++) {
                int c = warp * (D / W) + 8 * i + 4 * (lane & 1);
                float a0[4] = {ldv[2 * i].x, ldv[2 * i].y, ldv[2 * i].z, ldv[2 * i].w};
                float a1[4] = {ldv[2 * i + 1].x, ldv[2 * i + 1].y, ldv[2 * i + 1].z, ldv[2 * i + 1].w};
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    unsigned hi, lo2;
                    r_parts2(a0[j] * f0, a1[j] * f1, hi, lo2);
                    vw[(c + j) * SV + p] = hi;
                    vw[D * SV + (c + j) * SV + p] = lo2;
                }
            }
        }
        // S = Q·Kᵀ: this warp's 16 rows × BK keys
        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++)
#pragma unroll
            for (int n = 0; n < NT; n++) r_mma3(s[n], qh[ks], ql[ks], kw + (8 * n + g) * SK + 8 * ks + tg, BK * SK);
        // mask, scale, online softmax of rows g (elements 0, 1) and g + 8 (2, 3)
        float corr[2];
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            float mt = R_NEG_INF;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    int kl = 8 * n + 2 * tg + c, key = k0 + kl;
                    float v = key >= rf[ri] && key <= rp[ri] ? s[n][2 * ri + c] * qs[ri] * ksc[kl] : R_NEG_INF;
                    s[n][2 * ri + c] = v;
                    mt = fmaxf(mt, v);
                }
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
            float mn = fmaxf(m[ri], mt), sum = 0.f;
            if (mn == R_NEG_INF) {   // nothing visible to this row yet
                corr[ri] = 1.f;
#pragma unroll
                for (int n = 0; n < NT; n++) s[n][2 * ri] = s[n][2 * ri + 1] = 0.f;
            } else {
                corr[ri] = expf(m[ri] - mn);   // m = -inf the first time: 0
#pragma unroll
                for (int n = 0; n < NT; n++)
#pragma unroll
                    for (int c = 0; c < 2; c++) { float e = expf(s[n][2 * ri + c] - mn); s[n][2 * ri + c] = e; sum += e; }
            }
            l[ri] = l[ri] * corr[ri] + sum;   // this lane's share; the row's 4 lanes add theirs at the end
            m[ri] = mn;
        }
        __syncthreads();   // V parts and levels visible (and every warp's S done: K may be replaced)
        // each row's units from the weighted magnitudes: w_j = p_j·2^(E_j − 127) (≈ p_j·max|v_j|, within 2), and the
        // row so far as one more term, corr·2^(ev − 127); E = the exponent of the largest (r_tc_exp), up or down. P
        // enters as w_j·2^(140 − E) < 2^14, the largest in [2^13, 2^14); O is rescaled by corr·2^(ev − E) < 2 (f32: a
        // factor above 1 loses nothing). A key with a negligible weight and huge values no longer sets the units.
#pragma unroll
        for (int ri = 0; ri < 2; ri++) {
            float wo = corr[ri] * __uint_as_float((unsigned) ev[ri] << 23), wm = wo;
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    float w = s[n][2 * ri + c] * vlv[8 * n + 2 * tg + c];
                    s[n][2 * ri + c] = w;
                    wm = fmaxf(wm, w);
                }
            wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, 1));
            wm = fmaxf(wm, __shfl_xor_sync(0xffffffffu, wm, 2));
            int em = r_tc_exp(wm);
            float up = r_tc_up(em);
            corr[ri] = wo * up * (1.f / 8192.f);   // corr·2^(ev − em), exact (or below f32's range: negligible)
            ev[ri] = em;
#pragma unroll
            for (int n = 0; n < NT; n++) { s[n][2 * ri] *= up; s[n][2 * ri + 1] *= up; }
        }
        // P as A fragments: n8 tiles 2k and 2k + 1 of S are the k16 step k of P·V
        unsigned ph[BK / 16][4], pl[BK / 16][4];
#pragma unroll
        for (int k = 0; k < BK / 16; k++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float* sv = s[2 * k + (j >> 1)] + 2 * (j & 1);
                r_parts2(sv[0], sv[1], ph[k][j], pl[k][j]);
            }
        // O = O·corr + P·V
#pragma unroll
        for (int n = 0; n < NO; n++) { o[n][0] *= corr[0]; o[n][1] *= corr[0]; o[n][2] *= corr[1]; o[n][3] *= corr[1]; }
#pragma unroll
        for (int k = 0; k < BK / 16; k++)
#pragma unroll
            for (int n = 0; n < NO; n++) r_mma3(o[n], ph[k], pl[k], vw + (8 * n + g) * SV + 8 * k + tg, D * SV);
    }
    // out = O / L as r_attn_prefill_D writes it (sink in the denominator only), O back from its units
#pragma unroll
    for (int ri = 0; ri < 2; ri++) {
        float un = r_tc_down(ev[ri]) * (1.f / 8192.f);
        float L = l[ri];
        L += __shfl_xor_sync(0xffffffffu, L, 1);
        L += __shfl_xor_sync(0xffffffffu, L, 2);
        if (rp[ri] < 0) continue;
        int r = warp * 16 + g + 8 * ri;
        int t = t0 + r / nH, h = kvh * G + hg * nH + r % nH;
        float w = r_row_weight(m[ri], L, sinks, h);
        float* orow = out + ((long long) t * heads + h) * hd;
#pragma unroll
        for (int n = 0; n < NO; n++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                int col = 8 * n + 2 * tg + c;
                if (col < hd) orow[col] = o[n][2 * ri + c] * w * un;
            }
    }
}

// One kernel per head-dimension bucket D ≤ 128 (the Java side picks them on sm_80 and up); 128 threads, 64 query rows.
#define R_ATTN_PREFILL_TC_KV(NAME, D, KV) \
extern "C" __global__ void __launch_bounds__(32 * R_TC_WARPS, 2) NAME( \
        const float* q, const KV* kc, const KV* vc, float* out, int T, int heads, int kvHeads, int hd, \
        float scale, const int* pos, int window, const float* sinks, const float* kch, const float* vch, int chunk) { \
    __shared__ __align__(16) unsigned kw[2 * R_TC_BK * (D / 2 + 4)]; \
    __shared__ __align__(16) unsigned vw[2 * D * (R_TC_BK / 2 + 4)]; \
    __shared__ float ksc[R_TC_BK], vkm[R_TC_WARPS * R_TC_BK]; \
    __shared__ float vlv[R_TC_BK]; \
    r_attn_prefill_tc_tile<D, KV>(q, kc, vc, out, T, heads, kvHeads, hd, scale, pos, window, sinks, kch, vch, kw, vw, ksc, \
            vkm, vlv, chunk); \
}
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_32, 32, float)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_64, 64, float)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_128, 128, float)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_h_32, 32, r_u16)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_h_64, 64, r_u16)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_h_128, 128, r_u16)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_q_32, 32, r_i8)
R_ATTN_PREFILL_TC_KV(r_attn_prefill_tc_q_64, 64, r_i8)
// (no q8 instance of D 128: it spills at 255 registers, the f32 one's 251 plus the cache-or-chunk choice per load; a q8
// cache of head dim 65..128 takes r_attn_prefill_q_128, Kernels.prefillTensorCoreBuckets)
