package dev.cmf4j.model.graph;

import dev.cmf4j.backend.MatMul;
import dev.cmf4j.backend.cpu.Softmax;
import dev.cmf4j.backend.cpu.VectorMath;
import dev.cmf4j.model.Mixer;
import dev.cmf4j.model.ModelException;

import java.util.Arrays;

/**
 * The bounded anchor {@code swa_sink_v1} (Embryo's {@link Mixer.BoundedAttention}): q/k/v projections, then per query
 * head one softmax over the S sinks of its KV group (scored unrotated) and the window of the last min(t+1, W)
 * positions including its own (scored with the query rotated by its distance to each key; keys are stored
 * unrotated), then o_proj. A sequence's state is a ring of W keys and values per layer: its size never grows.
 *
 * <p>A chunk scores against the ring and the chunk itself (its own rows for the positions it holds); the chunk's
 * keys enter the ring only when the step commits, so a failed step leaves the ring as it was.
 */
final class BoundedAnchorStep implements MixerStep {
    private final Mixer.BoundedAttention spec;
    private final MatMul mm;
    private final Linear q, k, v, o;
    private final Linear.Shared qkv;
    private final float[] sinkK, sinkV;
    /** cos/sin of distance Δ ∈ [0, W) for each rotary pair: [W][rotaryDim/2] (angles in double, as the reference). */
    private final float[] cos, sin;
    private final int heads, kvHeads, hd, window, sinks, half;

    BoundedAnchorStep(Mixer.BoundedAttention a, int hidden, Loader l, MatMul mm) {
        this.spec = a;
        this.mm = mm;
        heads = a.heads(); kvHeads = a.kvHeads(); hd = a.headDim(); window = a.window(); sinks = a.sinks();
        if (heads % kvHeads != 0) throw new ModelException(a.qProj() + ": " + heads + " heads not a multiple of " + kvHeads + " kv heads");
        q = l.linear(a.qProj(), null, a.qDim(), hidden);
        k = l.linear(a.kProj(), null, a.kvDim(), hidden);
        v = l.linear(a.vProj(), null, a.kvDim(), hidden);
        o = l.linear(a.oProj(), null, hidden, a.qDim());
        qkv = new Linear.Shared(q, k, v);
        sinkK = l.vector(a.sinkK(), kvHeads * sinks * hd);
        sinkV = l.vector(a.sinkV(), kvHeads * sinks * hd);
        half = a.rotaryDim() / 2;
        float[][] cs = rotations(a);
        cos = cs[0];
        sin = cs[1];
    }

    /** {cos, sin} of distance d ∈ [0, W) for each rotary pair i: [W][rotaryDim/2], angles in double as the reference's. */
    static float[][] rotations(Mixer.BoundedAttention a) {
        int window = a.window(), half = a.rotaryDim() / 2;
        float[] cos = new float[window * half], sin = new float[window * half];
        for (int d = 0; d < window; d++)
            for (int i = 0; i < half; i++) {
                double angle = d * Math.pow(a.ropeTheta(), -2.0 * i / a.rotaryDim());
                cos[d * half + i] = (float) Math.cos(angle);
                sin[d * half + i] = (float) Math.sin(angle);
            }
        return new float[][] {cos, sin};
    }

    /**
     * One sequence's ring: slot {@code p mod W} holds position p's key and value ([W, kvDim] each), and the rows of
     * the step in flight until it commits.
     */
    static final class Ring {
        final float[] k, v;
        private float[] pendingK, pendingV;
        private int pendingRow, pendingPos, pendingRows;

        Ring(int window, int kvDim) {
            k = new float[window * kvDim];
            v = new float[window * kvDim];
        }
    }

    @Override public Object newState(int maxContext) { return new Ring(window, spec.kvDim()); }

    static final class Scratch {
        final float[] q, k, v, attn, scores;
        /** One KV group's window keys, each turned back by its distance to the query: [W, headDim]. */
        final float[] turned;
        final float[][] projections;

        Scratch(Mixer.BoundedAttention a, int maxRows) {
            q = new float[maxRows * a.qDim()];
            k = new float[maxRows * a.kvDim()];
            v = new float[maxRows * a.kvDim()];
            attn = new float[maxRows * a.qDim()];
            scores = new float[a.sinks() + a.window()];
            turned = new float[a.window() * a.headDim()];
            projections = new float[][] {q, k, v};
        }
    }

    @Override public Object newScratch(int maxChunk, int maxContext) { return new Scratch(spec, maxChunk); }

