package dev.cmf4j.cli;

import dev.cmf4j.model.Model;
import dev.cmf4j.runtime.Chat;
import dev.cmf4j.runtime.GenerationException;
import dev.cmf4j.runtime.Generator;
import dev.cmf4j.runtime.Sampler;
import dev.cmf4j.runtime.SamplingParams;
import dev.cmf4j.runtime.Session;
import dev.cmf4j.runtime.TextCodec;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;
import picocli.CommandLine.Model.CommandSpec;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.Callable;

/** {@code cmf chat [FILE]}: an interactive conversation; {@code /reset} forgets it, {@code /exit} leaves. */
@Command(name = "chat", mixinStandardHelpOptions = true,
        description = {"Talk with a model: each line you type is a user message; replies stream as they are generated.",
                "The conversation is kept (rendered with the model's chat template); /reset starts over, /exit "
                        + "(or end of input) quits. Without FILE, uses the bundled default model."})
public final class ChatCommand implements Callable<Integer> {
    @Spec CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "FILE", description = "the .cmf model (default: the bundled model)")
    Path file;

    @Mixin ModelFile.Overrides overrides;

    @Option(names = "--system", paramLabel = "TEXT", description = "a system message opening the conversation")
    String system;

    @Option(names = "--no-think", description = "pass enable_thinking=false to the chat template (Qwen3)")
    boolean noThink;

    @Option(names = {"-n", "--max-tokens"}, paramLabel = "N", defaultValue = "512", description = "most tokens per reply (default ${DEFAULT-VALUE})")
    int maxTokens;

    @Option(names = "--ctx", paramLabel = "N", defaultValue = "4096", description = "context limit in tokens (default ${DEFAULT-VALUE}, capped by the model)")
    int ctx;

    @Option(names = "--state-in", paramLabel = "F",
            description = "resume the conversation saved in F (by chat --state-out; same model, --o1/--kv settings and skill): "
                    + "its messages and cached state come back, the first line you type continues it")
    Path stateIn;

    @Option(names = "--state-out", paramLabel = "F",
            description = "save the conversation (state snapshot and transcript) to F when the chat ends (/exit or end of input)")
    Path stateOut;

    @Mixin SamplingOptions sampling;

    @Mixin DraftOptions draft;

    @Override public Integer call() throws Exception {
        PrintWriter out = spec.commandLine().getOut();
        try (Model m = overrides.open(file); Model dm = draft.open(m, new dev.cmf4j.backend.cpu.CpuBackend())) {
            TextCodec codec = TextCodec.of(m.file());
            Session session = new Session(m.graph(), ctx);
            session.useOverlay(overrides.overlay(m.graph()));
            SamplingParams params = sampling.params(SamplingParams.defaults());
            Chat chat = new Chat(session, codec, new Sampler(params), maxTokens, noThink ? Map.of("enable_thinking", false) : Map.of());
            if (draft.on()) chat.useDraft(draft.speculation(m, dm, ctx, params));
            if (stateIn != null) {
                if (system != null) throw new IllegalArgumentException("--system starts a new conversation; the one in "
                        + stateIn + " has its own messages (use --system without --state-in)");
                StateFile.load(stateIn, chat::importState);
            } else if (system != null) {
                chat.system(system);
            }
            boolean interactive = System.console() != null;
            if (interactive) out.println("chatting with " + m.spec().archName() + " (" + m.file().label() + "); /reset to start over, /exit to quit"
                    + (stateIn == null ? "" : "; resumed " + chat.messages().size() + " messages, " + session.position() + " tokens"));
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (true) {
                if (interactive) { out.print("> "); out.flush(); }
                String line = in.readLine();
                if (line == null) break;
                String cmd = line.strip();
                if (cmd.isEmpty()) continue;
                if (cmd.equals("/exit") || cmd.equals("/quit")) break;
                if (cmd.equals("/reset")) {
                    chat.reset();
                    if (system != null) chat.system(system);
                    out.println("(conversation reset)");
                    out.flush();
                    continue;
                }
                try {
                    chat.reply(line, new Generator.Listener() {
                        @Override public void text(String piece) { out.print(piece); out.flush(); }
                    });
                    out.println();
                } catch (GenerationException.ContextLimit e) {
                    out.println();
                    out.println("(" + e.getMessage() + "; /reset to start over)");
                }
                out.flush();
            }
            if (stateOut != null) StateFile.save(stateOut, chat::exportState);
        }
        return 0;
    }
}
