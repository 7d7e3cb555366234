// cmf4j small-batch products (dev.cmf4j.backend.cuda.ResidentForward): int8 weights (q8_row, q8_2f) times the T
// token rows of a batched step (several sequences' decode rows), each weight read once for up to NT rows (llama.cpp's
// mmvq idea; the weights stay int8, the activations f32). Its own module beside resident.cu (built into
// resident_mmvq.fatbin by tools/build-cuda-kernels.sh, NVRTC as the fallback); plain CUDA C over common.cuh.
//
// Every row's result is bit for bit what resident.cu's r_matvec_q8 / r_matvec3_q8 / r_glu_q8 give it alone (so a
// sequence's logits do not depend on the batch it runs in): as there, warp w of a block does weight rows 4·(w/4)…
// over the columns 128·(w%4) + 4·lane + 512·n in increasing n with one fmaf chain per row (w0·x'0, …, w3·x'3),
// x' = cf ⊙ x rounded before use, the warp's xor-shuffle sum, the 4 quarters summed as ((q0 + q1) + q2) + q3, and a
// folded RMSNorm's sum of squares as r_rows8 makes it: "thread" v of 256 sums the columns 4v + 1024·n, then the 8
// warps' shuffle sums in warp order. What differs does not change a row's order: the tile of x' staged in shared
// memory (8192 / (NM·NT) columns instead of 4096: 32 KB for NT rows of x), and blocks of 16 weight rows (16 warps)
// beside the matvec kernels' 8, which read each staged x' for twice the rows (the _r16 instances).

#include "common.cuh"


// Four int8 of u as floats without I2F: each byte, made offset binary, under the exponent of 2^23 (prmt), minus
// 2^23 + 128. Exact (resident.cu's r_fma4 makes the same values).
__device__ __forceinline__ void rq_i8x4(unsigned u, float (&o)[4]) {
    u ^= 0x80808080u;
    o[0] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.f;
    o[1] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.f;
    o[2] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.f;
    o[3] = __uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.f;
}

// One batch of a warp's weight loads: for each of the U 512-column steps from column c of the tile (width tc), the 4
// weights at that column of each of the warp's 4 rows of every matrix.
template <int NM, int U>
__device__ __forceinline__ void rq_load(unsigned (&v)[NM][4][U], const char* const (&p)[NM][4], int c, int tc) {
#pragma unroll
    for (int u = 0; u < U; u++)
        if (c + u * 512 < tc)
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++) v[m][i][u] = r_ld4(p[m][i] + c + u * 512);
}

