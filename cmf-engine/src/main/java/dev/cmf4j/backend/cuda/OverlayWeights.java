package dev.cmf4j.backend.cuda;

import dev.cmf4j.backend.DeviceSkills;
import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.backend.cuda.ResidentWeights.W;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * What the per-row overlays of one resident forward read on the device, and which rows read what. Skills: a skill's
 * copies go up when a step first holds rows of it (only what it replaces, each matrix as its backbone twin was: same
 * dtype, same norm folded in; never a copy of the model) and stay while all skills' copies fit a byte budget; over it,
 * the skill used least recently (and not in the step) is given back first. Un-merged adapters: their deltas (small:
 * rank × (in + out) floats per target) go up when installed and stay. Task masks: a product's twin with 0/1 column
 * scales, or a router bias with −∞, made before a step that needs it. Owner thread only.
 */
final class OverlayWeights {
    /** {@code -Dcmf.cuda.skillCacheMiB=N}: the budget in MiB; by default a quarter of the device's memory. */
    static final String BUDGET_PROPERTY = "cmf.cuda.skillCacheMiB";

    /**
     * Consecutive rows [start, start + rows) of a step read through skill slot {@code skill} (0: the backbone), with
     * adapter slot {@code adapter} (0: none) at {@code scale} added to their products.
     */
    record Run(int start, int rows, int skill, int adapter, float scale, int task) {}

    /** Rows [start, start + rows) of a step that read a product as matrix {@code w} with bias {@code bias} (0: none). */
    record Group(int start, int rows, W w, long bias) {}

    /**
     * What a task mask does to one product of a layer: multiplies its input columns by {@code columns} (0 where a head or
     * neuron is off, all 0 when the layer is off; null: nothing), drops its bias (a layer off), or adds −∞ to the
     * logits of the experts {@code routerOff} (a router, whose own bias is at {@code baseBias}).
     */
    record TaskPart(float[] columns, boolean dropBias, boolean[] routerOff, long baseBias) {}

    /** An adapter's delta for one product on the device: A [rank, in] (a folded norm's weight as its column scales), scale·B [out, rank], f32. */
    record Delta(W a, W b) {}

    /** How a resident matrix was made: the plan's matrix and the norm folded into it (null: none). */
    record Source(Matrix matrix, NormOp norm) {}

    /** Uploads {@code m} with {@code norm} folded in as the backbone's twin was; vectors it makes go into {@code owned}. */
    @FunctionalInterface
    interface Uploader {
        W upload(Matrix m, NormOp norm, List<Long> owned);
    }

    /** Copies a float vector to the device into {@code owned}; returns its address. */
    @FunctionalInterface
    interface Vectors {
        long upload(float[] v, List<Long> owned);
    }

    /** One skill's resident copies: backbone product → replacement, backbone bias address → replacement's. */
    private static final class Copy {
        final Map<W, W> matrices = new HashMap<>();
        final Map<W, Matrix> sourceOf = new HashMap<>();   // each replacement's matrix
        final Map<Long, Long> biases = new HashMap<>();
        final Map<Long, float[]> biasValues = new HashMap<>();   // each replacement bias' values
        final Set<Matrix> uploaded = Collections.newSetFromMap(new IdentityHashMap<>());
        final List<Long> vectors = new ArrayList<>();
        long bytes, widestInt8;
    }

    private final CudaMatMul mm;
    private final CudaDriver cu;
    private final DeviceSkills skills;
    private final Map<W, Source> sources;
    private final Map<float[], Long> biasAt;
    private final Uploader uploader;
    private final Vectors vectors;
    private final long budget;
    /** Resident skills by slot, least recently used first. */
    private final LinkedHashMap<Integer, Copy> loaded = new LinkedHashMap<>(16, 0.75f, true);
    private final Map<String, String> problems = new LinkedHashMap<>();
    /** By adapter slot − 1, each adapted product's delta; the deltas' device memory; the largest rank. */
    private final List<Map<W, Delta>> deltas = new ArrayList<>();
    private final List<Long> deltaMemory = new ArrayList<>();
    private int maxRank;
    /** The A·x rows of a step's deltas ([rows, maxRank] f32) and the rows it holds. */
    private long lowRankRows;
    private int lowRankCap;
    private long uploads, evictions;

