package dev.cmf4j.hub;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpResponse.BodySubscriber;
import java.net.http.HttpResponse.BodySubscribers;
import java.net.http.HttpResponse.ResponseInfo;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;
import java.util.function.LongConsumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Hub's HTTP API, on the JDK's {@link HttpClient}: a revision resolved to its commit
 * ({@code /api/models/{repo}/revision/{rev}}), the commit's file list ({@code /api/models/{repo}/tree/{commit}},
 * paged through {@code Link} headers) and ranged GETs of {@code /{repo}/resolve/{commit}/{path}} written straight
 * into a file. Redirects are followed here, not by the client, so the token goes only to the endpoint's own
 * origin and never to the CDN a large file redirects to. Every failure becomes a {@link HubException} that says
 * what to do.
 */
final class HubApi {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_REDIRECTS = 10;
    private static final Pattern SHA1 = Pattern.compile("[0-9a-f]{40}");
    private static final Pattern NEXT_LINK = Pattern.compile("<([^>]+)>\\s*;\\s*rel=\"?next\"?");
    private static final Pattern CONTENT_RANGE = Pattern.compile("bytes (\\d+)-(\\d+)/(\\d+|\\*)");
    private static final String USER_AGENT = "cmf4j/" + Objects.requireNonNullElse(HubApi.class.getPackage().getImplementationVersion(), "dev")
            + " (java " + Runtime.version().feature() + ")";
    /** Transfers under way, which the watchdog cuts when they stop receiving bytes (a blocked read has no timeout). */
    private static final Set<FileSink> ACTIVE = ConcurrentHashMap.newKeySet();

