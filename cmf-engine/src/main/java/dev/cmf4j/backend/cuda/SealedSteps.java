package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DecoderPlan;
import dev.cmf4j.backend.SealedLayers;
import dev.cmf4j.backend.cpu.NystromHead;
import dev.cmf4j.backend.cuda.KernelSignature.Kernel;
import dev.cmf4j.backend.cuda.Step.Launch;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The sealed ({@code --o1}) attention layers of a resident forward ({@code resident_o1.cu}; the operator: docs/MEMORY.md).
 * A sequence's sealed layers start exact, over a KV cache and a store of their rotated queries that grow with the
 * prompt; before the step at which the CPU's {@code SealedKv} would seal, the device seals them: the landmarks' segment
 * means on the device in float64, M in float64 on the host, the prompt's far keys folded into the per-landmark sums, the
 * last W positions into a ring and the first S into the sinks; the exact cache and queries are freed. Sealed steps
 * rope q and k in place, attend (one block per query head, the rows in position order, each moving the key that leaves
 * the window into the far sums) and commit the rows into the ring. Owner thread only.
 */
final class SealedSteps {
    private static final long NULL = 0L;
    /** Sinks + window and landmarks a block of ro_attend keeps in shared memory (RO_MAX_NEAR, RO_MAX_M); head dims up to 256. */
    static final int MAX_NEAR = 2048, MAX_LANDMARKS = 256, MAX_HEAD_DIM = 256;
    /**
     * Positions an exact cache holds at first ({@code -Dcmf.cuda.o1Capacity}, default 1024); it doubles as a prompt
     * needs more (up to the session's context).
     */
    private static int firstCapacity() { return Math.max(1, Integer.getInteger("cmf.cuda.o1Capacity", 1024)); }

    private final CudaDriver cu;
    private final DecoderPlan model;
    private final SealedLayers sealed;
    private final Kernel keep, means, absorb, sealCopy, rope, attend, commit;

    /** Why {@code model}'s sealed layers cannot run on the device, or null. */
    static String unsupported(DecoderPlan model, SealedLayers sealed) {
        if (sealed.window() + sealed.sinks() > MAX_NEAR)
            return "--o1-window + --o1-sink above " + MAX_NEAR + " (the device keeps a row's near logits in shared memory)";
        if (sealed.landmarks() > MAX_LANDMARKS) return "--o1-m above " + MAX_LANDMARKS;
        for (int i = 0; i < model.layers().size(); i++) {
            DecoderPlan.Layer l = model.layers().get(i);
            if (!sealed.seals(i)) continue;
            if (l.anchor() != null || l.deltaNet() != null || l.sharesKv() || l.window() > 0 || l.rope() == null)
                return "layer " + i + " is not a full-attention layer with rope";
            if (l.headDim() > MAX_HEAD_DIM) return "layer " + i + ": head dim " + l.headDim() + " above " + MAX_HEAD_DIM;
        }
        return null;
    }

    SealedSteps(CudaContext ctx, DecoderPlan model, SealedLayers sealed) {
        this.cu = ctx.driver();
        this.model = model;
        this.sealed = sealed;
        keep = Kernels.O1_KEEP_QUERIES.load(ctx);
        means = Kernels.O1_MEANS.load(ctx);
        absorb = Kernels.O1_ABSORB_PROMPT.load(ctx);
        sealCopy = Kernels.O1_SEAL_COPY.load(ctx);
        rope = Kernels.O1_ROPE.load(ctx);
        attend = Kernels.O1_ATTEND.load(ctx);
        commit = Kernels.O1_COMMIT.load(ctx);
    }

    boolean seals(int layer) { return sealed.seals(layer); }

    /** Floats of one query head's far state with m landmarks: Q̃, K̃ [m, hd], M [m, m], T̂ [m, dv], Ẑ, running max [m]. */
    static long headFloats(int m, int hd, int dv) { return 2L * m * hd + (long) m * m + (long) m * dv + 2L * m; }

    /**
     * One sequence's sealed layers: per sealed layer the ring, sinks and far state (allocated once, the size they keep
     * at any length), and while exact its cache (in the session's kc/vc arrays, which the forward's steps read) and
     * query store.
     */
    final class Sequence {
        private final long[] kc, vc;
        final long[] ringK, ringV, sinkK, sinkV, far, queries;
        private final int maxContext;
        private int capacity, landmarks;
        private boolean isSealed, requested;

