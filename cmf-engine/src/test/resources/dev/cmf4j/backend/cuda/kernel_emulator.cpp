// The real CUDA kernels of matvec_q4.cu, resident_arch.cu, resident_embryo.cu, resident_mmvq.cu and resident.cu's products compiled for the CPU (test-only): each thread of a
// block is a fiber of one host thread, run round-robin; a warp's 32 fibers meet at a barrier for every
// shuffle and the block's at every __syncthreads, so the kernels' own indexing, reductions, shuffles and shared
// memory are checked against the CPU engine without a GPU. __shared__ arrays are static: one block runs at a time.
// Linked into the mock driver (mockcuda.c built with -DMOCK_EMULATE), whose cuLaunchKernel then runs these instead
// of its C twins. One launch at a time. A barrier some threads never reach (a divergent __syncthreads) fails the
// launch instead of hanging. On x86-64 Linux a fiber switch is a few hand-written instructions (emu_switch below);
// elsewhere ucontext's swapcontext, which costs a sigprocmask system call per switch.
#if defined(__x86_64__) && defined(__linux__)
#define EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <functional>

struct EmuDim { unsigned x = 0, y = 0, z = 0; };
static EmuDim threadIdx, blockIdx, blockDim, gridDim;   // threadIdx is set to the running fiber's before every resume
struct float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct uint2 { unsigned x, y; };
static inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
struct uint4 { unsigned x, y, z, w; };
struct char4 { signed char x, y, z, w; };
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __shared__ static

