package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.cmf4j.backend.cuda.NativeLib.I32;
import static dev.cmf4j.backend.cuda.NativeLib.PTR;
import static dev.cmf4j.backend.cuda.NativeLib.SIZE_T;
import static dev.cmf4j.backend.cuda.NativeLib.fn;

/**
 * NVRTC, the CUDA run-time compiler ({@code libnvrtc.so.13}, or 12), through {@code java.lang.foreign}:
 * CUDA C source to a CUBIN for one GPU architecture. Not part of the driver: it comes with the CUDA
 * toolkit or NVIDIA's nvrtc redistributable. Looked up by soname first, then in the usual toolkit
 * folders, then at {@code $CMF_NVRTC}. A compile error carries the compiler's log.
 */
public final class Nvrtc {
    static final List<NativeLib.Binding> TABLE = List.of(
            new NativeLib.Binding("nvrtcVersion", fn(I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcCreateProgram", fn(I32, PTR, PTR, PTR, I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcCompileProgram", fn(I32, PTR, I32, PTR)),
            new NativeLib.Binding("nvrtcGetProgramLogSize", fn(I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcGetProgramLog", fn(I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcGetCUBINSize", fn(I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcGetCUBIN", fn(I32, PTR, PTR)),
            new NativeLib.Binding("nvrtcDestroyProgram", fn(I32, PTR)),
            new NativeLib.Binding("nvrtcGetErrorString", fn(PTR, I32)));

    static List<String> libraryNames() {
        List<String> n = new ArrayList<>();
        String env = System.getenv("CMF_NVRTC");
        if (env != null && !env.isBlank()) n.add(env);
        for (String v : new String[] {"13", "12"}) {
            n.add("libnvrtc.so." + v);
            n.add("/usr/local/cuda/lib64/libnvrtc.so." + v);
            n.add("/usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so." + v);
            n.add("/usr/local/cuda-" + v + ".0/lib64/libnvrtc.so." + v);
        }
        n.add("libnvrtc.so");
        return n;
    }

    private final MethodHandle version, create, compile, logSize, log, cubinSize, cubin, destroy, errorString;

    private Nvrtc(Map<String, MethodHandle> h) {
        version = h.get("nvrtcVersion"); create = h.get("nvrtcCreateProgram"); compile = h.get("nvrtcCompileProgram");
        logSize = h.get("nvrtcGetProgramLogSize"); log = h.get("nvrtcGetProgramLog"); cubinSize = h.get("nvrtcGetCUBINSize");
        cubin = h.get("nvrtcGetCUBIN"); destroy = h.get("nvrtcDestroyProgram"); errorString = h.get("nvrtcGetErrorString");
    }

    /** NVRTC if it can be found, else null; {@code tried} collects where it was looked for. */
    static Nvrtc find(List<String> names, List<String> tried) {
        SymbolLookup lib = NativeLib.open(names, tried);
        return lib == null ? null : new Nvrtc(NativeLib.bind(lib, "libnvrtc", TABLE));
    }

    /** "major.minor". */
    public String version() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment ma = a.allocate(I32), mi = a.allocate(I32);
            check((int) version.invokeExact(ma, mi), "nvrtcVersion", null);
            return ma.get(I32, 0) + "." + mi.get(I32, 0);
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    /** Compiles {@code source} with {@code options} (e.g. {@code --gpu-architecture=sm_90}) to a CUBIN. */
    public byte[] compileToCubin(String source, String name, List<String> options) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment progRef = a.allocate(PTR);
            check((int) create.invokeExact(progRef, a.allocateFrom(source), a.allocateFrom(name), 0,
                    MemorySegment.NULL, MemorySegment.NULL), "nvrtcCreateProgram", null);
            MemorySegment prog = progRef.get(PTR, 0);
            try {
                MemorySegment opts = a.allocate(PTR, Math.max(1, options.size()));
                for (int i = 0; i < options.size(); i++) opts.setAtIndex(PTR, i, a.allocateFrom(options.get(i)));
                int rc = (int) compile.invokeExact(prog, options.size(), opts);
                if (rc != 0) check(rc, "nvrtcCompileProgram(" + name + ", " + options + ")", programLog(prog, a));
                MemorySegment size = a.allocate(SIZE_T);
                check((int) cubinSize.invokeExact(prog, size), "nvrtcGetCUBINSize", null);
                long n = size.get(NativeLib.I64, 0);
                MemorySegment buf = a.allocate(n);
                check((int) cubin.invokeExact(prog, buf), "nvrtcGetCUBIN", null);
                return buf.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
            } finally {
                int ignored = (int) destroy.invokeExact(progRef);
            }
        } catch (Throwable t) { throw NativeLib.rethrow(t); }
    }

    private String programLog(MemorySegment prog, Arena a) throws Throwable {
        MemorySegment size = a.allocate(SIZE_T);
        if ((int) logSize.invokeExact(prog, size) != 0) return null;
        long n = size.get(NativeLib.I64, 0);
        if (n <= 1) return null;
        MemorySegment buf = a.allocate(n);
        if ((int) log.invokeExact(prog, buf) != 0) return null;
        return buf.getString(0).strip();
    }

    private void check(int rc, String call, String detail) throws Throwable {
        if (rc == 0) return;
        String name = NativeLib.cString((MemorySegment) errorString.invokeExact(rc));
        throw new CudaException(call, rc, name, detail);
    }

}
