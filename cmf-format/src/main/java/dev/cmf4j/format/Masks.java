package dev.cmf4j.format;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The task-masks section (CMF_FORMAT.md §1.6):
 * {@code u32 n_masks | u32 meta_len | meta JSON | blobs}, each blob 8-aligned from the section start.
 * A blob holds, LSB-first with 1 = active and unused tail bits 0: {@code rows x ceil(I/8)} FFN-neuron
 * bits, {@code rows x ceil(H/8)} attention-head bits, {@code ceil(rows/8)} layer gates, and, when the
 * meta says {@code has_expert_fields}, {@code rows x ceil(E/8)} MoE-expert bits. {@code rows} is
 * {@code num_layers}, times {@code num_loops} for looped models (feature LOOP_MASKS, pass-major);
 * I, H and E come from the header's arch.
 */
public record Masks(Meta meta, List<TaskMask> masks) {

    public Masks { masks = List.copyOf(masks); }

    /** The masks meta JSON: the default task and one record per mask. */
    public record Meta(String defaultTask, List<MaskMeta> masks, Boolean hasExpertFields, Map<String, JsonNode> extra) {
        public Meta {
            masks = List.copyOf(masks);
            extra = extra == null ? Map.of() : Map.copyOf(extra);
        }

        public ObjectNode toJson() {
            Json.Out o = new Json.Out().put("default_task", defaultTask);
            ArrayNode a = o.node.putArray("masks");
            for (MaskMeta m : masks) a.add(m.toJson());
            return o.put("has_expert_fields", hasExpertFields).extra(extra).done();
        }
    }

    /**
     * One mask's meta. {@code quality} is {@code {metric, value, baseline_dense, n_samples,
     * dataset_sha256}} or null (unmeasured; never a fake 1.0). {@code blobOff}/{@code blobLen} locate
     * the bits relative to the section start.
     */
    public record MaskMeta(int taskId, String name, String description, Double sparsity, JsonNode quality,
                           String parent, String priority, Boolean hasHotPack, long blobOff, long blobLen,
                           Boolean hasExpertFields, Map<String, JsonNode> extra) {
        public MaskMeta { extra = extra == null ? Map.of() : Map.copyOf(extra); }

        public MaskMeta withBlob(long off, long len) {
            return new MaskMeta(taskId, name, description, sparsity, quality, parent, priority, hasHotPack, off, len,
                    hasExpertFields, extra);
        }

        public ObjectNode toJson() {
            Json.Out o = new Json.Out().put("task_id", taskId).put("name", name).put("description", description)
                    .put("sparsity", sparsity);
            if (quality == null) o.putNull("quality"); else o.put("quality", quality);
            if (parent == null) o.putNull("parent"); else o.put("parent", parent);
            return o.put("priority", priority).put("has_hot_pack", hasHotPack).put("blob_off", blobOff)
                    .put("blob_len", blobLen).put("has_expert_fields", hasExpertFields).extra(extra).done();
        }
    }

    /** Bit counts of one blob, derived from the arch. */
    public record Geometry(int rows, int ffnWidth, int heads, int experts) {
        public long ffnBytes() { return (long) rows * ((ffnWidth + 7) / 8); }
        public long headBytes() { return (long) rows * ((heads + 7) / 8); }
        public long layerBytes() { return (rows + 7) / 8; }
        public long expertBytes() { return (long) rows * ((experts + 7) / 8); }
        public long blobBytes() { return ffnBytes() + headBytes() + layerBytes() + expertBytes(); }
    }

    /** One task mask: its meta and a private copy of its bits. */
    public static final class TaskMask {
        private final MaskMeta meta;
        private final Geometry g;
        private final byte[] bits;

        TaskMask(MaskMeta meta, Geometry g, byte[] bits) {
            this.meta = meta;
            this.g = g;
            this.bits = bits;
        }

        /**
         * A mask to write ({@link CmfWriter#setMasks} checks the blob against the arch's geometry): {@code bits} laid
         * out as §1.6 says (FFN bits, head bits, layer gates, optional expert bits; LSB first, 1 = active).
         */
        public static TaskMask of(MaskMeta meta, byte[] bits) { return new TaskMask(meta, null, bits.clone()); }

        public MaskMeta meta() { return meta; }
        public String name() { return meta.name(); }
        public Geometry geometry() { return g; }
        /** The raw blob (a copy). */
        public byte[] blob() { return bits.clone(); }
        public boolean hasExperts() { return g.experts > 0; }

        /** Whether FFN neuron {@code i} of layer row {@code row} is active. */
        public boolean ffnActive(int row, int i) {
            check(row, i, g.ffnWidth, "ffn neuron");
            return bit((long) row * ((g.ffnWidth + 7) / 8), i);
        }

        /** Whether attention head {@code h} of layer row {@code row} is active. */
        public boolean headActive(int row, int h) {
            check(row, h, g.heads, "head");
            return bit(g.ffnBytes() + (long) row * ((g.heads + 7) / 8), h);
        }

