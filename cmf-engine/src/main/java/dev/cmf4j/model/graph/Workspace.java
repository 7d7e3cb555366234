package dev.cmf4j.model.graph;

/**
 * The scratch of one forward step of up to {@link #maxRows()} rows (residual stream, normed input, each layer's
 * intermediate buffers), apart from any sequence's state: one workspace serves every sequence a driver batches,
 * and a step's memory grows with its rows, not with the number of sequences. Made by
 * {@link Graph#newWorkspace(int, int)}; used by one thread at a time.
 */
public final class Workspace {
    final Graph graph;
    final int maxRows;
    final Object[] mixerScratch, ffnScratch;
    final float[] x, h, m, pli, pliTmp, pliTmp2;
    /** The hierarchical head's buffers, or null for a flat head. */
    final HierarchicalHead.Scratch headScratch;
    /** Every row's token id (the batch's spans flattened). */
    final int[] ids;
    /** x, h and m by {@link dev.cmf4j.model.Plan.Slot} ordinal. */
    final float[][] slots;

    // the step being run, set by begin: what the CPU plan's ops read besides the buffers
    Batch batch;
    int rows;
    /** Receives the logit rows the batch asks for. */
    float[] logitsOut;
    Graph.HiddenObserver observer;
    /** Rows of x the current layer's task masks keep out of it (RowOverlay.skipRows). */
    int kept;
    /** An MTP head's step: the model's hidden rows [rows, hidden] from {@link #hiddenIn}[{@link #hiddenInOff}]; else null. */
    float[] hiddenIn;
    int hiddenInOff;
    /** An MTP head's concatenated input rows [rows, 2·hidden], or null on other graphs. */
    final float[] mtpCat;

    Workspace(Graph graph, int maxRows, int maxContext) {
        this.graph = graph;
        this.maxRows = maxRows;
        int n = graph.numLayers(), hidden = graph.hidden();
        mixerScratch = new Object[n];
        ffnScratch = new Object[n];
        ids = new int[maxRows];
        // on a device graph the CPU steps never run: none of their scratch (hundreds of MB for big chunks)
        boolean cpu = graph.device() == null;
        for (int l = 0; cpu && l < n; l++) {
            mixerScratch[l] = graph.mixer(l).newScratch(maxRows, maxContext);
            ffnScratch[l] = graph.ffn(l).newScratch(maxRows);
        }
        headScratch = cpu && graph.clusterHead() != null ? graph.clusterHead().newScratch(maxRows) : null;
        x = cpu ? new float[maxRows * hidden] : null;
        h = cpu ? new float[maxRows * hidden] : null;
        m = cpu ? new float[maxRows * hidden] : null;
        slots = new float[][] {x, h, m};
        int pliWidth = graph.perLayerWidth();
        pli = pliWidth == 0 || !cpu ? null : new float[maxRows * pliWidth];
        pliTmp = pliWidth == 0 || !cpu ? null : new float[maxRows * pliWidth];
        int pliDim = graph.perLayerDim();
        pliTmp2 = pliDim == 0 || !cpu ? null : new float[maxRows * Math.max(pliDim, hidden)];
        mtpCat = cpu && graph.plan().ops().getFirst() instanceof dev.cmf4j.model.Plan.MtpInput ? new float[maxRows * 2 * hidden] : null;
    }

    /** Sets up a CPU step of {@code batch}'s rows (their ids flattened into {@link #ids}). */
    void begin(Batch batch, float[] logits, Graph.HiddenObserver observer) {
        this.batch = batch;
        this.rows = batch.rows();
        this.logitsOut = logits;
        this.observer = observer;
        this.kept = 0;
        for (int i = 0, r = 0; i < batch.size(); i++) {
            Batch.Span s = batch.span(i);
            System.arraycopy(s.ids(), s.off(), ids, r, s.tokens());
            r += s.tokens();
        }
    }

    /** Lets go of the step's batch, logits and observer. */
    void end() {
        batch = null;
        logitsOut = null;
        observer = null;
    }

    private float[] logits = new float[0];

    /** A logits buffer of at least {@code n} floats, kept for the next step (greedy steps reduce it to ids). */
    float[] logits(int n) {
        if (logits.length < n) logits = new float[n];
        return logits;
    }

    private float[] hiddenRows = new float[0], mtpRows = new float[0];

    /** A buffer of at least {@code n} floats for an MTP head's input rows made for a device, kept for the next step. */
    float[] mtpRows(int n) {
        if (mtpRows.length < n) mtpRows = new float[n];
        return mtpRows;
    }

    /** A buffer of at least {@code n} floats for a device step's last-layer rows, kept for the next step. */
    float[] hiddenRows(int n) {
        if (hiddenRows.length < n) hiddenRows = new float[n];
        return hiddenRows;
    }

    /** The most rows one step may hold. */
    public int maxRows() { return maxRows; }

    Object mixerScratch(int layer) { return mixerScratch[layer]; }
}
