package dev.cmf4j.model.graph;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.backend.KvType;
import dev.cmf4j.backend.cpu.CpuBackend;
import dev.cmf4j.backend.cpu.CpuMatMul;
import dev.cmf4j.convert.HfArch;
import dev.cmf4j.convert.HfConfig;
import dev.cmf4j.convert.SafetensorsReader;
import dev.cmf4j.model.AttentionMemory;
import dev.cmf4j.model.ModelException;
import dev.cmf4j.model.ModelSpec;
import dev.cmf4j.model.SpecBuilder;
import dev.cmf4j.model.TestFiles;
import dev.cmf4j.model.Weights;
import dev.cmf4j.testkit.Fixtures;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code --o1} sealed layers on the qwen3 fixture (2 full-attention layers, GQA 4/2): exact while no key has left the
 * window, chunk-independent once sealed, and a state whose size stays the same from 4k to 64k tokens.
 */
class SealedAttentionTest {

    /** A fixture model from its HF folder with the given memory; {@code maxPositions} raised for long runs. */
    static <T> T withModel(String name, AttentionMemory memory, int maxPositions, java.util.function.Function<Graph, T> body) {
        Path dir = Fixtures.require("models/" + name);
        ObjectNode header = JsonNodeFactory.instance.objectNode();
        ObjectNode arch = (ObjectNode) HfArch.fromConfig(HfConfig.read(dir.resolve("config.json")));
        if (maxPositions > 0) arch.put("max_position_embeddings", maxPositions);
        header.set("arch", arch);
        try (SafetensorsReader r = SafetensorsReader.open(dir.resolve("model.safetensors"))) {
            Weights w = TestFiles.weights(r);
            ModelSpec spec = SpecBuilder.build(header, w);
            return body.apply(new Graph(spec, w, new CpuBackend(new CpuMatMul(), CpuBackend.pool(), null), java.util.List.of(), memory));
        }
    }

    static AttentionMemory o1(int m, int w, int s) {
        return new AttentionMemory(new AttentionMemory.Sealed("all", m, w, s), KvType.F32);
    }

    static int[] ids(int n, int vocab, long seed) {
        Random r = new Random(seed);
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = 3 + r.nextInt(vocab - 3);
        return ids;
    }

    /** Logits of each token fed one at a time after a prompt of {@code prompt} tokens (sealed after it when asked). */
    static float[] decodeLogits(Graph g, int[] ids, int prompt, boolean seal, int chunk) {
        int v = g.vocab(), n = ids.length - prompt;
        State st = g.newState(Math.max(prompt, chunk), ids.length + 1);
        g.forward(st, ids, 0, prompt, null, false, null);
        if (seal) st.seal();
        float[] out = new float[n * v];
        if (chunk > 1) {
            for (int t = 0; t < n; t += chunk) {
                int c = Math.min(chunk, n - t);
                float[] l = new float[c * v];
                g.forward(st, ids, prompt + t, c, l, true, null);
                System.arraycopy(l, 0, out, t * v, c * v);
            }
        } else {
            float[] l = new float[v];
            for (int t = 0; t < n; t++) {
                g.forward(st, ids, prompt + t, 1, l, false, null);
                System.arraycopy(l, 0, out, t * v, v);
            }
        }
        if (seal) assertThat(st.sealed()).as("sealed").isTrue();
        return out;
    }

