package dev.cmf4j.backend;

import dev.cmf4j.backend.cpu.kernel.WorkerPool;

import java.util.List;

/**
 * One device a model runs on: the weight products and host threads of the host graph, and, where the device can
 * run a model whole, its {@link DeviceForward}. What a device can do is asked of it here, never found out from
 * its class. One instance per open model (it caches per-weight device state keyed by the file's memory); the
 * caller that made it closes it after the model.
 */
public interface Backend extends AutoCloseable {

    /** {@code cpu} or {@code cuda}: where the weight products run. */
    String device();

    /** One line for people: the device, its threads or GPU, and why a GPU that was asked for is not used. */
    String description();

    /** The weight products of the host graph. */
    MatMul matmul();

    /** The threads the host graph's other operators (attention, recurrences) run on. */
    WorkerPool hostPool();

    /**
     * The ranks of the tensor-parallel group whose collectives this device's forward runs (one rank's plan then runs on
     * it whole, its all-reduces on the device); 1 when it is no rank of a group.
     */
    default int tensorRanks() { return 1; }

    /** Whether this device may run a model whole ({@link #deviceForward}); the host may skip building a plan. */
    default boolean runsWholeModels() { return false; }

    /**
     * A forward that runs {@code plan} whole on this device with KV caches of type {@code kv}, or null to run the host
     * graph with {@link #matmul()} (the device says why in its notes). The host has none.
     */
    default DeviceForward deviceForward(DecoderPlan plan, KvType kv) { return null; }

    /** Told that model {@code label} runs on the host graph because {@code why} (a device notes it). */
    default void hostGraph(String label, String why) {}

    /**
     * Each of this device's operators against the CPU's on random inputs and shapes (as llama.cpp's test-backend-ops);
     * empty for the CPU itself. {@code quick}: the small shapes only (an emulated device).
     */
    default java.util.List<OpResult> checkOperators(boolean quick) { return java.util.List.of(); }

    /**
     * A forward that runs {@code plan} whole with the attention layers {@code sealed} names sealed ({@code --o1}), or null
     * to run the host graph (whose steps seal them on the host); {@code sealed} null: {@link #deviceForward(DecoderPlan, KvType)}.
     */
    default DeviceForward deviceForward(DecoderPlan plan, KvType kv, SealedLayers sealed) {
        return sealed == null ? deviceForward(plan, kv) : null;
    }

    /** The {@code --o1} kernel golden through this device's streaming kernel (the host's float32 one by default). */
    default dev.cmf4j.backend.cpu.NystromGolden.Error[] checkO1Golden(dev.cmf4j.backend.cpu.NystromGolden golden) {
        return golden.check();
    }

    /** One-line notes from opening the device not yet shown (each is given once). */
    default List<String> takeNotes() { return List.of(); }

    /** Frees what the device holds for the models it ran. */
    @Override default void close() {}
}
