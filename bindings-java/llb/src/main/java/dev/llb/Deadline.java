package dev.llb;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

/**
 * A time limit for one or more calls: when it passes, it cancels their {@link CancellationToken}
 * (llb sees it at its next event: within a token or a prompt batch, or within 50 ms for a request
 * still waiting in a pool's queue; the call returns with {@code finish_reason "cancelled"}, its
 * place in the pool freed at once). What the LangChain4j and Spring AI models' {@code timeout}
 * settings run on.
 *
 * <pre>{@code
 * CancellationToken cancel = new CancellationToken();
 * try (Deadline deadline = Deadline.after(Duration.ofSeconds(30), cancel)) {
 *     String completion = pool.infer(request, cancel);
 *     if (deadline.expired()) { ... the call was cut short ... }
 * }
 * }</pre>
 *
 * <p>One daemon thread of the binding runs every deadline's timer; {@link #close()} removes the
 * timer at once, so a call that ends in time leaves nothing behind.
 */
public final class Deadline implements AutoCloseable {
    private static final ScheduledThreadPoolExecutor TIMER = timer();
    private static final Deadline NONE = new Deadline(null);

    private final ScheduledFuture<?> task;
    private volatile boolean expired;

    private Deadline(ScheduledFuture<?> task) {
        this.task = task;
    }

    private Deadline(Duration timeout, CancellationToken token) {
        this.task = TIMER.schedule(() -> {
            expired = true;
            token.cancel();
        }, Math.max(1, timeout.toNanos()), TimeUnit.NANOSECONDS);
    }

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1,
                Thread.ofPlatform().name("llb-deadline").daemon().factory());
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }

    /**
     * A deadline {@code timeout} from now that cancels {@code token}.
     *
     * @param timeout the time allowed; null: none (the deadline never expires)
     * @param token what it cancels
     * @return the running deadline; close it when the calls end
     * @throws IllegalArgumentException when {@code timeout} is zero or negative
     */
    public static Deadline after(Duration timeout, CancellationToken token) {
        Objects.requireNonNull(token, "token");
        if (timeout == null) {
            return NONE;
        }
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("a timeout must be positive, not " + timeout);
        }
        return new Deadline(timeout, token);
    }

    /**
     * Whether the time ran out (and the token was cancelled by it).
     *
     * @return true once the deadline passed before {@link #close()}
     */
    public boolean expired() {
        return expired;
    }

    /** Stops the timer: the token is no longer cancelled by it. Idempotent. */
    @Override
    public void close() {
        if (task != null) {
            task.cancel(false);
        }
    }
}
