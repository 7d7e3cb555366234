package dev.cmf4j.backend.cuda;

/**
 * Where a chunk's steps go as the resident forward makes them: into a list (a decode step, kept for its graph; a
 * profiled chunk) or onto the stream at once (a prefill chunk), so the GPU starts on a chunk's first layer while the
 * host is still making its last one's launches (the host makes a llama-8b chunk's ~500 steps in ~3 ms, which the GPU
 * otherwise waited out: docs/GPU.md, "prefill chunks").
 */
@FunctionalInterface
interface Steps {
    void add(Step st);
}
