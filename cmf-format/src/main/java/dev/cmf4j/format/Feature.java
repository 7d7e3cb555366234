package dev.cmf4j.format;

import java.util.EnumSet;
import java.util.Set;

/**
 * The {@code required_features} bits of the envelope (CMF_FORMAT.md §1.2). A reader must refuse a file
 * with a bit it does not know; bits 3 and 4 are reserved by the format (no writer sets them, their
 * meaning is not specified) and are refused too.
 */
public enum Feature {
    TENSOR_DIR(0), BINARY_MASKS(1), QUANT_2F(2), DELTA_MASKS(3), HOT_PACKS(4), LOOP_MASKS(5),
    SKILL_FILE(6), PRISM_HADAMARD(7), PRISM_AFFINE(8), SKILLS_V2(9), ROUTER_V2(10), DECISION(11),
    BOUNDED_STATE(12), GENOME(13);

    public final int bit;

    Feature(int bit) { this.bit = bit; }

    public int mask() { return 1 << bit; }

    /** Bits this reader understands: every assigned bit except the reserved 3 and 4. */
    public static final int SUPPORTED = supported();

    private static int supported() {
        int m = 0;
        for (Feature f : values()) if (f != DELTA_MASKS && f != HOT_PACKS) m |= f.mask();
        return m;
    }

    /** The features whose bits are set in {@code bits} (unknown bits are ignored here). */
    public static Set<Feature> of(int bits) {
        EnumSet<Feature> s = EnumSet.noneOf(Feature.class);
        for (Feature f : values()) if ((bits & f.mask()) != 0) s.add(f);
        return s;
    }

    /** The feature with this bit number, or null. */
    public static Feature ofBit(int bit) {
        for (Feature f : values()) if (f.bit == bit) return f;
        return null;
    }
}