static float emulated_f16_to_f32(unsigned short h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 0) { float f = m / 1024.0f / 16384.0f; return s ? -f : f; }
    if (e == 31) u = (s << 31) | 0x7f800000u | (m << 13);
    else u = (s << 31) | ((e + 112) << 23) | (m << 13);
    float f; memcpy(&f, &u, 4); return f;
}
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
// PTX prmt in its default mode: result byte i = byte (selector nibble i & 7) of the 8 bytes {y, x}
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long) y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned) ((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }

// ---- fibers ----
static const size_t STACK = 256 * 1024;
static char* stacks[1024];
static int current;
static long progress;   // arrivals and completions: a round without any is a deadlock
static std::function<void()>* kernel_fn;
static void fiber_main();

#ifdef EMU_ASM_SWITCH
// A suspended context is just its stack pointer: emu_switch pushes the callee-saved registers (the System V ABI's
// rbx, rbp, r12-r15) and the FP control words (MXCSR, x87 CW) on the current stack, saves rsp in *from, loads rsp
// = to and pops the same frame from there. Everything else is caller-saved, so the compiler has spilled it already.
// No signal mask is touched, hence no system call (swapcontext's rt_sigprocmask was most of the emulator's time).
extern "C" __attribute__((visibility("hidden"))) void emu_switch(void** from, void* to);
asm(R"(
    .text
    .p2align 4
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr 8(%rsp)
    fldcw (%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
struct Fiber { void* sp; unsigned tid; bool done; };
static Fiber fibers[1024];
static void* scheduler_sp;
static void yield() { emu_switch(&fibers[current].sp, scheduler_sp); }
static void to_fiber(int i) { emu_switch(&scheduler_sp, fibers[i].sp); }

// A new fiber runs fiber_main to its end, then switches to the scheduler for good (it is never resumed again: its
// frame is simply abandoned, as is a deadlocked fiber's).
[[noreturn]] static void fiber_entry() {
    fiber_main();
    emu_switch(&fibers[current].sp, scheduler_sp);
    __builtin_unreachable();
}

// Lays out on a fresh stack the frame emu_switch pops: FP control words (the scheduler's, as getcontext would take),
// six zero registers, then fiber_entry as the return address. The ABI wants rsp + 8 16-byte aligned at a function's
// entry, i.e. right after ret pops into fiber_entry; the slot above it is a null return address nobody uses.
static void fiber_init(Fiber& f, char* stack) {
    uintptr_t top = ((uintptr_t) stack + STACK) & ~(uintptr_t) 15;
    uint64_t* sp = (uint64_t*) (top - 80);            // 80 = 2 (FP words) + 6 (registers) + 2 (ret, null) slots
    uint32_t mxcsr; uint16_t fcw;
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fcw));
    memset(sp, 0, 80);
    memcpy(&sp[0], &fcw, 2);
    memcpy(&sp[1], &mxcsr, 4);
    sp[8] = (uint64_t) (uintptr_t) &fiber_entry;      // rsp after that ret: top - 8, as after a call
    f.sp = sp;
}
#else
struct Fiber { ucontext_t ctx; unsigned tid; bool done; };
static Fiber fibers[1024];
static ucontext_t scheduler;
static void yield() { swapcontext(&fibers[current].ctx, &scheduler); }
static void to_fiber(int i) { swapcontext(&scheduler, &fibers[i].ctx); }
static void fiber_init(Fiber& f, char* stack) {
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &scheduler;   // fiber_main returns to the scheduler
    makecontext(&f.ctx, fiber_main, 0);
}
#endif

struct Barrier { int count = 0; unsigned gen = 0; };
static Barrier warp_bars[32], block_bar;
static void arrive(Barrier& b, int n) {
    unsigned gen = b.gen;
    progress++;
    if (++b.count == n) { b.count = 0; b.gen++; return; }
    while (b.gen == gen) yield();
}

static unsigned long long slots[32][32];
template <class T> static T shuffle(T v, int src) {
    unsigned w = threadIdx.x >> 5;
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    slots[w][threadIdx.x & 31] = b;
    arrive(warp_bars[w], 32);
    b = slots[w][src & 31];
    arrive(warp_bars[w], 32);   // every lane has read before the slots are reused
    T r;
    memcpy(&r, &b, sizeof(T));
    return r;
}
template <class T> static inline T __shfl_sync(unsigned, T v, int src) { return shuffle(v, src); }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int mask) { return shuffle(v, (int) (threadIdx.x & 31) ^ mask); }
static inline void __syncwarp() { arrive(warp_bars[threadIdx.x >> 5], 32); }
static inline void __syncthreads() { arrive(block_bar, (int) blockDim.x); }
// one block at a time, its threads as fibers of one host thread: memory is always coherent and an add is atomic
static inline void __threadfence() {}
static inline int atomicAdd(int* p, int v) { int o = *p; *p = o + v; return o; }

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 for one warp (resident.cu's r_mma16816), from the PTX ISA's
// fragment layouts: each lane deposits its A (4 f16x2), B (2 f16x2) registers in the warp's slots, the warp meets,
// each lane computes its own 4 outputs (f16 products are exact in f32; summed in f32 in k order onto c), meets again.
// Lane = 4·g + i holds A[g][2i..2i+1], A[g+8][2i..], A[g][2i+8..], A[g+8][2i+8..]; B[2i..2i+1][g], B[2i+8..][g];
// C[g][2i..2i+1], C[g+8][2i..2i+1].
static unsigned mma_slots[32][32][6];
static float mma_f16(unsigned word, int high) { return emulated_f16_to_f32((unsigned short) (high ? word >> 16 : word & 0xffffu)); }
static void emulated_mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    unsigned w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = 0; i < 4; i++) mma_slots[w][lane][i] = a[i];
    mma_slots[w][lane][4] = b0;
    mma_slots[w][lane][5] = b1;
    arrive(warp_bars[w], 32);
    auto A = [w](int row, int k) { return mma_f16(mma_slots[w][(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k % 2); };
    auto B = [w](int k, int n) { return mma_f16(mma_slots[w][n * 4 + (k % 8) / 2][4 + (k >= 8)], k % 2); };
    int g = (int) lane / 4, i = (int) lane % 4;
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e / 2), col = 2 * i + e % 2;
        float d = c[e];
        for (int k = 0; k < 16; k++) d += A(row, k) * B(k, col);
        c[e] = d;
    }
    arrive(warp_bars[w], 32);   // every lane has read before the slots are reused
}

// resident.cuh's r_pdl_wait on the CPU: whether each block of the running launch waited (the mock refuses a kernel
// launched with programmatic stream serialization unless every block did)
static bool pdl_block_waited;
static long pdl_waited_blocks;
static void emulated_pdl_wait() { pdl_block_waited = true; }
extern "C" long emu_take_pdl_waited_blocks() { long n = pdl_waited_blocks; pdl_waited_blocks = 0; return n; }
#include "matvec_q4.cu"
#include "resident_arch.cu"
#include "resident_embryo.cu"
#include "resident_o1.cu"
#include "resident.cu"
#include "resident_attn.cu"
#include "resident_gemm.cu"
#include "resident_mmvq.cu"

