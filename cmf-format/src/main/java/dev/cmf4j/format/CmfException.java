package dev.cmf4j.format;

/**
 * Everything that can be wrong with a CMF file, as one sealed family so callers can catch it once or
 * switch over the kinds. Each error names the file, the byte offset where the problem sits (or -1
 * when no single offset applies) and what was expected there.
 *
 * <ul>
 *   <li>{@link InvalidMagic}: the first 4 bytes are not {@code "CMF\x01"} (not a CMF file).</li>
 *   <li>{@link UnsupportedVersion}: an envelope version other than 2.</li>
 *   <li>{@link UnsupportedFeature}: a {@code required_features} bit this reader does not implement.</li>
 *   <li>{@link Bounds}: a section, tensor or record that does not lie inside the file, overlaps
 *       another, or breaks an alignment rule.</li>
 *   <li>{@link Parse}: bytes that lie in bounds but do not decode (bad JSON, UTF-8, dtype, enum value,
 *       ndim, a size that does not match its dtype and shape, ...).</li>
 *   <li>{@link Integrity}: a stored hash64 that does not match the bytes it covers.</li>
 *   <li>{@link MissingTensor}: a tensor asked for by name that the file does not hold.</li>
 *   <li>{@link Io}: the operating system could not read, map or write the file.</li>
 * </ul>
 */
public abstract sealed class CmfException extends RuntimeException {
    private final String file;
    private final long offset;

    private CmfException(String file, long offset, String what, Throwable cause) {
        super(file + (offset >= 0 ? " @" + offset : "") + ": " + what, cause);
        this.file = file;
        this.offset = offset;
    }

    /** The file (path or label) the error is about. */
    public String file() { return file; }

    /** The byte offset in that file where the problem sits, or -1. */
    public long offset() { return offset; }

    /** Not a CMF file: the magic bytes are wrong. */
    public static final class InvalidMagic extends CmfException {
        public InvalidMagic(String file, long offset, String what) { super(file, offset, what, null); }
    }

    /** A CMF container version this reader does not read (only v2 is supported). */
    public static final class UnsupportedVersion extends CmfException {
        public UnsupportedVersion(String file, long offset, String what) { super(file, offset, what, null); }
    }

    /** A required feature bit this reader does not implement (unknown or reserved). */
    public static final class UnsupportedFeature extends CmfException {
        public UnsupportedFeature(String file, long offset, String what) { super(file, offset, what, null); }
    }

    /** Something lies outside the file or its section, overlaps, or is misaligned. */
    public static final class Bounds extends CmfException {
        public Bounds(String file, long offset, String what) { super(file, offset, what, null); }
    }

    /** In-bounds bytes that do not decode to what the format requires. */
    public static final class Parse extends CmfException {
        public Parse(String file, long offset, String what) { super(file, offset, what, null); }
        public Parse(String file, long offset, String what, Throwable cause) { super(file, offset, what, cause); }
    }

    /** A hash64 stored in the file does not match the bytes it covers. */
    public static final class Integrity extends CmfException {
        public Integrity(String file, long offset, String what) { super(file, offset, what, null); }
    }

    /** A tensor asked for by name is not in the file. */
    public static final class MissingTensor extends CmfException {
        private final String tensor;
        public MissingTensor(String file, String tensor) {
            super(file, -1, "no tensor named '" + tensor + "'", null);
            this.tensor = tensor;
        }
        public String tensor() { return tensor; }
    }

    /** The operating system failed to open, map, read or write the file. */
    public static final class Io extends CmfException {
        public Io(String file, String what, Throwable cause) { super(file, -1, what, cause); }
    }
}
