// ---- candidate cp: weights reach shared memory without registers (cp.async.cg 16-byte copies, or the sm_90 bulk
// copy into an mbarrier-tracked ring), so a block keeps NS-1 stages of 8 KB in flight while it computes from the
// ring. Grid = SMs × blocks per SM, each block owns a contiguous row range (rows split evenly; q/k/v share the grid
// in proportion to their rows) and streams it as stages of NR = NM·RT rows × 1024 columns (group g of RT rows,
// column chunk j; the ring does not drain between groups). Thread t computes columns 4t..4t+3 of every row of a
// stage (one conflict-free 4-byte shared read per row, one float4 of x' = cf ⊙ x per matrix from the block's
// x' copy in shared memory); at the end of a group each warp reduces its NR sums by a butterfly (NR-1 exchanged
// pairs + the rest) into a per-warp partial array; the outputs are written at the end (8 warps summed in fixed
// order, ·1/rms, ·row scale, the epilogue). Rows past the block's range are zero-filled (cp.async) or skipped
// (bulk) and their sums dropped. PDL: the first NS-1 stages are issued before griddepcontrol.wait.
// Requirements (host-checked): cols % 1024 == 0, weights/x/cf 16-byte aligned.

struct CpMats {
    const signed char* w[3];
    const float* rs[3];
    const float* cf[3];
    float* y[3];
    int rows[3];
    int bstart[4];   // blocks [bstart[m], bstart[m+1]) do matrix m (NM == 2: gate = slot 0, up = slot 1, bstart[0..1])
};

__device__ unsigned cp_timeouts;   // bulk-copy waits that gave up (a broken pipeline fails the check, never hangs)

#ifdef CP_EMU
// tools/device-bench/cp_gemv_emu.cpp: the kernels on kernel_emulator.cpp's fibers. Copies land as late as the
// pipeline allows: cp.async groups when a wait_group needs them, bulk copies when a thread waits on their
// mbarrier's phase; so a missing wait reads stale shared memory, and a wrong byte count deadlocks (reported).
#include <map>
#include <vector>
#define CP_DYN_SMEM(name) unsigned char* name = cp_emu_smem;
struct CpCopy { unsigned dst; const void* src; unsigned n; };
static unsigned char cp_emu_smem[232448];
static std::vector<std::vector<CpCopy>> cp_emu_groups[1024];
static std::vector<CpCopy> cp_emu_open[1024];
struct CpMb { int expected, pending; long long tx; unsigned ph; std::vector<CpCopy> q; };
static std::map<unsigned, CpMb> cp_emu_mb;
static long cp_emu_bytes;   // bytes copied into shared memory
static bool cp_emu_early;   // land every copy when issued instead (checks that no slot is refilled while still read)
static inline void cp_emu_land(const CpCopy& c) {
    if (c.n) memcpy(cp_emu_smem + c.dst, c.src, c.n);
    cp_emu_bytes += c.n;
}
static inline unsigned cp_sa(const void* p) { return (unsigned) (static_cast<const unsigned char*>(p) - cp_emu_smem); }
static inline void cp_async16(unsigned dst, const void* src, unsigned n) {
    if (dst % 16 || reinterpret_cast<unsigned long long>(src) % 16) abort();
    if (n < 16) memset(cp_emu_smem + dst + n, 0, 16 - n);   // (zero fill lands early: harmless, only read past the rows)
    if (cp_emu_early) cp_emu_land({dst, src, n});
    else cp_emu_open[threadIdx.x].push_back({dst, src, n});
}
static inline void cp_commit() { cp_emu_groups[threadIdx.x].push_back(cp_emu_open[threadIdx.x]); cp_emu_open[threadIdx.x].clear(); }
template <int N>
static inline void cp_wait() {
    auto& g = cp_emu_groups[threadIdx.x];
    while ((int) g.size() > N) { for (auto& c : g.front()) cp_emu_land(c); g.erase(g.begin()); }
}
static inline void mb_init(unsigned a, unsigned n) { cp_emu_mb[a] = CpMb{(int) n, (int) n, 0, 0, {}}; }
static inline void mb_fence_init() {}
static inline void mb_try(CpMb& m) { if (m.pending == 0 && m.tx == 0) { m.ph++; m.pending = m.expected; } }
static inline void mb_expect(unsigned a, unsigned bytes) {
    CpMb& m = cp_emu_mb.at(a);
    m.tx += bytes; m.pending--;
    if (m.pending < 0) abort();
    mb_try(m);
}
static inline void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    if (dst % 16 || bytes % 16 || reinterpret_cast<unsigned long long>(src) % 16) abort();
    CpMb& m = cp_emu_mb.at(bar);
    if (cp_emu_early) { cp_emu_land({dst, src, bytes}); m.tx -= bytes; mb_try(m); }
    else m.q.push_back({dst, src, bytes});
}
static inline bool mb_wait(unsigned a, unsigned par) {
    for (;;) {
        CpMb& m = cp_emu_mb.at(a);
        if ((m.ph & 1) != par) return true;
        for (auto& c : m.q) { cp_emu_land(c); m.tx -= c.n; }
        m.q.clear();
        mb_try(m);
        if ((m.ph & 1) != par) return true;
        yield();
    }
}
#else
#define CP_DYN_SMEM(name) extern __shared__ __align__(128) unsigned char name[];

