package dev.cmf4j.server;

import java.time.Duration;

/**
 * How the server listens and what it admits.
 *
 * @param apiKey       the bearer key every endpoint but /health needs; null for none
 * @param maxBodyBytes larger request bodies are refused (400)
 * @param timeout      a request's limit from arrival to its last token
 * @param maxChoices   the largest {@code n}
 * @param stateDir     where {@code /slots/{id}?action=save|restore} write and read state files; null: the endpoint is off
 */
public record ServerConfig(String host, int port, String apiKey, int maxBodyBytes, Duration timeout, int maxChoices,
                           java.nio.file.Path stateDir) {
    public ServerConfig {
        if (port < 0 || port > 65535) throw new IllegalArgumentException("port must be in 0..65535, got " + port);
        if (maxBodyBytes < 1) throw new IllegalArgumentException("max body must be >= 1 byte");
        if (maxChoices < 1) throw new IllegalArgumentException("max choices must be >= 1");
    }

    /** Loopback, no key, 4 MiB bodies, 10 minutes, n up to 16. */
    public static ServerConfig local(int port) {
        return new ServerConfig("127.0.0.1", port, null, 4 << 20, Duration.ofMinutes(10), 16, null);
    }

    public ServerConfig withApiKey(String key) { return new ServerConfig(host, port, key, maxBodyBytes, timeout, maxChoices, stateDir); }

    public ServerConfig withMaxBodyBytes(int b) { return new ServerConfig(host, port, apiKey, b, timeout, maxChoices, stateDir); }

    public ServerConfig withTimeout(Duration t) { return new ServerConfig(host, port, apiKey, maxBodyBytes, t, maxChoices, stateDir); }

    public ServerConfig withStateDir(java.nio.file.Path dir) { return new ServerConfig(host, port, apiKey, maxBodyBytes, timeout, maxChoices, dir); }
}
