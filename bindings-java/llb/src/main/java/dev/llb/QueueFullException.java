package dev.llb;

/**
 * llb's {@code queue_full}: a {@link ChatPool} already holds {@code parallel} running and
 * {@code maxQueue} waiting requests, so this one was refused at once, before any work was done
 * (nothing was tokenized or queued). It is {@linkplain #isTransient() transient}: the same request
 * may succeed once the pool has room, so retry after a pause (the example server answers it with
 * HTTP 503 and {@code Retry-After}), or open the pool with more {@code parallel} or
 * {@code maxQueue}.
 */
public final class QueueFullException extends LlbException {
    private static final long serialVersionUID = 1L;

    /** llb's code for this error. */
    public static final String CODE = "queue_full";

    QueueFullException(String message, String json) {
        super(CODE, message, json);
    }
}
