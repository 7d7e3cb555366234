package dev.cmf4j.server;

import io.helidon.http.HttpPrologue;
import io.helidon.webserver.ConnectionContext;
import io.helidon.webserver.http.ServerRequest;
import io.helidon.webserver.http1.Http1ConnectionListener;

/**
 * The connection a request came on, so a non-streamed completion can notice its client leaving. Helidon hands a
 * handler no connection, so this receive listener notes it as each request's prologue is read, on the connection's
 * own thread, which then runs the handler (HTTP/1.1).
 */
final class ClientConnection implements Http1ConnectionListener {
    private static final ThreadLocal<ConnectionContext> CURRENT = new ThreadLocal<>();

    @Override public void prologue(ConnectionContext ctx, HttpPrologue prologue) { CURRENT.set(ctx); }

    /**
     * The connection {@code req} came on, when this thread is that connection's and nothing of a next request is
     * buffered yet (the body has been read); else null.
     */
    static ConnectionContext idle(ServerRequest req) {
        ConnectionContext ctx = CURRENT.get();
        if (ctx == null || !ctx.childSocketId().equals(req.socketId()) || !ctx.socketId().equals(req.serverSocketId())) return null;
        return ctx.dataReader().available() > 0 ? null : ctx;
    }

    /**
     * Blocks until the client sends more (its next request, left in the reader for the connection to parse) or the
     * connection closes; returns false for a close. The connection's thread makes this read after an answer anyway.
     */
    static boolean awaitMore(ConnectionContext ctx) {
        try {
            ctx.dataReader().pullData();
            return true;
        } catch (RuntimeException closed) {   // end of stream, or the socket failed or was closed
            return false;
        }
    }

    /** Closes the connection (one left idle too long). */
    static void close(ConnectionContext ctx) {
        try {
            ctx.serverSocket().close();
        } catch (RuntimeException ignored) {   // already closed
        }
    }
}
