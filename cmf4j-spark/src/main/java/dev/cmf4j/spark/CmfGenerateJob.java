package dev.cmf4j.spark;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

import java.util.ArrayList;
import java.util.List;

/**
 * A ready-made Spark job: generates for every prompt of a file and writes the rows as JSON lines. Submit it as it is
 * (docs/SPARK.md):
 *
 * <pre>
 * spark-submit --class dev.cmf4j.spark.CmfGenerateJob --files /models/qwen3.cmf cmf4j-spark-VERSION-all.jar \
 *     --model qwen3.cmf --input prompts.txt --output answers/ --max-tokens 100 --chat
 * </pre>
 *
 * The input is a text file of one prompt a line, or a {@code .json}/{@code .jsonl}/{@code .parquet} file with a
 * {@code prompt} column (a string or chat messages); the output directory gets the input's columns and
 * {@link CmfGenerate}'s.
 */
public final class CmfGenerateJob {
    private CmfGenerateJob() {}

    public static void main(String[] args) {
        SparkSession spark = SparkSession.builder().appName("cmf4j-generate").getOrCreate();
        try {
            run(spark, args);
        } finally {
            spark.stop();
        }
    }

    /**
     * Reads, generates and writes with {@code spark} (blank lines of a text file are skipped).
     *
     * @throws IllegalArgumentException a missing or unknown option
     */
    public static void run(SparkSession spark, String... args) {
        CmfGenerate gen = new CmfGenerate();
        String input = null, output = null;
        List<String> rest = new ArrayList<>(List.of(args));
        while (!rest.isEmpty()) {
            String option = rest.removeFirst();
            if (option.equals("--chat")) {
                gen.setChat(true);
                continue;
            }
            if (rest.isEmpty()) throw new IllegalArgumentException(option + " needs a value" + USAGE);
            String v = rest.removeFirst();
            switch (option) {
                case "--model" -> gen.setModelPath(v);
                case "--input" -> input = v;
                case "--output" -> output = v;
                case "--max-tokens" -> gen.setMaxTokens(Integer.parseInt(v));
                case "--batch-size" -> gen.setBatchSize(Integer.parseInt(v));
                case "--device" -> gen.setDevice(v);
                case "--temperature" -> gen.setGreedy(false).setTemperature(Double.parseDouble(v));
                case "--seed" -> gen.setSeed(Long.parseLong(v));
                default -> throw new IllegalArgumentException("unknown option " + option + USAGE);
            }
        }
        if (input == null || output == null || !gen.isDefined(gen.modelPath()))
            throw new IllegalArgumentException("--model, --input and --output are needed" + USAGE);
        Dataset<Row> prompts = input.endsWith(".parquet") ? spark.read().parquet(input)
                : input.endsWith(".json") || input.endsWith(".jsonl") ? spark.read().json(input)
                : spark.read().text(input).withColumnRenamed("value", "prompt").filter("trim(prompt) != ''");
        gen.transform(prompts).write().json(output);
    }

    private static final String USAGE = "\nusage: CmfGenerateJob --model FILE --input FILE --output DIR [--max-tokens N] [--chat]"
            + " [--batch-size N] [--device cpu|cuda|auto] [--temperature T] [--seed S]";
}
