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
                "(the backbone when the prompt is novel or no skill has a descriptor)."})
public final class RouteCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
    Path file;

    static final class Input {
        @Option(names = {"-p", "--prompt"}, required = true, paramLabel = "TEXT", description = "the prompt (the file's tokenizer)")
        String prompt;

        @Option(names = "--ids", required = true, paramLabel = "IDS", description = "the prompt as token ids, e.g. 1,2,3")
        String ids;
    }

    @ArgGroup(exclusive = true, multiplicity = "1") Input input;

    @Option(names = "--json", description = "print {\"scores\": [{skill, error, confidence}], \"winner\", \"novelty\", \"novel\", \"calibrated\"}")
    boolean json;

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        try (Model m = Model.open(file)) {
            int[] ids = input.ids != null ? ModelFile.parseIds(input.ids) : TextCodec.of(m.file()).encode(input.prompt);
            SkillRouter.Route r = SkillRouter.route(m.graph(), ids, m.file().header().skills(), m.file().header().routing());
            if (json) {
                var o = new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode();
                var a = o.putArray("scores");
                for (var s : r.scores()) a.addObject().put("skill", s.skill()).put("error", s.error()).put("confidence", s.confidence());
                o.put("winner", r.winner()).put("novel", r.novel()).put("calibrated", r.calibrated());
                if (Double.isFinite(r.novelty())) o.put("novelty", r.novelty());
                else o.putNull("novelty");
                out.println(o);
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
}
