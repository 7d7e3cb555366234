package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.backend.cuda.NativeLib.I32;
import static dev.cmf4j.backend.cuda.NativeLib.I64;
import static dev.cmf4j.backend.cuda.NativeLib.PTR;
import static dev.cmf4j.backend.cuda.NativeLib.fn;

/**
 * cuBLAS ({@code libcublas.so.13} or {@code .12}, optional) through {@code java.lang.foreign}: the few calls the
 * resident forward's prefill makes — a handle bound to the owner thread's primary context, its stream, and
 * {@code cublasGemmEx} (tensor cores for bf16/f16 inputs with f32 accumulation). Absent library: the prefill
 * runs the matvec kernels with a token dimension instead. Constants checked against the device's
 * {@code cublas_api.h}/{@code library_types.h} (GPU_NOTES.md §4).
 */
final class Cublas {
    static final int OP_N = 0, OP_T = 1;
    static final int R_32F = 0, R_16F = 2, R_16BF = 14;
    static final int COMPUTE_32F = 68;
    static final int GEMM_DEFAULT = -1;

    static final List<NativeLib.Binding> TABLE = List.of(
            new NativeLib.Binding("cublasCreate_v2", fn(I32, PTR)),
            new NativeLib.Binding("cublasDestroy_v2", fn(I32, PTR)),
            new NativeLib.Binding("cublasSetStream_v2", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cublasGetVersion_v2", fn(I32, PTR, PTR)),
            new NativeLib.Binding("cublasGemmEx", fn(I32, PTR, I32, I32, I32, I32, I32, PTR, PTR, I32, I32, PTR, I32, I32,
                    PTR, PTR, I32, I32, I32, I32)));

    /** Bound when the library has it (every cuBLAS 12/13 does): a missing one only costs the batched prefill GEMMs. */
    static final List<NativeLib.Binding> OPTIONAL = List.of(
            new NativeLib.Binding("cublasGemmStridedBatchedEx", fn(I32, PTR, I32, I32, I32, I32, I32, PTR, PTR, I32, I32, I64,
                    PTR, I32, I32, I64, PTR, PTR, I32, I32, I64, I32, I32, I32)));

    /** By soname first (the loader's cache), then the usual toolkit folders. */
    static final List<String> LIBRARY = List.of("libcublas.so.13", "libcublas.so.12",
            "/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12",
            "/usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.13");

    private final MethodHandle create, destroy, setStream, version, gemmEx, gemmStrided;

    private Cublas(Map<String, MethodHandle> h) {
        create = h.get("cublasCreate_v2");
        destroy = h.get("cublasDestroy_v2");
        setStream = h.get("cublasSetStream_v2");
        version = h.get("cublasGetVersion_v2");
        gemmEx = h.get("cublasGemmEx");
        gemmStrided = h.get("cublasGemmStridedBatchedEx");
    }

    /** cuBLAS from the first of {@code names} that opens, or null (none, or {@code -Dcmf.cuda.cublas=false}). */
    static Cublas find(List<String> names) {
        if ("false".equalsIgnoreCase(System.getProperty("cmf.cuda.cublas"))) return null;
        SymbolLookup lib = NativeLib.open(names, new ArrayList<>());
        if (lib == null) return null;
        try {
            Map<String, MethodHandle> h = new java.util.HashMap<>(NativeLib.bind(lib, "libcublas", TABLE));
            h.putAll(NativeLib.bindFound(lib, OPTIONAL));
            return new Cublas(h);
        } catch (CudaUnavailableException e) {
            return null;   // a library without these symbols: prefill without it
        }
    }

    private static void check(int status, String call) {
        if (status != 0) throw new CudaException(call, status, "CUBLAS_STATUS_" + status, null);
    }


    /** A handle in the calling thread's current context (the owner thread's primary context). */
    MemorySegment create() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(PTR);
            check((int) create.invokeExact(v), "cublasCreate_v2");
            return v.get(PTR, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    void destroy(MemorySegment handle) {
        try { check((int) destroy.invokeExact(handle), "cublasDestroy_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    void setStream(MemorySegment handle, MemorySegment stream) {
        try { check((int) setStream.invokeExact(handle, stream), "cublasSetStream_v2"); } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    int version(MemorySegment handle) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(I32);
            check((int) version.invokeExact(handle, v), "cublasGetVersion_v2");
            return v.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /**
     * C[m, n] = alpha·op(A)·op(B) + beta·C, column-major, on the handle's stream; alpha/beta are host floats
     * (native segments), A/B/C device pointers.
     */
    void gemm(MemorySegment handle, int transa, int transb, int m, int n, int k, MemorySegment alpha,
              long a, int aType, int lda, long b, int bType, int ldb, MemorySegment beta, long c, int cType, int ldc) {
        try {
            check((int) gemmEx.invokeExact(handle, transa, transb, m, n, k, alpha, MemorySegment.ofAddress(a), aType, lda,
                    MemorySegment.ofAddress(b), bType, ldb, beta, MemorySegment.ofAddress(c), cType, ldc, COMPUTE_32F,
                    GEMM_DEFAULT), "cublasGemmEx");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Whether {@link #gemmStridedBatched} is there. */
    boolean hasStridedBatched() { return gemmStrided != null; }

    /**
     * {@code count} GEMMs as {@link #gemm}, the i-th on A + i·strideA, B + i·strideB and C + i·strideC (strides in
     * elements; 0 = the same matrix for every one) in one call: cuBLAS schedules their tiles together.
     */
    void gemmStridedBatched(MemorySegment handle, int transa, int transb, int m, int n, int k, MemorySegment alpha,
                            long a, int aType, int lda, long strideA, long b, int bType, int ldb, long strideB,
                            MemorySegment beta, long c, int cType, int ldc, long strideC, int count) {
        try {
            check((int) gemmStrided.invokeExact(handle, transa, transb, m, n, k, alpha, MemorySegment.ofAddress(a), aType, lda,
                    strideA, MemorySegment.ofAddress(b), bType, ldb, strideB, beta, MemorySegment.ofAddress(c), cType, ldc, strideC,
                    count, COMPUTE_32F, GEMM_DEFAULT), "cublasGemmStridedBatchedEx");
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }
}
