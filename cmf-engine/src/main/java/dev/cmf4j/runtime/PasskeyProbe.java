package dev.cmf4j.runtime;

import dev.cmf4j.model.graph.Graph;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Passkey recall: a five-digit key stated once, then filler text until the key is {@code distance} tokens back, then
 * the question; the greedy answer must contain the key. The key and filler run as the prompt (exact attention), then
 * sealed {@code --o1} layers seal and the question streams through them, so the key is recalled from the far field
 * or a sink rather than from the exact prompt pass.
 */
public final class PasskeyProbe {
    private PasskeyProbe() {}

    static final String FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
    static final String QUESTION = "\nWhat is the pass key? The pass key is";

    /** One distance's outcome. */
    public record Result(int distance, int trials, int correct, List<String> answers) {
        public double accuracy() { return trials == 0 ? 0 : (double) correct / trials; }
    }

    /** The prompt of one trial, cut where the question starts: [key + filler ids, question ids]. */
    static int[][] prompt(TextCodec codec, String key, int distance) {
        int[] head = codec.encode("There is a pass key hidden in this text; remember it. The pass key is " + key + ". Remember it. " + key
                + " is the pass key.\n");
        int[] filler = codec.tokenizer().encodeIds(FILLER, false);
        int[] question = codec.tokenizer().encodeIds(QUESTION, false);
        int fill = Math.max(0, distance - question.length);
        int[] ids = java.util.Arrays.copyOf(head, head.length + fill);
        for (int i = 0; i < fill; i++) ids[head.length + i] = filler[i % filler.length];
        return new int[][] {ids, question};
    }

    /** {@code trials} keys (seeded) at each distance; {@code maxContext} bounds each trial's session. */
    public static List<Result> run(Graph graph, TextCodec codec, int[] distances, int trials, long seed) {
        List<Result> out = new ArrayList<>();
        SplittableRandom rnd = new SplittableRandom(seed);
        for (int d : distances) {
            if (d < 1) throw new IllegalArgumentException("distances must be >= 1, got " + d);
            int correct = 0;
            List<String> answers = new ArrayList<>();
            for (int t = 0; t < trials; t++) {
                String key = Integer.toString(10000 + rnd.nextInt(90000));
                int[][] p = prompt(codec, key, d);
                try (Session s = new Session(graph, p[0].length + p[1].length + 16, Math.min(512, p[0].length))) {
                    s.prefill(p[0]);
                    s.state().seal();   // a no-op without sealed layers
                    Generator g = new Generator(s, new Sampler(SamplingParams.GREEDY), codec.eosIds(), List.of());
                    String answer = g.generate(p[1], 8, codec.stream(true), null).text();
                    answers.add(answer);
                    if (answer.contains(key)) correct++;
                }
            }
            out.add(new Result(d, trials, correct, answers));
        }
        return out;
    }
}
