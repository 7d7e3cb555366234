// cmf4j resident-forward kernels, the weight products (dev.cmf4j.backend.cuda.ResidentForward): one-token and
// small-batch products of every stored dtype (single, q/k/v in one launch, gate/up with SwiGLU), the embedding
// gather and the prefill's widening of 4-bit weights. Its own module (built into resident.fatbin by
// tools/build-cuda-kernels.sh, NVRTC as the fallback), over common.cuh, resident.cuh and q4.cuh; the attention is in
// resident_attn.cu, the cuBLAS prefill's splits and epilogues in resident_gemm.cu. Every kernel computes in f32;
// activations are [T, width] row-major f32. Positions and token ids are read from device memory (`pos` = the chunk's
// first position, `ids` = its T token ids) so one captured CUDA graph replays for every decode step.

#include "common.cuh"
#include "resident.cuh"
#include "q4.cuh"

// Weight kinds of the product families: resident.cuh's 0-3 (f32, bf16, f16, int8), and the 4-bit dtypes as stored
// (q4.cuh): 4 q4_block (rs = its f16 scale plane, cf unused), 5 q4tp (rs = its rungs {exp2(lo), exp2(step)} per row,
// cf = its codes plane). The 4-bit kinds carry their scales in rs/cf, so they take no row or column scales (no norm
// is folded into them: ResidentWeights.foldsNorm) and run the warp-per-row path on q4.cuh's row dot products, the
// hybrid path's matvec_q4.cu bits.
#define R_Q4(K) ((K) >= 4)

// Σ_c W[r, c]·xt[c] of a 4-bit row by one warp, every lane getting it (q4tp: every lane of the warp must call).
template <int K>
__device__ __forceinline__ float r_q4_dot(const void* __restrict__ w, const float* __restrict__ rs, const float* __restrict__ cf,
                                          const float* __restrict__ xt, long long r, int cols, int lane) {
    if (K == 4) return r_warp_sum(q4_block_row<4>(w, reinterpret_cast<const r_u16*>(rs), xt, r, cols, lane));
    return r_warp_sum(q4tp_row<4>(w, rs, cf, xt, r, cols, lane));
}

// One warp's dot product of row r: r_dot for kinds 0-3 (cf = column scales), r_q4_dot for the 4-bit kinds.
template <int K>
__device__ __forceinline__ float r_row_dot(const void* __restrict__ w, const float* __restrict__ rs, const float* __restrict__ cf,
                                           const float* __restrict__ xt, long long r, int cols, int lane) {
    if constexpr (R_Q4(K)) return r_q4_dot<K>(w, rs, cf, xt, r, cols, lane);
    else return r_dot<K>(w, cf, xt, r * cols, cols, lane);
}

// ---- the decode product of 16-bit and int8 weights: activations staged once per block ----
//
// r_dot rereads x and cf for every row: 8 bytes of L1 traffic and a multiply per int8 weight, which bound the
// int8 products at ~1.5 TB/s, not DRAM. Here a block (8 warps, the same 8 rows and grid as r_dot's kernels) first
// writes x' = cf ⊙ x of a tile of R_TILE columns to shared memory (and sums x² on the way for the folded RMSNorm,
// whose 1/rms then scales the finished dots), then each warp computes 4 rows over a quarter of the tile's
// 128-column chunks, so one shared read of x' serves 4 rows; lane l loads the 4 weights at columns 4l + 128j
// (a warp's loads are 128 contiguous int8 bytes, its float4 reads of x' conflict-free), U such loads per row in
// flight before any is used; the 4 quarters are summed in shared memory in a fixed order. NM = 2 computes gate
// and up together (each with its own x').

#define R_TILE 4096

