package dev.cmf4j.spark;

import org.apache.spark.ml.Transformer;
import org.apache.spark.ml.param.BooleanParam;
import org.apache.spark.ml.param.DoubleParam;
import org.apache.spark.ml.param.IntParam;
import org.apache.spark.ml.param.LongParam;
import org.apache.spark.ml.param.Param;
import org.apache.spark.ml.param.ParamMap;
import org.apache.spark.ml.util.DefaultParamsReader;
import org.apache.spark.ml.util.DefaultParamsWritable;
import org.apache.spark.ml.util.MLReader;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

import java.util.Arrays;
import java.util.UUID;

/**
 * A Spark ML stage that generates text for every row with a cmf4j model: the input column holds a prompt (a string)
 * or a conversation (an array of {@code struct<role: string, content: string>}); the output columns get the reply's
 * text, its finish reason ({@code stop} or {@code length}) and its prompt and completion token counts (and, when
 * {@code tokensCol} is set, the generated ids). Each executor opens the model once ({@link ExecutorModels}) and
 * generates {@code batchSize} rows of a partition at a time, decoded together by the model's scheduler.
 *
 * <pre>{@code
 * Dataset<Row> out = new CmfGenerate().setModelPath("/models/qwen3.cmf").setInputCol("question")
 *         .setOutputCol("answer").setMaxTokens(200).transform(questions);
 * }</pre>
 *
 * Saved and loaded as a pipeline stage ({@code save}, {@link #load}, {@code PipelineModel.load}).
 */
public final class CmfGenerate extends Transformer implements DefaultParamsWritable {
    private final String uid;

    private final Param<String> modelPath;
    private final Param<String> inputCol;
    private final Param<String> outputCol;
    private final Param<String> finishReasonCol;
    private final Param<String> promptTokensCol;
    private final Param<String> completionTokensCol;
    private final Param<String> tokensCol;
    private final IntParam maxTokens;
    private final BooleanParam greedy;
    private final DoubleParam temperature;
    private final IntParam topK;
    private final DoubleParam topP;
    private final LongParam seed;
    private final BooleanParam ignoreEos;
    private final BooleanParam chat;
    private final Param<String> skill;
    private final Param<String> device;
    private final IntParam threads;
    private final IntParam contextLength;
    private final IntParam batchSize;

    public CmfGenerate() { this("cmfGenerate_" + UUID.randomUUID().toString().replace("-", "").substring(0, 12)); }

    /** The constructor {@code load} and {@code copy} use. */
    public CmfGenerate(String uid) {
        this.uid = uid;
        modelPath = new Param<>(uid, "modelPath", "the CMF file: a path every executor can read, the name of a file shipped with --files, or hf://ORG/REPO");
        inputCol = new Param<>(uid, "inputCol", "the prompt column: a string, or an array of struct<role: string, content: string> chat messages");
        outputCol = new Param<>(uid, "outputCol", "the generated text's column");
        finishReasonCol = new Param<>(uid, "finishReasonCol", "why each reply ended: stop or length");
        promptTokensCol = new Param<>(uid, "promptTokensCol", "the prompt's length in tokens");
        completionTokensCol = new Param<>(uid, "completionTokensCol", "tokens generated");
        tokensCol = new Param<>(uid, "tokensCol", "the generated ids as array<int>; empty: no such column");
        maxTokens = new IntParam(uid, "maxTokens", "the most tokens generated per row; 0 = what the context leaves");
        greedy = new BooleanParam(uid, "greedy", "always the most probable token (the same prompt gives the same reply); false samples with temperature, topK, topP");
        temperature = new DoubleParam(uid, "temperature", "divides the logits (when not greedy)");
        topK = new IntParam(uid, "topK", "keep the k most probable tokens; 0 = off (when not greedy)");
        topP = new DoubleParam(uid, "topP", "keep the smallest set whose probability reaches p; 1 = off (when not greedy)");
        seed = new LongParam(uid, "seed", "the seed every row is sampled with; -1 = a fresh one per row");
        ignoreEos = new BooleanParam(uid, "ignoreEos", "generate exactly maxTokens tokens past the model's end-of-sequence ids, as cmf generate does");
        chat = new BooleanParam(uid, "chat", "send a string prompt as one user message through the chat template");
        skill = new Param<>(uid, "skill", "the file's skill every row runs with; empty: the backbone");
        device = new Param<>(uid, "device", "cpu, cuda, vulkan or auto (the executor's GPU when it has one)");
        threads = new IntParam(uid, "threads", "CPU threads of the executor's model; 0 = one per processor");
        contextLength = new IntParam(uid, "contextLength", "positions one row may hold, prompt and reply; 0 = min(4096, the model's)");
        batchSize = new IntParam(uid, "batchSize", "rows of a partition generated at once, and conversations the executor's model decodes in one step");
        setDefault(inputCol, "prompt");
        setDefault(outputCol, "completion");
        setDefault(finishReasonCol, "finish_reason");
        setDefault(promptTokensCol, "prompt_tokens");
        setDefault(completionTokensCol, "completion_tokens");
        setDefault(tokensCol, "");
        setDefault(maxTokens, 256);
        setDefault(greedy, true);
        setDefault(temperature, 0.7);
        setDefault(topK, 40);
        setDefault(topP, 0.9);
        setDefault(seed, -1L);
        setDefault(ignoreEos, false);
        setDefault(chat, false);
        setDefault(skill, "");
        setDefault(device, "cpu");
        setDefault(threads, 0);
        setDefault(contextLength, 0);
        setDefault(batchSize, 32);
    }

