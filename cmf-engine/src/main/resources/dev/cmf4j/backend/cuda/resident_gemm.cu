// cmf4j resident-forward kernels, the cuBLAS prefill's own (dev.cmf4j.backend.cuda.ResidentLowering): activations
// split into 16-bit parts, int8 weights widened, and the epilogues that add the parts' products back (row scales,
// bias, residual, SwiGLU). Its own module (resident_gemm.fatbin by tools/build-cuda-kernels.sh, NVRTC as the
// fallback), over common.cuh and resident.cuh.

#include "common.cuh"
#include "resident.cuh"

// ---- prefill on tensor cores (cuBLAS GEMM between these kernels) ----
//
// A chunk's product Y = X·Wᵀ runs as one cublasGemmEx on 16-bit inputs with f32 accumulation, exact enough for
// the f32 tolerances: the weights are exact in 16 bits (bf16/f16 as stored; int8 values as f16), and the
// activations go in as 16-bit parts stacked as parts·T columns of one GEMM; the epilogue adds the parts' products
// and applies the row scales, bias, residual add or SwiGLU.
// - bf16 weights: x ≈ p0 + p1 + p2, each part the bf16 rounding of what the earlier parts left (24 significant
//   bits like f32). (Two parts, 16 bits, left llama-fixture logits 3e-4 from the CPU engine; three leave ~1e-5.)
// - f16 and int8 weights: two f16 parts of x/s, s = the power of two just above the row's max |x| (so x/s is
//   exact and within ±1: no f16 overflow), the second part scaled up by 2^11 (no f16 underflow for it): x ≈
//   s·(p0 + p1·2^-11), 22 significant bits, each product 2/3 of the bf16 way's GEMM work.


// out[j·T + t, c] = part j of v = x[t, c]·cf[c]·(1/rms of row t when normed), j < parts. bf16 (f16 == 0): v's
// bf16 parts, ts unused. f16: parts of v/s (s = 2^e just above the row's max |v|, written to ts[t]), part j scaled
// by 2^(11j). Block per token; one pass for Σx² and max |x·cf| (the max only picks the power of two, so its
// rounding does not matter), one for the parts; 4 columns per thread step (float4 in, 8-byte stores) when
// cols % 4 == 0.
__device__ __forceinline__ r_u16 r_part(float& v, int f16) {
    r_u16 h = f16 ? r_to_f16(v) : r_to_bf16(v);
    v -= f16 ? r_f16(h) : r_bf16(h);
    if (f16) v *= 2048.f;
    return h;
}

// A token's f16 parts' scale s = 2^e just above its max |v| = m (frexpf: m = f·2^e, f in [0.5, 1)), written to ts[t]
// by thread 0; returns 1/s (exact, a power of two). e is clamped so 1/s stays finite for rows below 2^-125; an inf
// row: frexpf leaves e = 0, scale 1, the first part inf, later ones NaN.
__device__ __forceinline__ float r_token_rescale(float m, float* ts, int t) {
    int e = 0;
    if (m > 0.f) frexpf(m, &e);
    float scale = ldexpf(1.f, max(-125, min(127, e)));
    if (threadIdx.x == 0) ts[t] = scale;
    return 1.f / scale;
}

// v·rescale as `parts` 16-bit parts (r_part), part j of the 4 columns at dst + j·stride (8-byte stores).
__device__ __forceinline__ void r_store_parts4(float4 v, float rescale, int f16, int parts, r_u16* dst, long long stride) {
    v.x *= rescale; v.y *= rescale; v.z *= rescale; v.w *= rescale;
    for (int j = 0; j < parts; j++) {
        uint2 o;
        o.x = (unsigned) r_part(v.x, f16) | ((unsigned) r_part(v.y, f16) << 16);
        o.y = (unsigned) r_part(v.z, f16) | ((unsigned) r_part(v.w, f16) << 16);
        *reinterpret_cast<uint2*>(dst + j * stride) = o;
    }
}

