package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.text.Encoding;
import dev.cmf4j.text.Tokenizer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.concurrent.Callable;

/** {@code cmf tokenize SRC [--special] [--json]}: text from stdin (or --text) to token ids. */
@Command(name = "tokenize", mixinStandardHelpOptions = true,
        description = {"Tokenize text exactly as Hugging Face tokenizers does.",
                "Reads the text from standard input, byte for byte (a trailing newline is part of the text; "
                        + "use printf or --text to avoid one), and prints the ids separated by commas."})
public final class TokenizeCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "SRC", description = "a .cmf file, a tokenizer.json(.gz), or a model directory holding one")
    Path src;

    @Option(names = "--special", description = "add the tokenizer's special tokens (BOS, ...) as transformers' add_special_tokens=True does")
    boolean special;

    @Option(names = "--json", description = "print {\"ids\", \"tokens\", \"offsets\"} (offsets in code points) as JSON")
    boolean json;

    @Option(names = {"-t", "--text"}, paramLabel = "TEXT", description = "tokenize this text instead of reading standard input")
    String text;

    @Override public Integer call() throws Exception {
        Tokenizer tok = TokenizerSource.load(src);
        String input = text != null ? text : new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
        Encoding e = tok.encode(input, special);
        PrintWriter out = spec.commandLine().getOut();
        if (json) {
            ObjectMapper m = new ObjectMapper();
            ObjectNode o = m.createObjectNode();
            ArrayNode ids = o.putArray("ids"), tokens = o.putArray("tokens"), offsets = o.putArray("offsets");
            for (int i = 0; i < e.size(); i++) {
                ids.add(e.ids()[i]);
                tokens.add(e.tokens().get(i));
                offsets.addArray().add(e.starts()[i]).add(e.ends()[i]);
            }
            out.println(m.writeValueAsString(o));
        } else {
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < e.size(); i++) sb.append(i == 0 ? "" : ",").append(e.ids()[i]);
            out.println(sb);
        }
        out.flush();
        return 0;
    }
}