static void fiber_main() {
    (*kernel_fn)();
    fibers[current].done = true;
    progress++;
}

static long launches = 0;
extern "C" long emu_launches() { return launches; }

// Runs every block of the grid, one after the other, each as blockDim fibers; 0 on success, 1 bad block, 2 deadlock.
static int run_blocks(std::function<void()> kernel, unsigned gx, unsigned gy, unsigned gz, unsigned bx) {
    if (bx == 0 || bx > 1024 || bx % 32 != 0) return 1;
    launches++;
    pdl_waited_blocks = 0;
    kernel_fn = &kernel;
    blockDim.x = bx; blockDim.y = blockDim.z = 1;
    gridDim.x = gx; gridDim.y = gy; gridDim.z = gz;
    for (unsigned i = 0; i < bx; i++) if (!stacks[i]) stacks[i] = (char*) malloc(STACK);
    for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                blockIdx.x = x; blockIdx.y = y; blockIdx.z = z;
                pdl_block_waited = false;
                for (auto& b : warp_bars) b = Barrier();
                block_bar = Barrier();
                for (unsigned i = 0; i < bx; i++) {
                    Fiber& f = fibers[i];
                    f.tid = i;
                    f.done = false;
                    fiber_init(f, stacks[i]);
                }
                for (unsigned left = bx; left > 0;) {
                    long before = progress;
                    left = 0;
                    for (unsigned i = 0; i < bx; i++) {
                        if (fibers[i].done) continue;
                        current = (int) i;
                        threadIdx.x = fibers[i].tid; threadIdx.y = threadIdx.z = 0;
                        to_fiber((int) i);
                        if (!fibers[i].done) left++;
                    }
                    if (left > 0 && progress == before) return 2;
                }
                if (pdl_block_waited) pdl_waited_blocks++;
            }
    return 0;
}

// kind 4 = matvec_q4_block, 5 = matvec_q4tp (the mock's function handles); blocks of 8 warps; 0 on success
extern "C" int emu_launch_q4(int kind, unsigned gx, unsigned gy, const void* w, const float* rs, const float* cf,
                             const float* x, float* y, long long row0, int rows, int cols) {
    auto k = kind == 4 ? matvec_q4_block : kind == 5 ? matvec_q4tp : nullptr;
    if (!k) return 500;
    return run_blocks([=] { k(w, rs, cf, x, y, row0, rows, cols); }, gx, gy, 1, 256);
}

// The deadlock check on purpose-made kernels (CudaKernelEmulationTest): a __syncthreads only the first warp of two
// reaches, a shuffle only odd lanes make (each must fail with 2, not hang), and a block that does meet (0); for kind
// 0, 1, 2 respectively. out[t] gets what thread t computed.
extern "C" int emu_selftest_barriers(int kind, int* out) {
    switch (kind) {
        case 0: return run_blocks([out] { if (threadIdx.x < 32) __syncthreads(); out[threadIdx.x] = 1; }, 1, 1, 1, 64);
        case 1: return run_blocks([out] { out[threadIdx.x] = threadIdx.x & 1 ? __shfl_xor_sync(~0u, (int) threadIdx.x, 1) : -1; }, 1, 1, 1, 64);
        case 2: return run_blocks([out] {
                    __shared__ int seen[64];
                    seen[threadIdx.x] = (int) threadIdx.x;
                    __syncthreads();
                    out[threadIdx.x] = seen[63 - threadIdx.x] + __shfl_xor_sync(~0u, (int) threadIdx.x, 1) * 100;
                }, 1, 1, 1, 64);
        default: return 500;
    }
}

#define P(i, T) (*(T*) p[i])
typedef const unsigned long long* Tab;

