package dev.cmf4j.convert.quant;

import dev.cmf4j.format.quant.TensorShape;

import java.lang.foreign.MemorySegment;

/** A {@link TensorEncoder} whose work unit is one row: reads it, checks it, hands it to {@link #encodeRow}. */
abstract class RowEncoder extends TensorEncoder {
    private final boolean finiteOnly;

    RowEncoder(TensorShape shape, FloatSource src, boolean finiteOnly) {
        super(shape, src);
        this.finiteOnly = finiteOnly;
        Scales.toIntSize(shape.cols(), shape, "a row");
    }

    @Override public long units() { return shape.rows(); }

    @Override public long unitElements() { return shape.cols(); }

    @Override protected void encodeUnits(long start, long count, MemorySegment dst) {
        int cols = (int) shape.cols();
        float[] row = new float[cols];
        float[][] scratch = new float[scratchRows()][cols];   // once per run of rows, not per row
        for (long r = start; r < start + count; r++) {
            src.read(r * cols, row, 0, cols);
            if (finiteOnly) Scales.requireFinite(row, 0, cols, r * cols, shape);
            encodeRow(r, row, scratch, dst);
        }
    }

    /** How many row-sized float arrays {@link #encodeRow(long, float[], float[][], MemorySegment)} needs as scratch. */
    int scratchRows() { return 0; }

    /**
     * As {@link #encodeRow(long, float[], MemorySegment)}, with {@code scratch}: {@link #scratchRows()} arrays of
     * cols floats, this caller's own (runs of rows may encode in parallel), so an encoder needing work arrays
     * does not allocate them per row.
     */
    void encodeRow(long r, float[] row, float[][] scratch, MemorySegment dst) { encodeRow(r, row, dst); }

    /** Writes row {@code r} (values in {@code row[0..cols)}) into its places in {@code dst}. */
    abstract void encodeRow(long r, float[] row, MemorySegment dst);
}