    /** Reads a stage written by {@code write().save(path)} (also what {@code PipelineModel.load} calls). */
    public static MLReader<CmfGenerate> read() { return new DefaultParamsReader<>(); }

    public static CmfGenerate load(String path) { return read().load(path); }

    @Override public String uid() { return uid; }

    public Param<String> modelPath() { return modelPath; }
    public Param<String> inputCol() { return inputCol; }
    public Param<String> outputCol() { return outputCol; }
    public Param<String> finishReasonCol() { return finishReasonCol; }
    public Param<String> promptTokensCol() { return promptTokensCol; }
    public Param<String> completionTokensCol() { return completionTokensCol; }
    public Param<String> tokensCol() { return tokensCol; }
    public IntParam maxTokens() { return maxTokens; }
    public BooleanParam greedy() { return greedy; }
    public DoubleParam temperature() { return temperature; }
    public IntParam topK() { return topK; }
    public DoubleParam topP() { return topP; }
    public LongParam seed() { return seed; }
    public BooleanParam ignoreEos() { return ignoreEos; }
    public BooleanParam chat() { return chat; }
    public Param<String> skill() { return skill; }
    public Param<String> device() { return device; }
    public IntParam threads() { return threads; }
    public IntParam contextLength() { return contextLength; }
    public IntParam batchSize() { return batchSize; }

    public CmfGenerate setModelPath(String v) { set(modelPath, v); return this; }
    public CmfGenerate setInputCol(String v) { set(inputCol, v); return this; }
    public CmfGenerate setOutputCol(String v) { set(outputCol, v); return this; }
    public CmfGenerate setFinishReasonCol(String v) { set(finishReasonCol, v); return this; }
    public CmfGenerate setPromptTokensCol(String v) { set(promptTokensCol, v); return this; }
    public CmfGenerate setCompletionTokensCol(String v) { set(completionTokensCol, v); return this; }
    public CmfGenerate setTokensCol(String v) { set(tokensCol, v); return this; }
    public CmfGenerate setMaxTokens(int v) { set(maxTokens, v); return this; }
    public CmfGenerate setGreedy(boolean v) { set(greedy, v); return this; }
    public CmfGenerate setTemperature(double v) { set(temperature, v); return this; }
    public CmfGenerate setTopK(int v) { set(topK, v); return this; }
    public CmfGenerate setTopP(double v) { set(topP, v); return this; }
    public CmfGenerate setSeed(long v) { set(seed, v); return this; }
    public CmfGenerate setIgnoreEos(boolean v) { set(ignoreEos, v); return this; }
    public CmfGenerate setChat(boolean v) { set(chat, v); return this; }
    public CmfGenerate setSkill(String v) { set(skill, v); return this; }
    public CmfGenerate setDevice(String v) { set(device, v); return this; }
    public CmfGenerate setThreads(int v) { set(threads, v); return this; }
    public CmfGenerate setContextLength(int v) { set(contextLength, v); return this; }
    public CmfGenerate setBatchSize(int v) { set(batchSize, v); return this; }

    @Override public Dataset<Row> transform(Dataset<?> dataset) {
        StructType in = dataset.schema();
        StructType out = transformSchema(in);
        int column = in.fieldIndex($(inputCol));
        PartitionGenerator.Input kind = in.fields()[column].dataType() instanceof StringType ? PartitionGenerator.Input.TEXT : PartitionGenerator.Input.MESSAGES;
        PartitionGenerator fn = new PartitionGenerator(settings(), column, kind, !$(tokensCol).isEmpty());
        return dataset.toDF().mapPartitions(fn, Encoders.row(out));
    }

