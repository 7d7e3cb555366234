package dev.cmf4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.backend.KvType;

import java.util.Arrays;
import java.util.Locale;

/**
 * How attention layers keep their keys and values: which full-attention layers are sealed ({@code --o1}: exact ring of
 * the last {@code window} keys, {@code sinks} permanent keys, the far field on {@code landmarks} landmark keys) and
 * the element type of the exact KV cache ({@code --kv}).
 *
 * @param sealed the sealed layers, or null for none
 * @param kv     the exact KV cache's element type
 */
public record AttentionMemory(Sealed sealed, KvType kv) {
    public static final int DEFAULT_LANDMARKS = 32, DEFAULT_WINDOW = 128, DEFAULT_SINKS = 4;

    /** Exact float32 attention everywhere: what a model does when nothing is asked. */
    public static final AttentionMemory EXACT = new AttentionMemory(null, KvType.F32);

    public AttentionMemory {
        if (kv == null) throw new IllegalArgumentException("kv type must be given");
    }

    public boolean isExact() { return sealed == null && kv == KvType.F32; }

    /**
     * Sealed layers: {@code layers} is {@code all}, {@code deepN} (the N deepest layers) or {@code i,j,k}.
     *
     * @param layers    the selection as given (kept for messages and the state hash)
     * @param landmarks the landmark budget m (at least 4)
     * @param window    the exact window W (at least 1)
     * @param sinks     permanent exact sink keys S (at least 0)
     */
    public record Sealed(String layers, int landmarks, int window, int sinks) {
        public Sealed {
            if (parse(layers) == null) throw new IllegalArgumentException("--o1 must be all, deepN or i,j,k, got '" + layers + "'");
            if (landmarks < 4) throw new IllegalArgumentException("--o1-m must be at least 4, got " + landmarks);
            if (window < 1) throw new IllegalArgumentException("--o1-window must be at least 1, got " + window);
            if (sinks < 0) throw new IllegalArgumentException("--o1-sink must not be negative, got " + sinks);
        }

        /** Which of {@code numLayers} layers the selection names; an index past the end is an error. */
        public boolean[] flags(int numLayers) {
            boolean[] f = new boolean[numLayers];
            int[] sel = parse(layers);
            if (sel.length == 0) Arrays.fill(f, true);
            else if (sel[0] < 0) Arrays.fill(f, Math.max(0, numLayers + sel[0]), numLayers, true);
            else for (int i : sel) {
                if (i >= numLayers)
                    throw new ModelException("--o1 names layer " + i + " but the model has " + numLayers + " layers");
                f[i] = true;
            }
            return f;
        }

        /** all → {}, deepN → {−N}, i,j,k → {i, j, k}; null when not a selection. */
        private static int[] parse(String s) {
            if (s == null) return null;
            String t = s.trim().toLowerCase(Locale.ROOT);
            if (t.equals("all")) return new int[0];
            try {
                if (t.startsWith("deep")) {
                    int n = Integer.parseInt(t.substring(4));
                    return n > 0 ? new int[] {-n} : null;
                }
                int[] idx = Arrays.stream(t.split(",")).map(String::trim).mapToInt(Integer::parseInt).toArray();
                return idx.length > 0 && Arrays.stream(idx).allMatch(i -> i >= 0) ? idx : null;
            } catch (NumberFormatException e) {
                return null;
            }
        }
    }

    /**
     * The sealed layers asked for: the flag ({@code off} for none) when given, else the file's hint
     * {@code provenance.o1_attn = {layers, m, w, sink}}, else none; {@code m}, {@code w}, {@code sink} override the
     * hint's (or the defaults) when not null.
     */
    public static Sealed resolve(String flag, Integer m, Integer w, Integer sink, JsonNode header) {
        String layers = flag;
        JsonNode hint = header == null ? null : header.path("provenance").get("o1_attn");
        if (layers == null && hint != null && hint.isObject()) {
            JsonNode l = hint.get("layers");
            if (l != null && l.isTextual()) layers = l.asText();
            else if (l != null && l.isArray() && !l.isEmpty()) {
                StringBuilder b = new StringBuilder();
                for (JsonNode i : l) b.append(b.isEmpty() ? "" : ",").append(i.asInt());
                layers = b.toString();
            }
        }
        if (layers == null || layers.isBlank() || layers.trim().equalsIgnoreCase("off")) return null;
        boolean fromFile = flag == null;
        return new Sealed(layers,
                m != null ? m : fromFile ? hint.path("m").asInt(DEFAULT_LANDMARKS) : DEFAULT_LANDMARKS,
                w != null ? w : fromFile ? hint.path("w").asInt(DEFAULT_WINDOW) : DEFAULT_WINDOW,
                sink != null ? sink : fromFile ? hint.path("sink").asInt(DEFAULT_SINKS) : DEFAULT_SINKS);
    }
}