    static double maxDiff(float[] a, float[] b) {
        double d = 0;
        for (int i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
        return d;
    }

    @Test
    void shorterThanWindowPlusSinksGivesFullAttention() {
        // W 48 + S 4 = 52 > 20 prompt + 24 continuation: every key stays near, so the sealed layers are exact
        int[] ids = ids(44, 1024, 7);
        float[] full = withModel("qwen3", AttentionMemory.EXACT, 0, g -> decodeLogits(g, ids, 20, false, 1));
        float[] sealed = withModel("qwen3", o1(8, 48, 4), 0, g -> decodeLogits(g, ids, 20, true, 1));
        assertThat(maxDiff(full, sealed)).isLessThan(1e-4);
    }

    @Test
    void pastTheWindowTheFarFieldStandsInAndChunksDoNotMatter() {
        // W 8, S 2: most of the 64 positions are far; a sealed chunk of rows gives what the same rows give one at a time
        int[] ids = ids(64, 1024, 8);
        float[] full = withModel("qwen3", AttentionMemory.EXACT, 0, g -> decodeLogits(g, ids, 32, false, 1));
        float[][] sealed = withModel("qwen3", o1(4, 8, 2), 0,
                g -> new float[][] {decodeLogits(g, ids, 32, true, 1), decodeLogits(g, ids, 32, true, 16)});
        double moved = maxDiff(full, sealed[0]);
        System.out.printf("o1 W8 S2 m4 vs full attention: max |d| %.3g, chunked vs one at a time %.3g, max |logit| %.3g%n",
                moved, maxDiff(sealed[0], sealed[1]), maxDiff(full, new float[full.length]));
        // random weights and random ids are the far field's worst case (no clustered keys): it moves, it stays finite
        assertThat(moved).isGreaterThan(1e-4);
        for (float x : sealed[0]) assertThat(Float.isFinite(x)).isTrue();
        assertThat(maxDiff(sealed[0], sealed[1])).as("chunk of 16 vs one at a time").isLessThan(1e-4);
    }

    @Test
    void stateBytesStayTheSameFrom4kTo64kTokens() {
        long[] bytes = withModel("qwen3", o1(32, 128, 4), 70_000, g -> {
            int chunk = 1024;
            State st = g.newState(chunk, 66_000);
            int[] ids = ids(chunk, g.vocab(), 9);
            g.forward(st, ids, 0, chunk, null, false, null);
            assertThat(st.stateBytes()).as("exact while the prompt runs").isEqualTo(-1);
            st.seal();
            long[] at = new long[3];
            while (st.position() < 65_536) {
                g.forward(st, ids, 0, Math.min(chunk, 65_536 - st.position()), null, false, null);
                if (st.position() == 4096) at[0] = st.stateBytes();
                if (st.position() == 16_384) at[1] = st.stateBytes();
            }
            at[2] = st.stateBytes();
            return at;
        });
        System.out.printf("o1 state bytes at 4k/16k/64k: %d %d %d%n", bytes[0], bytes[1], bytes[2]);
        assertThat(bytes[0]).isPositive();
        assertThat(bytes[1]).isEqualTo(bytes[0]);
        assertThat(bytes[2]).isEqualTo(bytes[0]);
        // what the exact cache holds at 4k already: 2 layers × K and V × 4096 positions × 64 floats
        long exact4k = withModel("qwen3", AttentionMemory.EXACT, 0, g -> {
            State st = g.newState(1024, 4096);
            int[] ids = ids(1024, g.vocab(), 9);
            for (int i = 0; i < 4; i++) g.forward(st, ids, 0, 1024, null, false, null);
            return st.heldBytes();
        });
        assertThat(exact4k).isEqualTo(2L * 2 * 4096 * 64 * Float.BYTES);
        assertThat(bytes[0]).isLessThan(exact4k / 4);
    }

    @Test
    void refusesSoftCapsNativelyBoundedFilesAndLayersThatAreNotFullAttention() {
        // the fixtures first: inside assertThatThrownBy a missing one would be the thrown exception, not a skip
        for (String m : List.of("gemma4", "gemma3", "qwen3")) Fixtures.require("models/" + m);
        assertThatThrownBy(() -> withModel("gemma4", o1(32, 128, 4), 0, g -> g))
                .isInstanceOf(ModelException.class).hasMessageContaining("K/V");
        assertThatThrownBy(() -> withModel("gemma3", new AttentionMemory(new AttentionMemory.Sealed("0", 32, 128, 4), KvType.F32), 0, g -> g))
                .isInstanceOf(ModelException.class).hasMessageContaining("not a full-attention layer");
        assertThatThrownBy(() -> withModel("qwen3", new AttentionMemory(new AttentionMemory.Sealed("5", 32, 128, 4), KvType.F32), 0, g -> g))
                .isInstanceOf(ModelException.class).hasMessageContaining("has 2 layers");
        assertThatThrownBy(() -> new AttentionMemory.Sealed("most", 32, 128, 4)).hasMessageContaining("all, deepN or i,j,k");
        assertThatThrownBy(() -> new AttentionMemory.Sealed("all", 2, 128, 4)).hasMessageContaining("at least 4");
    }
}
