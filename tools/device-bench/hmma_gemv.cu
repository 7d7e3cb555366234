// Tensor-core f16 decode products, a candidate against resident.cu's SIMT int8 ones (llama-8b q8_2f shapes, 32
// layers of distinct weights, no Java needed). Build here: NAMES=hmma_gemv tools/device-bench/build-gemv-bench.sh;
// run on the device: .gpu/b8/hmma_gemv [reps]. One JSON line per check and timing.
//
// Why: the SIMT int8 products spend ~6 instructions per weight and sit near the issue limit (ncu: issue slots 59%
// busy at 59% of DRAM peak). mma_gemv.cu's int8 mma lost to its x' staging (a block-wide max, 4 int8 parts per
// column, staged for every 16 rows). Here int8 weights become f16 pairs by one prmt + one sub.f16x2 per 2 weights
// (exact: 1024 + u, minus 1152) and go into mma.sync.m16n8k16 (f16 in, f32 accumulation) as A; x' = cf ⊙ x goes
// in as two f16 parts of x'·2^k in B's first two columns (hi = f16(y), lo = f16((y − hi)·2^11): 22 bits, the
// scale a power of two per warp and tile of its columns, so no block barrier before the products), staged by each
// warp for its own columns. ~1.5 instructions per weight instead of ~6.
//
// Layout: a block (WPB warps) owns 16·MT rows (GLU: the same rows of gate and of up) over the whole width; warp w
// takes the 64-column chunks j ≡ w (mod WPB). Lane (g, q) loads 16 bytes of rows g and g + 8 (of each m-tile) at
// columns 64j + 16q: the mma's k order is permuted so that its A fragments of 4 k16 steps are exactly those bytes
// (step s: bytes 4s..4s+3, a0 = bytes 0-1 → logical k 2q, 2q+1; a2 = bytes 2-3 → 2q+8, 2q+9) and the B fragments
// the x' parts at the same columns (lane g < 2: part g, 32 bytes of shared memory per chunk; lanes g ≥ 2 zeros).
// The warps' row sums meet in shared memory at the end (one barrier); Σx² for a folded RMSNorm comes from staging.
#include "llama8b_bench.cuh"

struct HArgs {
    const signed char* w[3];
    const float* rs[3];
    const float* cf[3];
    const float* bias[3];
    float* y[3];
    int rows[3];
    int rb[4];         // matrix m owns row blocks [rb[m], rb[m + 1]) (GLU: rb[1] = all)
    const float* x;
    int cols, normed, accumulate;
    float eps;
};

#define H_TC 8   // chunks (of 64 columns) per warp and tile: one scale each

// 4 int8 (one word) as two f16x2: bytes 0,1 and bytes 2,3. Exact: 1024 + (w + 128), minus 1152.
__device__ __forceinline__ void h_i8x4(unsigned w, unsigned& lo, unsigned& hi) {
    unsigned u = w ^ 0x80808080u;
    unsigned a = __byte_perm(u, 0x64646464u, 0x4140), b = __byte_perm(u, 0x64646464u, 0x4342);
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(a), "r"(0x64806480u));
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(b), "r"(0x64806480u));
}

// One chunk of one matrix and m-tile: 4 k16 steps.
__device__ __forceinline__ void h_chunk(float (&c)[4], uint4 wa, uint4 wb, const uint4 (&bx)[2]) {
    const unsigned A[4] = {wa.x, wa.y, wa.z, wa.w}, Bv[4] = {wb.x, wb.y, wb.z, wb.w};
    const unsigned X[8] = {bx[0].x, bx[0].y, bx[0].z, bx[0].w, bx[1].x, bx[1].y, bx[1].z, bx[1].w};
#pragma unroll
    for (int s = 0; s < 4; s++) {
        unsigned a[4];
        h_i8x4(A[s], a[0], a[2]);
        h_i8x4(Bv[s], a[1], a[3]);
        r_mma16816(c, a, X[2 * s], X[2 * s + 1]);
    }
}

