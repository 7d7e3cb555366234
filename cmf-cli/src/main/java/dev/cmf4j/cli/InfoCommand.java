package dev.cmf4j.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfHeader;
import dev.cmf4j.format.Envelope;
import dev.cmf4j.format.Feature;
import dev.cmf4j.format.Hash64;
import dev.cmf4j.format.Masks;
import dev.cmf4j.format.ModelArch;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.format.TensorEntry;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

import java.io.PrintWriter;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;

/** {@code cmf info FILE [--json] [--verify]}: what a CMF file holds, and whether its hashes hold. */
@Command(name = "info", mixinStandardHelpOptions = true,
        description = {"Show a CMF file's header, architecture, tensors (dtype, shape, bytes, hash), masks, skills and tokenizer.",
                "Opening validates the container (envelope, header and directory hashes, every bound); "
                        + "--verify also checks every section and tensor hash and exits with status 1 if any differs.",
                "A shard name (model-00001-of-00004.cmf) shows the whole set."})
public final class InfoCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", paramLabel = "FILE", description = "the .cmf file (any shard of a set)")
    Path file;

    @Option(names = "--json", description = "print one JSON object instead of text")
    boolean json;

    @Option(names = "--verify", description = "check every hash (reads all tensor data); exit 1 on any problem")
    boolean verify;

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        try (CmfFile f = CmfFile.open(file)) {
            List<String> problems = verify ? f.verify() : List.of();
            if (json) out.println(new ObjectMapper().writerWithDefaultPrettyPrinter().writeValueAsString(toJson(f, problems)));
            else text(f, problems, out);
            out.flush();
            return problems.isEmpty() ? 0 : 1;
        }
    }

    // ------------------------------------------------------------------ text

    /** One line from header.provenance: source, format, quant mode, tensor policy, tool (null when absent). */
    static String provenance(com.fasterxml.jackson.databind.JsonNode p) {
        if (p == null || !p.isObject() || p.isEmpty()) return null;
        StringBuilder b = new StringBuilder();
        if (p.hasNonNull("source_model")) b.append("source ").append(p.get("source_model").asText());
        if (p.hasNonNull("source_format")) b.append(" (").append(p.get("source_format").asText()).append(')');
        if (p.hasNonNull("quant")) b.append(b.isEmpty() ? "" : ", ").append("quant ").append(p.get("quant").asText());
        com.fasterxml.jackson.databind.JsonNode pol = p.get("policy");
        if (pol != null && pol.hasNonNull("rules")) {
            b.append(b.isEmpty() ? "" : ", ").append("policy: ").append(pol.get("rules").asText());
            if (pol.path("keep").size() > 0) {
                List<String> keeps = new java.util.ArrayList<>();
                pol.get("keep").forEach(k -> keeps.add(k.asText()));
                b.append("; keep ").append(String.join(" ", keeps));
            }
        }
        if (p.hasNonNull("tool")) {
            b.append(b.isEmpty() ? "" : ", ").append("by ").append(p.get("tool").asText());
            if (p.hasNonNull("tool_version")) b.append(' ').append(p.get("tool_version").asText());
        }
        return b.isEmpty() ? null : b.toString();
    }

    private void text(CmfFile f, List<String> problems, PrintWriter out) {
        CmfHeader h = f.header();
        long fileBytes = f.shards().stream().mapToLong(s -> s.bytes().byteSize()).sum();
        out.printf("file       %s%n", f.label());
        out.printf("size       %,d bytes in %d file%s%n", fileBytes, f.shards().size(), f.shards().size() == 1 ? "" : "s");
        Envelope e = f.envelope();
        out.printf("format     CMF v%d, features 0x%x %s%n", e.version(), e.features(), Feature.of(e.features()));
        out.printf("quant      %s%n", h.quantType() == null ? "-" : h.quantType());
        String prov = provenance(h.provenance());
        if (prov != null) out.printf("provenance %s%n", prov);
        ModelArch a = h.arch();
        if (a != null) {
            out.printf("arch       %s%n", a.archName() == null ? "-" : a.archName());
            out.printf("           hidden %s, intermediate %s, layers %s, heads %s (kv %s), head_dim %s, vocab %s%n",
                    n(a.hiddenSize()), n(a.intermediateSize()), n(a.numLayers()), n(a.numAttentionHeads()),
                    n(a.numKvHeads()), n(a.headDim()), n(a.vocabSize()));
            out.printf("           norm %s (eps %s), rope_theta %s, tied embeddings %s, max positions %s%n",
                    n(a.normStyle()), n(a.rmsNormEps()), n(a.ropeTheta()), n(a.tieWordEmbeddings()), n(a.maxPositionEmbeddings()));
            if (a.layerTypes() != null) out.printf("           layer types %s%n", runs(a.layerTypes()));
            if (a.moe() != null) out.printf("           moe: %s experts, top %s, expert width %s%n",
                    n(a.moe().numExperts()), n(a.moe().topK()), n(a.moe().moeIntermediateSize()));
            if (a.linearCore() != null) out.printf("           linear core %s%n", a.linearCore().kind());
            if (a.anchorCore() != null) out.printf("           anchor core %s, window %s, sinks %s%n", a.anchorCore().kind(),
                    n(a.anchorCore().window()), n(a.anchorCore().sink()));
            long state = fixedStateBytes(f);
            if (state >= 0) out.printf("state      %,d bytes per sequence, whatever the context (recurrent and bounded layers only)%n", state);
            if (!a.extra().isEmpty()) out.printf("           other arch fields: %s%n", String.join(", ", a.extra().keySet()));
        }
        long vocab = vocabBytes(f);
        out.printf("tokenizer  %s; chat bundle %s%n",
                vocab > 0 ? String.format("tokenizer.json %,d bytes", vocab) : "no vocab section",
                h.tokenizerConfig() == null ? "none (ChatML fallback)"
                        : (h.tokenizerConfig().chatTemplate() != null ? "chat template, " : "no template, ")
                        + "eos " + h.tokenizerConfig().eosTokenIds() + ", bos " + n(h.tokenizerConfig().bosTokenId()));
        var masks = f.masks();
        if (masks.isEmpty()) out.println("masks      none");
        else {
            Masks m = masks.get();
            out.printf("masks      %d (default %s)%n", m.masks().size(), n(m.meta().defaultTask()));
            for (Masks.TaskMask t : m.masks()) {
                Masks.MaskMeta mm = t.meta();
                out.printf("           %-3d %-20s sparsity %s, priority %s, quality %s%s%n", mm.taskId(), mm.name(),
                        n(mm.sparsity()), n(mm.priority()), mm.quality() == null ? "unmeasured" : mm.quality().toString(),
                        t.hasExperts() ? ", expert bits" : "");
            }
        }
        if (h.skills().isEmpty()) out.println("skills     none");
        else {
            out.printf("skills     %d%n", h.skills().size());
            for (SkillRecord s : h.skills()) {
                long n = f.tensors().stream().filter(t -> t.name().startsWith("skill." + s.id() + ".")).count();
                out.printf("           %-16s %s, %d tensors%s%n", s.id(), n(s.name()), n,
                        s.kind() == null ? "" : ", kind " + s.kind());
            }
        }
        if (f.shards().size() > 1) {
            for (CmfFile.Shard s : f.shards()) {
                out.printf("shard      %s: %d tensors, %,d bytes%n", Path.of(s.label()).getFileName(), s.tensors().size(), s.bytes().byteSize());
            }
        }
        out.println();
        int w = Math.max(4, f.tensors().stream().mapToInt(t -> t.name().length()).max().orElse(4));
        out.printf("%-" + w + "s  %-8s  %-20s  %14s  %s%n", "NAME", "DTYPE", "SHAPE", "BYTES", "HASH");
        for (TensorEntry t : f.tensors()) {
            out.printf("%-" + w + "s  %-8s  %-20s  %,14d  %s%n", t.name(), t.dtype().label, Arrays.toString(t.shape()),
                    t.nbytes(), Hash64.hex(t.hash()));
        }
        out.println();
        Map<String, long[]> byDtype = byDtype(f);
        out.printf("total      %d tensors, %,d payload bytes, %,d parameters%n", f.tensors().size(), f.payloadBytes(), params(f));
        byDtype.forEach((d, v) -> out.printf("           %-8s %5d tensors %,16d bytes%n", d, v[0], v[1]));
        if (verify) {
            if (problems.isEmpty()) out.println("verify     OK (header, directory, sections and every tensor hash)");
            else {
                out.printf("verify     %d problem%s%n", problems.size(), problems.size() == 1 ? "" : "s");
                for (String p : problems) out.println("  " + p);
            }
        }
    }

    private static String runs(List<String> types) {
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < types.size(); ) {
            int j = i;
            while (j < types.size() && types.get(j).equals(types.get(i))) j++;
            sb.append(sb.isEmpty() ? "" : ", ").append(types.get(i)).append(j - i > 1 ? " x" + (j - i) : "");
            i = j;
        }
        return sb.toString();
    }

    /** Length of the vocab section (read from the envelope: info shows it even when its hash is wrong). */
    /**
     * Bytes of one sequence's state when every layer keeps a fixed-size state (gated delta nets, bounded anchors), or
     * -1 when some layer's cache grows with the context or the engine cannot run the file.
     */
    static long fixedStateBytes(CmfFile f) {
        if (f.header().arch() == null) return -1;
        try {
            return dev.cmf4j.model.SpecBuilder.build(f.header().toJson(), new dev.cmf4j.model.CmfWeights(f)).fixedStateBytes();
        } catch (dev.cmf4j.model.ModelException e) {
            return -1;
        }
    }

    private static long vocabBytes(CmfFile f) {
        return f.shards().stream().mapToLong(s -> s.envelope().vocab().length()).sum();
    }

    private static String n(Object o) { return o == null ? "-" : o.toString(); }

    private static Map<String, long[]> byDtype(CmfFile f) {
        Map<String, long[]> m = new LinkedHashMap<>();
        for (TensorEntry t : f.tensors()) {
            long[] v = m.computeIfAbsent(t.dtype().label, k -> new long[2]);
            v[0]++;
            v[1] += t.nbytes();
        }
        return m;
    }

    private static long params(CmfFile f) {
        long p = 0;
        for (TensorEntry t : f.tensors()) if (!t.dtype().raw()) p += t.elements();
        return p;
    }

    // ------------------------------------------------------------------ json

    private ObjectNode toJson(CmfFile f, List<String> problems) throws Exception {
        ObjectMapper m = new ObjectMapper();
        ObjectNode o = m.createObjectNode();
        o.put("file", f.label());
        ArrayNode files = o.putArray("files");
        for (CmfFile.Shard s : f.shards()) {
            ObjectNode fo = files.addObject();
            fo.put("path", s.label());
            fo.put("bytes", s.bytes().byteSize());
            fo.put("tensors", s.tensors().size());
            Envelope e = s.envelope();
            fo.put("features", e.features());
            fo.put("data_off", e.data().offset());
            fo.put("data_len", e.data().length());
        }
        Envelope e = f.envelope();
        o.put("version", e.version());
        ArrayNode feats = o.putArray("features");
        Feature.of(e.features()).forEach(x -> feats.add(x.name()));
        CmfFile.Shard first = f.shards().getFirst();
        byte[] hb = first.bytes().asSlice(e.header().offset(), e.header().length()).toArray(ValueLayout.JAVA_BYTE);
        o.set("header", m.readTree(hb));
        ArrayNode ts = o.putArray("tensors");
        for (TensorEntry t : f.tensors()) {
            ObjectNode to = ts.addObject();
            to.put("name", t.name());
            to.put("dtype", t.dtype().label);
            ArrayNode sh = to.putArray("shape");
            for (long d : t.shape()) sh.add(d);
            to.put("offset", t.offset());
            to.put("nbytes", t.nbytes());
            to.put("hash", Hash64.hex(t.hash()));
        }
        JsonNode masks = f.masks().<JsonNode>map(x -> x.meta().toJson()).orElse(null);
        o.set("masks_meta", masks);
        o.put("vocab_bytes", vocabBytes(f));
        o.set("skills", m.valueToTree(f.header().skills().stream().map(SkillRecord::id).collect(Collectors.toList())));
        ObjectNode totals = o.putObject("totals");
        totals.put("tensors", f.tensors().size());
        totals.put("payload_bytes", f.payloadBytes());
        totals.put("parameters", params(f));
        long state = fixedStateBytes(f);
        if (state >= 0) o.put("state_bytes_per_sequence", state);
        ObjectNode bd = totals.putObject("by_dtype");
        byDtype(f).forEach((d, v) -> bd.putObject(d).put("tensors", v[0]).put("bytes", v[1]));
        if (verify) {
            ArrayNode vp = o.putArray("verify_problems");
            problems.forEach(vp::add);
        }
        return o;
    }
}