// 4 consecutive weights at element i times x, added into acc by an fmaf chain (4 FFMA per 4 weights and row: no
// FMUL/FADD around them): int8 → f32 by the 2^23 prmt trick (exact), bf16 by a shift, f16 by cvt.
template <int K>
__device__ __forceinline__ void r_fma4(uint2 v, float4 x, float& acc) {
    if (K == 3) {
        unsigned u = v.x ^ 0x80808080u;
        acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.f, x.x, acc);
        acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.f, x.y, acc);
        acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.f, x.z, acc);
        acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.f, x.w, acc);
    } else if (K == 1) {
        acc = fmaf(__uint_as_float(v.x << 16), x.x, acc);
        acc = fmaf(__uint_as_float(v.x & 0xffff0000u), x.y, acc);
        acc = fmaf(__uint_as_float(v.y << 16), x.z, acc);
        acc = fmaf(__uint_as_float(v.y & 0xffff0000u), x.w, acc);
    } else {
        acc = fmaf(r_f16((r_u16) (v.x & 0xffff)), x.x, acc);
        acc = fmaf(r_f16((r_u16) (v.x >> 16)), x.y, acc);
        acc = fmaf(r_f16((r_u16) (v.y & 0xffff)), x.z, acc);
        acc = fmaf(r_f16((r_u16) (v.y >> 16)), x.w, acc);
    }
}

// One batch of a warp's weight loads: for each of the U 512-column steps from column c of the tile (width tc),
// the 4 weights at that column of every row (int8 in .x; 8 bytes of bf16/f16). FULL: the whole batch lies inside
// the tile, no bound checks.
template <int K, int NM, int U, bool FULL>
__device__ __forceinline__ void r_batch_load(uint2 (&v)[NM][4][U], const char* const (&p)[NM][4], int c, int tc) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        int cc = c + u * 512;
        if (FULL || cc < tc) {
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    if (K == 3) { v[m][i][u].x = r_ld4(p[m][i] + cc); v[m][i][u].y = 0u; }
                    else v[m][i][u] = r_ld8(p[m][i] + 2 * cc);
                }
        }
    }
}

// The batch's dot products: one conflict-free float4 read of x' per step and matrix serves the warp's 4 rows.
template <int K, int NM, int U, bool FULL>
__device__ __forceinline__ void r_batch_use(const uint2 (&v)[NM][4][U], const float (*xs)[R_TILE], int c, int tc,
                                            float (&acc)[NM][4]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        int cc = c + u * 512;
        if (FULL || cc < tc) {
#pragma unroll
            for (int m = 0; m < NM; m++) {
                float4 xv = *reinterpret_cast<const float4*>(&xs[m][cc]);
#pragma unroll
                for (int i = 0; i < 4; i++) r_fma4<K>(v[m][i][u], xv, acc[m][i]);
            }
        }
    }
}

