package example;

import dev.cmf4j.api.*;
import java.nio.file.Path;
import java.util.List;

public class Hello {
    public static void main(String[] args) {
        try (CmfModel model = Cmf.open(Path.of(args.length > 0 ? args[0] : "models/default.cmf"))) {
            Reply reply = model.newChat().stream(List.of(Message.user("What does tar do?")),
                    Sampling.greedy().withMaxTokens(40), System.out::print);
            System.out.println("\n[" + reply.tokens().length + " tokens, " + reply.finish() + "]");
        }
    }
}