        /** Whether layer row {@code row} runs at all. */
        public boolean layerActive(int row) {
            check(row, 0, 1, "layer");
            return bit(g.ffnBytes() + g.headBytes(), row);
        }

        /** Whether MoE expert {@code e} may be routed to in layer row {@code row} (all true without expert fields). */
        public boolean expertActive(int row, int e) {
            if (g.experts == 0) return true;
            check(row, e, g.experts, "expert");
            return bit(g.ffnBytes() + g.headBytes() + g.layerBytes() + (long) row * ((g.experts + 7) / 8), e);
        }

        private void check(int row, int i, int n, String what) {
            if (row < 0 || row >= g.rows || i < 0 || i >= n) {
                throw new IndexOutOfBoundsException(what + " (" + row + ", " + i + ") outside " + g);
            }
        }

        private boolean bit(long byteBase, long i) { return (bits[(int) (byteBase + (i >>> 3))] >>> (i & 7) & 1) != 0; }
    }

    /** The mask whose meta name is {@code name}, or null. */
    public TaskMask byName(String name) {
        for (TaskMask m : masks) if (m.name().equals(name)) return m;
        return null;
    }

    /** The mask named by {@code default_task}, or null. */
    public TaskMask defaultMask() { return meta.defaultTask() == null ? null : byName(meta.defaultTask()); }

    /** Blob geometry for this arch. */
    static Geometry geometry(ModelArch arch, boolean loopMasks, boolean experts, String label, long offset) {
        if (arch == null || arch.numLayers() == null || arch.intermediateSize() == null || arch.numAttentionHeads() == null) {
            throw new CmfException.Parse(label, offset, "masks need arch.num_layers, arch.intermediate_size and "
                    + "arch.num_attention_heads to size their bit blobs");
        }
        long rows = arch.numLayers();
        if (loopMasks) rows *= arch.numLoops() == null ? 1 : arch.numLoops();
        int e = 0;
        if (experts) {
            if (arch.moe() == null || arch.moe().numExperts() == null) {
                throw new CmfException.Parse(label, offset, "masks have expert fields but arch.moe.num_experts is missing");
            }
            e = arch.moe().numExperts();
        }
        if (rows < 0 || rows > 1 << 20 || arch.intermediateSize() < 0 || arch.numAttentionHeads() < 0 || e < 0) {
            throw new CmfException.Parse(label, offset, "arch sizes out of range for masks");
        }
        return new Geometry((int) rows, arch.intermediateSize(), arch.numAttentionHeads(), e);
    }

    /** Parses and validates the masks section. */
    static Masks parse(MemorySegment sec, ModelArch arch, boolean loopMasks, String label, long base) {
        long len = sec.byteSize();
        if (len < 8) throw new CmfException.Bounds(label, base, "masks section is " + len + " bytes; it needs at least 8");
        long n = sec.get(Envelope.U32, 0) & 0xFFFFFFFFL;
        long metaLen = sec.get(Envelope.U32, 4) & 0xFFFFFFFFL;
        if (metaLen > len - 8) {
            throw new CmfException.Bounds(label, base + 4, "masks meta length " + metaLen + " exceeds the "
                    + (len - 8) + " bytes after the masks header");
        }
        if (metaLen > CmfFile.MAX_JSON) {
            throw new CmfException.Parse(label, base + 4, "masks meta is " + metaLen + " bytes; at most " + CmfFile.MAX_JSON + " accepted");
        }
        byte[] metaBytes = sec.asSlice(8, metaLen).toArray(ValueLayout.JAVA_BYTE);
        ObjectNode root = Json.parseObject(metaBytes, label, base + 8, "masks meta");
        Json.Fields f = new Json.Fields(root, label, base + 8, "masks");
        String def = f.string("default_task");
        ArrayNode arr = f.array("masks");
        Boolean topExperts = f.bool("has_expert_fields");
        List<MaskMeta> metas = new ArrayList<>();
        List<TaskMask> out = new ArrayList<>();
        int count = arr == null ? 0 : arr.size();
        if (count != n) {
            throw new CmfException.Parse(label, base, "masks header says " + n + " masks but the meta lists " + count);
        }
        for (int i = 0; i < count; i++) {
            if (!(arr.get(i) instanceof ObjectNode mo)) {
                throw new CmfException.Parse(label, base + 8, "masks.masks[" + i + "]: expected an object");
            }
            Json.Fields m = new Json.Fields(mo, label, base + 8, "masks.masks[" + i + "]");
            Integer taskId = m.integer("task_id");
            MaskMeta mm = new MaskMeta(taskId == null ? i : taskId, m.string("name"), m.string("description"),
                    m.dbl("sparsity"), m.raw("quality"), m.string("parent"), m.string("priority"), m.bool("has_hot_pack"),
                    orMissing(m, "blob_off"), orMissing(m, "blob_len"), m.bool("has_expert_fields"), m.rest());
            boolean experts = Boolean.TRUE.equals(mm.hasExpertFields() != null ? mm.hasExpertFields() : topExperts);
            Geometry g = geometry(arch, loopMasks, experts, label, base);
            long off = mm.blobOff(), bl = mm.blobLen();
            if (off % 8 != 0 || off < 8 + metaLen || bl < 0 || off > len || bl > len - off) {
                throw new CmfException.Bounds(label, base + 8, "mask '" + mm.name() + "' blob [" + off + ", +" + bl
                        + ") must be 8-aligned and lie after the meta inside the " + len + "-byte masks section");
            }
            if (bl != g.blobBytes()) {
                throw new CmfException.Parse(label, base + off, "mask '" + mm.name() + "' blob is " + bl
                        + " bytes; the arch needs " + g.blobBytes() + " (" + g + ")");
            }
            byte[] bits = sec.asSlice(off, bl).toArray(ValueLayout.JAVA_BYTE);
            String tail = tailBitsProblem(bits, g);
            if (tail != null) throw new CmfException.Parse(label, base + off, "mask '" + mm.name() + "': " + tail);
            metas.add(mm);
            out.add(new TaskMask(mm, g, bits));
        }
        return new Masks(new Meta(def, metas, topExperts, f.rest()), out);
    }