// dot[m] = Σ_c W_m[r, c]·cf_m[c]·xt[c] · (1/rms(xt) when normed) for r = r0 + threadIdx.x, returned to threads
// 0..7 (the others get garbage); cols a multiple of 4; rows ≥ `rows` reread the last row and are dropped by the
// caller. Every thread of the block calls it. Per 4096-column tile: the first batch of U loads per row goes out,
// x' is staged (its DRAM latency overlaps the loads'), then batches are consumed and the next issued; the bound
// checks are only on a batch that crosses the tile's end (measured on the H200, llama-8b q8_2f shapes, 32 layers
// of distinct weights in one graph: 3205 → 2560 µs per token of products against the kernel before, which checked
// every load and did FMUL + 3 FFMA + FADD per 4 weights: 8.2 instructions per int8 weight by ncu, now 5.8).
template <int K, int NM, int U>
__device__ __forceinline__ void r_rows8(const void* const (&w)[NM], const float* const (&cf)[NM],
                                        const float* __restrict__ xt, int r0, int rows, int cols, int normed,
                                        float eps, float (&dot)[NM]) {
    __shared__ __align__(16) float xs[NM][R_TILE];
    __shared__ float part[4][NM][8];
    __shared__ float red[32];
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int rb = (warp >> 2) * 4, kq = warp & 3;
    const int es = K == 3 ? 1 : 2;   // bytes per weight
    const int B = 512 * U;           // columns one batch spans
    const char* p[NM][4];
    float acc[NM][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = min(r0 + rb + i, rows - 1);
            p[m][i] = static_cast<const char*>(w[m]) + (long long) r * cols * es;
            acc[m][i] = 0.f;
        }
    float ss = 0.f;
    for (int k0 = 0; k0 < cols; k0 += R_TILE) {
        int tc = min(R_TILE, cols - k0);
        int c = kq * 128 + lane * 4;
        uint2 v[NM][4][U];
        bool full = c + B - 512 < tc;
        if (full) r_batch_load<K, NM, U, true>(v, p, c, tc); else r_batch_load<K, NM, U, false>(v, p, c, tc);
        if (k0 == 0) r_pdl_wait();   // the first weights are on their way; x (the previous kernel's output) from here
        __syncthreads();   // the previous tile has been read
        for (int j = threadIdx.x * 4; j < tc; j += blockDim.x * 4) {
            float4 xv = *reinterpret_cast<const float4*>(xt + k0 + j);
            ss += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
#pragma unroll
            for (int m = 0; m < NM; m++) {
                // (not r_cf4(xv, cf[m], k0 + j): that changed only this loop's address arithmetic, yet made the
                // llama-8b q8_2f products 1.7% slower on the H200, 2298 → 2334-2343 µs per token in gemv_bench's chain)
                float4 xm = xv;
                if (cf[m] != nullptr) {
                    float4 f = *reinterpret_cast<const float4*>(cf[m] + k0 + j);
                    xm.x *= f.x; xm.y *= f.y; xm.z *= f.z; xm.w *= f.w;
                }
                *reinterpret_cast<float4*>(&xs[m][j]) = xm;
            }
        }
        __syncthreads();
        for (;;) {
            if (full) r_batch_use<K, NM, U, true>(v, xs, c, tc, acc); else r_batch_use<K, NM, U, false>(v, xs, c, tc, acc);
            c += B;
            if (c >= tc) break;
            full = c + B - 512 < tc;
            if (full) r_batch_load<K, NM, U, true>(v, p, c, tc); else r_batch_load<K, NM, U, false>(v, p, c, tc);
        }
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int i = 0; i < 4; i++) p[m][i] += (long long) R_TILE * es;
    }
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float a = acc[m][i];
            for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
            if (lane == 0) part[kq][m][rb + i] = a;
        }
    float inv = normed ? 1.f / sqrtf(r_block_sum(ss, red) / cols + eps) : 1.f;   // its barriers also publish part
    if (!normed) __syncthreads();
    if (threadIdx.x < 8) {
#pragma unroll
        for (int m = 0; m < NM; m++)
            dot[m] = (((part[0][m][threadIdx.x] + part[1][m][threadIdx.x]) + part[2][m][threadIdx.x])
                      + part[3][m][threadIdx.x]) * inv;
    }
}

// y[t, r] = rs[r]·Σ_c W[r, c]·cf[c]·x[t, c] (+ bias[r]) (+ y[t, r] when accumulate: the residual add)
// Block = 8 warps = 8 rows; grid = (ceil(rows/8), T).
// normed: x is first RMS-normalised (eps), its weight already folded into cf.
template <int K>
__device__ __forceinline__ void r_matvec(const void* __restrict__ w, const float* __restrict__ rs,
                                         const float* __restrict__ cf, const float* __restrict__ bias,
                                         const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                         int accumulate, int normed, float eps) {
    int lane = threadIdx.x & 31;
    int t = blockIdx.y;
    r_pdl_trigger();
    if constexpr (K != 0 && !R_Q4(K)) if ((cols & 3) == 0) {   // r_rows8 waits after its first weight loads
        const void* wm[1] = {w};
        const float* cm[1] = {cf};
        float d[1];
        r_rows8<K, 1, 4>(wm, cm, x + (long long) t * cols, blockIdx.x * 8, rows, cols, normed, eps, d);
        int r = blockIdx.x * 8 + threadIdx.x;
        if (threadIdx.x < 8 && r < rows) {
            float acc = d[0];
            if (rs != nullptr) acc *= rs[r];
            if (bias != nullptr) acc += bias[r];
            long long o = (long long) t * rows + r;
            y[o] = accumulate ? y[o] + acc : acc;
        }
        return;
    }
    r_pdl_wait();
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    float inv = normed ? r_inv_rms(x + (long long) t * cols, cols, eps) : 1.f;
    if (r >= rows) return;
    float acc = r_row_dot<K>(w, rs, cf, x + (long long) t * cols, r, cols, lane) * inv;
    if (lane == 0) {
        if (rs != nullptr && !R_Q4(K)) acc *= rs[r];
        if (bias != nullptr) acc += bias[r];
        long long o = (long long) t * rows + r;
        y[o] = accumulate ? y[o] + acc : acc;
    }
}

