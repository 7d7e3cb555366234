package dev.cmf4j.langchain4j;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Sampling;
import dev.langchain4j.agent.tool.ToolExecutionRequest;
import dev.langchain4j.agent.tool.ToolSpecification;
import dev.langchain4j.data.message.AiMessage;
import dev.langchain4j.data.message.ChatMessage;
import dev.langchain4j.data.message.SystemMessage;
import dev.langchain4j.data.message.ToolExecutionResultMessage;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.request.ResponseFormat;
import dev.langchain4j.model.chat.request.ResponseFormatType;
import dev.langchain4j.model.chat.request.ToolChoice;
import dev.langchain4j.model.chat.request.json.JsonObjectSchema;
import dev.langchain4j.model.chat.request.json.JsonSchema;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.CompleteToolCall;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import dev.langchain4j.model.output.FinishReason;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The LangChain4j adapters on the bundled model: what they answer equals the cmf4j API's greedy reply. */
class CmfLangChain4jTest {
    static Path file;
    static CmfModel shared;
    static CmfChatModel chat;
    static CmfStreamingChatModel streaming;
    static final ObjectMapper JSON = new ObjectMapper();

    static final ToolSpecification MANUAL = ToolSpecification.builder().name("get_manual").description("Reads a command's manual page")
            .parameters(JsonObjectSchema.builder().addStringProperty("command").required("command").build()).build();