    /**
     * @param sources every resident product of the forward and how it was made
     * @param biasAt  the device address of every bias vector of the plan (by identity)
     */
    OverlayWeights(CudaMatMul mm, CudaDriver cu, DeviceSkills skills, Map<W, Source> sources, Map<float[], Long> biasAt,
                Uploader uploader, Vectors vectors, long budget) {
        this.mm = mm;
        this.cu = cu;
        this.skills = skills;
        this.sources = sources;
        this.biasAt = biasAt;
        this.uploader = uploader;
        this.vectors = vectors;
        this.budget = budget;
        Set<Matrix> resident = Collections.newSetFromMap(new IdentityHashMap<>());
        for (Source s : sources.values()) resident.add(s.matrix());
        for (int i = 0; i < skills.ids().size(); i++) {
            String id = skills.ids().get(i), why = null;
            for (var e : skills.matrices().get(i).entrySet()) {
                Matrix base = e.getKey(), r = e.getValue();
                if (!resident.contains(base)) why = "it replaces '" + base.name() + "', which the GPU-resident forward does not switch per row";
                else if (r.dtype() != base.dtype())
                    why = "'" + r.name() + "' is " + r.dtype().label + ", the backbone's '" + base.name() + "' " + base.dtype().label
                            + ": the GPU-resident forward switches replacements of the backbone's dtype only";
                else if (!ResidentWeights.supports(r)) why = "the resident kernels do not read '" + r.name() + "'";
                if (why != null) break;
            }
            for (float[] b : skills.biases().get(i).keySet())
                if (why == null && !biasAt.containsKey(b)) why = "it replaces a bias the GPU-resident forward does not switch per row";
            if (why != null) problems.put(id, why);
        }
    }

    /** The budget from {@link #BUDGET_PROPERTY}, else a quarter of {@code deviceMemory}. */
    static long budget(long deviceMemory) {
        String p = System.getProperty(BUDGET_PROPERTY);
        if (p == null) return deviceMemory / 4;
        try {
            long mib = Long.parseLong(p.strip());
            if (mib >= 0) return mib << 20;
        } catch (NumberFormatException e) {
            // below
        }
        throw new IllegalArgumentException("-D" + BUDGET_PROPERTY + " must be a number of MiB >= 0, not '" + p + "'");
    }

    /** By skill id, why the device cannot run it (absent: it can). */
    Map<String, String> problems() { return Collections.unmodifiableMap(problems); }

    /**
     * Uploads the adapters' deltas: per product of {@code sources} that an adapter targets, A (its folded norm's weight,
     * {@code normWeight}, as A's column scales: the product reads the un-normed rows) and B times the delta's scale.
     */
    void installAdapters(dev.cmf4j.backend.DeviceAdapters t, java.util.function.Function<NormOp, float[]> normWeight) {
        if (!deltas.isEmpty()) throw new IllegalStateException("the adapters were installed already");
        for (var byMatrix : t.deltas()) {
            Map<W, Delta> m = new HashMap<>();
            for (var e : sources.entrySet()) {
                var d = byMatrix.get(e.getValue().matrix());
                if (d == null) continue;
                NormOp norm = e.getValue().norm();
                float[] b = d.b().clone();
                for (int i = 0; i < b.length; i++) b[i] *= d.scale();
                long a = vectors.upload(d.a(), deltaMemory), bb = vectors.upload(b, deltaMemory);
                long cf = norm == null ? 0 : vectors.upload(normWeight.apply(norm), deltaMemory);
                m.put(e.getKey(), new Delta(new W(dev.cmf4j.format.DType.F32, d.rank(), d.in(), a, 0, cf),
                        new W(dev.cmf4j.format.DType.F32, d.out(), d.rank(), bb, 0, 0)));
                maxRank = Math.max(maxRank, d.rank());
            }
            deltas.add(m);
        }
    }

    /** Whether adapter {@code slot} (1-based) was installed. */
    boolean adapterRuns(int slot) { return slot >= 1 && slot <= deltas.size(); }

    /** Adapter {@code slot}'s delta for product {@code w}, or null. */
    Delta delta(int slot, W w) { return slot == 0 ? null : deltas.get(slot - 1).get(w); }

    /** Whether an adapter on {@code runs} adds a delta to one of {@code ws}. */
    boolean adapts(Run[] runs, List<W> ws) {
        for (Run r : runs)
            if (r.adapter() != 0) for (W w : ws) if (w != null && delta(r.adapter(), w) != null) return true;
        return false;
    }

