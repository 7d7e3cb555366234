package dev.cmf4j.backend.cpu.kernel;

import dev.cmf4j.format.DType;

import java.util.Random;

/**
 * The child-JVM side of {@link KernelTierTest}: q8 decode products of 1..8 tokens over ragged shapes, computed
 * {@code reps} times, reported as the bits of the last round (plus the vector width), with a line for every token whose
 * several-token result differs from its own single-token product and for every round that differs from the first.
 */
public final class KernelTierProbe {
    private KernelTierProbe() {}

    static final int[][] SHAPES = {{2, 64}, {5, 257}, {21, 640}, {8, 100}};

    static String products(int reps) {
        StringBuilder first = null, last = null, problems = new StringBuilder();
        try (WorkerPool pool = new WorkerPool(2)) {
            for (int rep = 0; rep < reps; rep++) {
                StringBuilder out = new StringBuilder("L=" + Simd.L + " vector=" + Simd.VECTOR + "\n");
                Random rnd = new Random(4242);
                for (DType dtype : new DType[] {DType.Q8_ROW, DType.Q8_2F})
                    for (int[] s : SHAPES) {
                        int rows = s[0], cols = s[1];
                        WeightMatrix w = WeightMatrix.of(dtype, TestWeights.encode(dtype, TestWeights.randomMatrix(rnd, rows, cols), rows, cols), rows, cols);
                        for (int tokens = 1; tokens <= 8; tokens++) {
                            float[] x = TestWeights.randomVector(rnd, tokens * cols), y = new float[tokens * rows], one = new float[rows];
                            w.matvecRows(x, 0, tokens, y, 0, false, pool);
                            out.append(dtype.label).append(' ').append(rows).append('x').append(cols).append(" tokens ").append(tokens).append(':');
                            for (float v : y) out.append(' ').append(Integer.toHexString(Float.floatToRawIntBits(v)));
                            out.append('\n');
                            if (tokens == 1 && Simd.VECTOR) {   // the cold JVM's scalar twin, called directly
                                Q8Matrix q = (Q8Matrix) w;
                                float[] xp = new float[q.preparedLength()], twin = new float[rows];
                                q.prepare(x, 0, xp, 0);
                                q.dotRowsLanes(xp, 0, 0, rows, twin, 0, false);
                                for (int r = 0; r < rows; r++)
                                    if (Float.floatToRawIntBits(twin[r]) != Float.floatToRawIntBits(y[r]))
                                        problems.append("round ").append(rep).append(' ').append(dtype.label).append(' ').append(rows).append('x')
                                                .append(cols).append(" row ").append(r).append(": twin differs, ").append(twin[r]).append(" against ")
                                                .append(y[r]).append('\n');
                            }
                            for (int t = 0; t < tokens; t++) {
                                w.matvec(x, t * cols, one, 0, false, pool);
                                for (int r = 0; r < rows; r++)
                                    if (Float.floatToRawIntBits(one[r]) != Float.floatToRawIntBits(y[t * rows + r]))
                                        problems.append("round ").append(rep).append(' ').append(dtype.label).append(' ').append(rows).append('x')
                                                .append(cols).append(" tokens ").append(tokens).append(" t ").append(t).append(" row ").append(r)
                                                .append(": ").append(y[t * rows + r]).append(" alone ").append(one[r]).append('\n');
                            }
                        }
                    }
                if (first == null) first = out;
                else if (!out.toString().contentEquals(first)) problems.append("round ").append(rep).append(" differs from round 0\n");
                last = out;
            }
        }
        return last + problems.toString();
    }

    public static void main(String[] args) {
        System.out.print(products(Integer.parseInt(args[0])));
    }
}
