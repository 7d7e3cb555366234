package dev.cmf4j.text;

import dev.cmf4j.testkit.Fixtures;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** The fixture tokenizers, loaded once per test JVM (each is an 8-30 MB tokenizer.json). */
final class FixtureTokenizers {
    private FixtureTokenizers() {}

    private static final Map<String, Tokenizer> LOADED = new ConcurrentHashMap<>();

    /** {@code llama3}, {@code qwen3} or {@code gemma3}; skips the test when the fixtures are absent. */
    static Tokenizer get(String name) {
        var path = Fixtures.require("tokenizers/" + name).resolve("tokenizer.json.gz");
        return LOADED.computeIfAbsent(name, n -> Tokenizer.fromFile(path));
    }
}
