package dev.cmf4j.api;

import java.io.PrintStream;

/**
 * How {@link Cmf#open} opens a model.
 *
 * <pre>{@code
 * ModelOptions o = ModelOptions.defaults().withDevice("auto").withThreads(4).withContextLength(2048);
 * }</pre>
 *
 * @param device        {@code cpu}, {@code cuda} (an error without a usable NVIDIA GPU), {@code vulkan} (an error without a
 *                      Vulkan device) or {@code auto} (an NVIDIA GPU, else a Vulkan GPU, else the CPU)
 * @param threads       CPU threads for this model; 0 = the process-wide pool (all processors, or {@code -Dcmf.threads})
 * @param contextLength positions one conversation may hold (prompt and reply); 0 = min(4096, the model's)
 * @param parallel      conversations decoded together in one batch; more wait in a queue
 * @param maxQueue      requests waiting at most; past it a request fails with {@link InferenceException.Kind#BUSY}
 * @param skill         the file's skill every request runs with (its {@code skill.ID.*} tensors in place of the
 *                      backbone's; CPU); null or "none": the backbone. One the file lacks fails at open
 * @param task          the file's task mask every request runs with (FFN neurons, heads, layers and experts off; CPU);
 *                      one the file lacks fails at open
 * @param quant         for {@code hf://} models: the quantization to convert to ({@code q8_2f}, {@code q4_block}, ...; null keeps the source's float type)
 * @param progress      where {@code hf://} downloads report progress; null for silence
 */
public record ModelOptions(String device, int threads, int contextLength, int parallel, int maxQueue, String skill,
                           String task, String quant, PrintStream progress) {

    public ModelOptions {
        if (device == null || !(device.equals("cpu") || device.equals("cuda") || device.equals("vulkan") || device.equals("auto")))
            throw new IllegalArgumentException("device must be cpu, cuda, vulkan or auto, got " + device);
        if (threads < 0) throw new IllegalArgumentException("threads must be >= 0, got " + threads);
        if (contextLength < 0 || contextLength == 1) throw new IllegalArgumentException("contextLength must be 0 (the default) or >= 2, got " + contextLength);
        if (parallel < 1) throw new IllegalArgumentException("parallel must be >= 1, got " + parallel);
        if (maxQueue < 0) throw new IllegalArgumentException("maxQueue must be >= 0, got " + maxQueue);
    }

    /** The CPU, every processor, a context of min(4096, the model's), 4 conversations at once, 256 waiting. */
    public static ModelOptions defaults() { return new ModelOptions("cpu", 0, 0, 4, 256, null, null, null, null); }

    public ModelOptions withDevice(String d) { return new ModelOptions(d, threads, contextLength, parallel, maxQueue, skill, task, quant, progress); }

    public ModelOptions withThreads(int t) { return new ModelOptions(device, t, contextLength, parallel, maxQueue, skill, task, quant, progress); }

    public ModelOptions withContextLength(int c) { return new ModelOptions(device, threads, c, parallel, maxQueue, skill, task, quant, progress); }

    public ModelOptions withParallel(int p) { return new ModelOptions(device, threads, contextLength, p, maxQueue, skill, task, quant, progress); }

    public ModelOptions withMaxQueue(int q) { return new ModelOptions(device, threads, contextLength, parallel, q, skill, task, quant, progress); }

    public ModelOptions withSkill(String s) { return new ModelOptions(device, threads, contextLength, parallel, maxQueue, s, task, quant, progress); }

    public ModelOptions withTask(String t) { return new ModelOptions(device, threads, contextLength, parallel, maxQueue, skill, t, quant, progress); }

    public ModelOptions withQuant(String q) { return new ModelOptions(device, threads, contextLength, parallel, maxQueue, skill, task, q, progress); }

    public ModelOptions withProgress(PrintStream p) { return new ModelOptions(device, threads, contextLength, parallel, maxQueue, skill, task, quant, p); }
}
