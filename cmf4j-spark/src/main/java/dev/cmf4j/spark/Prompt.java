package dev.cmf4j.spark;

import dev.cmf4j.api.InferenceException;
import dev.cmf4j.api.Message;
import org.apache.spark.sql.Row;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** One row's input, taken out of Spark's row on the task thread: a text prompt or a conversation. */
sealed interface Prompt {

    /** Text continued as it is (tokenized with the model's special tokens, as {@code cmf run} without {@code --chat}). */
    record Text(String text) implements Prompt {}

    /** Messages rendered by the model's chat template. */
    record Messages(List<Message> messages) implements Prompt {}

    /** The value of a string column, or null for a null cell. */
    static Prompt ofText(String text) { return text == null ? null : new Text(text); }

    /**
     * The value of an {@code array<struct<role, content>>} column (null for a null cell).
     *
     * @throws InferenceException (BAD_INPUT) a null message, an unknown role or a null content
     */
    static Prompt ofMessages(List<Row> rows) {
        if (rows == null) return null;
        List<Message> out = new ArrayList<>(rows.size());
        for (Row r : rows) {
            if (r == null) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "a message is null");
            String role = r.getAs("role"), content = r.getAs("content");
            if (content == null) throw new InferenceException(InferenceException.Kind.BAD_INPUT, "a " + role + " message has no content");
            out.add(switch (role == null ? "" : role.toLowerCase(Locale.ROOT)) {
                case "system" -> Message.system(content);
                case "user" -> Message.user(content);
                case "assistant" -> Message.assistant(content);
                default -> throw new InferenceException(InferenceException.Kind.BAD_INPUT,
                        "a message's role must be system, user or assistant, got " + role);
            });
        }
        return new Messages(out);
    }
}
