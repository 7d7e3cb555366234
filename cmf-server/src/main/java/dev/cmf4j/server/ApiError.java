package dev.cmf4j.server;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * A request the API refuses, answered in OpenAI's error shape:
 * {@code {"error": {"message", "type", "param", "code"}}} with an HTTP status.
 */
final class ApiError extends RuntimeException {
    final int status;
    final String type, param, code;

    ApiError(int status, String type, String param, String code, String message) {
        super(message);
        this.status = status;
        this.type = type;
        this.param = param;
        this.code = code;
    }

    /** A 400 about one field of the request ({@code param} may be null). */
    static ApiError badRequest(String param, String message) {
        return new ApiError(400, "invalid_request_error", param, null, message);
    }

    static ApiError unauthorized(String message) {
        return new ApiError(401, "invalid_request_error", null, "invalid_api_key", message);
    }

    ObjectNode body(ObjectMapper json) {
        ObjectNode o = json.createObjectNode();
        ObjectNode e = o.putObject("error");
        e.put("message", getMessage());
        e.put("type", type);
        e.put("param", param);
        e.put("code", code);
        return o;
    }
}
