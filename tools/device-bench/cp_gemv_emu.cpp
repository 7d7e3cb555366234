// The cp candidates of gemv_bench (cp_gemv.cuh) on the CPU, on kernel_emulator.cpp's fibers (no GPU): every kind
// (q/k/v, o, gate+up, down), cp.async and bulk rings, shallow and deep, the bench's grids and odd ones, copies
// landing as late as the pipeline allows and (second pass) as early, against a double-precision reference.
// g++ -O2 -std=c++17 -DCP_EMU -I cmf-engine/src/main/resources/dev/cmf4j/backend/cuda \
//     -I cmf-engine/src/test/resources/dev/cmf4j/backend/cuda tools/device-bench/cp_gemv_emu.cpp -o /tmp/cp_emu && /tmp/cp_emu
#include <cstdio>
#include <vector>
#include <algorithm>
#include "kernel_emulator.cpp"
static inline void pdl_trigger() {}
static inline void pdl_wait() {}
#include "cp_gemv.cuh"

static unsigned lcg(unsigned& s) { s = s * 1664525u + 1013904223u; return s; }
static std::vector<float> rnd(int n, float lo, float hi, unsigned seed) {
    std::vector<float> v(n);
    for (auto& e : v) e = lo + (hi - lo) * ((lcg(seed) >> 8) / 16777216.f);
    return v;
}
// 16-byte aligned int8 rows
static signed char* wts(size_t n, unsigned seed) {
    signed char* p = (signed char*) aligned_alloc(64, (n + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) p[i] = (signed char) (lcg(seed) >> 24);
    return p;
}

template <int NM, int RT, int NS, bool BULK, int EPI>
static bool run(const char* what, int grid, std::vector<int> rows, int cols, int normed) {
    int nmat = NM == 2 ? 1 : (int) rows.size();
    CpMats P = {};
    std::vector<signed char*> W;
    std::vector<std::vector<float>> rs, cf, y0, y;
    std::vector<float> x = rnd(cols, -1.f, 1.f, 7);
    int total = 0;
    for (int r : rows) total += r;
    // blocks per matrix in proportion to its rows (the bench's q/k/v split)
    int bs[4] = {0, grid, grid, grid};
    if (nmat == 3) {
        int nk = std::max(1, grid * rows[1] / total), nq = grid - 2 * nk;
        bs[1] = nq; bs[2] = nq + nk; bs[3] = grid;
    }
    int gm = 1;
    for (int m = 0; m < nmat; m++) { int nb = bs[m + 1] - bs[m]; gm = std::max(gm, ((rows[m] + nb - 1) / nb + RT - 1) / RT); }
    for (int m = 0; m < 3; m++) P.bstart[m] = bs[m];
    P.bstart[3] = bs[3];
    int nw = NM == 2 ? 2 : nmat;
    for (int m = 0; m < nw; m++) {
        int r = rows[NM == 2 ? 0 : m];
        W.push_back(wts((size_t) r * cols, 11 + m));
        rs.push_back(rnd(r, 0.001f, 0.002f, 21 + m));
        cf.push_back(rnd(cols, 0.5f, 1.5f, 31 + m));
        y0.push_back(rnd(r, -1.f, 1.f, 41 + m));
        if (EPI != 1) std::fill(y0.back().begin(), y0.back().end(), NAN);
        y.push_back(y0.back());
    }
    for (int m = 0; m < nw; m++) {
        P.w[m] = W[m]; P.rs[m] = rs[m].data(); P.cf[m] = cf[m].data(); P.y[m] = y[m].data();
        P.rows[m] = rows[NM == 2 ? 0 : m];
    }
    if (NM == 2) P.y[1] = P.y[0];
    size_t smem = cp_smem_bytes(NM, RT, NS, cols, gm);
    if (smem > sizeof(cp_emu_smem)) { printf("%s: smem %zu too large\n", what, smem); return false; }
    memset(cp_emu_smem, 0xa5, sizeof(cp_emu_smem));
    cp_emu_bytes = 0;
    int rc = run_blocks([&] { cp_gemv<NM, RT, NS, BULK, false, EPI>(P, x.data(), cols, normed, 1e-5f, gm); }, grid, 1, 1, 256);
    // reference
    double ss = 0;
    for (float v : x) ss += (double) v * v;
    double inv = normed ? 1.0 / sqrt(ss / cols + 1e-5) : 1.0;
    double md = 0, mx = 0;
    long want_bytes = 0;
    for (int m = 0; m < (NM == 2 ? 1 : nmat); m++) {
        int R = rows[m];
        want_bytes += (long) R * cols * NM;
        for (int r = 0; r < R; r++) {
            double d[2] = {0, 0};
            for (int mm = 0; mm < NM; mm++) {
                int wi = NM == 2 ? mm : m;
                for (int c = 0; c < cols; c++) d[mm] += (double) W[wi][(size_t) r * cols + c] * (double) (x[c] * cf[wi][c]);
                d[mm] *= inv * rs[wi][r];
            }
            double want = EPI == 0 ? d[0] : EPI == 1 ? y0[m][r] + d[0] : d[0] / (1 + exp(-d[0])) * d[1];
            double got = y[m][r];
            double e = fabs(want - got);
            if (!(e <= md)) md = e != e ? INFINITY : e;
            mx = std::max(mx, fabs(want));
        }
    }
    bool ok = rc == 0 && md <= 1e-5 * mx && cp_emu_bytes == want_bytes;
    printf("%-44s grid %3d NS %2d %s%s: rc %d, max|d| %.3g of %.3g, bytes %ld/%ld %s\n", what, grid, NS, BULK ? "bulk" : "cp.async",
           cp_emu_early ? " early" : "", rc, md, mx, cp_emu_bytes, want_bytes, ok ? "ok" : "FAIL");
    for (auto p : W) free(p);
    for (auto& g : cp_emu_groups) g.clear();
    for (auto& o : cp_emu_open) o.clear();
    return ok;
}

int main(int argc, char** argv) {
    bool full = argc > 1 && !strcmp(argv[1], "full");
    int bad = 0;
    for (int early = 0; early < 2; early++) {
        cp_emu_early = early;
        // the bench's configurations (grid = 132 SMs × 1 or 2 blocks), the real shapes when "full"
        int H = full ? 4096 : 1024, KV = full ? 1024 : 256, I = full ? 14336 : 3584, C = full ? 4096 : 2048, CD = full ? 14336 : 3072;
        bad += !run<1, 8, 11, false, 0>("qkv", 264, {H, KV, KV}, C, 1);
        bad += !run<1, 8, 22, true, 0>("qkv", 132, {H, KV, KV}, C, 1);
        bad += !run<1, 8, 11, true, 1>("o", 264, {H}, C, 0);
        bad += !run<1, 8, 22, false, 1>("o", 132, {H}, C, 0);
        bad += !run<2, 4, 8, false, 2>("glu", 264, {I}, C, 1);
        bad += !run<2, 4, 22, true, 2>("glu", 132, {I}, C, 1);
        bad += !run<1, 8, 6, true, 1>("down", 264, {H}, CD, 0);
        bad += !run<1, 8, 20, false, 1>("down", 132, {H}, CD, 0);
        // odd shapes: rows not multiples of RT, blocks with no rows, a ring deeper than the work, 3 stages
        bad += !run<1, 8, 3, false, 0>("qkv odd", 13, {301, 77, 77}, 1024, 1);
        bad += !run<1, 8, 3, true, 0>("qkv odd", 13, {301, 77, 77}, 1024, 1);
        bad += !run<2, 4, 5, false, 2>("glu odd", 9, {203}, 3072, 1);
        bad += !run<2, 4, 5, true, 2>("glu odd", 9, {203}, 3072, 1);
        bad += !run<1, 8, 4, false, 1>("down: more blocks than rows", 40, {29}, 2048, 0);
        bad += !run<1, 8, 4, true, 1>("down: more blocks than rows", 40, {29}, 2048, 0);
        bad += !run<1, 8, 22, true, 1>("o: ring deeper than the work", 5, {20}, 1024, 0);
    }
    printf(bad ? "%d FAILED\n" : "all ok\n", bad);
    return bad != 0;
}
