package dev.cmf4j.format;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class CmfWriterTest {
    @TempDir Path tmp;

    static CmfHeader header() {
        ModelArch arch = ModelArch.fromJson((com.fasterxml.jackson.databind.node.ObjectNode) Json.parseObject(
                "{\"arch_name\":\"t\",\"hidden_size\":8,\"intermediate_size\":16,\"num_layers\":2,\"num_attention_heads\":2,\"future_field\":[1,2]}"
                        .getBytes(), "t", 0, "arch"));
        return CmfHeader.of(arch, "F32");
    }

    static byte[] f32(int n, long seed) {
        Random r = new Random(seed);
        MemorySegment s = MemorySegment.ofArray(new byte[n * 4]);
        for (int i = 0; i < n; i++) s.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, r.nextFloat());
        return s.toArray(ValueLayout.JAVA_BYTE);
    }

    List<Path> leftovers() throws IOException {
        try (Stream<Path> s = Files.list(tmp)) { return s.toList(); }
    }

    @Test
    void unknownArchFieldsSurviveAndStreamingSinkMatchesWholePayload() {
        Path out = tmp.resolve("m.cmf");
        byte[] a = f32(5000, 1), b = f32(40, 2);
        try (CmfWriter w = CmfWriter.create(out, header())) {
            try (CmfWriter.TensorSink sink = w.openTensor("big", DType.F32, new long[] {100, 50}, a.length)) {
                for (int off = 0; off < a.length; off += 777) sink.write(a, off, Math.min(777, a.length - off));
            }
            w.addTensor("small", DType.F32, new long[] {40}, b);
            w.finish();
        }
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.verify()).isEmpty();
            assertThat(f.tensor("big").hash()).isEqualTo(Hash64.of(a));
            assertThat(f.tensor("big").offset() % 4096).isZero();
            assertThat(f.tensor("small").data().toArray(ValueLayout.JAVA_BYTE)).isEqualTo(b);
            assertThat(f.header().arch().extra()).containsKey("future_field");
            assertThat(f.header().arch().extra().get("future_field").toString()).isEqualTo("[1,2]");
            assertThat(f.envelope().features()).isEqualTo(Feature.TENSOR_DIR.mask());
        }
        LayoutRules.check(out);
    }

    @Test
    void headOutgrowingTheReserveMovesTheData() {
        Path out = tmp.resolve("m.cmf");
        List<byte[]> payloads = new ArrayList<>();
        try (CmfWriter w = CmfWriter.create(out, header(), CmfWriter.Options.DEFAULT.withReserve(4096))) {
            for (int i = 0; i < 200; i++) {           // 200 records x (56 + name) > 4096
                byte[] p = f32(i % 7 == 0 ? 5000 : 16, i);
                payloads.add(p);
                w.addTensor("model.layers." + i + ".some_long_projection_name.weight", DType.F32, new long[] {p.length / 4}, p);
            }
            w.finish();
        }
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.envelope().data().offset()).isGreaterThan(4096);
            assertThat(f.verify()).isEmpty();
            for (int i = 0; i < 200; i++) assertThat(f.tensors().get(i).data().toArray(ValueLayout.JAVA_BYTE)).isEqualTo(payloads.get(i));
        }
        LayoutRules.check(out);
    }

    @Test
    void concurrentAddsProduceAValidFile() throws Exception {
        Path out = tmp.resolve("m.cmf");
        Map<String, byte[]> sent = new java.util.concurrent.ConcurrentHashMap<>();
        try (CmfWriter w = CmfWriter.create(out, header()); ExecutorService ex = Executors.newFixedThreadPool(4)) {
            List<Future<?>> fs = new ArrayList<>();
            for (int i = 0; i < 64; i++) {
                int k = i;
                fs.add(ex.submit(() -> {
                    byte[] p = f32(k * 100 + 1, k);
                    sent.put("t" + k, p);
                    w.addTensor("t" + k, DType.F32, new long[] {p.length / 4}, p);
                }));
            }
            for (Future<?> f : fs) f.get();
            w.finish();
        }
        try (CmfFile f = CmfFile.open(out)) {
            assertThat(f.verify()).isEmpty();
            assertThat(f.tensors()).hasSize(64);
            sent.forEach((n, p) -> assertThat(f.tensor(n).data().toArray(ValueLayout.JAVA_BYTE)).isEqualTo(p));
        }
        LayoutRules.check(out);
    }

    @Test
    void failuresLeaveNoFileBehind() throws IOException {
        Path out = tmp.resolve("m.cmf");
        try (CmfWriter w = CmfWriter.create(out, header())) {
            w.addTensor("a", DType.F32, new long[] {4}, f32(4, 1));
            assertThatThrownBy(() -> w.addTensor("b", DType.F32, new long[] {4}, f32(5, 1)))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("expected 16");
            assertThatThrownBy(() -> w.addTensor("a", DType.F32, new long[] {4}, f32(4, 1))).hasMessageContaining("twice");
            w.finish();     // rejected tensors leave the writer usable
        }
        assertThat(leftovers()).containsExactly(out);
        try (CmfFile f = CmfFile.open(out)) { assertThat(f.tensors()).hasSize(1); }
        Files.delete(out);
        try (CmfWriter w = CmfWriter.create(out, header())) {
            w.addTensor("a", DType.F32, new long[] {4}, f32(4, 1));
            // closed without finish: discarded
        }
        assertThat(leftovers()).isEmpty();
        try (CmfWriter w = CmfWriter.create(out, header())) {
            assertThatThrownBy(() -> w.addTensor("a", DType.F32, new long[] {1, 1, 1, 1, 1, 1, 1}, f32(1, 1)))
                    .hasMessageContaining("ndim 7");
            assertThatThrownBy(() -> w.addTensor("", DType.F32, new long[] {1}, f32(1, 1))).hasMessageContaining("empty");
        }
        assertThat(leftovers()).isEmpty();
    }

    @Test
    void masksAreCheckedAgainstTheArch() {
        Path out = tmp.resolve("m.cmf");
        try (CmfWriter w = CmfWriter.create(out, header())) {
            Masks.MaskMeta mm = new Masks.MaskMeta(0, "general", "all", 0.0, null, null, "Fallback", false, 0, 0, null, Map.of());
            Masks.Meta meta = new Masks.Meta("general", List.of(mm), null, Map.of());
            // geometry: 2 layers x ceil(16/8) ffn + 2 x ceil(2/8) heads + 1 gate byte = 7 bytes
            byte[] good = {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF, 3, 3, 3};
            assertThatThrownBy(() -> w.setMasks(new Masks(meta, List.of(new Masks.TaskMask(mm, null, new byte[3])))))
                    .isInstanceOf(CmfException.Parse.class);
            w.setMasks(new Masks(meta, List.of(new Masks.TaskMask(mm, null, good))));
            w.addTensor("a", DType.F32, new long[] {4}, f32(4, 1));
            w.finish();
        }
        try (CmfFile f = CmfFile.open(out)) {
            Masks.TaskMask m = f.masks().orElseThrow().defaultMask();
            assertThat(m.headActive(1, 1)).isTrue();
            assertThat(m.layerActive(1)).isTrue();
            assertThat(f.envelope().features() & Feature.BINARY_MASKS.mask()).isNotZero();
        }
        LayoutRules.check(out);
    }
}
