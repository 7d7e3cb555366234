package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Callable;

/** {@code cmf generate FILE --ids 1,2,3 -n N [--greedy] [--json]}: token ids in, token ids out. */
@Command(name = "generate", mixinStandardHelpOptions = true,
        description = {"Continue a prompt of token ids and print the generated ids.",
                "Like transformers' generate(..., eos_token_id=None): exactly N tokens unless --stop-at-eos. "
                        + "Greedy by default; sampling flags switch to sampling."})
public final class GenerateCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf model")
    Path file;

    @Mixin ModelFile.Overrides overrides;

    @Option(names = "--ids", required = true, paramLabel = "IDS", description = "prompt token ids, e.g. 1,2,3")
    String ids;

    @Option(names = {"-n", "--max-tokens"}, paramLabel = "N", defaultValue = "32", description = "tokens to generate (default ${DEFAULT-VALUE})")
    int n;

    @Option(names = "--stop-at-eos", description = "stop at the model's end-of-sequence ids (from the file)")
    boolean stopAtEos;

    @Option(names = "--json", description = "print {\"ids\": [...], \"prompt_tokens\", \"stop_reason\"} as JSON")
    boolean json;

    @Mixin SamplingOptions sampling;

    @Mixin DraftOptions draft;

    @Mixin DeviceOption device;

    @Override public Integer call() throws Exception {
        int[] prompt = ModelFile.parseIds(ids);
        try (var dev = device.open(spec.commandLine().getErr());
             Model m = overrides.openOne(file, dev, spec.commandLine().getErr());
             Model dm = draft.open(m, dev)) {
            SamplingParams p = sampling.params(SamplingParams.GREEDY);
            Set<Integer> eos = Set.of();
            if (stopAtEos) {
                var tc = m.file().header().tokenizerConfig();
                eos = tc == null || tc.eosTokenIds() == null ? Set.of() : Set.copyOf(tc.eosTokenIds());
                if (m.file().vocab().isPresent()) eos = TextCodec.of(m.file()).eosIds();
            }
            var target = overrides.target(m, prompt, spec.commandLine().getErr());   // --skill auto and --blend pick here
            Session s = new Session(target.graph(), prompt.length + n + 1);
            s.useOverlay(target.overlay());
            Generator gen = new Generator(s, new Sampler(p), eos, List.of());
            var sp = draft.on() ? draft.speculation(m, dm, prompt.length + n + 1, p) : null;
            Generator.Result r = sp == null ? gen.generate(prompt, n, null, null) : sp.generate(gen, prompt, n, null, null);
            PrintWriter out = spec.commandLine().getOut();
            if (json) {
                ObjectMapper om = new ObjectMapper();
                ObjectNode o = om.createObjectNode();
                var arr = o.putArray("ids");
                for (int id : r.tokens()) arr.add(id);
                o.put("prompt_tokens", prompt.length);
                o.put("stop_reason", r.reason().name().toLowerCase(java.util.Locale.ROOT));
                if (sp != null) {
                    var st = sp.stats(r.tokens().length);
                    ObjectNode d = o.putObject("draft");
                    d.put("drafted", st.drafted());
                    d.put("accepted", st.accepted());
                    d.put("acceptance", st.acceptance());
                    d.put("tokens_per_step", st.tokensPerStep());
                }
                out.println(om.writeValueAsString(o));
            } else {
                StringBuilder sb = new StringBuilder();
                for (int i = 0; i < r.tokens().length; i++) sb.append(i == 0 ? "" : ",").append(r.tokens()[i]);
                out.println(sb);
            }
            out.flush();
        }
        return 0;
    }
}