    private static long orMissing(Json.Fields m, String key) {
        Long v = m.longValue(key);
        if (v == null) throw new CmfException.Parse(m.label, m.offset, m.path + "." + key + " is missing");
        return v;
    }

    /** Null when every padding bit past the last valid bit of each row is zero. */
    private static String tailBitsProblem(byte[] b, Geometry g) {
        long at = 0;
        String p;
        if ((p = rowsTail(b, at, g.rows, g.ffnWidth, "ffn")) != null) return p;
        at += g.ffnBytes();
        if ((p = rowsTail(b, at, g.rows, g.heads, "head")) != null) return p;
        at += g.headBytes();
        if ((p = rowsTail(b, at, 1, g.rows, "layer gate")) != null) return p;
        at += g.layerBytes();
        return rowsTail(b, at, g.rows, g.experts, "expert");
    }

    private static String rowsTail(byte[] b, long at, int rows, int width, String what) {
        int rowBytes = (width + 7) / 8;
        if (rowBytes == 0 || width % 8 == 0) return null;
        int mask = 0xFF << (width % 8) & 0xFF;
        for (int r = 0; r < rows; r++) {
            int last = b[(int) (at + (long) r * rowBytes + rowBytes - 1)] & 0xFF;
            if ((last & mask) != 0) return what + " bits of row " + r + " have non-zero padding bits past bit " + width;
        }
        return null;
    }

    /**
     * Encodes a masks section from meta records and their blobs (in order): meta JSON compact, each
     * blob 8-aligned; {@code blob_off}/{@code blob_len} in the meta are recomputed.
     */
    public static byte[] encode(Meta meta, List<byte[]> blobs) {
        if (meta.masks().size() != blobs.size()) throw new IllegalArgumentException("one blob per mask meta");
        List<MaskMeta> ms = new ArrayList<>(meta.masks());
        byte[] json = null;
        long[] offs = new long[ms.size()];
        // blob_off digits change the meta length which moves the blobs: iterate to the fixed point.
        for (int iter = 0; iter < 8; iter++) {
            json = Json.compact(new Meta(meta.defaultTask(), ms, meta.hasExpertFields(), meta.extra()).toJson());
            long at = align8(8 + json.length);
            boolean stable = true;
            for (int i = 0; i < ms.size(); i++) {
                offs[i] = at;
                MaskMeta m = ms.get(i);
                if (m.blobOff() != at || m.blobLen() != blobs.get(i).length) {
                    ms.set(i, m.withBlob(at, blobs.get(i).length));
                    stable = false;
                }
                at = align8(at + blobs.get(i).length);
            }
            if (stable) break;
        }
        long total = ms.isEmpty() ? 8 + json.length : offs[ms.size() - 1] + blobs.getLast().length;
        MemorySegment s = MemorySegment.ofArray(new byte[Math.toIntExact(total)]);
        s.set(Envelope.U32, 0, ms.size());
        s.set(Envelope.U32, 4, json.length);
        MemorySegment.copy(json, 0, s, ValueLayout.JAVA_BYTE, 8, json.length);
        for (int i = 0; i < ms.size(); i++) {
            MemorySegment.copy(blobs.get(i), 0, s, ValueLayout.JAVA_BYTE, offs[i], blobs.get(i).length);
        }
        return s.toArray(ValueLayout.JAVA_BYTE);
    }

    /** This masks section re-encoded (meta and blobs as held). */
    public byte[] encode() {
        List<byte[]> blobs = new ArrayList<>();
        for (TaskMask m : masks) blobs.add(m.bits);
        return encode(meta, blobs);
    }

    private static long align8(long x) { return (x + 7) & ~7L; }
}