#define R_MATVEC(NAME, K, B)                                                                              \
    extern "C" __global__ void __launch_bounds__(256, B) NAME(const void* w, const float* rs, const float* cf, \
        const float* bias, const float* x, float* y, int rows, int cols, int accumulate, int normed, float eps) { \
        r_matvec<K>(w, rs, cf, bias, x, y, rows, cols, accumulate, normed, eps);                          \
    }

// Blocks per SM asked of ptxas for the decode products, tuned on the H200 (sm_90: 4 = 64 registers for the single
// products, 6 = 40 for int8 q/k/v, 3 = 80 for gate+up; spill-free there and on sm_80/86/89). sm_100 and sm_120
// allocate registers differently and spill at those budgets, so they get one step more registers (not measured).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define R_MB_MATVEC 3
#define R_MB_MATVEC3_Q8 4
#define R_MB_GLU 2
#else
#define R_MB_MATVEC 4
#define R_MB_MATVEC3_Q8 6
#define R_MB_GLU 3
#endif

R_MATVEC(r_matvec_f32, 0, 1)
R_MATVEC(r_matvec_bf16, 1, R_MB_MATVEC)
R_MATVEC(r_matvec_f16, 2, R_MB_MATVEC)
R_MATVEC(r_matvec_q8, 3, R_MB_MATVEC)
R_MATVEC(r_matvec_q4_block, 4, 1)
R_MATVEC(r_matvec_q4tp, 5, 1)

// Three products of one input and one dtype in one launch (q, k, v): blocks [0, b0) do matrix 0, the next
// b1 matrix 1, the rest matrix 2 (b_i = ceil(rows_i / 8)); each as r_matvec without accumulation.
template <int K>
__device__ __forceinline__ void r_matvec3(
        const void* w0, const float* rs0, const float* cf0, const float* b0, float* y0, int rows0,
        const void* w1, const float* rs1, const float* cf1, const float* b1, float* y1, int rows1,
        const void* w2, const float* rs2, const float* cf2, const float* b2, float* y2, int rows2,
        const float* __restrict__ x, int cols, int normed, float eps) {
    int lane = threadIdx.x & 31;
    int blk = blockIdx.x, n0 = (rows0 + 7) / 8, n1 = (rows1 + 7) / 8;
    const void* w = w0; const float *rs = rs0, *cf = cf0, *bias = b0; float* y = y0; int rows = rows0;
    if (blk >= n0 + n1) { blk -= n0 + n1; w = w2; rs = rs2; cf = cf2; bias = b2; y = y2; rows = rows2; }
    else if (blk >= n0) { blk -= n0; w = w1; rs = rs1; cf = cf1; bias = b1; y = y1; rows = rows1; }
    int t = blockIdx.y;
    r_pdl_trigger();
    if constexpr (K != 0 && !R_Q4(K)) if ((cols & 3) == 0) {   // r_rows8 waits after its first weight loads
        const void* wm[1] = {w};
        const float* cm[1] = {cf};
        float d[1];
        // int8: 2 loads per batch and 6 blocks per SM make q/k/v (768 blocks for llama-8b) one wave: 397 → 353 µs
        // per token on the H200 (gemv_bench)
        r_rows8<K, 1, K == 3 ? 2 : 4>(wm, cm, x + (long long) t * cols, blk * 8, rows, cols, normed, eps, d);
        int r = blk * 8 + threadIdx.x;
        if (threadIdx.x < 8 && r < rows) {
            float acc = d[0];
            if (rs != nullptr) acc *= rs[r];
            if (bias != nullptr) acc += bias[r];
            y[(long long) t * rows + r] = acc;
        }
        return;
    }
    r_pdl_wait();
    float inv = normed ? r_inv_rms(x + (long long) t * cols, cols, eps) : 1.f;
    int r = blk * 8 + (threadIdx.x >> 5);
    if (r >= rows) return;
    float acc = r_row_dot<K>(w, rs, cf, x + (long long) t * cols, r, cols, lane) * inv;
    if (lane == 0) {
        if (rs != nullptr && !R_Q4(K)) acc *= rs[r];
        if (bias != nullptr) acc += bias[r];
        y[(long long) t * rows + r] = acc;
    }
}

