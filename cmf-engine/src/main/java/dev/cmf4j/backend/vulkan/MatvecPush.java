package dev.cmf4j.backend.vulkan;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** matvec.comp's push constants, nine uint32 in the order the shader declares them. */
final class MatvecPush {
    private MatvecPush() {}

    static final int BYTES = 36;
    static final int ROW_SCALES = 1, COL_SCALES = 2;

    static void write(MemorySegment s, int rows, int cols, int tokens, long row0, long yOff, int yStride, long rsOff, long cfOff, int flags) {
        int[] v = {rows, cols, tokens, Math.toIntExact(row0), Math.toIntExact(yOff), yStride, Math.toIntExact(rsOff), Math.toIntExact(cfOff), flags};
        for (int i = 0; i < v.length; i++) s.setAtIndex(ValueLayout.JAVA_INT, i, v[i]);
    }
}
