// The real CUDA kernels of matvec_q4.cu compiled for the CPU (test-only): each warp runs as 32 threads in lockstep
// at every shuffle, so the kernels' own indexing, nibble order, code decoding and warp shuffles are checked against
// the CPU engine without a GPU. Linked into the mock driver (mockcuda.c built with -DMOCK_EMULATE_Q4), whose
// cuLaunchKernel then runs these instead of its C twins. One launch at a time.
#include <pthread.h>
#include <cstdint>
#include <cstring>

struct EmuDim { unsigned x = 0, y = 0, z = 0; };
static thread_local EmuDim threadIdx, blockIdx;
struct float4 { float x, y, z, w; };
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict

static float emulated_f16_to_f32(unsigned short h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) { float f = m / 1024.0f / 16384.0f; return s ? -f : f; }
    if (e == 31) u = (s << 31) | 0x7f800000u | (m << 13);
    else u = (s << 31) | ((e + 112) << 23) | (m << 13);
    float f; memcpy(&f, &u, 4); return f;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }

static pthread_barrier_t lockstep;
static float slots[32];
static float shuffle(float v, int src) {
    slots[threadIdx.x & 31] = v;
    pthread_barrier_wait(&lockstep);
    float r = slots[src & 31];
    pthread_barrier_wait(&lockstep);
    return r;
}
static inline float __shfl_sync(unsigned, float v, int src) { return shuffle(v, src); }
static inline float __shfl_xor_sync(unsigned, float v, int mask) { return shuffle(v, (int) (threadIdx.x & 31) ^ mask); }

#include "matvec_q4.cu"

typedef void (*Kernel)(const void*, const float*, const float*, const float*, float*, long long, int, int);
struct Lane { Kernel k; const void* w; const float* rs; const float* cf; const float* x; float* y; long long row0; int rows, cols; unsigned gx, gy, lane; };

static void* run_lane(void* p) {
    Lane* l = (Lane*) p;
    for (unsigned by = 0; by < l->gy; by++)
        for (unsigned bx = 0; bx < l->gx; bx++)
            for (unsigned warp = 0; warp < 8; warp++) {
                blockIdx.x = bx; blockIdx.y = by; threadIdx.x = warp * 32 + l->lane;
                l->k(l->w, l->rs, l->cf, l->x, l->y, l->row0, l->rows, l->cols);
                pthread_barrier_wait(&lockstep);   // the warp ends together
            }
    return nullptr;
}

static long launches = 0;
extern "C" long emu_launches() { return launches; }

// kind 4 = matvec_q4_block, 5 = matvec_q4tp (the mock's function handles); 0 on success
extern "C" int emu_launch_q4(int kind, unsigned gx, unsigned gy, const void* w, const float* rs, const float* cf,
                             const float* x, float* y, long long row0, int rows, int cols) {
    Kernel k = kind == 4 ? matvec_q4_block : kind == 5 ? matvec_q4tp : nullptr;
    if (!k) return 500;
    launches++;
    pthread_barrier_init(&lockstep, nullptr, 32);
    pthread_t threads[32];
    Lane lanes[32];
    for (unsigned i = 0; i < 32; i++) {
        lanes[i] = Lane{k, w, rs, cf, x, y, row0, rows, cols, gx, gy, i};
        pthread_create(&threads[i], nullptr, run_lane, &lanes[i]);
    }
    for (unsigned i = 0; i < 32; i++) pthread_join(threads[i], nullptr);
    pthread_barrier_destroy(&lockstep);
    return 0;
}
