package dev.cmf4j.chat;

import java.util.ArrayList;
import java.util.List;

/**
 * Splits one choice's streamed text into content and tool calls as it arrives: text that may begin a
 * {@code <tool_call>} tag is held back, a call is released whole once its closing tag arrives (a block that does not
 * parse is released as text, never dropped). Used by the server's SSE chunks and the library's streamed replies.
 */
public final class ToolCallStream {
    /** What a piece of text released. */
    public record Out(String content, List<ToolCall> calls) {}

    private final StringBuilder pending = new StringBuilder();
    private boolean inCall;
    private int calls;

    public Out push(String piece) {
        pending.append(piece);
        StringBuilder content = new StringBuilder();
        List<ToolCall> done = new ArrayList<>();
        while (true) {
            if (!inCall) {
                int open = pending.indexOf(ToolCallParser.OPEN);
                if (open >= 0) {
                    content.append(pending, 0, open);
                    pending.delete(0, open + ToolCallParser.OPEN.length());
                    inCall = true;
                    continue;
                }
                int release = pending.length() - heldBack();
                content.append(pending, 0, release);
                pending.delete(0, release);
                break;
            }
            int close = pending.indexOf(ToolCallParser.CLOSE);
            if (close < 0) break;
            block(pending.substring(0, close), true, content, done);
            pending.delete(0, close + ToolCallParser.CLOSE.length());
            inCall = false;
        }
        return new Out(content.toString(), done);
    }

    /** The rest at the end (an unterminated call is parsed if its JSON is complete). */
    public Out finish() {
        StringBuilder content = new StringBuilder();
        List<ToolCall> done = new ArrayList<>();
        if (inCall) block(pending.toString(), false, content, done);
        else content.append(pending);
        pending.setLength(0);
        inCall = false;
        return new Out(content.toString(), done);
    }

    /** Calls released so far. */
    public int calls() { return calls; }

    private void block(String body, boolean closed, StringBuilder content, List<ToolCall> done) {
        String raw = ToolCallParser.OPEN + body + (closed ? ToolCallParser.CLOSE : "");
        ToolCallParser.Result r = ToolCallParser.parse(raw);
        if (r.hasCalls() && r.errors().isEmpty()) {
            done.addAll(r.calls());
            calls += r.calls().size();
        } else {
            content.append(raw);
        }
    }

    /** Characters at the end that could begin the opening tag. */
    private int heldBack() {
        String open = ToolCallParser.OPEN;
        for (int k = Math.min(open.length() - 1, pending.length()); k > 0; k--)
            if (pending.substring(pending.length() - k).equals(open.substring(0, k))) return k;
        return 0;
    }
}
