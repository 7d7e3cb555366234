package dev.cmf4j.backend.cpu;

import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** Arrays to and from a stream in little-endian blocks (state snapshots): one write per 16 KB, not one per element. */
public final class BinaryArrays {
    private BinaryArrays() {}

    private static final int BLOCK = 4096;

    public static void writeFloats(DataOutput out, float[] a, int off, int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(BLOCK * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n; i += BLOCK) {
            int c = Math.min(BLOCK, n - i);
            b.clear();
            b.asFloatBuffer().put(a, off + i, c);
            out.write(b.array(), 0, c * 4);
        }
    }

    public static void readFloats(DataInput in, float[] a, int off, int n) throws IOException {
        byte[] raw = new byte[BLOCK * 4];
        for (int i = 0; i < n; i += BLOCK) {
            int c = Math.min(BLOCK, n - i);
            in.readFully(raw, 0, c * 4);
            ByteBuffer.wrap(raw, 0, c * 4).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer().get(a, off + i, c);
        }
    }

    public static void writeShorts(DataOutput out, short[] a, int off, int n) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(BLOCK * 2).order(ByteOrder.LITTLE_ENDIAN);
        for (int i = 0; i < n; i += BLOCK) {
            int c = Math.min(BLOCK, n - i);
            b.clear();
            b.asShortBuffer().put(a, off + i, c);
            out.write(b.array(), 0, c * 2);
        }
    }

    public static void readShorts(DataInput in, short[] a, int off, int n) throws IOException {
        byte[] raw = new byte[BLOCK * 2];
        for (int i = 0; i < n; i += BLOCK) {
            int c = Math.min(BLOCK, n - i);
            in.readFully(raw, 0, c * 2);
            ByteBuffer.wrap(raw, 0, c * 2).order(ByteOrder.LITTLE_ENDIAN).asShortBuffer().get(a, off + i, c);
        }
    }

    /** An array length read from a snapshot, checked against what the reader expects. */
    public static int checkedLength(DataInput in, int expected, String what) throws IOException {
        int n = in.readInt();
        if (n != expected) throw new IOException("state snapshot: " + what + " holds " + n + " values, this model expects " + expected);
        return n;
    }
}