__device__ __forceinline__ unsigned cp_sa(const void* p) { return (unsigned) __cvta_generic_to_shared(p); }
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, unsigned n) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void mb_init(unsigned a, unsigned n) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(n) : "memory");
#endif
}
__device__ __forceinline__ void mb_fence_init() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void mb_expect(unsigned a, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_g2s(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
#endif
}
// Waits for the completion of the phase of parity par; false after ~0.1 s (counted in cp_timeouts).
__device__ __forceinline__ bool mb_wait(unsigned a, unsigned par) {
#if __CUDA_ARCH__ >= 900
    long long t0 = 0;
    for (int it = 0;; it++) {
        unsigned ok;
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok) : "r"(a), "r"(par) : "memory");
        if (ok) return true;
        if (it == 0) t0 = clock64();
        else if (clock64() - t0 > (1LL << 28)) { atomicAdd(&cp_timeouts, 1u); return false; }
    }
#else
    return false;
#endif
}

#endif

// The block sum of v (every thread gets it); red: 32 floats of shared memory.
__device__ __forceinline__ float cp_block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float s = 0.f;
    for (int i = 0; i < (int) (blockDim.x >> 5); i++) s += red[i];
    return s;
}

// Warp sums of N values at once: N-1 exchanged pairs (each lane keeps the half its lane bit selects) then plain
// xor steps; returns the total of value idx, the same in every lane of a group of 32/N lanes.
template <int N>
__device__ __forceinline__ float cp_reduce(float (&v)[N], int lane, int& idx) {
    constexpr int LG = N == 2 ? 1 : N == 4 ? 2 : N == 8 ? 3 : 4;
    static_assert((1 << LG) == N, "N: 2, 4, 8 or 16");
    idx = 0;
#pragma unroll
    for (int st = 0; st < LG; st++) {
        const int h = N >> (st + 1), mask = 16 >> st;
        bool hi = (lane & mask) != 0;
#pragma unroll
        for (int k = 0; k < h; k++) {
            float send = hi ? v[k] : v[k + h], keep = hi ? v[k + h] : v[k];
            v[k] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
        }
        if (hi) idx += h;
    }
    float s = v[0];
#pragma unroll
    for (int mask = 16 >> LG; mask >= 1; mask >>= 1) s += __shfl_xor_sync(0xffffffffu, s, mask);
    return s;
}

// int8 ×4 → f32 (resident.cu's exact prmt trick) times x', fmaf chain
__device__ __forceinline__ float cp_fma4(unsigned w, float4 x, float acc) {
    unsigned u = w ^ 0x80808080u;
    acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7540)) - 8388736.f, x.x, acc);
    acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7541)) - 8388736.f, x.y, acc);
    acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7542)) - 8388736.f, x.z, acc);
    acc = fmaf(__uint_as_float(__byte_perm(u, 0x4B000000u, 0x7543)) - 8388736.f, x.w, acc);
    return acc;
}

#define CP_CS 1024   // columns per stage: 256 threads × 4

