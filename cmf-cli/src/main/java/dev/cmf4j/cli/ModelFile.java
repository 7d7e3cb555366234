package dev.cmf4j.cli;

import picocli.CommandLine;

import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;

/** Where the model commands find their file: the argument, else the bundled default model. */
final class ModelFile {
    private ModelFile() {}

    /** Relative to the repository ({@code cmf.home}, set by the launcher). */
    static final String DEFAULT = "models/default.cmf";

    static Path resolve(Path given) throws NoSuchFileException {
        if (given != null) {
            if (!Files.isRegularFile(given)) throw new NoSuchFileException(given + ": no such model file");
            return given;
        }
        String home = System.getProperty("cmf.home");
        Path def = (home == null ? Path.of(".") : Path.of(home)).resolve(DEFAULT).toAbsolutePath().normalize();
        if (!Files.isRegularFile(def))
            throw new NoSuchFileException("no model file given and the bundled default model is missing (" + def
                    + "); pass a .cmf file, e.g. one made with 'cmf convert HF_DIR -o model.cmf'");
        return def;
    }

    /** The {@code --arch-override} option of the model commands. */
    static final class Overrides {
        @picocli.CommandLine.Option(names = "--arch-override", paramLabel = "JSON",
                description = "JSON object merged over the file's arch block, for files that lack a field "
                        + "(e.g. '{\"moe\": {\"top_k\": 2}}')")
        String json;

        @picocli.CommandLine.Mixin MemoryOptions memory = new MemoryOptions();

        @picocli.CommandLine.Option(names = "--skill", paramLabel = "ID",
                description = "run through the file's skill ID (its skill.ID.* tensors replace the backbone's); none: the backbone")
        String skill;

        @picocli.CommandLine.Option(names = "--task", paramLabel = "NAME",
                description = "apply the file's task mask NAME (FFN neurons, heads, layers and experts off; no weight touched)")
        String task;

        @picocli.CommandLine.Option(names = "--lora", paramLabel = "[NAME=]DIR",
                description = "a PEFT LoRA adapter folder applied un-merged (a low-rank delta per targeted product; CPU);"
                        + " repeatable in serve, where requests pick one by NAME (default: the folder's name)")
        java.util.List<String> loras = new java.util.ArrayList<>();

        @picocli.CommandLine.Option(names = "--lora-scale", paramLabel = "S", defaultValue = "1",
                description = "multiplies the adapter's alpha/r (default ${DEFAULT-VALUE})")
        float loraScale = 1f;

        /** The adapters of {@code --lora}, read from their folders. */
        java.util.List<dev.cmf4j.model.LowRankAdapter> adapters() {
            java.util.List<dev.cmf4j.model.LowRankAdapter> out = new java.util.ArrayList<>();
            for (String spec : loras) {
                int eq = spec.indexOf('=');
                String name = eq > 0 ? spec.substring(0, eq) : null;
                Path dir = Path.of(eq > 0 ? spec.substring(eq + 1) : spec);
                out.add(Adapters.toEngine(dev.cmf4j.convert.PeftAdapter.read(dir), name));
            }
            return out;
        }

        /**
         * The overlay a single-sequence command runs with: {@code --skill} and the one {@code --lora}; an unknown skill
         * or a skill the model cannot run is an error naming the file's skills.
         */
        dev.cmf4j.model.graph.Overlay overlay(dev.cmf4j.model.graph.Graph g) {
            if ("auto".equals(skill)) throw new IllegalArgumentException("--skill auto needs a prompt to route (run, generate, logits)");
            return resolved(g, skill);
        }

        /**
         * As {@link #overlay(dev.cmf4j.model.graph.Graph)}; {@code --skill auto} routes {@code prompt} among the skills of
         * {@code file} (the backbone when the prompt is novel or no skill has a descriptor) and says where on {@code err}.
         */
        dev.cmf4j.model.graph.Overlay overlay(dev.cmf4j.model.graph.Graph g, dev.cmf4j.model.Model m, int[] prompt,
                                              java.io.PrintWriter err) {
            String s = skill;
            if ("auto".equals(skill)) {
                var r = dev.cmf4j.runtime.SkillRouter.route(g, prompt, m.file().header().skills(), m.file().header().routing());
                s = r.winner();
                err.println("cmf: routed to " + (s == null ? "the backbone" : "skill " + s)
                        + (r.scores().isEmpty() ? " (no skill has a routing descriptor)" : String.format(java.util.Locale.ROOT,
                        " (E %.4f, %s)", r.scores().getFirst().error(), r.calibrated()
                                ? String.format(java.util.Locale.ROOT, "novelty %.3f", r.novelty()) : "uncalibrated")));
            }
            return resolved(g, s);
        }

        private dev.cmf4j.model.graph.Overlay resolved(dev.cmf4j.model.graph.Graph g, String s) {
            if (loras.size() > 1) throw new IllegalArgumentException("one --lora per run (serve loads several; requests pick one)");
            String adapter = g.adapters().isEmpty() ? null : g.adapters().getFirst();
            return g.withTask(g.overlay(s, adapter, loraScale), task);
        }

        /** Opens {@code file} (or the default model) with the overrides, on the CPU. */
        dev.cmf4j.model.Model open(Path file) throws NoSuchFileException {
            return open(file, new dev.cmf4j.backend.cpu.CpuBackend());
        }

        /** Opens {@code file} (or the default model) with the overrides, on {@code backend}. */
        dev.cmf4j.model.Model open(Path file, dev.cmf4j.backend.Backend backend) throws NoSuchFileException {
            Path p = resolve(file);
            com.fasterxml.jackson.databind.JsonNode o = null;
            if (json != null) {
                try {
                    o = new com.fasterxml.jackson.databind.ObjectMapper().readTree(json);
                } catch (java.io.IOException e) {
                    throw new IllegalArgumentException("--arch-override is not valid JSON: "
                            + e.getMessage().lines().findFirst().orElse(""));
                }
                if (o == null || !o.isObject()) throw new IllegalArgumentException("--arch-override must be a JSON object");
            }
            return dev.cmf4j.model.Model.open(p, o, backend, adapters(), memory::choose);
        }
    }

    /** Parses "1,2,3" (commas and/or spaces) into ids. */
    static int[] parseIds(String s) {
        String[] parts = s.trim().split("[,\\s]+");
        if (s.isBlank()) return new int[0];
        int[] ids = new int[parts.length];
        for (int i = 0; i < parts.length; i++) {
            try {
                ids[i] = Integer.parseInt(parts[i]);
            } catch (NumberFormatException e) {
                throw new CommandLine.ParameterException(new CommandLine(new Object()),
                        "--ids: '" + parts[i] + "' is not a token id (expected integers like 1,2,3)");
            }
        }
        return ids;
    }
}
