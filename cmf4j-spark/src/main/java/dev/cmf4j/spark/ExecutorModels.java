package dev.cmf4j.spark;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.InferenceException;
import dev.cmf4j.api.ModelOptions;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkFiles;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The models open in this JVM (an executor, or the driver in local mode), one per path and options: every task of
 * the executor shares it, so the file is mapped once and their rows share the model's scheduler and its batches.
 * They stay open for the next stage and job, and close when the JVM exits.
 */
public final class ExecutorModels {
    private record Key(String model, ModelOptions options) {}

    private static final Map<Key, CmfModel> OPEN = new ConcurrentHashMap<>();
    private static final AtomicInteger OPENED = new AtomicInteger();

    static {
        Runtime.getRuntime().addShutdownHook(new Thread(ExecutorModels::closeAll, "cmf4j-spark-close"));
    }

    private ExecutorModels() {}

    /**
     * The model for {@code settings}, opened on first use in this JVM.
     *
     * @throws InferenceException (BAD_INPUT) no such file here nor among the job's files, or not a model cmf4j runs
     */
    static CmfModel get(GenerateSettings settings) {
        String where = resolve(settings.modelPath());
        return OPEN.computeIfAbsent(new Key(where, settings.options()), k -> {
            try {
                CmfModel m = Cmf.open(k.model(), k.options());
                OPENED.incrementAndGet();
                return m;
            } catch (InferenceException e) {
                throw new InferenceException(e.kind(), "cmf4j-spark cannot open the model " + settings.modelPath()
                        + (where.equals(settings.modelPath()) ? "" : " (as " + where + ")") + ": " + e.getMessage(), e);
            }
        });
    }

    /** Models opened in this JVM since it started (a model is opened once per path and options). */
    public static int opened() { return OPENED.get(); }

    /** Closes every model open in this JVM (a later task opens it again); for tests and benchmarks. */
    public static void closeAll() {
        for (var it = OPEN.values().iterator(); it.hasNext(); ) {
            it.next().close();
            it.remove();
        }
    }

    /**
     * Where this JVM finds the model: {@code hf://} addresses as they are; a {@code file:} URI or a path that exists
     * here; else the job's copy of a file shipped with {@code --files} or {@code SparkContext.addFile}, by its name.
     */
    static String resolve(String model) {
        if (model.startsWith("hf://")) return model;
        Path p = model.startsWith("file:") ? Path.of(URI.create(model)) : Path.of(model);
        if (Files.isRegularFile(p)) return p.toString();
        if (SparkEnv.get() != null) {
            Path shipped = Path.of(SparkFiles.get(p.getFileName().toString()));
            if (Files.isRegularFile(shipped)) return shipped.toString();
        }
        return p.toString();
    }
}
