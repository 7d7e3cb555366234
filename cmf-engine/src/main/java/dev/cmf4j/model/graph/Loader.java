package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.format.quant.Dequantizers;
import dev.cmf4j.model.LowRankAdapter;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.Norm;
import dev.cmf4j.model.NormStyle;
import dev.cmf4j.model.Tensor;
import dev.cmf4j.model.Weights;

/**
 * Resolves tensor names of a spec into what the steps use: matrices viewed in place, and small vectors
 * (norm weights, biases, sinks, scalars) decoded once into float arrays. Every shape is checked here,
 * so a malformed file fails when the graph is built, naming the tensor, not deep inside a forward pass.
 */
final class Loader {
    private final Weights weights;
    private final java.util.Map<String, Matrix> whole = new java.util.HashMap<>();
    /** The file's skills (slot i + 1 is skills.get(i)) and the un-merged adapters (slot i + 1 likewise). */
    final java.util.List<String> skills;
    final java.util.List<LowRankAdapter> adapters;
    /** Skill tensors and adapter targets ("adapter:name") some product took up; the rest cannot be switched. */
    final java.util.Set<String> used = new java.util.HashSet<>();
    /** Skill id → why it cannot run (the first problem found). */
    final java.util.Map<String, String> skillProblems = new java.util.LinkedHashMap<>();

    Loader(Weights weights) { this(weights, java.util.List.of()); }

    Loader(Weights weights, java.util.List<LowRankAdapter> adapters) {
        this.weights = weights;
        this.skills = weights.skillIds();
        this.adapters = java.util.List.copyOf(adapters);
    }

    /** The whole tensor as a [rows, cols] matrix, its payload checked once. */
    Matrix whole(Tensor t) {
        return whole.computeIfAbsent(t.name(), n -> {
            try {
                return Matrix.of(n, t.dtype(), t.data(), t.rows(), Math.toIntExact(t.cols()));
            } catch (IllegalArgumentException | UnsupportedOperationException e) {
                throw new ModelException(e.getMessage(), e);
            }
        });
    }

    Tensor tensor(String name) {
        try {
            return weights.get(name);
        } catch (ModelException e) {
            throw new ModelException(e.getMessage() + " (needed by the model's architecture)");
        }
    }

    /** The token embedding table [vocab, hidden]; checks its shape. */
    Tensor embedding(String name, int hidden) {
        Tensor t = tensor(name);
        if (t.rank() != 2 || t.cols() != hidden)
            throw new ModelException("embedding '" + name + "' has shape " + java.util.Arrays.toString(t.shape())
                    + ", expected [vocab, " + hidden + "]");
        return t;
    }

    /** Gemma4's per-layer token table [vocab, layers·dim]; checks its width. */
    Matrix perLayerTable(dev.cmf4j.model.ModelSpec.PerLayerEmbedding ple, int layers) {
        Tensor t = tensor(ple.table());
        if (t.cols() != (long) layers * ple.dim())
            throw new ModelException("per-layer table '" + ple.table() + "' has width " + t.cols() + ", expected "
                    + layers + "×" + ple.dim());
        return whole(t);
    }

    /** A [out, in] matrix; checks its shape. */
    Matrix matrix(String name, int out, int in) {
        Tensor t = tensor(name);
        if (t.rank() < 2 || t.cols() != in || t.rows() != out)
            throw new ModelException("tensor '" + name + "' has shape " + java.util.Arrays.toString(t.shape())
                    + ", expected [" + out + ", " + in + "]");
        return whole(t);
    }

    /** A matrix whose row count is read from the file ([rows, in]). */
    Matrix matrixRows(String name, int in) {
        Tensor t = tensor(name);
        if (t.rank() < 2 || t.cols() != in)
            throw new ModelException("tensor '" + name + "' has shape " + java.util.Arrays.toString(t.shape())
                    + ", expected [*, " + in + "]");
        return whole(t);
    }

    /**
     * Expert {@code e}'s block of a 3-D tensor [experts, rows, cols] (or a per-expert 2-D tensor when not
     * fused), as a matrix with {@code outDim} outputs and {@code inDim} inputs.
     */
    Matrix expert(String name, boolean fused, int e, int experts, int outDim, int inDim, boolean inputMajor) {
        Tensor t = tensor(name);
        int rows = inputMajor ? inDim : outDim, cols = inputMajor ? outDim : inDim;
        if (fused) {
            if (t.rank() != 3 || t.dim(0) != experts || t.dim(1) != rows || t.dim(2) != cols)
                throw new ModelException("tensor '" + name + "' has shape " + java.util.Arrays.toString(t.shape())
                        + ", expected [" + experts + ", " + rows + ", " + cols + "]");
            return whole(t).slice((long) e * rows, rows, inputMajor);
        }
        if (t.rank() != 2 || t.dim(0) != rows || t.dim(1) != cols)
            throw new ModelException("tensor '" + name + "' has shape " + java.util.Arrays.toString(t.shape())
                    + ", expected [" + rows + ", " + cols + "]");
        return whole(t).slice(0, rows, inputMajor);
    }

    /** A whole tensor decoded to float32, checked to hold {@code n} elements. */
    float[] vector(String name, int n) {
        Tensor t = tensor(name);
        if (t.size() != n)
            throw new ModelException("tensor '" + name + "' has " + t.size() + " elements, expected " + n);
        return decodeAll(t);
    }

    /** Row {@code row} of a [rows, n] tensor (e.g. one expert's bias), decoded. */
    float[] row(String name, int row, int rows, int n) {
        Tensor t = tensor(name);
        if (t.size() != (long) rows * n)
            throw new ModelException("tensor '" + name + "' has " + t.size() + " elements, expected " + rows + "×" + n);
        float[] out = new float[n];
        whole(t).decodeRow(row, out, 0);
        return out;
    }

