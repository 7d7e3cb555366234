package dev.cmf4j.api;

import dev.cmf4j.backend.Backend;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.backend.cpu.kernel.KernelMatMul;
import dev.cmf4j.backend.cpu.kernel.WorkerPool;
import dev.cmf4j.backend.cuda.DeviceChoice;
import dev.cmf4j.format.CmfException;
import dev.cmf4j.hub.Hub;
import dev.cmf4j.hub.HubException;
import dev.cmf4j.hub.HubSettings;
import dev.cmf4j.hub.HubUri;
import dev.cmf4j.model.Model;
import dev.cmf4j.model.ModelException;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Opens models: the entry point of the library.
 *
 * <pre>{@code
 * try (CmfModel model = Cmf.open(Path.of("model.cmf"), ModelOptions.defaults())) {
 *     Reply r = model.newChat().stream(List.of(Message.user("Hello!")), Sampling.defaults(), System.out::print);
 * }
 * CmfModel qwen = Cmf.open("hf://Qwen/Qwen3-0.6B", ModelOptions.defaults().withQuant("q8_2f"));   // downloaded once
 * }</pre>
 */
public final class Cmf {
    private Cmf() {}

    /** Opens a CMF file with the default options (the CPU, every processor). */
    public static CmfModel open(Path file) { return open(file, ModelOptions.defaults()); }

    /**
     * Opens a CMF file: it is memory-mapped (milliseconds, no weight copied) and a scheduler starts for it.
     *
     * @throws InferenceException (BAD_INPUT) when the file is missing, not a CMF file, or a model this engine cannot
     *                            run, or a skill or task mask it does not have or cannot apply
     */
    public static CmfModel open(Path file, ModelOptions options) {
        if (!Files.isRegularFile(file)) throw new InferenceException(InferenceException.Kind.BAD_INPUT, file + ": no such model file");
        WorkerPool own = null;
        Backend backend;
        if (options.device().equals("cpu") && options.threads() > 0) {
            own = new WorkerPool(options.threads());
            backend = new CpuBackend(new KernelMatMul(own, new CpuMatMul(own)), own, null);
        } else {
            backend = DeviceChoice.parse(options.device()).open();
        }
        try {
            Model m = Model.open(file, null, backend);
            try {
                return new CmfModel(file.getFileName().toString(), m, backend, own, options);
            } catch (RuntimeException e) {
                m.close();
                throw e;
            }
        } catch (RuntimeException e) {
            backend.close();
            if (own != null) own.close();
            if (e instanceof CmfException || e instanceof ModelException || e instanceof dev.cmf4j.runtime.GenerationException)
                throw new InferenceException(InferenceException.Kind.BAD_INPUT, e.getMessage(), e);
            throw e;
        }
    }

    /**
     * Opens a model by path or by Hugging Face address: {@code hf://ORG/REPO[@REV]} is downloaded into the Hugging Face
     * cache and converted once at {@link ModelOptions#quant()} (as {@code cmf pull}; {@code HF_TOKEN},
     * {@code HF_HUB_OFFLINE} and {@code HF_ENDPOINT} apply), then opened; anything else is a file path.
     *
     * @throws InferenceException (BAD_INPUT) for a malformed {@code hf://} address; (DOWNLOAD) when the Hub refuses,
     *                            cannot be reached with nothing cached, or a file fails its checks
     */
    public static CmfModel open(String model, ModelOptions options) {
        return open(model, options, null);
    }

    /**
     * {@link #open(String, ModelOptions)} with {@code hf://} models taken from the Hub and cache {@code hub} names (its
     * endpoint, e.g. a mirror; its cache directory; its token; offline or not) rather than from the environment; null
     * for the environment's ({@link HubSettings#fromEnvironment()}).
     */
    public static CmfModel open(String model, ModelOptions options, HubSettings hub) {
        if (HubUri.isHubUri(model)) {
            try {
                HubUri.parse(model);
            } catch (RuntimeException e) {
                throw new InferenceException(InferenceException.Kind.BAD_INPUT, e.getMessage(), e);
            }
            Path cmf;
            try {
                cmf = Hub.resolveModel(hub != null ? hub : HubSettings.fromEnvironment(), model, options.quant(), options.progress());
            } catch (HubException e) {
                throw new InferenceException(InferenceException.Kind.DOWNLOAD, e.getMessage(), e);
            }
            return open(cmf, options);
        }
        return open(Path.of(model), options);
    }
}
