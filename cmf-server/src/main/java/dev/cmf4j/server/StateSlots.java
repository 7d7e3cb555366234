package dev.cmf4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.cmf4j.model.graph.Overlay;
import dev.cmf4j.runtime.GenerationException;
import dev.cmf4j.runtime.Scheduler;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.regex.Pattern;

/**
 * llama-server's state endpoint, {@code POST /slots/{id}?action=save|restore|erase} with {@code {"filename"}}, over a
 * scheduler that has no fixed slots. A sequence is named by the id of a response this server sent (its first choice,
 * or {@code "choice": i}) or by the scheduler's sequence number ({@code /status}); save writes the state of that
 * sequence, running (as of its last step) or finished and still in the prompt cache; restore puts a file's state into
 * the prompt cache, where the next request whose prompt extends its tokens takes it (the path's id is not used: there
 * is no slot to fill); erase drops a cached sequence. Files live only in the operator's {@code --state-dir}, under
 * names of letters, digits, {@code _ - .} (no directories, no leading dot); without that directory the endpoint
 * answers 501, as llama-server's does without {@code --slot-save-path}.
 */
final class StateSlots {
    private static final Pattern NAME = Pattern.compile("[A-Za-z0-9_][A-Za-z0-9._-]{0,254}");
    /** Response ids remembered for save and erase: the most recent ones. */
    private static final int REMEMBERED = 4096;

    private final Path dir;
    private final ObjectMapper json;
    private final Map<String, long[]> responses = Collections.synchronizedMap(new LinkedHashMap<>(64, 0.75f, true) {
        @Override protected boolean removeEldestEntry(Map.Entry<String, long[]> e) { return size() > REMEMBERED; }
    });

    /** @param dir the state directory (created when missing), or null: the endpoint is off */
    StateSlots(Path dir, ObjectMapper json) {
        this.json = json;
        if (dir == null) {
            this.dir = null;
            return;
        }
        try {
            this.dir = Files.createDirectories(dir).toRealPath();
        } catch (IOException e) {
            throw new IllegalArgumentException("--state-dir " + dir + ": " + e.getMessage(), e);
        }
    }

    /** Notes which scheduler sequences a response's choices ran as. */
    void remember(String responseId, long[] sequences) { if (dir != null) responses.put(responseId, sequences); }

    /** One call of the endpoint; {@code body} is null when the request had none. */
    ObjectNode handle(ServedModel m, String id, String action, JsonNode body, StringBuilder detail) throws Exception {
        if (dir == null) throw new ApiError(501, "not_supported_error", null, "not_supported",
                "saving and restoring sequence state is off: start the server with --state-dir DIR");
        if (m.replicas().size() > 1) throw new ApiError(501, "not_supported_error", null, "not_supported",
                "saving and restoring sequence state is off with several replicas (each keeps its own prompt cache)");
        Scheduler scheduler = m.replicas().getFirst().scheduler();
        if (body != null && !body.isObject()) throw ApiError.badRequest(null, "the request body must be a JSON object");
        CompletionRequest.Fields f = new CompletionRequest.Fields(body == null ? json.createObjectNode() : body);
        if (action == null) throw ApiError.badRequest("action", "give ?action=save, restore or erase");
        long t0 = System.nanoTime();
        ObjectNode o = json.createObjectNode();
        switch (action) {
            case "save" -> {
                Path file = file(f);
                long seq = sequence(id, f);
                Scheduler.SavedState st = call(() -> scheduler.exportState(seq));
                write(file, st.snapshot());
                o.put("id_slot", seq).put("id", id).put("filename", file.getFileName().toString())
                        .put("n_saved", st.tokens()).put("n_written", st.snapshot().length);
                o.putObject("timings").put("save_ms", (System.nanoTime() - t0) / 1e6);
                detail.append("save seq=").append(seq).append(" tokens=").append(st.tokens()).append(" bytes=").append(st.snapshot().length);
            }
            case "restore" -> {
                Path file = file(f);
                if (!Files.isRegularFile(file, LinkOption.NOFOLLOW_LINKS))
                    throw new ApiError(404, "invalid_request_error", "filename", "not_found",
                            "no state file '" + file.getFileName() + "' in the server's state directory");
                byte[] bytes;   // opened without following a link, should one replace the file after the check
                try (var in = java.nio.channels.Channels.newInputStream(Files.newByteChannel(file,
                        java.util.Set.of(java.nio.file.StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)))) {
                    bytes = in.readAllBytes();
                }
                Overlay overlay = CompletionRequest.overlay(f, m, null);
                Scheduler.SavedState st;
                try {
                    st = call(() -> scheduler.importState(bytes, overlay));
                } catch (GenerationException.BadInput refused) {
                    throw ApiError.badRequest("filename", file.getFileName() + ": " + refused.getMessage());
                }
                o.put("id_slot", st.id()).put("filename", file.getFileName().toString())
                        .put("n_restored", st.tokens()).put("n_read", bytes.length);
                o.putObject("timings").put("restore_ms", (System.nanoTime() - t0) / 1e6);
                detail.append("restore seq=").append(st.id()).append(" tokens=").append(st.tokens()).append(" bytes=").append(bytes.length);
            }
            case "erase" -> {
                long seq = sequence(id, f);
                int n = call(() -> scheduler.erase(seq));
                o.put("id_slot", seq).put("id", id).put("n_erased", n);
                detail.append("erase seq=").append(seq);
            }
            default -> throw ApiError.badRequest("action", "action must be save, restore or erase, got '" + action + "'");
        }
        return o;
    }

