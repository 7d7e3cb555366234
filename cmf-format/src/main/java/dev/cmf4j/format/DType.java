package dev.cmf4j.format;

/**
 * CMF tensor dtypes with their on-disk ids (CMF_FORMAT.md §1.8). Ids are never reused; an id not
 * listed here is refused when a file is opened. Reserved ids are known (so the error says so) but
 * carry no decoder.
 */
public enum DType {
    F32(0, "f32"), F16(1, "f16"), BF16(2, "bf16"), Q8_ROW(3, "q8_row"), Q4_BLOCK(4, "q4_block"),
    MIX8_4(5, "mix8_4"), U8(6, "u8"), Q4_COL(7, "q4_col"), VBIT(8, "vbit"), Q8_2F(9, "q8_2f"),
    VBIT_RO(10, "vbit_ro"), Q4_TILED(11, "q4_tiled"), Q1(12, "q1"), Q1S(13, "q1s"), Q1T(14, "q1t"),
    Q4TP(15, "q4tp"), Q2TP(16, "q2tp"), U32(17, "u32"), U64(18, "u64");

    public final int id;
    public final String label;

    DType(int id, String label) { this.id = id; this.label = label; }

    private static final DType[] BY_ID = new DType[19];
    static { for (DType d : values()) BY_ID[d.id] = d; }

    /** The dtype with this id, or null when the id is unknown. */
    public static DType ofId(int id) { return id >= 0 && id < BY_ID.length ? BY_ID[id] : null; }

    /** The dtype named {@code label} (case-insensitive, also accepts "q4t" for q4_tiled), or null. */
    public static DType ofLabel(String label) {
        String l = label.toLowerCase(java.util.Locale.ROOT);
        if (l.equals("q4t")) return Q4_TILED;
        for (DType d : values()) if (d.label.equals(l)) return d;
        return null;
    }

    /** Reserved ids: known to the format, never written by current writers, not decodable. */
    public boolean reserved() { return this == MIX8_4 || this == Q4_COL; }

    /** Raw tables (lookup records): stored bytes, never decoded as matrices. */
    public boolean raw() { return this == U8 || this == U32 || this == U64; }
}
