package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;
import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;

import java.lang.foreign.MemorySegment;

import static dev.cmf4j.backend.cpu.kernel.Simd.F;
import static dev.cmf4j.backend.cpu.kernel.Simd.L;
import static dev.cmf4j.backend.cpu.kernel.Simd.LE;

/** f32 weights: 4 bytes each, row-major. Decode is one FMA per loaded float. */
final class F32Matrix extends WeightMatrix {

    F32Matrix(MemorySegment data, long storedRows, int cols, long row0, int rows) {
        super(data, storedRows, cols, row0, rows, DType.F32);
    }

    @Override WeightMatrix window(long firstRow, int n) { return new F32Matrix(data, storedRows, cols, firstRow, n); }

    @Override public DType dtype() { return DType.F32; }

    @Override
    void dotRows(float[] x, int xo, int r0, int r1, float[] y, int yo, boolean add) {
        MemorySegment m = data;
        int n = cols;
        int vec = Simd.VECTOR ? n - n % (4 * L) : 0;
        for (int r = r0; r < r1; r++) {
            long base = 4L * (row0 + r) * n;
            float s = 0f;
            int c = 0;
            if (vec > 0) {
                FloatVector a0 = FloatVector.zero(F), a1 = a0, a2 = a0, a3 = a0;
                for (; c < vec; c += 4 * L) {
                    long o = base + 4L * c;
                    a0 = FloatVector.fromMemorySegment(F, m, o, LE).fma(FloatVector.fromArray(F, x, xo + c), a0);
                    a1 = FloatVector.fromMemorySegment(F, m, o + 4L * L, LE).fma(FloatVector.fromArray(F, x, xo + c + L), a1);
                    a2 = FloatVector.fromMemorySegment(F, m, o + 8L * L, LE).fma(FloatVector.fromArray(F, x, xo + c + 2 * L), a2);
                    a3 = FloatVector.fromMemorySegment(F, m, o + 12L * L, LE).fma(FloatVector.fromArray(F, x, xo + c + 3 * L), a3);
                }
                s = a0.add(a1).add(a2.add(a3)).reduceLanes(VectorOperators.ADD);
            }
            for (; c < n; c++) s += m.get(Simd.F32, base + 4L * c) * x[xo + c];
            y[yo + r] = add ? y[yo + r] + s : s;
        }
    }

    @Override
    void unpack(int r0, int nr, int k0, int nk, float[] dst, int dOff, int ld) {
        MemorySegment m = data;
        int vec = Simd.VECTOR ? nk - nk % L : 0;
        for (int i = 0; i < nr; i++) {
            long base = 4L * ((row0 + r0 + i) * cols + k0);
            int d = dOff + i * ld;
            int j = 0;
            for (; j < vec; j += L) FloatVector.fromMemorySegment(F, m, base + 4L * j, LE).intoArray(dst, d + j);
            for (; j < nk; j++) dst[d + j] = m.get(Simd.F32, base + 4L * j);
        }
    }
}
