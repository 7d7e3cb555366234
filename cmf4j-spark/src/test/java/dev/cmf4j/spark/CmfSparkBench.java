package dev.cmf4j.spark;

import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Sampling;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * Rows per second of greedy generation over the same prompts: a plain loop over the library API (one row at a time),
 * the library with a window of rows in flight on virtual threads (what a partition does, without Spark), and
 * CmfGenerate in Spark local[1] and local[2]. Not part of the test run (its name does not end in Test); run it with
 * {@code mvn -o test -pl cmf4j-spark -am -Dtest=CmfSparkBench -Dsurefire.failIfNoSpecifiedTests=false
 * [-Dbench.rows=512 -Dbench.maxTokens=16 -Dbench.batchSize=32]} (docs/SPARK.md has the numbers).
 */
class CmfSparkBench {
    @Test void rowsPerSecond() throws Exception {
        int rows = Integer.getInteger("bench.rows", 512), maxTokens = Integer.getInteger("bench.maxTokens", 16);
        int batch = Integer.getInteger("bench.batchSize", 32);
        Path file = CmfSparkTest.bundledModel();
        List<String> prompts = CmfSparkTest.prompts(rows);
        Sampling greedy = Sampling.greedy().withMaxTokens(maxTokens).withIgnoreEos(true);
        System.out.printf("rows %d, maxTokens %d (exactly, ignoreEos), batchSize %d, %d processors, loadavg %s%n", rows, maxTokens,
                batch, Runtime.getRuntime().availableProcessors(), Files.readString(Path.of("/proc/loadavg")).strip());

        try (CmfModel model = Cmf.open(file, ModelOptions.defaults().withParallel(batch).withMaxQueue(1 << 16))) {
            for (String p : prompts.subList(0, 16)) model.complete(p, greedy, null);   // warm-up
            long t = System.nanoTime();
            for (String p : prompts) model.complete(p, greedy, null);
            report("library, plain loop", rows, t);

            t = System.nanoTime();
            try (var threads = Executors.newVirtualThreadPerTaskExecutor()) {
                List<Future<?>> fs = new ArrayList<>();
                for (String p : prompts) fs.add(threads.submit(() -> model.complete(p, greedy, null)));
                for (Future<?> f : fs) f.get();
            }
            report("library, all rows submitted, " + batch + " at once", rows, t);
        }

        StructType schema = new StructType().add("id", DataTypes.IntegerType).add("prompt", DataTypes.StringType);
        List<Row> data = new ArrayList<>();
        for (int i = 0; i < rows; i++) data.add(RowFactory.create(i, prompts.get(i)));
        for (int cores : new int[] {1, 2}) {
            SparkSession spark = SparkSession.builder().master("local[" + cores + "]").appName("cmf4j-spark-bench")
                    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
                    .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate();
            try {
                CmfGenerate gen = new CmfGenerate().setModelPath(file.toString()).setMaxTokens(maxTokens).setIgnoreEos(true).setBatchSize(batch);
                var frame = spark.createDataFrame(data, schema).repartition(4).cache();
                frame.count();
                gen.transform(frame.limit(16)).count();   // warm-up: the executor's model opens here
                long t = System.nanoTime();
                long n = gen.transform(frame).count();
                if (n != rows) throw new IllegalStateException(n + " rows came back");
                report("Spark local[" + cores + "], 4 partitions", rows, t);
            } finally {
                spark.stop();
            }
        }
        ExecutorModels.closeAll();
    }

    private static void report(String what, int rows, long start) {
        double s = (System.nanoTime() - start) / 1e9;
        System.out.printf("%-36s %7.1f rows/s  (%.2f s)%n", what, rows / s, s);
    }
}
