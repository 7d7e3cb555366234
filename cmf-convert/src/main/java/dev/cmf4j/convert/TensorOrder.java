package dev.cmf4j.convert;

import java.util.Comparator;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The order tensors are written in, the reference converter's: {@code model.embed_tokens.weight}, the
 * other model-level tensors (final norm, gemma4's per-layer-embedding tables), {@code lm_head.*},
 * then each decoder layer in numeric order with its tensors sorted by name, then everything else
 * (e.g. {@code model.mtp.*}). Names compare "naturally": digit runs as numbers, so expert 10 follows
 * expert 9 and each expert's matrices stay together.
 */
public final class TensorOrder {
    private TensorOrder() {}

    private static final Pattern LAYER = Pattern.compile("^model\\.layers\\.(\\d+)\\.");

    public static final Comparator<String> NAMES = Comparator.comparingInt(TensorOrder::group)
            .thenComparingLong(TensorOrder::layer).thenComparing(TensorOrder::natural);

    static int group(String n) {
        if (n.startsWith("model.embed_tokens.")) return 0;
        if (LAYER.matcher(n).find()) return 3;
        if (n.startsWith("model.") && !n.startsWith("model.mtp.")) return 1;
        if (n.startsWith("lm_head.")) return 2;
        return 4;
    }

    static long layer(String n) {
        Matcher m = LAYER.matcher(n);
        return m.find() ? Long.parseLong(m.group(1)) : -1;
    }

    /** Compares digit runs by value, everything else by char. */
    public static int natural(String a, String b) {
        int i = 0, j = 0;
        while (i < a.length() && j < b.length()) {
            char ca = a.charAt(i), cb = b.charAt(j);
            if (Character.isDigit(ca) && Character.isDigit(cb)) {
                int si = i, sj = j;
                while (i < a.length() && Character.isDigit(a.charAt(i))) i++;
                while (j < b.length() && Character.isDigit(b.charAt(j))) j++;
                String da = a.substring(si, i).replaceFirst("^0+(?=.)", ""), db = b.substring(sj, j).replaceFirst("^0+(?=.)", "");
                if (da.length() != db.length()) return Integer.compare(da.length(), db.length());
                int c = da.compareTo(db);
                if (c != 0) return c;
            } else {
                if (ca != cb) return Character.compare(ca, cb);
                i++;
                j++;
            }
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }
}
