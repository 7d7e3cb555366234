// The prefill GEMMs of one llama-8b chunk (32 layers, T tokens, `parts` 16-bit activation parts per token) as
// ResidentForward issues them (cublasGemmEx, f16 weights and parts, f32 C, one GEMM per product) against the same
// work with the products of one input batched: q/k/v as one cublasGemmBatchedEx of six 1024-row blocks writing one
// C of 6144 rows (ldc 6144), gate/up as one cublasGemmStridedBatchedEx of 2, or as cublasGemmGroupedBatchedEx; and
// against the bound's calls (bf16 in, bf16 out, one GEMM per product, as torch.matmul). Weights: 2 layer sets of
// random f16, alternated. Prints µs per chunk per way (best of 5) and each product's own µs per chunk.
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o gemm_batch gemm_batch.cu -lcublas   Run: gemm_batch [T] [parts]
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)
#define CB(x) do { cublasStatus_t e = (x); if (e != CUBLAS_STATUS_SUCCESS) { printf("%s: %d\n", #x, (int) e); exit(1); } } while (0)

static const int H = 4096, I = 14336, KV = 1024, L = 32;
enum { Q, K_, V, O, G, U, D, NW };
static const int ROWS[NW] = {H, KV, KV, H, I, I, H}, COLS[NW] = {H, H, H, H, H, H, I};
static const char* NAME[NW] = {"q", "k", "v", "o", "gate", "up", "down"};

__global__ void fill(__half* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        unsigned h = (unsigned) i * 2654435761u ^ seed;
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = __float2half((int) (h % 255u) - 127);
    }
}

struct Set { __half* w[NW]; };