    float[] optionalVector(String name, int n) { return name == null ? null : vector(name, n); }

    Linear linear(String w, String bias, int out, int in) {
        return overlaid(w, matrix(w, out, in), bias, bias == null ? null : vector(bias, out));
    }

    /** A product over a resolved backbone matrix, with every skill's replacement and every adapter's delta for it. */
    Linear overlaid(String wName, Matrix m, String biasName, float[] b) {
        Matrix[] sw = skillMatrices(wName);
        float[][] sb = biasName == null ? null : skillVectors(biasName, m.outDim());
        LowRankAdapter.Delta[] d = deltas(wName, m.outDim(), m.inDim());
        if (sw == null && sb == null && d == null) return new Linear(m, b);
        int n = skills.size() + 1;
        return new Linear(m, b, sw != null ? sw : new Matrix[n], sb != null ? sb : new float[n][], d);
    }

    /** By skill slot, each skill's replacement of matrix {@code name} (same shape as the backbone's), or null when none replaces it. */
    Matrix[] skillMatrices(String name) {
        Matrix[] out = null;
        for (int i = 0; i < skills.size(); i++) {
            Tensor t = skillTensor(i, name);
            if (t == null) continue;
            try {
                Matrix m = whole(t);
                if (out == null) out = new Matrix[skills.size() + 1];
                out[i + 1] = m;
            } catch (ModelException e) {
                skillProblems.putIfAbsent(skills.get(i), e.getMessage());
            }
        }
        return out;
    }

    /** By skill slot, each skill's replacement of vector {@code name} (n elements), decoded, or null when none replaces it. */
    float[][] skillVectors(String name, int n) {
        float[][] out = null;
        for (int i = 0; i < skills.size(); i++) {
            Tensor t = skillTensor(i, name);
            if (t == null) continue;
            try {
                if (out == null) out = new float[skills.size() + 1][];
                out[i + 1] = decodeAll(t);
            } catch (ModelException e) {
                skillProblems.putIfAbsent(skills.get(i), e.getMessage());
            }
        }
        return out;
    }

    /** Skill i's replacement of {@code name}, marked used; null (and a problem noted) when absent or shaped otherwise. */
    private Tensor skillTensor(int i, String name) {
        String sn = "skill." + skills.get(i) + "." + name;
        Tensor t = weights.find(sn);
        if (t == null) return null;
        used.add(sn);
        Tensor base = weights.find(name);
        if (base != null && !java.util.Arrays.equals(t.shape(), base.shape())) {
            skillProblems.putIfAbsent(skills.get(i), "tensor '" + sn + "' has shape " + java.util.Arrays.toString(t.shape())
                    + ", the backbone's '" + name + "' " + java.util.Arrays.toString(base.shape()));
            return null;
        }
        return t;
    }

    /** By adapter slot, each adapter's delta for weight {@code name} [out, in], or null when no adapter targets it. */
    LowRankAdapter.Delta[] deltas(String name, int out, int in) {
        LowRankAdapter.Delta[] ds = null;
        for (int i = 0; i < adapters.size(); i++) {
            LowRankAdapter a = adapters.get(i);
            LowRankAdapter.Delta d = a.deltas().get(name);
            if (d == null) continue;
            if (d.out() != out || d.in() != in)
                throw new ModelException("adapter '" + a.name() + "' has a delta of [" + d.out() + ", " + d.in() + "] for '"
                        + name + "', which is [" + out + ", " + in + "]");
            used.add(a.name() + ":" + name);
            if (ds == null) ds = new LowRankAdapter.Delta[adapters.size() + 1];
            ds[i + 1] = d;
        }
        return ds;
    }

    /**
     * Notes, per skill, a replacement tensor no product took up (a norm, an expert, a clustered head...: the graph
     * cannot switch it per row, so the skill would run wrong); fails on an adapter target likewise.
     */
    void checkOverlaysUsed() {
        for (String n : weights.names()) {
            if (!n.startsWith("skill.") || used.contains(n)) continue;
            String id = null;
            for (String s : skills) if (n.startsWith("skill." + s + ".") && (id == null || s.length() > id.length())) id = s;
            if (id == null) continue;   // a tensor of no registered skill is never read
            skillProblems.putIfAbsent(id, "it replaces '" + n.substring(("skill." + id + ".").length())
                    + "', which cannot be switched per row (weight products, their biases, the embedding and a flat"
                    + " head can)");
        }
        for (LowRankAdapter a : adapters)
            for (String target : a.deltas().keySet())
                if (!used.contains(a.name() + ":" + target))
                    throw new ModelException("adapter '" + a.name() + "' targets '" + target + "', which is not a weight"
                            + " product this model runs (attention, MLP and router projections take adapters)");
    }

    /** A norm's weight, or null for an unscaled norm; checks the width. */
    float[] norm(Norm n) {
        if (n == null || n.weight() == null) return null;
        return vector(n.weight(), n.dim());
    }

    /** A norm resolved for the operators (its weight decoded), or null when there is none. */
    NormOp normOp(Norm n) {
        return n == null ? null : new NormOp(norm(n), n.style() == NormStyle.OFFSET, n.eps(), n.dim());
    }

    static float[] decodeAll(Tensor t) {
        try {
            return Dequantizers.of(t.dtype()).decoder(t.data(), t.shape()).all();
        } catch (RuntimeException e) {
            throw new ModelException("tensor '" + t.name() + "': " + e.getMessage(), e);
        }
    }
}
