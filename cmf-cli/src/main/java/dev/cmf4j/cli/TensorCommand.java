package dev.cmf4j.cli;

import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.Npy;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.format.quant.RowDecoder;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.BufferedOutputStream;
import java.io.OutputStream;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.Callable;

/** {@code cmf tensor FILE NAME --out x.npy [--skill ID]}: one tensor, dequantized to a float32 .npy. */
@Command(name = "tensor", mixinStandardHelpOptions = true,
        description = {"Write one tensor of a CMF file as a NumPy .npy array: float32 for weights (dequantized "
                + "exactly as the runtime reads them), the stored integers for raw tables (u8/u32/u64).",
                "With --skill ID the skill's replacement skill.ID.NAME is taken when present, else the backbone's NAME."})
public final class TensorCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file (any shard of a set)")
    Path file;

    @Parameters(index = "1", paramLabel = "NAME", description = "tensor name, e.g. model.layers.0.mlp.up_proj.weight")
    String name;

    @Option(names = {"-o", "--out"}, required = true, paramLabel = "X.npy", description = "output .npy file")
    Path out;

    @Option(names = "--skill", paramLabel = "ID", description = "resolve skill.ID.NAME first (tensor-source indirection)")
    String skill;

    /** Rows decoded per chunk: bounds memory for huge tensors (about 4 MiB of floats). */
    private static final long CHUNK_FLOATS = 1 << 20;

    @Override public Integer call() throws Exception {
        try (CmfFile f = CmfFile.open(file)) {
            TensorEntry t = resolve(f);
            long[] shape = t.shape();
            Path tmp = out.toAbsolutePath().resolveSibling("." + out.getFileName() + ".tmp");
            try (OutputStream os = new BufferedOutputStream(Files.newOutputStream(tmp), 1 << 16)) {
                if (t.dtype().raw()) writeRaw(t, os);
                else writeFloats(t, os);
            } catch (Exception e) {
                Files.deleteIfExists(tmp);
                throw e;
            }
            Files.move(tmp, out, java.nio.file.StandardCopyOption.REPLACE_EXISTING);
            spec.commandLine().getOut().printf("%s: %s %s%s -> %s%n", out, t.name(), t.dtype().label,
                    Arrays.toString(shape), t.dtype().raw() ? npyDescr(t.dtype()) : "float32");
            spec.commandLine().getOut().flush();
            return 0;
        }
    }

    /** {@code skill.ID.NAME} when a skill is asked for and has it, else {@code NAME}. */
    TensorEntry resolve(CmfFile f) {
        if (skill != null) {
            CmfHeader h = f.header();
            var own = f.find("skill." + skill + "." + name);
            if (own.isPresent()) return own.get();
            boolean known = h.skill(skill) != null
                    || f.tensors().stream().anyMatch(t -> t.name().startsWith("skill." + skill + "."));
            if (!known) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "no skill '" + skill + "' in "
                        + f.label() + " (its skills: " + h.skills().stream().map(s -> s.id()).toList() + ")");
            }
        }
        return f.tensor(name);
    }

    private static void writeFloats(TensorEntry t, OutputStream os) throws Exception {
        long[] shape = t.shape();
        Npy.writeHeader(os, "<f4", shape);
        RowDecoder dec = Dequantizers.of(t.dtype()).decoder(t.data(), shape);
        long rows = dec.rows(), cols = dec.cols();
        if (rows == 0 || cols == 0) return;
        int step = (int) Math.max(1, Math.min(rows, CHUNK_FLOATS / Math.max(1, cols)));
        float[] buf = new float[Math.toIntExact(step * cols)];
        ByteBuffer bytes = ByteBuffer.allocate(buf.length * 4).order(ByteOrder.LITTLE_ENDIAN);
        for (long r = 0; r < rows; r += step) {
            int n = (int) Math.min(step, rows - r);
            dec.rows(r, n, buf, 0);
            bytes.clear();
            bytes.asFloatBuffer().put(buf, 0, (int) (n * cols));
            os.write(bytes.array(), 0, (int) (n * cols * 4));
        }
    }

    private static void writeRaw(TensorEntry t, OutputStream os) throws Exception {
        Npy.writeHeader(os, npyDescr(t.dtype()), t.shape());
        MemorySegment d = t.data();
        byte[] buf = new byte[1 << 20];
        for (long p = 0; p < d.byteSize(); p += buf.length) {
            int n = (int) Math.min(buf.length, d.byteSize() - p);
            MemorySegment.copy(d, ValueLayout.JAVA_BYTE, p, buf, 0, n);
            os.write(buf, 0, n);
        }
    }

    private static String npyDescr(DType d) {
        return switch (d) {
            case U8 -> "|u1";
            case U32 -> "<u4";
            case U64 -> "<u8";
            default -> "<f4";
        };
    }
}