int main(int argc, char** argv) {
    int T = argc > 1 ? atoi(argv[1]) : 512, parts = argc > 2 ? atoi(argv[2]) : 1, n = T * parts;
    cublasHandle_t hd;
    CB(cublasCreate(&hd));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    CB(cublasSetStream(hd, st));
    Set set[2];
    for (auto& s : set)
        for (int i = 0; i < NW; i++) {
            // q/k/v and gate/up contiguous (stacked rows), as a batched call wants them; the others alone
            size_t ne = (size_t) ROWS[i] * COLS[i];
            if (i == K_ || i == V) { s.w[i] = s.w[i - 1] + (size_t) ROWS[i - 1] * COLS[i - 1]; continue; }
            if (i == U) { s.w[i] = s.w[G] + (size_t) ROWS[G] * COLS[G]; continue; }
            if (i == Q) ne = (size_t) (H + 2 * KV) * H;
            if (i == G) ne = (size_t) 2 * I * H;
            CK(cudaMalloc(&s.w[i], ne * 2));
            fill<<<4096, 256>>>(s.w[i], ne, 17u * i + (unsigned) (&s - set));
        }
    // activations: three distinct parts regions for q/k/v (each its own column scales), two for gate/up
    __half *bx, *bi;
    CK(cudaMalloc(&bx, (size_t) 3 * n * H * 2));
    CK(cudaMalloc(&bi, (size_t) n * I * 2));
    fill<<<4096, 256>>>(bx, (size_t) 3 * n * H, 99);
    fill<<<4096, 256>>>(bi, (size_t) n * I, 98);
    float* c;
    CK(cudaMalloc(&c, (size_t) 2 * n * I * 4));
    CK(cudaDeviceSynchronize());
    float one = 1.f, zero = 0.f;
    __half hone = __float2half(1.f), hzero = __float2half(0.f);
    (void) hone; (void) hzero;
    // device pointer arrays of the batched q/k/v call, per set: six 1024-row blocks (q's four share its parts)
    const void** dA[2]; const void** dB; void** dC;
    {
        const void* hB[6]; void* hC[6];
        for (int j = 0; j < 6; j++) {
            int m = j < 4 ? 0 : j - 3;   // parts region: q, k, v
            hB[j] = bx + (size_t) m * n * H;
            hC[j] = c + (size_t) j * 1024;   // rows j·1024.. of one [6144, n] C
        }
        CK(cudaMalloc(&dB, sizeof hB)); CK(cudaMemcpy(dB, hB, sizeof hB, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dC, sizeof hC)); CK(cudaMemcpy(dC, hC, sizeof hC, cudaMemcpyHostToDevice));
        for (int s = 0; s < 2; s++) {
            const void* hA[6];
            for (int j = 0; j < 6; j++) hA[j] = set[s].w[Q] + (size_t) j * 1024 * H;
            CK(cudaMalloc(&dA[s], sizeof hA)); CK(cudaMemcpy(dA[s], hA, sizeof hA, cudaMemcpyHostToDevice));
        }
    }
    const void** gA[2]; const void** gB; void** gC;   // the grouped call's pointer arrays: q, k, v
    {
        const void* B[3] = {bx, bx + (size_t) n * H, bx + (size_t) 2 * n * H};
        void* C[3] = {c, c + (size_t) H * n, c + (size_t) (H + KV) * n};
        CK(cudaMalloc(&gB, sizeof B)); CK(cudaMemcpy(gB, B, sizeof B, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&gC, sizeof C)); CK(cudaMemcpy(gC, C, sizeof C, cudaMemcpyHostToDevice));
        for (int s = 0; s < 2; s++) {
            const void* A[3] = {set[s].w[Q], set[s].w[K_], set[s].w[V]};
            CK(cudaMalloc(&gA[s], sizeof A)); CK(cudaMemcpy(gA[s], A, sizeof A, cudaMemcpyHostToDevice));
        }
    }
    auto gemm = [&](int s, int i, cudaDataType ct, cudaDataType it) {
        const __half* b = i == D ? bi : bx + (size_t) (i == K_ ? 1 : i == V ? 2 : 0) * n * H;
        CB(cublasGemmEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, ROWS[i], n, COLS[i], &one, set[s].w[i], it, COLS[i], b, it, COLS[i],
                        &zero, c, ct, ROWS[i], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto qkvBatched = [&](int s) {
        CB(cublasGemmBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, 1024, n, H, &one, dA[s], CUDA_R_16F, H, dB, CUDA_R_16F, H,
                               &zero, dC, CUDA_R_32F, H + 2 * KV, 6, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto guStrided = [&](int s) {
        CB(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, I, n, H, &one, set[s].w[G], CUDA_R_16F, H, (long long) I * H,
                                      bx, CUDA_R_16F, H, (long long) n * H, &zero, c, CUDA_R_32F, I, (long long) I * n, 2,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto kvStrided = [&](int s) {   // k and v (one shape, copies one matrix apart) as one strided call; q alone
        CB(cublasGemmStridedBatchedEx(hd, CUBLAS_OP_T, CUBLAS_OP_N, KV, n, H, &one, set[s].w[K_], CUDA_R_16F, H, (long long) KV * H,
                                      bx + (size_t) n * H, CUDA_R_16F, H, (long long) n * H, &zero, c, CUDA_R_32F, KV, (long long) KV * n, 2,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    auto qkvGrouped = [&](int s) {
        cublasOperation_t ta[3] = {CUBLAS_OP_T, CUBLAS_OP_T, CUBLAS_OP_T}, tb[3] = {CUBLAS_OP_N, CUBLAS_OP_N, CUBLAS_OP_N};
        int m[3] = {H, KV, KV}, nn[3] = {n, n, n}, k[3] = {H, H, H}, ld[3] = {H, H, H}, ldc[3] = {H, KV, KV}, gs[3] = {1, 1, 1};
        float al[3] = {1, 1, 1}, be[3] = {0, 0, 0};
        // (the pointer arrays in device memory, the rest on the host); a refusal is reported once and skipped
        static bool refused = false;
        if (refused) return;
        cublasStatus_t rc = (cublasGemmGroupedBatchedEx(hd, ta, tb, m, nn, k, al, gA[s], CUDA_R_16F, ld, gB, CUDA_R_16F, ld, be, gC, CUDA_R_32F, ldc, 3, gs,
                                      CUBLAS_COMPUTE_32F));
        if (rc != CUBLAS_STATUS_SUCCESS) { printf("cublasGemmGroupedBatchedEx (f16 in, f32 out): status %d, skipped\n", (int) rc); refused = true; }
    };
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto time = [&](const char* what, auto&& chunk) {
        for (int w = 0; w < 2; w++) chunk();
        CK(cudaStreamSynchronize(st));
        float best = 1e30f;
        for (int r = 0; r < 5; r++) {
            CK(cudaEventRecord(e0, st));
            chunk();
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            if (ms < best) best = ms;
        }
        printf("%-34s %9.1f us per chunk  (%.0f tok/s)\n", what, best * 1000, T / (best / 1000));
        return best;
    };
    printf("T=%d parts=%d (n=%d)\n", T, parts, n);
    for (int i = 0; i < NW; i++) {
        char buf[64]; snprintf(buf, sizeof buf, "  %s alone", NAME[i]);
        time(buf, [&] { for (int l = 0; l < L; l++) gemm(l & 1, i, CUDA_R_32F, CUDA_R_16F); });
    }
    time("  q/k/v batched (6 x 1024 rows)", [&] { for (int l = 0; l < L; l++) qkvBatched(l & 1); });
    time("  q/k/v grouped (3 groups)", [&] { for (int l = 0; l < L; l++) qkvGrouped(l & 1); });
    time("  gate/up strided batched (2)", [&] { for (int l = 0; l < L; l++) guStrided(l & 1); });
    time("  k/v strided batched (2)", [&] { for (int l = 0; l < L; l++) kvStrided(l & 1); });
    time("  k + v alone", [&] { for (int l = 0; l < L; l++) { gemm(l & 1, K_, CUDA_R_32F, CUDA_R_16F); gemm(l & 1, V, CUDA_R_32F, CUDA_R_16F); } });
    time("q + strided k/v + o + strided gate/up + down", [&] {
        for (int l = 0; l < L; l++) { gemm(l & 1, Q, CUDA_R_32F, CUDA_R_16F); kvStrided(l & 1); gemm(l & 1, O, CUDA_R_32F, CUDA_R_16F); guStrided(l & 1); gemm(l & 1, D, CUDA_R_32F, CUDA_R_16F); }
    });
    time("q + k + v + o + strided gate/up + down", [&] {
        for (int l = 0; l < L; l++) { for (int i : {Q, K_, V, O}) gemm(l & 1, i, CUDA_R_32F, CUDA_R_16F); guStrided(l & 1); gemm(l & 1, D, CUDA_R_32F, CUDA_R_16F); }
    });
    time("separate (shipped)", [&] { for (int l = 0; l < L; l++) for (int i = 0; i < NW; i++) gemm(l & 1, i, CUDA_R_32F, CUDA_R_16F); });
    time("bound calls (bf16 in/out)", [&] { for (int l = 0; l < L; l++) for (int i = 0; i < NW; i++) gemm(l & 1, i, CUDA_R_16BF, CUDA_R_16BF); });
    time("batched q/k/v + strided gate/up", [&] {
        for (int l = 0; l < L; l++) { qkvBatched(l & 1); gemm(l & 1, O, CUDA_R_32F, CUDA_R_16F); guStrided(l & 1); gemm(l & 1, D, CUDA_R_32F, CUDA_R_16F); }
    });
    time("grouped q/k/v + strided gate/up", [&] {
        for (int l = 0; l < L; l++) { qkvGrouped(l & 1); gemm(l & 1, O, CUDA_R_32F, CUDA_R_16F); guStrided(l & 1); gemm(l & 1, D, CUDA_R_32F, CUDA_R_16F); }
    });
    void* ws; size_t wsz = 32u << 20;
    CK(cudaMalloc(&ws, wsz));
    CB(cublasSetWorkspace(hd, ws, wsz));
    time("separate, 32 MiB workspace", [&] { for (int l = 0; l < L; l++) for (int i = 0; i < NW; i++) gemm(l & 1, i, CUDA_R_32F, CUDA_R_16F); });
    time("batched + strided, 32 MiB workspace", [&] {
        for (int l = 0; l < L; l++) { qkvBatched(l & 1); gemm(l & 1, O, CUDA_R_32F, CUDA_R_16F); guStrided(l & 1); gemm(l & 1, D, CUDA_R_32F, CUDA_R_16F); }
    });
    int ver; CB(cublasGetVersion(hd, &ver));
    printf("cublas %d\n", ver);
    return 0;
}
