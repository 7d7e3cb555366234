package dev.cmf4j.text;

import java.util.Arrays;

/**
 * The result of a pattern search over a string: consecutive spans {@code [start, end)} covering the
 * whole string, each flagged as a match or as the text between matches (the reference's
 * {@code Vec<(Offsets, bool)>}). Reused between calls to avoid allocation.
 */
final class Matches {
    private int[] data = new int[48];
    private int count;

    void clear() {
        count = 0;
    }

    void add(int start, int end, boolean match) {
        if (count * 3 + 3 > data.length) data = Arrays.copyOf(data, data.length * 2);
        data[count * 3] = start;
        data[count * 3 + 1] = end;
        data[count * 3 + 2] = match ? 1 : 0;
        count++;
    }

    int size() {
        return count;
    }

    int start(int i) {
        return data[i * 3];
    }

    int end(int i) {
        return data[i * 3 + 1];
    }

    boolean isMatch(int i) {
        return data[i * 3 + 2] != 0;
    }

    void setEnd(int i, int end) {
        data[i * 3 + 1] = end;
    }

    void setStart(int i, int start) {
        data[i * 3] = start;
    }

    void setMatch(int i, boolean match) {
        data[i * 3 + 2] = match ? 1 : 0;
    }

    /** Flips every flag (the reference's {@code Invert} pattern). */
    void invert() {
        for (int i = 0; i < count; i++) data[i * 3 + 2] ^= 1;
    }

    /** Reverses the order of the spans. */
    void reverse() {
        for (int i = 0, j = count - 1; i < j; i++, j--) {
            for (int k = 0; k < 3; k++) {
                int t = data[i * 3 + k];
                data[i * 3 + k] = data[j * 3 + k];
                data[j * 3 + k] = t;
            }
        }
    }
}
