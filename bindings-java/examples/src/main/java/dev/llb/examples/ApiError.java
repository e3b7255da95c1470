package dev.llb.examples;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.llb.LlbException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * An OpenAI error response: an HTTP status and {@code {"error":{"message","type","param","code"}}}.
 * {@code code} is llb's error code when llb reported the error. An overloaded pool
 * ({@code queue_full}, {@code busy}) is 503 with a {@code Retry-After} header
 * ({@link #RETRY_AFTER_SECONDS}): the request was refused before any work, and may be sent again.
 */
final class ApiError extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private static final ObjectMapper MAPPER = new ObjectMapper();
    // llb names the offending field as "field `messages[0].content`: ...".
    private static final Pattern FIELD = Pattern.compile("field `([^`]+)`");
    /** The {@code Retry-After} of a 503 for an overloaded pool, in seconds. */
    static final int RETRY_AFTER_SECONDS = 1;

    final int status;
    final String type;
    final String param;
    final String code;

    ApiError(int status, String type, String code, String param, String message) {
        super(message);
        this.status = status;
        this.type = type;
        this.code = code;
        this.param = param;
    }

    /** An llb error as OpenAI would report it. */
    static ApiError of(LlbException e) {
        return switch (e.code()) {
            case "invalid_json", "invalid_argument", "context_overflow" ->
                    new ApiError(400, "invalid_request_error", e.code(), param(e.getMessage()), e.getMessage());
            case "tools_unsupported" -> new ApiError(422, "invalid_request_error", e.code(), null, e.getMessage());
            case "busy", "queue_full" -> new ApiError(503, "server_error", e.code(), null, e.getMessage());  // Retry-After
            default -> new ApiError(500, "server_error", e.code(), null, e.getMessage());
        };
    }

    static ApiError invalidRequest(int status, String code, String message) {
        return new ApiError(status, "invalid_request_error", code, null, message);
    }

    private static String param(String message) {
        Matcher m = FIELD.matcher(message);
        return m.find() ? m.group(1) : null;
    }

    /** The {@code Retry-After} seconds to send with this error, or null for none. */
    Integer retryAfterSeconds() {
        return status == 503 && ("queue_full".equals(code) || "busy".equals(code)) ? RETRY_AFTER_SECONDS : null;
    }

    /** {@code {"error":{...}}} */
    String json() {
        ObjectNode error = MAPPER.createObjectNode();
        error.put("message", getMessage());
        error.put("type", type);
        error.put("param", param);
        error.put("code", code);
        ObjectNode root = MAPPER.createObjectNode();
        root.set("error", error);
        return root.toString();
    }
}
