package dev.cmf4j.model.graph;

import dev.cmf4j.backend.Matrix;
import dev.cmf4j.backend.NormOp;
import dev.cmf4j.format.quant.Dequantizers;
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

    Loader(Weights weights) { this.weights = weights; }

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
        return new Linear(matrix(w, out, in), bias == null ? null : vector(bias, out));
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
