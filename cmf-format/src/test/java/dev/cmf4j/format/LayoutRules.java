package dev.cmf4j.format;

import java.lang.foreign.ValueLayout;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;

/** The CMF v2 writer layout rules (CMF_FORMAT.md §1.1, §1.3), checked on a written file. */
final class LayoutRules {
    private LayoutRules() {}

    static void check(Path file) {
        try (CmfFile f = CmfFile.open(file)) {
            CmfFile.Shard s = f.shards().stream().filter(x -> x.label().equals(file.toAbsolutePath().toString()))
                    .findFirst().orElseThrow();
            Envelope e = s.envelope();
            assertThat(e.header().offset()).as("header right after the envelope").isEqualTo(Envelope.SIZE);
            byte[] hb = s.bytes().asSlice(e.header().offset(), e.header().length()).toArray(ValueLayout.JAVA_BYTE);
            assertThat(hb).as("compact header JSON").isEqualTo(Json.compact(Json.parseObject(hb, "t", 0, "header")));
            assertThat(e.directory().offset()).as("directory right after the header").isEqualTo(e.header().end());
            assertThat(e.data().offset() % 4096).as("data at a 4096 boundary").isZero();
            assertThat(e.data().offset()).isGreaterThanOrEqualTo(e.directory().end());
            for (long p = e.directory().end(); p < e.data().offset(); p++) {
                assertThat(s.bytes().get(ValueLayout.JAVA_BYTE, p)).as("zero pad before data").isZero();
            }
            long prevEnd = 0;
            for (TensorEntry t : s.tensors()) {
                assertThat(t.offset() % 64).as(t.name() + " 64-aligned").isZero();
                if (t.nbytes() >= 16 * 1024) assertThat(t.offset() % 4096).as(t.name() + " 4096-aligned").isZero();
                for (long p = prevEnd; p < t.offset(); p++) {
                    assertThat(s.bytes().get(ValueLayout.JAVA_BYTE, e.data().offset() + p)).as("zero pad between tensors").isZero();
                }
                prevEnd = t.offset() + t.nbytes();
            }
            assertThat(e.data().length()).as("data ends with the last tensor").isEqualTo(prevEnd);
            long at = e.data().end();
            for (Section sec : new Section[] {e.masks(), e.vocab(), e.index()}) {
                if (!sec.present()) continue;
                assertThat(sec.offset()).as(sec.name() + " packed after the previous section").isEqualTo(at);
                at = sec.end();
            }
            assertThat(s.bytes().byteSize()).as("file ends with the last section").isEqualTo(at);
            assertThat(e.headerHash()).isEqualTo(Hash64.of(hb));
            int bits = e.features();
            boolean q2f = s.tensors().stream().anyMatch(t -> t.dtype() == DType.Q8_2F || t.dtype() == DType.VBIT)
                    || f.tensors().stream().anyMatch(t -> t.dtype() == DType.Q8_2F || t.dtype() == DType.VBIT);
            assertThat((bits & Feature.QUANT_2F.mask()) != 0).as("QUANT_2F iff q8_2f/vbit").isEqualTo(q2f);
            assertThat((bits & Feature.BINARY_MASKS.mask()) != 0).as("BINARY_MASKS iff masks").isEqualTo(e.masks().present());
        }
    }
}
