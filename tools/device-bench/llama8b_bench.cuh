// What gemv_bench.cu and mma_gemv.cu share: resident.cu (with the declarations its CPU-emulation branches name, never
// called on the device), CK, the llama-8b decode shapes and their int8 weights with f32 row and column scales over 32
// layers of distinct weights (7 GB: nothing stays in L2), launches with or without programmatic stream serialization,
// and the best-of-reps timing of a body as stream launches or as one replayed graph.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
__device__ float emulated_f16_to_f32(unsigned short h);
__device__ void emulated_pdl_wait();
__device__ void emulated_mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
#include "resident.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static const int H = 4096, I = 14336, KV = 1024, L = 32;

struct Layer { signed char *q, *k, *v, *o, *g, *u, *d; float *rs[7], *cf[7]; };

__global__ void fill_kernel(signed char* d, long long n, unsigned seed) {
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
        unsigned s = (unsigned) i * 2654435761u ^ seed;
        s ^= s >> 15; s *= 2246822519u; s ^= s >> 13;
        d[i] = (signed char) (s >> 24);
    }
}
static void fill_i8(signed char* d, size_t n, unsigned seed) {
    fill_kernel<<<1024, 256>>>(d, (long long) n, seed * 97u + 1u);
    CK(cudaGetLastError());
}
static float* fvec(int n, float lo, float hi, unsigned seed) {
    std::vector<float> h(n);
    unsigned s = seed;
    for (int i = 0; i < n; i++) { s = s * 1664525u + 1013904223u; h[i] = lo + (hi - lo) * ((s >> 8) / 16777216.f); }
    float* d; CK(cudaMalloc(&d, 4L * n)); CK(cudaMemcpy(d, h.data(), 4L * n, cudaMemcpyHostToDevice));
    return d;
}

// The ceiling: grid-stride 16-byte loads over n uint4, nothing computed but an xor (sink keeps the loads).
__global__ void __launch_bounds__(256) stream_read(const uint4* p, long long n, unsigned* sink) {
    unsigned a = 0;
    for (long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
        uint4 v = r_ld16(p + i);
        a ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (a == 0x12345678u) sink[0] = a;
}

// The 7 matrices of a layer (q, k, v, o, gate, up, down): bytes, rows, columns.
static const size_t SZ[7] = {(size_t) H * H, (size_t) KV * H, (size_t) KV * H, (size_t) H * H, (size_t) I * H, (size_t) I * H, (size_t) H * I};
static const int ROWS[7] = {H, KV, KV, H, I, I, H}, COLS[7] = {H, H, H, H, H, H, I};

// L layers of random int8 weights in one allocation (*all, layerBytes each), row scales in [0.001, 0.002), column
// scales in [0.5, 1.5); *wbytes = the weight bytes of one token.
static std::vector<Layer> make_layers(signed char** all, size_t* layerBytes, long long* wbytes) {
    std::vector<Layer> Ls(L);
    *layerBytes = 0; for (size_t s : SZ) *layerBytes += s;
    *wbytes = 0;
    CK(cudaMalloc(all, *layerBytes * L));
    for (int l = 0; l < L; l++) {
        signed char* p = *all + *layerBytes * l;
        signed char** dst[7] = {&Ls[l].q, &Ls[l].k, &Ls[l].v, &Ls[l].o, &Ls[l].g, &Ls[l].u, &Ls[l].d};
        for (int j = 0; j < 7; j++) {
            *dst[j] = p; fill_i8(p, SZ[j], 77u * l + j); p += SZ[j]; *wbytes += SZ[j];
            Ls[l].rs[j] = fvec(ROWS[j], 0.001f, 0.002f, 11u * l + j);
            Ls[l].cf[j] = fvec(COLS[j], 0.5f, 1.5f, 13u * l + j);
        }
    }
    return Ls;
}

// The outputs a product kind writes (kd: 0 q/k/v, 1 o and 3 down into the residual x, 2 gate+up's SwiGLU into g),
// with their lengths; unused slots null / 0.
static void kind_outputs(int kd, float* q, float* k, float* v, float* g, float* x, float* (&outs)[3], int (&outn)[3]) {
    for (int o = 0; o < 3; o++) { outs[o] = nullptr; outn[o] = 0; }
    if (kd == 0) { outs[0] = q; outn[0] = H; outs[1] = k; outn[1] = KV; outs[2] = v; outn[2] = KV; }
    else if (kd == 2) { outs[0] = g; outn[0] = I; }
    else { outs[0] = x; outn[0] = H; }
}

template <bool PDL, typename... A, typename... P>
static void launchg(void (*k)(A...), dim3 grid, int threads, cudaStream_t st, P... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = dim3(threads); cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = PDL ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}
template <typename... A, typename... P>
static void launchp(bool pdl, void (*k)(A...), dim3 grid, int threads, cudaStream_t st, P... args) {
    if (pdl) launchg<true>(k, grid, threads, st, args...); else launchg<false>(k, grid, threads, st, args...);
}

// The best of reps runs of body (after 3 warm-up runs), in µs: launched as it is, or captured once and replayed
// as a graph.
template <typename Body>
static float best_us(Body&& body, bool graph, cudaStream_t st, cudaEvent_t e0, cudaEvent_t e1, int reps) {
    cudaGraphExec_t ex = nullptr;
    if (graph) {
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        body();
        CK(cudaStreamEndCapture(st, &gr));
        CK(cudaGraphInstantiate(&ex, gr, 0));
        CK(cudaGraphDestroy(gr));
    }
    auto once = [&]() { if (graph) CK(cudaGraphLaunch(ex, st)); else body(); };
    for (int i = 0; i < 3; i++) once();
    CK(cudaStreamSynchronize(st));
    float best = 1e30f;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        once();
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < best) best = ms;
    }
    if (ex) CK(cudaGraphExecDestroy(ex));
    return best * 1000.f;
}