// The split of up to N products of one input (q, k and v; gate and up): x read once (and its 1/rms computed once),
// then each matrix i < n writes its own parts into outs[i] from x·inv·cfs[i] (its column scales: q8_2f's, or the
// folded norm's weight), with its own per-token scale tss[i][t] (f16: the max of |x·cf| differs per matrix). The
// same arithmetic as one r_split per matrix, value for value.
template <int N>
__device__ __forceinline__ void r_split_body(const float* x, int normed, float eps, int T, int cols, int f16, int parts, int n,
                                             const float* const* cfs, r_u16* const* outs, float* const* tss) {
    __shared__ float red[32];
    int t = blockIdx.x;
    const float* xt = x + (long long) t * cols;
    bool vec = (cols & 3) == 0;
    float ss = 0.f, mx[N];
#pragma unroll
    for (int i = 0; i < N; i++) mx[i] = 0.f;
    if (vec) {
        for (int c = threadIdx.x * 4; c < cols; c += blockDim.x * 4) {
            float4 v = *reinterpret_cast<const float4*>(xt + c);
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
#pragma unroll
            for (int i = 0; i < N; i++) {
                if (i >= n) break;
                float4 w = r_cf4(v, cfs[i], c);
                mx[i] = fmaxf(mx[i], r_absmax4(w));
            }
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = xt[c];
            ss += v * v;
#pragma unroll
            for (int i = 0; i < N; i++) {
                if (i >= n) break;
                mx[i] = fmaxf(mx[i], fabsf(cfs[i] != nullptr ? v * cfs[i][c] : v));
            }
        }
    }
    float inv = normed ? 1.f / sqrtf(r_block_sum(ss, red) / cols + eps) : 1.f;
    float rescale[N];   // 1/scale, exact: a power of two
#pragma unroll
    for (int i = 0; i < N; i++) {
        rescale[i] = 1.f;
        if (f16 && i < n) rescale[i] = r_token_rescale(r_block_max(mx[i], red) * inv, tss[i], t);
    }
    if (vec) {
        for (int c = threadIdx.x * 4; c < cols; c += blockDim.x * 4) {
            float4 x4 = *reinterpret_cast<const float4*>(xt + c);
            x4.x *= inv; x4.y *= inv; x4.z *= inv; x4.w *= inv;
#pragma unroll
            for (int i = 0; i < N; i++) {
                if (i >= n) break;
                r_store_parts4(r_cf4(x4, cfs[i], c), rescale[i], f16, parts, outs[i] + (long long) t * cols + c, (long long) T * cols);
            }
        }
    } else {
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float xv = xt[c] * inv;
#pragma unroll
            for (int i = 0; i < N; i++) {
                if (i >= n) break;
                float v = xv;
                if (cfs[i] != nullptr) v *= cfs[i][c];
                v *= rescale[i];
                for (int j = 0; j < parts; j++) outs[i][((long long) j * T + t) * cols + c] = r_part(v, f16);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) r_split(const float* x, const float* cf, int normed, float eps,
                                                          r_u16* out, int T, int cols, int f16, int parts, float* ts) {
    const float* cfs[1] = {cf};
    r_u16* outs[1] = {out};
    float* tss[1] = {ts};
    r_split_body<1>(x, normed, eps, T, cols, f16, parts, 1, cfs, outs, tss);
}

// n ≤ 3 matrices' parts in one launch (r_split_body); the unused ones' pointers may be null.
extern "C" __global__ void __launch_bounds__(256) r_split3(const float* x, int normed, float eps, int T, int cols, int f16,
                                                           int parts, int n, const float* cf0, r_u16* out0, float* ts0,
                                                           const float* cf1, r_u16* out1, float* ts1,
                                                           const float* cf2, r_u16* out2, float* ts2) {
    const float* cfs[3] = {cf0, cf1, cf2};
    r_u16* outs[3] = {out0, out1, out2};
    float* tss[3] = {ts0, ts1, ts2};
    r_split_body<3>(x, normed, eps, T, cols, f16, parts, n, cfs, outs, tss);
}

// int8 weights as bf16 or f16 (exact: |w| ≤ 128 needs 8 significant bits), 4 per thread step.
extern "C" __global__ void __launch_bounds__(256) r_i8_widen(const signed char* w, r_u16* out, long long n, int f16) {
    long long stride = (long long) gridDim.x * blockDim.x * 4;
    for (long long i = ((long long) blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
        if (i + 4 <= n) {
            float f[4];
            r_i8x4(*reinterpret_cast<const unsigned*>(w + i), f);
            uint2 o;
            if (f16) {
                o.x = (unsigned) r_to_f16(f[0]) | ((unsigned) r_to_f16(f[1]) << 16);
                o.y = (unsigned) r_to_f16(f[2]) | ((unsigned) r_to_f16(f[3]) << 16);
            } else {
                o.x = (__float_as_uint(f[0]) >> 16) | (__float_as_uint(f[1]) & 0xffff0000u);
                o.y = (__float_as_uint(f[2]) >> 16) | (__float_as_uint(f[3]) & 0xffff0000u);
            }
            *reinterpret_cast<uint2*>(out + i) = o;
        } else {
            for (long long j = i; j < n; j++) out[j] = f16 ? r_to_f16((float) w[j]) : (r_u16) (__float_as_uint((float) w[j]) >> 16);
        }
    }
}

// Row r, token t of a split GEMM's output: Σ_j C[r, j·T + t]·step^j·ts[t] (C column-major [rows, parts·T]; ts
// null: 1; step 1 for bf16 parts, 2^-11 for the scaled f16 parts).
__device__ __forceinline__ float r_parts(const float* C, int rows, int T, int t, int r, int parts, const float* ts, float step) {
    float v = 0.f, f = 1.f;
    for (int j = 0; j < parts; j++, f *= step) v += C[((long long) j * T + t) * rows + r] * f;
    return ts != nullptr ? v * ts[t] : v;
}

// The same for rows r..r+3 (r % 4 == 0, rows % 4 == 0): one float4 per part.
__device__ __forceinline__ float4 r_parts4(const float* C, int rows, int T, int t, int r, int parts, const float* ts, float step) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    float f = 1.f;
    for (int j = 0; j < parts; j++, f *= step) {
        float4 c = *reinterpret_cast<const float4*>(C + ((long long) j * T + t) * rows + r);
        v.x += c.x * f; v.y += c.y * f; v.z += c.z * f; v.w += c.w * f;
    }
    if (ts != nullptr) { float s = ts[t]; v.x *= s; v.y *= s; v.z *= s; v.w *= s; }
    return v;
}

// The epilogues: grid (ceil(rows / 1024), T), each thread 4 consecutive rows of token blockIdx.y (float4 when
// rows % 4 == 0), so no thread divides an index.

// y[t, r..r+3] = r_parts(C)·rs (+ bias) (+ y[t, r..r+3] when accumulate), r = r0 < rows.
__device__ __forceinline__ void r_gemm_out_row4(const float* C, const float* rs, const float* bias, float* y, int rows, int T,
                                                int parts, int accumulate, const float* ts, float step, int t, int r0) {
    float* yt = y + (long long) t * rows;
    if ((rows & 3) == 0) {
        float4 v = r_parts4(C, rows, T, t, r0, parts, ts, step);
        float o[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (rs != nullptr) o[i] *= rs[r0 + i];
            if (bias != nullptr) o[i] += bias[r0 + i];
        }
        float4 w = make_float4(o[0], o[1], o[2], o[3]);
        if (accumulate) {
            float4 p = *reinterpret_cast<const float4*>(yt + r0);
            w.x += p.x; w.y += p.y; w.z += p.z; w.w += p.w;
        }
        *reinterpret_cast<float4*>(yt + r0) = w;
    } else {
        for (int r = r0; r < min(r0 + 4, rows); r++) {
            float v = r_parts(C, rows, T, t, r, parts, ts, step);
            if (rs != nullptr) v *= rs[r];
            if (bias != nullptr) v += bias[r];
            yt[r] = accumulate ? yt[r] + v : v;
        }
    }
}

// The same for token blockIdx.y and 4 rows of block bx along the rows.
__device__ __forceinline__ void r_gemm_out_at(const float* C, const float* rs, const float* bias, float* y, int rows, int T,
                                              int parts, int accumulate, const float* ts, float step, int bx) {
    int r0 = (bx * blockDim.x + threadIdx.x) * 4;
    if (r0 < rows) r_gemm_out_row4(C, rs, bias, y, rows, T, parts, accumulate, ts, step, blockIdx.y, r0);
}

extern "C" __global__ void __launch_bounds__(256) r_gemm_out(const float* C, const float* rs, const float* bias,
                                                             float* y, int rows, int T, int parts, int accumulate,
                                                             const float* ts, float step) {
    r_gemm_out_at(C, rs, bias, y, rows, T, parts, accumulate, ts, step, blockIdx.x);
}

// Three products' epilogues (q, k and v) in one launch, none accumulating: grid (Σ ceil(rows_i / 1024), T), the
// first blocks q's, then k's, then v's.
extern "C" __global__ void __launch_bounds__(256) r_gemm_out3(const float* C0, const float* rs0, const float* b0, float* y0,
                                                              int rows0, const float* ts0,
                                                              const float* C1, const float* rs1, const float* b1, float* y1,
                                                              int rows1, const float* ts1,
                                                              const float* C2, const float* rs2, const float* b2, float* y2,
                                                              int rows2, const float* ts2, int T, int parts, float step) {
    int per = blockDim.x * 4, n0 = (rows0 + per - 1) / per, n1 = (rows1 + per - 1) / per, bx = blockIdx.x;
    if (bx < n0) r_gemm_out_at(C0, rs0, b0, y0, rows0, T, parts, 0, ts0, step, bx);
    else if (bx < n0 + n1) r_gemm_out_at(C1, rs1, b1, y1, rows1, T, parts, 0, ts1, step, bx - n0);
    else r_gemm_out_at(C2, rs2, b2, y2, rows2, T, parts, 0, ts2, step, bx - n0 - n1);
}

// A residual epilogue (o, down: y[t] += r_parts(C)·rs (+ bias), r_gemm_out's arithmetic) fused with the split of
// the next products of y (r_split3's: gate and up after o, the next layer's q, k and v after down), block per token:
// the row's epilogue, a barrier (after which the block reads its own writes of y), then r_split_body over the row.
// One launch instead of two; the same values as r_gemm_out then r_split3. 1024 threads: a row of 4096 is one float4
// per thread, so a token's block is short even where few tokens (decode rows) leave most SMs idle. C's token scales tsIn may be one of the
// split's outputs ts_i: a block reads only its token's, before the barrier, and writes only its token's, after.
#define R_RESIDUAL_SPLIT_THREADS 1024
extern "C" __global__ void __launch_bounds__(R_RESIDUAL_SPLIT_THREADS) r_residual_split3(const float* C, const float* rs, const float* bias, float* y,
                                                                    int rows, int T, int partsIn, const float* tsIn, float stepIn,
                                                                    int normed, float eps, int f16, int parts, int n,
                                                                    const float* cf0, r_u16* out0, float* ts0,
                                                                    const float* cf1, r_u16* out1, float* ts1,
                                                                    const float* cf2, r_u16* out2, float* ts2) {
    for (int r0 = threadIdx.x * 4; r0 < rows; r0 += blockDim.x * 4)
        r_gemm_out_row4(C, rs, bias, y, rows, T, partsIn, 1, tsIn, stepIn, blockIdx.x, r0);
    __syncthreads();
    const float* cfs[3] = {cf0, cf1, cf2};
    r_u16* outs[3] = {out0, out1, out2};
    float* tss[3] = {ts0, ts1, ts2};
    r_split_body<3>(y, normed, eps, T, rows, f16, parts, n, cfs, outs, tss);
}

// y[t, r] = silu(gate)·up from two GEMM outputs as r_gemm_out reads them.
extern "C" __global__ void __launch_bounds__(256) r_glu_out(const float* Cg, const float* Cu, const float* rsg,
                                                            const float* rsu, float* y, int rows, int T, int parts,
                                                            const float* tsg, const float* tsu, float step) {
    int t = blockIdx.y, r0 = (blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (r0 >= rows) return;
    float* yt = y + (long long) t * rows;
    if ((rows & 3) == 0) {
        float4 g = r_parts4(Cg, rows, T, t, r0, parts, tsg, step), u = r_parts4(Cu, rows, T, t, r0, parts, tsu, step);
        float gs[4] = {g.x, g.y, g.z, g.w}, us[4] = {u.x, u.y, u.z, u.w}, o[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (rsg != nullptr) gs[i] *= rsg[r0 + i];
            if (rsu != nullptr) us[i] *= rsu[r0 + i];
            o[i] = r_silu(gs[i]) * us[i];
        }
        *reinterpret_cast<float4*>(yt + r0) = make_float4(o[0], o[1], o[2], o[3]);
    } else {
        for (int r = r0; r < min(r0 + 4, rows); r++) {
            float gv = r_parts(Cg, rows, T, t, r, parts, tsg, step), uv = r_parts(Cu, rows, T, t, r, parts, tsu, step);
            if (rsg != nullptr) gv *= rsg[r];
            if (rsu != nullptr) uv *= rsu[r];
            yt[r] = r_silu(gv) * uv;
        }
    }
}

// The SwiGLU epilogue fused with the next product's split (down): block per token of R_GLU_SPLIT_THREADS, h =
// silu(gate)·up for the whole row (r_glu_out's arithmetic) held in registers, N float4 per thread (rows % 4 == 0,
// rows ≤ N·4·512; N ≤ 8, 16384 columns; one block of up to 128 registers per SM spills on no target), then r_split's parts of h·cf (down's column
// scales; no norm) with their per-token scale: the f32 h row never goes to memory. The same values as r_glu_out
// then r_split.
#define R_GLU_SPLIT_THREADS 512
template <int N>
__device__ __forceinline__ void r_glu_split_body(const float* Cg, const float* Cu, const float* rsg, const float* rsu,
                                                 const float* tsg, const float* tsu, float step, int partsIn, int rows, int T,
                                                 const float* cf, r_u16* out, int f16, int parts, float* ts) {
    __shared__ float red[32];
    int t = blockIdx.x;
    float4 h[N], u[N];   // gate, up; then h = silu(gate)·up·cf
    // the parts' loads part by part with the rows innermost, so a thread has 2N loads in flight (one row after
    // the other through r_parts4 kept one)
    float f = 1.f;
    for (int j = 0; j < partsIn; j++, f *= step) {
        const float* cg = Cg + ((long long) j * T + t) * rows;
        const float* cu = Cu + ((long long) j * T + t) * rows;
#pragma unroll
        for (int k = 0; k < N; k++) {
            int r0 = (k * blockDim.x + threadIdx.x) * 4;
            float4 g4 = make_float4(0.f, 0.f, 0.f, 0.f), u4 = g4;
            if (r0 < rows) { g4 = *reinterpret_cast<const float4*>(cg + r0); u4 = *reinterpret_cast<const float4*>(cu + r0); }
            // zeroed here, in the first part's pass, not before the loop: that made ptxas keep fewer loads in flight
            // (sm_90 91 instead of 128 registers) and the llama-8b exact-prefill split 2,324 → 2,693 µs per chunk
            if (j == 0) { h[k] = make_float4(0.f, 0.f, 0.f, 0.f); u[k] = h[k]; }
            h[k].x += g4.x * f; h[k].y += g4.y * f; h[k].z += g4.z * f; h[k].w += g4.w * f;
            u[k].x += u4.x * f; u[k].y += u4.y * f; u[k].z += u4.z * f; u[k].w += u4.w * f;
        }
    }
    float sg = tsg != nullptr ? tsg[t] : 1.f, su = tsu != nullptr ? tsu[t] : 1.f;
    float mx = 0.f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        int r0 = (k * blockDim.x + threadIdx.x) * 4;
        if (r0 < rows) {
            float gs[4] = {h[k].x, h[k].y, h[k].z, h[k].w}, us[4] = {u[k].x, u[k].y, u[k].z, u[k].w}, o[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                if (tsg != nullptr) gs[i] *= sg;
                if (tsu != nullptr) us[i] *= su;
                if (rsg != nullptr) gs[i] *= rsg[r0 + i];
                if (rsu != nullptr) us[i] *= rsu[r0 + i];
                o[i] = r_silu(gs[i]) * us[i];
            }
            float4 v = r_cf4(make_float4(o[0], o[1], o[2], o[3]), cf, r0);
            mx = fmaxf(mx, r_absmax4(v));
            h[k] = v;
        }
    }
    float rescale = f16 ? r_token_rescale(r_block_max(mx, red), ts, t) : 1.f;
#pragma unroll
    for (int k = 0; k < N; k++) {
        int r0 = (k * blockDim.x + threadIdx.x) * 4;
        if (r0 < rows) {
            r_store_parts4(h[k], rescale, f16, parts, out + (long long) t * rows + r0, (long long) T * rows);
        }
    }
}

#define R_GLU_SPLIT(N) \
extern "C" __global__ void __launch_bounds__(R_GLU_SPLIT_THREADS, 1) r_glu_split_##N( \
        const float* Cg, const float* Cu, const float* rsg, const float* rsu, const float* tsg, const float* tsu, float step, \
        int partsIn, int rows, int T, const float* cf, r_u16* out, int f16, int parts, float* ts) { \
    r_glu_split_body<N>(Cg, Cu, rsg, rsu, tsg, tsu, step, partsIn, rows, T, cf, out, f16, parts, ts); \
}
R_GLU_SPLIT(1)
R_GLU_SPLIT(2)
R_GLU_SPLIT(4)
R_GLU_SPLIT(8)
