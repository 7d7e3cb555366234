package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.cuda.KernelSignature.Kernel;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * One step of a chunk's forward on a session's stream, as the resident forward lowers the plan: a kernel launch or a
 * cuBLAS GEMM. Steps are made once per decode step shape (kept for its CUDA graph) or streamed as a prefill chunk
 * makes them ({@link Steps}).
 */
sealed interface Step permits Step.Launch, Step.Gemm, Step.Gemms, Step.AllReduce {
    String name();

    /**
     * One kernel launch with its argument block; {@code name} labels it in the profile. {@code programmatic}: launched
     * with programmatic stream serialization (ResidentForward#programmatic).
     */
    record Launch(String name, MemorySegment fn, int gx, int gy, int gz, int block, MemorySegment params,
                  boolean programmatic) implements Step {
        Launch(String name, MemorySegment fn, int gx, int gy, int gz, int block, MemorySegment params) {
            this(name, fn, gx, gy, gz, block, params, false);
        }

        /** A launch of {@code k} with {@code args} packed as its signature says (a mismatch is an error naming the kernel). */
        static Launch of(String name, Kernel k, int gx, int gy, int gz, int block, Arena a, Object... args) {
            return new Launch(name, k.fn(), gx, gy, gz, block, k.pack(a, args));
        }
    }

    /** C[m, n] (column-major f32) = op(A)ᵀ·B: A is a row-major [m, k] weight matrix, B [n, k] row-major activations. */
    record Gemm(String name, long a, int aType, long b, int bType, long c, int m, int n, int k) implements Step {}

    /**
     * {@code count} such GEMMs of one shape in one strided-batched call, the i-th on a + i·strideA, b + i·strideB and
     * c + i·strideC (elements): gate and up, k and v (ResidentForward#pairGemm).
     */
    record Gemms(String name, long a, long strideA, int aType, long b, long strideB, int bType, long c, long strideC,
                 int m, int n, int k, int count) implements Step {}

    /**
     * {@code count} floats at {@code buffer} summed in place over the ranks of a tensor-parallel group (NCCL's
     * all-reduce on the step's stream): the partial outputs of a row-parallel product.
     */
    record AllReduce(String name, long buffer, long count) implements Step {}
}
