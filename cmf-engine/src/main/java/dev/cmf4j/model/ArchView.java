package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.Iterator;
import java.util.Map;

/**
 * Typed lookups in a CMF {@code arch} block, falling back to the HF config the converter kept
 * ({@code provenance.hf_config_extras}, where the reference converter parks what its schema lacks, e.g.
 * rope scaling; then {@code provenance.hf_config}, the verbatim config.json our converter keeps). Paths are dotted ("moe.top_k"); each lookup tries its paths in order, arch before
 * extras, and treats JSON null as absent.
 */
final class ArchView {
    private final JsonNode arch;
    private final JsonNode[] roots;

    /** @param fallbacks further roots consulted in order when the arch block lacks a field (may hold nulls) */
    ArchView(JsonNode arch, JsonNode... fallbacks) {
        this.arch = arch == null ? com.fasterxml.jackson.databind.node.MissingNode.getInstance() : arch;
        java.util.List<JsonNode> r = new java.util.ArrayList<>();
        r.add(this.arch);
        for (JsonNode f : fallbacks) if (f != null && f.isObject()) r.add(f);
        this.roots = r.toArray(JsonNode[]::new);
    }

    /** arch with {@code overrides} deep-merged over it (override values win). */
    static JsonNode merge(JsonNode arch, JsonNode overrides) {
        if (overrides == null || overrides.isNull() || overrides.isMissingNode()) return arch;
        ObjectNode out = arch != null && arch.isObject() ? ((ObjectNode) arch).deepCopy()
                : com.fasterxml.jackson.databind.node.JsonNodeFactory.instance.objectNode();
        for (Iterator<Map.Entry<String, JsonNode>> it = overrides.fields(); it.hasNext(); ) {
            var e = it.next();
            JsonNode cur = out.get(e.getKey());
            if (cur != null && cur.isObject() && e.getValue().isObject()) out.set(e.getKey(), merge(cur, e.getValue()));
            else out.set(e.getKey(), e.getValue());
        }
        return out;
    }

    JsonNode node(String... paths) {
        for (JsonNode root : roots)
            for (String p : paths) {
                JsonNode n = at(root, p);
                if (n != null) return n;
            }
        return null;
    }

    /** Element {@code i} of the arch array {@code field}, or null when the array or element is absent/null. */
    JsonNode archAt(String field, int i) {
        JsonNode n = at(arch, field);
        if (n == null || !n.isArray() || i >= n.size() || n.get(i).isNull()) return null;
        return n.get(i);
    }

    /** Only the arch block (no extras fallback). */
    JsonNode archNode(String path) { return at(arch, path); }

    private static JsonNode at(JsonNode root, String path) {
        JsonNode n = root;
        for (String part : path.split("\\.")) {
            if (n == null || !n.isObject()) return null;
            n = n.get(part);
        }
        return n == null || n.isNull() || n.isMissingNode() ? null : n;
    }

    Double num(String... paths) {
        JsonNode n = node(paths);
        if (n == null) return null;
        if (!n.isNumber()) throw new ModelException("arch field " + paths[0] + " is not a number: " + n);
        return n.asDouble();
    }

    double num(double dflt, String... paths) { Double d = num(paths); return d == null ? dflt : d; }

    Integer integer(String... paths) {
        JsonNode n = node(paths);
        if (n == null) return null;
        if (!n.canConvertToInt() || n.asDouble() != n.asInt())
            throw new ModelException("arch field " + paths[0] + " is not an integer: " + n);
        return n.asInt();
    }

    int require(String what, String... paths) {
        Integer i = integer(paths);
        if (i == null) throw new ModelException("arch has no " + what + " (looked for " + String.join(", ", paths) + ")");
        return i;
    }

    String str(String... paths) {
        JsonNode n = node(paths);
        return n == null ? null : n.asText();
    }

    Boolean bool(String... paths) {
        JsonNode n = node(paths);
        if (n == null) return null;
        if (!n.isBoolean()) throw new ModelException("arch field " + paths[0] + " is not a boolean: " + n);
        return n.asBoolean();
    }
}
