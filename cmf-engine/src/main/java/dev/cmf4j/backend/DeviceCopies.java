package dev.cmf4j.backend;

import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * A device backend's copies of weight tensors, made on first use and keyed by the tensor's mapped memory, so every view
 * of one tensor shares one copy. A copy whose mapping has been closed is stale (a later mapping may reuse the address,
 * and a segment's equality is its address): it is freed and made again. Not thread-safe; the owner serialises calls.
 *
 * @param <T> the backend's copy of one tensor
 */
public final class DeviceCopies<T extends DeviceCopies.Copy> {
    /** A device copy of one tensor. */
    public interface Copy {
        /** The mapped memory it was made from. */
        MemorySegment source();
    }

    private final Map<MemorySegment, T> copies = new HashMap<>();
    private final Consumer<T> free;

    /** @param free gives one copy's device memory back */
    public DeviceCopies(Consumer<T> free) { this.free = free; }

    /** {@code w}'s copy, made by {@code upload} on first use or when the one held came from a closed mapping. */
    public T get(Matrix w, Function<Matrix, T> upload) {
        T d = copies.get(w.data());
        if (d != null && !d.source().scope().isAlive()) {
            free.accept(d);
            copies.remove(w.data());
            d = null;
        }
        if (d == null) {
            d = upload.apply(w);
            copies.put(w.data(), d);
        }
        return d;
    }

    /** Frees {@code w}'s copy, if there is one (a skill's replacement given back). */
    public void release(Matrix w) {
        T d = copies.remove(w.data());
        if (d != null) free.accept(d);
    }

    /** Frees every copy. */
    public void clear() {
        copies.values().forEach(free);
        copies.clear();
    }
}
