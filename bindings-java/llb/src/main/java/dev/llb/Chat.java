package dev.llb;

import java.util.function.Consumer;

/**
 * What a {@link ChatEngine} (one conversation at a time) and a {@link ChatPool} (many at once)
 * have in common: the four chat calls, {@link #close()} and {@link #isClosed()}. Code that only
 * runs requests takes a {@code Chat} and works on either.
 *
 * <p>Each class documents its own threads: an engine answers a call made while another is
 * running with {@code busy}; a pool queues it, up to its {@code maxQueue}, then answers
 * {@code queue_full}. In both, a chunk consumer runs on the calling thread, and whatever it throws
 * cancels its own request and is rethrown from that call once llb has returned.
 */
public abstract sealed class Chat implements AutoCloseable permits ChatEngine, ChatPool {
    /** Only {@link ChatEngine} and {@link ChatPool}. */
    Chat() {}

    /**
     * Runs one OpenAI chat completion and returns the {@code chat.completion} JSON.
     *
     * @param requestJson an OpenAI chat-completions request
     * @return the {@code chat.completion} JSON
     * @throws LlbException with llb's code: {@code invalid_json}, {@code invalid_argument} (the
     *     message names the field), {@code context_overflow}, {@code busy} (an engine running
     *     another call), {@code queue_full} (a pool whose queue is full), ...
     * @throws IllegalStateException after {@link #close()}
     */
    public final String infer(String requestJson) {
        return run(ChatCall.infer(requestJson));
    }

    /**
     * {@link #infer(String)}, cancellable from another thread with {@code cancel}.
     *
     * @param requestJson an OpenAI chat-completions request
     * @param cancel cancels this call (only this one) from any thread
     * @return the {@code chat.completion} JSON ({@code finish_reason "cancelled"} when cancelled)
     */
    public final String infer(String requestJson, CancellationToken cancel) {
        return run(ChatCall.infer(requestJson, cancel));
    }

    /**
     * Runs one chat completion with {@code "stream":true} (added when missing), handing each
     * {@code chat.completion.chunk} JSON to {@code onChunk} as llb produces it, on this thread.
     * Returns the final {@code chat.completion} JSON, whose message is what the chunks add up to.
     *
     * <p>An exception from {@code onChunk} cancels the generation and is rethrown from here.
     *
     * @param requestJson an OpenAI chat-completions request
     * @param onChunk receives each {@code chat.completion.chunk} JSON
     * @return the final {@code chat.completion} JSON
     */
    public final String stream(String requestJson, Consumer<String> onChunk) {
        return run(ChatCall.stream(requestJson, onChunk));
    }

    /**
     * {@link #stream(String, Consumer)}, cancellable with {@code cancel} from any thread, or from
     * {@code onChunk} itself. Chunks that llb sends after the cancellation (the final delta with
     * {@code finish_reason "cancelled"}) are still delivered.
     *
     * @param requestJson an OpenAI chat-completions request
     * @param onChunk receives each {@code chat.completion.chunk} JSON
     * @param cancel cancels this call (only this one) from any thread
     * @return the final {@code chat.completion} JSON
     */
    public final String stream(String requestJson, Consumer<String> onChunk, CancellationToken cancel) {
        return run(ChatCall.stream(requestJson, onChunk, cancel));
    }

    /** Runs one checked call on the native engine or pool, guarded as the class documents. */
    abstract String run(ChatCall call);

    /**
     * Frees the engine or pool. Idempotent and callable from any thread: running calls are
     * cancelled and waited for; called from one of its own chunk consumers, it is freed as soon as
     * the running calls return.
     */
    @Override
    public abstract void close();

    /**
     * Whether {@link #close()} has been called.
     *
     * @return true once closed
     */
    public abstract boolean isClosed();
}
