package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * An error reported by llb: {@link #code()} is one of llb's stable error codes
 * ({@code docs/errors.md}: {@code invalid_json}, {@code invalid_argument}, {@code file_not_found},
 * {@code busy}, ...) and {@link #getMessage()} is llb's message, verbatim. Two codes have their
 * own subtypes: {@link ToolsUnsupportedException} ({@code tools_unsupported}) and
 * {@link QueueFullException} ({@code queue_full}, {@linkplain #isTransient() transient}).
 */
public class LlbException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** llb's error code. */
    private final String code;
    /** The error JSON as llb returned it, or null. */
    private final String json;

    /**
     * An error the binding raises itself (no llb JSON).
     *
     * @param code llb's error code, e.g. {@code "busy"}
     * @param message what went wrong
     */
    public LlbException(String code, String message) {
        this(code, message, null);
    }

    LlbException(String code, String message, String json) {
        super(message);
        this.code = code;
        this.json = json;
    }

    /** The error (or {@code create_failure} event) object as llb sent it. */
    static LlbException fromJson(JsonNode error, String json) {
        String code = error.path("code").asText("internal");
        String message = error.path("message").asText("(llb sent no message)");
        if (ToolsUnsupportedException.CODE.equals(code)) {
            List<Path> quarantined = new ArrayList<>();
            error.path("quarantined").forEach(p -> quarantined.add(Path.of(p.asText())));
            return new ToolsUnsupportedException(message, Json.booleanMap(error.path("caps")), quarantined, json);
        }
        if (QueueFullException.CODE.equals(code)) {
            return new QueueFullException(message, json);
        }
        return new LlbException(code, message, json);
    }

    /**
     * llb's error code.
     *
     * @return the snake_case code, e.g. {@code "invalid_argument"}
     */
    public String code() {
        return code;
    }

    /**
     * Whether the same call may succeed later without any change: llb's {@code queue_full} (a
     * pool's running and waiting requests are at their bound; a {@link QueueFullException}) and
     * {@code busy} (an engine is running another request). Every other code needs a change to the
     * request, the model or the configuration first. The frameworks' models map this to their
     * retryable exceptions (Spring AI's {@code TransientAiException}, LangChain4j's
     * {@code RetriableException}).
     *
     * @return true for {@code queue_full} and {@code busy}
     */
    public boolean isTransient() {
        return "queue_full".equals(code) || "busy".equals(code);
    }

    /**
     * The error JSON as llb returned it.
     *
     * @return the JSON, or {@code null} when the binding raised the error itself
     */
    public String json() {
        return json;
    }

    @Override
    public String toString() {
        return getClass().getName() + "[" + code + "]: " + getMessage();
    }
}
