package dev.cmf4j.format;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/** Every fixture read and written back with CmfWriter reopens with identical content in the layout rules. */
class CmfWriterRoundTripTest {
    @TempDir Path tmp;

    @Test
    void tinyFixturesRoundTrip() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        for (String q : List.of("F32", "F16", "Q8_ROW", "Q8_2F", "Q4_BLOCK", "VBIT")) {
            try (CmfFile src = CmfFile.open(dir.resolve("tiny-" + q + ".cmf"))) {
                Path out = tmp.resolve("rt-" + q + ".cmf");
                try (CmfWriter w = CmfWriter.create(out, src.header())) {
                    CmfWriter.copyAll(src, w);
                    assertThat(w.finish()).containsExactly(out);
                }
                try (CmfFile back = CmfFile.open(out)) {
                    assertSameContent(src, back);
                    assertThat(back.envelope().features()).isEqualTo(src.envelope().features());
                    LayoutRules.check(out);
                }
            }
        }
        try (Stream<Path> left = Files.list(tmp)) {
            assertThat(left.filter(p -> p.getFileName().toString().startsWith("."))).as("no temp files left").isEmpty();
        }
    }

    @Test
    void shardSetRoundTripsShardByShard() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny/sharded");
        try (CmfFile src = CmfFile.open(dir.resolve("tiny-00001-of-00004.cmf"))) {
            Path out = tmp.resolve("tiny.cmf");
            List<Path> written;
            try (CmfWriter w = CmfWriter.create(out, src.header())) {
                for (int i = 0; i < src.shards().size(); i++) {
                    if (i > 0) w.nextShard();
                    for (TensorEntry t : src.shards().get(i).tensors()) w.addTensor(t.name(), t.dtype(), t.shape(), t.data());
                }
                src.vocab().ifPresent(w::setVocab);
                written = w.finish();
            }
            assertThat(written).extracting(p -> p.getFileName().toString()).containsExactly(
                    "tiny-00001-of-00004.cmf", "tiny-00002-of-00004.cmf", "tiny-00003-of-00004.cmf", "tiny-00004-of-00004.cmf");
            try (CmfFile back = CmfFile.open(written.get(2))) {
                assertSameContent(src, back);
                for (int i = 0; i < 4; i++) {
                    assertThat(back.shards().get(i).tensors()).isEqualTo(src.shards().get(i).tensors().stream()
                            .map(t -> t).toList().stream().map(TensorEntry::name).map(back::tensor).toList());
                    assertThat(back.shards().get(i).header().shard()).isEqualTo(new CmfHeader.ShardInfo(i + 1, 4));
                    assertThat(back.shards().get(i).envelope().features()).isEqualTo(src.shards().get(i).envelope().features());
                }
                for (Path p : written) LayoutRules.check(p);
            }
        }
    }

    @Test
    void refconvModelsRoundTrip() throws IOException {
        Path dir = TestFixtures.require("cmf/refconv");
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) { files = s.filter(p -> p.toString().endsWith(".cmf")).sorted().toList(); }
        for (Path p : files) {
            try (CmfFile src = CmfFile.open(p)) {
                Path out = tmp.resolve(p.getFileName());
                try (CmfWriter w = CmfWriter.create(out, src.header())) {
                    CmfWriter.copyAll(src, w);
                    w.finish();
                }
                try (CmfFile back = CmfFile.open(out)) {
                    assertSameContent(src, back);
                    LayoutRules.check(out);
                }
            }
        }
    }

    @Test
    void sizeLimitSplitsIntoShards() throws IOException {
        Path dir = TestFixtures.require("cmf/tiny");
        try (CmfFile src = CmfFile.open(dir.resolve("tiny-F32.cmf"))) {
            Path out = tmp.resolve("split.cmf");
            List<Path> written;
            try (CmfWriter w = CmfWriter.create(out, src.header(), CmfWriter.Options.DEFAULT.withMaxShardBytes(40_000))) {
                CmfWriter.copyAll(src, w);
                written = w.finish();
            }
            assertThat(written.size()).isGreaterThan(1);
            try (CmfFile back = CmfFile.open(written.getLast())) {
                assertSameContent(src, back);
                for (CmfFile.Shard s : back.shards()) assertThat(s.envelope().data().length()).isLessThanOrEqualTo(40_000);
                assertThat(back.shards().get(1).envelope().masks().present()).isFalse();
                assertThat(back.shards().get(1).envelope().vocab().present()).isFalse();
            }
        }
    }

    /** Same tensors (names, order, dtype, shape, hash, bytes), header content, masks, vocab; verify clean. */
    static void assertSameContent(CmfFile a, CmfFile b) {
        assertThat(b.verify()).isEmpty();
        assertThat(b.tensors()).hasSameSizeAs(a.tensors());
        for (int i = 0; i < a.tensors().size(); i++) {
            TensorEntry x = a.tensors().get(i), y = b.tensors().get(i);
            assertThat(y.name()).isEqualTo(x.name());
            assertThat(y.dtype()).isEqualTo(x.dtype());
            assertThat(y.shape()).isEqualTo(x.shape());
            assertThat(y.hash()).isEqualTo(x.hash());
            assertThat(y.data().toArray(ValueLayout.JAVA_BYTE)).isEqualTo(x.data().toArray(ValueLayout.JAVA_BYTE));
        }
        CmfHeader ha = a.header(), hb = b.header();
        assertThat(hb.arch()).isEqualTo(ha.arch());
        assertThat(hb.tokenizerConfig()).isEqualTo(ha.tokenizerConfig());
        assertThat(hb.skills()).isEqualTo(ha.skills());
        assertThat(hb.provenance()).isEqualTo(ha.provenance());
        assertThat(hb.quantType()).isEqualTo(ha.quantType());
        assertThat(hb.extra()).isEqualTo(ha.extra());
        if (ha.sectionHashes() != null) {   // the masks meta is re-encoded compactly, so only vocab/index bytes are identical
            assertThat(hb.sectionHashes().vocab()).isEqualTo(ha.sectionHashes().vocab());
            assertThat(hb.sectionHashes().index()).isEqualTo(ha.sectionHashes().index());
            assertThat(hb.sectionHashes().masks() != null).isEqualTo(ha.sectionHashes().masks() != null);
        }
        assertThat(b.vocab().map(String::new)).isEqualTo(a.vocab().map(String::new));
        assertThat(b.index().map(s -> s.toArray(ValueLayout.JAVA_BYTE)).orElse(null))
                .isEqualTo(a.index().map(s -> s.toArray(ValueLayout.JAVA_BYTE)).orElse(null));
        assertThat(b.masks().isPresent()).isEqualTo(a.masks().isPresent());
        a.masks().ifPresent(ma -> {
            Masks mb = b.masks().orElseThrow();
            assertThat(mb.meta().defaultTask()).isEqualTo(ma.meta().defaultTask());
            List<byte[]> ba = new ArrayList<>(), bb = new ArrayList<>();
            ma.masks().forEach(m -> ba.add(m.blob()));
            mb.masks().forEach(m -> bb.add(m.blob()));
            assertThat(bb).containsExactlyElementsOf(ba);
            for (int i = 0; i < ma.masks().size(); i++) {
                Masks.MaskMeta x = ma.masks().get(i).meta(), y = mb.masks().get(i).meta();
                assertThat(y.withBlob(0, 0)).isEqualTo(x.withBlob(0, 0));
            }
        });
    }
}