    static {
        ScheduledExecutorService watchdog = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "cmf-hub-stall-watchdog");
            t.setDaemon(true);
            return t;
        });
        watchdog.scheduleWithFixedDelay(HubApi::cutStalled, 50, 50, TimeUnit.MILLISECONDS);
    }

    private final HubSettings settings;
    private final HttpClient http;

    HubApi(HubSettings settings) {
        this.settings = settings;
        // HTTP/1.1: parallel ranged requests should be parallel connections, not streams of one
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).followRedirects(HttpClient.Redirect.NEVER)
                .connectTimeout(Duration.ofSeconds(30)).build();
    }

    void close() { http.close(); }

    /** The commit {@code uri}'s revision points at, and the files of the repository there. */
    RepoRevision revision(HubUri uri) {
        String what = uri.toString();
        JsonNode info = getJson(api(uri.repo(), "revision/" + segment(uri.revision())), what);
        String sha = info.path("sha").asText("");
        if (!SHA1.matcher(sha).matches()) throw new HubException(what + ": the Hub answered without a commit hash (\"sha\")");
        List<RepoFile> files = new ArrayList<>();
        URI page = URI.create(api(uri.repo(), "tree/" + sha) + "?recursive=true");
        for (int pages = 0; page != null; pages++) {
            if (pages > 10_000) throw new HubException(what + ": the file list does not end");
            Reply r = getOrFail(page, what);
            JsonNode list = parse(r.response().body(), what);
            if (!list.isArray()) throw new HubException(what + ": the file list is not a JSON array");
            for (JsonNode e : list) {
                if (!"file".equals(e.path("type").asText())) continue;
                JsonNode lfs = e.get("lfs");
                boolean isLfs = lfs != null && lfs.isObject();
                long size = isLfs && lfs.has("size") ? lfs.path("size").asLong(-1) : e.path("size").asLong(-1);
                files.add(new RepoFile(e.path("path").asText(""), size, e.path("oid").asText(""),
                        isLfs ? lfs.path("oid").asText("").toLowerCase(Locale.ROOT) : null));
            }
            page = r.response().headers().firstValue("Link").flatMap(HubApi::nextLink).map(page::resolve).orElse(null);
        }
        return new RepoRevision(uri, sha, files);
    }

    /** What the Hub's first answer said about a downloaded file (before any redirect). */
    record Linked(Optional<String> sha256, Optional<Long> size) {}

    /**
     * GETs bytes {@code [from, to)} of {@code file} at {@code commit} into {@code out} at the same offsets.
     * {@code reached} always holds the offset up to which bytes were written, also when this throws, so a
     * caller resumes from there. A server that ignores the Range header is tolerated (the bytes before
     * {@code from} are skipped).
     *
     * @throws IOException the connection failed or was cut (worth retrying)
     * @throws HubException an answer that retrying will not change (401, 404, ...)
     */
    Linked download(HubUri repo, String commit, RepoFile file, FileChannel out, long from, long to, AtomicLong reached,
                    LongConsumer onBytes) throws IOException {
        reached.set(from);
        URI uri = URI.create(settings.endpoint() + "/" + repo.repo() + "/resolve/" + commit + "/" + path(file.path()));
        String range = "bytes=" + from + "-" + (to - 1);
        Reply r = get(uri, repo.at(commit) + " " + file.path(), range, info -> sink(info, out, from, to, reached, onBytes, file.path()));
        if (reached.get() < to) throw new IOException(file.path() + ": transfer ended at byte " + reached.get() + " of " + to);
        HttpHeaders h = r.firstHop();
        Optional<String> etag = h.firstValue("X-Linked-Etag").map(HubApi::unquote);
        Optional<Long> size = h.firstValue("X-Linked-Size").flatMap(HubApi::parseLong);
        return new Linked(etag, size);
    }

    private BodySubscriber<byte[]> sink(ResponseInfo info, FileChannel out, long from, long to, AtomicLong reached,
                                       LongConsumer onBytes, String name) {
        long start = 0;
        if (info.statusCode() == 206) {
            Matcher m = CONTENT_RANGE.matcher(info.headers().firstValue("Content-Range").orElse(""));
            if (!m.matches() || Long.parseLong(m.group(1)) > from)
                return BodySubscribers.replacing(null);     // no bytes are taken; the caller sees reached < to and retries
            start = Long.parseLong(m.group(1));
        }
        FileSink s = new FileSink(out, from, to, from - start, reached, onBytes, name, settings.stallTimeout());
        ACTIVE.add(s);
        s.whenDone(() -> ACTIVE.remove(s));
        return s;
    }

    private static void cutStalled() {
        long now = System.nanoTime();
        for (FileSink s : ACTIVE) s.cutIfStalled(now);
    }

    // ---- requests ---------------------------------------------------------------------------------------

    /** A final response and the headers of the first one (where the Hub puts X-Linked-*, X-Repo-Commit). */
    private record Reply(HttpResponse<byte[]> response, HttpHeaders firstHop) {}

    private JsonNode getJson(URI uri, String what) {
        return parse(getOrFail(uri, what).response().body(), what);
    }

    /** A GET whose connection failure is final: it becomes a HubException saying the Hub cannot be reached. */
    private Reply getOrFail(URI uri, String what) {
        for (int attempt = 0; ; attempt++) {
            try {
                return get(uri, what, null, null);
            } catch (Busy e) {
                if (attempt >= settings.retries()) throw e.error;
                try {
                    backoff(attempt);
                } catch (InterruptedIOException x) {
                    throw new HubException(what + ": interrupted", x);
                }
            } catch (IOException e) {
                throw HubException.unreachable(what + ": cannot reach the Hub at " + settings.endpoint() + ": " + why(e)
                        + (settings.endpoint().equals(HubSettings.DEFAULT_ENDPOINT) ? "" : " (HF_ENDPOINT)"), e);
            }
        }
    }

    /** A 5xx or 429 answer: worth another try after a pause; {@link #error} is what to say when tries run out. */
    static final class Busy extends IOException {
        final HubException error;

        Busy(HubException error) {
            super(error.getMessage());
            this.error = error;
        }
    }

    /** 0.25 s, 0.5 s, 1 s, ... up to 10 s before attempt {@code attempt + 1}. */
    static void backoff(int attempt) throws InterruptedIOException {
        try {
            Thread.sleep(Math.min(10_000L, 250L << Math.min(6, attempt)));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted");
        }
    }

    /**
     * GET following redirects; {@code okSink} (null: keep the bytes) takes the body of a 200/206. A transport
     * failure or a 5xx/429 answer is an IOException (worth retrying); any other HTTP error a HubException.
     */
    private Reply get(URI uri, String what, String range, Function<ResponseInfo, BodySubscriber<byte[]>> okSink) throws IOException {
        HttpHeaders first = null;
        for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
            HttpRequest.Builder b = HttpRequest.newBuilder(uri).GET().timeout(settings.stallTimeout().plusSeconds(30))
                    .header("User-Agent", USER_AGENT);
            if (range != null) b.header("Range", range);
            if (settings.token() != null && sameOrigin(uri, settings.endpoint())) b.header("Authorization", "Bearer " + settings.token());
            HttpResponse<byte[]> resp;
            try {
                resp = http.send(b.build(), info -> {
                    int c = info.statusCode();
                    if ((c == 200 || c == 206) && okSink != null) return okSink.apply(info);
                    return BodySubscribers.ofByteArray();
                });
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptedIOException("interrupted");
            }
            if (first == null) first = resp.headers();
            int c = resp.statusCode();
            if (c >= 300 && c < 400) {
                Optional<String> loc = resp.headers().firstValue("Location");
                if (loc.isEmpty()) throw new HubException(what + ": HTTP " + c + " without a Location from " + uri);
                uri = uri.resolve(loc.get());
                continue;
            }
            if (c == 200 || c == 206) return new Reply(resp, first);
            if (c >= 500 || c == 429) throw new Busy(error(resp, what));
            throw error(resp, what);
        }
        throw new HubException(what + ": more than " + MAX_REDIRECTS + " redirects");
    }

    private HubException error(HttpResponse<byte[]> r, String what) {
        int c = r.statusCode();
        String code = r.headers().firstValue("X-Error-Code").orElse("");
        String message = r.headers().firstValue("X-Error-Message").orElseGet(() -> text(r.body()));
        String detail = message.isBlank() ? "" : " (" + message + ")";
        String repoUrl = settings.endpoint().toString();
        return switch (c) {
            case 401, 403 -> {
                if (code.equals("GatedRepo"))
                    yield new HubException(what + ": the repository is gated (HTTP " + c + "): accept its conditions on its page at "
                            + repoUrl + " with your account, then set HF_TOKEN to an access token of that account" + detail);
                yield new HubException(what + ": " + (settings.token() == null
                        ? "the Hub refused access (HTTP " + c + "): the repository does not exist, or it is private or gated; "
                          + "set HF_TOKEN to an access token that can read it"
                        : "the Hub refused the token in HF_TOKEN (HTTP " + c + "): the repository does not exist, or that token "
                          + "cannot read it") + detail);
            }
            case 404 -> new HubException(what + ": " + switch (code) {
                case "RevisionNotFound" -> "no such revision (HTTP 404)";
                case "EntryNotFound" -> "no such file in the repository (HTTP 404)";
                case "RepoNotFound" -> "no such repository (HTTP 404)";
                default -> "not found (HTTP 404): no such repository, revision or file";
            } + detail);
            case 429 -> new HubException(what + ": the Hub is rate-limiting requests (HTTP 429); wait and try again"
                    + (settings.token() == null ? " (requests with HF_TOKEN get a higher limit)" : "") + detail);
            default -> new HubException(what + ": HTTP " + c + " from " + r.uri() + detail);
        };
    }

    // ---- helpers ----------------------------------------------------------------------------------------

    private URI api(String repo, String rest) { return URI.create(settings.endpoint() + "/api/models/" + repo + "/" + rest); }

    private static JsonNode parse(byte[] body, String what) {
        try {
            return JSON.readTree(body);
        } catch (IOException e) {
            throw new HubException(what + ": the Hub's answer is not JSON: " + e.getMessage());
        }
    }

    private static boolean sameOrigin(URI a, URI b) {
        return a.getScheme().equalsIgnoreCase(b.getScheme()) && String.valueOf(a.getHost()).equalsIgnoreCase(String.valueOf(b.getHost()))
                && port(a) == port(b);
    }

    private static int port(URI u) { return u.getPort() >= 0 ? u.getPort() : "https".equalsIgnoreCase(u.getScheme()) ? 443 : 80; }

    static Optional<String> nextLink(String header) {
        Matcher m = NEXT_LINK.matcher(header);
        return m.find() ? Optional.of(m.group(1)) : Optional.empty();
    }

    /** One path segment, percent-encoded (a revision like {@code refs/pr/1} becomes one segment). */
    static String segment(String s) {
        StringBuilder b = new StringBuilder();
        for (byte x : s.getBytes(StandardCharsets.UTF_8)) {
            char ch = (char) (x & 0xff);
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || "-._~".indexOf(ch) >= 0) b.append(ch);
            else b.append('%').append(String.format(Locale.ROOT, "%02X", x & 0xff));
        }
        return b.toString();
    }

    /** A file path with each segment encoded and the slashes kept. */
    static String path(String p) {
        StringBuilder b = new StringBuilder();
        for (String s : p.split("/")) b.append(b.isEmpty() ? "" : "/").append(segment(s));
        return b.toString();
    }

    /** An exception's message, or its kind when it has none (the JDK's ConnectException often has none). */
    static String why(Exception e) {
        return e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
    }

    private static String unquote(String etag) {
        String e = etag.strip();
        if (e.startsWith("W/")) e = e.substring(2);
        if (e.length() >= 2 && e.startsWith("\"") && e.endsWith("\"")) e = e.substring(1, e.length() - 1);
        return e.toLowerCase(Locale.ROOT);
    }

    private static Optional<Long> parseLong(String s) {
        try {
            return Optional.of(Long.parseLong(s.strip()));
        } catch (NumberFormatException e) {
            return Optional.empty();
        }
    }

    private static String text(byte[] body) {
        if (body == null || body.length == 0) return "";
        String s = new String(body, 0, Math.min(body.length, 300), StandardCharsets.UTF_8).strip();
        try {
            JsonNode n = JSON.readTree(body);
            if (n.hasNonNull("error")) return n.get("error").asText();
        } catch (IOException ignored) {
            // not JSON: the start of the text is the message
        }
        return s.startsWith("<") ? "" : s.replaceAll("\\s+", " ");
    }
}
