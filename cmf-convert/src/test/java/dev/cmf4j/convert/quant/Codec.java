package dev.cmf4j.convert.quant;

import dev.cmf4j.format.DType;
import dev.cmf4j.format.quant.Dequantizers;

import java.lang.foreign.MemorySegment;

/** Test helpers: encode with a {@link Quantizer}, decode with the format's dequantizer, measure. */
final class Codec {
    private Codec() {}

    static float[] roundTrip(DType t, float[] w, long... shape) {
        byte[] payload = Quantizer.of(t).encode(w, shape);
        return Dequantizers.of(t).all(MemorySegment.ofArray(payload), shape);
    }

    /** RMS(w − d) / RMS(w); 0 for an all-zero tensor decoded exactly. */
    static double relRmse(float[] w, float[] d) {
        double se = 0, ss = 0;
        for (int i = 0; i < w.length; i++) {
            double e = (double) w[i] - d[i];
            se += e * e;
            ss += (double) w[i] * w[i];
        }
        return ss == 0 ? Math.sqrt(se) : Math.sqrt(se / ss);
    }

    static double sse(float[] w, float[] d) {
        double se = 0;
        for (int i = 0; i < w.length; i++) {
            double e = (double) w[i] - d[i];
            se += e * e;
        }
        return se;
    }

    /** Gaussian weights with per-row amplitude spread and a few 10× outlier input channels. */
    static float[] weights(java.util.Random rnd, int rows, int cols) {
        float[] w = new float[rows * cols];
        boolean[] outlier = new boolean[cols];
        for (int k = 0; k < Math.max(1, cols / 50); k++) outlier[rnd.nextInt(cols)] = true;
        for (int r = 0; r < rows; r++) {
            double amp = Math.exp(rnd.nextGaussian() * 0.5) * 0.02;
            for (int c = 0; c < cols; c++) w[r * cols + c] = (float) (rnd.nextGaussian() * amp * (outlier[c] ? 10 : 1));
        }
        return w;
    }
}
