package dev.cmf4j.testkit;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A local stand-in for the Hugging Face Hub (tests only), speaking its URL scheme and headers:
 * {@code /api/models/{repo}/revision/{rev}} (the commit), {@code /api/models/{repo}/tree/{commit}?recursive=true}
 * (paged with {@code Link: rel="next"}), and {@code /{repo}/resolve/{rev}/{path}}: a small file is answered
 * directly with its git blob id as ETag, an LFS file (.safetensors, .gguf, .bin) with a 302 to a second server on
 * another port (the CDN) and {@code X-Linked-Etag}/{@code X-Linked-Size}. Both honour {@code Range}. Errors carry
 * {@code X-Error-Code} as the Hub's do (401 RepoNotFound for a repository it will not show, 403 GatedRepo, 404
 * RevisionNotFound/EntryNotFound). Faults on demand: a response cut after some bytes, a stall, a flipped byte.
 * It speaks just enough HTTP/1.1 itself, one request per connection, so that a cut really drops the connection
 * (the JDK's HttpServer keeps it open after a short body).
 */
public final class FakeHub implements AutoCloseable {
    /** One request as the servers saw it. */
    public record Request(String server, String path, String range, String authorization) {}

    /** A repository at one commit; {@code tags} are extra revision names for it. */
    public final class Repo {
        final String id;
        final String commit;
        final Map<String, byte[]> files = new LinkedHashMap<>();
        final Map<String, String> ids = new ConcurrentHashMap<>();       // path -> sha256 (LFS) or git blob id, computed once
        final List<String> tags = new ArrayList<>();
        boolean gated;

        Repo(String id) {
            this.id = id;
            this.commit = hex(digest("SHA-1", ("commit " + id + " " + repos.size()).getBytes(StandardCharsets.UTF_8)));
        }

        public Repo file(String path, byte[] content) {
            files.put(path, content);
            String id = lfs(path) ? sha256(content) : gitOid(content);
            ids.put(path, id);
            if (lfs(path)) {
                blobs.put(id, content);
                blobPaths.put(id, path);
            }
            return this;
        }

        public Repo file(String path, Path source) throws IOException { return file(path, Files.readAllBytes(source)); }

        public Repo tag(String name) {
            tags.add(name);
            return this;
        }

        /** Refuses every download without a token (403 GatedRepo), as a gated repository whose terms were not accepted. */
        public Repo gated() {
            gated = true;
            return this;
        }

        public String commit() { return commit; }
    }

    private final Server hub, cdn;
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "fake-hub");
        t.setDaemon(true);
        return t;
    });
    private final Map<String, Repo> repos = new ConcurrentHashMap<>();
    private final Map<String, byte[]> blobs = new ConcurrentHashMap<>();         // sha256 -> content (LFS files)
    private final Map<String, String> blobPaths = new ConcurrentHashMap<>();     // sha256 -> path
    private final Map<String, AtomicLong> served = new ConcurrentHashMap<>();
    private final List<Fault> faults = new CopyOnWriteArrayList<>();
    private final Map<String, int[]> busy = new ConcurrentHashMap<>();         // "hub"/"cdn" -> {status, timesLeft}
    private final Map<String, Long> corrupt = new ConcurrentHashMap<>();         // path -> offset of a flipped byte
    private final List<Request> requests = new CopyOnWriteArrayList<>();
    private volatile String token;
    private volatile int pageSize = 4;

    private FakeHub() throws IOException {
        hub = new Server(this::hub);
        cdn = new Server(this::cdn);
    }

    public static FakeHub start() throws IOException { return new FakeHub(); }

    /** What HF_ENDPOINT should be. */
    public URI endpoint() { return URI.create("http://127.0.0.1:" + hub.port()); }

    public Repo repo(String id) {
        Repo r = new Repo(id);
        repos.put(id, r);
        return r;
    }

    /** From now on every request to the Hub (not the CDN) needs {@code Authorization: Bearer token}. */
    public void requireToken(String t) { token = t; }

    public void pageSize(int n) { pageSize = n; }

    /** A fault for the next {@code times} responses carrying {@code path} from byte {@code from} (-1: from any byte). */
    private static final class Fault {
        final String path;
        final long from, amount;
        final boolean cut;
        int timesLeft;

        Fault(String path, long from, boolean cut, long amount, int times) {
            this.path = path;
            this.from = from;
            this.cut = cut;
            this.amount = amount;
            this.timesLeft = times;
        }
    }

    /**
     * The next {@code times} responses carrying {@code path} stop after {@code afterBytes} body bytes and drop the
     * connection. Faults are used in the order they were added, each until its times are spent.
     */
    public void cut(String path, long afterBytes, int times) { faults.add(new Fault(path, -1, true, afterBytes, times)); }

    /** As {@link #cut(String, long, int)}, only for responses whose range starts at byte {@code from}. */
    public void cutFrom(String path, long from, long afterBytes, int times) { faults.add(new Fault(path, from, true, afterBytes, times)); }

    /** The next {@code times} responses carrying {@code path} send their headers, then nothing for {@code millis}. */
    public void stall(String path, long millis, int times) { faults.add(new Fault(path, -1, false, millis, times)); }

    /** Every response carrying {@code path} has the byte at {@code offset} flipped. */
    public void corrupt(String path, long offset) { corrupt.put(path, offset); }

    /** The next {@code times} requests to {@code server} ("hub" or "cdn") are answered with {@code status} (a 503, say). */
    public void failWith(String server, int status, int times) { busy.put(server, new int[] {status, times}); }

    public void clearFaults() {
        busy.clear();
        faults.clear();
        corrupt.clear();
    }

    /** Body bytes sent for {@code path} since the last {@link #resetCounts}. */
    public long bytesServed(String path) {
        AtomicLong n = served.get(path);
        return n == null ? 0 : n.get();
    }

    public List<Request> requests() { return List.copyOf(requests); }

    public void resetCounts() {
        served.clear();
        requests.clear();
    }

    @Override public void close() {
        hub.close();
        cdn.close();
        pool.shutdownNow();
    }

    // ---- HTTP/1.1, one request per connection ----------------------------------------------------------

    private interface Handler {
        void handle(Exchange x) throws IOException;
    }

    private final class Server {
        final ServerSocket socket;

        Server(Handler h) throws IOException {
            socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
            pool.submit(() -> {
                while (!socket.isClosed()) {
                    Socket c;
                    try {
                        c = socket.accept();
                    } catch (IOException e) {
                        return;
                    }
                    pool.submit(() -> {
                        try (c; Exchange x = Exchange.read(c)) {
                            if (x != null) h.handle(x);
                        } catch (IOException e) {
                            // the client went away
                        }
                    });
                }
            });
        }

        int port() { return socket.getLocalPort(); }

        void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing a listening socket
            }
        }
    }

    /** One request and its response, in the shape of com.sun.net.httpserver's exchange. */
    private static final class Exchange implements AutoCloseable {
        final URI uri;
        final Headers request;
        final Headers response = new Headers();
        final OutputStream out;

        Exchange(URI uri, Headers request, OutputStream out) {
            this.uri = uri;
            this.request = request;
            this.out = out;
        }

        static Exchange read(Socket c) throws IOException {
            InputStream in = new BufferedInputStream(c.getInputStream());
            String line = line(in);
            if (line == null || line.isEmpty()) return null;
            Headers h = new Headers();
            for (String l; (l = line(in)) != null && !l.isEmpty(); ) {
                int colon = l.indexOf(':');
                if (colon > 0) h.add(l.substring(0, colon).strip(), l.substring(colon + 1).strip());
            }
            return new Exchange(URI.create(line.split(" ")[1]), h, new BufferedOutputStream(c.getOutputStream()));
        }

        private static String line(InputStream in) throws IOException {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            for (int ch; (ch = in.read()) >= 0; ) {
                if (ch == '\n') return b.toString(StandardCharsets.ISO_8859_1).stripTrailing();
                b.write(ch);
            }
            return b.size() == 0 ? null : b.toString(StandardCharsets.ISO_8859_1);
        }

        URI getRequestURI() { return uri; }

        Headers getRequestHeaders() { return request; }

        Headers getResponseHeaders() { return response; }

        /** Status line and headers; {@code length} -1 means no body. */
        void sendResponseHeaders(int status, long length) throws IOException {
            StringBuilder b = new StringBuilder("HTTP/1.1 ").append(status).append(status < 300 ? " OK" : status < 400 ? " Found" : " Error").append("\r\n");
            response.all.forEach((k, vs) -> vs.forEach(v -> b.append(k).append(": ").append(v).append("\r\n")));
            b.append("Content-Length: ").append(Math.max(0, length)).append("\r\nConnection: close\r\n\r\n");
            out.write(b.toString().getBytes(StandardCharsets.ISO_8859_1));
            out.flush();
        }

        OutputStream getResponseBody() { return out; }

        @Override public void close() throws IOException { out.flush(); }
    }

    /** Header names are case-insensitive. */
    private static final class Headers {
        final Map<String, List<String>> all = new LinkedHashMap<>();

        void add(String k, String v) { all.computeIfAbsent(k, x -> new ArrayList<>()).add(v); }

        String getFirst(String k) {
            for (var e : all.entrySet()) if (e.getKey().equalsIgnoreCase(k)) return e.getValue().getFirst();
            return null;
        }
    }

    // ---- the Hub ----------------------------------------------------------------------------------------

    private static final Pattern API = Pattern.compile("/api/models/([^/]+/[^/]+)/(revision|tree)/([^/?]+)");
    private static final Pattern RESOLVE = Pattern.compile("/([^/]+/[^/]+)/resolve/([^/]+)/(.+)");

    private void hub(Exchange x) throws IOException {
        try (x) {
            String raw = x.getRequestURI().getRawPath();
            requests.add(new Request("hub", raw, x.getRequestHeaders().getFirst("Range"), x.getRequestHeaders().getFirst("Authorization")));
            if (busy("hub", x)) return;
            if (token != null && !("Bearer " + token).equals(x.getRequestHeaders().getFirst("Authorization"))) {
                error(x, 401, "RepoNotFound", "Repository not found");
                return;
            }
            Matcher api = API.matcher(raw), res = RESOLVE.matcher(raw);
            if (api.matches()) {
                Repo r = repos.get(api.group(1));
                if (r == null) {     // the Hub answers 401 to anonymous requests, so as not to tell what exists
                    error(x, authorized(x) ? 404 : 401, "RepoNotFound", "Repository not found");
                    return;
                }
                String rev = decode(api.group(3));
                if (!r.commit.equals(rev) && !rev.equals("main") && !r.tags.contains(rev)) {
                    error(x, 404, "RevisionNotFound", "Invalid rev id: " + rev);
                    return;
                }
                if (api.group(2).equals("revision")) json(x, "{\"id\":\"" + r.id + "\",\"sha\":\"" + r.commit + "\",\"siblings\":["
                        + String.join(",", r.files.keySet().stream().map(p -> "{\"rfilename\":\"" + p + "\"}").toList()) + "]}", null);
                else tree(x, r);
                return;
            }
            if (res.matches()) {
                Repo r = repos.get(res.group(1));
                String rev = decode(res.group(2)), path = decode(res.group(3));
                if (r == null) {
                    error(x, authorized(x) ? 404 : 401, "RepoNotFound", "Repository not found");
                } else if (!r.commit.equals(rev) && !rev.equals("main") && !r.tags.contains(rev)) {
                    error(x, 404, "RevisionNotFound", "Invalid rev id: " + rev);
                } else if (r.gated && !authorized(x)) {
                    error(x, 403, "GatedRepo", "Access to model " + r.id + " is restricted. You must have access to it and be authenticated to access it.");
                } else if (!r.files.containsKey(path)) {
                    error(x, 404, "EntryNotFound", "Entry not found");
                } else if (lfs(path)) {
                    byte[] c = r.files.get(path);
                    String sha = r.ids.get(path);
                    x.getResponseHeaders().add("X-Repo-Commit", r.commit);
                    x.getResponseHeaders().add("X-Linked-Etag", "\"" + sha + "\"");
                    x.getResponseHeaders().add("X-Linked-Size", Long.toString(c.length));
                    x.getResponseHeaders().add("ETag", "\"" + gitOid(pointer(sha, c.length)) + "\"");
                    x.getResponseHeaders().add("Location", "http://127.0.0.1:" + cdn.port() + "/repos/" + sha
                            + "?response-content-disposition=attachment");
                    x.sendResponseHeaders(302, -1);
                } else {
                    x.getResponseHeaders().add("X-Repo-Commit", r.commit);
                    x.getResponseHeaders().add("ETag", "\"" + r.ids.get(path) + "\"");
                    body(x, path, r.files.get(path));
                }
                return;
            }
            error(x, 404, null, "no route " + raw);
        }
    }

    private void tree(Exchange x, Repo r) throws IOException {
        String q = x.getRequestURI().getRawQuery();
        int from = 0;
        if (q != null) for (String kv : q.split("&")) if (kv.startsWith("cursor=")) from = Integer.parseInt(kv.substring(7));
        List<String> entries = new ArrayList<>();
        if (r.files.keySet().stream().anyMatch(p -> p.contains("/"))) entries.add("{\"type\":\"directory\",\"oid\":\"" + "0".repeat(40) + "\",\"size\":0,\"path\":\"sub\"}");
        for (var e : r.files.entrySet()) {
            byte[] c = e.getValue();
            if (lfs(e.getKey())) {
                String sha = r.ids.get(e.getKey());
                entries.add("{\"type\":\"file\",\"oid\":\"" + gitOid(pointer(sha, c.length)) + "\",\"size\":" + c.length + ",\"path\":\""
                        + e.getKey() + "\",\"lfs\":{\"oid\":\"" + sha + "\",\"size\":" + c.length + ",\"pointerSize\":134}}");
            } else {
                entries.add("{\"type\":\"file\",\"oid\":\"" + r.ids.get(e.getKey()) + "\",\"size\":" + c.length + ",\"path\":\"" + e.getKey() + "\"}");
            }
        }
        int to = Math.min(entries.size(), from + pageSize);
        String next = to < entries.size() ? "<" + endpoint() + x.getRequestURI().getRawPath() + "?recursive=true&cursor=" + to + ">; rel=\"next\"" : null;
        json(x, "[" + String.join(",", entries.subList(from, to)) + "]", next);
    }

    // ---- the CDN ----------------------------------------------------------------------------------------

    private void cdn(Exchange x) throws IOException {
        try (x) {
            String raw = x.getRequestURI().getRawPath();
            requests.add(new Request("cdn", raw, x.getRequestHeaders().getFirst("Range"), x.getRequestHeaders().getFirst("Authorization")));
            if (busy("cdn", x)) return;
            String sha = raw.substring(raw.lastIndexOf('/') + 1);
            String path = blobPaths.get(sha);
            byte[] c = blobs.get(sha);
            if (c == null) {
                error(x, 404, null, "no such object");
                return;
            }
            x.getResponseHeaders().add("ETag", "\"" + sha + "\"");
            body(x, path, c);
        }
    }

    // ---- bodies, ranges, faults ------------------------------------------------------------------------

    private void body(Exchange x, String path, byte[] content) throws IOException {
        long start = 0, end = content.length - 1;
        String range = x.getRequestHeaders().getFirst("Range");
        boolean partial = false;
        if (range != null) {
            Matcher m = Pattern.compile("bytes=(\\d+)-(\\d*)").matcher(range);
            if (m.matches()) {
                start = Long.parseLong(m.group(1));
                if (!m.group(2).isEmpty()) end = Math.min(end, Long.parseLong(m.group(2)));
                if (start > end) {
                    x.getResponseHeaders().add("Content-Range", "bytes */" + content.length);
                    x.sendResponseHeaders(416, -1);
                    return;
                }
                partial = true;
            }
        }
        x.getResponseHeaders().add("Accept-Ranges", "bytes");
        if (partial) x.getResponseHeaders().add("Content-Range", "bytes " + start + "-" + end + "/" + content.length);
        long len = end - start + 1;
        x.sendResponseHeaders(partial ? 206 : 200, len);
        Fault f = take(path, start);
        if (f != null && !f.cut) sleep(f.amount);
        long limit = f != null && f.cut ? Math.min(len, f.amount) : len;
        Long flip = corrupt.get(path);
        byte[] out = java.util.Arrays.copyOfRange(content, (int) start, (int) (start + limit));
        if (flip != null && flip >= start && flip < start + limit) out[(int) (flip - start)] ^= 0x5a;
        OutputStream os = x.getResponseBody();
        for (int off = 0; off < out.length; off += 16384) {
            int n = Math.min(16384, out.length - off);
            os.write(out, off, n);
            os.flush();
            served.computeIfAbsent(path, k -> new AtomicLong()).addAndGet(n);
        }
        // a cut response ends here: its connection closes with fewer bytes than Content-Length
    }

    private boolean busy(String server, Exchange x) throws IOException {
        int[] b;
        synchronized (busy) {
            b = busy.get(server);
            if (b == null || b[1] <= 0) return false;
            b[1]--;
        }
        error(x, b[0], null, "Service Unavailable");
        return true;
    }

    private static boolean authorized(Exchange x) { return x.getRequestHeaders().getFirst("Authorization") != null; }

    private synchronized Fault take(String path, long start) {
        for (Fault f : faults)
            if (f.path.equals(path) && (f.from < 0 || f.from == start) && f.timesLeft > 0) {
                f.timesLeft--;
                return f;
            }
        return null;
    }

    private static void error(Exchange x, int status, String code, String message) throws IOException {
        if (code != null) x.getResponseHeaders().add("X-Error-Code", code);
        x.getResponseHeaders().add("X-Error-Message", message);
        byte[] b = ("{\"error\":\"" + message + "\"}").getBytes(StandardCharsets.UTF_8);
        x.getResponseHeaders().add("Content-Type", "application/json");
        x.sendResponseHeaders(status, b.length);
        x.getResponseBody().write(b);
    }

    private static void json(Exchange x, String body, String link) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        x.getResponseHeaders().add("Content-Type", "application/json");
        if (link != null) x.getResponseHeaders().add("Link", link);
        x.sendResponseHeaders(200, b.length);
        x.getResponseBody().write(b);
    }

    private static boolean lfs(String path) {
        String p = path.toLowerCase(Locale.ROOT);
        return p.endsWith(".safetensors") || p.endsWith(".gguf") || p.endsWith(".bin");
    }

    private static byte[] pointer(String sha, long size) {
        return ("version https://git-lfs.github.com/spec/v1\noid sha256:" + sha + "\nsize " + size + "\n").getBytes(StandardCharsets.UTF_8);
    }

    /** git's blob id: sha1 of "blob SIZE\0" + content. */
    public static String gitOid(byte[] content) {
        byte[] head = ("blob " + content.length + "\0").getBytes(StandardCharsets.US_ASCII);
        byte[] all = new byte[head.length + content.length];
        System.arraycopy(head, 0, all, 0, head.length);
        System.arraycopy(content, 0, all, head.length, content.length);
        return hex(digest("SHA-1", all));
    }

    public static String sha256(byte[] content) { return hex(digest("SHA-256", content)); }

    private static byte[] digest(String alg, byte[] b) {
        try {
            return MessageDigest.getInstance(alg).digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String hex(byte[] b) { return HexFormat.of().formatHex(b); }

    private static String decode(String s) { return URLDecoder.decode(s.replace("+", "%2B"), StandardCharsets.UTF_8); }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
