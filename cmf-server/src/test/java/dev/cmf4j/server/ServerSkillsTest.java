package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import dev.cmf4j.format.CmfFile;
import dev.cmf4j.format.CmfWriter;
import dev.cmf4j.format.SkillRecord;
import dev.cmf4j.format.TensorEntry;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.Session;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.net.http.HttpResponse;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Skills per request: the bundled model with a skill "x" (layer 0's MLP down projection replaced by layer 1's, same
 * shape and dtype); {@code skill} and {@code model: "default:x"} pick it, /v1/models lists it, requests of the skill
 * and of the backbone running together each give what their sequence gives alone, bad names are a 400.
 */
class ServerSkillsTest {
    @TempDir static Path tmp;
    static ServerFixture s;

    @BeforeAll static void start() {
        Path file = tmp.resolve("with-skill.cmf");
        try (CmfFile f = CmfFile.open(ServerFixture.bundled())) {
            TensorEntry src = f.tensor("model.layers.1.mlp.down_proj.weight");
            List<SkillRecord> skills = new ArrayList<>(f.header().skills());
            skills.add(new SkillRecord("x", "swap", List.of(0), null, null, null, null, null, null, null));
            try (CmfWriter w = CmfWriter.create(file, f.header().withSkills(skills))) {
                CmfWriter.copyAll(f, w);
                w.addTensor("skill.x.model.layers.0.mlp.down_proj.weight", src.dtype(), src.shape(), src.data());
                w.finish();
            }
        }
        s = new ServerFixture(ServerConfig.local(0), new Scheduler.Config(4, 512, 8, 64, 16, 4), null, file);
    }

    @AfterAll static void stop() { if (s != null) s.close(); }

    String alone(String skill, String prompt, int n) {
        var g = s.model.model().graph();
        int[] ids = s.model.codec().encode(prompt);
        Session se = new Session(g, ids.length + n + 1);
        se.useOverlay(skill == null ? Overlay.NONE : g.overlay(skill, null, 1f));
        return new Generator(se, new Sampler(SamplingParams.GREEDY), s.model.codec().eosIds(), List.of())
                .generate(ids, n, s.model.codec().stream(true), null).text();
    }

    static String text(HttpResponse<String> r) throws Exception {
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        return ServerFixture.json(r).get("choices").get(0).get("text").asText();
    }

    @Test void modelsListTheSkills() throws Exception {
        JsonNode data = ServerFixture.json(s.get("/v1/models")).get("data");
        assertThat(data).hasSize(2);
        assertThat(data.get(1).get("id").asText()).isEqualTo("default:x");
        assertThat(data.get(1).get("skill").asText()).isEqualTo("x");
    }

    @Test void eachRequestRunsItsOwnSkillInOneBatch() throws Exception {
        String p = "Once upon a time";
        String base = alone(null, p, 12), skilled = alone("x", p, 12);
        assertThat(skilled).isNotEqualTo(base);
        List<CompletableFuture<HttpResponse<String>>> rs = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            rs.add(CompletableFuture.supplyAsync(() -> post(Map.of("prompt", p, "max_tokens", 12, "temperature", 0, "skill", "x"))));
            rs.add(CompletableFuture.supplyAsync(() -> post(Map.of("prompt", p, "max_tokens", 12, "temperature", 0))));
            rs.add(CompletableFuture.supplyAsync(() -> post(Map.of("prompt", p, "max_tokens", 12, "temperature", 0, "model", "default:x"))));
        }
        for (int i = 0; i < rs.size(); i++) assertThat(text(rs.get(i).get())).as("request " + i).isEqualTo(i % 3 == 1 ? base : skilled);
    }

    HttpResponse<String> post(Map<String, ?> body) {
        try {
            return s.post("/v1/completions", body);
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    @Test void unknownSkillsAndAdaptersAreA400() throws Exception {
        HttpResponse<String> r = s.post("/v1/completions", Map.of("prompt", "Hi", "max_tokens", 2, "skill", "nope"));
        assertThat(r.statusCode()).isEqualTo(400);
        assertThat(ServerFixture.json(r).get("error").get("param").asText()).isEqualTo("skill");
        assertThat(r.body()).contains("unknown skill 'nope'");
        r = s.post("/v1/completions", Map.of("prompt", "Hi", "max_tokens", 2, "model", "default:nope"));
        assertThat(r.statusCode()).isEqualTo(400);
        r = s.post("/v1/completions", Map.of("prompt", "Hi", "max_tokens", 2, "lora", List.of(Map.of("id", 0, "scale", 1))));
        assertThat(r.statusCode()).isEqualTo(400);
        assertThat(r.body()).contains("no LoRA adapter 0");
        r = s.post("/v1/completions", Map.of("prompt", "Hi", "max_tokens", 2, "task", "coding"));
        assertThat(r.statusCode()).isEqualTo(400);
        assertThat(ServerFixture.json(r).get("error").get("param").asText()).isEqualTo("task");
        // "none" is the backbone
        assertThat(text(s.post("/v1/completions", Map.of("prompt", "Once upon a time", "max_tokens", 12, "temperature", 0, "skill", "none"))))
                .isEqualTo(alone(null, "Once upon a time", 12));
    }
}