// The end of both kernels: the warps' row sums (lanes q = 0 hold rows g and g + 8 of each m-tile) and Σx² meet in
// shared memory, then thread r < 16·MT applies 1/rms, the row scales, bias, the residual add or SwiGLU.
template <int NM, int MT, int WPB>
__device__ __forceinline__ void h_finish(const HArgs& a, const float (&tot)[NM][MT][2], float ss, int m0, int lr) {
    constexpr int RB = 16 * MT;
    __shared__ float sums[WPB][NM][RB];
    __shared__ float ssw[WPB];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3, cols = a.cols;
    if (q == 0)
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int t = 0; t < MT; t++) { sums[warp][m][16 * t + g] = tot[m][t][0]; sums[warp][m][16 * t + g + 8] = tot[m][t][1]; }
    if (a.normed) {
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) ssw[warp] = ss;
    }
    __syncthreads();
    const int tr = threadIdx.x;
    if (tr < RB) {
        float inv = 1.f;
        if (a.normed) {
            float u = 0.f;
#pragma unroll
            for (int i = 0; i < WPB; i++) u += ssw[i];
            inv = 1.f / sqrtf(u / cols + a.eps);
        }
        float d[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) {
            d[m] = 0.f;
#pragma unroll
            for (int i = 0; i < WPB; i++) d[m] += sums[i][m][tr];
        }
        int r = lr * RB + tr;
        if (NM == 2) {
            if (r < a.rows[0]) {
                float G = d[0] * inv, Uu = d[NM - 1] * inv;
                if (a.rs[0] != nullptr) G *= a.rs[0][r];
                if (a.rs[1] != nullptr) Uu *= a.rs[1][r];
                a.y[0][r] = r_silu(G) * Uu;
            }
        } else if (r < a.rows[m0]) {
            float acc = d[0] * inv;
            if (a.rs[m0] != nullptr) acc *= a.rs[m0][r];
            if (a.bias[m0] != nullptr) acc += a.bias[m0][r];
            a.y[m0][r] = a.accumulate ? a.y[m0][r] + acc : acc;
        }
    }
}

template <int NM, int MT, int U, int WPB, int MINB>
__global__ void __launch_bounds__(WPB * 32, MINB) h_mv(HArgs a) {
    r_pdl_trigger();
    constexpr int RB = 16 * MT;
    __shared__ __align__(16) r_u16 xs[WPB][NM][2][H_TC * 64];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int rbk = blockIdx.x;
    const int m0 = NM == 2 ? 0 : rbk < a.rb[1] ? 0 : rbk < a.rb[2] ? 1 : 2;
    const int lr = rbk - a.rb[m0];
    const int cols = a.cols, nch = cols >> 6;
    const int ni = nch > warp ? (nch - warp + WPB - 1) / WPB : 0;
    const signed char* p[NM][MT][2];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int r = min(lr * RB + 16 * t + g + 8 * h, a.rows[m0 + m] - 1);
                p[m][t][h] = a.w[m0 + m] + (long long) r * cols + 64 * warp + 16 * q;
            }
    uint4 wv[NM][MT][2][U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < ni)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int t = 0; t < MT; t++)
