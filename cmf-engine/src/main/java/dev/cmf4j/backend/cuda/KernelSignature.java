package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * One CUDA kernel's name, file and parameter types, as its C declaration has them. Launch arguments are packed through
 * it and checked one by one: cuLaunchKernel reads each slot at its parameter's size, so a missing, extra or wrongly
 * typed argument would be a silent wrong answer on the GPU, not an error. {@code KernelSignatureTest} checks every
 * signature in {@link Kernels} against the declaration in its {@code .cu} file.
 *
 * @param file   the kernel file ({@code resident.cu}, ...)
 * @param name   the {@code extern "C"} kernel name
 * @param params the parameters' kinds, in order
 */
record KernelSignature(String file, String name, List<Param> params) {

    /** A parameter as it is passed: a device pointer (a {@code long} here), a 32-bit int, a 64-bit int, a float. */
    enum Param { POINTER, INT, LONG_LONG, FLOAT }

    KernelSignature { params = List.copyOf(params); }

    /** The signature of {@code name} from its C parameter list, e.g. {@code "const float* x, int n, float eps"}. */
    static KernelSignature of(String file, String name, String cParams) {
        List<Param> ps = new ArrayList<>();
        for (String p : cParams.split(",")) ps.add(param(p.strip()));
        return new KernelSignature(file, name, ps);
    }

    /** The kind of one C parameter declaration ({@code "const float* x"}, {@code "long long n"}, ...). */
    static Param param(String decl) {
        if (decl.contains("*")) return Param.POINTER;
        String type = decl.replaceAll("\\s+\\w+$", "").replace("const ", "").strip();
        return switch (type) {
            case "int" -> Param.INT;
            case "long long" -> Param.LONG_LONG;
            case "float" -> Param.FLOAT;
            default -> throw new IllegalArgumentException("kernel parameter '" + decl + "': not a pointer, int, long long or float");
        };
    }

    /**
     * The kernel's {@code void**} for {@code args}: one 8-byte slot per argument holding a device pointer or
     * {@code long long} (a {@link Long}), an {@code int} ({@link Integer}) or a {@code float} ({@link Float}), and
     * the array of pointers to the slots; an argument that does not fit its parameter is an error naming both.
     */
    MemorySegment pack(Arena a, Object... args) {
        if (args.length != params.size())
            throw new IllegalArgumentException(name + ": " + args.length + " arguments for " + params.size() + " parameters");
        MemorySegment slots = a.allocate(8L * args.length, 8), ptrs = a.allocate(ValueLayout.ADDRESS, args.length);
        for (int i = 0; i < args.length; i++) {
            long o = 8L * i;
            Param p = params.get(i);
            switch (args[i]) {
                case Long l when p == Param.POINTER || p == Param.LONG_LONG -> slots.set(ValueLayout.JAVA_LONG, o, l);
                case Integer n when p == Param.INT -> slots.set(ValueLayout.JAVA_INT, o, n);
                case Float f when p == Param.FLOAT -> slots.set(ValueLayout.JAVA_FLOAT, o, f);
                default -> throw new IllegalArgumentException(name + ": argument " + i + " (" + args[i] + ", a "
                        + (args[i] == null ? "null" : args[i].getClass().getSimpleName()) + ") for a " + p + " parameter");
            }
            ptrs.setAtIndex(ValueLayout.ADDRESS, i, slots.asSlice(o));
        }
        return ptrs;
    }

    /** Owner thread: the loaded kernel. */
    Kernel load(CudaContext ctx) { return new Kernel(this, ctx.driver().function(ctx.module(file), name)); }

    /** A signature with its loaded function. */
    record Kernel(KernelSignature signature, MemorySegment fn) {
        MemorySegment pack(Arena a, Object... args) { return signature.pack(a, args); }
    }
}
