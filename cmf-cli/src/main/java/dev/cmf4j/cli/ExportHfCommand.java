package dev.cmf4j.cli;

import dev.cmf4j.convert.HfExport;
import dev.cmf4j.format.CmfFile;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf export-hf FILE -o DIR}: a CMF model as a Hugging Face folder (dequantized safetensors, config, tokenizer). */
@Command(name = "export-hf", mixinStandardHelpOptions = true,
        description = {"Write a CMF model as a Hugging Face folder transformers loads: config.json and generation_config.json",
                "(kept by 'cmf convert' in the header's provenance), tokenizer.json, tokenizer_config.json and model.safetensors",
                "with every backbone tensor dequantized to --dtype. With --skill ID the skill's tensors replace the backbone's."})
public final class ExportHfCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model (converted from a Hugging Face checkpoint)")
    Path file;

    @Option(names = {"-o", "--out"}, required = true, paramLabel = "DIR", description = "the folder to write (created)")
    Path out;

    @Option(names = "--dtype", paramLabel = "T", defaultValue = "f32", description = "f32, bf16 or f16 (default ${DEFAULT-VALUE})")
    String dtype;

    @Option(names = "--skill", paramLabel = "ID", description = "write the model as skill ID runs it (its tensors in place of the backbone's)")
    String skill;

    @Override public Integer call() throws Exception {
        HfExport.Dtype t = HfExport.Dtype.of(dtype);
        try (CmfFile f = CmfFile.open(ModelFile.resolve(file))) {
            HfExport.Result r = HfExport.write(f, out, t, skill);
            spec.commandLine().getErr().printf(Locale.ROOT, "wrote %s: %d tensors as %s, model.safetensors %.1f MB%n",
                    r.dir(), r.tensors(), dtype, r.bytes() / 1e6);
        }
        return 0;
    }
}