// Dynamic shared memory of one block: ring, x' (NM × cols f32), partials (8 warps × gmax groups × NR), NS
// mbarriers, 32 floats for the block sum.
static inline size_t cp_smem_bytes(int NM, int RT, int NS, int cols, int gmax) {
    return (size_t) NS * NM * RT * CP_CS + (size_t) NM * cols * 4 + (size_t) 8 * gmax * NM * RT * 4 + (size_t) NS * 8 + 128;
}

// EPI 0: y = rs·dot; 1: y += rs·dot; 2 (NM == 2): y = silu(rs_g·dot_g)·(rs_u·dot_u). normed: dot ·= 1/rms(x).
template <int NM, int RT, int NS, bool BULK, bool PDL, int EPI>
__global__ void __launch_bounds__(256, 1) cp_gemv(CpMats P, const float* x, int cols, int normed, float eps, int gmax) {
    constexpr int NR = NM * RT, STAGE = NR * CP_CS, PER = NR * CP_CS / 16 / 256;
    static_assert(NR == 4 || NR == 8 || NR == 16, "rows per stage");
    static_assert(NS >= 3, "ring depth");
    CP_DYN_SMEM(cp_sm)
    unsigned char* ring = cp_sm;
    float* xs = reinterpret_cast<float*>(cp_sm + NS * STAGE);
    float* part = xs + NM * cols;
    unsigned long long* bar = reinterpret_cast<unsigned long long*>(part + 8 * gmax * NR);
    float* red = reinterpret_cast<float*>(bar + NS);
    if (PDL) pdl_trigger();
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int b = blockIdx.x;
    int mi = 0;
    if (NM == 1) { if (b >= P.bstart[1]) mi = 1; if (b >= P.bstart[2]) mi = 2; }
    const int b0 = mi == 0 ? P.bstart[0] : mi == 1 ? P.bstart[1] : P.bstart[2];
    const int b1 = mi == 0 ? P.bstart[1] : mi == 1 ? P.bstart[2] : P.bstart[3];
    const int rows = mi == 0 ? P.rows[0] : mi == 1 ? P.rows[1] : P.rows[2];
    const int ra = (int) ((long long) (b - b0) * rows / (b1 - b0));
    const int rb = (int) ((long long) (b - b0 + 1) * rows / (b1 - b0));
    if (ra >= rb) return;   // no rows: touches no activation (block-uniform, before any barrier)
    const signed char* w0 = mi == 0 ? P.w[0] : mi == 1 ? P.w[1] : P.w[2];
    const signed char* w1 = NM == 2 ? P.w[1] : w0;
    const float* cf0 = mi == 0 ? P.cf[0] : mi == 1 ? P.cf[1] : P.cf[2];
    const float* cf1 = NM == 2 ? P.cf[1] : cf0;
    const int nch = cols / CP_CS, ngr = (rb - ra + RT - 1) / RT, S = ngr * nch;
    bool dead = false;   // bulk: a wait timed out; stop waiting (the outputs are garbage, the check fails)

    int ig = 0, ij = 0;   // group and column chunk of the next stage to issue (issue is called for s = 0, 1, …)
    auto issue = [&](int s) {
        if (s < S) {
            const int g = ig, j = ij;
            if (++ij == nch) { ij = 0; ig++; }
            unsigned dst = cp_sa(ring + (s % NS) * STAGE);
            if (BULK) {
                if (warp == 0 && lane < NR) {
                    unsigned bs = cp_sa(bar + s % NS);
                    int valid = min(RT, rb - ra - g * RT);   // ≥ 1
                    if (lane == 0) mb_expect(bs, (unsigned) (valid * NM * CP_CS));
                    int m = lane / RT, r = lane - m * RT, row = ra + g * RT + r;
                    if (r < valid)
                        bulk_g2s(dst + lane * CP_CS, (m ? w1 : w0) + (long long) row * cols + (long long) j * CP_CS, CP_CS, bs);
                }
            } else {
#pragma unroll
                for (int i = 0; i < PER; i++) {
                    int p = tid + 256 * i, rr = p >> 6, seg = p & 63;
                    int m = rr / RT, r = rr - m * RT, row = ra + g * RT + r;
                    bool ok = row < rb;
                    const signed char* src = (m ? w1 : w0) + (long long) (ok ? row : ra) * cols + (long long) j * CP_CS + seg * 16;
                    cp_async16(dst + rr * CP_CS + seg * 16, src, ok ? 16u : 0u);
                }
            }
        }
        if (!BULK) cp_commit();   // one group per stage, empty past the end: wait_group counts stay uniform
    };

    if (BULK) {
        if (tid == 0) {
            for (int i = 0; i < NS; i++) mb_init(cp_sa(bar + i), 1);
            mb_fence_init();
        }
        __syncthreads();
    }
    for (int s = 0; s < NS - 1; s++) issue(s);   // weights only: never written by any kernel
    if (PDL) pdl_wait();
    float ss = 0.f;
    for (int c = tid * 4; c < cols; c += 1024) {
        float4 xv = *reinterpret_cast<const float4*>(x + c);
        ss += xv.x * xv.x + xv.y * xv.y + xv.z * xv.z + xv.w * xv.w;
        float4 f = *reinterpret_cast<const float4*>(cf0 + c);
        *reinterpret_cast<float4*>(xs + c) = make_float4(xv.x * f.x, xv.y * f.y, xv.z * f.z, xv.w * f.w);
        if (NM == 2) {
            float4 f1 = *reinterpret_cast<const float4*>(cf1 + c);
            *reinterpret_cast<float4*>(xs + cols + c) = make_float4(xv.x * f1.x, xv.y * f1.y, xv.z * f1.z, xv.w * f1.w);
        }
    }
    float inv = 1.f;
    if (normed) inv = 1.f / sqrtf(cp_block_sum(ss, red) / cols + eps);
    float acc[NR];
#pragma unroll
    for (int i = 0; i < NR; i++) acc[i] = 0.f;
    int g = 0, j = 0;
    for (int s = 0; s < S; s++) {
        if (BULK) { if (!dead && !mb_wait(cp_sa(bar + s % NS), (unsigned) ((s / NS) & 1))) dead = true; }
        else cp_wait<NS - 2>();
        __syncthreads();     // stage s visible to all; everyone is done with stage s-1, whose slot the next issue refills
        issue(s + NS - 1);
        const unsigned char* st = ring + (s % NS) * STAGE + 4 * tid;
        float4 xv0 = *reinterpret_cast<const float4*>(xs + j * CP_CS + 4 * tid);
        float4 xv1 = xv0;
        if (NM == 2) xv1 = *reinterpret_cast<const float4*>(xs + cols + j * CP_CS + 4 * tid);
        unsigned wv[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) wv[i] = *reinterpret_cast<const unsigned*>(st + i * CP_CS);
#pragma unroll
        for (int i = 0; i < NR; i++) acc[i] = cp_fma4(wv[i], i < RT ? xv0 : xv1, acc[i]);
        if (++j == nch) {
            int idx;
            float v = cp_reduce<NR>(acc, lane, idx);
            if ((lane & (32 / NR - 1)) == 0) part[(warp * gmax + g) * NR + idx] = v;
#pragma unroll
            for (int i = 0; i < NR; i++) acc[i] = 0.f;
            j = 0;
            g++;
        }
    }
    if (!BULK) cp_wait<0>();   // (only empty groups can be pending here)
    __syncthreads();
    float* y = mi == 0 ? P.y[0] : mi == 1 ? P.y[1] : P.y[2];
    const float* rs0 = mi == 0 ? P.rs[0] : mi == 1 ? P.rs[1] : P.rs[2];
    for (int q = tid; q < rb - ra; q += 256) {
        int gq = q / RT, r = q - gq * RT, row = ra + q;
        float d[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) {
            float sum = 0.f;
            for (int w = 0; w < 8; w++) sum += part[(w * gmax + gq) * NR + m * RT + r];
            d[m] = sum * inv;
        }
        if (EPI == 0) y[row] = d[0] * rs0[row];
        else if (EPI == 1) y[row] = y[row] + d[0] * rs0[row];
        else y[row] = r_silu(d[0] * rs0[row]) * (d[NM - 1] * P.rs[1][row]);
    }
}

