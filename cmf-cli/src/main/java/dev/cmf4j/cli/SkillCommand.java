package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.convert.PeftAdapter;
import dev.cmf4j.convert.SkillGraft;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.DType;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.format.TensorEntry;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;

/** {@code cmf skill add|list}: the skills a CMF file carries (docs/SKILLS.md). */
@Command(name = "skill", mixinStandardHelpOptions = true,
        description = "Add and list skills: sets of replacement tensors (skill.ID.NAME) a request can run through.",
        subcommands = {SkillCommand.Add.class, SkillCommand.ListSkills.class, SkillCommand.Export.class, SkillCommand.Apply.class,
                SkillCommand.Remove.class, SkillCommand.Describe.class, SkillCommand.Calibrate.class})
public final class SkillCommand implements Runnable {
    @Spec CommandSpec spec;

    @Override public void run() { spec.commandLine().usage(spec.commandLine().getOut()); }

    @Command(name = "add", mixinStandardHelpOptions = true,
            description = {"Add a skill to FILE: the tensors a fine-tune of the same base changed (--from DONOR.cmf), or a",
                    "PEFT LoRA adapter merged into full-shape replacement tensors (--lora DIR). Each replacement is stored",
                    "in the backbone tensor's dtype (or --quant). The skill is appended to FILE in place (payload at the",
                    "tail, new header and directory, envelope last: a crash leaves FILE with its earlier skills); -o",
                    "writes a new file instead."})
    static final class Add implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the base .cmf file")
        Path file;

        static final class Source {
            @Option(names = "--from", paramLabel = "DONOR", required = true,
                    description = "a CMF file of a fine-tune of the same base (converted like FILE)")
            Path donor;

            @Option(names = "--lora", paramLabel = "DIR", required = true, description = "a PEFT LoRA adapter folder")
            Path lora;
        }

        @ArgGroup(exclusive = true, multiplicity = "1") Source source;

        @Option(names = "--id", required = true, paramLabel = "ID", description = "the skill's id (letters, digits, _ and -)")
        String id;

        @Option(names = "--name", paramLabel = "NAME", description = "a human name (default: the id)")
        String name;

        @Option(names = "--min-delta", paramLabel = "X", defaultValue = "0",
                description = "with --from: graft a tensor only when |D - W| / |W| exceeds X (default ${DEFAULT-VALUE}: any change)")
        double minDelta;

        @Option(names = "--quant", paramLabel = "DTYPE", description = "store the replacements as DTYPE (default: each backbone tensor's dtype)")
        String quant;

        @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of replacing FILE")
        Path out;

        @picocli.CommandLine.Mixin Routing routing;

        @Override public Integer call() {
            SkillGraft.checkId(id);
            DType q = null;
            if (quant != null) {
                q = DType.ofLabel(quant);
                if (q == null) throw new IllegalArgumentException("--quant: unknown dtype '" + quant + "'");
            }
            PrintWriter err = spec.commandLine().getErr();
            Path dest = out != null ? out : file;
            try (CmfFile base = CmfFile.open(file)) {
                if (base.header().skill(id) != null)
                    throw new IllegalArgumentException(base.label() + " already has a skill '" + id + "'");
                List<SkillGraft.Replacement> rs;
                ObjectNode prov = JsonNodeFactory.instance.objectNode();
                if (source.lora != null) {
                    PeftAdapter a = PeftAdapter.read(source.lora);
                    rs = SkillGraft.fromLora(base, a, q);
                    prov.put("source", "lora").put("adapter", a.name());
                } else {
                    try (CmfFile donor = CmfFile.open(source.donor)) {
                        rs = SkillGraft.fromDonor(base, donor, minDelta, q);
                        prov.put("source", "donor").put("donor", source.donor.getFileName().toString()).put("min_delta", minDelta);
                        if (rs.isEmpty())
                            throw new IllegalArgumentException(donor.label() + " changes no tensor of " + base.label()
                                    + (minDelta > 0 ? " by more than --min-delta " + minDelta : ""));
                        SkillGraft.add(base, dest, id, name, rs, prov, routing.selection(file, err));
                    }
                    report(err, rs, dest);
                    return 0;
                }
                SkillGraft.add(base, dest, id, name, rs, prov, routing.selection(file, err));
                report(err, rs, dest);
            }
            return 0;
        }