// the mock's function handles of resident_arch.cu: 80 ra_rmsnorm, 81 ra_glu_act, 82 ra_moe_route, 83 ra_argmax_rows,
// 84 ra_ple_combine, 85 ra_pli_gate, 86 ra_scale_cap, 87 ra_expert_scale, 110..117 the gated delta net's, the attention
// output gate's and the shared expert's (ra_gdn_unfuse … ra_gated_add),
// 90 + k ra_moe_glu_{f32,bf16,f16,q8,q4_block,q4tp}, 100 + k ra_moe_down_{...}; 118-126 resident_embryo.cu's (below); 0 on success
extern "C" int emu_launch_arch(int kind, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void** p) {
    std::function<void()> k;
    switch (kind) {
        case 80: k = [p] { ra_rmsnorm(P(0, const float*), P(1, const float*), P(2, float*), P(3, int), P(4, float), P(5, int), P(6, int)); }; break;
        case 81: k = [p] { ra_glu_act(P(0, const float*), P(1, const float*), P(2, float*), P(3, int), P(4, int)); }; break;
        case 82: k = [p] { ra_moe_route(P(0, const float*), P(1, int*), P(2, float*), P(3, int), P(4, int), P(5, int), P(6, int)); }; break;
        case 83: k = [p] { ra_argmax_rows(P(0, const float*), P(1, int*), P(2, int)); }; break;
        case 84: k = [p] { ra_ple_combine(P(0, float*), P(1, const float*), P(2, const float*), P(3, int), P(4, float), P(5, int), P(6, float), P(7, float)); }; break;
        case 85: k = [p] { ra_pli_gate(P(0, float*), P(1, const float*), P(2, int), P(3, int), P(4, int), P(5, int), P(6, int)); }; break;
        case 86: k = [p] { ra_scale_cap(P(0, float*), P(1, int), P(2, float), P(3, float)); }; break;
        case 87: k = [p] { ra_expert_scale(P(0, const int*), P(1, float*), P(2, const float*), P(3, int)); }; break;
        case 110: k = [p] { ra_gdn_unfuse(P(0, const float*), P(1, const float*), P(2, float*), P(3, float*), P(4, float*), P(5, float*),
                    P(6, int), P(7, int), P(8, int), P(9, int)); }; break;
        case 111: k = [p] { ra_gdn_conv(P(0, float*), P(1, const float*), P(2, const float*), P(3, float*), P(4, int), P(5, int),
                    P(6, int), P(7, const int*)); }; break;
        case 112: k = [p] { ra_gdn_gates(P(0, const float*), P(1, const float*), P(2, const float*), P(3, const float*),
                    P(4, const float*), P(5, float*), P(6, float*), P(7, float*), P(8, float*), P(9, int), P(10, int), P(11, int),
                    P(12, int)); }; break;
        case 113: k = [p] { ra_gdn_rule(P(0, const float*), P(1, const float*), P(2, const float*), P(3, const float*),
                    P(4, const float*), P(5, float*), P(6, float*), P(7, int), P(8, int), P(9, int), P(10, int), P(11, int),
                    P(12, int), P(13, const int*)); }; break;
        case 114: k = [p] { ra_gdn_norm(P(0, float*), P(1, const float*), P(2, const float*), P(3, int), P(4, float), P(5, int)); }; break;
        case 115: k = [p] { ra_split_gate(P(0, const float*), P(1, float*), P(2, float*), P(3, int), P(4, int)); }; break;
        case 116: k = [p] { ra_sigmoid_mul(P(0, float*), P(1, const float*), P(2, int)); }; break;
        case 117: k = [p] { ra_gated_add(P(0, float*), P(1, const float*), P(2, const float*), P(3, int), P(4, int)); }; break;
#define GLU(N, F) case 90 + N: k = [p] { F(P(0, Tab), P(1, Tab), P(2, Tab), P(3, int), P(4, int), P(5, Tab), P(6, Tab), P(7, Tab), \
                    P(8, int), P(9, int), P(10, const float*), P(11, const float*), P(12, const int*), P(13, const float*), \
                    P(14, float*), P(15, int), P(16, int), P(17, int), P(18, int), P(19, int), P(20, float), P(21, float)); }; break;
