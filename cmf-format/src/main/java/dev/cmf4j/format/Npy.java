package dev.cmf4j.format;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * NumPy {@code .npy} arrays (format 1.0/2.0/3.0, C order, little-endian): the interchange format of
 * {@code cmf tensor}, {@code cmf logits} and the golden files. Reads f4, f8, i8 (int64), i4, u1, f2;
 * writes f4 and i8.
 */
public final class Npy {
    private Npy() {}

    /** A decoded array: dtype descriptor (e.g. {@code <f4}), shape, and the raw little-endian bytes. */
    public record Array(String descr, long[] shape, byte[] data) {
        public long size() { long n = 1; for (long d : shape) n *= d; return n; }

        public float[] toFloats() {
            int n = Math.toIntExact(size());
            float[] out = new float[n];
            ByteBuffer b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
            switch (descr) {
                case "<f4" -> b.asFloatBuffer().get(out);
                case "<f8" -> { for (int i = 0; i < n; i++) out[i] = (float) b.getDouble(i * 8); }
                case "<f2" -> { for (int i = 0; i < n; i++) out[i] = Float.float16ToFloat(b.getShort(i * 2)); }
                default -> throw new IllegalStateException("not a float array: " + descr);
            }
            return out;
        }

        public long[] toLongs() {
            int n = Math.toIntExact(size());
            long[] out = new long[n];
            ByteBuffer b = ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN);
            switch (descr) {
                case "<i8", "<u8" -> { for (int i = 0; i < n; i++) out[i] = b.getLong(i * 8); }
                case "<i4" -> { for (int i = 0; i < n; i++) out[i] = b.getInt(i * 4); }
                case "<u4" -> { for (int i = 0; i < n; i++) out[i] = b.getInt(i * 4) & 0xFFFFFFFFL; }
                case "|u1" -> { for (int i = 0; i < n; i++) out[i] = b.get(i) & 0xFF; }
                case "|i1" -> { for (int i = 0; i < n; i++) out[i] = b.get(i); }
                case "|b1" -> { for (int i = 0; i < n; i++) out[i] = b.get(i); }
                default -> throw new IllegalStateException("not an integer array: " + descr);
            }
            return out;
        }
    }

    private static final Pattern DESCR = Pattern.compile("'descr'\\s*:\\s*'([^']*)'");
    private static final Pattern ORDER = Pattern.compile("'fortran_order'\\s*:\\s*(True|False)");
    private static final Pattern SHAPE = Pattern.compile("'shape'\\s*:\\s*\\(([^)]*)\\)");
    private static final long MAX_BYTES = Integer.MAX_VALUE - 64;

    public static Array read(InputStream in) throws IOException {
        byte[] magic = in.readNBytes(8);
        if (magic.length < 8 || (magic[0] & 0xFF) != 0x93 || magic[1] != 'N' || magic[2] != 'U' || magic[3] != 'M'
                || magic[4] != 'P' || magic[5] != 'Y') throw new IOException("not a .npy stream (bad magic)");
        int major = magic[6];
        int hlen;
        if (major == 1) {
            byte[] l = in.readNBytes(2);
            if (l.length < 2) throw new IOException("truncated .npy header length");
            hlen = (l[0] & 0xFF) | (l[1] & 0xFF) << 8;
        } else if (major == 2 || major == 3) {
            byte[] l = in.readNBytes(4);
            if (l.length < 4) throw new IOException("truncated .npy header length");
            hlen = ByteBuffer.wrap(l).order(ByteOrder.LITTLE_ENDIAN).getInt();
            if (hlen < 0 || hlen > (1 << 20)) throw new IOException(".npy header length out of range: " + hlen);
        } else throw new IOException("unsupported .npy version " + major);
        byte[] hb = in.readNBytes(hlen);
        if (hb.length < hlen) throw new IOException("truncated .npy header");
        String header = new String(hb, major == 3 ? StandardCharsets.UTF_8 : StandardCharsets.ISO_8859_1);
        Matcher d = DESCR.matcher(header), o = ORDER.matcher(header), s = SHAPE.matcher(header);
        if (!d.find() || !o.find() || !s.find()) throw new IOException("malformed .npy header: " + header.strip());
        if (o.group(1).equals("True")) throw new IOException("fortran-order .npy arrays are not supported");
        String descr = d.group(1);
        int item = switch (descr) {
            case "<f4", "<i4", "<u4" -> 4;
            case "<f8", "<i8", "<u8" -> 8;
            case "<f2" -> 2;
            case "|u1", "|i1", "|b1" -> 1;
            default -> throw new IOException("unsupported .npy dtype " + descr);
        };
        List<Long> dims = new ArrayList<>();
        for (String part : s.group(1).split(",")) {
            String t = part.strip();
            if (!t.isEmpty()) dims.add(Long.parseLong(t.endsWith("L") ? t.substring(0, t.length() - 1) : t));
        }
        long[] shape = dims.stream().mapToLong(Long::longValue).toArray();
        long n = 1;
        for (long x : shape) {
            if (x < 0) throw new IOException("negative .npy dimension");
            n = Math.multiplyExact(n, x);
        }
        long bytes = Math.multiplyExact(n, item);
        if (bytes > MAX_BYTES) throw new IOException(".npy array too large to load: " + bytes + " bytes");
        byte[] data = in.readNBytes((int) bytes);
        if (data.length < bytes) throw new IOException("truncated .npy data: " + data.length + " of " + bytes + " bytes");
        return new Array(descr, shape, data);
    }

    /** Writes a float32 array of the given shape. */
    public static void writeFloats(OutputStream out, float[] values, long... shape) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(values.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        b.asFloatBuffer().put(values);
        write(out, "<f4", shape, b.array());
    }

    /** Writes an int64 array of the given shape. */
    public static void writeLongs(OutputStream out, long[] values, long... shape) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(values.length * 8).order(ByteOrder.LITTLE_ENDIAN);
        for (long v : values) b.putLong(v);
        write(out, "<i8", shape, b.array());
    }

    /** Writes the header for an array whose raw little-endian data the caller streams next. */
    public static void writeHeader(OutputStream out, String descr, long... shape) throws IOException {
        StringBuilder sh = new StringBuilder();
        for (int i = 0; i < shape.length; i++) sh.append(shape[i]).append(shape.length == 1 || i < shape.length - 1 ? "," : "");
        String dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + sh + "), }";
        int total = 10 + dict.length() + 1;
        int pad = (64 - total % 64) % 64;
        String header = dict + " ".repeat(pad) + "\n";
        out.write(new byte[] {(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0});
        int hl = header.length();
        out.write(hl & 0xFF);
        out.write((hl >> 8) & 0xFF);
        out.write(header.getBytes(StandardCharsets.ISO_8859_1));
    }

    private static void write(OutputStream out, String descr, long[] shape, byte[] data) throws IOException {
        writeHeader(out, descr, shape);
        out.write(data);
    }
}
