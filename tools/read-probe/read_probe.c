// Streaming-read ceiling of a model file as decode reads it: the file mmapped (page cache), read front to back by N
// threads, each a contiguous slice, with AVX2 loads (eight 32-byte loads in flight per step) where the CPU has them.
// Decode speed is reported against this (docs/CPU_KERNELS.md), not against a synthetic buffer: it is the same pages
// through the same mapping. The XOR of all 64-bit words is printed so a test can check every byte was read.
//   cc -O2 -pthread read_probe.c -o read_probe && ./read_probe model.cmf [threads=2] [passes=5]
#define _GNU_SOURCE
#include <fcntl.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const unsigned char *base;
static size_t size;
static int threads;
static pthread_barrier_t start, done;
static uint64_t sums[256];
static int passes;

__attribute__((target("avx2"))) static uint64_t read_avx2(const unsigned char *p, size_t n) {
    __m256i a[8];
    for (int i = 0; i < 8; i++) a[i] = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 256 <= n; i += 256)
        for (int k = 0; k < 8; k++) a[k] = _mm256_xor_si256(a[k], _mm256_loadu_si256((const __m256i *) (p + i + 32 * k)));
    for (int k = 1; k < 8; k++) a[0] = _mm256_xor_si256(a[0], a[k]);
    uint64_t w[4];
    _mm256_storeu_si256((__m256i *) w, a[0]);
    uint64_t s = w[0] ^ w[1] ^ w[2] ^ w[3];
    for (; i + 8 <= n; i += 8) { uint64_t v; memcpy(&v, p + i, 8); s ^= v; }
    return s;
}

static uint64_t read_scalar(const unsigned char *p, size_t n) {
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t v[4];
        memcpy(v, p + i, 32);
        s0 ^= v[0]; s1 ^= v[1]; s2 ^= v[2]; s3 ^= v[3];
    }
    uint64_t s = s0 ^ s1 ^ s2 ^ s3;
    for (; i + 8 <= n; i += 8) { uint64_t v; memcpy(&v, p + i, 8); s ^= v; }
    return s;
}

static int avx2;

static void *worker(void *arg) {
    int t = (int) (intptr_t) arg;
    // slices start at multiples of 256 bytes, so every 64-bit word is read by exactly one thread
    size_t words = size / 8, per = (words / threads + 31) / 32 * 32;
    size_t from = (size_t) t * per * 8, to = t == threads - 1 ? words * 8 : (size_t) (t + 1) * per * 8;
    if (from > words * 8) from = words * 8;
    if (to > words * 8) to = words * 8;
    for (int p = 0; p < passes; p++) {
        pthread_barrier_wait(&start);
        sums[t] = to > from ? (avx2 ? read_avx2(base + from, to - from) : read_scalar(base + from, to - from)) : 0;
        pthread_barrier_wait(&done);
    }
    return NULL;
}

static double now(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec + ts.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *) a, y = *(const double *) b; return x < y ? -1 : x > y; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: read_probe FILE [threads=2] [passes=5]\n"); return 2; }
    threads = argc > 2 ? atoi(argv[2]) : 2;
    passes = argc > 3 ? atoi(argv[3]) : 5;
    if (threads < 1 || threads > 256 || passes < 1) { fprintf(stderr, "read_probe: threads 1..256, passes >= 1\n"); return 2; }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) { perror(argv[1]); return 1; }
    size = (size_t) st.st_size;
    if (size < 8) { fprintf(stderr, "read_probe: %s is shorter than 8 bytes\n", argv[1]); return 1; }
    base = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) { perror("mmap"); return 1; }
    __builtin_cpu_init();
    avx2 = __builtin_cpu_supports("avx2");
    passes += 1;   // the first pass brings the file into the page cache and is not counted
    pthread_barrier_init(&start, NULL, threads + 1);
    pthread_barrier_init(&done, NULL, threads + 1);
    pthread_t tid[256];
    for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, (void *) (intptr_t) t);
    double *gbs = calloc(passes, sizeof(double));
    uint64_t xor = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        double dt = now() - t0;
        uint64_t s = 0;
        for (int t = 0; t < threads; t++) s ^= sums[t];
        xor = s;
        gbs[p] = size / dt / 1e9;
        printf("pass %d%s: %.2f GB/s\n", p, p == 0 ? " (warm-up)" : "", gbs[p]);
    }
    for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
    qsort(gbs + 1, passes - 1, sizeof(double), cmp);
    printf("read_probe: %zu bytes, %d threads, %s loads: best %.2f GB/s, median %.2f GB/s over %d passes; xor %016llx\n", size,
           threads, avx2 ? "AVX2" : "64-bit", gbs[passes - 1], gbs[1 + (passes - 1) / 2], passes - 1, (unsigned long long) xor);
    return 0;
}
