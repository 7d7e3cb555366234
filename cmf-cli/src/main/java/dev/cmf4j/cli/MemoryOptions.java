package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.model.AttentionMemory;
import picocli.CommandLine.Option;

/**
 * {@code --o1 all|deepN|i,j,k|off}, {@code --o1-m}, {@code --o1-window}, {@code --o1-sink} and {@code --kv f32|f16|q8}:
 * how attention keeps its keys and values. Without {@code --o1} the file's {@code provenance.o1_attn} hint decides,
 * and without one attention is exact.
 */
public final class MemoryOptions {
    @Option(names = "--o1", paramLabel = "LAYERS",
            description = "seal full-attention layers after the prompt (bounded memory): all, deepN (the N deepest), i,j,k, or off"
                    + " (default: the file's provenance.o1_attn hint, else off)")
    String o1;

    @Option(names = "--o1-m", paramLabel = "M", description = "landmarks per head of a sealed layer (default 32)")
    Integer m;

    @Option(names = "--o1-window", paramLabel = "W", description = "exact window of a sealed layer (default 128)")
    Integer window;

    @Option(names = "--o1-sink", paramLabel = "S", description = "permanent exact first keys of a sealed layer (default 4)")
    Integer sink;

    @Option(names = "--kv", paramLabel = "TYPE", defaultValue = "f32",
            description = "KV cache element type: f32 (default), f16, or q8 (int8 with a scale per head and position)")
    String kv = "f32";

    /** These options with the KV cache stored as {@code type} instead. */
    MemoryOptions withKv(String type) {
        MemoryOptions o = new MemoryOptions();
        o.o1 = o1;
        o.m = m;
        o.window = window;
        o.sink = sink;
        o.kv = type;
        return o;
    }

    /** The choice for a file with this header. */
    AttentionMemory choose(JsonNode header) {
        if (o1 == null && (m != null || window != null || sink != null) && !header.path("provenance").has("o1_attn"))
            throw new IllegalArgumentException("--o1-m, --o1-window and --o1-sink need --o1 (or a file with a provenance.o1_attn hint)");
        return new AttentionMemory(AttentionMemory.resolve(o1, m, window, sink, header), KvType.parse(kv));
    }
}
