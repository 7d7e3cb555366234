package dev.cmf4j.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

/**
 * A deterministic mixed text for tokenizer benchmarks, built from what every checkout has: English
 * technical prose (the repository's Markdown), source code (its Java files) and multilingual text
 * (every string of the tokenizer and chat fixtures: CJK, Arabic, Devanagari, emoji, special tokens,
 * ...). Chunks of the three are interleaved, 4 KB prose, 4 KB code, 2 KB multilingual, until the
 * text reaches the requested UTF-8 size; a pool is reused only once it runs out.
 */
final class BenchCorpus {
    private BenchCorpus() {}

    static String mixed(Path fixtures, int minBytes) {
        Path repo = repoRoot();
        String prose = join(files(repo, ".md"));
        String code = join(files(repo, ".java"));
        String multi = String.join("\n", fixtureStrings(fixtures));
        if (prose.isEmpty() || code.isEmpty() || multi.isEmpty()) {
            throw new IllegalStateException("cannot build the corpus: run from the repository root with the fixtures present");
        }
        StringBuilder sb = new StringBuilder(minBytes + 16_384);
        int[] at = new int[3];
        String[] pools = {prose, code, multi};
        int[] chunk = {4096, 4096, 2048};
        int bytes = 0;
        while (bytes < minBytes) {
            for (int k = 0; k < 3; k++) {
                String pool = pools[k];
                if (at[k] >= pool.length()) at[k] = 0;
                int end = Math.min(pool.length(), at[k] + chunk[k]);
                if (end < pool.length() && Character.isHighSurrogate(pool.charAt(end - 1))) end++;
                String piece = pool.substring(at[k], end);
                at[k] = end;
                sb.append(piece);
                bytes += piece.getBytes(StandardCharsets.UTF_8).length;
            }
        }
        return sb.toString();
    }

    private static Path repoRoot() {
        for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.exists(p.resolve("cmf-text")) && Files.exists(p.resolve("pom.xml"))) return p;
        }
        throw new IllegalStateException("run from inside the cmf4j checkout");
    }

    private static List<Path> files(Path root, String suffix) {
        try (Stream<Path> s = Files.walk(root)) {
            return s.filter(p -> p.toString().endsWith(suffix) && !p.toString().contains("/target/") && !p.toString().contains("/."))
                    .sorted().toList();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static String join(List<Path> files) {
        StringBuilder sb = new StringBuilder();
        for (Path f : files) {
            try {
                sb.append(Files.readString(f, StandardCharsets.UTF_8)).append('\n');
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return sb.toString();
    }

    private static List<String> fixtureStrings(Path fixtures) {
        ObjectMapper json = new ObjectMapper();
        java.util.Set<String> out = new java.util.LinkedHashSet<>();
        for (String tok : new String[] {"llama3", "qwen3", "gemma3"}) {
            for (String file : new String[] {"tokenizers/" + tok + "/cases.jsonl", "chat/" + tok + "/renders.jsonl"}) {
                Path p = fixtures.resolve(file);
                if (!Files.exists(p)) continue;
                try {
                    for (String line : Files.readAllLines(p, StandardCharsets.UTF_8)) {
                        if (line.isBlank()) continue;
                        JsonNode n = json.readTree(line);
                        JsonNode t = n.has("text") ? n.get("text") : n.get("rendered");
                        if (t != null && t.isTextual()) out.add(t.asText());
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
        }
        // the random multilingual strings of the tokenizer reference goldens
        Path ref = repoRoot().resolve("cmf-text/src/test/resources/dev/cmf4j/text/reference/cases.jsonl.gz");
        if (Files.exists(ref)) {
            try (var r = new java.io.BufferedReader(new java.io.InputStreamReader(
                    new java.util.zip.GZIPInputStream(Files.newInputStream(ref)), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) out.add(json.readTree(line).get("text").asText());
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return new ArrayList<>(out);
    }
}
