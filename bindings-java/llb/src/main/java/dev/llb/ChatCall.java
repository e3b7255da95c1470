package dev.llb;

import java.util.Objects;
import java.util.function.Consumer;
import java.util.function.UnaryOperator;

/**
 * One {@code infer} or {@code stream} call of a {@link Chat} (an engine or a pool): its
 * arguments, checked as {@link Chat}'s public methods document them, and the native call that
 * runs it with its upcalls routed through an {@link EventDispatcher}.
 *
 * @param requestJson the request, with {@code "stream":true} for a stream
 * @param onChunk receives each {@code chat.completion.chunk} JSON, or null (infer)
 * @param cancel cancels the call, or null
 */
record ChatCall(String requestJson, Consumer<String> onChunk, CancellationToken cancel) {
    /** {@code infer(requestJson)}. */
    static ChatCall infer(String requestJson) {
        return new ChatCall(Objects.requireNonNull(requestJson, "requestJson"), null, null);
    }

    /** {@code infer(requestJson, cancel)}. */
    static ChatCall infer(String requestJson, CancellationToken cancel) {
        Objects.requireNonNull(cancel, "cancel");
        return new ChatCall(Objects.requireNonNull(requestJson, "requestJson"), null, cancel);
    }

    /** {@code stream(requestJson, onChunk)}: {@code "stream":true} added when missing. */
    static ChatCall stream(String requestJson, Consumer<String> onChunk) {
        return new ChatCall(Json.withStreamTrue(Objects.requireNonNull(requestJson, "requestJson")),
                Objects.requireNonNull(onChunk, "onChunk"), null);
    }

    /** {@code stream(requestJson, onChunk, cancel)}: {@code "stream":true} added when missing. */
    static ChatCall stream(String requestJson, Consumer<String> onChunk, CancellationToken cancel) {
        return new ChatCall(Json.withStreamTrue(Objects.requireNonNull(requestJson, "requestJson")),
                Objects.requireNonNull(onChunk, "onChunk"), Objects.requireNonNull(cancel, "cancel"));
    }

    /**
     * Runs the call: {@code nativeCall} gets the request JSON and returns llb's answer, while
     * {@code events} hands its chunks to {@link #onChunk} and cancels it with {@link #cancel}. What a
     * chunk consumer threw is rethrown once native code has returned; then an llb error JSON
     * becomes an {@link LlbException}. From a virtual thread the native call runs on one of the
     * binding's platform threads and the chunks are relayed to this thread ({@link NativeThreads}).
     *
     * @param events the dispatcher of the stub that {@code nativeCall} hands to llb
     * @param nativeCall the downcall, from the request JSON to llb's answer
     * @return the {@code chat.completion} JSON
     */
    String run(EventDispatcher events, UnaryOperator<String> nativeCall) {
        return NativeThreads.call(onChunk, cancel, (chunks, token) -> run(events, nativeCall, chunks, token));
    }

    private String run(EventDispatcher events, UnaryOperator<String> nativeCall, Consumer<String> chunks,
            CancellationToken token) {
        events.begin(chunks, token);
        String response;
        Throwable fromCallback;
        try {
            response = nativeCall.apply(requestJson);
        } finally {
            fromCallback = events.end();
        }
        if (fromCallback != null) {
            Native.throwIfUnchecked(fromCallback);
            throw new IllegalStateException("a chunk consumer threw a checked exception", fromCallback);
        }
        return Json.orThrow(response);
    }
}
