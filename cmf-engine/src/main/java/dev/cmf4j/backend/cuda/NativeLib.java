package dev.cmf4j.backend.cuda;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Opening a native library by soname (the loader's search path and cache) or, failing that, by absolute
 * path, and binding its symbols to downcall handles. Shared by the driver and NVRTC bindings.
 */
final class NativeLib {
    private NativeLib() {}

    static final Linker LINKER = Linker.nativeLinker();
    /** {@code size_t}: this backend supports 64-bit platforms only, where it is a Java long. */
    static final ValueLayout SIZE_T = (ValueLayout) LINKER.canonicalLayouts().get("size_t");
    static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT;
    static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG;
    static final java.lang.foreign.AddressLayout PTR = ValueLayout.ADDRESS;

    /** A function to bind: its exact exported symbol and C signature. */
    record Binding(String symbol, FunctionDescriptor descriptor) {}

    /**
     * Looks the library up by each name in turn (a bare soname goes through the dynamic loader, a path is
     * opened directly when it exists); null when none opens. {@code tried} collects what was attempted.
     */
    static SymbolLookup open(List<String> names, List<String> tried) {
        for (String n : names) {
            try {
                if (n.contains("/")) {
                    Path p = Path.of(n);
                    if (!Files.exists(p)) { tried.add(n + " (absent)"); continue; }
                    return SymbolLookup.libraryLookup(p, Arena.global());
                }
                return SymbolLookup.libraryLookup(n, Arena.global());
            } catch (IllegalArgumentException | IllegalCallerException e) {
                tried.add(n + " (" + e.getMessage() + ")");
            }
        }
        return null;
    }

    /** Binds every entry of {@code table}; a missing symbol fails naming it and the library. */
    static Map<String, MethodHandle> bind(SymbolLookup lib, String libName, List<Binding> table) {
        Map<String, MethodHandle> out = bindFound(lib, table);
        List<String> missing = table.stream().map(Binding::symbol).filter(s -> !out.containsKey(s)).toList();
        if (!missing.isEmpty())
            throw new CudaUnavailableException(libName + " lacks " + missing + " (too old a driver or library?)");
        return out;
    }

    /** Binds the entries of {@code table} that {@code lib} has; the others are left out. */
    static Map<String, MethodHandle> bindFound(SymbolLookup lib, List<Binding> table) {
        var out = new java.util.HashMap<String, MethodHandle>();
        for (Binding b : table) lib.find(b.symbol()).ifPresent(sym -> out.put(b.symbol(), LINKER.downcallHandle(sym, b.descriptor())));
        return Map.copyOf(out);
    }

    /** A C string returned by the library (a zero-length segment) read as Java text; null for NULL. */
    static String cString(MemorySegment p) {
        return p == null || p.address() == 0 ? null : p.reinterpret(Long.MAX_VALUE).getString(0);
    }

    /** A downcall's throwable as thrown on: unchecked ones as they are, a checked one wrapped (downcalls declare Throwable). */
    static RuntimeException rethrow(Throwable t) {
        if (t instanceof RuntimeException r) return r;
        if (t instanceof Error e) throw e;
        return new IllegalStateException(t);
    }

    static FunctionDescriptor fn(ValueLayout ret, ValueLayout... args) { return FunctionDescriptor.of(ret, args); }
}