        /** Allocates the fixed part and an exact cache of {@link #firstCapacity} positions into {@code kc}, {@code vc}. */
        Sequence(long[] kc, long[] vc, int maxContext) {
            this.kc = kc;
            this.vc = vc;
            this.maxContext = maxContext;
            int n = model.layers().size();
            ringK = new long[n]; ringV = new long[n]; sinkK = new long[n]; sinkV = new long[n]; far = new long[n]; queries = new long[n];
            try {
                for (int l = 0; l < n; l++) {
                    if (!sealed.seals(l)) continue;
                    DecoderPlan.Layer spec = model.layers().get(l);
                    long kvDim = (long) spec.kvHeads() * spec.headDim();
                    ringK[l] = alloc(4L * sealed.window() * kvDim);
                    ringV[l] = alloc(4L * sealed.window() * kvDim);
                    sinkK[l] = alloc(4L * sealed.sinks() * kvDim);
                    sinkV[l] = alloc(4L * sealed.sinks() * kvDim);
                    far[l] = alloc(4L * model.heads() * headFloats(sealed.landmarks(), spec.headDim(), spec.headDim()));
                }
                exact(Math.min(maxContext, firstCapacity()), 0, null);
            } catch (RuntimeException | Error e) {
                free();
                throw e;
            }
        }

        /** Device bytes held now. */
        private long bytes;

        private long alloc(long n) {
            long d = cu.memAlloc(Math.max(n, 16));
            bytes += Math.max(n, 16);
            return d;
        }

        private void release(long d, long n) {
            if (d == NULL) return;
            cu.memFree(d);
            bytes -= Math.max(n, 16);
        }

        boolean isSealed() { return isSealed; }

        int landmarks() { return landmarks; }

        void requestSeal() { requested = true; }

        /** Device bytes this sequence's sealed layers hold now (exact caches and queries included). */
        long heldBytes() { return bytes; }

        /** Bytes of the sealed state as the CPU counts it (ring, sinks, landmarks, M, far sums), or -1 while exact. */
        long sealedBytes() {
            if (!isSealed) return -1;
            long sum = 0;
            for (int l = 0; l < kc.length; l++) {
                if (!sealed.seals(l)) continue;
                DecoderPlan.Layer spec = model.layers().get(l);
                long kvDim = (long) spec.kvHeads() * spec.headDim();
                sum += 4L * (2L * (sealed.window() + sealed.sinks()) * kvDim + model.heads() * headFloats(landmarks, spec.headDim(), spec.headDim()));
            }
            return sum;
        }

        /**
         * Owner thread, before a step of {@code tokens} rows at {@code pos0} (the session's stream idle): a step at
         * position 0 starts the layers exact again, a due step seals them (p = pos0), an exact step grows the caches
         * to hold its rows. True when the layers' buffers or phase changed (a captured decode step is stale).
         */
        boolean prepare(MemorySegment stream, int pos0, int tokens) {
            boolean changed = false;
            if (pos0 == 0 && isSealed) {
                exact(Math.min(maxContext, firstCapacity()), 0, stream);
                isSealed = false;
                changed = true;
            }
            if (!isSealed && SealedLayers.due(pos0, tokens, requested, sealed.window(), sealed.sinks())) {
                seal(stream, pos0);
                changed = true;
            }
            requested = false;
            if (!isSealed && pos0 + tokens > capacity) {   // (the callers keep pos0 + tokens within maxContext)
                int cap = Math.max(1, capacity);
                while (cap < pos0 + tokens && cap < maxContext) cap = (int) Math.min(maxContext, 2L * cap);
                exact(cap, pos0, stream);
                changed = true;
            }
            return changed;
        }

