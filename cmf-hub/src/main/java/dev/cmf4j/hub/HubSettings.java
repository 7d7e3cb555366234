package dev.cmf4j.hub;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;

/**
 * Where and how to reach the Hub, read from the same environment variables huggingface_hub reads:
 * {@code HF_ENDPOINT} (default https://huggingface.co), {@code HF_TOKEN} (else the token file
 * {@code HF_TOKEN_PATH} or {@code $HF_HOME/token} that {@code hf auth login} writes), {@code HF_HUB_CACHE}
 * (else {@code $HF_HOME/hub}, else {@code $XDG_CACHE_HOME/huggingface/hub}, else
 * {@code ~/.cache/huggingface/hub}) and {@code HF_HUB_OFFLINE}.
 *
 * @param connections  parallel HTTP requests (whole small files and chunks of large ones)
 * @param chunkBytes   a file of at least two chunks is fetched as ranged chunks of this size
 * @param retries      attempts in a row that bring no new byte before a transfer is given up
 * @param stallTimeout a transfer that receives nothing for this long is cut and retried
 */
public record HubSettings(URI endpoint, String token, Path cache, boolean offline, int connections, long chunkBytes,
                          int retries, Duration stallTimeout) {
    public static final URI DEFAULT_ENDPOINT = URI.create("https://huggingface.co");

    public HubSettings {
        if (!"http".equals(endpoint.getScheme()) && !"https".equals(endpoint.getScheme()))
            throw new HubException("HF_ENDPOINT must be an http(s) URL, not " + endpoint);
        String e = endpoint.toString();
        if (e.endsWith("/")) endpoint = URI.create(e.substring(0, e.length() - 1));
        if (token != null && token.isBlank()) token = null;
        if (connections < 1) throw new IllegalArgumentException("connections must be >= 1");
        if (chunkBytes < 1) throw new IllegalArgumentException("chunkBytes must be >= 1");
        if (retries < 0) throw new IllegalArgumentException("retries must be >= 0");
    }

    /** Settings for a cache folder and endpoint, no token, the default transfer tuning. */
    public static HubSettings of(URI endpoint, Path cache) {
        return new HubSettings(endpoint, null, cache, false, 8, 32L << 20, 5, Duration.ofSeconds(60));
    }

    /** The settings the process environment asks for. */
    public static HubSettings fromEnvironment() { return fromEnvironment(System.getenv()); }

    public static HubSettings fromEnvironment(Map<String, String> env) {
        String home = env.getOrDefault("HOME", System.getProperty("user.home"));
        Path hfHome = set(env, "HF_HOME") ? Path.of(env.get("HF_HOME"))
                : set(env, "XDG_CACHE_HOME") ? Path.of(env.get("XDG_CACHE_HOME"), "huggingface")
                : Path.of(home, ".cache", "huggingface");
        Path cache = set(env, "HF_HUB_CACHE") ? Path.of(env.get("HF_HUB_CACHE")) : hfHome.resolve("hub");
        URI endpoint = set(env, "HF_ENDPOINT") ? URI.create(env.get("HF_ENDPOINT").strip()) : DEFAULT_ENDPOINT;
        String token = set(env, "HF_TOKEN") ? env.get("HF_TOKEN").strip() : null;
        if (token == null) {
            Path file = set(env, "HF_TOKEN_PATH") ? Path.of(env.get("HF_TOKEN_PATH")) : hfHome.resolve("token");
            token = readToken(file);
        }
        boolean offline = isTrue(env.get("HF_HUB_OFFLINE"));
        return of(endpoint, cache).withToken(token).withOffline(offline);
    }

    public HubSettings withEndpoint(URI e) { return new HubSettings(e, token, cache, offline, connections, chunkBytes, retries, stallTimeout); }

    public HubSettings withCache(Path c) { return new HubSettings(endpoint, token, c, offline, connections, chunkBytes, retries, stallTimeout); }

    public HubSettings withToken(String t) { return new HubSettings(endpoint, t, cache, offline, connections, chunkBytes, retries, stallTimeout); }

    public HubSettings withOffline(boolean o) { return new HubSettings(endpoint, token, cache, o, connections, chunkBytes, retries, stallTimeout); }

    public HubSettings withConnections(int n) { return new HubSettings(endpoint, token, cache, offline, n, chunkBytes, retries, stallTimeout); }

    public HubSettings withChunkBytes(long b) { return new HubSettings(endpoint, token, cache, offline, connections, b, retries, stallTimeout); }

    public HubSettings withRetries(int r) { return new HubSettings(endpoint, token, cache, offline, connections, chunkBytes, r, stallTimeout); }

    public HubSettings withStallTimeout(Duration d) { return new HubSettings(endpoint, token, cache, offline, connections, chunkBytes, retries, d); }

    /** Never print the token itself. */
    @Override public String toString() {
        return "HubSettings[endpoint=" + endpoint + ", token=" + (token == null ? "none" : "set") + ", cache=" + cache
                + ", offline=" + offline + ", connections=" + connections + ", chunkBytes=" + chunkBytes + "]";
    }

    private static boolean set(Map<String, String> env, String k) { return env.get(k) != null && !env.get(k).isBlank(); }

    private static boolean isTrue(String v) {
        return v != null && switch (v.strip().toLowerCase(java.util.Locale.ROOT)) {
            case "1", "true", "yes", "on" -> true;
            default -> false;
        };
    }

    private static String readToken(Path file) {
        try {
            return Files.isRegularFile(file) ? Files.readString(file, StandardCharsets.UTF_8).strip() : null;
        } catch (IOException e) {
            return null;        // an unreadable token file is the same as none; a 401 will say to set HF_TOKEN
        }
    }
}