#pragma unroll
                    for (int h = 0; h < 2; h++) wv[m][t][h][u] = r_ld16(p[m][t][h] + 64LL * WPB * u);
    r_pdl_wait();
    float tot[NM][MT][2];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < MT; t++) tot[m][t][0] = tot[m][t][1] = 0.f;
    float ss = 0.f;
    for (int i0 = 0; i0 < ni; i0 += H_TC) {
        // stage this warp's tile of chunks i0 .. i0 + H_TC − 1: lane l holds columns 2l, 2l + 1 of each
        const int nt = min(H_TC, ni - i0);
        float unit[NM];
        {
            float2 xv[H_TC];
#pragma unroll
            for (int i = 0; i < H_TC; i++)
                if (i < nt) {
                    xv[i] = *reinterpret_cast<const float2*>(a.x + 64 * (warp + WPB * (i0 + i)) + 2 * lane);
                    ss += xv[i].x * xv[i].x + xv[i].y * xv[i].y;
                }
#pragma unroll
            for (int m = 0; m < NM; m++) {
                float2 v[H_TC];
                float mx = 0.f;
#pragma unroll
                for (int i = 0; i < H_TC; i++) {
                    v[i] = make_float2(0.f, 0.f);
                    if (i < nt) {
                        float2 f = *reinterpret_cast<const float2*>(a.cf[m0 + m] + 64 * (warp + WPB * (i0 + i)) + 2 * lane);
                        v[i] = make_float2(xv[i].x * f.x, xv[i].y * f.y);
                        mx = fmaxf(mx, fmaxf(fabsf(v[i].x), fabsf(v[i].y)));
                    }
                }
                for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                // mx ∈ [2^E, 2^(E+1)): y = x'·2^(14 − E) keeps |y| < 2^15 (no f16 overflow, lo below 2^14)
                int E = (int) ((__float_as_uint(mx) >> 23) & 0xff) - 127;
                E = max(E, -100);
                float up = __uint_as_float((unsigned) (127 + 14 - E) << 23);
                unit[m] = __uint_as_float((unsigned) (127 - 14 + E) << 23);
                if (!(mx <= 3.402823466e38f)) unit[m] = __int_as_float(0x7fc00000);   // inf or NaN in x'
#pragma unroll
                for (int i = 0; i < H_TC; i++)
                    if (i < nt) {
                        float y0 = v[i].x * up, y1 = v[i].y * up;
                        unsigned hi = r_f16x2(y0, y1);
                        float h0 = r_f16((r_u16) (hi & 0xffff)), h1 = r_f16((r_u16) (hi >> 16));
                        unsigned lo = r_f16x2((y0 - h0) * 2048.f, (y1 - h1) * 2048.f);
                        *reinterpret_cast<unsigned*>(&xs[warp][m][0][i * 64 + 2 * lane]) = hi;
                        *reinterpret_cast<unsigned*>(&xs[warp][m][1][i * 64 + 2 * lane]) = lo;
                    }
            }
        }
        __syncwarp();
        float c[NM][MT][4];
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int t = 0; t < MT; t++) c[m][t][0] = c[m][t][1] = c[m][t][2] = c[m][t][3] = 0.f;
        for (int i = 0; i < nt; i += U) {
            // the batch after this one (it may lie in the next tile), issued before this one is used
            uint4 nv[NM][MT][2][U];
            const int ib = i0 + i + U;
#pragma unroll
            for (int u = 0; u < U; u++)
                if (ib + u < ni)
#pragma unroll
                    for (int m = 0; m < NM; m++)
#pragma unroll
                        for (int t = 0; t < MT; t++)
#pragma unroll
                            for (int h = 0; h < 2; h++) nv[m][t][h][u] = r_ld16(p[m][t][h] + 64LL * WPB * (ib + u));
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i + u < nt) {
#pragma unroll
                    for (int m = 0; m < NM; m++) {
                        uint4 bx[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
                        if (g < 2) {
                            const uint4* s = reinterpret_cast<const uint4*>(&xs[warp][m][g][(i + u) * 64 + 16 * q]);
                            bx[0] = s[0]; bx[1] = s[1];
                        }
#pragma unroll
                        for (int t = 0; t < MT; t++) h_chunk(c[m][t], wv[m][t][0][u], wv[m][t][1][u], bx);
                    }
                }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int t = 0; t < MT; t++) { wv[m][t][0][u] = nv[m][t][0][u]; wv[m][t][1][u] = nv[m][t][1][u]; }
        }
        // C columns 0 (hi) and 1 (lo) live in lanes q = 0: rows g (c[0], c[1]) and g + 8 (c[2], c[3])
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int t = 0; t < MT; t++) {
                tot[m][t][0] += (c[m][t][0] + c[m][t][1] * 4.8828125e-4f) * unit[m];
                tot[m][t][1] += (c[m][t][2] + c[m][t][3] * 4.8828125e-4f) * unit[m];
            }
        __syncwarp();   // xs is rewritten by the next tile
    }
    h_finish<NM, MT, WPB>(a, tot, ss, m0, lr);
}


// ---- candidate 2: the same products with the weights read 4 rows × 128 contiguous bytes per load instruction
// (resident.cu's DRAM pattern; hmma's 8 rows × 64 bytes read 15-25% slower in pattern_bench.cu), through shared
// memory into the A fragments by ldmatrix. A warp's chunk is 16 rows × 128 columns (per matrix and m-tile): lane l
// loads 16 bytes of row 4k + l/8 at byte 16(l%8) (k < 4), stores them to its warp's tile (rows 144 bytes apart:
// ldmatrix conflict-free), and ldmatrix.x4 at byte 32kk gives lane (g, q) the words (row g, 32kk + 4q),
// (row g + 8, same), (row g, 32kk + 16 + 4q), (row g + 8, same): the A fragments of k16 steps 2kk and 2kk + 1 whose
// physical columns are 16s + 4q + e. x' parts are staged per warp and tile in that order: column c of a chunk at
// f16 index ((c / 4) % 4)·32 + (c / 16)·4 + c % 4, so lane (n < 2, q) reads part n's 8 steps as 64 contiguous bytes.
#define L_TC 4   // 128-column chunks per warp and x' tile