// One kind of the shipped resident.cu decode products of layer w (kd: 0 q/k/v from x, normed; 1 o: x += W·att; 2
// gate+up+SwiGLU from x, normed, into g; 3 down: x += W·g), launched plainly or with programmatic serialization.
static void launch_shipped(int kd, const Layer& w, bool pdl, cudaStream_t st, float* x, float* q, float* k, float* v, float* g,
                           const float* att, float eps) {
    if (kd == 0) launchp(pdl, r_matvec3_q8, dim3(H / 8 + KV / 4), 256, st, (const void*) w.q, (const float*) w.rs[0], (const float*) w.cf[0], (const float*) nullptr, q, H,
                         (const void*) w.k, (const float*) w.rs[1], (const float*) w.cf[1], (const float*) nullptr, k, KV,
                         (const void*) w.v, (const float*) w.rs[2], (const float*) w.cf[2], (const float*) nullptr, v, KV, (const float*) x, H, 1, eps);
    if (kd == 1) launchp(pdl, r_matvec_q8, dim3(H / 8), 256, st, (const void*) w.o, (const float*) w.rs[3], (const float*) w.cf[3], (const float*) nullptr, (const float*) att, x, H, H, 1, 0, 0.f);
    if (kd == 2) launchp(pdl, r_glu_q8, dim3(I / 8), 256, st, (const void*) w.g, (const float*) w.rs[4], (const float*) w.cf[4], (const void*) w.u, (const float*) w.rs[5], (const float*) w.cf[5],
                         (const float*) x, g, I, H, 1, eps);
    if (kd == 3) launchp(pdl, r_matvec_q8, dim3(H / 8), 256, st, (const void*) w.d, (const float*) w.rs[6], (const float*) w.cf[6], (const float*) nullptr, (const float*) g, x, H, I, 1, 0, 0.f);
}

// What a candidate product kernel's arguments say about one kind (kd as launch_shipped) of one layer: up to 3
// matrices of one input (q/k/v; gate and up; o or down alone), matrix m owning row blocks [rb[m], rb[m + 1]).
struct KindArgs {
    const signed char* w[3];
    const float* rs[3];
    const float* cf[3];
    const float* bias[3];
    float* y[3];
    int rows[3];
    int rb[4];         // GLU: rb[1] = rb[2] = rb[3] = all row blocks (gate and up share them)
    const float* x;
    int cols, normed, accumulate;
    float eps;
};

