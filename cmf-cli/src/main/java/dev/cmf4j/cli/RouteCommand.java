package dev.cmf4j.cli;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.SkillRouter;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf route FILE -p TEXT}: each skill's reconstruction error for a prompt, and the winner. */
@Command(name = "route", mixinStandardHelpOptions = true,
        description = {"Route a prompt among the file's skills (recon-argmin over each skill's routing subspace: docs/SKILLS.md):",
                "prints each skill's reconstruction error E and calibrated confidence, the novelty score and the winner",
                "(the backbone when the prompt is novel or no skill has a descriptor). --prompts F routes every line of F."})
public final class RouteCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
    Path file;

    static final class Input {
        @Option(names = {"-p", "--prompt"}, required = true, paramLabel = "TEXT", description = "the prompt (the file's tokenizer)")
        String prompt;

        @Option(names = "--ids", required = true, paramLabel = "IDS", description = "the prompt as token ids, e.g. 1,2,3")
        String ids;

        @Option(names = "--prompts", required = true, paramLabel = "F",
                description = "a text file, one prompt a line: route each (one JSON line per prompt with --json)")
        Path prompts;
    }

    @ArgGroup(exclusive = true, multiplicity = "1") Input input;

    @Option(names = "--json", description = "print {\"scores\": [{skill, error, confidence}], \"winner\", \"novelty\", \"novel\", \"calibrated\"}")
    boolean json;

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        try (Model m = Model.open(file)) {
            if (input.prompts != null) {
                java.util.List<String> lines = java.nio.file.Files.readAllLines(input.prompts).stream().filter(l -> !l.isBlank()).toList();
                java.util.Map<String, Integer> wins = new java.util.TreeMap<>();
                for (String line : lines) {
                    SkillRouter.Route r = route(m, TextCodec.of(m.file()).encode(line));
                    wins.merge(r.winner() == null ? "backbone" : r.winner(), 1, Integer::sum);
                    if (json) out.println(json(r));
                }
                if (!json) {
                    out.printf(Locale.ROOT, "%d prompts routed:%n", lines.size());
                    wins.forEach((k, v) -> out.printf(Locale.ROOT, "  %-16s %5d  %5.1f%%%n", k, v, 100.0 * v / lines.size()));
                }
                return 0;
            }
            int[] ids = input.ids != null ? ModelFile.parseIds(input.ids) : TextCodec.of(m.file()).encode(input.prompt);
            SkillRouter.Route r = route(m, ids);
            if (json) {
                out.println(json(r));
                return 0;
            }
            if (r.scores().isEmpty()) {
                out.println("no skill of " + file + " has a routing descriptor (add one with 'cmf skill add ... --prompts F'); winner: backbone");
                return 0;
            }
            out.printf(Locale.ROOT, "%-16s %10s %10s%n", "skill", "E", "confidence");
            for (var s : r.scores()) out.printf(Locale.ROOT, "%-16s %10.4f %10.4f%n", s.skill(), s.error(), s.confidence());
            out.println(r.calibrated() ? String.format(Locale.ROOT, "novelty %.4f%s", r.novelty(), r.novel() ? " (novel)" : "")
                    : String.format(Locale.ROOT, "uncalibrated (no confidence; 'cmf skill calibrate'): least E %s %.2f%s",
                    r.novel() ? ">" : "<=", SkillRouter.FALLBACK_TAU, r.novel() ? " (novel)" : ""));
            out.println("winner: " + (r.winner() == null ? "backbone" : r.winner()));
        }
        return 0;
    }

    private static SkillRouter.Route route(Model m, int[] ids) {
        return SkillRouter.route(m.graph(), ids, m.file().header().skills(), m.file().header().routing());
    }

    private static com.fasterxml.jackson.databind.node.ObjectNode json(SkillRouter.Route r) {
        var o = new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode();
        var a = o.putArray("scores");
        for (var s : r.scores()) a.addObject().put("skill", s.skill()).put("error", s.error()).put("confidence", s.confidence());
        o.put("best", r.best()).put("winner", r.winner()).put("novel", r.novel()).put("calibrated", r.calibrated());
        if (Double.isFinite(r.novelty())) o.put("novelty", r.novelty());
        else o.putNull("novelty");
        return o;
    }
}