    /**
     * The input schema with the output columns appended.
     *
     * @throws IllegalArgumentException no model path, a missing input column or one of another type, an output
     *                                  column that exists already, or a setting out of range
     */
    @Override public StructType transformSchema(StructType schema) {
        settings();   // checks the settings
        String name = $(inputCol);
        if (!Arrays.asList(schema.fieldNames()).contains(name))
            throw new IllegalArgumentException("CmfGenerate: the input column '" + name + "' is not in the data (columns: "
                    + String.join(", ", schema.fieldNames()) + ")");
        DataType t = schema.apply(name).dataType();
        if (!(t instanceof StringType) && !isMessages(t))
            throw new IllegalArgumentException("CmfGenerate: the input column '" + name + "' must be a string (a prompt) or "
                    + "array<struct<role: string, content: string>> (chat messages), not " + t.simpleString());
        StructType out = schema;
        for (StructField f : outputFields()) {
            if (Arrays.asList(schema.fieldNames()).contains(f.name()))
                throw new IllegalArgumentException("CmfGenerate: the output column '" + f.name() + "' exists already");
            out = out.add(f);
        }
        return out;
    }

    @Override public CmfGenerate copy(ParamMap extra) { return defaultCopy(extra); }

    /**
     * Registers {@code cmf_generate(prompt STRING) -> STRING} on {@code spark} with this stage's model and sampling:
     * {@code SELECT cmf_generate(question) FROM questions}. Each call generates one row: a task's calls run one after
     * another (the executor's tasks still share its model and batches); {@link #transform} batches a partition's rows.
     */
    public void registerFunction(SparkSession spark) { registerFunction(spark, "cmf_generate"); }

    /** As {@link #registerFunction(SparkSession)} under another name. */
    public void registerFunction(SparkSession spark, String name) {
        GenerateSettings s = settings();
        spark.udf().register(name, (UDF1<String, String>) prompt -> {
            Prompt p = Prompt.ofText(prompt);
            return p == null ? null : s.generate(ExecutorModels.get(s), p).text();
        }, DataTypes.StringType);
    }

    /** The settings a task runs with, checked here on the driver. */
    GenerateSettings settings() {
        if (!isDefined(modelPath) || $(modelPath) == null || $(modelPath).isBlank())
            throw new IllegalArgumentException("CmfGenerate: modelPath is not set (a CMF file every executor can read)");
        int max = (Integer) $(maxTokens), batch = (Integer) $(batchSize);
        if (max < 0) throw new IllegalArgumentException("CmfGenerate: maxTokens must be >= 0, got " + max);
        if (batch < 1) throw new IllegalArgumentException("CmfGenerate: batchSize must be >= 1, got " + batch);
        long seedValue = (Long) $(seed);
        GenerateSettings s = new GenerateSettings($(modelPath), $(device), (Integer) $(threads), (Integer) $(contextLength),
                $(skill).isEmpty() ? null : $(skill), batch, max, (Boolean) $(greedy), ((Double) $(temperature)).floatValue(),
                (Integer) $(topK), ((Double) $(topP)).floatValue(), seedValue < 0 ? null : seedValue,
                (Boolean) $(ignoreEos), (Boolean) $(chat));
        try {
            s.options();
            s.sampling();
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("CmfGenerate: " + e.getMessage(), e);
        }
        return s;
    }

    private StructField[] outputFields() {
        StructField[] f = {
            DataTypes.createStructField($(outputCol), DataTypes.StringType, true),
            DataTypes.createStructField($(finishReasonCol), DataTypes.StringType, true),
            DataTypes.createStructField($(promptTokensCol), DataTypes.IntegerType, true),
            DataTypes.createStructField($(completionTokensCol), DataTypes.IntegerType, true),
        };
        if ($(tokensCol).isEmpty()) return f;
        StructField[] g = Arrays.copyOf(f, 5);
        g[4] = DataTypes.createStructField($(tokensCol), DataTypes.createArrayType(DataTypes.IntegerType, false), true);
        return g;
    }

    private static boolean isMessages(DataType t) {
        if (!(t instanceof ArrayType a) || !(a.elementType() instanceof StructType s)) return false;
        var names = Arrays.asList(s.fieldNames());
        return names.contains("role") && names.contains("content")
                && s.apply("role").dataType() instanceof StringType && s.apply("content").dataType() instanceof StringType;
    }
}
