package dev.cmf4j.model;

/**
 * Rotary position embedding of one attention layer, resolved to what the kernel needs: the inverse
 * frequencies, the span they rotate and the factor that multiplies cos/sin.
 *
 * <p>Rotation follows transformers' {@code rotate_half}: for i < rotaryDim/2 the pair
 * (x[i], x[i + rotaryDim/2]) turns by angle pos·invFreq[i]; dimensions at or past {@code rotaryDim}
 * pass through unchanged (partial rotary). "Proportional" rope (Gemma4 global layers) rotates over the
 * whole head with zero frequencies past its rotated share, which this form expresses exactly.
 *
 * @param kind             the scaling family, for messages and docs
 * @param rotaryDim        even number of leading head dimensions the rotation spans
 * @param invFreq          rotaryDim/2 inverse frequencies (float32, as transformers computes them)
 * @param attentionScaling multiplies cos and sin (YaRN's mscale; 1 elsewhere)
 */
public record Rope(Kind kind, int rotaryDim, float[] invFreq, float attentionScaling) {

    public enum Kind { DEFAULT, LINEAR, LLAMA3, YARN, PROPORTIONAL, FREQ_FACTORS, NONE }

    public Rope {
        if (rotaryDim % 2 != 0 || invFreq.length != rotaryDim / 2)
            throw new ModelException("rope: rotary dim " + rotaryDim + " does not match " + invFreq.length + " frequencies");
        invFreq = invFreq.clone();
    }

    @Override public float[] invFreq() { return invFreq.clone(); }

    /** Frequency i without copying. */
    public float freq(int i) { return invFreq[i]; }

    /** No rotation at all (NoPE layers). */
    public static Rope none() { return new Rope(Kind.NONE, 0, new float[0], 1f); }

    /** theta^(-2i/dim) for i < dim/2, computed like transformers (float32 exponent and power). */
    static float[] defaultFreqs(double theta, int dim, int denominator) {
        float[] f = new float[dim / 2];
        for (int i = 0; i < f.length; i++) {
            float exponent = (float) (2 * i) / (float) denominator;
            float p = (float) Math.pow(theta, exponent);
            f[i] = 1f / p;
        }
        return f;
    }

    /** Plain rope over the first {@code rotaryDim} dims. */
    public static Rope standard(double theta, int rotaryDim) {
        return new Rope(Kind.DEFAULT, rotaryDim, defaultFreqs(theta, rotaryDim, rotaryDim), 1f);
    }

    /** Linear position interpolation: frequencies divided by {@code factor}. */
    public static Rope linear(double theta, int rotaryDim, double factor) {
        float[] f = defaultFreqs(theta, rotaryDim, rotaryDim);
        for (int i = 0; i < f.length; i++) f[i] = (float) (f[i] / factor);
        return new Rope(Kind.LINEAR, rotaryDim, f, 1f);
    }

    /** Llama-3.1 frequency bands: keep high frequencies, divide low ones by factor, smooth between. */
    public static Rope llama3(double theta, int rotaryDim, double factor, double lowFreqFactor,
                              double highFreqFactor, double originalMax) {
        float[] f = defaultFreqs(theta, rotaryDim, rotaryDim);
        double lowWavelen = originalMax / lowFreqFactor, highWavelen = originalMax / highFreqFactor;
        for (int i = 0; i < f.length; i++) {
            double inv = f[i];
            double wavelen = 2 * Math.PI / inv;
            double scaled = wavelen > lowWavelen ? inv / factor : inv;
            if (!(wavelen < highWavelen) && !(wavelen > lowWavelen)) {
                double smooth = (originalMax / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
                scaled = (1 - smooth) * scaled / factor + smooth * scaled;
            }
            f[i] = (float) scaled;
        }
        return new Rope(Kind.LLAMA3, rotaryDim, f, 1f);
    }

    /**
     * YaRN (NTK-by-parts): interpolated and extrapolated frequencies blended by a linear ramp over the
     * correction range; cos/sin scaled by {@code attentionFactor} (0.1·ln(factor)+1 when not given).
     */
    public static Rope yarn(double theta, int rotaryDim, double factor, double originalMax, double betaFast,
                            double betaSlow, Double attentionFactor, Double mscale, Double mscaleAllDim,
                            boolean truncate) {
        double attn;
        if (attentionFactor != null) attn = attentionFactor;
        else if (mscale != null && mscaleAllDim != null && mscale != 0 && mscaleAllDim != 0)
            attn = yarnMscale(factor, mscale) / yarnMscale(factor, mscaleAllDim);
        else attn = yarnMscale(factor, 1.0);
        double low = correctionDim(betaFast, rotaryDim, theta, originalMax);
        double high = correctionDim(betaSlow, rotaryDim, theta, originalMax);
        if (truncate) { low = Math.floor(low); high = Math.ceil(high); }
        low = Math.max(low, 0);
        high = Math.min(high, rotaryDim - 1);
        if (low == high) high += 0.001;
        float[] f = new float[rotaryDim / 2];
        for (int i = 0; i < f.length; i++) {
            float exponent = (float) (2 * i) / (float) rotaryDim;
            float posFreq = (float) Math.pow(theta, exponent);
            float extrapolation = 1f / posFreq;
            float interpolation = 1f / (float) (factor * posFreq);
            float ramp = (float) Math.min(1.0, Math.max(0.0, (i - low) / (high - low)));
            float extrapolationFactor = 1f - ramp;
            f[i] = interpolation * (1f - extrapolationFactor) + extrapolation * extrapolationFactor;
        }
        return new Rope(Kind.YARN, rotaryDim, f, (float) attn);
    }

    private static double yarnMscale(double scale, double mscale) {
        return scale <= 1 ? 1.0 : 0.1 * mscale * Math.log(scale) + 1.0;
    }

    private static double correctionDim(double rotations, int dim, double base, double maxPos) {
        return (dim * Math.log(maxPos / (rotations * 2 * Math.PI))) / (2 * Math.log(base));
    }

    /**
     * Gemma4's "proportional" rope: the first {@code floor(partial·headDim/2)} pairs rotate with
     * frequencies theta^(-2i/headDim), the remaining pairs of the head keep frequency 0; all / factor.
     */
    public static Rope proportional(double theta, int headDim, double partial, double factor) {
        int angles = (int) Math.floor(partial * headDim / 2);
        float[] f = new float[headDim / 2];
        for (int i = 0; i < angles; i++) {
            float exponent = (float) (2 * i) / (float) headDim;
            f[i] = 1f / (float) Math.pow(theta, exponent);
        }
        for (int i = 0; i < f.length; i++) f[i] = (float) (f[i] / factor);
        return new Rope(Kind.PROPORTIONAL, headDim, f, 1f);
    }

    /** Explicit per-frequency divisors (CMF {@code rope_freq_factors}, GGUF {@code rope_freqs}). */
    public static Rope withFreqFactors(double theta, int rotaryDim, float[] factors) {
        float[] f = defaultFreqs(theta, rotaryDim, rotaryDim);
        if (factors.length != f.length)
            throw new ModelException("rope_freq_factors has " + factors.length + " entries, expected " + f.length);
        for (int i = 0; i < f.length; i++) f[i] = f[i] / factors[i];
        return new Rope(Kind.FREQ_FACTORS, rotaryDim, f, 1f);
    }
}
