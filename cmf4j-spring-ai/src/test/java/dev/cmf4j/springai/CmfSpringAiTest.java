package dev.cmf4j.springai;

import com.fasterxml.jackson.databind.ObjectMapper;
import dev.cmf4j.api.Chat;
import dev.cmf4j.api.Cmf;
import dev.cmf4j.api.CmfModel;
import dev.cmf4j.api.Message;
import dev.cmf4j.api.ModelOptions;
import dev.cmf4j.api.Reply;
import dev.cmf4j.api.Sampling;
import dev.cmf4j.api.Tool;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.messages.ToolResponseMessage;
import org.springframework.ai.chat.messages.UserMessage;
import org.springframework.ai.chat.model.ChatModel;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.tool.ToolCallback;
import org.springframework.ai.tool.definition.ToolDefinition;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;

/** The Spring AI adapter on the bundled model: chat, streaming, options, a tool call round trip, the auto-configuration. */
class CmfSpringAiTest {
    static final String SCHEMA = "{\"type\": \"object\", \"properties\": {\"command\": {\"type\": \"string\"}}, \"required\": [\"command\"]}";
    static final ToolCallback MANUAL = new ToolCallback() {
        @Override public ToolDefinition getToolDefinition() {
            return ToolDefinition.builder().name("get_manual").description("Reads a command's manual page").inputSchema(SCHEMA).build();
        }

        @Override public String call(String arguments) { return "grep - print lines that match patterns"; }
    };
    static final List<Message> GREP = List.of(Message.user("What does grep do?"));

    static CmfModel model;
    static CmfChatModel chat;

    static Path bundled() { return Path.of(System.getProperty("cmf.repo.root", "..")).resolve("models/default.cmf"); }

    @BeforeAll static void open() {
        model = Cmf.open(bundled(), ModelOptions.defaults().withContextLength(512));
        chat = new CmfChatModel(model, CmfChatOptions.builder().maxTokens(16).build());
    }

    @AfterAll static void close() { if (model != null) model.close(); }

    static Prompt grep(ChatOptions options) { return new Prompt(List.of(new UserMessage("What does grep do?")), options); }

    static String finish(Reply r) { return PromptMapping.finishReason(r); }

    @Test void callGivesTheApisGreedyReplyWithUsageAndFinishReason() {
        Reply want = model.newChat().complete(GREP, Sampling.greedy().withMaxTokens(16));
        ChatResponse r = chat.call(new Prompt(new UserMessage("What does grep do?")));
        assertThat(r.getResult().getOutput().getText()).isEqualTo(want.text());
        assertThat(r.getResult().getMetadata().getFinishReason()).isEqualTo(finish(want));
        assertThat(r.getMetadata().getUsage().getPromptTokens()).isEqualTo(want.promptTokens());
        assertThat(r.getMetadata().getUsage().getCompletionTokens()).isEqualTo(want.tokens().length);
        assertThat(r.getMetadata().getModel()).isEqualTo(model.name());
        assertThat(chat.call("What does grep do?")).isEqualTo(want.text());
    }

    @Test void streamedPiecesJoinToTheReplyAndTheLastCarriesTheFinish() {
        Reply want = model.newChat().complete(GREP, Sampling.greedy().withMaxTokens(16));
        List<ChatResponse> parts = chat.stream(grep(null)).collectList().block(Duration.ofSeconds(120));
        assertThat(parts).hasSizeGreaterThan(2);
        StringBuilder text = new StringBuilder();
        for (ChatResponse p : parts) text.append(p.getResult().getOutput().getText());
        assertThat(text.toString()).isEqualTo(want.text());
        ChatResponse last = parts.getLast();
        assertThat(last.getResult().getOutput().getText()).isEmpty();
        assertThat(last.getResult().getMetadata().getFinishReason()).isEqualTo(finish(want));
        assertThat(last.getMetadata().getUsage().getCompletionTokens()).isEqualTo(want.tokens().length);
        assertThat(chat.stream("What does grep do?").collectList().block(Duration.ofSeconds(120)).stream().reduce("", String::concat))
                .isEqualTo(want.text());
    }

    @Test void aPromptsOptionsOverrideTheDefaults() {
        ChatResponse sampled = chat.call(grep(CmfChatOptions.builder().temperature(0.8).seed(3L).maxTokens(10).minP(0.05).build()));
        assertThat(sampled.getResult().getOutput().getText()).isEqualTo(model.newChat().complete(GREP,
                Sampling.greedy().withTemperature(0.8f).withSeed(3L).withMaxTokens(10).withMinP(0.05f)).text());
        ChatResponse portable = chat.call(grep(ChatOptions.builder().maxTokens(5).build()));   // Spring AI's own options
        assertThat(portable.getMetadata().getUsage().getCompletionTokens()).isLessThanOrEqualTo(5);
        assertThat(portable.getResult().getOutput().getText()).isEqualTo(model.newChat().complete(GREP, Sampling.greedy().withMaxTokens(5)).text());
    }

