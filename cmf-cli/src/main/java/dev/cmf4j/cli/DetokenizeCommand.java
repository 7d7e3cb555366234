package dev.cmf4j.cli;

import dev.cmf4j.text.Tokenizer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.ParameterException;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.concurrent.Callable;

/** {@code cmf detokenize SRC --ids 1,2,3 [--skip-special]}: token ids to text. */
@Command(name = "detokenize", mixinStandardHelpOptions = true,
        description = {"Decode token ids to text exactly as Hugging Face tokenizers does.",
                "Prints the text as is, with no newline added."})
public final class DetokenizeCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "SRC", description = "a .cmf file, a tokenizer.json(.gz), or a model directory holding one")
    Path src;

    @Option(names = "--ids", required = true, paramLabel = "IDS", description = "token ids separated by commas and/or spaces")
    String ids;

    @Option(names = "--skip-special", description = "leave out special tokens (skip_special_tokens=True)")
    boolean skipSpecial;

    @Override public Integer call() throws Exception {
        int[] parsed = parseIds(ids);
        Tokenizer tok = TokenizerSource.load(src);
        PrintWriter out = spec.commandLine().getOut();
        out.print(tok.decode(parsed, skipSpecial));
        out.flush();
        return 0;
    }

    private int[] parseIds(String s) {
        String trimmed = s.strip();
        if (trimmed.startsWith("[") && trimmed.endsWith("]")) trimmed = trimmed.substring(1, trimmed.length() - 1);
        if (trimmed.isBlank()) return new int[0];
        String[] parts = trimmed.split("[,\\s]+");
        int[] r = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            try {
                r[i] = Integer.parseInt(parts[i]);
                if (r[i] < 0) throw new NumberFormatException();
            } catch (NumberFormatException e) {
                throw new ParameterException(spec.commandLine(), "--ids: \"" + parts[i] + "\" is not a token id (a non-negative integer)");
            }
        }
        return r;
    }
}
