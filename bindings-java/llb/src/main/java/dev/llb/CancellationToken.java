package dev.llb;

/**
 * Cancels a running {@link Chat#infer} or {@link Chat#stream} (of an engine or a pool) from any
 * thread, including from the stream's own chunk consumer.
 *
 * <p>llb polls it at its next event: every 50 ms while a pool request waits for a place (it then
 * leaves the queue at once), after each prompt batch, with every streamed chunk and at least
 * every 16 generated tokens. The call then returns the partial completion with
 * {@code finish_reason "cancelled"} and the engine or pool stays usable. A token stays
 * cancelled; use a new one per call unless one switch should stop several calls.
 */
public final class CancellationToken {
    private volatile boolean cancelled;
    /** A token whose cancellation cancels this one too, or null. */
    private final CancellationToken parent;

    /** A token that is not cancelled. */
    public CancellationToken() {
        this(null);
    }

    /** A token that is also cancelled whenever {@code parent} (may be null) is. */
    CancellationToken(CancellationToken parent) {
        this.parent = parent;
    }

    /** Cancels every call this token was given to (now or later). Idempotent. */
    public void cancel() {
        cancelled = true;
    }

    /**
     * Whether {@link #cancel()} has been called.
     *
     * @return true once cancelled
     */
    public boolean isCancelled() {
        return cancelled || (parent != null && parent.isCancelled());
    }
}
