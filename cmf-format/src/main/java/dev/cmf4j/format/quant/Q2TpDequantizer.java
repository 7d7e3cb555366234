package dev.cmf4j.format.quant;

import dev.cmf4j.format.DType;

import java.lang.foreign.MemorySegment;

/**
 * q2tp (id 16), 2-bit tiles on the q4tp scale ladder. Planes as q4tp but the weight plane holds
 * 8 B per group, four 2-bit weights per byte, LSB-first. The ladder is {@link TpLadder#q2tp}:
 * rung 0 is an exact zero group, rung c ≥ 1 the q4tp rung c−1. A weight decodes as
 * {@code (c − 1.5) · s} for c ∈ 0..3, or {@code (c − 1.0) · s} in the Prism affine variant
 * (files with the PRISM_AFFINE feature bit, for the matrices that file lists). Needs cols % 32 == 0.
 */
public final class Q2TpDequantizer implements Dequantizer {
    private final float offset;

    /** The standard q2tp decoder, {@code (c − 1.5) · s}. */
    public Q2TpDequantizer() { this(false); }

    /** {@code affine = true}: the Prism variant {@code (c − 1.0) · s}. */
    public Q2TpDequantizer(boolean affine) { this.offset = affine ? 1.0f : 1.5f; }

    public boolean affine() { return offset == 1.0f; }

    @Override public DType dtype() { return DType.Q2TP; }

    @Override public RowDecoder decoder(MemorySegment data, long[] dims) {
        TensorShape s = TensorShape.of(dtype(), dims);
        s.requireColsMultipleOfGroup();
        long gpr = s.groupsPerRow();
        long stride = TpLadder.codeStride(gpr);
        long params = s.mul(s.mul(s.rows(), gpr), 8);
        long codes = s.add(params, s.mul(s.rows(), 4));
        s.requireLength(data.byteSize(), s.add(codes, s.mul(s.rows(), stride)),
                "rows·gpr·8 B weights + rows·4 B (lo, step) + rows·ceil(gpr·5/8) B codes");
        float[] level = {0 - offset, 1 - offset, 2 - offset, 3 - offset};
        return new RowDecoder(s) {
            @Override protected void decode(long r0, int n, float[] out, int off) {
                float[] ladder = new float[TpLadder.RUNGS], value = new float[4];
                int cols = (int) shape.cols();
                for (int r = 0; r < n; r++) {
                    long row = r0 + r;
                    TpLadder.q2tp(Le.f16(data, params + 4 * row), Le.f16(data, params + 4 * row + 2), ladder);
                    long codeRow = codes + row * stride;
                    long w = row * gpr * 8;
                    int o = off + r * cols;
                    for (int g = 0; g < gpr; g++) {
                        float scale = ladder[Q4TpDequantizer.code(data, codeRow, g)];
                        for (int c = 0; c < 4; c++) value[c] = level[c] * scale;   // the 4 products, once per group
                        long bits = data.get(Le.I64, w + g * 8L);
                        int at = o + 32 * g;
                        for (int k = 0; k < 32; k++) out[at + k] = value[(int) (bits >>> (2 * k)) & 3];
                    }
                }
            }
        };
    }
}
