package dev.cmf4j.cli;

import dev.cmf4j.convert.SkillGraft;
import dev.cmf4j.format.CmfFile;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Callable;

/** {@code cmf compact FILE [-o OUT]}: a file grown by appends, rewritten without its dead bytes. */
@Command(name = "compact", mixinStandardHelpOptions = true,
        description = {"Rewrite a CMF file without the dead bytes that in-place appends leave (old headers, directories and",
                "sections): same tensors, skills, masks and vocabulary. Built beside the file and renamed into place."})
public final class CompactCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
    Path file;

    @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of replacing FILE")
    Path out;

    @Override public Integer call() throws Exception {
        long before = Files.size(file);
        Path dest = out != null ? out : file;
        try (CmfFile f = CmfFile.open(file)) {
            SkillGraft.compact(f, dest);
        }
        spec.commandLine().getErr().printf("%s: %,d bytes -> %,d%n", dest, before, Files.size(dest));
        return 0;
    }
}
