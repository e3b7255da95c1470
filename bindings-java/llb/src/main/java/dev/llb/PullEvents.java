package dev.llb;

import java.lang.foreign.MemorySegment;
import java.util.function.Consumer;

/**
 * The {@code llb_event_fn} of one {@link Llb#pull} call: forwards each event's JSON to the
 * caller's consumer on the calling thread. Nothing thrown may reach native code (it would
 * terminate the JVM): a failure is kept, cancels the pull, and is rethrown once llb has returned.
 */
final class PullEvents {
    private final Consumer<String> onEvent;
    private final CancellationToken token;
    private Throwable failure;

    PullEvents(Consumer<String> onEvent, CancellationToken token) {
        this.onEvent = onEvent;
        this.token = token;
    }

    /** The upcall. Returns non-zero to cancel. */
    int onEvent(MemorySegment eventJson, MemorySegment userData) {
        try {
            if (failure == null && onEvent != null) {
                onEvent.accept(Native.borrowed(eventJson));
            }
        } catch (Throwable t) {
            failure = t;
        }
        return failure != null || (token != null && token.isCancelled()) ? 1 : 0;
    }

    /** What the consumer threw, or null. */
    Throwable failure() {
        return failure;
    }
}