        /** Exact caches and query stores of {@code cap} positions, the first {@code keep} positions copied from the old ones. */
        private void exact(int cap, int keep, MemorySegment stream) {
            for (int l = 0; l < kc.length; l++) {
                if (!sealed.seals(l)) continue;
                DecoderPlan.Layer spec = model.layers().get(l);
                long kvRow = 4L * spec.kvHeads() * spec.headDim(), qRow = 4L * model.heads() * spec.headDim();
                long k = alloc(cap * kvRow), v = alloc(cap * kvRow), q = alloc(cap * qRow);
                if (keep > 0) {
                    cu.copyDeviceAsync(k, kc[l], keep * kvRow, stream);
                    cu.copyDeviceAsync(v, vc[l], keep * kvRow, stream);
                    cu.copyDeviceAsync(q, queries[l], keep * qRow, stream);
                    cu.streamSynchronize(stream);
                }
                dropExact(l);
                kc[l] = k;
                vc[l] = v;
                queries[l] = q;
            }
            capacity = cap;
        }

        private void dropExact(int l) {
            DecoderPlan.Layer spec = model.layers().get(l);
            long kvRow = 4L * spec.kvHeads() * spec.headDim(), qRow = 4L * model.heads() * spec.headDim();
            release(kc[l], capacity * kvRow);
            release(vc[l], capacity * kvRow);
            release(queries[l], capacity * qRow);
            kc[l] = vc[l] = queries[l] = NULL;
        }

        /**
         * Seals every sealed layer at p positions (the CPU's SealedKv.sealIfDue): landmarks from the exact cache and the
         * kept queries, the far keys [S, p − W) into the sums, the ring and the sinks filled; the exact buffers freed.
         */
        private void seal(MemorySegment stream, int p) {
            int m = NystromHead.landmarks(p, sealed.landmarks()), heads = model.heads(), n = kc.length;
            long perLayer = 0;
            for (int l = 0; l < n; l++)
                if (sealed.seals(l)) perLayer = Math.max(perLayer, (long) (heads + model.layers().get(l).kvHeads()) * m * model.layers().get(l).headDim());
            long dmeans = cu.memAlloc(8L * perLayer * n);
            try (Arena a = Arena.ofConfined()) {
                for (int l = 0; l < n; l++) {
                    if (!sealed.seals(l)) continue;
                    DecoderPlan.Layer spec = model.layers().get(l);
                    int hd = spec.headDim(), kvh = spec.kvHeads();
                    long at = dmeans + 8L * perLayer * l;
                    launch(means, heads, m, 128, stream, a, queries[l], heads * hd, hd, p, m, at);
                    launch(means, kvh, m, 128, stream, a, kc[l], kvh * hd, hd, p, m, at + 8L * heads * m * hd);
                }
                MemorySegment host = a.allocate(8L * perLayer * n, 8);
                cu.streamSynchronize(stream);
                cu.copyToHost(host, dmeans, 8L * perLayer * n);
                for (int l = 0; l < n; l++) {
                    if (!sealed.seals(l)) continue;
                    DecoderPlan.Layer spec = model.layers().get(l);
                    int hd = spec.headDim(), kvh = spec.kvHeads(), group = heads / kvh;
                    long hf = headFloats(m, hd, hd);
                    float[] init = new float[(int) (heads * hf)];
                    double[] km = new double[m * hd], qm = new double[m * hd];
                    for (int h = 0; h < heads; h++) {
                        long q0 = perLayer * l + (long) h * m * hd, k0 = perLayer * l + (long) heads * m * hd + (long) (h / group) * m * hd;
                        for (int i = 0; i < m * hd; i++) {
                            qm[i] = host.getAtIndex(ValueLayout.JAVA_DOUBLE, q0 + i);
                            km[i] = host.getAtIndex(ValueLayout.JAVA_DOUBLE, k0 + i);
                        }
                        headInit(init, (int) (h * hf), qm, km, m, hd, hd, spec.scale());
                    }
                    MemorySegment buf = a.allocate(4L * init.length, 16);
                    MemorySegment.copy(init, 0, buf, ValueLayout.JAVA_FLOAT, 0, init.length);
                    cu.copyToDevice(far[l], buf, 4L * init.length);
                    launch(absorb, heads, m, 128, stream, a, kc[l], vc[l], far[l], heads, kvh, hd, hd, m, sealed.sinks(),
                            Math.max(sealed.sinks(), p - sealed.window()), spec.scale());
                    launch(sealCopy, sealed.window() + sealed.sinks(), 1, 256, stream, a, kc[l], vc[l], ringK[l], ringV[l], sinkK[l],
                            sinkV[l], kvh * hd, kvh * hd, sealed.window(), sealed.sinks(), p);
                }
                cu.streamSynchronize(stream);
            } finally {
                cu.memFree(dmeans);
            }
            for (int l = 0; l < n; l++) if (sealed.seals(l)) dropExact(l);
            capacity = 0;
            landmarks = m;
            isSealed = true;
        }

