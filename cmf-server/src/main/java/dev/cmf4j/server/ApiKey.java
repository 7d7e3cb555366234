package dev.cmf4j.server;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The server's bearer key. Both sides are hashed first and the digests compared with {@link MessageDigest#isEqual}
 * (constant time for equal lengths), so neither the key's bytes nor its length leak through timing.
 */
final class ApiKey {
    private final byte[] digest;

    ApiKey(String key) {
        if (key == null || key.isBlank()) throw new IllegalArgumentException("the API key is empty");
        this.digest = sha256(key);
    }

    /** Whether an {@code Authorization} header value is {@code Bearer <this key>}. */
    boolean accepts(String authorization) {
        if (authorization == null || !authorization.regionMatches(true, 0, "Bearer ", 0, 7)) return false;
        return MessageDigest.isEqual(digest, sha256(authorization.substring(7).strip()));
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }
}