    /** The rows of {@code runs} that add a delta to {@code w}: adjacent runs of one adapter, scale and task merged. */
    List<Run> adapterGroups(Run[] runs, W w) {
        List<Run> out = new ArrayList<>();
        for (Run r : runs) {
            if (r.adapter() == 0 || delta(r.adapter(), w) == null) continue;
            Run last = out.isEmpty() ? null : out.getLast();
            if (last != null && last.start() + last.rows() == r.start() && last.adapter() == r.adapter() && last.scale() == r.scale()
                    && last.task() == r.task())
                out.set(out.size() - 1, new Run(last.start(), last.rows() + r.rows(), 0, r.adapter(), r.scale(), r.task()));
            else
                out.add(new Run(r.start(), r.rows(), 0, r.adapter(), r.scale(), r.task()));
        }
        return out;
    }

    /**
     * The A that group {@code g} of {@link #adapterGroups} multiplies product {@code w}'s input by: its adapter's, under
     * its task's columns where the task masks that input (heads, neurons, a layer off: the delta sees the masked input,
     * as on the CPU, where the mask zeroes the activations the product and its delta both read).
     */
    W lowRankA(Run g, W w) {
        W a = delta(g.adapter(), w).a();
        TaskPart p = part(g.task(), w);
        return p == null || p.columns() == null ? a : taskMatrices.get(new TaskKey(g.task(), a));
    }

    /**
     * The device rows ([rows, largest rank] f32) a step's A·x goes through, grown to {@code rows} (before the step's
     * launches are made); returns whether it moved (captured steps point at the old one).
     */
    boolean growLowRank(int rows) {
        if (rows <= lowRankCap || maxRank == 0) return false;
        if (lowRankRows != 0) cu.memFree(lowRankRows);
        lowRankRows = 0;
        lowRankCap = 0;
        int cap = Math.max(rows, 64);
        lowRankRows = cu.memAlloc(4L * cap * maxRank);
        lowRankCap = cap;
        return true;
    }

    long lowRankRows() { return lowRankRows; }

    /** Whether skill {@code slot} (1-based) is one of these and runs here. */
    boolean runs(int slot) {
        return slot >= 1 && slot <= skills.ids().size() && !problems.containsKey(skills.ids().get(slot - 1));
    }

    /**
     * Makes the copies of {@code slots} resident (uploading those not yet there, as a step first needs them) and gives
     * back the least recently used others while the total passes the budget (a step's own skills always stay, even
     * over it). Returns whether any copy was freed: launches captured before may point at it.
     */
    boolean ensure(Set<Integer> slots) {
        boolean freed = false;
        for (int s : slots) {
            if (loaded.get(s) != null) continue;   // (the get marks it used)
            Copy c;
            try {
                c = upload(s);
            } catch (CudaException e) {   // out of device memory: give back every other copy, then once more
                freed |= evictExcept(slots, 0);
                c = upload(s);
            }
            loaded.put(s, c);
        }
        return evictExcept(slots, budget) | freed;
    }

    /** Frees the least recently used copies outside {@code keep} until the total is at most {@code limit}. */
    private boolean evictExcept(Set<Integer> keep, long limit) {
        boolean freed = false;
        var it = loaded.entrySet().iterator();
        while (residentBytes() > limit && it.hasNext()) {
            var e = it.next();
            if (keep.contains(e.getKey())) continue;
            if (!freed) { cu.synchronize(); dropTaskVariants(); }   // nothing queued may still read them
            free(e.getValue());
            it.remove();
            evictions++;
            freed = true;
        }
        return freed;
    }

    private Copy upload(int slot) {
        Copy c = new Copy();
        try {
            Map<Matrix, Matrix> ms = skills.matrices().get(slot - 1);
            for (var e : sources.entrySet()) {
                Matrix r = ms.get(e.getValue().matrix());
                if (r == null) continue;
                boolean fresh = c.uploaded.add(r);
                int before = c.vectors.size();
                W w = uploader.upload(r, e.getValue().norm(), c.vectors);
                c.matrices.put(e.getKey(), w);
                c.sourceOf.put(w, r);
                if (fresh) c.bytes += mm.resident(r).bytes();
                c.bytes += 4L * w.cols() * (c.vectors.size() - before);   // a folded norm's column scales
                if (ResidentWeights.kind(w.dtype()) == 3) c.widestInt8 = Math.max(c.widestInt8, (long) w.rows() * w.cols());
            }
            for (var e : skills.biases().get(slot - 1).entrySet()) {
                long at = vectors.upload(e.getValue(), c.vectors);
                c.biases.put(biasAt.get(e.getKey()), at);
                c.biasValues.put(at, e.getValue());
                c.bytes += 4L * e.getValue().length;
            }
        } catch (RuntimeException | Error e) {
            free(c);
            throw e;
        }
        uploads++;
        return c;
    }

