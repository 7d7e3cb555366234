// Tensor-core int8 decode products, a candidate against resident.cu's SIMT ones (llama-8b q8_2f shapes, 32 layers
// of distinct weights, no Java needed). Build here: tools/device-bench/build-gemv-bench.sh; run on the device:
// .gpu/b8/mma_gemv [reps]. One JSON line per check and timing.
//
// Why: the SIMT int8 products spend ~5.8 instructions per weight (int8 → f32 by prmt + fsub, an FFMA, x from
// shared memory): at 4.4 TB/s that is ~75% of an SM's issue rate, so they stall at ~3.2 TB/s while the bf16 ones
// (half the weights per byte) get close to the 4.47 TB/s streaming read. Here the weights go into
// mma.sync.m16n8k32.s8 as loaded (no conversion), and x' = cf ⊙ x goes in as 4 int8 parts of one power-of-two
// scale per block, in the B operand's first 4 columns: x'·2^k = q0 + q1/128 + q2/128² + q3/128³ + e, |e| ≤ 2^-22
// (|x'·2^k| < 64), every step exact, the products summed exactly in int32: the dot is f32-exact but for that last
// residual (relative 2^-27 of the block's largest |x'|), tighter than the f32 FMA chain it replaces.
//
// Layout: a block (8 warps) takes 128 rows (GLU: 64 rows of gate and the same 64 of up) over a K-slice of KS = 64·NC
// columns; each warp one 16-row m-tile. Lane (g, q) = (lane / 4, lane % 4) loads 16 bytes of rows g and g + 8 at
// columns 64j + 16q of the slice (j < NC): the mma's k order is permuted so that its A fragment is exactly those
// bytes, and the B fragment (x' parts staged in shared memory in the same order) one 16-byte shared read. All NC
// chunks' loads go out before griddepcontrol.wait. The S = cols / KS slices of a row block write f32 partials; the
// block that finishes a row block last (a counter per row block, reset by it) sums them in slice order (the result
// does not depend on timing) and applies 1/rms, the row scales, bias, the residual add or SwiGLU.
#include "llama8b_bench.cuh"