// The host side the product benches share (mma_gemv, hmma_gemv): 32 layers of random int8 weights, the activations,
// the shipped kinds (launch_shipped), the check of a candidate against them and the timing of both.
struct ProductBench {
    std::vector<Layer> Ls;
    signed char* all; size_t layerBytes; long long wbytes;
    float *x, *q, *k, *v, *g, *att;
    std::vector<float> xinit, attinit, ginit;
    cudaStream_t st; cudaEvent_t e0, e1;
    int reps;
    const float eps = 1e-5f;
    const char* kinds[4] = {"qkv", "o", "glu", "down"};
    long long kindBytes[4];

    explicit ProductBench(int reps_) : reps(reps_) {
        cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
        Ls = make_layers(&all, &layerBytes, &wbytes);
        CK(cudaDeviceSynchronize());
        x = fvec(H, -1.f, 1.f, 5); att = fvec(H, -1.f, 1.f, 6); g = fvec(I, -0.3f, 0.3f, 7);
        xinit.resize(H); attinit.resize(H); ginit.resize(I);
        CK(cudaMemcpy(xinit.data(), x, 4L * H, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(attinit.data(), att, 4L * H, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ginit.data(), g, 4L * I, cudaMemcpyDeviceToHost));
        CK(cudaMalloc(&q, 4L * H)); CK(cudaMalloc(&k, 4L * KV)); CK(cudaMalloc(&v, 4L * KV));
        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
        CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
        long long sz[4] = {(long long) (SZ[0] + SZ[1] + SZ[2]), (long long) SZ[3], (long long) (SZ[4] + SZ[5]), (long long) SZ[6]};
        for (int kd = 0; kd < 4; kd++) kindBytes[kd] = sz[kd] * L;
        printf("{\"gpu\":\"%s\",\"sms\":%d,\"weight_bytes\":%lld}\n", prop.name, prop.multiProcessorCount, wbytes);
    }

    void shipped(int kd, int l, bool pdl) { launch_shipped(kd, Ls[l], pdl, st, x, q, k, v, g, att, eps); }

    // kind kd of layer l as a candidate's arguments; blocks of rb rows (rbGlu rows of gate and of up for GLU)
    KindArgs args(int kd, int l, int rb, int rbGlu) {
        Layer& w = Ls[l];
        KindArgs A = {};
        A.eps = eps;
        if (kd == 0) {
            signed char* ws[3] = {w.q, w.k, w.v}; float* ys[3] = {q, k, v}; int rr[3] = {H, KV, KV};
            for (int m = 0; m < 3; m++) {
                A.w[m] = ws[m]; A.rs[m] = w.rs[m]; A.cf[m] = w.cf[m]; A.y[m] = ys[m]; A.rows[m] = rr[m];
                A.rb[m + 1] = A.rb[m] + (rr[m] + rb - 1) / rb;
            }
            A.x = x; A.cols = H; A.normed = 1;
        } else if (kd == 2) {
            A.w[0] = w.g; A.rs[0] = w.rs[4]; A.cf[0] = w.cf[4]; A.w[1] = w.u; A.rs[1] = w.rs[5]; A.cf[1] = w.cf[5];
            A.y[0] = g; A.rows[0] = A.rows[1] = I; A.rb[1] = A.rb[2] = A.rb[3] = (I + rbGlu - 1) / rbGlu;
            A.x = x; A.cols = H; A.normed = 1;
        } else {
            int j = kd == 1 ? 3 : 6;
            A.w[0] = kd == 1 ? w.o : w.d; A.rs[0] = w.rs[j]; A.cf[0] = w.cf[j]; A.y[0] = x; A.rows[0] = H;
            A.rb[1] = A.rb[2] = A.rb[3] = H / rb;
            A.x = kd == 1 ? att : g; A.cols = kd == 1 ? H : I; A.accumulate = 1;
        }
        return A;
    }

    // Kind kd of layer 0 with every input (x, att, g) times s: the shipped kernel, then cand(pdl) plainly and with
    // programmatic serialization (a second launch: counters must have reset), outputs NaN-filled before each; a
    // check line per candidate run (max |Δ| ≤ 2e-5 · max |y|); whether both passed.
    template <typename Cand>
    bool check(int kd, float s, const char* name, Cand&& cand) {
        float* outs[3]; int outn[3];
        kind_outputs(kd, q, k, v, g, x, outs, outn);
        std::vector<float> xs(xinit), gs(ginit), as(attinit);
        for (auto& e : xs) e *= s;
        for (auto& e : gs) e *= s;
        for (auto& e : as) e *= s;
        std::vector<float> ref;
        bool ok = true;
        for (int pass = 0; pass < 3; pass++) {
            CK(cudaMemcpyAsync(x, xs.data(), 4L * H, cudaMemcpyHostToDevice, st));
            CK(cudaMemcpyAsync(att, as.data(), 4L * H, cudaMemcpyHostToDevice, st));
            CK(cudaMemcpyAsync(g, gs.data(), 4L * I, cudaMemcpyHostToDevice, st));
            for (int o = 0; o < 3; o++) if (outs[o] && kd != 1 && kd != 3) CK(cudaMemsetAsync(outs[o], 0xff, 4L * outn[o], st));
            if (pass == 0) shipped(kd, 0, false); else cand(pass == 2);
            CK(cudaStreamSynchronize(st));
            CK(cudaGetLastError());
            std::vector<float> cur;
            for (int o = 0; o < 3; o++) if (outs[o]) { size_t a0 = cur.size(); cur.resize(a0 + outn[o]); CK(cudaMemcpy(cur.data() + a0, outs[o], 4L * outn[o], cudaMemcpyDeviceToHost)); }
            if (pass == 0) { ref = cur; continue; }
            double md = 0, mx = 0;
            for (size_t i = 0; i < ref.size(); i++) {
                double d = fabs((double) ref[i] - cur[i]);
                if (!(d <= md)) md = d != d ? INFINITY : d;
                mx = fmax(mx, fabs(ref[i]));
            }
            bool p = md <= 2e-5 * mx;
            ok &= p;
            printf("{\"check\":\"%s %s x*%g%s vs resident.cu\",\"max_abs_diff\":%.3g,\"max_abs\":%.3g,\"pass\":%s}\n",
                   name, kinds[kd], s, pass == 2 ? " (pdl, 2nd launch)" : "", md, mx, p ? "true" : "false");
            fflush(stdout);
        }
        CK(cudaMemcpy(x, xinit.data(), 4L * H, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(att, attinit.data(), 4L * H, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(g, ginit.data(), 4L * I, cudaMemcpyHostToDevice));
        return ok;
    }

    // One line: the chain q/k/v, o, gate+up, down × 32 layers with PDL in one graph (no attention), then each kind's
    // 32 launches alone; launch(kd, l) launches kind kd of layer l programmatically.
    template <typename Launch>
    void time_chain(const char* name, int round, Launch&& launch) {
        CK(cudaMemcpy(x, xinit.data(), 4L * H, cudaMemcpyHostToDevice));
        float t = best_us([&] { for (int l = 0; l < L; l++) for (int kd = 0; kd < 4; kd++) launch(kd, l); }, true, st, e0, e1, reps);
        printf("{\"variant\":\"%s chain\",\"round\":%d,\"us_per_token\":%.1f,\"TBps\":%.3f", name, round, t, wbytes / t / 1e6);
        for (int kd = 0; kd < 4; kd++) {
            float u = best_us([&] { for (int l = 0; l < L; l++) launch(kd, l); }, true, st, e0, e1, reps);
            printf(",\"%s_us\":%.1f,\"%s_TBps\":%.3f", kinds[kd], u, kinds[kd], kindBytes[kd] / u / 1e6);
        }
        printf("}\n"); fflush(stdout);
    }
    void time_shipped(int round) { time_chain("resident.cu", round, [&](int kd, int l) { shipped(kd, l, true); }); }
};