    private void free(Copy c) {
        for (Matrix m : c.uploaded) mm.release(m);
        for (long d : c.vectors) cu.memFree(d);
        c.uploaded.clear();
        c.vectors.clear();
    }

    /** Bytes of device memory the resident copies hold. */
    long residentBytes() {
        long b = 0;
        for (Copy c : loaded.values()) b += c.bytes;
        return b;
    }

    /** Skills uploaded and given back so far (for tests and notes). */
    long uploads() { return uploads; }

    long evictions() { return evictions; }

    /** The most weights of a resident int8 replacement (the GEMMs widen it into the scratch per use). */
    long widestInt8() {
        long n = 0;
        for (Copy c : loaded.values()) n = Math.max(n, c.widestInt8);
        return n;
    }

    /** Skill {@code slot}'s copy of product {@code w} (resident: {@link #ensure} ran this step), or w where it keeps it. */
    W matrix(int slot, W w) {
        if (slot == 0) return w;
        W r = loaded.get(slot).matrices.get(w);
        return r != null ? r : w;
    }

    /** Skill {@code slot}'s copy of the bias at {@code bias}, or bias where it keeps it (0: none). */
    long bias(int slot, long bias) {
        if (slot == 0 || bias == 0) return bias;
        Long r = loaded.get(slot).biases.get(bias);
        return r != null ? r : bias;
    }

    /** Whether a skill on {@code runs} replaces {@code w} or one of {@code biases}, or a task mask changes one of {@code ws}. */
    boolean touches(Run[] runs, List<W> ws, long... biases) {
        for (Run r : runs) {
            if (r.task() != 0) for (W w : ws) if (w != null && part(r.task(), w) != null) return true;
            if (r.skill() == 0) continue;
            Copy c = loaded.get(r.skill());
            for (W w : ws) if (w != null && c.matrices.containsKey(w)) return true;
            for (long b : biases) if (b != 0 && c.biases.containsKey(b)) return true;
        }
        return false;
    }

    /**
     * The rows of {@code runs} grouped by what they read for product {@code w} with {@code bias} (the run's skill's
     * copy, under its task's columns and bias): adjacent runs of one matrix and bias merged.
     */
    List<Group> groups(Run[] runs, W w, long bias) {
        List<Group> out = new ArrayList<>();
        for (Run r : runs) {
            W m = resolve(r, w);
            long b = resolveBias(r, w, bias);
            Group last = out.isEmpty() ? null : out.getLast();
            if (last != null && last.start() + last.rows() == r.start() && last.w().equals(m) && last.bias() == b)
                out.set(out.size() - 1, new Group(last.start(), last.rows() + r.rows(), m, b));
            else
                out.add(new Group(r.start(), r.rows(), m, b));
        }
        return out;
    }

    // ---- task masks: a product's columns scaled by 0/1 (heads, neurons, a layer off), a router's bias −∞ (experts) ----

    /** By task slot − 1, what the mask does to each product it changes. */
    private final List<Map<W, TaskPart>> taskParts = new ArrayList<>();
    private record TaskKey(int task, W w) {}
    private record TaskBiasKey(int task, W w, long bias) {}
    /** Each (task, matrix read) pair's matrix with the task's columns, each (task, router, bias) pair's bias; their memory. */
    private final Map<TaskKey, W> taskMatrices = new HashMap<>();
    private final Map<TaskBiasKey, Long> taskBiases = new HashMap<>();
    private final List<Long> taskMemory = new ArrayList<>();

    /** Takes the masks' parts (by task slot − 1; an empty map for a mask that changes nothing here). */
    void installTasks(List<Map<W, TaskPart>> parts) {
        if (!taskParts.isEmpty()) throw new IllegalStateException("the task masks were installed already");
        taskParts.addAll(parts);
    }