// c += A·B: A 16×32 s8 (a[0] = A[g][4q..4q+3], a[1] = A[g+8][4q..], a[2] = A[g][16+4q..], a[3] = A[g+8][16+4q..]),
// B 32×8 s8 (b0 = B[4q..4q+3][g], b1 = B[16+4q..16+4q+3][g]), c 16×8 s32 (c[0..1] = C[g][2q..2q+1], c[2..3] = C[g+8][..]).
__device__ __forceinline__ void m_mma_s8(int (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A kind's arguments (llama8b_bench.cuh) plus the split-K bookkeeping.
struct MvArgs : KindArgs {
    int S;             // K-slices
    float* part;       // [S][row blocks · 128]
    float* ssp;        // [row blocks][S]
    unsigned* cnt;     // [row blocks], zero between launches
};

#define MV_P 4
#define MV_MAXS 128  // most K-slices a launch may have

// Stages x' = cf ⊙ x of the slice as MV_P int8 parts (xq[j][p][64]: chunk j, part p); returns 2^-k (the parts'
// unit) or NaN when the slice holds a non-finite x'. ss += Σx² of the slice.
template <int NC>
__device__ __forceinline__ float m_stage(const float* __restrict__ x, const float* __restrict__ cf, int k0, int n,
                                         signed char (*xq)[MV_P][64], float* red, float& ss, bool sumsq) {
    constexpr int PER = (NC * 64 + 255) / 256;
    float v[PER];
    float mx = 0.f;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = threadIdx.x + 256 * i;
        v[i] = 0.f;
        if (c < n) {
            float xx = x[k0 + c];
            if (sumsq) ss += xx * xx;
            v[i] = cf != nullptr ? xx * cf[k0 + c] : xx;
            float a = fabsf(v[i]);
            mx = fmaxf(mx, a <= 3.402823466e38f ? a : INFINITY);   // NaN → inf too
        }
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    __syncthreads();   // red may be in use by the other set's stage
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = red[0];
#pragma unroll
    for (int i = 1; i < 8; i++) mx = fmaxf(mx, red[i]);
    // mx ∈ [2^E, 2^(E+1)): scale 2^(5 - E) puts every |x'| below 64
    int E = (int) ((__float_as_uint(mx) >> 23) & 0xff) - 127;
    E = E < -120 ? -120 : E;
    float up = __uint_as_float((unsigned) (127 + 5 - E) << 23), unit = __uint_as_float((unsigned) (127 - 5 + E) << 23);
    if (mx == INFINITY) { up = 0.f; unit = __int_as_float(0x7fc00000); }
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int c = threadIdx.x + 256 * i;
        float y = v[i] * up;   // exact (power of two), |y| < 64
        float q0 = rintf(y); y = (y - q0) * 128.f;
        float q1 = rintf(y); y = (y - q1) * 128.f;
        float q2 = rintf(y); y = (y - q2) * 128.f;
        float q3 = rintf(y);
        if (NC * 64 % 256 != 0 && c >= NC * 64) break;
        signed char* d = &xq[c >> 6][0][c & 63];
        d[0] = (signed char) (int) q0; d[64] = (signed char) (int) q1; d[128] = (signed char) (int) q2; d[192] = (signed char) (int) q3;
    }
    return unit;
}

template <int NC, bool GLU>
__global__ void __launch_bounds__(256) c_mv8(MvArgs a) {
    r_pdl_trigger();
    __shared__ __align__(16) signed char xq[GLU ? 2 : 1][NC][MV_P][64];
    __shared__ float red[8];
    __shared__ float ssr[8];
    __shared__ unsigned last;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int S = a.S, s = blockIdx.x % S, rbk = blockIdx.x / S;
    const int m = GLU ? 0 : rbk < a.rb[1] ? 0 : rbk < a.rb[2] ? 1 : 2;
    const int lr = rbk - a.rb[m];
    const int set = GLU ? warp >> 2 : 0, mw = GLU ? set : m;
    const int rowsM = a.rows[mw];
    const int r0 = GLU ? lr * 64 + (warp & 3) * 16 + g : lr * 128 + warp * 16 + g;
    const int k0 = s * NC * 64;
    const int nch = min(NC, (a.cols - k0) >> 6);
    const signed char* pa = a.w[mw] + (long long) min(r0, rowsM - 1) * a.cols + k0 + 16 * q;
    const signed char* pb = a.w[mw] + (long long) min(r0 + 8, rowsM - 1) * a.cols + k0 + 16 * q;
    uint4 wa[NC], wb[NC];
#pragma unroll
    for (int j = 0; j < NC; j++)
        if (j < nch) { wa[j] = r_ld16(pa + 64 * j); wb[j] = r_ld16(pb + 64 * j); }
    r_pdl_wait();
    float ss = 0.f;
    float unit0 = m_stage<NC>(a.x, a.cf[GLU ? 0 : m], k0, nch * 64, xq[0], red, ss, a.normed != 0);
    float unit1 = unit0;
    if (GLU) { float dummy = 0.f; unit1 = m_stage<NC>(a.x, a.cf[1], k0, nch * 64, xq[GLU ? 1 : 0], red, dummy, false); }
    if (a.normed) {
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) ssr[warp] = ss;
    }
    __syncthreads();
    int c[4] = {0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < NC; j++)
        if (j < nch) {
            uint4 b = make_uint4(0u, 0u, 0u, 0u);
            if (g < MV_P) b = *reinterpret_cast<const uint4*>(&xq[set][j][g][16 * q]);
            m_mma_s8(c, wa[j].x, wb[j].x, wa[j].y, wb[j].y, b.x, b.y);
            m_mma_s8(c, wa[j].z, wb[j].z, wa[j].w, wb[j].w, b.z, b.w);
        }
    // columns 0..3 of C: the parts' sums; lane q = 0 holds parts 0, 1, lane q = 1 parts 2, 3
    float vg = q == 0 ? (float) c[0] + (float) c[1] * 0.0078125f : (float) c[0] * 6.103515625e-05f + (float) c[1] * 4.76837158203125e-07f;
    float vh = q == 0 ? (float) c[2] + (float) c[3] * 0.0078125f : (float) c[2] * 6.103515625e-05f + (float) c[3] * 4.76837158203125e-07f;
    vg += __shfl_down_sync(0xffffffffu, vg, 1);
    vh += __shfl_down_sync(0xffffffffu, vh, 1);
    const int PR = a.rb[GLU ? 1 : 3] * 128;
    const float unit = set ? unit1 : unit0;
    if (q == 0) {
        float* p = a.part + (long long) s * PR + rbk * 128 + warp * 16 + g;
        p[0] = vg * unit;
        p[8] = vh * unit;
    }
    if (a.normed && threadIdx.x == 0) {
        float t = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) t += ssr[i];
        a.ssp[rbk * S + s] = t;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(&a.cnt[rbk], 1u) == (unsigned) (S - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    // the row block's S partials, summed by all 256 threads at once (a serial loop over S would pay S dependent L2
    // round trips): thread t takes row t % 128 (GLU: rows t % 64 of gate, then up) and slices h, h + 2, ... (h = t / 128),
    // every load issued before the first add; the two halves are added in shared memory (a fixed order).
    __shared__ float half_[128];
    __shared__ float inv_;
    const int t = threadIdx.x, h = t >> 7, tr = t & 127;
    if (t < 32) {   // Σx² of the slices by one warp, a fixed tree
        float u = 0.f;
        if (a.normed)
            for (int i = t; i < S; i += 32) u += __ldcg(a.ssp + rbk * S + i);
        for (int o = 16; o > 0; o >>= 1) u += __shfl_xor_sync(0xffffffffu, u, o);
        if (t == 0) { inv_ = a.normed ? 1.f / sqrtf(u / a.cols + a.eps) : 1.f; a.cnt[rbk] = 0u; }
    }
    float acc = 0.f;
    {
        const float* p = a.part + rbk * 128 + tr;
        for (int b = h; b < S; b += 32) {   // rounds of 16 loads in flight
            float pv[16];
#pragma unroll
            for (int i = 0; i < 16; i++) pv[i] = b + 2 * i < S ? __ldcg(p + (long long) (b + 2 * i) * PR) : 0.f;
#pragma unroll
            for (int i = 0; i < 16; i++) acc += pv[i];
        }
    }
    if (h == 1) half_[tr] = acc;
    __syncthreads();
    if (h == 0) acc += half_[tr];
    const float inv = inv_;
    if (GLU) {
        __syncthreads();   // every h = 0 thread has read its half_ slot
        if (h == 0 && tr >= 64) half_[tr] = acc;   // the up sums
        __syncthreads();
        int r = lr * 64 + tr;
        if (h == 0 && tr < 64 && r < a.rows[0]) {
            float G = acc * inv, U = half_[tr + 64] * inv;
            if (a.rs[0] != nullptr) G *= a.rs[0][r];
            if (a.rs[1] != nullptr) U *= a.rs[1][r];
            a.y[0][r] = r_silu(G) * U;
        }
    } else {
        int r = lr * 128 + tr;
        if (h == 0 && r < a.rows[m]) {
            acc *= inv;
            if (a.rs[m] != nullptr) acc *= a.rs[m][r];
            if (a.bias[m] != nullptr) acc += a.bias[m][r];
            a.y[m][r] = a.accumulate ? a.y[m][r] + acc : acc;
        }
    }
}


// ---- candidate 2: streaming. A block takes 16 rows (GLU: 16 of gate, the same 16 of up) over the whole width,
// in tiles of 4096 columns (x' parts staged per tile, one scale per tile); its warps split each tile's 64-column
// chunks (warp k of WS takes chunks k, k + WS, ...: the block reads WS·64 contiguous bytes of a row at a time), U
// chunks' loads per batch, the next batch issued before the current one is used. No split-K: the warps' sums
// meet in shared memory. rb[] counts 16-row blocks.
template <int U, bool GLU>
__global__ void __launch_bounds__(256) c_mvs(MvArgs a) {
    r_pdl_trigger();
    constexpr int WS = GLU ? 4 : 8;
    __shared__ __align__(16) signed char xq[GLU ? 2 : 1][64][MV_P][64];
    __shared__ float red[8];
    __shared__ float ssr[8];
    __shared__ float sums[8][16];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int rbk = blockIdx.x;
    const int m = GLU ? 0 : rbk < a.rb[1] ? 0 : rbk < a.rb[2] ? 1 : 2;
    const int lr = rbk - a.rb[m];
    const int set = GLU ? warp >> 2 : 0, wk = GLU ? warp & 3 : warp, mw = GLU ? set : m;
    const int rowsM = a.rows[mw];
    const int r0 = lr * 16 + g;
    const signed char* pa = a.w[mw] + (long long) min(r0, rowsM - 1) * a.cols + 16 * q;
    const signed char* pb = a.w[mw] + (long long) min(r0 + 8, rowsM - 1) * a.cols + 16 * q;
    float vg = 0.f, vh = 0.f, ss = 0.f;
    for (int k0 = 0; k0 < a.cols; k0 += 4096) {
        const int nch = min(4096, a.cols - k0) >> 6;
        const int ni = nch > wk ? (nch - wk + WS - 1) / WS : 0;   // this warp's chunks in the tile
        uint4 wa[U], wb[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u < ni) { int j = wk + WS * u; wa[u] = r_ld16(pa + k0 + 64 * j); wb[u] = r_ld16(pb + k0 + 64 * j); }
        if (k0 == 0) r_pdl_wait();
        float unit0 = m_stage<64>(a.x, a.cf[GLU ? 0 : m], k0, nch * 64, xq[0], red, ss, a.normed != 0);
        float unit1 = unit0;
        if (GLU) { float dummy = 0.f; unit1 = m_stage<64>(a.x, a.cf[1], k0, nch * 64, xq[GLU ? 1 : 0], red, dummy, false); }
        __syncthreads();
        int c[4] = {0, 0, 0, 0};
        for (int i0 = 0; i0 < ni; i0 += U) {
            uint4 na[U], nb[U];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i0 + U + u < ni) { int j = wk + WS * (i0 + U + u); na[u] = r_ld16(pa + k0 + 64 * j); nb[u] = r_ld16(pb + k0 + 64 * j); }
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i0 + u < ni) {
                    int j = wk + WS * (i0 + u);
                    uint4 b = make_uint4(0u, 0u, 0u, 0u);
                    if (g < MV_P) b = *reinterpret_cast<const uint4*>(&xq[set][j][g][16 * q]);
                    m_mma_s8(c, wa[u].x, wb[u].x, wa[u].y, wb[u].y, b.x, b.y);
                    m_mma_s8(c, wa[u].z, wb[u].z, wa[u].w, wb[u].w, b.z, b.w);
                }
#pragma unroll
            for (int u = 0; u < U; u++) { wa[u] = na[u]; wb[u] = nb[u]; }
        }
        float tg = q == 0 ? (float) c[0] + (float) c[1] * 0.0078125f : (float) c[0] * 6.103515625e-05f + (float) c[1] * 4.76837158203125e-07f;
        float th = q == 0 ? (float) c[2] + (float) c[3] * 0.0078125f : (float) c[2] * 6.103515625e-05f + (float) c[3] * 4.76837158203125e-07f;
        tg += __shfl_down_sync(0xffffffffu, tg, 1);
        th += __shfl_down_sync(0xffffffffu, th, 1);
        const float unit = set ? unit1 : unit0;
        vg += tg * unit;
        vh += th * unit;
        __syncthreads();   // every warp is done with this tile's xq
    }
    if (q == 0) { sums[warp][g] = vg; sums[warp][g + 8] = vh; }
    if (a.normed) {
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) ssr[warp] = ss;
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < 16) {
        float inv = 1.f;
        if (a.normed) {
            float u = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++) u += ssr[i];
            inv = 1.f / sqrtf(u / a.cols + a.eps);
        }
        float d0 = 0.f, d1 = 0.f;
