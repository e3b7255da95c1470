package dev.llb.langchain4j;

import dev.langchain4j.exception.RetriableException;
import dev.langchain4j.exception.TimeoutException;
import dev.langchain4j.internal.RetryUtils;
import dev.llb.CancellationToken;
import dev.llb.Chat;
import dev.llb.Deadline;
import dev.llb.LlbException;
import java.time.Duration;
import java.util.function.BiFunction;

/**
 * A model's retries and timeout, as LangChain4j's own models have them ({@code maxRetries},
 * {@code timeout}): a call llb refuses as transient ({@code queue_full}, {@code busy}: before any
 * work, so before any streamed chunk) is tried again up to {@code maxRetries} times with
 * LangChain4j's backoff ({@link RetryUtils}); nothing else is retried. The timeout bounds the whole
 * call, retries included: when it passes, the call's {@link CancellationToken} is cancelled (llb
 * frees its place in the pool at its next token, or within ~50 ms while it waits in the queue)
 * and the call fails with LangChain4j's {@link TimeoutException}.
 */
final class Attempts {
    private final int maxRetries;
    private final Duration timeout;

    Attempts(int maxRetries, Duration timeout) {
        if (maxRetries < 0) {
            throw new IllegalArgumentException("maxRetries must be 0 or more, not " + maxRetries);
        }
        this.maxRetries = maxRetries;
        this.timeout = timeout;
    }

    /** One try's outcome: a value, or the failure that ends the call (not retried). */
    private record Attempt<T>(T value, RuntimeException failure) {}

    /**
     * Runs {@code call} on the engines with {@code cancel}, retried and bounded as above.
     *
     * @throws RuntimeException LangChain4j's exception for llb's error, or the one the call threw
     */
    <T> T run(Engines engines, BiFunction<Chat, CancellationToken, T> call, CancellationToken cancel) {
        try (Deadline deadline = Deadline.after(timeout, cancel)) {
            Attempt<T> outcome = RetryUtils.withRetry(() -> once(engines, call, cancel, deadline), maxRetries);
            if (outcome.failure() != null) {
                throw outcome.failure();
            }
            return outcome.value();
        }
    }

    private <T> Attempt<T> once(Engines engines, BiFunction<Chat, CancellationToken, T> call, CancellationToken cancel,
            Deadline deadline) {
        try {
            T value = deadline.expired() ? null : engines.call(chat -> call.apply(chat, cancel));
            return deadline.expired() ? new Attempt<>(null, timedOut()) : new Attempt<>(value, null);
        } catch (RetriableException e) {
            if (e.getCause() instanceof LlbException llb && llb.isTransient() && !deadline.expired()) {
                throw e; // RetryUtils tries again
            }
            return new Attempt<>(null, deadline.expired() ? timedOut() : e);
        } catch (RuntimeException e) {
            return new Attempt<>(null, e);
        }
    }

    private TimeoutException timedOut() {
        return new TimeoutException("llb: the call did not end within its timeout (" + timeout + "); it was cancelled");
    }
}