#define R_MATVEC3(NAME, K, B)                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, B) NAME(                                               \
        const void* w0, const float* rs0, const float* cf0, const float* b0, float* y0, int rows0,           \
        const void* w1, const float* rs1, const float* cf1, const float* b1, float* y1, int rows1,           \
        const void* w2, const float* rs2, const float* cf2, const float* b2, float* y2, int rows2,           \
        const float* x, int cols, int normed, float eps) {                                                   \
        r_matvec3<K>(w0, rs0, cf0, b0, y0, rows0, w1, rs1, cf1, b1, y1, rows1, w2, rs2, cf2, b2, y2, rows2, x, cols, normed, eps); \
    }

R_MATVEC3(r_matvec3_f32, 0, 2)
R_MATVEC3(r_matvec3_bf16, 1, R_MB_MATVEC)
R_MATVEC3(r_matvec3_f16, 2, R_MB_MATVEC)
R_MATVEC3(r_matvec3_q8, 3, R_MB_MATVEC3_Q8)
R_MATVEC3(r_matvec3_q4_block, 4, 1)
R_MATVEC3(r_matvec3_q4tp, 5, 1)


// SwiGLU with both products in one pass: y[t, r] = silu(gate_r·x_t)·(up_r·x_t); gate and up of one dtype.
template <int K>
__device__ __forceinline__ void r_glu(const void* __restrict__ wg, const float* __restrict__ rsg, const float* __restrict__ cfg,
                                      const void* __restrict__ wu, const float* __restrict__ rsu, const float* __restrict__ cfu,
                                      const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                      int normed, float eps) {
    int lane = threadIdx.x & 31;
    int t = blockIdx.y;
    const float* xt = x + (long long) t * cols;
    r_pdl_trigger();
    if constexpr (K != 0 && !R_Q4(K)) if ((cols & 3) == 0) {   // r_rows8 waits after its first weight loads
        const void* wm[2] = {wg, wu};
        const float* cm[2] = {cfg, cfu};
        float d[2];
        r_rows8<K, 2, K == 3 ? 4 : 2>(wm, cm, xt, blockIdx.x * 8, rows, cols, normed, eps, d);
        int r = blockIdx.x * 8 + threadIdx.x;
        if (threadIdx.x < 8 && r < rows) {
            float g = d[0], u = d[1];
            if (rsg != nullptr) g *= rsg[r];
            if (rsu != nullptr) u *= rsu[r];
            y[(long long) t * rows + r] = r_silu(g) * u;
        }
        return;
    }
    r_pdl_wait();
    int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    float inv = normed ? r_inv_rms(xt, cols, eps) : 1.f;
    if (r >= rows) return;
    float g = r_row_dot<K>(wg, rsg, cfg, xt, r, cols, lane) * inv;
    float u = r_row_dot<K>(wu, rsu, cfu, xt, r, cols, lane) * inv;
    if (lane == 0) {
        if (rsg != nullptr && !R_Q4(K)) g *= rsg[r];
        if (rsu != nullptr && !R_Q4(K)) u *= rsu[r];
        y[(long long) t * rows + r] = r_silu(g) * u;
    }
}

