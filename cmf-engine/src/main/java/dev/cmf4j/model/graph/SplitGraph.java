package dev.cmf4j.model.graph;

/**
 * A model split over several devices (issue 26), run one sequence at a time: {@link TensorParallelGraph} (each layer's
 * heads, MLP rows and vocabulary cut over the ranks, all-reduces between them) or {@link LayerSplitGraph} (a pipeline of
 * contiguous layer ranges, the last layer's rows handed from one to the next).
 */
public sealed interface SplitGraph extends AutoCloseable permits TensorParallelGraph, LayerSplitGraph {
    /** One sequence's state on every part. */
    interface Sequence {
        /** Tokens the sequence has taken. */
        int position();
    }

    /** {@code tensor} or {@code layers}, as {@code --split} names it. */
    String kind();

    /** The devices (ranks, stages) the model is split over. */
    int parts();

    /** The whole vocabulary (a step's logit rows are this wide). */
    int vocab();

    /** Part {@code r}'s graph. */
    Graph part(int r);

    Sequence newSequence(int maxChunk, int maxContext);

    /**
     * A step of {@code tokens} ids from {@code off}: {@code logits} receives [tokens, vocab] rows when {@code allLogits},
     * else the last token's (null: none). A step that fails on any part leaves the sequence unusable.
     */
    void forward(Sequence seq, int[] ids, int off, int tokens, float[] logits, boolean allLogits);

    @Override void close();
}