// dot[m] = Σ_c W_m[r, c]·cf_m[c]·x[t, c] · (1/rms(x_t) when normed) for weight row r = r0 + threadIdx.x % RB and row
// t = t0 + threadIdx.x / RB of x, returned to threads 0 … RB·NT − 1 (the others, and rows of x ≥ T, get garbage);
// blocks of RB = 8 or 16 warps (and weight rows); cols a multiple of 4; weight rows ≥ `rows` reread the last row and
// are dropped by the caller. Every thread of the block calls it.
// Per tile: x' of the tile's NT rows is staged (and squares summed for the norm) between two barriers, the next
// tile's weight loads go out, then this tile's loaded weights are each widened once and used NT times.
template <int NM, int NT, int RB>
__device__ __forceinline__ void rq_rows(const void* const (&w)[NM], const float* const (&cf)[NM],
                                         const float* __restrict__ x, int t0, int T, int r0, int rows, int cols,
                                         int normed, float eps, float (&dot)[NM]) {
    const int TILE = 8192 / (NM * NT);   // 512, 1024 or 2048: 32 KB of x'
    const int U = TILE / 512;            // 512-column steps per warp and tile
    const int THREADS = 32 * RB;
    // the next tile's weights are loaded before this tile's are used, except by gate+up in blocks of 16 rows, whose
    // 128 registers a thread cannot hold both (they load a tile's weights before staging its x', as r_rows8)
    const bool PF = NM == 1 || RB == 8;
    // a staging sweep covers CW float4 columns (≤ 256, so each of the 256 norm "threads" has one owner) for every G-th
    // row of x: thread p stages column p % CW of rows p / CW, p / CW + G, …
    const int CW = TILE / 4 < 256 ? TILE / 4 : 256;
    const int G = THREADS / CW;
    __shared__ __align__(16) float xs[NM][NT][TILE];
    __shared__ float ssh[NT][256];       // "thread" v's sum of squares of row t: ssh[t][v]
    __shared__ float part[4][NM][NT][RB];
    __shared__ float red[NT][8];
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int rb = (warp >> 2) * 4, kq = warp & 3;
    int nt = min(NT, T - t0);
    const char* p[NM][4];
    float acc[NM][4][NT];
#pragma unroll
    for (int m = 0; m < NM; m++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = min(r0 + rb + i, rows - 1);
            p[m][i] = static_cast<const char*>(w[m]) + (long long) r * cols;
#pragma unroll
            for (int t = 0; t < NT; t++) acc[m][i][t] = 0.f;
        }
    if (normed)
        for (int i = tid; i < NT * 256; i += THREADS) (&ssh[0][0])[i] = 0.f;
    int c = kq * 128 + lane * 4;
    unsigned v[NM][4][U];
    rq_load<NM, U>(v, p, c, min(TILE, cols));
    int jc = tid % CW, tp = G == 1 ? 0 : tid / CW;
    for (int k0 = 0; k0 < cols; k0 += TILE) {
        int tc = min(TILE, cols - k0);
        if (!PF && k0 > 0) rq_load<NM, U>(v, p, c, tc);
        __syncthreads();   // the previous tile has been read (and ssh zeroed)
#pragma unroll
        for (int s = 0; s < TILE / 4 / CW; s++) {
            int j = (jc + s * CW) * 4;
            if (j < tc) {
                float4 f[NM];
#pragma unroll
                for (int m = 0; m < NM; m++)
                    f[m] = cf[m] != nullptr ? *reinterpret_cast<const float4*>(cf[m] + k0 + j) : make_float4(1.f, 1.f, 1.f, 1.f);
                int vt = ((k0 + j) >> 2) & 255;   // the r_rows8 thread that sums this column's squares
#pragma unroll
                for (int t = tp; t < NT; t += G) {
                    if (t < nt) {
                        float4 xv = *reinterpret_cast<const float4*>(x + (long long) (t0 + t) * cols + k0 + j);
                        if (normed) ssh[t][vt] += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
#pragma unroll
                        for (int m = 0; m < NM; m++) {
                            float4 xm = xv;
                            if (cf[m] != nullptr) { xm.x *= f[m].x; xm.y *= f[m].y; xm.z *= f[m].z; xm.w *= f[m].w; }
                            *reinterpret_cast<float4*>(&xs[m][t][j]) = xm;
                        }
                    }
                }
            }
        }
        __syncthreads();
        unsigned vn[NM][4][U];
        bool more = k0 + TILE < cols;
        if (more) {
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++) p[m][i] += TILE;
            if (PF) rq_load<NM, U>(vn, p, c, min(TILE, cols - k0 - TILE));
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            int cc = c + u * 512;
            if (cc < tc) {
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    float wf[4][4];
#pragma unroll
                    for (int i = 0; i < 4; i++) rq_i8x4(v[m][i][u], wf[i]);
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        if (t < nt) {
                            float4 xv = *reinterpret_cast<const float4*>(&xs[m][t][cc]);
#pragma unroll
                            for (int i = 0; i < 4; i++) {
                                float a = acc[m][i][t];
                                a = fmaf(wf[i][0], xv.x, a);
                                a = fmaf(wf[i][1], xv.y, a);
                                a = fmaf(wf[i][2], xv.z, a);
                                a = fmaf(wf[i][3], xv.w, a);
                                acc[m][i][t] = a;
                            }
                        }
                    }
                }
            }
        }
        if (PF && more) {
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int u = 0; u < U; u++) v[m][i][u] = vn[m][i][u];
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < nt) {
#pragma unroll
            for (int m = 0; m < NM; m++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float a = acc[m][i][t];
                    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
                    if (lane == 0) part[kq][m][t][rb + i] = a;
                }
        }
    }
    __syncthreads();   // publishes part and the sums of squares
    if (normed) {
        for (int t = 0; t < nt && warp < 8; t++) {   // the 256 "threads" of r_rows8's sum, as its 8 warps
            float s = ssh[t][tid];
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            if (lane == 0) red[t][warp] = s;
        }
        __syncthreads();
    }
    int i = tid % RB, t = tid / RB;
    if (t < nt) {
        float inv = 1.f;
        if (normed) {
            float s = 0.f;
            for (int k = 0; k < 8; k++) s += red[t][k];
            inv = 1.f / sqrtf(s / cols + eps);
        }
#pragma unroll
        for (int m = 0; m < NM; m++)
            dot[m] = (((part[0][m][t][i] + part[1][m][t][i]) + part[2][m][t][i]) + part[3][m][t][i]) * inv;
    }
}

