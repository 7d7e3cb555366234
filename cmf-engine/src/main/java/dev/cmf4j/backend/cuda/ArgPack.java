package dev.cmf4j.backend.cuda;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/**
 * The argument block of the {@code matvec_*} kernels in {@code kernels.cu}:
 * {@code (const void* w, const float* rs, const float* cf, const float* x, float* y, long long row0, int rows, int cols)}.
 * cuLaunchKernel takes one pointer per argument, each to storage of exactly that argument's size (a wrong
 * size is a silent wrong answer, not an error), so the slot offsets and sizes live here, in one place,
 * with a test that checks them against the C declaration.
 */
final class ArgPack {
    private ArgPack() {}

    /** Byte offset of each argument's slot: five 8-byte pointers, one 8-byte long long, two 4-byte ints. */
    static final long[] OFFSETS = {0, 8, 16, 24, 32, 40, 48, 52};
    /** Byte size of each slot, in the same order. */
    static final int[] SIZES = {8, 8, 8, 8, 8, 8, 4, 4};
    /** Threads per block: 8 warps, one output row each. */
    static final int BLOCK = 256;
    static final int ROWS_PER_BLOCK = BLOCK / 32;
    /** cuLaunchKernel's limit on gridDim.y (one token per y). */
    static final int MAX_GRID_Y = 65535;
    static final ValueLayout.OfShort U16_LE = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    static int gridX(int rows) { return (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK; }

    /** Writes one launch's arguments into {@code args} (device pointers are {@code CUdeviceptr} longs; 0 = null). */
    static void write(MemorySegment args, long w, long rowScales, long colField, long x, long y, long row0, int rows, int cols) {
        args.set(ValueLayout.JAVA_LONG, OFFSETS[0], w);
        args.set(ValueLayout.JAVA_LONG, OFFSETS[1], rowScales);
        args.set(ValueLayout.JAVA_LONG, OFFSETS[2], colField);
        args.set(ValueLayout.JAVA_LONG, OFFSETS[3], x);
        args.set(ValueLayout.JAVA_LONG, OFFSETS[4], y);
        args.set(ValueLayout.JAVA_LONG, OFFSETS[5], row0);
        args.set(ValueLayout.JAVA_INT, OFFSETS[6], rows);
        args.set(ValueLayout.JAVA_INT, OFFSETS[7], cols);
    }
}
