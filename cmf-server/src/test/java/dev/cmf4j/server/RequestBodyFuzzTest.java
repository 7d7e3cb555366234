package dev.cmf4j.server;

import com.code_intelligence.jazzer.junit.FuzzTest;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.GenerationException;
import dev.cmf4j.runtime.Scheduler;
import dev.cmf4j.runtime.TokenSink;

import java.time.Duration;
import java.util.Collections;

/**
 * Coverage-guided fuzzing of the HTTP request bodies of {@code /v1/chat/completions} and {@code /v1/completions}
 * (the JSON, the chat messages and tools rendered through the bundled model's chat template, sampling fields,
 * {@code response_format} schemas): any bytes either become generation requests or a 400 {@link ApiError}
 * (or the {@link GenerationException} the server answers with a 400). The first byte picks the endpoint.
 * Replays {@code RequestBodyFuzzTestInputs/} in every test run; {@code JAZZER_FUZZ=1} fuzzes (docs/FUZZING.md).
 */
class RequestBodyFuzzTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final TokenSink IGNORE = c -> { };

    /** The bundled model, opened once per JVM; its scheduler never runs a request here. */
    private static final class Bundled {
        static final ServedModel MODEL = ServedModel.start("default", Model.open(ServerFixture.bundled()),
                new Scheduler.Config(1, 512, 1, 64, 64, 0));
    }

    @FuzzTest(maxDuration = "40m")
    void parseRequest(byte[] data) {
        if (data.length == 0) return;
        boolean chat = (data[0] & 1) == 0;
        byte[] body = java.util.Arrays.copyOfRange(data, 1, data.length);
        ServedModel m = Bundled.MODEL;
        try {
            JsonNode tree = OpenAiServer.parseBody(JSON, body);
            CompletionRequest req = CompletionRequest.parse(tree, chat, m, 4, JSON);
            req.generations(m, Duration.ofSeconds(1), Collections.nCopies(req.n(), IGNORE));
        } catch (ApiError refused) {
            if (refused.status != 400 || refused.getMessage() == null) throw new AssertionError("not a clear 400: " + refused, refused);
        } catch (GenerationException refused) {
            // the server answers these with a 400 too
        }
    }
}
