package dev.cmf4j.convert;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * The block-quantized weights of a safetensors checkpoint, decoded to float32 at convert time:
 * <ul>
 *   <li>FP8 with block scales (Qwen3-FP8, DeepSeek): {@code X.weight} in F8_E4M3 {@code [out, in]} and
 *       {@code X.weight_scale_inv} {@code [ceil(out/bo), ceil(in/bi)]} (blocks of {@code quantization_config.weight_block_size},
 *       128×128 by default); value = float(e4m3) · scale_inv of its block, one float32 product;</li>
 *   <li>MXFP4 (gpt-oss): {@code X_blocks} U8 {@code [E, R, G, 16]} and {@code X_scales} U8 {@code [E, R, G]}: each byte holds
 *       two E2M1 codes, low nibble first, each group of 32 shares one E8M0 scale {@code 2^(s−127)}; the decoded
 *       {@code [E, R, G·32]} is transposed to {@code [E, G·32, R]} and named {@code X}, as transformers' dequantization
 *       gives the bf16 checkpoint's layout.</li>
 * </ul>
 * The scale tensors are consumed; everything else is left to the caller.
 */
final class BlockScaledWeights {
    private static final float[] E4M3 = new float[256];
    private static final float[] E2M1 = {0f, 0.5f, 1f, 1.5f, 2f, 3f, 4f, 6f, -0f, -0.5f, -1f, -1.5f, -2f, -3f, -4f, -6f};

    static {
        for (int b = 0; b < 256; b++) {
            int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
            float v;
            if (exp == 15 && man == 7) v = Float.NaN;                   // e4m3fn: no infinities, one NaN per sign
            else if (exp == 0) v = Math.scalb(man / 8f, -6);             // subnormals
            else v = Math.scalb(1f + man / 8f, exp - 7);
            E4M3[b] = sign == 1 ? -v : v;
        }
    }

    /** The value of e4m3fn code {@code b} (0..255). */
    static float e4m3(int b) { return E4M3[b & 0xFF]; }

    /** One decoded tensor: its name and shape as the float checkpoint would have them, and how it was stored. */
    record Decoded(SafetensorsReader.Tensor tensor, TensorData data, String encoding) {}

    private final Map<String, Decoded> decoded = new LinkedHashMap<>();
    private final Set<String> consumed = new java.util.HashSet<>();

    BlockScaledWeights(SafetensorsReader w, HfConfig config) {
        int[] block = blockSize(config);
        for (SafetensorsReader.Tensor t : w.tensors()) {
            String n = t.name();
            if (t.dtype() == SafetensorsReader.Dtype.F8_E4M3) {
                SafetensorsReader.Tensor s = w.has(n + "_scale_inv") ? w.tensor(n + "_scale_inv") : null;
                if (s == null) continue;                                  // left to the caller, which refuses it by name
                decoded.put(n, new Decoded(t, fp8(w, t, s, block), "F8_E4M3"));
                consumed.add(s.name());
            } else if (n.endsWith("_blocks") && w.has(n.substring(0, n.length() - 7) + "_scales")) {
                String base = n.substring(0, n.length() - 7);
                SafetensorsReader.Tensor s = w.tensor(base + "_scales");
                decoded.put(base, mxfp4(w, base, t, s));
                consumed.add(s.name());
            }
        }
    }

    /** The decoded tensors by their float name. */
    Map<String, Decoded> decoded() { return decoded; }

    /** Whether the source tensor {@code name} is stored in another's decoding (a block or scale tensor). */
    boolean isPart(String name) {
        return consumed.contains(name) || (name.endsWith("_blocks") && decoded.containsKey(name.substring(0, name.length() - 7)));
    }

    private static int[] blockSize(HfConfig config) {
        var q = config.json().path("quantization_config").path("weight_block_size");
        if (q.isArray() && q.size() == 2 && q.get(0).asInt() > 0 && q.get(1).asInt() > 0) return new int[] {q.get(0).asInt(), q.get(1).asInt()};
        return new int[] {128, 128};
    }

    private static ConvertException bad(SafetensorsReader.Tensor t, String what) {
        return new ConvertException(t.file() + ": tensor " + t.name() + " " + Arrays.toString(t.shape()) + ": " + what);
    }

    private static TensorData fp8(SafetensorsReader w, SafetensorsReader.Tensor q, SafetensorsReader.Tensor s, int[] block) {
        long[] shape = q.shape();
        if (shape.length != 2) throw bad(q, "FP8 weights with block scales must be 2-D");
        long rows = shape[0], cols = shape[1];
        long sr = (rows + block[0] - 1) / block[0], sc = (cols + block[1] - 1) / block[1];
        if (!Arrays.equals(s.shape(), new long[] {sr, sc}))
            throw bad(s, "expected [" + sr + ", " + sc + "] scales for " + block[0] + "×" + block[1] + " blocks of " + q.name());
        if (s.dtype() == null || !s.dtype().isFloat()) throw bad(s, "scales must be F32, F16 or BF16, found " + s.dtypeName());
        float[] scales = w.readFloats(s.name());
        MemorySegment bytes = w.bytes(q.name());
        int bo = block[0], bi = block[1];
        return (offset, dst, dstOff, len) -> {
            for (int i = 0; i < len; i++) {
                long e = offset + i, r = e / cols, c = e % cols;
                dst[dstOff + i] = E4M3[bytes.get(ValueLayout.JAVA_BYTE, e) & 0xFF] * scales[(int) ((r / bo) * sc + c / bi)];
            }
        };
    }

    private static Decoded mxfp4(SafetensorsReader w, String base, SafetensorsReader.Tensor b, SafetensorsReader.Tensor s) {
        long[] bs = b.shape(), ss = s.shape();
        if (b.dtype() != SafetensorsReader.Dtype.U8 || s.dtype() != SafetensorsReader.Dtype.U8)
            throw bad(b, "MXFP4 blocks and scales must be U8, found " + b.dtypeName() + " and " + s.dtypeName());
        if (bs.length != 4 || bs[3] != 16 || !Arrays.equals(Arrays.copyOf(bs, 3), ss))
            throw bad(b, "MXFP4 expects blocks [E, R, G, 16] with scales [E, R, G], scales are " + Arrays.toString(ss));
        long e = bs[0], rows = bs[1], groups = bs[2], cols = groups * 32;
        MemorySegment q = w.bytes(b.name()), sc = w.bytes(s.name());
        long[] shape = {e, cols, rows};
        TensorData data = (offset, dst, dstOff, len) -> {
            for (int i = 0; i < len; i++) {
                long el = offset + i, x = el / (cols * rows), rem = el % (cols * rows), c = rem / rows, r = rem % rows;
                long g = (x * rows + r) * groups + c / 32;
                int k = (int) (c % 32), by = q.get(ValueLayout.JAVA_BYTE, g * 16 + k / 2) & 0xFF;
                int scale = sc.get(ValueLayout.JAVA_BYTE, g) & 0xFF;
                if (scale == 0xFF) throw bad(s, "E8M0 scale 0xFF (NaN) in group " + g);
                dst[dstOff + i] = Math.scalb(E2M1[(k & 1) == 0 ? by & 15 : by >>> 4], scale - 127);
            }
        };
        var t = new SafetensorsReader.Tensor(base, null, "MXFP4", shape, b.file(), b.begin(), b.nbytes() + s.nbytes());
        return new Decoded(t, data, "MXFP4");
    }
}
