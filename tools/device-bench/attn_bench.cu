// Prefill-attention microbenchmark for the H200 (no Java needed): resident.cu's r_attn_prefill_D (f32 SIMT) and
// r_attn_prefill_tc_D (tensor cores, f16 parts) on llama-8b-like shapes (32 query heads, 8 kv heads, head dim 128,
// a 512-token chunk with 0 or 512 earlier keys) and a few others, each checked against a double-precision reference
// on sampled rows, then timed with CUDA events (32 launches = the 32 layers of one chunk). Build here:
// tools/device-bench/build-attn-bench.sh; run on the device: .gpu/b8/attn_bench. One JSON line per case.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <random>
#include <cuda_runtime.h>
__device__ float emulated_f16_to_f32(unsigned short h);
__device__ void emulated_pdl_wait();
__device__ void emulated_mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
#include "resident.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

typedef void (*Kern)(const float*, const float*, const float*, float*, int, int, int, int, float, const int*, int, const float*);

// heavy: key 0's values times 2^vlog2 and the scores shifted through Q's column 0 (1 in every query row) and the keys'
// column 0 — 1: key 0 scores 48 below the rest (p ≈ 1e-21); 2: key 0 is the largest of the first 32-key tile (48 below
// the later keys, the rest of that tile 60 below), so rows past key 31 must lower their units again.
static void run_case(int hd, int heads, int kvh, int T, int pos0, int window, float qmag, float kmag, int reps, float vgrow = 0.f,
                     int heavy = 0, int vlog2 = 0) {
    int D = hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : 256;
    int ctx = pos0 + T, kvDim = kvh * hd, G = heads / kvh;
    std::mt19937 rng(hd * 131 + T + pos0);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> q((size_t) T * heads * hd), k((size_t) ctx * kvDim), v((size_t) ctx * kvDim);
    for (auto& x : q) x = nd(rng) * qmag;
    for (auto& x : k) x = nd(rng) * kmag;
    for (auto& x : v) x = nd(rng);
    for (int j = 0; j < ctx; j++) for (int c = 0; c < kvDim; c++) v[(size_t) j * kvDim + c] *= exp2f(j * vgrow);
    float scale = 1.f / sqrtf((float) hd);
    if (heavy) {
        for (size_t i = 0; i < (size_t) T * heads; i++) q[i * hd] = 1.f;
        for (int g = 0; g < kvh; g++) {
            k[(size_t) g * hd] = -48.f / scale;
            for (int c = 0; c < hd; c++) v[(size_t) g * hd + c] *= exp2f((float) vlog2);
            if (heavy == 2) for (int j = 1; j < 32 && j < ctx; j++) k[(size_t) j * kvDim + g * hd] = -60.f / scale;
        }
    }
    float *dq, *dk, *dv, *dout[2];
    int* dpos;
    size_t on = (size_t) T * heads * hd;
    CK(cudaMalloc(&dq, q.size() * 4)); CK(cudaMalloc(&dk, k.size() * 4)); CK(cudaMalloc(&dv, v.size() * 4));
    CK(cudaMalloc(&dout[0], on * 4)); CK(cudaMalloc(&dout[1], on * 4)); CK(cudaMalloc(&dpos, 4));
    CK(cudaMemcpy(dq, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk, k.data(), k.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dpos, &pos0, 4, cudaMemcpyHostToDevice));
    Kern simt = D == 32 ? r_attn_prefill_32 : D == 64 ? r_attn_prefill_64 : D == 128 ? r_attn_prefill_128 : r_attn_prefill_256;
    Kern tc = D == 32 ? r_attn_prefill_tc_32 : D == 64 ? r_attn_prefill_tc_64 : r_attn_prefill_tc_128;
    int rowsS = D >= 128 ? 32 : 64, rowsT = 64;
    auto grid = [&](int rows) { int nH = G < rows ? G : rows, nT = rows / nH; return dim3((T + nT - 1) / nT, kvh * ((G + nH - 1) / nH)); };
    Kern ks[2] = {simt, tc};
    int rows[2] = {rowsS, rowsT};
    float ms[2];
    std::vector<float> got[2];
    for (int w = 0; w < 2; w++) {
        CK(cudaMemset(dout[w], 0, on * 4));
        ks[w]<<<grid(rows[w]), 128>>>(dq, dk, dv, dout[w], T, heads, kvh, hd, scale, dpos, window, nullptr);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        cudaEvent_t a, b;
        cudaEventCreate(&a); cudaEventCreate(&b);
        cudaEventRecord(a);
        for (int r = 0; r < reps; r++) ks[w]<<<grid(rows[w]), 128>>>(dq, dk, dv, dout[w], T, heads, kvh, hd, scale, dpos, window, nullptr);
        cudaEventRecord(b);
        CK(cudaEventSynchronize(b));
        cudaEventElapsedTime(&ms[w], a, b);
        got[w].resize(on);
        CK(cudaMemcpy(got[w].data(), dout[w], on * 4, cudaMemcpyDeviceToHost));
    }
    // double reference on sampled rows (every 7th token, every head; always the last token)
    double err[2] = {0, 0}, ref_max = 0;
    std::vector<double> sc(ctx), o(hd);
    for (int t = 0; t < T; t++) {
        if (t % 7 != 0 && t != T - 1) continue;
        for (int h = 0; h < heads; h++) {
            int p = pos0 + t, first = window > 0 && p >= window ? p - window + 1 : 0, g = h / G;
            double M = -1e300;
            for (int j = first; j <= p; j++) {
                double d = 0;
                for (int c = 0; c < hd; c++) d += (double) q[((size_t) t * heads + h) * hd + c] * k[(size_t) j * kvDim + g * hd + c];
                sc[j] = d * scale;
                if (sc[j] > M) M = sc[j];
            }
            double L = 0;
            for (int j = first; j <= p; j++) L += sc[j] = exp(sc[j] - M);
            for (int c = 0; c < hd; c++) o[c] = 0;
            for (int j = first; j <= p; j++) for (int c = 0; c < hd; c++) o[c] += sc[j] * v[(size_t) j * kvDim + g * hd + c];
            double mag = 0;   // errors relative to the row's honest scale, Σ p_j·max|v_j| / Σ p
            for (int j = first; j <= p; j++) {
                double vj = 0;
                for (int c = 0; c < hd; c++) vj = fmax(vj, fabs(v[(size_t) j * kvDim + g * hd + c]));
                mag += sc[j] * vj;
            }
            mag /= L;
            for (int c = 0; c < hd; c++) {
                double want = o[c] / L;
                ref_max = fmax(ref_max, fabs(want));
                for (int w = 0; w < 2; w++) err[w] = fmax(err[w], fabs(got[w][((size_t) t * heads + h) * hd + c] - want) / mag);
            }
        }
    }
    printf("{\"hd\": %d, \"heads\": %d, \"kvHeads\": %d, \"T\": %d, \"pos0\": %d, \"window\": %d, \"qmag\": %g, \"kmag\": %g, "
           "\"vgrow\": %g, \"heavy\": %d, \"vlog2\": %d, \"simt_us\": %.1f, \"tc_us\": %.1f, \"speedup\": %.2f, \"simt_err\": %.3g, \"tc_err\": %.3g, \"ref_max\": %.3g}\n",
           hd, heads, kvh, T, pos0, window, qmag, kmag, vgrow, heavy, vlog2, 1000 * ms[0] / reps, 1000 * ms[1] / reps, ms[0] / ms[1], err[0], err[1], ref_max);
    fflush(stdout);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout[0]); cudaFree(dout[1]); cudaFree(dpos);
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 32;
    run_case(128, 32, 8, 512, 0, 0, 1.f, 1.f, reps);       // llama-8b pp512, first chunk
    run_case(128, 32, 8, 512, 512, 0, 1.f, 1.f, reps);     // second chunk after 512 keys
    run_case(128, 32, 8, 512, 0, 0, 3.f, 3.f, reps);       // sharper softmax
    run_case(128, 32, 8, 512, 0, 0, 1e-3f, 1e4f, reps);    // magnitudes far from 1 (the scales)
    run_case(128, 32, 8, 100, 37, 64, 1.f, 1.f, reps);     // ragged chunk, sliding window
    run_case(128, 32, 8, 512, 0, 0, 1.f, 1.f, reps, 0.05f);   // values growing 2^(j/20) along the keys
    run_case(64, 1, 1, 64, 0, 0, 1.f, 1.f, reps, 0.f, 1, 40);   // key 0 negligible (p ≈ 1e-21), its values ×2^40
    run_case(64, 1, 1, 64, 0, 0, 1.f, 1.f, reps, 0.f, 1, 20);
    run_case(64, 1, 1, 64, 0, 0, 1.f, 1.f, reps, 0.f, 2, 30);   // key 0 the first tile's largest, negligible later, ×2^30
    run_case(64, 1, 1, 64, 0, 0, 1.f, 1.f, reps, 0.f, 2, 20);
    run_case(128, 32, 8, 512, 0, 0, 1.f, 1.f, reps, 0.f, 1, 40);   // the same on the llama-8b shape
    run_case(128, 32, 8, 512, 0, 0, 1.f, 1.f, reps, 0.f, 2, 30);
    run_case(64, 16, 4, 256, 100, 0, 1.f, 1.f, reps);
    run_case(40, 12, 4, 77, 5, 0, 1.f, 1.f, reps);
    return 0;
}