// y[t, r] = rs[r]·Σ_c W[r, c]·cf[c]·x[t, c] (+ bias[r]) (+ y[t, r] when accumulate) for the T rows of x; block = RB
// warps = RB weight rows; grid = (ceil(rows/RB), ceil(T/NT)), block y taking rows NT·y … of x. As r_matvec_q8, per
// row of x.
template <int NT, int RB>
__device__ __forceinline__ void rq_matvec(const void* __restrict__ w, const float* __restrict__ rs,
                                          const float* __restrict__ cf, const float* __restrict__ bias,
                                          const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                          int accumulate, int normed, float eps, int T) {
    const void* wm[1] = {w};
    const float* cm[1] = {cf};
    float d[1];
    int t0 = blockIdx.y * NT;
    rq_rows<1, NT, RB>(wm, cm, x, t0, T, blockIdx.x * RB, rows, cols, normed, eps, d);
    int r = blockIdx.x * RB + threadIdx.x % RB, t = t0 + threadIdx.x / RB;
    if (threadIdx.x < RB * NT && t < T && r < rows) {
        float acc = d[0];
        if (rs != nullptr) acc *= rs[r];
        if (bias != nullptr) acc += bias[r];
        long long o = (long long) t * rows + r;
        y[o] = accumulate ? y[o] + acc : acc;
    }
}

// q, k and v of one input in one launch: blocks [0, b0) matrix 0, the next b1 matrix 1, the rest matrix 2
// (b_i = ceil(rows_i / RB)); each as rq_matvec without accumulation. As r_matvec3_q8, per row of x.
template <int NT, int RB>
__device__ __forceinline__ void rq_matvec3(
        const void* w0, const float* rs0, const float* cf0, const float* b0, float* y0, int rows0,
        const void* w1, const float* rs1, const float* cf1, const float* b1, float* y1, int rows1,
        const void* w2, const float* rs2, const float* cf2, const float* b2, float* y2, int rows2,
        const float* __restrict__ x, int cols, int normed, float eps, int T) {
    int blk = blockIdx.x, n0 = (rows0 + RB - 1) / RB, n1 = (rows1 + RB - 1) / RB;
    const void* w = w0; const float *rs = rs0, *cf = cf0, *bias = b0; float* y = y0; int rows = rows0;
    if (blk >= n0 + n1) { blk -= n0 + n1; w = w2; rs = rs2; cf = cf2; bias = b2; y = y2; rows = rows2; }
    else if (blk >= n0) { blk -= n0; w = w1; rs = rs1; cf = cf1; bias = b1; y = y1; rows = rows1; }
    const void* wm[1] = {w};
    const float* cm[1] = {cf};
    float d[1];
    int t0 = blockIdx.y * NT;
    rq_rows<1, NT, RB>(wm, cm, x, t0, T, blk * RB, rows, cols, normed, eps, d);
    int r = blk * RB + threadIdx.x % RB, t = t0 + threadIdx.x / RB;
    if (threadIdx.x < RB * NT && t < T && r < rows) {
        float acc = d[0];
        if (rs != nullptr) acc *= rs[r];
        if (bias != nullptr) acc += bias[r];
        y[(long long) t * rows + r] = acc;
    }
}

