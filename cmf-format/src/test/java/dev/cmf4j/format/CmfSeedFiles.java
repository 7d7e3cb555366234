package dev.cmf4j.format;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * Writes the small seed files of {@link CmfFileFuzzTest} from the tiny fixture: its header (with masks, vocab and a
 * skill record added) over two small tensors, so every section is present in a few kilobytes. Run once by hand
 * (docs/FUZZING.md); the outputs are committed under {@code CmfFileFuzzTestInputs/openAnyBytes/}.
 */
final class CmfSeedFiles {
    private CmfSeedFiles() {}

    public static void main(String[] args) throws IOException {
        Path fixtures = Path.of(args[0]), out = Path.of(args[1]);
        Files.createDirectories(out);
        try (CmfFile src = CmfFile.open(fixtures.resolve("cmf/tiny/tiny-Q8_2F.cmf"))) {
            SkillRecord skill = new SkillRecord("code", "Coding", List.of(0), null, null, null, null, null, null, Map.of());
            CmfHeader h = src.header().withSkills(List.of(skill));
            write(out.resolve("masks-vocab-skill.cmf"), h, src, true, true);
            write(out.resolve("masks.cmf"), src.header(), src, true, false);
            write(out.resolve("plain.cmf"), src.header(), src, false, false);
        }
    }

    private static void write(Path file, CmfHeader h, CmfFile src, boolean masks, boolean vocab) {
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        try (CmfWriter w = CmfWriter.create(tmp, h, CmfWriter.Options.DEFAULT.withReserve(1))) {
            w.addTensor("a", DType.F32, new long[] {4}, new byte[16]);
            TensorEntry q = src.tensors().stream().filter(t -> t.dtype() != DType.F32 && t.nbytes() <= 512).findFirst().orElseThrow();
            w.addTensor(q.name(), q.dtype(), q.shape(), q.data());
            if (masks) src.masks().ifPresent(w::setMasks);
            if (vocab) w.setVocab("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}".getBytes());
            w.finish();
        }
        try {
            Files.move(tmp, file, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }
}