#define DOWN(N, F) case 100 + N: k = [p] { F(P(0, Tab), P(1, Tab), P(2, Tab), P(3, int), P(4, int), P(5, const float*), \
                    P(6, const int*), P(7, const float*), P(8, const float*), P(9, float*), P(10, int), P(11, int), P(12, int), \
                    P(13, int)); }; break;
        GLU(0, ra_moe_glu_f32) GLU(1, ra_moe_glu_bf16) GLU(2, ra_moe_glu_f16) GLU(3, ra_moe_glu_q8)
        GLU(4, ra_moe_glu_q4_block) GLU(5, ra_moe_glu_q4tp)
        DOWN(0, ra_moe_down_f32) DOWN(1, ra_moe_down_bf16) DOWN(2, ra_moe_down_f16) DOWN(3, ra_moe_down_q8)
        DOWN(4, ra_moe_down_q4_block) DOWN(5, ra_moe_down_q4tp)
        // resident_embryo.cu: 118 re_anchor_attend, 119 re_anchor_commit, 120 re_resonance_route, 121 re_cluster_logsoftmax,
        // 122 re_head_finish, 123 + k re_head_rows_{f32,bf16,f16,q8}
        case 118: k = [p] { re_anchor_attend(P(0, const float*), P(1, const float*), P(2, const float*), P(3, const float*),
                    P(4, const float*), P(5, const float*), P(6, const float*), P(7, const float*), P(8, const float*), P(9, float*),
                    P(10, int), P(11, int), P(12, int), P(13, int), P(14, int), P(15, int), P(16, float), P(17, const int*)); }; break;
        case 119: k = [p] { re_anchor_commit(P(0, const float*), P(1, const float*), P(2, float*), P(3, float*), P(4, int), P(5, int),
                    P(6, int), P(7, const int*)); }; break;
        case 120: k = [p] { re_resonance_route(P(0, const float*), P(1, const float*), P(2, const float*), P(3, const float*),
                    P(4, int*), P(5, float*), P(6, int), P(7, int), P(8, int)); }; break;
        case 121: k = [p] { re_cluster_logsoftmax(P(0, float*), P(1, int)); }; break;
        case 122: k = [p] { re_head_finish(P(0, float*), P(1, const float*), P(2, const double*), P(3, int), P(4, int), P(5, int),
                    P(6, int), P(7, float)); }; break;
#define HEAD(N, F) case 123 + N: k = [p] { F(P(0, const void*), P(1, const float*), P(2, const float*), P(3, const float*), \
                    P(4, const float*), P(5, const double*), P(6, int), P(7, float*), P(8, int), P(9, int), P(10, int), P(11, int)); }; break;
        HEAD(0, re_head_rows_f32) HEAD(1, re_head_rows_bf16) HEAD(2, re_head_rows_f16) HEAD(3, re_head_rows_q8)
        default: return 500;
    }
    return run_blocks(k, gx, gy, gz, bx);
}

// the mock's function handles of resident_o1.cu: 256 ro_keep_queries, 257 ro_means, 258 ro_absorb_prompt, 259 ro_seal_copy,
// 260 ro_rope, 261 ro_attend, 262 ro_commit; 0 on success
extern "C" int emu_launch_o1(int kind, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void** p) {
    std::function<void()> k;
    typedef const float* F;
    switch (kind) {
        case 256: k = [p] { ro_keep_queries(P(0, F), P(1, float*), P(2, int), P(3, const int*)); }; break;
        case 257: k = [p] { ro_means(P(0, F), P(1, int), P(2, int), P(3, int), P(4, int), P(5, double*)); }; break;
        case 258: k = [p] { ro_absorb_prompt(P(0, F), P(1, F), P(2, float*), P(3, int), P(4, int), P(5, int), P(6, int), P(7, int),
                    P(8, int), P(9, int), P(10, float)); }; break;
        case 259: k = [p] { ro_seal_copy(P(0, F), P(1, F), P(2, float*), P(3, float*), P(4, float*), P(5, float*), P(6, int), P(7, int),
                    P(8, int), P(9, int), P(10, int)); }; break;
        case 260: k = [p] { ro_rope(P(0, float*), P(1, float*), P(2, F), P(3, F), P(4, int), P(5, int), P(6, float), P(7, int), P(8, F),
                    P(9, int), P(10, float), P(11, int), P(12, int), P(13, int), P(14, const int*)); }; break;
        case 261: k = [p] { ro_attend(P(0, F), P(1, F), P(2, F), P(3, F), P(4, F), P(5, F), P(6, F), P(7, float*), P(8, F), P(9, float*),
                    P(10, int), P(11, int), P(12, int), P(13, int), P(14, int), P(15, int), P(16, int), P(17, float), P(18, int),
                    P(19, const int*)); }; break;
        case 262: k = [p] { ro_commit(P(0, F), P(1, F), P(2, float*), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int),
                    P(8, const int*)); }; break;
        default: return 500;
    }
    return run_blocks(k, gx, gy, gz, bx);
}

