package dev.cmf4j.spark;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Reply;
import dev.cmf4j.api.Sampling;
import org.apache.spark.SparkException;
import org.apache.spark.ml.Pipeline;
import org.apache.spark.ml.PipelineModel;
import org.apache.spark.ml.PipelineStage;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** CmfGenerate in Spark local mode on the bundled model: every row equals the library's own generation of it. */
class CmfSparkTest {
    static SparkSession spark;
    static Path file;
    static CmfModel model;   // the reference: the library API in a plain loop, one row at a time
    static final StructType PROMPTS = new StructType().add("id", DataTypes.IntegerType).add("prompt", DataTypes.StringType);
    static final StructType CHATS = new StructType().add("id", DataTypes.IntegerType).add("messages", DataTypes.createArrayType(
            new StructType().add("role", DataTypes.StringType).add("content", DataTypes.StringType)));

    /** The repository's models/default.cmf, found above the working directory. */
    static Path bundledModel() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the working directory").isNotNull();
        return dir.resolve("models/default.cmf");
    }

    @BeforeAll static void start(@TempDir Path tmp) {
        file = bundledModel();
        model = Cmf.open(file, ModelOptions.defaults());
        spark = SparkSession.builder().master("local[2]").appName("cmf4j-spark-test")
                .config("spark.ui.enabled", "false")
                .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.sql.warehouse.dir", tmp.resolve("warehouse").toString())
                .getOrCreate();
    }

    @AfterAll static void stop() {
        if (spark != null) spark.stop();
        if (model != null) model.close();
        ExecutorModels.closeAll();
    }

    /** 1,000 distinct prompts about commands, deterministic. */
    static List<String> prompts(int n) {
        String[] commands = {"ls", "grep", "tar", "sed", "awk", "find", "chmod", "ssh", "curl", "make", "git", "cp", "mv",
                "rm", "cat", "sort", "uniq", "head", "tail", "diff", "gzip", "xargs", "ps", "kill", "mount"};
        String[] forms = {"The %s command", "To use %s,", "%s is used to", "NAME\n       %s - ", "Options of %s:", "Run %s with",
                "The manual of %s says", "Examples of %s", "%s(1)", "How %s works:", "Usage: %s [OPTION]...", "See also %s",
                "%s reads", "%s writes", "The %s utility", "If %s fails,", "%s prints", "Before running %s,", "%s exits with",
                "When %s is given", "A note on %s:", "%s and its options", "Calling %s", "%s -h shows", "The output of %s",
                "%s version", "Why %s", "%s --help", "Environment of %s", "%s: error:", "Bugs in %s", "%s was written",
                "Files used by %s", "%s returns", "With %s you can", "Description of %s", "%s, like", "Unlike %s,",
                "%s copies", "Then %s"};
        List<String> out = new ArrayList<>();
        for (int i = 0; i < n; i++) out.add(forms[i / commands.length % forms.length].formatted(commands[i % commands.length]));
        return out;
    }

    static Dataset<Row> promptFrame(List<String> ps, int partitions) {
        List<Row> rows = new ArrayList<>();
        for (int i = 0; i < ps.size(); i++) rows.add(RowFactory.create(i, ps.get(i)));
        return spark.createDataFrame(rows, PROMPTS).repartition(partitions);
    }

    static List<Row> byId(Dataset<Row> d) { return d.orderBy("id").collectAsList(); }

    @Test void thousandPromptsGiveWhatTheLibrarysGreedyGenerationGivesEachAlone() {
        int n = 4;
        List<String> ps = prompts(1000);
        assertThat(ps).doesNotHaveDuplicates();
        int opened = ExecutorModels.opened();
        CmfGenerate gen = new CmfGenerate().setModelPath(file.toString()).setMaxTokens(n).setIgnoreEos(true)
                .setTokensCol("ids").setContextLength(384);   // a context no other test uses: this test's own model
        List<Row> out = byId(gen.transform(promptFrame(ps, 4)));
        assertThat(out).hasSize(ps.size());
        for (int i = 0; i < ps.size(); i++) {
            int[] prompt = model.tokenize(ps.get(i));
            Reply ref = model.generate(prompt, Sampling.greedy().withMaxTokens(n).withIgnoreEos(true), null);
            Row r = out.get(i);
            assertThat(r.<String>getAs("prompt")).isEqualTo(ps.get(i));
            assertThat(r.<Integer>getList(r.fieldIndex("ids"))).as("row %d: %s", i, ps.get(i))
                    .containsExactly(Arrays.stream(ref.tokens()).boxed().toArray(Integer[]::new));
            assertThat(r.<String>getAs("completion")).isEqualTo(ref.text());
            assertThat(r.<String>getAs("finish_reason")).isEqualTo("length");
            assertThat(r.<Integer>getAs("prompt_tokens")).isEqualTo(prompt.length);
            assertThat(r.<Integer>getAs("completion_tokens")).isEqualTo(n);
        }
        // a second job over the same settings reuses the executor's model: one open for both, four partitions, two tasks at once
        assertThat(gen.transform(promptFrame(ps.subList(0, 20), 2)).count()).isEqualTo(20);
        assertThat(ExecutorModels.opened() - opened).isEqualTo(1);
    }

    @Test void chatMessagesAndChatPromptsGiveTheLibrarysChatReplies() {
        Sampling s = Sampling.greedy().withMaxTokens(16);
        String[] asks = {"What does tar do?", "How do I list files?", "What is grep?", "How do I copy a directory?"};
        List<Row> rows = new ArrayList<>();
        List<List<Message>> conversations = new ArrayList<>();
        for (int i = 0; i < 12; i++) {
            List<Message> c = i % 2 == 0 ? List.of(Message.user(asks[i % 4]))
                    : List.of(Message.system("Be brief."), Message.user(asks[i % 4] + " (" + i + ")"));
            conversations.add(c);
            rows.add(RowFactory.create(i, c.stream().map(m -> RowFactory.create(m.role().name().toLowerCase(), m.content())).toList()));
        }
        List<Row> out = byId(new CmfGenerate().setModelPath(file.toString()).setInputCol("messages").setOutputCol("reply")
                .setMaxTokens(16).setBatchSize(8).transform(spark.createDataFrame(rows, CHATS).repartition(3)));
        boolean stopped = false;
        for (int i = 0; i < rows.size(); i++) {
            Reply ref = model.newChat().complete(conversations.get(i), s);
            Row r = out.get(i);
            assertThat(r.<String>getAs("reply")).as("row %d", i).isEqualTo(ref.text());
            assertThat(r.<String>getAs("finish_reason")).isEqualTo(ref.finish().name().toLowerCase());
            assertThat(r.<Integer>getAs("prompt_tokens")).isEqualTo(ref.promptTokens());
            assertThat(r.<Integer>getAs("completion_tokens")).isEqualTo(ref.tokens().length);
            stopped |= ref.finish() == Reply.Finish.STOP;
        }
        // a string prompt with chat=true is one user message
        List<Row> asText = byId(new CmfGenerate().setModelPath(file.toString()).setChat(true).setMaxTokens(16)
                .transform(promptFrame(List.of(asks), 2)));
        for (int i = 0; i < asks.length; i++)
            assertThat(asText.get(i).<String>getAs("completion")).isEqualTo(model.newChat().complete(List.of(Message.user(asks[i])), s).text());
        assertThat(stopped || out.stream().allMatch(r -> "length".equals(r.getAs("finish_reason")))).isTrue();
    }

    @Test void aPipelineSavedAndLoadedGivesTheSameRows(@TempDir Path tmp) throws Exception {
        CmfGenerate gen = new CmfGenerate().setModelPath(file.toString()).setMaxTokens(4).setBatchSize(16)
                .setOutputCol("text").setTokensCol("ids");
        Dataset<Row> data = promptFrame(prompts(1000).subList(300, 340), 2);
        PipelineModel fitted = new Pipeline().setStages(new PipelineStage[] {gen}).fit(data);
        fitted.write().save(tmp.resolve("pipeline").toString());
        PipelineModel loaded = PipelineModel.load(tmp.resolve("pipeline").toString());
        assertThat(loaded.stages()).hasSize(1);
        CmfGenerate again = (CmfGenerate) loaded.stages()[0];
        assertThat(again.uid()).isEqualTo(gen.uid());
        assertThat(again.explainParams()).isEqualTo(gen.explainParams());
        List<Row> before = byId(fitted.transform(data));
        assertThat(before).hasSize(40);
        assertThat(byId(loaded.transform(data))).isEqualTo(before);

        gen.save(tmp.resolve("stage").toString());
        CmfGenerate alone = CmfGenerate.load(tmp.resolve("stage").toString());
        assertThat(alone.explainParams()).isEqualTo(gen.explainParams());
        assertThat(byId(alone.transform(data))).isEqualTo(before);
    }

    @Test void theSqlFunctionGivesTheLibrarysCompletion() {
        List<String> ps = prompts(1000).subList(500, 512);
        new CmfGenerate().setModelPath(file.toString()).setMaxTokens(8).registerFunction(spark);
        promptFrame(ps, 2).createOrReplaceTempView("prompts");
        List<Row> out = spark.sql("SELECT id, cmf_generate(prompt) AS c FROM prompts ORDER BY id").collectAsList();
        for (int i = 0; i < ps.size(); i++)
            assertThat(out.get(i).<String>getAs("c")).isEqualTo(model.complete(ps.get(i), Sampling.greedy().withMaxTokens(8), null).text());
        assertThat(spark.sql("SELECT cmf_generate(CAST(NULL AS STRING)) AS c").first().isNullAt(0)).isTrue();
    }

    @Test void theJobWritesEachPromptsReply(@TempDir Path tmp) throws Exception {
        List<String> ps = prompts(1000).subList(600, 616);
        List<String> lines = new ArrayList<>(ps);
        lines.add(5, "");   // blank lines are skipped
        Files.write(tmp.resolve("prompts.txt"), lines);
        String out = tmp.resolve("out").toString();
        CmfGenerateJob.run(spark, "--model", file.toString(), "--input", tmp.resolve("prompts.txt").toString(), "--output", out,
                "--max-tokens", "8", "--batch-size", "8");
        List<Row> rows = spark.read().json(out).collectAsList();
        assertThat(rows).hasSize(ps.size());
        for (Row r : rows) {
            String p = r.getAs("prompt");
            assertThat(ps).contains(p);
            assertThat(r.<String>getAs("completion")).isEqualTo(model.complete(p, Sampling.greedy().withMaxTokens(8), null).text());
        }
        assertThatThrownBy(() -> CmfGenerateJob.run(spark, "--model", file.toString(), "--inptu", "x"))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("unknown option --inptu\nusage: CmfGenerateJob --model FILE");
        assertThatThrownBy(() -> CmfGenerateJob.run(spark, "--model", file.toString()))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("--model, --input and --output are needed");
    }

    @Test void badInputIsAClearError() {
        Dataset<Row> data = promptFrame(List.of("The"), 1);
        String missing = file.resolveSibling("no-such-model.cmf").toString();
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(missing).transform(data).collectAsList())
                .isInstanceOf(SparkException.class)
                .hasStackTraceContaining("cmf4j-spark cannot open the model " + missing + ": " + missing + ": no such model file");
        assertThatThrownBy(() -> new CmfGenerate().transform(data))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("modelPath is not set");
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(file.toString()).transform(data.selectExpr("id AS prompt")))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("CmfGenerate: the input column 'prompt' must be a string (a prompt) or array<struct<role: string, "
                        + "content: string>> (chat messages), not int");
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(file.toString()).setInputCol("question").transform(data))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessage("CmfGenerate: the input column 'question' is not in the data (columns: id, prompt)");
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(file.toString()).setOutputCol("id").transform(data))
                .isInstanceOf(IllegalArgumentException.class).hasMessage("CmfGenerate: the output column 'id' exists already");
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(file.toString()).setDevice("tpu").transform(data))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("device must be cpu, cuda, vulkan or auto, got tpu");
        List<Row> bad = List.of(RowFactory.create(0, List.of(RowFactory.create("robot", "hi"))));
        assertThatThrownBy(() -> new CmfGenerate().setModelPath(file.toString()).setInputCol("messages")
                .transform(spark.createDataFrame(bad, CHATS)).collectAsList())
                .isInstanceOf(SparkException.class)
                .hasStackTraceContaining("a message's role must be system, user or assistant, got robot");
    }
}
