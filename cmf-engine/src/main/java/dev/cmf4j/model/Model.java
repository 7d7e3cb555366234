package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.format.CmfException;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.model.graph.Graph;

import java.nio.file.Path;

/**
 * An open, runnable model: the CMF file (memory-mapped), its {@link ModelSpec} and the {@link Graph}
 * that executes it. Opening reads the header and directory and resolves every tensor the spec names
 * (milliseconds; no weight is copied). Close it to unmap the file.
 */
public final class Model implements AutoCloseable {
    private final CmfFile file;
    private final ModelSpec spec;
    private final Graph graph;
    /** Builds a graph of this model over other weights (same spec, backend, adapters and attention memory). */
    private final java.util.function.Function<Weights, Graph> rebuild;
    private final Weights weights;
    /** Builds the file's MTP head's spec, or null when it has none; asked only when the head is (a malformed head
     *  fails the draft, not the model). */
    private final java.util.function.Supplier<MtpSpec> mtpSpec;
    private final Backend backend;
    private Graph mtp;

    private Model(CmfFile file, ModelSpec spec, Weights weights, java.util.function.Function<Weights, Graph> rebuild,
                  java.util.function.Supplier<MtpSpec> mtpSpec, Backend backend) {
        this.file = file;
        this.spec = spec;
        this.weights = weights;
        this.rebuild = rebuild;
        this.graph = rebuild.apply(weights);
        this.mtpSpec = mtpSpec;
        this.backend = backend;
    }

    /**
     * Opens {@code path} on the CPU (the fast kernels). The backend is the model's own: its per-tensor kernel tables
     * live exactly as long as the file's mapping.
     */
    public static Model open(Path path) { return open(path, null, new CpuBackend()); }

    /**
     * @param archOverrides fields merged over the file's arch block (for files whose block lacks them); may be null
     * @param backend       the device, one per open model; the caller closes it after the model
     * @throws ModelException when the file is not a model this engine can run (the message says why)
     * @throws CmfException   when the file is not a valid CMF file
     */
    public static Model open(Path path, JsonNode archOverrides, Backend backend) {
        return open(path, archOverrides, backend, java.util.List.of());
    }

    /**
     * As {@link #open(Path, JsonNode, Backend)}, with un-merged LoRA adapters the sequences may ask for
     * ({@link Graph#overlay}); an adapter that targets something other than a weight product of the model fails here.
     */
    public static Model open(Path path, JsonNode archOverrides, Backend backend, java.util.List<LowRankAdapter> adapters) {
        return open(path, archOverrides, backend, adapters, header -> AttentionMemory.EXACT);
    }

    /**
     * As {@link #open(Path, JsonNode, Backend, java.util.List)}, with attention memory chosen from the file's header
     * (where {@code provenance.o1_attn} may suggest sealed layers): {@code memory} maps the header to the choice.
     */
    public static Model open(Path path, JsonNode archOverrides, Backend backend, java.util.List<LowRankAdapter> adapters,
                             java.util.function.Function<JsonNode, AttentionMemory> memory) {
        return open(path, archOverrides, backend, adapters, memory, java.util.function.UnaryOperator.identity());
    }

    /**
     * As above, the graph built over the file's weights as {@code wrap} presents them ({@link SkillWeights}: one skill
     * applied to the whole model; {@link BlendedWeights}: a blend as one more skill).
     */
    public static Model open(Path path, JsonNode archOverrides, Backend backend, java.util.List<LowRankAdapter> adapters,
                             java.util.function.Function<JsonNode, AttentionMemory> memory,
                             java.util.function.UnaryOperator<Weights> wrap) {
        CmfFile file = CmfFile.open(path);
        try {
            if ((file.envelope().features() & dev.cmf4j.format.Feature.SKILL_FILE.mask()) != 0)
                throw new ModelException("a standalone skill file, not a model: add it to its base with 'cmf skill apply BASE "
                        + path.getFileName() + "'");
            Weights w = new CmfWeights(file);
            JsonNode header = file.header().toJson();
            ModelSpec spec = SpecBuilder.build(header, w, archOverrides);
            AttentionMemory mem = memory.apply(header);
            return new Model(file, spec, wrap.apply(w), ws -> new Graph(spec, ws, backend, adapters, mem),
                    () -> SpecBuilder.buildMtp(header, w, archOverrides, spec), backend);
        } catch (ModelException e) {
            file.close();
            throw new ModelException(path.getFileName() + ": " + e.getMessage(), e);
        } catch (RuntimeException | Error e) {
            file.close();
            throw e;
        }
    }