        /** Frees every buffer (the session's end). */
        void free() {
            for (int l = 0; l < kc.length; l++) {
                if (!sealed.seals(l)) continue;
                if (capacity > 0) dropExact(l);
                for (long d : new long[] {ringK[l], ringV[l], sinkK[l], sinkV[l], far[l]}) if (d != NULL) cu.memFree(d);
                ringK[l] = ringV[l] = sinkK[l] = sinkV[l] = far[l] = NULL;
            }
        }
    }

    /**
     * A head's far state before any far key, at {@code out[off]}: Q̃ and K̃ (the float64 means rounded), M from them in
     * float64, empty sums, running maxima −∞.
     */
    static void headInit(float[] out, int off, double[] qm, double[] km, int m, int hd, int dv, float scale) {
        for (int i = 0; i < m * hd; i++) {
            out[off + i] = (float) qm[i];
            out[off + m * hd + i] = (float) km[i];
        }
        float[] mu = NystromHead.mixing(qm, km, m, hd, scale);
        System.arraycopy(mu, 0, out, off + 2 * m * hd, m * m);
        int mx = off + 2 * m * hd + m * m + m * dv + m;
        java.util.Arrays.fill(out, off + 2 * m * hd + m * m, mx, 0f);
        java.util.Arrays.fill(out, mx, mx + m, Float.NEGATIVE_INFINITY);
    }

    /** The rope of a layer's q and k rows: its norms' device weights and flags, the inverse frequencies, the scaling. */
    record Rope(long qNorm, long kNorm, int qn, int kn, float eps, int offset, long invFreq, int rotaryDim, float scaling) {}

    /**
     * Layer {@code li} of one sealed sequence over its {@code tokens} rows (q, k, v, out at that sequence's first row;
     * its first position at device address {@code pos}): q and k normed and roped in place, the attention, the rows
     * into the ring. {@code headSinks}: the layer's sink logits on the device, or 0.
     */
    void attention(Steps L, Arena a, int li, Sequence o, Rope r, long q, long k, long v, long out, long headSinks, int tokens, long pos) {
        DecoderPlan.Layer l = model.layers().get(li);
        int heads = model.heads(), kvh = l.kvHeads(), hd = l.headDim(), w = sealed.window();
        L.add(Launch.of("o1_rope", rope, (heads + kvh + 3) / 4, tokens, 1, 128, a, q, k, r.qNorm(), r.kNorm(), r.qn(), r.kn(),
                r.eps(), r.offset(), r.invFreq(), r.rotaryDim(), r.scaling(), heads, kvh, hd, pos));
        L.add(Launch.of("o1_attend", attend, heads, 1, 1, 128, a, q, k, v, o.ringK[li], o.ringV[li], o.sinkK[li], o.sinkV[li],
                o.far[li], headSinks, out, heads, kvh, hd, hd, w, sealed.sinks(), o.landmarks(), l.scale(), tokens, pos));
        L.add(Launch.of("o1_commit", commit, Math.min(tokens, w), 1, 1, 256, a, k, v, o.ringK[li], o.ringV[li], tokens, w,
                kvh * hd, kvh * hd, pos));
    }

    /** An exact step's rotated query rows [tokens, qDim] (at {@code q}) into layer {@code li}'s store at their positions. */
    void keepQueries(Steps L, Arena a, int li, Sequence o, long q, int tokens, long pos) {
        int qDim = model.heads() * model.layers().get(li).headDim();
        L.add(Launch.of("o1_keep_queries", keep, (qDim + 255) / 256, tokens, 1, 256, a, q, o.queries[li], qDim, pos));
    }

    private void launch(Kernel k, int gx, int gy, int block, MemorySegment stream, Arena a, Object... args) {
        cu.launch(k.fn(), gx, gy, 1, block, 1, 1, 0, stream, k.pack(a, args));
    }
}
