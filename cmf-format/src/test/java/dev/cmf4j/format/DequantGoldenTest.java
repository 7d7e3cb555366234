package dev.cmf4j.format;

import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.format.quant.RowDecoder;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Path;
import java.util.Enumeration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Acceptance: every tensor of the reference converter's tiny files dequantizes BIT FOR BIT to the
 * reference reader's output (dequant-Q.npz), whole and row by row.
 */
class DequantGoldenTest {
    @ParameterizedTest
    @ValueSource(strings = {"F32", "F16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "VBIT"})
    void tinyTensorsDequantizeBitForBit(String q) throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        Map<String, Npy.Array> golden = npz(dir.resolve("dequant-" + q + ".npz"));
        try (CmfFile f = CmfFile.open(dir.resolve("tiny-" + q + ".cmf"))) {
            assertThat(f.tensors()).hasSize(golden.size());
            for (TensorEntry t : f.tensors()) {
                Npy.Array g = golden.get(t.name());
                assertThat(g).as("golden for %s", t.name()).isNotNull();
                assertThat(g.shape()).as(t.name()).isEqualTo(t.shape());
                RowDecoder d = Dequantizers.of(t.dtype()).decoder(t.data(), t.shape());
                int[] want = bits(g.toFloats());
                assertThat(bits(d.all())).as("%s (%s)", t.name(), t.dtype().label).containsExactly(want);
                // Row by row, the way a kernel or `cmf tensor` slices it.
                int cols = (int) d.cols();
                float[] row = new float[cols];
                for (int r = 0; r < d.rows(); r++) {
                    d.rows(r, 1, row, 0);
                    if (!java.util.Arrays.equals(bits(row), 0, cols, want, r * cols, (r + 1) * cols))
                        assertThat(bits(row)).as("%s row %d", t.name(), r)
                                .containsExactly(java.util.Arrays.copyOfRange(want, r * cols, (r + 1) * cols));
                }
            }
        }
    }

    @Test void shardedSetDequantizesLikeTheSingleFile() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        Map<String, Npy.Array> golden = npz(dir.resolve("dequant-Q8_2F.npz"));
        try (CmfFile f = CmfFile.open(dir.resolve("sharded/tiny-00001-of-00004.cmf"))) {
            assertThat(f.tensors()).hasSize(golden.size());
            for (TensorEntry t : f.tensors())
                assertThat(bits(Dequantizers.of(t.dtype()).all(t.data(), t.shape())))
                        .as(t.name()).containsExactly(bits(golden.get(t.name()).toFloats()));
        }
    }

    static Map<String, Npy.Array> npz(Path file) throws IOException {
        Map<String, Npy.Array> out = new LinkedHashMap<>();
        try (ZipFile zip = new ZipFile(file.toFile())) {
            Enumeration<? extends ZipEntry> en = zip.entries();
            while (en.hasMoreElements()) {
                ZipEntry e = en.nextElement();
                if (!e.getName().endsWith(".npy")) continue;
                try (InputStream in = zip.getInputStream(e)) {
                    out.put(e.getName().substring(0, e.getName().length() - 4), Npy.read(in));
                }
            }
        }
        return out;
    }

    static int[] bits(float[] f) {
        int[] b = new int[f.length];
        for (int i = 0; i < f.length; i++) b[i] = Float.floatToRawIntBits(f[i]);
        return b;
    }
}