__device__ __forceinline__ void l_ldsm4(unsigned (&r)[4], const void* smem) {
    unsigned a = (unsigned) __cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

template <int NM, int MT, int U, int WPB, int MINB>
__global__ void __launch_bounds__(WPB * 32, MINB) h_mvl(HArgs a) {
    r_pdl_trigger();
    constexpr int RB = 16 * MT;
    __shared__ __align__(16) unsigned char wt[WPB][NM][MT][16 * 144];
    __shared__ __align__(16) r_u16 xs[WPB][NM][L_TC][2][128];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int rbk = blockIdx.x;
    const int m0 = NM == 2 ? 0 : rbk < a.rb[1] ? 0 : rbk < a.rb[2] ? 1 : 2;
    const int lr = rbk - a.rb[m0];
    const int cols = a.cols, nch = cols >> 7;
    const int ni = nch > warp ? (nch - warp + WPB - 1) / WPB : 0;
    const signed char* p[NM][MT][4];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < MT; t++)
#pragma unroll
            for (int k = 0; k < 4; k++) {
                int r = min(lr * RB + 16 * t + 4 * k + (lane >> 3), a.rows[m0 + m] - 1);
                p[m][t][k] = a.w[m0 + m] + (long long) r * cols + 128 * warp + 16 * (lane & 7);
            }
    uint4 wv[NM][MT][4][U];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (u < ni)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int t = 0; t < MT; t++)