__device__ __forceinline__ float rq_silu(float g) { return g / (1.f + expf(-g)); }

// SwiGLU with gate and up in one pass: y[t, r] = silu(gate_r·x_t)·(up_r·x_t). As r_glu_q8, per row of x.
template <int NT, int RB>
__device__ __forceinline__ void rq_glu(const void* __restrict__ wg, const float* __restrict__ rsg, const float* __restrict__ cfg,
                                       const void* __restrict__ wu, const float* __restrict__ rsu, const float* __restrict__ cfu,
                                       const float* __restrict__ x, float* __restrict__ y, int rows, int cols,
                                       int normed, float eps, int T) {
    const void* wm[2] = {wg, wu};
    const float* cm[2] = {cfg, cfu};
    float d[2];
    int t0 = blockIdx.y * NT;
    rq_rows<2, NT, RB>(wm, cm, x, t0, T, blockIdx.x * RB, rows, cols, normed, eps, d);
    int r = blockIdx.x * RB + threadIdx.x % RB, t = t0 + threadIdx.x / RB;
    if (threadIdx.x < RB * NT && t < T && r < rows) {
        float g = d[0], u = d[1];
        if (rsg != nullptr) g *= rsg[r];
        if (rsu != nullptr) u *= rsu[r];
        y[(long long) t * rows + r] = rq_silu(g) * u;
    }
}

// NT = 4 (batches of 2–4 rows) and 8 (5–8 rows; more rows take ceil(T/8) block rows, each reading the weights again);
// blocks of 8 weight rows (256 threads, 2 blocks an SM) or, the _r16 instances, 16 (512 threads, 1 an SM: each x'
// staged from L2 serves twice the rows)
#define RQ_MATVEC(NT, RB, SFX, MB)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * RB, MB) rq_matvec_q8_##NT##SFX(const void* w,            \
        const float* rs, const float* cf, const float* bias, const float* x, float* y, int rows, int cols,      \
        int accumulate, int normed, float eps, int T) {                                                          \
        rq_matvec<NT, RB>(w, rs, cf, bias, x, y, rows, cols, accumulate, normed, eps, T);                       \
    }
#define RQ_MATVEC3(NT, RB, SFX, MB)                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * RB, MB) rq_matvec3_q8_##NT##SFX(                         \
        const void* w0, const float* rs0, const float* cf0, const float* b0, float* y0, int rows0,              \
        const void* w1, const float* rs1, const float* cf1, const float* b1, float* y1, int rows1,              \
        const void* w2, const float* rs2, const float* cf2, const float* b2, float* y2, int rows2,              \
        const float* x, int cols, int normed, float eps, int T) {                                               \
        rq_matvec3<NT, RB>(w0, rs0, cf0, b0, y0, rows0, w1, rs1, cf1, b1, y1, rows1, w2, rs2, cf2, b2, y2, rows2, \
                           x, cols, normed, eps, T);                                                             \
    }
#define RQ_GLU(NT, RB, SFX, MB)                                                                                 \
    extern "C" __global__ void __launch_bounds__(32 * RB, MB) rq_glu_q8_##NT##SFX(const void* wg,              \
        const float* rsg, const float* cfg, const void* wu, const float* rsu, const float* cfu, const float* x,   \
        float* y, int rows, int cols, int normed, float eps, int T) {                                            \
        rq_glu<NT, RB>(wg, rsg, cfg, wu, rsu, cfu, x, y, rows, cols, normed, eps, T);                            \
    }

RQ_MATVEC(4, 8, , 2)
RQ_MATVEC(8, 8, , 2)
RQ_MATVEC3(4, 8, , 2)
RQ_MATVEC3(8, 8, , 2)
RQ_GLU(4, 8, , 2)
RQ_GLU(8, 8, , 2)
RQ_MATVEC(4, 16, _r16, 1)
RQ_MATVEC(8, 16, _r16, 1)
RQ_MATVEC3(4, 16, _r16, 1)
RQ_MATVEC3(8, 16, _r16, 1)
RQ_GLU(4, 16, _r16, 1)
RQ_GLU(8, 16, _r16, 1)
