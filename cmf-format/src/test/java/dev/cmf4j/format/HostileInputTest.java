package dev.cmf4j.format;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.TreeSet;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.assertThatCode;

/** Each kind of damage yields its typed {@link CmfException}, naming file and offset. */
class HostileInputTest {
    static byte[] tiny;

    @BeforeAll
    static void load() throws IOException {
        tiny = Files.readAllBytes(TestFixtures.require("cmf/tiny").resolve("tiny-Q8_2F.cmf"));
    }

    static Mutable m() { return new Mutable(tiny); }

    static void fails(Mutable m, Class<? extends CmfException> kind, String text) {
        assertThatThrownBy(() -> { try (CmfFile f = m.open()) { f.masks(); } })
                .isInstanceOf(kind).hasMessageContaining("mutant.cmf").hasMessageContaining(text);
    }

    @Test
    void pristineCopyOpens() {
        assertThatCode(() -> { try (CmfFile f = m().open()) { assertThat(f.verify()).isEmpty(); } }).doesNotThrowAnyException();
    }

    @Test
    void truncationAtEverySectionBoundary() {
        Mutable base = m();
        TreeSet<Long> cuts = new TreeSet<>(List.of(0L, 3L, 4L, 64L, 127L, 128L));
        for (int s = 0; s < 6; s++) {
            long off = base.u64(0x10 + 16L * s), len = base.u64(0x18 + 16L * s);
            if (len == 0) continue;
            cuts.add(off);
            cuts.add(off + 1);
            cuts.add(off + len / 2);
            cuts.add(off + len - 1);
        }
        cuts.add((long) tiny.length - 1);
        for (long cut : cuts) {
            Class<? extends CmfException> kind = cut < 4 ? CmfException.InvalidMagic.class : CmfException.Bounds.class;
            assertThatThrownBy(() -> m().truncate((int) cut).open()).as("cut at " + cut).isInstanceOf(kind);
        }
    }

    @Test
    void envelopeDamage() {
        fails(m().flip(0), CmfException.InvalidMagic.class, "magic");
        fails(m().u32(4, 1), CmfException.UnsupportedVersion.class, "version 2");
        fails(m().u32(4, 3), CmfException.UnsupportedVersion.class, "found 3");
        fails(m().u32(12, m().u32(12) | 1 << 20), CmfException.UnsupportedFeature.class, "bit 20");
        fails(m().u32(12, m().u32(12) | 1 << 3), CmfException.UnsupportedFeature.class, "DELTA_MASKS");
        fails(m().u32(12, m().u32(12) & ~1), CmfException.Parse.class, "TENSOR_DIR");
        fails(m().u32(12, m().u32(12) & ~2), CmfException.Parse.class, "BINARY_MASKS");
        fails(m().u64(0x30, m().dataOff() + 64), CmfException.Bounds.class, "multiple of 4096");
        fails(m().u64(0x20, 1L << 62), CmfException.Bounds.class, "directory section");
        fails(m().u64(0x28, -1L), CmfException.Bounds.class, "past the end");
        fails(m().u64(0x50, m().dataOff()), CmfException.Bounds.class, "overlaps");
        fails(m().u64(0x10, 0), CmfException.Bounds.class, "inside the 128-byte envelope");
        fails(m().u64(0x28, 8), CmfException.Bounds.class, "at least 16");
        // an empty data section whose (meaningless) offset is far out of range: the tensors are then outside it
        fails(m().u64(0x30, Long.MIN_VALUE + 4096).u64(0x38, 0), CmfException.Bounds.class, "outside the");
        fails(m().flip(0x70), CmfException.Integrity.class, "header hash64");
        fails(m().flip(0x78), CmfException.Integrity.class, "directory hash64");
    }

    @Test
    void headerDamage() {
        Mutable h = m();
        fails(h.flip(h.headerOff() + 40), CmfException.Integrity.class, "header hash64");
        Mutable j = m();
        fails(j.u8(j.headerOff(), '[').reseal(), CmfException.Parse.class, "not valid JSON");
        Mutable u = m();
        fails(u.u8(u.headerOff() + 2, 0xC3).u8(u.headerOff() + 3, 0x28).reseal(), CmfException.Parse.class, "header");
        fails(m().replaceInHeader("FullAttention", "FullAttentiox").reseal(), CmfException.Parse.class, "layer_types[0]");
        fails(m().replaceInHeader("\"qwen\"", "\"qwex\"").reseal(), CmfException.Parse.class, "norm_style");
        fails(m().replaceInHeader("\"version\": 2", "\"version\": 3").reseal(), CmfException.UnsupportedVersion.class, "header.version");
        fails(m().replaceInHeader("\"hidden_size\": 32", "\"hidden_size\":\"x\"").reseal(), CmfException.Parse.class, "arch.hidden_size");
        fails(m().replaceInHeader("\"masks\": \"a5e0", "\"masks\": \"a5e1").reseal(), CmfException.Integrity.class, "masks section");
        fails(m().replaceInHeader("\"num_layers\": 2,", "\"num_layers\": 3,").reseal(), CmfException.Parse.class, "the arch needs");
    }