// the mock's function handles of resident.cu's products: 10 + k r_matvec_{f32,bf16,f16,q8,q4_block,q4tp}, 20 + k
// r_glu_{...}, 50 + k r_matvec3_{...}; 34, 35 r_embed_{q4_block,q4tp}, 74, 75 r_widen_{q4_block,q4tp}; the prefill's q/k norm + rope + KV append: 42 r_qk_rope_append; its decode attention: 43 r_attn_partial, 44 r_attn_rows; a few-row chunk's: 76 r_attn_chunk; its prefill attention: 45 + b
// r_attn_prefill_{32,64,128,256}, 70 + b r_attn_prefill_tc_{32,64,128} (their f16- and q8-cache instances at + 128
// and + 384); the cuBLAS prefill's kernels: 60 r_split, 61 r_i8_widen,
// 62 r_gemm_out, 63 r_glu_out, 64 r_split3, 65 r_gemm_out3, 66 + i r_glu_split_{1,2,4,8}, 73 r_residual_split3; resident_mmvq.cu's: 240 + 6·b +
// 2·f + n, f = 0 rq_matvec_q8, 1 rq_matvec3_q8, 2 rq_glu_q8, n = 0 for _4, 1 for _8, b = 1 for the _r16 ones; 0 on success
extern "C" int emu_launch_resident(int kind, unsigned gx, unsigned gy, unsigned gz, unsigned bx, void** p) {
    std::function<void()> k;
    typedef const void* V;
    typedef const float* F;
    switch (kind) {
#define MV(N, Fn) case 10 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, F), P(4, F), P(5, float*), P(6, int), P(7, int), \
                  P(8, int), P(9, int), P(10, float)); }; break;
#define GL(N, Fn) case 20 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, V), P(4, F), P(5, F), P(6, F), P(7, float*), \
                  P(8, int), P(9, int), P(10, int), P(11, float)); }; break;
#define M3(N, Fn) case 50 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, F), P(4, float*), P(5, int), \
                  P(6, V), P(7, F), P(8, F), P(9, F), P(10, float*), P(11, int), P(12, V), P(13, F), P(14, F), P(15, F), \
                  P(16, float*), P(17, int), P(18, F), P(19, int), P(20, int), P(21, float)); }; break;
        MV(0, r_matvec_f32) MV(1, r_matvec_bf16) MV(2, r_matvec_f16) MV(3, r_matvec_q8) MV(4, r_matvec_q4_block) MV(5, r_matvec_q4tp)
#define RQ(N, Fn) case 240 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, F), P(4, F), P(5, float*), P(6, int), P(7, int), \
                  P(8, int), P(9, int), P(10, float), P(11, int)); }; break;
#define RQ3(N, Fn) case 240 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, F), P(4, float*), P(5, int), \
                  P(6, V), P(7, F), P(8, F), P(9, F), P(10, float*), P(11, int), P(12, V), P(13, F), P(14, F), P(15, F), \
                  P(16, float*), P(17, int), P(18, F), P(19, int), P(20, int), P(21, float), P(22, int)); }; break;
#define RQG(N, Fn) case 240 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, V), P(4, F), P(5, F), P(6, F), P(7, float*), \
                  P(8, int), P(9, int), P(10, int), P(11, float), P(12, int)); }; break;
        RQ(0, rq_matvec_q8_4) RQ(1, rq_matvec_q8_8) RQ3(2, rq_matvec3_q8_4) RQ3(3, rq_matvec3_q8_8)
        RQG(4, rq_glu_q8_4) RQG(5, rq_glu_q8_8)
        RQ(6, rq_matvec_q8_4_r16) RQ(7, rq_matvec_q8_8_r16) RQ3(8, rq_matvec3_q8_4_r16) RQ3(9, rq_matvec3_q8_8_r16)
        RQG(10, rq_glu_q8_4_r16) RQG(11, rq_glu_q8_8_r16)
        GL(0, r_glu_f32) GL(1, r_glu_bf16) GL(2, r_glu_f16) GL(3, r_glu_q8) GL(4, r_glu_q4_block) GL(5, r_glu_q4tp)
        M3(0, r_matvec3_f32) M3(1, r_matvec3_bf16) M3(2, r_matvec3_f16) M3(3, r_matvec3_q8) M3(4, r_matvec3_q4_block) M3(5, r_matvec3_q4tp)
        // the 4-bit embedding gathers (34, 35) and prefill widenings (74, 75)
