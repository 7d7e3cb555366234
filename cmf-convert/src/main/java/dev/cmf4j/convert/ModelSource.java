package dev.cmf4j.convert;

import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.List;

/**
 * A checkpoint opened for conversion (a Hugging Face folder or a GGUF file): the {@code arch} block,
 * the tensors in output order, the tokenizer and chat bundle, and what to record as provenance.
 * Tensor values stay in the source's memory map until read.
 */
public interface ModelSource extends AutoCloseable {
    /** The header's {@code arch} block. */
    ObjectNode arch();

    /** Tensors to write, in the order the converter should write them. */
    List<SourceTensor> tensors();

    /** tokenizer.json bytes for the vocab section, or null when the source has none. */
    byte[] tokenizerJson();

    /** The header's {@code tokenizer_config} object, or null. */
    ObjectNode tokenizerConfig();

    /** Source-specific provenance fields (format, configs, dropped tensors, transforms). */
    ObjectNode provenance();

    /** Human-readable name of the source for messages. */
    String describe();

    @Override void close();
}