        private void report(PrintWriter err, List<SkillGraft.Replacement> rs, Path dest) {
            long bytes = 0;
            for (SkillGraft.Replacement r : rs) {
                bytes += r.payload().byteSize();
                err.printf(Locale.ROOT, "  %-60s %-6s |Δ|/|W| %.4g%n", r.name(), r.dtype().label, r.relDelta());
            }
            err.printf(Locale.ROOT, "skill %s: %d tensors, %.1f MB, written to %s%n", id, rs.size(), bytes / 1e6, dest);
        }
    }

    /** {@code --prompts F [--phi-layer L] [--rank R]}: a routing subspace fitted to a skill's prompts. */
    static final class Routing {
        @Option(names = "--prompts", paramLabel = "F",
                description = "a text file, one prompt a line: fit the skill's routing subspace to them (the backbone's hidden state after --phi-layer, mean-pooled)")
        Path prompts;

        @Option(names = "--phi-layer", paramLabel = "L", description = "the layer (0-based) whose output φ is read (default: the middle one)")
        Integer phiLayer;

        @Option(names = "--rank", paramLabel = "R", defaultValue = "4", description = "the subspace's rank (default ${DEFAULT-VALUE}; at most prompts - 1)")
        int rank;

        /** The fitted subspace of {@code --prompts} on the backbone of {@code model}, or null without {@code --prompts}. */
        dev.cmf4j.format.SkillRecord.Selection selection(Path model, PrintWriter err) {
            if (prompts == null) return null;
            java.util.List<String> lines;
            try {
                lines = java.nio.file.Files.readAllLines(prompts).stream().filter(l -> !l.isBlank()).toList();
            } catch (java.io.IOException e) {
                throw new IllegalArgumentException("--prompts: cannot read " + prompts + ": " + e.getMessage());
            }
            try (dev.cmf4j.model.Model m = dev.cmf4j.model.Model.open(model)) {
                var codec = dev.cmf4j.runtime.TextCodec.of(m.file());
                java.util.List<int[]> ids = lines.stream().map(codec::encode).toList();
                int layer = phiLayer != null ? phiLayer : m.graph().numLayers() / 2;
                var d = dev.cmf4j.runtime.SkillRouter.fit(m.graph(), ids, layer, rank);
                err.printf(Locale.ROOT, "routing subspace: %d prompts (%d held out), phi_layer %d, rank %d, E on its prompts %.4f ± %.4f%n",
                        ids.size(), d.holdoutCount(), layer, d.rank(), d.errMean(), d.errStd());
                return d.selection();
            }
        }
    }

    @Command(name = "describe", mixinStandardHelpOptions = true,
            description = "Fit skill ID's routing subspace to --prompts F (the header alone changes: appended in place, or -o OUT).")
    static final class Describe implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
        Path file;

        @Option(names = "--id", required = true, paramLabel = "ID", description = "the skill")
        String id;

        @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of appending to FILE")
        Path out;

        @picocli.CommandLine.Mixin Routing routing;

        @Override public Integer call() {
            if (routing.prompts == null) throw new IllegalArgumentException("--prompts F is required");
            var sel = routing.selection(file, spec.commandLine().getErr());
            try (CmfFile f = CmfFile.open(file)) {
                SkillGraft.describe(f, out != null ? out : file, id, sel);
            }
            return 0;
        }
    }

    @Command(name = "calibrate", mixinStandardHelpOptions = true,
            description = {"Fit the header's routing calibration (temperature T and novelty threshold θ) on the held-out prompts",
                    "of every skill's routing subspace (the last fifth of its --prompts): T by the likelihood of each prompt's",
                    "own skill under softmax(-E/T), θ so that about --target-fpr of those in-scope prompts read as novel.",
                    "The header alone changes (appended in place, or -o OUT)."})
    static final class Calibrate implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
        Path file;

        @Option(names = "--target-fpr", paramLabel = "F", defaultValue = "0.05",
                description = "the share of in-scope held-out prompts allowed to read as novel (default ${DEFAULT-VALUE})")
        double targetFpr;

        @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of appending to FILE")
        Path out;

        @Override public Integer call() {
            try (CmfFile f = CmfFile.open(file)) {
                var c = dev.cmf4j.runtime.SkillRouter.calibrate(f.header().skills(), f.header().arch().hiddenSize(), targetFpr);
                if (c == null)
                    throw new IllegalArgumentException(file + ": no skill carries held-out prompts to calibrate on (fit its"
                            + " subspace with 'cmf skill describe FILE --id ID --prompts F', at least 3 prompts)");
                SkillGraft.calibrate(f, out != null ? out : file, c.toJson());
                spec.commandLine().getOut().printf(Locale.ROOT,
                        "router calibrated over %d held-out prompts: temperature %.4g, novelty θ %.4f (target fpr %.2f)%n",
                        c.samples(), c.temperature(), c.noveltyTheta(), c.targetFpr());
            }
            return 0;
        }
    }

    @Command(name = "export", mixinStandardHelpOptions = true,
            description = "Write skill ID of FILE as a standalone skill file (feature bit SKILL_FILE, bound to FILE's base).")
    static final class Export implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file holding the skill")
        Path file;

        @Option(names = "--id", required = true, paramLabel = "ID", description = "the skill to export")
        String id;

        @Option(names = {"-o", "--out"}, required = true, paramLabel = "OUT", description = "the skill file to write")
        Path out;

        @Override public Integer call() {
            try (CmfFile f = CmfFile.open(file)) {
                SkillGraft.export(f, id, out);
            }
            spec.commandLine().getErr().println("skill " + id + " written to " + out);
            return 0;
        }
    }

    @Command(name = "apply", mixinStandardHelpOptions = true,
            description = {"Add the skill of a standalone skill file to BASE (appended in place, or -o OUT); refused when the",
                    "skill was exported from another base."})
    static final class Apply implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "BASE", description = "the base .cmf file")
        Path base;

        @Parameters(index = "1", paramLabel = "SKILL", description = "the skill file (cmf skill export)")
        Path skill;

        @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of appending to BASE")
        Path out;

        @Override public Integer call() {
            try (CmfFile b = CmfFile.open(base); CmfFile s = CmfFile.open(skill)) {
                SkillGraft.apply(b, s, out != null ? out : base);
                spec.commandLine().getErr().println("skill " + s.header().skills().getFirst().id() + " added to " + (out != null ? out : base));
            }
            return 0;
        }
    }

    @Command(name = "remove", mixinStandardHelpOptions = true,
            description = "Remove skill ID (its tensors and record) from FILE: the file is rewritten beside itself and renamed into place.")
    static final class Remove implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
        Path file;

        @Option(names = "--id", required = true, paramLabel = "ID", description = "the skill to remove")
        String id;

        @Option(names = {"-o", "--out"}, paramLabel = "OUT", description = "write the result here instead of replacing FILE")
        Path out;

        @Override public Integer call() {
            try (CmfFile f = CmfFile.open(file)) {
                SkillGraft.remove(f, id, out != null ? out : file);
            }
            spec.commandLine().getErr().println("skill " + id + " removed");
            return 0;
        }
    }

    @Command(name = "list", mixinStandardHelpOptions = true, description = "List the skills of FILE: id, name, layers, tensors and bytes.")
    static final class ListSkills implements Callable<Integer> {
        @Spec CommandSpec spec;

        @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file")
        Path file;

        @Override public Integer call() {
            PrintWriter out = spec.commandLine().getOut();
            try (CmfFile f = CmfFile.open(file)) {
                if (f.header().skills().isEmpty()) {
                    out.println("no skills");
                    return 0;
                }
                out.printf(Locale.ROOT, "%-16s %-20s %7s %10s  %s%n", "id", "name", "tensors", "bytes", "layers");
                for (SkillRecord s : f.header().skills()) {
                    String prefix = "skill." + s.id() + ".";
                    long n = 0, bytes = 0;
                    for (TensorEntry t : f.tensors())
                        if (t.name().startsWith(prefix)) { n++; bytes += t.nbytes(); }
                    out.printf(Locale.ROOT, "%-16s %-20s %7d %10d  %s%n", s.id(), s.name() == null ? "" : s.name(), n, bytes,
                            s.layers() == null ? "" : s.layers());
                }
            }
            return 0;
        }
    }
}