#pragma unroll
                    for (int k = 0; k < 4; k++) wv[m][t][k][u] = r_ld16(p[m][t][k] + 128LL * WPB * u);
    r_pdl_wait();
    float tot[NM][MT][2];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int t = 0; t < MT; t++) tot[m][t][0] = tot[m][t][1] = 0.f;
    float ss = 0.f;
    const int sto = ((lane & 3) * 8 + (lane >> 2)) * 4;   // where this lane's 4 columns go in a staged chunk
    for (int i0 = 0; i0 < ni; i0 += L_TC) {
        const int nt = min(L_TC, ni - i0);
        float unit[NM];
        {
            float4 xv[L_TC];
#pragma unroll
            for (int i = 0; i < L_TC; i++)
                if (i < nt) {
                    xv[i] = *reinterpret_cast<const float4*>(a.x + 128 * (warp + WPB * (i0 + i)) + 4 * lane);
                    ss += xv[i].x * xv[i].x + xv[i].y * xv[i].y + xv[i].z * xv[i].z + xv[i].w * xv[i].w;
                }
#pragma unroll
            for (int m = 0; m < NM; m++) {
                float4 v[L_TC];
                float mx = 0.f;
#pragma unroll
                for (int i = 0; i < L_TC; i++) {
                    v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
                    if (i < nt) {
                        float4 f = *reinterpret_cast<const float4*>(a.cf[m0 + m] + 128 * (warp + WPB * (i0 + i)) + 4 * lane);
                        v[i] = make_float4(xv[i].x * f.x, xv[i].y * f.y, xv[i].z * f.z, xv[i].w * f.w);
                        mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
                    }
                }
                for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                int E = (int) ((__float_as_uint(mx) >> 23) & 0xff) - 127;
                E = max(E, -100);
                float up = __uint_as_float((unsigned) (127 + 14 - E) << 23);
                unit[m] = __uint_as_float((unsigned) (127 - 14 + E) << 23);
                if (!(mx <= 3.402823466e38f)) unit[m] = __int_as_float(0x7fc00000);
#pragma unroll
                for (int i = 0; i < L_TC; i++)
                    if (i < nt) {
                        float y0 = v[i].x * up, y1 = v[i].y * up, y2 = v[i].z * up, y3 = v[i].w * up;
                        unsigned h01 = r_f16x2(y0, y1), h23 = r_f16x2(y2, y3);
                        float f0 = r_f16((r_u16) (h01 & 0xffff)), f1 = r_f16((r_u16) (h01 >> 16));
                        float f2 = r_f16((r_u16) (h23 & 0xffff)), f3 = r_f16((r_u16) (h23 >> 16));
                        unsigned l01 = r_f16x2((y0 - f0) * 2048.f, (y1 - f1) * 2048.f), l23 = r_f16x2((y2 - f2) * 2048.f, (y3 - f3) * 2048.f);
                        *reinterpret_cast<uint2*>(&xs[warp][m][i][0][sto]) = make_uint2(h01, h23);
                        *reinterpret_cast<uint2*>(&xs[warp][m][i][1][sto]) = make_uint2(l01, l23);
                    }
            }
        }
        __syncwarp();
        float c[NM][MT][4];
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int t = 0; t < MT; t++) c[m][t][0] = c[m][t][1] = c[m][t][2] = c[m][t][3] = 0.f;
        for (int i = 0; i < nt; i += U) {
            uint4 nv[NM][MT][4][U];
            const int ib = i0 + i + U;
#pragma unroll
            for (int u = 0; u < U; u++)
                if (ib + u < ni)
#pragma unroll
                    for (int m = 0; m < NM; m++)
#pragma unroll
                        for (int t = 0; t < MT; t++)
#pragma unroll
                            for (int k = 0; k < 4; k++) nv[m][t][k][u] = r_ld16(p[m][t][k] + 128LL * WPB * (ib + u));
#pragma unroll
            for (int u = 0; u < U; u++)
                if (i + u < nt) {
#pragma unroll
                    for (int m = 0; m < NM; m++) {
                        unsigned X[16];
#pragma unroll
                        for (int j = 0; j < 16; j++) X[j] = 0u;
                        if (g < 2) {
                            const uint4* s = reinterpret_cast<const uint4*>(&xs[warp][m][i + u][g][32 * q]);
#pragma unroll
                            for (int j = 0; j < 4; j++) { uint4 b = s[j]; X[4 * j] = b.x; X[4 * j + 1] = b.y; X[4 * j + 2] = b.z; X[4 * j + 3] = b.w; }
                        }
#pragma unroll
                        for (int t = 0; t < MT; t++) {
                            unsigned char* tile = wt[warp][m][t];
#pragma unroll
                            for (int k = 0; k < 4; k++)
                                *reinterpret_cast<uint4*>(tile + (4 * k + (lane >> 3)) * 144 + 16 * (lane & 7)) = wv[m][t][k][u];
                            __syncwarp();
#pragma unroll
                            for (int kk = 0; kk < 4; kk++) {
                                unsigned r[4];
                                l_ldsm4(r, tile + ((lane & 7) + 8 * ((lane >> 3) & 1)) * 144 + 32 * kk + 16 * (lane >> 4));
                                unsigned A0[4], A1[4];
                                h_i8x4(r[0], A0[0], A0[2]);
                                h_i8x4(r[1], A0[1], A0[3]);
                                h_i8x4(r[2], A1[0], A1[2]);
                                h_i8x4(r[3], A1[1], A1[3]);
                                r_mma16816(c[m][t], A0, X[4 * kk], X[4 * kk + 1]);
                                r_mma16816(c[m][t], A1, X[4 * kk + 2], X[4 * kk + 3]);
                            }
                            __syncwarp();   // the tile is rewritten by the next chunk
                        }
                    }
                }
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int t = 0; t < MT; t++)
#pragma unroll
                        for (int k = 0; k < 4; k++) wv[m][t][k][u] = nv[m][t][k][u];
        }
#pragma unroll
        for (int m = 0; m < NM; m++)
#pragma unroll
            for (int t = 0; t < MT; t++) {
                tot[m][t][0] += (c[m][t][0] + c[m][t][1] * 4.8828125e-4f) * unit[m];
                tot[m][t][1] += (c[m][t][2] + c[m][t][3] * 4.8828125e-4f) * unit[m];
            }
        __syncwarp();
    }
    h_finish<NM, MT, WPB>(a, tot, ss, m0, lr);
}

// ---- host ----

