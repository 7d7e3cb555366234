package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Batch;
import dev.cmf4j.model.graph.Graph;
import dev.cmf4j.model.graph.Workspace;

/**
 * Runs several sessions' tokens as one forward step: decode tokens of some and prompt chunks of others in one
 * {@link Batch}, so every weight is read once per step for all of them. The driver owns the step's
 * {@link Workspace} (sized by {@code maxRows}, whatever the number of sessions); the sessions keep their own state
 * and history. One thread drives it; a scheduler decides what each step holds.
 */
public final class BatchDriver {
    private final Graph graph;
    private final Workspace ws;
    private final Batch batch = new Batch();
    private final int maxRows;
    private float[] logits = new float[0];
    private int[] picks = new int[0];

    /**
     * @param maxRows    the most token rows one step may hold (prompt chunks are split to fit)
     * @param maxContext the longest context a session may reach (sizes the first attention buffers only)
     */
    public BatchDriver(Graph graph, int maxRows, int maxContext) {
        this.graph = graph;
        this.maxRows = maxRows;
        this.ws = graph.newWorkspace(maxRows, maxContext);
    }

    public int maxRows() { return maxRows; }

    /**
     * One step: session i consumes all of {@code ids[i]} (at least one id each; together at most
     * {@link #maxRows()}). Returns the logits of each session's last id, row i for session i ([n, vocab], a view
     * valid until the next step). Every input is checked first: on a bad one nothing runs and no session moves.
     */
    public float[] step(Session[] sessions, int[][] ids) { return step(sessions, ids, null); }

    /**
     * As {@link #step(Session[], int[][])}, session i giving the logits of every one of its ids when {@code all[i]}
     * (speculative decoding's verification rows): the rows in session order, each session's [ids.length or 1, vocab].
     */
    public float[] step(Session[] sessions, int[][] ids, boolean[] all) {
        prepare(sessions, ids, all);
        int need = batch.logitRows() * graph.vocab();
        if (logits.length < need) logits = new float[need];
        graph.forward(batch, ws, logits, hiddenRows(sessions));
        for (int i = 0; i < sessions.length; i++) sessions[i].consumed(ids[i], 0, ids[i].length);
        return logits;
    }

    /**
     * An observer handing each span's last-layer rows to its session's {@link Session#hiddenRows} (span i is session
     * i's, from its position before the step), or null when no session wants them.
     */
    private Graph.HiddenObserver hiddenRows(Session[] sessions) {
        boolean any = false;
        for (Session s : sessions) any |= s.hiddenRows() != null;
        if (!any) return null;
        int[] from = new int[sessions.length];
        for (int i = 0; i < sessions.length; i++) from[i] = sessions[i].position();
        return graph.lastLayer((x, tokens, hidden) -> {
            for (int i = 0, r = 0; i < sessions.length; i++) {
                int n = batch.span(i).tokens();
                Session.HiddenRows sink = sessions[i].hiddenRows();
                if (sink != null) sink.accept(from[i], x, r * hidden, n, hidden);
                r += n;
            }
        });
    }

    /** Checks a step's sessions and ids and fills the batch (each span wanting its last logits, or all with {@code all[i]}). */
    private void prepare(Session[] sessions, int[][] ids, boolean[] all) {
        if (sessions.length != ids.length) throw new IllegalArgumentException(sessions.length + " sessions, " + ids.length + " id lists");
        batch.clear();
        for (int i = 0; i < sessions.length; i++) {
            if (sessions[i].graph() != graph) throw new IllegalArgumentException("session " + i + " runs another model");
            sessions[i].check(ids[i]);
            batch.add(sessions[i].state(), ids[i], 0, ids[i].length, all != null && all[i] ? Batch.Logits.ALL : Batch.Logits.LAST);
        }
        if (batch.rows() > maxRows)
            throw new IllegalArgumentException("a step of " + batch.rows() + " rows exceeds this driver's " + maxRows);
    }

    /**
     * As {@link #step}, each session's next token picked greedily (the argmax of its last logits; on a device the pick
     * runs there and no logits come back). Returns the picks, entry i for session i (a view valid until the next step).
     */
    public int[] stepGreedy(Session[] sessions, int[][] ids) {
        prepare(sessions, ids, null);
        if (picks.length < sessions.length) picks = new int[sessions.length];
        graph.forwardArgmax(batch, ws, picks, hiddenRows(sessions));   // (an MTP head's rows come back with the ids)
        for (int i = 0; i < sessions.length; i++) sessions[i].consumed(ids[i], 0, ids[i].length);
        return picks;
    }

    /**
     * Prefills whole prompts of several sessions, every step filled with up to {@link #maxRows()} rows of chunks
     * taken from the sessions in turn (no session's chunk over {@code chunk} tokens). Returns the logits of each
     * prompt's last token, row i for session i (a new array).
     */
    public float[] prefill(Session[] sessions, int[][] prompts, int chunk) {
        if (sessions.length != prompts.length) throw new IllegalArgumentException(sessions.length + " sessions, " + prompts.length + " prompts");
        if (chunk < 1) throw new IllegalArgumentException("chunk must be >= 1");
        for (int i = 0; i < sessions.length; i++) sessions[i].check(prompts[i]);
        int vocab = graph.vocab();
        float[] last = new float[sessions.length * vocab];
        int[] fed = new int[sessions.length];
        int done = 0;
        while (done < sessions.length) {
            batch.clear();
            int[] member = new int[sessions.length];
            int members = 0, rows = 0;
            for (int i = 0; i < sessions.length && rows < maxRows; i++) {
                int left = prompts[i].length - fed[i];
                if (left == 0) continue;
                int n = Math.min(Math.min(chunk, left), maxRows - rows);
                if (graph.device() != null) n = Math.min(n, sessions[i].state().maxChunk());   // a device takes its chunk
                boolean end = n == left;
                batch.add(sessions[i].state(), prompts[i], fed[i], n, end ? Batch.Logits.LAST : Batch.Logits.NONE);
                member[members++] = i;
                rows += n;
            }
            int need = Math.max(1, batch.logitRows()) * vocab;
            if (logits.length < need) logits = new float[need];
            Session[] stepSessions = new Session[members];
            for (int k = 0; k < members; k++) stepSessions[k] = sessions[member[k]];
            graph.forward(batch, ws, batch.logitRows() == 0 ? null : logits, hiddenRows(stepSessions));
            for (int k = 0, row = 0; k < members; k++) {
                int i = member[k];
                Batch.Span s = batch.span(k);
                sessions[i].consumed(prompts[i], fed[i], s.tokens());
                fed[i] += s.tokens();
                if (s.logits() == Batch.Logits.LAST) {
                    System.arraycopy(logits, row * vocab, last, i * vocab, vocab);
                    row++;
                    done++;
                }
            }
        }
        return last;
    }
}