    @Override public void forward(float[] in, float[] out, Batch batch, Object scratch, int layer) {
        Scratch s = (Scratch) scratch;
        int rows = batch.rows(), kvDim = spec.kvDim(), qDim = spec.qDim(), group = heads / kvHeads;
        qkv.apply(mm, in, rows, s.projections, batch.overlay);
        for (int i = 0; i < batch.size(); i++) {
            Ring ring = (Ring) batch.state(i).mixerState(layer);
            int r0 = batch.start[i], p0 = batch.pos0[i], n = batch.tokens(i);
            for (int t = 0; t < n; t++) {
                int pos = p0 + t, row = r0 + t, first = Math.max(0, pos - window + 1), count = sinks + pos - first + 1;
                for (int g = 0; g < kvHeads; g++) {
                    // the window's keys turned back by their distance, once per KV group: (R(d)·q)·k = q·(R(−d)·k)
                    for (int j = pos; j >= first; j--) {
                        int ko = (j >= p0 ? r0 + (j - p0) : j % window) * kvDim + g * hd;
                        unrotate(j >= p0 ? s.k : ring.k, ko, pos - j, s.turned, (pos - j) * hd);
                    }
                    for (int h = g * group; h < (g + 1) * group; h++) {
                        int qo = row * qDim + h * hd;
                        float[] sc = s.scores;
                        for (int j = 0; j < sinks; j++) sc[j] = VectorMath.dot(s.q, qo, sinkK, (g * sinks + j) * hd, hd) * spec.scale();
                        for (int d = 0; d + sinks < count; d++) sc[sinks + d] = VectorMath.dot(s.q, qo, s.turned, d * hd, hd) * spec.scale();
                        Softmax.apply(sc, 0, count);
                        int ao = row * qDim + h * hd;
                        Arrays.fill(s.attn, ao, ao + hd, 0f);
                        for (int j = 0; j < sinks; j++) VectorMath.axpy(sc[j], sinkV, (g * sinks + j) * hd, s.attn, ao, hd);
                        for (int j = pos; j >= first; j--) {
                            int vo = (j >= p0 ? r0 + (j - p0) : j % window) * kvDim + g * hd;
                            VectorMath.axpy(sc[sinks + pos - j], j >= p0 ? s.v : ring.v, vo, s.attn, ao, hd);
                        }
                    }
                }
            }
            ring.pendingK = s.k;
            ring.pendingV = s.v;
            ring.pendingRow = r0;
            ring.pendingPos = p0;
            ring.pendingRows = n;
        }
        o.apply(mm, s.attn, rows, out, batch.overlay);
    }

    /** out = R(−d)·k over one head: the rotate-half pairs turned back by distance d; dims past the rotary span copied. */
    private void unrotate(float[] k, int ko, int d, float[] out, int oo) {
        int t = d * half;
        for (int i = 0; i < half; i++) {
            float a = k[ko + i], b = k[ko + i + half], c = cos[t + i], sn = sin[t + i];
            out[oo + i] = a * c + b * sn;
            out[oo + i + half] = b * c - a * sn;
        }
        for (int i = 2 * half; i < hd; i++) out[oo + i] = k[ko + i];
    }

    /** The step's last min(n, W) keys and values enter their ring slots. */
    @Override public void commit(Object state) {
        Ring ring = (Ring) state;
        if (ring.pendingK == null) return;
        int kvDim = spec.kvDim(), n = ring.pendingRows;
        for (int t = Math.max(0, n - window); t < n; t++) {
            int slot = (ring.pendingPos + t) % window, src = (ring.pendingRow + t) * kvDim;
            System.arraycopy(ring.pendingK, src, ring.k, slot * kvDim, kvDim);
            System.arraycopy(ring.pendingV, src, ring.v, slot * kvDim, kvDim);
        }
        ring.pendingK = ring.pendingV = null;
    }

    @Override public boolean abandon(Object state) {
        Ring ring = (Ring) state;
        ring.pendingK = ring.pendingV = null;
        return true;
    }

    /** A copy of the ring (small: the window's keys and values); it goes back to the mark, and the caller replays. */
    @Override public Object mark(Object state, int upcoming) {
        Ring ring = (Ring) state;
        return new float[][] {ring.k.clone(), ring.v.clone()};
    }

    @Override public boolean rewindsExactly() { return false; }

    @Override public void rewind(Object state, Object mark, int markPosition, int position) {
        Ring ring = (Ring) state;
        float[][] m = (float[][]) mark;
        System.arraycopy(m[0], 0, ring.k, 0, ring.k.length);
        System.arraycopy(m[1], 0, ring.v, 0, ring.v.length);
        ring.pendingK = ring.pendingV = null;
    }

    @Override public void reset(Object state) {
        Ring ring = (Ring) state;
        Arrays.fill(ring.k, 0f);
        Arrays.fill(ring.v, 0f);
        ring.pendingK = ring.pendingV = null;
    }
}