#define EM(N, Fn) case 30 + N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, const int*), P(4, float*), P(5, int), P(6, float)); }; break;
        EM(4, r_embed_q4_block) EM(5, r_embed_q4tp)
#define WQ(N, Fn) case N: k = [p] { Fn(P(0, V), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, int)); }; break;
        WQ(74, r_widen_q4_block) WQ(75, r_widen_q4tp)
#define PF(N, Fn) case 45 + N: k = [p] { Fn(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int), \
                  P(8, float), P(9, const int*), P(10, int), P(11, F), P(12, F), P(13, F), P(14, int)); }; break;
        PF(0, r_attn_prefill_32) PF(1, r_attn_prefill_64) PF(2, r_attn_prefill_128) PF(3, r_attn_prefill_256)
#define PFT(N, Fn) case 70 + N: k = [p] { Fn(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int), \
                  P(8, float), P(9, const int*), P(10, int), P(11, F), P(12, F), P(13, F), P(14, int)); }; break;
        PFT(0, r_attn_prefill_tc_32) PFT(1, r_attn_prefill_tc_64) PFT(2, r_attn_prefill_tc_128)
        case 60: k = [p] { r_split(P(0, F), P(1, F), P(2, int), P(3, float), P(4, r_u16*), P(5, int), P(6, int), P(7, int), P(8, int),
                       P(9, float*)); }; break;
        case 61: k = [p] { r_i8_widen(P(0, const signed char*), P(1, r_u16*), P(2, long long), P(3, int)); }; break;
        case 62: k = [p] { r_gemm_out(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int), P(8, F),
                       P(9, float)); }; break;
        case 63: k = [p] { r_glu_out(P(0, F), P(1, F), P(2, F), P(3, F), P(4, float*), P(5, int), P(6, int), P(7, int), P(8, F), P(9, F),
                       P(10, float)); }; break;
        case 64: k = [p] { r_split3(P(0, F), P(1, int), P(2, float), P(3, int), P(4, int), P(5, int), P(6, int), P(7, int),
                       P(8, F), P(9, r_u16*), P(10, float*), P(11, F), P(12, r_u16*), P(13, float*), P(14, F), P(15, r_u16*),
                       P(16, float*)); }; break;
        case 65: k = [p] { r_gemm_out3(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, F), P(6, F), P(7, F), P(8, F),
                       P(9, float*), P(10, int), P(11, F), P(12, F), P(13, F), P(14, F), P(15, float*), P(16, int), P(17, F),
                       P(18, int), P(19, int), P(20, float)); }; break;
        case 73: k = [p] { r_residual_split3(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, F),
                       P(8, float), P(9, int), P(10, float), P(11, int), P(12, int), P(13, int), P(14, F), P(15, r_u16*),
                       P(16, float*), P(17, F), P(18, r_u16*), P(19, float*), P(20, F), P(21, r_u16*), P(22, float*)); }; break;
