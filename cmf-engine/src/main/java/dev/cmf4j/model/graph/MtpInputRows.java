package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;

/**
 * An MTP head's input rows before its fc: [embeddingNorm(table[id] · scale); hiddenNorm(the model's hidden row)], the
 * embedding first, as the head was trained. The CPU plan's first op projects them; a device running the rest of the head
 * takes them from the host.
 */
record MtpInputRows(Matrix table, float scale, NormOp embeddingNorm, NormOp hiddenNorm, int hidden) {
    /** Row t of {@code out} ([tokens, 2·hidden]) from token {@code ids[off + t]} and hidden row t from {@code hiddenOff}. */
    void make(int[] ids, int off, int tokens, float[] hiddenRows, int hiddenOff, float[] out) {
        for (int t = 0; t < tokens; t++) {
            int e = 2 * t * hidden, h = e + hidden;
            table.decodeRow(ids[off + t], out, e);
            if (scale != 1f) for (int i = 0; i < hidden; i++) out[e + i] *= scale;
            embeddingNorm.apply(out, e, out, e);
            System.arraycopy(hiddenRows, hiddenOff + t * hidden, out, h, hidden);
            hiddenNorm.apply(out, h, out, h);
        }
    }
}
