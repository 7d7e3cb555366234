package dev.cmf4j.text;

import java.util.ArrayList;
import java.util.List;

/** A mutable encoding while the pipeline builds it. Offsets are in code points once the post-processor runs. */
final class EncodingBuilder {
    final IntList ids = new IntList(64);
    final List<String> tokens = new ArrayList<>();
    final IntList starts = new IntList(64);
    final IntList ends = new IntList(64);

    void add(int id, String token, int start, int end) {
        ids.add(id);
        tokens.add(token);
        starts.add(start);
        ends.add(end);
    }

    int size() {
        return ids.n;
    }

    /** Inserts at position {@code at}. */
    void insert(int at, int id, String token, int start, int end) {
        add(id, token, start, end); // grow, then shift
        for (int i = size() - 1; i > at; i--) {
            ids.a[i] = ids.a[i - 1];
            starts.a[i] = starts.a[i - 1];
            ends.a[i] = ends.a[i - 1];
        }
        tokens.remove(size() - 1);
        tokens.add(at, token);
        ids.a[at] = id;
        starts.a[at] = start;
        ends.a[at] = end;
    }

    Encoding build() {
        return new Encoding(java.util.Arrays.copyOf(ids.a, ids.n), tokens,
                java.util.Arrays.copyOf(starts.a, starts.n), java.util.Arrays.copyOf(ends.a, ends.n));
    }
}
