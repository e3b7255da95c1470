package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import java.lang.foreign.MemorySegment;
import java.util.function.Consumer;

/**
 * The Java side of one engine's {@code llb_event_fn}: routes llb's events to the call in progress.
 *
 * <p>llb calls back on the thread that runs the operation, so the per-call fields are written and
 * read by that one thread (the engine's call lock orders calls). Only {@link #abort()} comes from
 * other threads. This class must not reference its {@link ChatEngine}: the upcall stub keeps it
 * reachable, and the engine's {@link java.lang.ref.Cleaner} could otherwise never run.
 */
final class EventDispatcher {
    // llb writes its events with "type" first; anything else takes the general path.
    private static final String CHUNK_PREFIX = "{\"type\":\"chunk\",\"data\":";
    private static final String PROGRESS_PREFIX = "{\"type\":\"progress\"";

    private Consumer<String> onChunk;
    private CancellationToken token;
    private Throwable failure;
    private LlbException createFailure;
    private volatile boolean aborted;

    /** Starts a call: chunks go to {@code onChunk} (may be null), {@code token} may cancel it. */
    void begin(Consumer<String> onChunk, CancellationToken token) {
        this.onChunk = onChunk;
        this.token = token;
        this.failure = null;
    }

    /** Ends a call; returns what an upcall caught (to rethrow now that native code has returned), or null. */
    Throwable end() {
        Throwable caught = failure;
        onChunk = null;
        token = null;
        failure = null;
        return caught;
    }

    /** Cancels the running call, if any, and every later one: the engine is closing. */
    void abort() {
        aborted = true;
    }

    /** The reason llb_chat_create returned NULL, as llb reported it through its event. */
    LlbException takeCreateFailure() {
        LlbException reason = createFailure;
        Throwable caught = end();
        createFailure = null;
        if (reason != null) {
            return reason;
        }
        return new LlbException("internal", "llb_chat_create returned NULL without a create_failure event"
                + (caught == null ? "" : " (the event handler failed: " + caught + ")"));
    }

    /**
     * The upcall ({@code llb_event_fn}). Nothing may propagate from here: an exception unwinding
     * into native code terminates the JVM. Whatever is thrown is kept for {@link #end()} and cancels.
     * Every event, whatever its type, is answered with the call's state: so a progress event
     * ({@code "stage":"queued"} every 50 ms while a pool request waits for a place, or a prompt
     * batch, or generated tokens), though nothing of it is read, is where a cancelled token or a
     * passed {@link Deadline} stops the request.
     */
    int onEvent(MemorySegment eventJson, MemorySegment userData) {
        try {
            if (failure == null) {
                dispatch(Native.borrowed(eventJson));
            }
        } catch (Throwable t) {
            failure = t;
        }
        return failure != null || aborted || (token != null && token.isCancelled()) ? 1 : 0;
    }

    private void dispatch(String event) {
        if (event.startsWith(CHUNK_PREFIX) && event.endsWith("}")) {
            deliver(event.substring(CHUNK_PREFIX.length(), event.length() - 1));
        } else if (!event.startsWith(PROGRESS_PREFIX)) {
            JsonNode node = Json.parse(event);
            switch (node.path("type").asText()) {
                case "chunk" -> deliver(node.path("data").toString());
                case "create_failure" -> createFailure = LlbException.fromJson(node, event);
                default -> { } // progress, and event types added later: nothing to do
            }
        }
    }

    private void deliver(String chunk) {
        if (onChunk != null) {
            onChunk.accept(chunk);
        }
    }
}