#pragma unroll
        for (int i = 0; i < WS; i++) { d0 += sums[i][t]; if (GLU) d1 += sums[WS + i][t]; }
        int r = lr * 16 + t;
        if (GLU) {
            if (r < a.rows[0]) {
                float G = d0 * inv, Uu = d1 * inv;
                if (a.rs[0] != nullptr) G *= a.rs[0][r];
                if (a.rs[1] != nullptr) Uu *= a.rs[1][r];
                a.y[0][r] = r_silu(G) * Uu;
            }
        } else if (r < a.rows[m]) {
            float acc = d0 * inv;
            if (a.rs[m] != nullptr) acc *= a.rs[m][r];
            if (a.bias[m] != nullptr) acc += a.bias[m][r];
            a.y[m][r] = a.accumulate ? a.y[m][r] + acc : acc;
        }
    }
}

// ---- host ----

int main(int argc, char** argv) {
    ProductBench B(argc > 1 ? atoi(argv[1]) : 10);
    // split-K scratch: partials for up to 64 slices of 2·I rows, ss partials, counters
    float *part, *ssp; unsigned* cnt;
    CK(cudaMalloc(&part, 4L * 64 * 2 * I)); CK(cudaMalloc(&ssp, 4L * 64 * 2 * I / 64));
    CK(cudaMalloc(&cnt, 4L * 4096)); CK(cudaMemset(cnt, 0, 4L * 4096));
    cudaStream_t st = B.st;
    // NC < 100: split-K c_mv8<NC> (128 rows per block, GLU 64 of gate and of up); 100 + U: streaming c_mvs<U> (16 rows,
    // GLU 16 of each)
    auto cand = [&](int kd, int l, bool pdl, int NC) {
        MvArgs A;
        static_cast<KindArgs&>(A) = NC > 100 ? B.args(kd, l, 16, 16) : B.args(kd, l, 128, 64);
        A.part = part; A.ssp = ssp; A.cnt = cnt;
        A.S = NC > 100 ? 1 : (A.cols + 64 * NC - 1) / (64 * NC);
        dim3 blocks(A.rb[3] * A.S);
        if (NC == 102) { if (kd == 2) launchp(pdl, c_mvs<2, true>, blocks, 256, st, A); else launchp(pdl, c_mvs<2, false>, blocks, 256, st, A); }
        else if (NC == 104) { if (kd == 2) launchp(pdl, c_mvs<4, true>, blocks, 256, st, A); else launchp(pdl, c_mvs<4, false>, blocks, 256, st, A); }
        else if (NC == 108) { if (kd == 2) launchp(pdl, c_mvs<8, true>, blocks, 256, st, A); else launchp(pdl, c_mvs<8, false>, blocks, 256, st, A); }
        else if (NC == 2) { if (kd == 2) launchp(pdl, c_mv8<2, true>, blocks, 256, st, A); else launchp(pdl, c_mv8<2, false>, blocks, 256, st, A); }
        else if (NC == 4) { if (kd == 2) launchp(pdl, c_mv8<4, true>, blocks, 256, st, A); else launchp(pdl, c_mv8<4, false>, blocks, 256, st, A); }
        else { if (kd == 2) launchp(pdl, c_mv8<8, true>, blocks, 256, st, A); else launchp(pdl, c_mv8<8, false>, blocks, 256, st, A); }
    };
    const int NCs[4] = {4, 102, 104, 108};
    bool ok[4];
    char names[4][32];
    for (int ni = 0; ni < 4; ni++) {
        snprintf(names[ni], sizeof names[ni], "mv8 NC%d", NCs[ni]);
        ok[ni] = true;
        for (int kd = 0; kd < 4; kd++) ok[ni] &= B.check(kd, 1.f, names[ni], [&](bool pdl) { cand(kd, 0, pdl, NCs[ni]); });
    }
    for (int round = 0; round < 2; round++) {
        B.time_shipped(round);
        for (int ni = 0; ni < 4; ni++)
            if (ok[ni]) B.time_chain(names[ni], round, [&](int kd, int l) { cand(kd, l, true, NCs[ni]); });
    }
    return 0;
}
