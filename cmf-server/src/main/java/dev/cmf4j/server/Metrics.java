package dev.cmf4j.server;

import dev.cmf4j.runtime.Scheduler;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * The {@code /metrics} page in Prometheus' text format: our own {@code cmf_*} series, and the few vLLM names that
 * Kubernetes inference gateways read to route and autoscale ({@code vllm:num_requests_waiting},
 * {@code vllm:gpu_cache_usage_perc}, ...), with the same meaning.
 */
final class Metrics {
    private Metrics() {}

    static String render(ServedModel m, Map<Integer, LongAdder> responses) {
        Scheduler.Stats s = m.stats();
        StringBuilder b = new StringBuilder();
        counter(b, "cmf_requests_total", "generation requests submitted to the scheduler (a choice of n counts once)", s.requests());
        counter(b, "cmf_prompt_tokens_total", "prompt tokens run through the model", s.promptTokens());
        counter(b, "cmf_prompt_tokens_cached_total", "prompt tokens reused from cached prefixes", s.cachedPromptTokens());
        counter(b, "cmf_generation_tokens_total", "tokens generated", s.generatedTokens());
        counter(b, "cmf_steps_total", "forward steps of the scheduler", s.steps());
        counter(b, "cmf_draft_tokens_total", "tokens the draft model proposed (serve --draft)", s.draftedTokens());
        counter(b, "cmf_draft_tokens_accepted_total", "drafted tokens the model kept", s.acceptedTokens());
        gauge(b, "cmf_requests_running", "sequences running now", s.running());
        gauge(b, "cmf_requests_waiting", "sequences waiting for a place", s.waiting());
        gauge(b, "cmf_kv_cache_usage_ratio", "positions held by running sequences over parallel x context", s.kvUsage());
        long held = 0;
        for (ServedModel.Replica r : m.replicas()) {
            for (Scheduler.SequenceInfo q : r.scheduler().live()) held += Math.max(0, q.stateBytes());
            for (Scheduler.CachedInfo q : r.scheduler().cached()) held += Math.max(0, q.stateBytes());
        }
        // a byte count: printed whole (the %.6g of the other gauges would round it)
        line(b, "cmf_state_bytes", "bytes of attention and recurrent state held by running and cached sequences (CPU)", "gauge", Long.toString(held));
        replicas(b, m);
        b.append("# HELP cmf_http_responses_total HTTP responses by status code\n# TYPE cmf_http_responses_total counter\n");
        new TreeMap<>(responses).forEach((code, n) -> b.append("cmf_http_responses_total{code=\"").append(code).append("\"} ").append(n.sum()).append('\n'));
        String label = "{model_name=\"" + escape(m.name()) + "\"}";
        gauge(b, "vllm:num_requests_running" + label, "vLLM's name: requests running", s.running());
        gauge(b, "vllm:num_requests_waiting" + label, "vLLM's name: requests waiting", s.waiting());
        gauge(b, "vllm:gpu_cache_usage_perc" + label, "vLLM's name: KV-cache usage, 1 = full", s.kvUsage());
        counter(b, "vllm:prompt_tokens_total" + label, "vLLM's name: prompt tokens", s.promptTokens());
        counter(b, "vllm:generation_tokens_total" + label, "vLLM's name: generated tokens", s.generatedTokens());
        return b.toString();
    }

    /** Each replica's own counts, labelled by its index and device (one series each; one replica without serve --replicas). */
    private static void replicas(StringBuilder b, ServedModel m) {
        List<Scheduler.Stats> stats = new ArrayList<>();
        for (ServedModel.Replica r : m.replicas()) stats.add(r.scheduler().stats());
        perReplica(b, m, "cmf_replica_requests_running", "sequences running now on each replica", "gauge", i -> stats.get(i).running());
        perReplica(b, m, "cmf_replica_requests_waiting", "sequences waiting for a place on each replica", "gauge", i -> stats.get(i).waiting());
        perReplica(b, m, "cmf_replica_requests_total", "generation requests each replica took", "counter", i -> stats.get(i).requests());
        perReplica(b, m, "cmf_replica_generation_tokens_total", "tokens each replica generated", "counter", i -> stats.get(i).generatedTokens());
        perReplica(b, m, "cmf_replica_failures_total", "generations that failed on each replica (a step threw)", "counter",
                i -> m.replicas().get(i).health().failures());
    }

    private static void perReplica(StringBuilder b, ServedModel m, String name, String help, String type,
                                   java.util.function.IntToLongFunction value) {
        b.append("# HELP ").append(name).append(' ').append(help).append('\n');
        b.append("# TYPE ").append(name).append(' ').append(type).append('\n');
        for (int i = 0; i < m.replicas().size(); i++)
            b.append(name).append("{replica=\"").append(i).append("\",device=\"").append(escape(m.replicas().get(i).device()))
                    .append("\"} ").append(value.applyAsLong(i)).append('\n');
    }

    /** A label value in Prometheus' text format. */
    private static String escape(String v) { return v.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n"); }

    private static void counter(StringBuilder b, String series, String help, long v) { line(b, series, help, "counter", Long.toString(v)); }

    private static void gauge(StringBuilder b, String series, String help, double v) {
        line(b, series, help, "gauge", String.format(Locale.ROOT, "%.6g", v));
    }

    private static void line(StringBuilder b, String series, String help, String type, String value) {
        int brace = series.indexOf('{');
        String name = brace < 0 ? series : series.substring(0, brace);
        b.append("# HELP ").append(name).append(' ').append(help).append('\n');
        b.append("# TYPE ").append(name).append(' ').append(type).append('\n');
        b.append(series).append(' ').append(value).append('\n');
    }
}