    /** The body's {@code filename} inside the state directory; a 400 for anything that is not a plain name there. */
    private Path file(CompletionRequest.Fields f) {
        String name = f.text("filename");
        if (name == null) throw ApiError.badRequest("filename", "filename is required: the state file's name in the server's state directory");
        Path p = dir.resolve(name).normalize();
        if (!NAME.matcher(name).matches() || name.contains("..") || !dir.equals(p.getParent()))
            throw ApiError.badRequest("filename", "filename must be a plain name of 1-255 letters, digits, '_', '-' and '.',"
                    + " not starting with '.' and without '..' (no directories), got '" + name + "'");
        return p;
    }

    /** The scheduler's sequence a path id names: a number, or a remembered response's choice. */
    private long sequence(String id, CompletionRequest.Fields f) {
        if (id.matches("[0-9]{1,18}")) return Long.parseLong(id);
        long[] seqs = responses.get(id);
        if (seqs == null) throw new ApiError(404, "invalid_request_error", "id", "not_found", "no sequence '" + id
                + "': give the id of a response this server sent (chatcmpl-..., cmpl-...) or a sequence number from /status");
        Integer choice = f.integer("choice", 0, seqs.length - 1);
        return seqs[choice == null ? 0 : choice];
    }

    /** Written beside, then moved in place: a failed save never leaves half a file under the name. */
    private void write(Path file, byte[] bytes) throws IOException {
        if (Files.isDirectory(file, LinkOption.NOFOLLOW_LINKS))
            throw new ApiError(409, "invalid_request_error", "filename", "conflict", "'" + file.getFileName() + "' is a directory");
        Path tmp = Files.createTempFile(dir, ".saving-", ".part");
        try {
            Files.write(tmp, bytes);
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
        } catch (IOException | RuntimeException e) {
            Files.deleteIfExists(tmp);
            throw e;
        }
    }

    @FunctionalInterface
    private interface SchedulerCall<T> { T run() throws InterruptedException; }

    /** A scheduler call with its refusals as API errors. */
    private static <T> T call(SchedulerCall<T> c) throws InterruptedException {
        try {
            return c.run();
        } catch (NoSuchElementException e) {
            throw new ApiError(404, "invalid_request_error", "id", "not_found", e.getMessage());
        } catch (IllegalStateException e) {
            throw new ApiError(409, "invalid_request_error", "id", "conflict", e.getMessage());
        } catch (UnsupportedOperationException e) {
            throw new ApiError(501, "not_supported_error", null, "not_supported", e.getMessage());
        }
    }
}