struct Variant { const char* name; int mt; int mtGlu; };   // m-tiles per warp: single products, gate+up
static const Variant VARS[] = {
    {"h16 MT1 U4/2 W8 2/SM", 1, 1},
    {"h16 MT2 U2/1 W8 2/SM", 2, 2},
    {"ldsm MT1 U2/1 W8/4 2,4/SM", 1, 1},
    {"ldsm MT1 U1/1 W8/4 3,4/SM", 1, 1},
    {"ldsm MT2/1 U1/1 W4 4/SM", 2, 1},
    {"ldsm MT1 U2/1 W4 4/SM", 1, 1},
};
static const int NV = 6;

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    signed char* all; size_t layerBytes; long long wbytes;
    std::vector<Layer> Ls = make_layers(&all, &layerBytes, &wbytes);
    const size_t* sz = SZ;
    CK(cudaDeviceSynchronize());
    float* x = fvec(H, -1.f, 1.f, 5);
    std::vector<float> xinit(H);
    CK(cudaMemcpy(xinit.data(), x, 4L * H, cudaMemcpyDeviceToHost));
    float *q, *k, *v, *g;
    CK(cudaMalloc(&q, 4L * H)); CK(cudaMalloc(&k, 4L * KV)); CK(cudaMalloc(&v, 4L * KV)); CK(cudaMalloc(&g, 4L * I));
    float* att = fvec(H, -1.f, 1.f, 6);
    float* gfix = fvec(I, -0.3f, 0.3f, 7);
    std::vector<float> attinit(H), ginit(I);
    CK(cudaMemcpy(attinit.data(), att, 4L * H, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ginit.data(), gfix, 4L * I, cudaMemcpyDeviceToHost));
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    const float eps = 1e-5f;
    printf("{\"gpu\":\"%s\",\"sms\":%d,\"weight_bytes\":%lld}\n", prop.name, prop.multiProcessorCount, wbytes);
    for (int vi = 0; vi < NV; vi++) {
        int nb = 0;
        cudaFuncAttributes fa;
        auto attr = [&](auto kern, int threads, const char* kind) {
            CK(cudaFuncGetAttributes(&fa, kern));
            CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, threads, 0));
            printf("{\"variant\":\"%s\",\"kind\":\"%s\",\"regs\":%d,\"local\":%zu,\"smem\":%zu,\"blocks_per_sm\":%d}\n", VARS[vi].name, kind, fa.numRegs, fa.localSizeBytes, fa.sharedSizeBytes, nb);
        };
        if (vi == 0) { attr(h_mv<1, 1, 4, 8, 2>, 256, "single"); attr(h_mv<2, 1, 2, 8, 2>, 256, "glu"); }
        if (vi == 1) { attr(h_mv<1, 2, 2, 8, 2>, 256, "single"); attr(h_mv<2, 2, 1, 8, 2>, 256, "glu"); }
        if (vi == 2) { attr(h_mvl<1, 1, 2, 8, 2>, 256, "single"); attr(h_mvl<2, 1, 1, 4, 4>, 128, "glu"); }
        if (vi == 3) { attr(h_mvl<1, 1, 1, 8, 3>, 256, "single"); attr(h_mvl<2, 1, 1, 4, 4>, 128, "glu"); }
        if (vi == 4) { attr(h_mvl<1, 2, 1, 4, 4>, 128, "single"); attr(h_mvl<2, 1, 1, 4, 4>, 128, "glu"); }
        if (vi == 5) { attr(h_mvl<1, 1, 2, 4, 4>, 128, "single"); attr(h_mvl<2, 1, 1, 4, 4>, 128, "glu"); }
    }
    fflush(stdout);

    auto shipped = [&](int kd, int l, bool pdl) { launch_shipped(kd, Ls[l], pdl, st, x, q, k, v, g, att, eps); };
    auto args = [&](int kd, int l, int RB) {
        Layer& w = Ls[l];
        HArgs A = {};
        A.eps = eps;
        if (kd == 0) {
            signed char* ws[3] = {w.q, w.k, w.v}; float* ys[3] = {q, k, v}; int rr[3] = {H, KV, KV};
            A.rb[0] = 0;
            for (int m = 0; m < 3; m++) {
                A.w[m] = ws[m]; A.rs[m] = w.rs[m]; A.cf[m] = w.cf[m]; A.y[m] = ys[m]; A.rows[m] = rr[m];
                A.rb[m + 1] = A.rb[m] + (rr[m] + RB - 1) / RB;
            }
            A.x = x; A.cols = H; A.normed = 1;
        } else if (kd == 2) {
            A.w[0] = w.g; A.rs[0] = w.rs[4]; A.cf[0] = w.cf[4]; A.w[1] = w.u; A.rs[1] = w.rs[5]; A.cf[1] = w.cf[5];
            A.y[0] = g; A.rows[0] = A.rows[1] = I; A.rb[0] = 0; A.rb[1] = A.rb[2] = A.rb[3] = (I + RB - 1) / RB;
            A.x = x; A.cols = H; A.normed = 1;
        } else {
            int j = kd == 1 ? 3 : 6;
            A.w[0] = kd == 1 ? w.o : w.d; A.rs[0] = w.rs[j]; A.cf[0] = w.cf[j]; A.y[0] = x; A.rows[0] = H;
            A.rb[0] = 0; A.rb[1] = A.rb[2] = A.rb[3] = H / RB;
            A.x = kd == 1 ? att : g; A.cols = kd == 1 ? H : I; A.accumulate = 1;
        }
        return A;
    };
    auto cand = [&](int kd, int l, bool pdl, int vi) {
        HArgs A = args(kd, l, 16 * (kd == 2 ? VARS[vi].mtGlu : VARS[vi].mt));
        dim3 grid(A.rb[3]);
        bool glu = kd == 2;
        if (vi == 0) { if (glu) launchp(pdl, h_mv<2, 1, 2, 8, 2>, grid, 256, st, A); else launchp(pdl, h_mv<1, 1, 4, 8, 2>, grid, 256, st, A); }
        if (vi == 1) { if (glu) launchp(pdl, h_mv<2, 2, 1, 8, 2>, grid, 256, st, A); else launchp(pdl, h_mv<1, 2, 2, 8, 2>, grid, 256, st, A); }
        if (vi == 2) { if (glu) launchp(pdl, h_mvl<2, 1, 1, 4, 4>, grid, 128, st, A); else launchp(pdl, h_mvl<1, 1, 2, 8, 2>, grid, 256, st, A); }
        if (vi == 3) { if (glu) launchp(pdl, h_mvl<2, 1, 1, 4, 4>, grid, 128, st, A); else launchp(pdl, h_mvl<1, 1, 1, 8, 3>, grid, 256, st, A); }
        if (vi == 4) { if (glu) launchp(pdl, h_mvl<2, 1, 1, 4, 4>, grid, 128, st, A); else launchp(pdl, h_mvl<1, 2, 1, 4, 4>, grid, 128, st, A); }
        if (vi == 5) { if (glu) launchp(pdl, h_mvl<2, 1, 1, 4, 4>, grid, 128, st, A); else launchp(pdl, h_mvl<1, 1, 2, 4, 4>, grid, 128, st, A); }
    };
    auto timeit = [&](auto&& body, bool graph) { return best_us(body, graph, st, e0, e1, reps); };
    const char* kinds[4] = {"qkv", "o", "glu", "down"};
    long long kindBytes[4] = {(long long) (sz[0] + sz[1] + sz[2]) * L, (long long) sz[3] * L, (long long) (sz[4] + sz[5]) * L, (long long) sz[6] * L};
    // checks: every kind on layer 0 against the shipped kernel, relative to max |y|; inputs also far from 1
    bool ok[NV]; for (int i = 0; i < NV; i++) ok[i] = true;
    const float scales[3] = {1.f, 3.0e-4f, 700.f};
    for (int vi = 0; vi < NV; vi++)
        for (int sc = 0; sc < 3; sc++)
            for (int kd = 0; kd < 4; kd++) {
                float* outs[3]; int outn[3];
                kind_outputs(kd, q, k, v, g, x, outs, outn);
                std::vector<float> xs(xinit), gs(ginit), attv(attinit);
                for (auto& e : xs) e *= scales[sc];
                for (auto& e : gs) e *= scales[sc];
                for (auto& e : attv) e *= scales[sc];
                CK(cudaMemcpy(att, attv.data(), 4L * H, cudaMemcpyHostToDevice));
                std::vector<float> ref, got;
                for (int pass = 0; pass < 3; pass++) {
                    CK(cudaMemcpyAsync(x, xs.data(), 4L * H, cudaMemcpyHostToDevice, st));
                    if (kd == 3) CK(cudaMemcpyAsync(g, gs.data(), 4L * I, cudaMemcpyHostToDevice, st));
                    for (int o = 0; o < 3; o++) if (outs[o] && kd != 1 && kd != 3) CK(cudaMemsetAsync(outs[o], 0xff, 4L * outn[o], st));
                    if (pass == 0) shipped(kd, 0, false); else cand(kd, 0, pass == 2, vi);
                    CK(cudaStreamSynchronize(st));
                    CK(cudaGetLastError());
                    std::vector<float> cur;
                    for (int o = 0; o < 3; o++) if (outs[o]) { size_t a0 = cur.size(); cur.resize(a0 + outn[o]); CK(cudaMemcpy(cur.data() + a0, outs[o], 4L * outn[o], cudaMemcpyDeviceToHost)); }
                    if (pass == 0) ref = cur;
                    else {
                        double md = 0, mx = 0;
                        for (size_t i = 0; i < ref.size(); i++) {
                            double d = fabs((double) ref[i] - cur[i]);
                            if (!(d <= md)) md = d != d ? INFINITY : d;
                            mx = fmax(mx, fabs(ref[i]));
                        }
                        bool pass_ = md <= 2e-5 * mx;
                        if (!pass_) ok[vi] = false;
                        printf("{\"check\":\"%s %s x*%g%s vs resident.cu\",\"max_abs_diff\":%.3g,\"max_abs\":%.3g,\"pass\":%s}\n",
                               VARS[vi].name, kinds[kd], scales[sc], pass == 2 ? " (pdl)" : "", md, mx, pass_ ? "true" : "false");
                        fflush(stdout);
                    }
                }
            }
    CK(cudaMemcpy(att, attinit.data(), 4L * H, cudaMemcpyHostToDevice));
    // timings: per kind (32 layers), and the chain qkv, o, glu, down × 32 with PDL in one graph (no attention);
    // argv[2..5]: a variant per kind for one more chain (the best mix)
    int mix[4] = {-1, -1, -1, -1};
    if (argc > 5) for (int kd = 0; kd < 4; kd++) mix[kd] = atoi(argv[2 + kd]);
    auto chainShipped = [&](bool pdl) { for (int l = 0; l < L; l++) for (int kd = 0; kd < 4; kd++) shipped(kd, l, pdl); };
    for (int round = 0; round < 2; round++) {
        CK(cudaMemcpy(x, xinit.data(), 4L * H, cudaMemcpyHostToDevice));
        float t = timeit([&] { chainShipped(true); }, true);
        printf("{\"variant\":\"resident.cu chain\",\"round\":%d,\"us_per_token\":%.1f,\"TBps\":%.3f", round, t, wbytes / t / 1e6);
        for (int kd = 0; kd < 4; kd++) { float u = timeit([&] { for (int l = 0; l < L; l++) shipped(kd, l, true); }, true); printf(",\"%s_us\":%.1f,\"%s_TBps\":%.3f", kinds[kd], u, kinds[kd], kindBytes[kd] / u / 1e6); }
        printf("}\n"); fflush(stdout);
        for (int vi = 0; vi < NV; vi++) {
            if (!ok[vi]) continue;
            CK(cudaMemcpy(x, xinit.data(), 4L * H, cudaMemcpyHostToDevice));
            float t2 = timeit([&] { for (int l = 0; l < L; l++) for (int kd = 0; kd < 4; kd++) cand(kd, l, true, vi); }, true);
            printf("{\"variant\":\"%s chain\",\"round\":%d,\"us_per_token\":%.1f,\"TBps\":%.3f", VARS[vi].name, round, t2, wbytes / t2 / 1e6);
            for (int kd = 0; kd < 4; kd++) { float u = timeit([&] { for (int l = 0; l < L; l++) cand(kd, l, true, vi); }, true); printf(",\"%s_us\":%.1f,\"%s_TBps\":%.3f", kinds[kd], u, kinds[kd], kindBytes[kd] / u / 1e6); }
            printf("}\n"); fflush(stdout);
        }
        if (mix[0] >= 0) {
            bool all_ok = true;
            for (int kd = 0; kd < 4; kd++) all_ok &= mix[kd] >= 0 && mix[kd] < NV && ok[mix[kd]];
            if (all_ok) {
                CK(cudaMemcpy(x, xinit.data(), 4L * H, cudaMemcpyHostToDevice));
                float t3 = timeit([&] { for (int l = 0; l < L; l++) for (int kd = 0; kd < 4; kd++) cand(kd, l, true, mix[kd]); }, true);
                printf("{\"variant\":\"mix %d %d %d %d chain\",\"round\":%d,\"us_per_token\":%.1f,\"TBps\":%.3f}\n", mix[0], mix[1], mix[2], mix[3], round, t3, wbytes / t3 / 1e6);
                fflush(stdout);
            }
        }
    }
    return 0;
}