    @BeforeAll static void open() {
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.isRegularFile(dir.resolve("models/default.cmf"))) dir = dir.getParent();
        assertThat(dir).as("models/default.cmf above the working directory").isNotNull();
        file = dir.resolve("models/default.cmf");
        shared = Cmf.open(file, ModelOptions.defaults().withContextLength(512));
        chat = CmfChatModel.builder().model(shared).maxTokens(32).build();
        streaming = CmfStreamingChatModel.builder().model(shared).maxTokens(32).build();
    }

    @AfterAll static void close() {
        if (shared != null) shared.close();
    }

    /** A streamed response: every partial text, each complete tool call, then the response or the error. */
    static final class Collect implements StreamingChatResponseHandler {
        final StringBuilder partial = new StringBuilder();
        final List<CompleteToolCall> calls = new ArrayList<>();
        final CompletableFuture<ChatResponse> done = new CompletableFuture<>();

        @Override public void onPartialResponse(String s) { partial.append(s); }

        @Override public void onCompleteToolCall(CompleteToolCall c) { calls.add(c); }

        @Override public void onCompleteResponse(ChatResponse r) { done.complete(r); }

        @Override public void onError(Throwable t) { done.completeExceptionally(t); }

        ChatResponse get() throws Exception { return done.get(60, TimeUnit.SECONDS); }
    }

    @Test void chatAnswersWhatTheApiAnswers() {
        ChatResponse r = chat.chat(SystemMessage.from("Be brief."), UserMessage.from("What does grep do?"));
        var direct = shared.newChat().complete(List.of(Message.system("Be brief."), Message.user("What does grep do?")), Sampling.greedy().withMaxTokens(32));
        assertThat(r.aiMessage().text()).isEqualTo(direct.text()).isNotBlank();
        assertThat(r.tokenUsage().outputTokenCount()).isEqualTo(direct.tokens().length);
        assertThat(r.tokenUsage().inputTokenCount()).isEqualTo(direct.promptTokens());
        assertThat(r.finishReason()).isEqualTo(direct.tokens().length == 32 ? FinishReason.LENGTH : FinishReason.STOP);
        assertThat(chat.chat("What does grep do?")).isNotBlank();
    }

    @Test void streamingGivesThePiecesOfTheSameAnswer() throws Exception {
        List<ChatMessage> messages = List.of(SystemMessage.from("Be brief."), UserMessage.from("How do I list files?"));
        Collect c = new Collect();
        streaming.chat(messages, c);
        ChatResponse r = c.get();
        assertThat(c.partial.toString()).isEqualTo(r.aiMessage().text()).isEqualTo(chat.chat(messages).aiMessage().text());
    }

    @Test void requestParametersOverrideTheBuilders() {
        ChatResponse r = chat.chat(ChatRequest.builder().messages(UserMessage.from("What does ls do?")).maxOutputTokens(5).build());
        assertThat(r.tokenUsage().outputTokenCount()).isEqualTo(5);
        assertThat(r.finishReason()).isEqualTo(FinishReason.LENGTH);
    }

    @Test void aToolCallRoundTrip() throws Exception {
        List<ChatMessage> messages = new ArrayList<>(List.of(SystemMessage.from("Use the tools."), UserMessage.from("What does tar do?")));
        ChatResponse first = chat.chat(ChatRequest.builder().messages(messages).toolSpecifications(MANUAL)
                .toolChoice(ToolChoice.REQUIRED).maxOutputTokens(120).build());
        assertThat(first.finishReason()).isEqualTo(FinishReason.TOOL_EXECUTION);
        ToolExecutionRequest call = first.aiMessage().toolExecutionRequests().getFirst();
        assertThat(first.aiMessage().toolExecutionRequests()).hasSize(1);
        assertThat(call.name()).isEqualTo("get_manual");
        assertThat(JSON.readTree(call.arguments()).get("command").isTextual()).isTrue();
        assertThat(call.id()).startsWith("call_");

        messages.add(first.aiMessage());
        messages.add(ToolExecutionResultMessage.from(call, "tar - an archiving utility"));
        ChatResponse answer = chat.chat(ChatRequest.builder().messages(messages).toolSpecifications(MANUAL).maxOutputTokens(24).build());
        assertThat(answer.aiMessage().hasToolExecutionRequests()).isFalse();
        assertThat(answer.aiMessage().text()).isNotNull();
        assertThat(answer.finishReason()).isIn(FinishReason.STOP, FinishReason.LENGTH);
        // the same conversation through the API renders the tool result the model was given
        var api = List.of(Message.system("Use the tools."), Message.user("What does tar do?"),
                Message.assistant("", List.of(new dev.cmf4j.api.ToolCall(call.id(), call.name(), call.arguments()))),
                new Message(Message.Role.TOOL, "tar - an archiving utility", List.of(), call.id(), call.name()));
        assertThat(shared.newChat().complete(api, Sampling.greedy().withMaxTokens(24)).text()).isEqualTo(answer.aiMessage().text());

        Collect c = new Collect();
        streaming.chat(ChatRequest.builder().messages(messages.subList(0, 2)).toolSpecifications(MANUAL)
                .toolChoice(ToolChoice.REQUIRED).maxOutputTokens(120).build(), c);
        ChatResponse streamed = c.get();
        assertThat(c.partial.toString()).doesNotContain("<tool_call>");
        assertThat(c.calls).singleElement().satisfies(tc -> assertThat(tc.toolExecutionRequest().arguments()).isEqualTo(call.arguments()));
        assertThat(streamed.aiMessage().toolExecutionRequests()).singleElement()
                .satisfies(tc -> assertThat(tc.arguments()).isEqualTo(call.arguments()));
    }

    @Test void jsonResponseFormatFollowsTheSchema() throws Exception {
        ResponseFormat format = ResponseFormat.builder().type(ResponseFormatType.JSON).jsonSchema(JsonSchema.builder().name("command")
                .rootElement(JsonObjectSchema.builder().addStringProperty("name").addBooleanProperty("safe").required("name", "safe").build())
                .build()).build();
        ChatResponse r = chat.chat(ChatRequest.builder().messages(UserMessage.from("Describe rm as JSON.")).responseFormat(format).maxOutputTokens(60).build());
        JsonNode doc = JSON.readTree(r.aiMessage().text());
        assertThat(doc.get("name").isTextual()).isTrue();
        assertThat(doc.get("safe").isBoolean()).isTrue();
        JsonNode any = JSON.readTree(chat.chat(ChatRequest.builder().messages(UserMessage.from("JSON please."))
                .responseFormat(ResponseFormat.JSON).maxOutputTokens(40).build()).aiMessage().text());
        assertThat(any.isObject()).isTrue();
    }

    @Test void aModelOpenedFromAPathIsTheAdaptersToClose() throws Exception {
        CmfStreamingChatModel own = CmfStreamingChatModel.builder().modelPath(file).modelOptions(ModelOptions.defaults().withContextLength(256))
                .temperature(0).maxTokens(8).build();
        Collect c = new Collect();
        own.chat("What does ls do?", c);
        assertThat(c.get().aiMessage().text()).isEqualTo(chat.chat(ChatRequest.builder().messages(UserMessage.from("What does ls do?"))
                .maxOutputTokens(8).build()).aiMessage().text());
        own.close();
        Collect after = new Collect();
        own.chat("again", after);
        assertThatThrownBy(after::get).hasMessageContaining("closed");
        assertThatThrownBy(() -> CmfChatModel.builder().build()).isInstanceOf(IllegalStateException.class).hasMessageContaining("modelPath");
        assertThatThrownBy(() -> chat.chat(UserMessage.from(dev.langchain4j.data.message.ImageContent.from("https://example.com/x.png"))))
                .hasMessageContaining("text only");
    }
}
