package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.cuda.Step.Launch;
import dev.cmf4j.backend.cuda.ResidentWeights.LayerWeights;
import dev.cmf4j.backend.cuda.ResidentWeights.W;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * The prefill GEMMs' device workspace, shared by every session of a model (one owner thread runs them all): the
 * activations' 16-bit parts ({@link #sB}), the scratch an int8 matrix is widened into when it has no kept copy
 * ({@link #sW}), the f32 scratch a 4-bit matrix is widened into before its GEMM ({@link #sQ4}), two GEMM outputs
 * ({@link #sC1}, {@link #sC2}: sC2 right after sC1 in one allocation), the token scales ({@link #sS1}: three slots,
 * {@link #sS2}: one); the f16 copies of the int8 matrices kept from the first prefill
 * ({@code -Dcmf.cuda.prefillCache}); and the cuBLAS handle. Buffers grow on demand; whatever moves a buffer or a copy
 * calls {@code stale}, since captured steps point at the old addresses.
 */
final class PrefillWorkspace {
    private static final long NULL = 0L;
    private final CudaDriver cu;
    private final Cublas cublas;
    private final ResidentKernels kernels;
    private final DecoderPlan model;
    private final W head, pleProj;
    private final LayerWeights[] layers;
    private final List<W> products;
    private final long widestProductRows, widestProductCols;
    private final String prefillCache;
    private final long deviceMemory;
    /** 16-bit elements per token of the widest fused split (r_split3) of this model; 0 without fusion. */
    private final long fusedSplitUnits;
    /** The widest int8 matrix of the installed skills (they widen per use into {@link #sW}). */
    private final java.util.function.LongSupplier overlayInt8;
    private final Runnable stale;

    /** The buffers (device addresses; 0 until the first prefill) and their capacities in bytes. */
    long sB, sW, sQ4, sC1, sC2, sS1, sS2;
    private long capB, capW, capQ4, capC, capS;
    private final java.util.Map<Long, Long> widened = new java.util.HashMap<>();   // int8 weights -> f16 copy
    /** The device allocations holding the copies (a layer's gate and up copies share one, so do k and v: pairable). */
    private final List<Long> widenedBlocks = new ArrayList<>();
    private boolean widenDecided;
    private MemorySegment cublasHandle;

    PrefillWorkspace(CudaDriver cu, Cublas cublas, ResidentKernels kernels, DecoderPlan model, ResidentWeights weights,
                     String prefillCache, long deviceMemory, long fusedSplitUnits, java.util.function.LongSupplier overlayInt8,
                     Runnable stale) {
        this.cu = cu;
        this.cublas = cublas;
        this.kernels = kernels;
        this.model = model;
        this.head = weights.head;
        this.pleProj = weights.pleProj;
        this.layers = weights.layers;
        this.products = weights.products;
        this.widestProductRows = weights.widestProductRows;
        this.widestProductCols = weights.widestProductCols;
        this.prefillCache = prefillCache;
        this.deviceMemory = deviceMemory;
        this.fusedSplitUnits = fusedSplitUnits;
        this.overlayInt8 = overlayInt8;
        this.stale = stale;
    }

    /** The cuBLAS handle (made by the first {@link #prepare}). */
    MemorySegment cublasHandle() { return cublasHandle; }

    /** The kept f16 copy of the int8 matrix at {@code weights}, or null. */
    Long copyOf(long weights) { return widened.get(weights); }

    private static int kind(dev.cmf4j.format.DType d) { return ResidentWeights.kind(d); }

    private void launch(Launch l, MemorySegment stream) {
        cu.launch(l.fn(), l.gx(), l.gy(), l.gz(), l.block(), 1, 1, 0, stream, l.params());
    }

    /** Owner thread: the cuBLAS handle on this session's stream and prefill scratch for a chunk of t tokens. */
    void prepare(MemorySegment stream, int t, boolean headGemm) {
        if (cublasHandle == null) cublasHandle = cublas.create();
        cublas.setStream(cublasHandle, stream);
        boolean first = !widenDecided;
        scratchOrDropCopies(t, headGemm);   // on the first prefill without the widening scratch: copies may come
        if (first) {   // after the rest of the scratch, so the copies only take what is left
            widenDecided = true;
            widenOnce(stream, headGemm);
            scratchOrDropCopies(t, headGemm);   // the widening scratch for whatever has no copy
        } else if (headGemm) {
            widenHeadOnce(stream);
        }
    }

    /**
     * Owner thread: once the layers' f16 copies are kept, the head's too when a later step first runs it as a GEMM (a
     * batch of decode rows every step: widening a llama-8b head per step took 457 µs of a 64-row step's ~12 ms on the
     * H200); skipped when it does not fit or would pass auto's quarter of device memory.
     */
    private void widenHeadOnce(MemorySegment stream) {
        if (widened.isEmpty() || kind(head.dtype()) != 3 || widened.containsKey(head.weights())) return;
        long n = (long) head.rows() * head.cols();
        long kept = 0;
        for (LayerWeights l : layers)
            for (W w : l.products()) if (w != null && widened.containsKey(w.weights())) kept += 2L * w.rows() * w.cols();
        if ("auto".equals(prefillCache) && kept + 2 * n > deviceMemory / 4) return;
        long copy;
        try {
            copy = cu.memAlloc(2 * n);
        } catch (CudaException e) {
            return;   // no room: the head keeps being widened per step
        }
        try (Arena a = Arena.ofConfined()) {
            launch(widen(a, "widen", head.weights(), copy, n), stream);
            cu.streamSynchronize(stream);
        } catch (RuntimeException e) {
            cu.memFree(copy);
            throw e;
        }
        widenedBlocks.add(copy);
        widened.put(head.weights(), copy);
        stale.run();
    }

    private void scratchOrDropCopies(int t, boolean headGemm) {
        orMakingRoom(() -> { allocateScratch(t, headGemm); return null; });
    }

    /** What gives way before the prefill's copies when memory runs out (the idle KV pages); true when it freed any. */
    private java.util.function.BooleanSupplier giveWayFirst = () -> false;

    void giveWayFirst(java.util.function.BooleanSupplier release) { giveWayFirst = release; }

    /**
     * Owner thread: {@code alloc}; when it runs out of device memory, what {@link #giveWayFirst} holds gives way and
     * then the prefill's kept f16 copies (per-chunk widening from then on), and it runs again after each that freed
     * something ({@code alloc} must leave nothing half-made when it fails).
     */
    <T> T orMakingRoom(java.util.function.Supplier<T> alloc) {
        try {
            return alloc.get();
        } catch (CudaException e) {
            if (giveWayFirst.getAsBoolean())
                try {
                    return alloc.get();
                } catch (CudaException again) {
                    e = again;
                }
            if (widened.isEmpty()) throw e;
            dropWidened();
            return alloc.get();
        }
    }

    /** Grows the prefill scratch to a chunk of t tokens (16-bit activation parts, widened weights, GEMM outputs, scales). */
    private void allocateScratch(int t, boolean headGemm) {
        long b0 = sB, w0 = sW, q0 = sQ4, c0 = sC1, s0 = sS1;
        try {
            growScratch(t, headGemm);
        } finally {
            if (sB != b0 || sW != w0 || sQ4 != q0 || sC1 != c0 || sS1 != s0) stale.run();   // captured batch steps point at the old ones
        }
    }

    private void growScratch(int t, boolean headGemm) {
        long maxCols = Math.max(model.hidden(), Math.max(model.qDim(), model.intermediate()));
        long maxRows = Math.max(Math.max(model.qDim(), model.kvDim()), Math.max(model.hidden(), model.intermediate()));
        maxRows = Math.max(maxRows, widestProductRows);
        maxCols = Math.max(maxCols, widestProductCols);
        long maxW = 0;   // the widening scratch, for int8 matrices without a kept f16 copy
        for (W w : products)
            if (kind(w.dtype()) == 3 && !widened.containsKey(w.weights())) maxW = Math.max(maxW, (long) w.rows() * w.cols());
        long maxQ4 = 0;   // the f32 widening scratch of the 4-bit matrices (one at a time: each product widens before its GEMM)
        for (W w : products) if (ResidentWeights.q4(w.dtype())) maxQ4 = Math.max(maxQ4, (long) w.rows() * w.cols());
        if (headGemm) {
            maxRows = Math.max(maxRows, head.rows());
            if (kind(head.dtype()) == 3 && !widened.containsKey(head.weights())) maxW = Math.max(maxW, (long) head.rows() * head.cols());
            if (ResidentWeights.q4(head.dtype())) maxQ4 = Math.max(maxQ4, (long) head.rows() * head.cols());
        }
        if (!widenDecided && !"false".equals(prefillCache)) maxW = 0;   // the first prefill decides on the copies after this
        maxW = Math.max(maxW, overlayInt8.getAsLong());   // skills' int8 copies widen per use
        for (LayerWeights l : layers)
            if (l.k() != null) maxRows = Math.max(maxRows, (long) l.k().rows() + l.v().rows());   // k and v's outputs in sC2
        if (pleProj != null) maxRows = Math.max(maxRows, pleProj.rows());
        // ≤ 3 parts of the widest input; r_split3's regions side by side; k's GEMM output rounded up to 256 bytes (v's after it)
        long needB = 2L * t * Math.max(3 * maxCols, fusedSplitUnits), needW = 2L * maxW, needC = gemmOutputBytes(maxRows, t);
        if (needB > capB) { if (sB != NULL) { cu.memFree(sB); sB = NULL; capB = 0; } sB = cu.memAlloc(needB); capB = needB; }
        if (needW > capW) { if (sW != NULL) { cu.memFree(sW); sW = NULL; capW = 0; } sW = cu.memAlloc(needW); capW = needW; }
        long needQ4 = 4L * maxQ4;
        if (needQ4 > capQ4) { if (sQ4 != NULL) { cu.memFree(sQ4); sQ4 = NULL; capQ4 = 0; } sQ4 = cu.memAlloc(needQ4); capQ4 = needQ4; }
        if (needC > capC) {   // sC2 right after sC1 in one allocation: gate's and up's outputs capC bytes apart (pairGemm)
            if (sC1 != NULL) { cu.memFree(sC1); sC1 = sC2 = NULL; capC = 0; }
            sC1 = cu.memAlloc(2 * needC);
            sC2 = sC1 + needC;
            capC = needC;
        }
        if (4L * t > capS) {   // sS1: three scale slots (q, k and v's; the down product's in the second), sS2 one
            if (sS1 != NULL) { cu.memFree(sS1); cu.memFree(sS2); sS1 = sS2 = NULL; capS = 0; }
            long s1 = cu.memAlloc(3 * 4L * t);
            try { sS2 = cu.memAlloc(4L * t); } catch (CudaException e) { cu.memFree(s1); throw e; }
            sS1 = s1; capS = 4L * t;
        }
    }

    /**
     * Bytes of each of the two GEMM output buffers for a chunk of t tokens: ≤ 3 parts of the most rows, and k's output
     * rounded up to 256 before v's; the whole rounded up to 256 too, since sC2 = sC1 + this within one allocation
     * must stay as aligned as an allocation (float4 epilogues, cuBLAS).
     */
    static long gemmOutputBytes(long maxRows, int t) {
        return (4L * maxRows * 3 * t + 256 + 255) & ~255L;
    }

    /** Owner thread: frees the prefill's f16 copies (after the work queued on them) and keeps none from now on. */
    private void dropWidened() {
        stale.run();
        try {
            cu.synchronize();
        } finally {
            for (long d : widenedBlocks) cu.memFree(d);
            widenedBlocks.clear();
            widened.clear();
            widenDecided = true;
        }
    }

    /**
     * Owner thread, first prefill: the f16 copies of the int8 matrices the GEMMs read (and the head's when this
     * prefill needs all logits), if {@code -Dcmf.cuda.prefillCache} allows; on an allocation failure none are kept.
     */
    private void widenOnce(MemorySegment stream, boolean headGemm) {
        if ("false".equals(prefillCache)) return;
        stale.run();
        java.util.LinkedHashMap<Long, Long> int8 = new java.util.LinkedHashMap<>();   // weights -> weight count
        for (W w : products)
            if (kind(w.dtype()) == 3) int8.put(w.weights(), (long) w.rows() * w.cols());
        if (headGemm && kind(head.dtype()) == 3) int8.put(head.weights(), (long) head.rows() * head.cols());
        long bytes = 2 * int8.values().stream().mapToLong(Long::longValue).sum();
        if (bytes == 0 || "auto".equals(prefillCache) && bytes > deviceMemory / 4) return;
        // gate -> up, k -> v: one allocation each (pairGemm); only matrices no other product shares (a shared one
        // would be copied twice, once beside each partner)
        java.util.Map<Long, Integer> uses = new java.util.HashMap<>();
        for (W w : products) uses.merge(w.weights(), 1, Integer::sum);
        if (headGemm) uses.merge(head.weights(), 1, Integer::sum);
        java.util.Map<Long, Long> secondOf = new java.util.HashMap<>();
        for (LayerWeights l : layers)
            for (W[] pair : new W[][] {{l.gate(), l.up()}, {l.k(), l.v()}})
                if (pairable(pair[0], pair[1]) && uses.get(pair[0].weights()) == 1 && uses.get(pair[1].weights()) == 1)
                    secondOf.put(pair[0].weights(), pair[1].weights());
        boolean kept = false;
        try (Arena a = Arena.ofConfined()) {
            for (var e : int8.entrySet()) {
                if (widened.containsKey(e.getKey())) continue;   // an up (a v), copied right after its gate (its k)
                Long second = secondOf.get(e.getKey());
                long n = e.getValue(), copy = cu.memAlloc(2 * n * (second != null ? 2 : 1));
                widenedBlocks.add(copy);   // (freed by dropWidened if anything below fails)
                launch(widen(a, "widen", e.getKey(), copy, n), stream);
                widened.put(e.getKey(), copy);
                if (second != null) {
                    launch(widen(a, "widen", second, copy + 2 * n, n), stream);
                    widened.put(second, copy + 2 * n);
                }
            }
            cu.streamSynchronize(stream);   // written before any session's GEMM reads them (other streams too)
            kept = true;
        } catch (CudaException e) {   // out of device memory (or a refused launch): widen per chunk instead
            if ("true".equals(prefillCache))
                System.err.println("cmf: cuda: no room for the f16 prefill copies of the int8 weights (" + bytes / (1 << 20)
                        + " MiB): " + e.getMessage() + "; widening per chunk instead");
        } finally {
            if (!kept) dropWidened();
        }
    }

    /** r_i8_widen of n int8 weights at {@code src} into f16 at {@code dst} (exact: |q| ≤ 127), grid-stride blocks. */
    Launch widen(Arena a, String name, long src, long dst, long n) {
        return Launch.of(name, kernels.fnI8Widen, (int) Math.min(4096, (n / 4 + 255) / 256 + 1), 1, 1, 256, a, src, dst, n, 1);
    }

    /** Whether widenOnce copies {@code first} and {@code second} into one allocation, second right after first. */
    static boolean pairable(W first, W second) {
        return first != null && second != null && kind(first.dtype()) == 3 && kind(second.dtype()) == 3
                && first.rows() == second.rows() && first.cols() == second.cols();
    }

    /** Frees every buffer and copy (owner thread, the model closing). */
    void free() {
        for (long d : new long[] {sB, sW, sQ4, sC1, sS1, sS2}) if (d != NULL) cu.memFree(d);   // (sC2 lies in sC1's allocation)
        for (long d : widenedBlocks) cu.memFree(d);
        widenedBlocks.clear();
        widened.clear();
        sB = sW = sQ4 = sC1 = sC2 = sS1 = sS2 = NULL;
        if (cublasHandle != null) cublas.destroy(cublasHandle);
        cublasHandle = null;
    }
}
