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
                SkillCommand.Remove.class})
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
                        SkillGraft.add(base, dest, id, name, rs, prov);
                    }
                    report(err, rs, dest);
                    return 0;
                }
                SkillGraft.add(base, dest, id, name, rs, prov);
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