    /** Whether task {@code slot} (1-based) was installed. */
    boolean taskRuns(int slot) { return slot >= 1 && slot <= taskParts.size(); }

    private TaskPart part(int task, W w) { return task == 0 ? null : taskParts.get(task - 1).get(w); }

    /**
     * Makes the task variants {@code runs} read (each run's skill copy under its mask's columns, a router's bias with
     * its −∞): uploaded before a step's launches are made, kept until a skill copy is given back.
     */
    void prepareTasks(Run[] runs, java.util.function.Function<Matrix, float[]> columnScales) {
        for (Run r : runs) {
            if (r.task() == 0) continue;
            for (var e : taskParts.get(r.task() - 1).entrySet()) {
                W base = e.getKey(), m = matrix(r.skill(), base);
                TaskPart p = e.getValue();
                if (p.columns() != null)
                    taskMatrices.computeIfAbsent(new TaskKey(r.task(), m), k -> {
                        float[] cf = columnScales.apply(sourceOf(r.skill(), m));
                        for (int c = 0; c < cf.length; c++) cf[c] *= p.columns()[c];
                        return new W(m.dtype(), m.rows(), m.cols(), m.weights(), m.rowScales(), vectors.upload(cf, taskMemory));
                    });
                Delta d = r.adapter() == 0 ? null : delta(r.adapter(), base);
                if (d != null && p.columns() != null)   // (the masked products, o and down, fold no norm: A has no column scales)
                    taskMatrices.computeIfAbsent(new TaskKey(r.task(), d.a()), k -> new W(d.a().dtype(), d.a().rows(), d.a().cols(),
                            d.a().weights(), d.a().rowScales(), vectors.upload(p.columns().clone(), taskMemory)));
                if (p.routerOff() != null) {
                    long b = bias(r.skill(), p.baseBias());
                    taskBiases.computeIfAbsent(new TaskBiasKey(r.task(), base, b), k -> {
                        float[] v = b == 0 ? new float[p.routerOff().length] : biasValues(r.skill(), b).clone();
                        for (int i = 0; i < v.length; i++) if (p.routerOff()[i]) v[i] = Float.NEGATIVE_INFINITY;
                        return vectors.upload(v, taskMemory);
                    });
                }
            }
        }
    }

    /** The matrix a resident product {@code m} (the backbone's, or skill {@code skill}'s copy) was made from. */
    private Matrix sourceOf(int skill, W m) {
        if (skill != 0) {
            Matrix r = loaded.get(skill).sourceOf.get(m);
            if (r != null) return r;
        }
        return sources.get(m).matrix();
    }

    /** The values of the bias at {@code at} (the backbone's, or skill {@code skill}'s copy). */
    private float[] biasValues(int skill, long at) {
        if (skill != 0) {
            float[] v = loaded.get(skill).biasValues.get(at);
            if (v != null) return v;
        }
        for (var e : biasAt.entrySet()) if (e.getValue() == at) return e.getKey();
        throw new IllegalStateException("no bias at " + at);
    }

    /** What run {@code r} reads for product {@code w}: its skill's copy, under its task's columns. */
    W resolve(Run r, W w) {
        W m = matrix(r.skill(), w);
        TaskPart p = part(r.task(), w);
        return p == null || p.columns() == null ? m : taskMatrices.get(new TaskKey(r.task(), m));
    }

    /** The bias run {@code r} adds to product {@code w} (whose own is at {@code bias}). */
    long resolveBias(Run r, W w, long bias) {
        long b = bias(r.skill(), bias);
        TaskPart p = part(r.task(), w);
        if (p == null) return b;
        if (p.dropBias()) return 0;
        return p.routerOff() != null ? taskBiases.get(new TaskBiasKey(r.task(), w, b)) : b;
    }

    private void dropTaskVariants() {
        for (long d : taskMemory) cu.memFree(d);
        taskMemory.clear();
        taskMatrices.clear();
        taskBiases.clear();
    }

    /** Frees every copy and delta (the forward is closing). */
    void close() {
        for (Copy c : loaded.values()) free(c);
        loaded.clear();
        for (long d : deltaMemory) cu.memFree(d);
        deltaMemory.clear();
        deltas.clear();
        if (lowRankRows != 0) cu.memFree(lowRankRows);
        lowRankRows = 0;
        dropTaskVariants();
    }
}