#define R_GLU(NAME, K, B)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, B) NAME(const void* wg, const float* rsg, const float* cfg, \
        const void* wu, const float* rsu, const float* cfu, const float* x, float* y, int rows, int cols,     \
        int normed, float eps) {                                                                             \
        r_glu<K>(wg, rsg, cfg, wu, rsu, cfu, x, y, rows, cols, normed, eps);                                 \
    }

R_GLU(r_glu_f32, 0, 1)
R_GLU(r_glu_bf16, 1, R_MB_GLU)
R_GLU(r_glu_f16, 2, R_MB_GLU)
R_GLU(r_glu_q8, 3, R_MB_GLU)
R_GLU(r_glu_q4_block, 4, 1)
R_GLU(r_glu_q4tp, 5, 1)

// ---- embedding ----

// x[t, c] = E[ids[t], c]·(rs[id])·(cf[c])·scale; block per token.
template <int K>
__device__ __forceinline__ void r_embed(const void* __restrict__ w, const float* __restrict__ rs,
                                        const float* __restrict__ cf, const int* __restrict__ ids,
                                        float* __restrict__ x, int cols, float scale) {
    r_pdl_trigger();
    r_pdl_wait();
    int t = blockIdx.x;
    long long id = ids[t];
    if constexpr (R_Q4(K)) {   // the 4-bit kinds: their scales as stored (q4.cuh); no row or column scales
        __shared__ float ladder[32];
        if (K == 5 && threadIdx.x < 32) ladder[threadIdx.x] = q4tp_rung(rs, id, threadIdx.x);
        __syncthreads();
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            float v = K == 4 ? q4_block_weight(w, reinterpret_cast<const r_u16*>(rs), id * cols + c) : q4tp_weight(w, cf, ladder, id, c, cols);
            x[(long long) t * cols + c] = scale != 1.f ? v * scale : v;
        }
        return;
    }
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
R_EMBED(r_embed_q4_block, 4)
R_EMBED(r_embed_q4tp, 5)

// ---- the prefill's 4-bit weights for cuBLAS ----

// out[r, c] = W[r, c] as f32, row-major [rows, cols] (the layout of an f32 weight, which the GEMMs read as it is):
// (q − 8)·scale, exact for q4_block (an f16 scale times a 4-bit integer) and one f32 rounding for q4tp (an f32 rung
// times the integer), so the prefill's cuBLAS products read the decode kernels' weights (ResidentLowering.product).
// A block per row (grid = rows).
template <int K>
__device__ __forceinline__ void r_widen_q4(const void* __restrict__ w, const float* __restrict__ rs, const float* __restrict__ cf,
                                           float* __restrict__ out, int rows, int cols) {
    __shared__ float ladder[32];
    long long r = blockIdx.x;
    if (K == 5 && threadIdx.x < 32) ladder[threadIdx.x] = q4tp_rung(rs, r, threadIdx.x);
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        out[r * cols + c] = K == 4 ? q4_block_weight(w, reinterpret_cast<const r_u16*>(rs), r * cols + c)
                                   : q4tp_weight(w, cf, ladder, r, c, cols);
}

#define R_WIDEN_Q4(NAME, K)                                                                                \
    extern "C" __global__ void __launch_bounds__(256) NAME(const void* w, const float* rs, const float* cf,  \
        float* out, int rows, int cols) {                                                                   \
        r_widen_q4<K>(w, rs, cf, out, rows, cols);                                                          \
    }

R_WIDEN_Q4(r_widen_q4_block, 4)
R_WIDEN_Q4(r_widen_q4tp, 5)