    @Test
    void directoryDamage() {
        Mutable d = m();
        fails(d.flip(d.record(0, 60)), CmfException.Integrity.class, "directory hash64");
        Mutable c = m();
        fails(c.u64(c.dirOff(), 1L << 60).reseal(), CmfException.Bounds.class, "hold at most");
        Mutable c2 = m();
        fails(c2.u64(c2.dirOff(), -1L).reseal(), CmfException.Bounds.class, "hold at most");
        Mutable p = m();
        fails(p.u64(p.dirOff() + 8, 3).reseal(), CmfException.Bounds.class, "name pool offset");
        Mutable n = m();
        fails(n.u32(n.record(0, 0), 1 << 30).reseal(), CmfException.Bounds.class, "name pool");
        Mutable nd = m();
        fails(nd.u8(nd.record(1, 7), 7).reseal(), CmfException.Parse.class, "ndim 7");
        Mutable dt = m();
        fails(dt.u8(dt.record(1, 6), 99).reseal(), CmfException.Parse.class, "unknown dtype id 99");
        Mutable sh = m();
        fails(sh.u32(sh.record(1, 8 + 4 * 3), 5).reseal(), CmfException.Parse.class, "beyond ndim");
        Mutable off = m();
        fails(off.u64(off.record(2, 32), 1L << 40).reseal(), CmfException.Bounds.class, "outside the");
        Mutable neg = m();
        fails(neg.u64(neg.record(2, 40), -64L).reseal(), CmfException.Bounds.class, "outside the");
        Mutable al = m();
        fails(al.u64(al.record(2, 32), al.u64(al.record(2, 32)) + 8).reseal(), CmfException.Bounds.class, "multiple of 64");
        Mutable ov = m();
        fails(ov.u64(ov.record(2, 32), 0).reseal(), CmfException.Bounds.class, "overlaps");
        Mutable sz = m();
        fails(sz.u64(sz.record(1, 40), 128).reseal(), CmfException.Parse.class, "does not match");
        Mutable big = m();
        fails(big.u32(big.record(0, 8), -1).u32(big.record(0, 12), -1).u8(big.record(0, 7), 6)
                .u32(big.record(0, 16), -1).u32(big.record(0, 20), -1).u32(big.record(0, 24), -1).u32(big.record(0, 28), -1)
                .reseal(), CmfException.Parse.class, "too large");
        // invalid UTF-8 in a name: overwrite its first two bytes with an overlong/invalid sequence
        Mutable utf = m();
        long pool = utf.dirOff() + utf.u64(utf.dirOff() + 8);
        long at = pool + utf.u32(utf.record(0, 0));
        fails(utf.u8(at, 0xC0).u8(at + 1, 0xAF).reseal(), CmfException.Parse.class, "not valid UTF-8");
        // duplicate names: point record 1's name at record 0's
        Mutable dup = m();
        dup.u32(dup.record(1, 0), dup.u32(dup.record(0, 0)));
        dup.seg().set(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, dup.record(1, 4),
                dup.seg().get(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, dup.record(0, 4)));
        fails(dup.reseal(), CmfException.Parse.class, "appears twice");
        Mutable empty = m();
        empty.seg().set(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, empty.record(0, 4), (short) 0);
        fails(empty.reseal(), CmfException.Parse.class, "empty name");
    }

    @Test
    void masksDamage() {
        Mutable k = m();
        long masksOff = k.u64(0x40);
        fails(k.flip(masksOff + 300), CmfException.Integrity.class, "masks section hash64");
        // without a recorded masks hash the structural checks apply
        Mutable t = m().replaceInHeader("\"masks\": \"", "\"masky\": \"").reseal();
        long mo = t.u64(0x40);
        fails(new Mutable(t.b).u32(mo, 3), CmfException.Parse.class, "says 3 masks");
        fails(new Mutable(t.b).u32(mo + 4, 1 << 30), CmfException.Bounds.class, "meta length");
        fails(new Mutable(t.b).u8(mo + 528 + 18, 0x07), CmfException.Parse.class, "padding bits");
        Mutable j = new Mutable(t.b);
        fails(j.u8(mo + 8, ']'), CmfException.Parse.class, "masks meta");
    }

    @Test
    void vocabDamageIsCaughtWhenRead() {
        Mutable v = m();
        v.flip(v.u64(0x50) + 10);
        try (CmfFile f = v.open()) {
            assertThatThrownBy(f::vocab).isInstanceOf(CmfException.Integrity.class).hasMessageContaining("vocab");
            assertThat(f.verify()).singleElement().asString().contains("vocab section hash64");
        }
    }

    @Test
    void tensorDamageIsFoundByVerify() {
        Mutable t = m();
        t.flip(t.dataOff() + 100);
        try (CmfFile f = t.open()) {
            assertThat(f.verify()).singleElement().asString().contains("model.embed_tokens.weight");
        }
    }

    @Test
    void missingAndForeignFiles(@org.junit.jupiter.api.io.TempDir Path dir) throws IOException {
        assertThatThrownBy(() -> CmfFile.open(dir.resolve("nope.cmf"))).isInstanceOf(CmfException.Io.class)
                .hasMessageContaining("nope.cmf");
        Path empty = Files.createFile(dir.resolve("empty.cmf"));
        assertThatThrownBy(() -> CmfFile.open(empty)).isInstanceOf(CmfException.InvalidMagic.class);
        Path text = Files.writeString(dir.resolve("a.cmf"), "hello, not a model");
        assertThatThrownBy(() -> CmfFile.open(text)).isInstanceOf(CmfException.InvalidMagic.class).hasMessageContaining("68 65 6c 6c");
        Path shard = dir.resolve("x-00001-of-00002.cmf");
        Files.write(shard, tiny);
        assertThatThrownBy(() -> CmfFile.open(shard)).isInstanceOf(CmfException.Io.class)
                .hasMessageContaining("x-00002-of-00002.cmf").hasMessageContaining("missing shard");
        Files.write(dir.resolve("x-00002-of-00002.cmf"), tiny);
        assertThatThrownBy(() -> CmfFile.open(shard)).isInstanceOf(CmfException.Parse.class).hasMessageContaining("header.shard");
    }
}