    @Test void anOutputSchemaIsFollowed() throws Exception {
        String schema = "{\"type\": \"object\", \"properties\": {\"tool\": {\"type\": \"string\"}, \"ok\": {\"type\": \"boolean\"}}, \"required\": [\"tool\", \"ok\"]}";
        ChatResponse r = chat.call(grep(CmfChatOptions.builder().outputSchema(schema).maxTokens(40).build()));
        var doc = new ObjectMapper().readTree(r.getResult().getOutput().getText());
        assertThat(doc.get("tool").isTextual()).as(doc.toString()).isTrue();
        assertThat(doc.get("ok").isBoolean()).as(doc.toString()).isTrue();
        assertThat(r.getResult().getOutput().getText()).isEqualTo(model.newChat().withJsonSchema(schema)
                .complete(GREP, Sampling.greedy().withMaxTokens(40)).text());
    }

    @Test void aRequiredToolIsCalledAndItsResultGoesBackToTheTemplate() throws Exception {
        ChatOptions required = CmfChatOptions.builder().toolCallbacks(MANUAL).toolChoice(Chat.ToolChoice.REQUIRED).maxTokens(100).build();
        ChatResponse r = chat.call(grep(required));
        assertThat(r.hasToolCalls()).isTrue();
        assertThat(r.getResult().getMetadata().getFinishReason()).isEqualTo("TOOL_CALLS");
        AssistantMessage.ToolCall call = r.getResult().getOutput().getToolCalls().getFirst();
        assertThat(call.name()).isEqualTo("get_manual");
        assertThat(new ObjectMapper().readTree(call.arguments()).get("command").isTextual()).as(call.arguments()).isTrue();
        assertThat(r.getResult().getOutput().getText()).isBlank();

        List<ChatResponse> streamed = chat.stream(grep(required)).collectList().block(Duration.ofSeconds(120));
        assertThat(streamed.getLast().getResult().getOutput().getToolCalls()).singleElement()
                .satisfies(c -> assertThat(c.name()).isEqualTo("get_manual"));
        for (ChatResponse p : streamed.subList(0, streamed.size() - 1))
            assertThat(p.getResult().getOutput().getText()).as("a call is never shown as text").doesNotContain("tool_call");

        // the call and its result go back: the template renders both, the reply is the API's for the same conversation
        List<org.springframework.ai.chat.messages.Message> turn = List.of(new UserMessage("What does grep do?"), r.getResult().getOutput(),
                ToolResponseMessage.builder().responses(List.of(new ToolResponseMessage.ToolResponse(call.id(), call.name(),
                        MANUAL.call(call.arguments())))).build());
        ChatResponse answer = chat.call(new Prompt(turn, CmfChatOptions.builder().toolCallbacks(MANUAL).maxTokens(12).build()));
        dev.cmf4j.api.ToolCall apiCall = new dev.cmf4j.api.ToolCall(call.id(), call.name(), call.arguments());
        List<Message> same = List.of(GREP.getFirst(), Message.assistant("", List.of(apiCall)),
                Message.toolResult(apiCall, "grep - print lines that match patterns"));
        Chat withTools = model.newChat().withTools(List.of(new Tool("get_manual", "Reads a command's manual page", SCHEMA)));
        assertThat(withTools.render(same)).contains("grep - print lines that match patterns");
        assertThat(answer.getResult().getOutput().getText()).isEqualTo(withTools.complete(same, Sampling.greedy().withMaxTokens(12)).text());
    }

    @Test void theAutoConfigurationMakesAChatModelFromModelPathAndClosesItsModel() {
        String want = model.newChat().complete(GREP, Sampling.greedy().withMaxTokens(8)).text();
        AtomicReference<CmfModel> opened = new AtomicReference<>();
        ApplicationContextRunner runner = new ApplicationContextRunner().withConfiguration(AutoConfigurations.of(CmfAutoConfiguration.class));
        runner.withPropertyValues("cmf4j.model-path=" + bundled(), "cmf4j.max-tokens=8", "cmf4j.context-length=256", "cmf4j.threads=1")
                .run(ctx -> {
                    assertThat(ctx).hasNotFailed().hasSingleBean(ChatModel.class).hasSingleBean(CmfModel.class);
                    assertThat(ctx.getBean(ChatModel.class).call("What does grep do?")).isEqualTo(want);
                    opened.set(ctx.getBean(CmfModel.class));
                });
        assertThat(opened.get().isClosed()).as("closed with the context").isTrue();
        runner.run(ctx -> assertThat(ctx).hasNotFailed().doesNotHaveBean(ChatModel.class).doesNotHaveBean(CmfModel.class));
    }
}