#define GS(N, Fn) case N: k = [p] { Fn(P(0, F), P(1, F), P(2, F), P(3, F), P(4, F), P(5, F), P(6, float), P(7, int), P(8, int), \
                  P(9, int), P(10, F), P(11, r_u16*), P(12, int), P(13, int), P(14, float*)); }; break;
        GS(66, r_glu_split_1) GS(67, r_glu_split_2) GS(68, r_glu_split_4) GS(69, r_glu_split_8)
        case 42: k = [p] { r_qk_rope_append(P(0, float*), P(1, F), P(2, F), P(3, float*), P(4, float*), P(5, F), P(6, F), P(7, int),
                       P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, int), P(15, int), P(16, int),
                       P(17, const int*), P(18, float*), P(19, int), P(20, int)); }; break;
        case 43: k = [p] { r_attn_partial(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, float*), P(5, F), P(6, F), P(7, int),
                       P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, int)); }; break;
        case 44: k = [p] { r_attn_rows(P(0, F), P(1, F), P(2, F), P(3, float* const*), P(4, float* const*), P(5, F), P(6, F), P(7, int),
                       P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, const int*)); }; break;
        case 76: k = [p] { r_attn_chunk(P(0, F), P(1, F), P(2, F), P(3, float*), P(4, float*), P(5, float*), P(6, int), P(7, int),
                       P(8, int), P(9, float), P(10, const int*), P(11, int), P(12, int), P(13, float*), P(14, int*), P(15, F),
                       P(16, int)); }; break;
        // the f16-KV-cache instances (--kv f16): the f32 instance's kind + 128
        typedef const r_u16* H;
        case 128 + 76: k = [p] { r_attn_chunk_h(P(0, F), P(1, H), P(2, H), P(3, float*), P(4, float*), P(5, float*), P(6, int),
                       P(7, int), P(8, int), P(9, float), P(10, const int*), P(11, int), P(12, int), P(13, float*), P(14, int*),
                       P(15, F), P(16, int)); }; break;
        case 128 + 42: k = [p] { r_qk_rope_append_h(P(0, float*), P(1, F), P(2, F), P(3, r_u16*), P(4, r_u16*), P(5, F), P(6, F),
                       P(7, int), P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, int), P(15, int),
                       P(16, int), P(17, const int*), P(18, float*), P(19, int), P(20, int)); }; break;
        case 128 + 43: k = [p] { r_attn_partial_h(P(0, F), P(1, F), P(2, F), P(3, r_u16*), P(4, r_u16*), P(5, F), P(6, F), P(7, int),
                       P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, int)); }; break;
        case 128 + 44: k = [p] { r_attn_rows_h(P(0, F), P(1, F), P(2, F), P(3, r_u16* const*), P(4, r_u16* const*), P(5, F), P(6, F),
                       P(7, int), P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, const int*)); }; break;
#define PFH(N, Fn) case 128 + N: k = [p] { Fn(P(0, F), P(1, H), P(2, H), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int), \
                  P(8, float), P(9, const int*), P(10, int), P(11, F), P(12, F), P(13, F), P(14, int)); }; break;
        PFH(45, r_attn_prefill_h_32) PFH(46, r_attn_prefill_h_64) PFH(47, r_attn_prefill_h_128) PFH(48, r_attn_prefill_h_256)
        PFH(70, r_attn_prefill_tc_h_32) PFH(71, r_attn_prefill_tc_h_64) PFH(72, r_attn_prefill_tc_h_128)
        // the q8-KV-cache instances (--kv q8): the f32 instance's kind + 384
        typedef const r_i8* Q;
        case 384 + 42: k = [p] { r_qk_rope_append_q(P(0, float*), P(1, F), P(2, F), P(3, r_i8*), P(4, r_i8*), P(5, F), P(6, F),
                       P(7, int), P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, int), P(15, int),
                       P(16, int), P(17, const int*), P(18, float*), P(19, int), P(20, int)); }; break;
        case 384 + 43: k = [p] { r_attn_partial_q(P(0, F), P(1, F), P(2, F), P(3, r_i8*), P(4, r_i8*), P(5, F), P(6, F), P(7, int),
                       P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, int)); }; break;
        case 384 + 44: k = [p] { r_attn_rows_q(P(0, F), P(1, F), P(2, F), P(3, r_i8* const*), P(4, r_i8* const*), P(5, F), P(6, F),
                       P(7, int), P(8, int), P(9, float), P(10, int), P(11, F), P(12, int), P(13, float), P(14, float*), P(15, float*),
                       P(16, float*), P(17, int), P(18, int), P(19, int), P(20, float), P(21, const int*), P(22, int), P(23, int),
                       P(24, float*), P(25, int*), P(26, F), P(27, const int*)); }; break;
#define PFQ(N, Fn) case 384 + N: k = [p] { Fn(P(0, F), P(1, Q), P(2, Q), P(3, float*), P(4, int), P(5, int), P(6, int), P(7, int), \
                  P(8, float), P(9, const int*), P(10, int), P(11, F), P(12, F), P(13, F), P(14, int)); }; break;
        PFQ(45, r_attn_prefill_q_32) PFQ(46, r_attn_prefill_q_64) PFQ(47, r_attn_prefill_q_128) PFQ(48, r_attn_prefill_q_256)
        PFQ(70, r_attn_prefill_tc_q_32) PFQ(71, r_attn_prefill_tc_q_64)
        default: return 500;
    }
    return run_blocks(k, gx, gy, gz, bx);
}
