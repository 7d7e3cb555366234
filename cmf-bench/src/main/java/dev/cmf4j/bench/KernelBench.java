package dev.cmf4j.bench;

import org.openjdk.jmh.results.RunResult;
import org.openjdk.jmh.runner.Runner;
import org.openjdk.jmh.runner.options.CommandLineOptions;
import org.openjdk.jmh.runner.options.Options;
import org.openjdk.jmh.runner.options.OptionsBuilder;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Locale;

/**
 * Runs the kernel benchmarks and prints, per result, the weights' GB/s (decode) or GFLOP/s
 * (prefill), and for decode the fraction of the machine's read bandwidth.
 *
 * <pre>
 *   java -jar cmf-bench/target/benchmarks.jar [--membw GBPS] [JMH options, e.g. MatvecBench -p dtype=q8_2f]
 * </pre>
 * {@code --membw}: the 2-thread read bandwidth measured by shared/tools/membw.c (its "best" figure).
 */
public final class KernelBench {
    public static void main(String[] args) throws Exception {
        double membw = Double.NaN;
        List<String> rest = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--membw")) membw = Double.parseDouble(args[++i]);
            else rest.add(args[i]);
        }
        Options cli = new CommandLineOptions(rest.toArray(String[]::new));
        OptionsBuilder ob = new OptionsBuilder();
        ob.parent(cli);
        if (cli.getIncludes().isEmpty()) ob.include("dev\\.cmf4j\\.bench\\..*");
        Collection<RunResult> results = new Runner(ob.build()).run();
        System.out.println();
        System.out.printf(Locale.ROOT, "%-32s %-10s %-10s %3s %12s %10s %8s%n", "benchmark", "dtype", "shape", "thr", "time/op", "rate", "of bw");
        for (RunResult r : results) {
            var p = r.getParams();
            String bench = p.getBenchmark().replace("dev.cmf4j.bench.", "");
            double score = r.getPrimaryResult().getScore();
            String unit = r.getPrimaryResult().getScoreUnit();
            String dtype = p.getParam("dtype"), shape = p.getParam("shape"), thr = p.getParam("threads");
            String rate = "", frac = "";
            if (bench.startsWith("MatvecBench") && unit.equals("us/op")) {
                double gbps = MatvecBench.bytesPerOp(dtype, shape) / (score * 1e-6) / 1e9;
                rate = String.format(Locale.ROOT, "%.2f GB/s", gbps);
                if (!Double.isNaN(membw)) frac = String.format(Locale.ROOT, "%.0f%%", 100 * gbps / membw);
            } else if (bench.startsWith("MatmulBench") && unit.equals("ms/op")) {
                String[] s = shape.split("x");
                double flop = 2.0 * Long.parseLong(s[0]) * Long.parseLong(s[1]) * Integer.parseInt(p.getParam("tokens"));
                rate = String.format(Locale.ROOT, "%.1f GFLOP/s", flop / (score * 1e-3) / 1e9);
            } else if (bench.startsWith("Int8DotExperiment") && unit.equals("us/op")) {
                double bytes = (double) Int8DotExperiment.ROWS * Int8DotExperiment.COLS;
                rate = String.format(Locale.ROOT, "%.2f GB/s", bytes / (score * 1e-6) / 1e9);
            }
            System.out.printf(Locale.ROOT, "%-32s %-10s %-10s %3s %9.1f %s %10s %8s%n", bench, dtype == null ? "-" : dtype,
                    shape == null ? "-" : shape, thr == null ? "1" : thr, score, unit, rate, frac);
        }
    }
}
