package dev.cmf4j.text;

/** A growable {@code int[]} with its fields open to the package, for the pipeline's hot loops. */
final class IntList {
    int[] a;
    int n;

    IntList(int capacity) {
        a = new int[Math.max(4, capacity)];
    }

    void add(int v) {
        if (n == a.length) a = java.util.Arrays.copyOf(a, n * 2);
        a[n++] = v;
    }
}
