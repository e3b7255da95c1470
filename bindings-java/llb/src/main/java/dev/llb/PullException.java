package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * A pull that failed ({@link Llb#pull}), with llb's code ({@link #code()}), its typed
 * {@link #reason()}, and the details llb attaches: the hub's HTTP status, the quants a repo has,
 * how long to wait after a rate limit. A model the tool gate refuses is a
 * {@link ToolsUnsupportedException} instead. docs/pull.md lists every code with its usual fix.
 */
public final class PullException extends LlbException {
    private static final long serialVersionUID = 1L;

    /** llb's pull error codes, typed; {@link #OTHER} for a code this binding does not know. */
    public enum Reason {
        /** The repo is gated or private and no token is set. */
        AUTH_REQUIRED,
        /** The token's account has not been granted access to a gated repo. */
        LICENSE_NOT_ACCEPTED,
        /** The hub rejected the token. */
        AUTH_FAILED,
        /** No such repo (or a private one the token cannot see). */
        REPO_NOT_FOUND,
        /** No such branch, tag or commit. */
        REVISION_NOT_FOUND,
        /** The requested file is not in the repo. */
        FILE_NOT_FOUND,
        /** The repo is disabled on the hub. */
        REPO_DISABLED,
        /** The hub kept answering 429; see {@link #retryAfterSeconds()}. */
        RATE_LIMITED,
        /** The revision has no GGUF model. */
        NO_GGUF,
        /** The quant is not there; see {@link #available()}. */
        QUANT_NOT_FOUND,
        /** The content or the hub's headers do not match the listing. */
        CHECKSUM_MISMATCH,
        /** Connection, DNS, TLS, timeout or 5xx failures after retries. */
        NETWORK,
        /** Writing the cache failed (permissions, space). */
        DISK,
        /** The pull was cancelled (token, listener failure or interrupt); the partial file stays. */
        CANCELLED,
        /** The hub's listing is unusable. */
        INVALID_REPO_LISTING,
        /** Offline, and the cache does not hold the model. */
        NOT_CACHED,
        /** A request field is wrong (the message names it). */
        INVALID_ARGUMENT,
        /** The request is not JSON (JSON pulls only). */
        INVALID_JSON,
        /** The downloaded file is not a GGUF (it is quarantined). */
        NOT_A_GGUF,
        /** The model's chat template does not parse (it is quarantined). */
        TEMPLATE_ERROR,
        /** An llb bug. */
        INTERNAL,
        /** A code added to llb after this binding. */
        OTHER;

        static Reason of(String code) {
            try {
                return valueOf(code.toUpperCase(Locale.ROOT));
            } catch (IllegalArgumentException e) {
                return OTHER;
            }
        }
    }

    /** llb's code, typed. */
    private final Reason reason;
    /** The hub's HTTP status, or null. */
    private final Integer httpStatus;
    /** Seconds to wait after {@code rate_limited}, or null. */
    private final Long retryAfterSeconds;
    /** The quant tags of {@code quant_not_found}. */
    private final transient List<String> available;
    /** The repo's GGUF files, when llb lists them. */
    private final transient List<String> availableFiles;

    private PullException(String code, String message, String json, JsonNode error) {
        super(code, message, json);
        this.reason = Reason.of(code);
        this.httpStatus = error.path("http_status").canConvertToInt() ? error.path("http_status").intValue() : null;
        this.retryAfterSeconds = error.path("retry_after").isIntegralNumber() ? error.path("retry_after").longValue() : null;
        this.available = strings(error.path("available"));
        this.availableFiles = strings(error.path("available_files"));
    }

    /** The exception for llb's pull error object: {@link ToolsUnsupportedException} or a PullException. */
    static LlbException fromJson(JsonNode error, String json) {
        String code = error.path("code").asText("internal");
        if (ToolsUnsupportedException.CODE.equals(code)) {
            return LlbException.fromJson(error, json);
        }
        return new PullException(code, error.path("message").asText("(llb sent no message)"), json, error);
    }

    private static List<String> strings(JsonNode array) {
        List<String> list = new ArrayList<>();
        array.forEach(v -> list.add(v.asText()));
        return List.copyOf(list);
    }

    /**
     * llb's code, typed.
     *
     * @return the reason; {@link Reason#OTHER} when {@link #code()} is newer than this binding
     */
    public Reason reason() {
        return reason;
    }

    /**
     * The hub's HTTP status, for errors the hub answered.
     *
     * @return the status, or null
     */
    public Integer httpStatus() {
        return httpStatus;
    }

    /**
     * For {@link Reason#RATE_LIMITED}: seconds to wait before retrying.
     *
     * @return the seconds, or null
     */
    public Long retryAfterSeconds() {
        return retryAfterSeconds;
    }

    /**
     * For {@link Reason#QUANT_NOT_FOUND}: the quant tags the repo has.
     *
     * @return the tags, empty for other reasons
     */
    public List<String> available() {
        return available;
    }

    /**
     * For {@link Reason#QUANT_NOT_FOUND} and {@link Reason#FILE_NOT_FOUND}: the repo's GGUF files.
     *
     * @return the files, empty when llb did not list them
     */
    public List<String> availableFiles() {
        return availableFiles;
    }
}
