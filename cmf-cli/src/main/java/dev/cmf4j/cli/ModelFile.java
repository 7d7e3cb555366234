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
            if (!Files.isRegularFile(given)) throw new NoSuchFileException(given.toString(), null, "no such model file");
            return given;
        }
        String home = System.getProperty("cmf.home");
        Path def = (home == null ? Path.of(".") : Path.of(home)).resolve(DEFAULT).toAbsolutePath().normalize();
        if (!Files.isRegularFile(def))
            throw new NoSuchFileException(def.toString(), null, "no model file given and the bundled default model is missing;"
                    + " pass a .cmf file, e.g. one made with 'cmf convert HF_DIR -o model.cmf'");
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

        @picocli.CommandLine.Option(names = "--blend", paramLabel = "auto|ID:W,...",
                description = "run through a blend of the file's skills: each tensor a skill replaces becomes the weighted sum"
                        + " of the skills' (and, for 'none', the backbone's) versions, weights normalised to 1; auto: weights"
                        + " softmax(-E/T) from routing the prompt (run, generate, logits; needs 'cmf skill calibrate')")
        String blend;

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
            if (blend != null) throw new IllegalArgumentException("--blend runs single sequences only (run, generate, logits, ppl)");
            return resolved(g, skill);
        }

        /** The graph a single-sequence command runs on and the overlay its sequence reads the weights through. */
        record Target(dev.cmf4j.model.graph.Graph graph, dev.cmf4j.model.graph.Overlay overlay) {}

        /**
         * As {@link #overlay(dev.cmf4j.model.graph.Graph)} on {@code m}'s graph; {@code --skill auto} routes {@code prompt}
         * among the file's skills (the backbone when the prompt is novel or no skill has a descriptor) and says where on
         * {@code err}; {@code --blend} runs on a graph of {@code m} with the blend as one more skill.
         */
        Target target(dev.cmf4j.model.Model m, int[] prompt, java.io.PrintWriter err) {
            var g = m.graph();
            if (applied != null) return new Target(g, resolved(g, null));
            if (g.device() != null && ("auto".equals(skill) || "auto".equals(blend)))
                throw new IllegalArgumentException("routing reads the backbone's hidden states on the CPU graph; this model runs"
                        + " whole on the device: use --device cpu for --skill auto and --blend auto, or name the skill");
            if (blend != null) {
                if (skill != null) throw new IllegalArgumentException("--blend and --skill exclude each other");
                java.util.Map<String, Double> w = blendWeights(m, prompt, err);
                if (w == null) return new Target(g, resolved(g, null));
                var bg = m.graph(ws -> new dev.cmf4j.model.BlendedWeights(ws, w));
                return new Target(bg, resolved(bg, dev.cmf4j.model.BlendedWeights.ID));
            }
            String s = skill;
            if ("auto".equals(skill)) {
                var r = route(m, prompt);
                s = r.winner();
                err.println("cmf: routed to " + (s == null ? "the backbone" : "skill " + s) + routeNote(r));
            }
            return new Target(g, resolved(g, s));
        }

        private static dev.cmf4j.runtime.SkillRouter.Route route(dev.cmf4j.model.Model m, int[] prompt) {
            return dev.cmf4j.runtime.SkillRouter.route(m.graph(), prompt, m.file().header().skills(), m.file().header().routing());
        }

        private static String routeNote(dev.cmf4j.runtime.SkillRouter.Route r) {
            if (r.scores().isEmpty()) return " (no skill has a routing descriptor)";
            return String.format(java.util.Locale.ROOT, " (E %.4f, %s)", r.scores().getFirst().error(), r.calibrated()
                    ? String.format(java.util.Locale.ROOT, "novelty %.3f", r.novelty()) : "uncalibrated");
        }

        /** {@code --blend ID:W,...} as written (not yet normalised or checked against the file). */
        private java.util.Map<String, Double> parseBlend() {
            java.util.Map<String, Double> w = new java.util.LinkedHashMap<>();
            for (String part : blend.split(",")) {
                int c = part.lastIndexOf(':');
                if (c <= 0) throw new IllegalArgumentException("--blend: '" + part + "' is not ID:WEIGHT (e.g. --blend a:0.7,b:0.3, or auto)");
                String id = part.substring(0, c).trim();
                double v;
                try {
                    v = Double.parseDouble(part.substring(c + 1).trim());
                } catch (NumberFormatException e) {
                    throw new IllegalArgumentException("--blend: weight '" + part.substring(c + 1) + "' of '" + id + "' is not a number");
                }
                if (w.put(id, v) != null) throw new IllegalArgumentException("--blend names '" + id + "' twice");
            }
            return w;
        }

        /** {@code --blend}'s weights by skill id ("none": the backbone), or null when auto sends the prompt to the backbone. */
        private java.util.Map<String, Double> blendWeights(dev.cmf4j.model.Model m, int[] prompt, java.io.PrintWriter err) {
            java.util.Map<String, Double> w = new java.util.LinkedHashMap<>();
            if (blend.equals("auto")) {
                var r = route(m, prompt);
                if (!r.scores().isEmpty() && !r.calibrated())
                    throw new IllegalArgumentException("--blend auto weighs skills by softmax(-E/T) and needs the file's routing"
                            + " calibration: run 'cmf skill calibrate " + m.file().label() + "' first");
                if (r.winner() == null) {
                    err.println("cmf: routed to the backbone" + (r.novel() && !r.scores().isEmpty() ? " (novel prompt)" : "") + routeNote(r));
                    return null;
                }
                w.putAll(r.weights());
            } else {
                w.putAll(parseBlend());
            }
            var bw = new dev.cmf4j.model.BlendedWeights(new dev.cmf4j.model.CmfWeights(m.file()), w);   // checks and normalises
            StringBuilder sb = new StringBuilder("cmf: blending");
            bw.weights().forEach((k, v) -> sb.append(String.format(java.util.Locale.ROOT, " %s %.3f", k, v)));
            err.println(sb);
            return bw.weights();
        }

        private dev.cmf4j.model.graph.Overlay resolved(dev.cmf4j.model.graph.Graph g, String s) {
            if (applied != null) s = null;   // the skill (or blend) is in the weights themselves
            if (loras.size() > 1) throw new IllegalArgumentException("one --lora per run (serve loads several; requests pick one)");
            String adapter = g.adapters().isEmpty() ? null : g.adapters().getFirst();
            return g.withTask(g.overlay(s, adapter, loraScale), task);
        }

        /** Opens {@code file} (or the default model) with the overrides, on the CPU. */
        dev.cmf4j.model.Model open(Path file) throws NoSuchFileException {
            return open(file, new dev.cmf4j.backend.cpu.CpuBackend());
        }

        /** What {@link #openOne} applied to the weights ("skill ID", "blend ..."), or null. */
        private String applied;

        /**
         * As {@link #open(Path, dev.cmf4j.backend.Backend)}, for a command that runs one sequence (or sequences of one
         * overlay): on a backend that runs whole models, {@code --skill ID} and a {@code --blend} of named weights are
         * applied to the weights themselves (the device holds the skill's tensors in place of the backbone's and runs
         * its fused launches as for the backbone; a blend has no per-row form) and say so on {@code err}.
         */
        dev.cmf4j.model.Model openOne(Path file, dev.cmf4j.backend.Backend backend, java.io.PrintWriter err) throws NoSuchFileException {
            applied = null;
            if (!backend.runsWholeModels()) return open(file, backend);
            java.util.function.UnaryOperator<dev.cmf4j.model.Weights> wrap;
            if (blend != null && !blend.equals("auto")) {
                if (skill != null) throw new IllegalArgumentException("--blend and --skill exclude each other");
                java.util.Map<String, Double> w = parseBlend();
                wrap = ws -> new dev.cmf4j.model.SkillWeights(new dev.cmf4j.model.BlendedWeights(ws, w), dev.cmf4j.model.BlendedWeights.ID);
                applied = "blend " + blend;
            } else if (blend == null && skill != null && !skill.equals("none") && !skill.equals("auto")) {
                String id = skill;
                wrap = ws -> new dev.cmf4j.model.SkillWeights(ws, id);
                applied = "skill " + skill;
            } else {
                return open(file, backend);
            }
            dev.cmf4j.model.Model m = open(resolve(file), backend, wrap, memory);
            err.println("cmf: " + applied + " applied to the weights (one overlay for the whole run: the device reads it in place of the backbone)");
            return m;
        }

        /** Opens {@code file} (or the default model) with the overrides, on {@code backend}. */
        dev.cmf4j.model.Model open(Path file, dev.cmf4j.backend.Backend backend) throws NoSuchFileException {
            return open(resolve(file), backend, java.util.function.UnaryOperator.identity(), memory);
        }

        /** Opens {@code file} (or the default model) with the overrides but {@code mem}'s attention memory, on {@code backend}. */
        dev.cmf4j.model.Model open(Path file, dev.cmf4j.backend.Backend backend, MemoryOptions mem) throws NoSuchFileException {
            return open(resolve(file), backend, java.util.function.UnaryOperator.identity(), mem);
        }

        private dev.cmf4j.model.Model open(Path file, dev.cmf4j.backend.Backend backend,
                                           java.util.function.UnaryOperator<dev.cmf4j.model.Weights> wrap, MemoryOptions mem)
                throws NoSuchFileException {
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
            return dev.cmf4j.model.Model.open(p, o, backend, adapters(), mem::choose, wrap);
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