    public CmfFile file() { return file; }

    public ModelSpec spec() { return spec; }

    public Graph graph() { return graph; }

    /** Whether the file has an MTP head ({@code model.mtp.*}). */
    public boolean hasMtp() { return weights.names().stream().anyMatch(n -> n.startsWith(SpecBuilder.MTP_PREFIX)); }

    /**
     * The graph of the file's MTP head (built once; it reads this model's mapping), on the model's backend (GPU-resident
     * on CUDA: {@link dev.cmf4j.backend.DeviceForward#forwardMtp}). It reads the model's last-layer rows, which a
     * GPU-resident forward copies back with the logits. A {@link ModelException} when the file has none, or when the
     * model runs whole on a device whose forward does not hand those rows back.
     */
    public synchronized Graph mtpGraph() {
        if (mtp != null) return mtp;
        String name = file.label();
        if (!hasMtp()) throw new ModelException(name + " has no MTP head (no " + SpecBuilder.MTP_PREFIX + "* tensors)");
        String noRows = graph.lastLayerProblem();
        if (noRows != null)
            throw new ModelException("the MTP head reads the model's hidden states: " + noRows + " (use --device cpu, or a"
                    + " draft model file)");
        try {
            return mtp = Graph.ofMtp(mtpSpec.get(), weights, backend);
        } catch (ModelException e) {
            throw new ModelException(name + ": MTP head: " + e.getMessage(), e);
        }
    }

    /**
     * A second graph of this model over its weights as {@code wrap} presents them (e.g. {@link BlendedWeights}: one
     * more skill), with the same backend, adapters and attention memory. It reads the file's mapping: use it no
     * longer than this model.
     */
    public Graph graph(java.util.function.UnaryOperator<Weights> wrap) { return rebuild.apply(wrap.apply(weights)); }

    /**
     * Why this model cannot be split over {@code ranks} by tensor parallelism (the split's refusal, naming the layer or
     * tensor), or null when it can: the split is made and dropped (its cut tensors are only copied when asked for).
     */
    public String tensorParallelProblem(int ranks) {
        try {
            TensorParallel.split(spec, weights, ranks);
            return null;
        } catch (ModelException e) {
            return e.getMessage();
        }
    }

    /**
     * This model split into a pipeline of {@code stages} by layers ({@link LayerSplit}), stage s on
     * {@code backends.apply(s)}; it reads the file's mapping: use it no longer than this model. A {@link ModelException}
     * saying why when the model cannot be split that way.
     */
    public dev.cmf4j.model.graph.LayerSplitGraph layerSplit(int stages, java.util.function.IntFunction<Backend> backends) {
        try {
            return dev.cmf4j.model.graph.LayerSplitGraph.of(spec, weights, stages, backends);
        } catch (ModelException e) {
            throw new ModelException(file.label() + ": " + e.getMessage(), e);
        }
    }

    /**
     * This model split over {@code ranks} (tensor parallel: {@link TensorParallel}), rank r's part on
     * {@code backends.apply(r)}; it reads the file's mapping: use it no longer than this model. A {@link ModelException}
     * saying why when the model cannot be split that way.
     */
    public dev.cmf4j.model.graph.TensorParallelGraph tensorParallel(int ranks, java.util.function.IntFunction<Backend> backends) {
        try {
            return dev.cmf4j.model.graph.TensorParallelGraph.of(spec, weights, ranks, backends);
        } catch (ModelException e) {
            throw new ModelException(file.label() + ": " + e.getMessage(), e);
        }
    }

    @Override public void close() { file.close(); }
}
