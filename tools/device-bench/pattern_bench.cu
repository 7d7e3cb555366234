// Read-only kernels over llama-8b-sized int8 weights in the access orders of the decode products, no math: is the
// order in which a block walks its rows' bytes what holds the products near 3-3.5 TB/s? Build here:
// NAMES=pattern_bench tools/device-bench/build-gemv-bench.sh; run on the device: .gpu/b8/pattern_bench [reps].
//   stream   grid-stride 16-byte loads over the whole buffer (the ceiling)
//   ship8    resident.cu's r_rows8 walk: a block owns 8 rows of `cols` bytes; warp w reads rows 4(w/4).. +3, lane l
//            4 bytes at column 128(w%4) + 4l + 512u of each, U = 4 steps per batch, 4096-column tiles
//   h16      hmma_gemv.cu's walk: a block owns 16 rows; lane (g, q) reads 16 bytes of rows g and g + 8 at column
//            64(w + 8i) + 16q, 4 chunks per batch
//   tiled16  the same bytes per step, but laid out so that a block's 16 rows are one sequential stream in the
//            order it reads them (chunk i of warp w at block base + ((8i + w)·2 + h)·512 + 16·lane)
// Each as one launch over all 7 GB and as a graph of 32 launches of one matrix size (o 4096×4096, gate+up
// 2×14336×4096, down 4096×14336).
#include "llama8b_bench.cuh"

__global__ void __launch_bounds__(256) p_ship8(const signed char* w, int cols, unsigned* sink) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, rb = (warp >> 2) * 4, kq = warp & 3;
    const signed char* base = w + (long long) blockIdx.x * 8 * cols;
    unsigned a = 0;
    for (int k0 = 0; k0 < cols; k0 += 4096) {
        int tc = min(4096, cols - k0);
        for (int c = kq * 128 + lane * 4; c < tc; c += 2048) {
            unsigned v[4][4];
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int i = 0; i < 4; i++) v[i][u] = c + 512 * u < tc ? r_ld4(base + (long long) (rb + i) * cols + k0 + c + 512 * u) : 0u;
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int i = 0; i < 4; i++) a ^= v[i][u];
        }
    }
    if (a == 0x12345678u) sink[0] = a;
}

template <bool TILED>
__global__ void __launch_bounds__(256) p_h16(const signed char* w, int cols, unsigned* sink) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const signed char* base = w + (long long) blockIdx.x * 16 * cols;
    const int ni = (cols / 64 - warp + 7) / 8;
    unsigned a = 0;
    for (int i0 = 0; i0 < ni; i0 += 4) {
        uint4 v[2][4];
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int i = i0 + u;
                const signed char* p = TILED ? base + ((long long) ((8 * i + warp) * 2 + h)) * 512 + 16 * lane
                                             : base + (long long) (g + 8 * h) * cols + 64 * (warp + 8 * i) + 16 * q;
                v[h][u] = i < ni ? r_ld16(p) : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
        for (int u = 0; u < 4; u++)
#pragma unroll
            for (int h = 0; h < 2; h++) a ^= v[h][u].x ^ v[h][u].y ^ v[h][u].z ^ v[h][u].w;
    }
    if (a == 0x12345678u) sink[0] = a;
}

int main(int argc, char** argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    signed char* all; size_t layerBytes; long long wbytes;
    std::vector<Layer> Ls = make_layers(&all, &layerBytes, &wbytes);
    (void) Ls;
    unsigned* sink; CK(cudaMalloc(&sink, 64));
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    auto timeit = [&](auto&& body, bool graph) { return best_us(body, graph, st, e0, e1, reps); };
    const long long total = (long long) layerBytes * L;
    printf("{\"gpu\":\"%s\",\"sms\":%d,\"bytes\":%lld}\n", prop.name, sms, total);
    for (int round = 0; round < 2; round++) {
        float us = timeit([&] { stream_read<<<sms * 8, 256, 0, st>>>((const uint4*) all, total / 16, sink); }, false);
        printf("{\"pattern\":\"stream\",\"round\":%d,\"TBps\":%.3f}\n", round, total / us / 1e6);
        // one launch over the whole buffer as 4096-byte rows
        long long rows = total / 4096;
        us = timeit([&] { p_ship8<<<(unsigned) (rows / 8), 256, 0, st>>>(all, 4096, sink); }, false);
        printf("{\"pattern\":\"ship8 one launch\",\"round\":%d,\"TBps\":%.3f}\n", round, (rows / 8) * 8 * 4096.0 / us / 1e6);
        us = timeit([&] { p_h16<false><<<(unsigned) (rows / 16), 256, 0, st>>>(all, 4096, sink); }, false);
        printf("{\"pattern\":\"h16 one launch\",\"round\":%d,\"TBps\":%.3f}\n", round, (rows / 16) * 16 * 4096.0 / us / 1e6);
        us = timeit([&] { p_h16<true><<<(unsigned) (rows / 16), 256, 0, st>>>(all, 4096, sink); }, false);
        printf("{\"pattern\":\"tiled16 one launch\",\"round\":%d,\"TBps\":%.3f}\n", round, (rows / 16) * 16 * 4096.0 / us / 1e6);
        // graphs of 32 launches of one matrix shape, each over its own bytes
        const char* names[3] = {"o", "gate+up", "down"};
        const int mr[3] = {H, 2 * I, H}, mc[3] = {H, H, I};
        for (int s = 0; s < 3; s++) {
            long long mb = (long long) mr[s] * mc[s];
            int n = (int) std::min<long long>(32, total / mb);
            float t8 = timeit([&] { for (int l = 0; l < n; l++) p_ship8<<<mr[s] / 8, 256, 0, st>>>(all + mb * l, mc[s], sink); }, true);
            float t16 = timeit([&] { for (int l = 0; l < n; l++) p_h16<false><<<mr[s] / 16, 256, 0, st>>>(all + mb * l, mc[s], sink); }, true);
            float tt = timeit([&] { for (int l = 0; l < n; l++) p_h16<true><<<mr[s] / 16, 256, 0, st>>>(all + mb * l, mc[s], sink); }, true);
            printf("{\"pattern\":\"graph of %d %s\",\"round\":%d,\"ship8_TBps\":%.3f,\"h16_TBps\":%.3f,\"tiled16_TBps\":%.3f,\"ship8_us_each\":%.2f,\"tiled16_us_each\":%.2f}\n",
                   n, names[s], round, n * mb / t8 / 1e6, n * mb / t16 / 1e6, n * mb / tt / 1e6, t8 / n, tt / n);
        }
        fflush(stdout);
    }
    return 0;
}
