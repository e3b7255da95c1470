package dev.llb.springai;

import java.util.function.BooleanSupplier;
import reactor.core.publisher.FluxSink;

/**
 * Backpressure for a streamed call: holds the generating thread while the subscriber has no demand
 * left, so a subscriber that does not keep up pauses its request's decoding (it keeps its place in
 * the pool; the pool's other requests go on) instead of {@code Flux.create} buffering without
 * limit. The wait ends when demand comes, or when {@code stop} says so (the subscription was
 * cancelled, the pool is closing); it re-checks {@code stop} every {@link #RECHECK_MS} ms, so a
 * closing pool never waits for a subscriber that stopped requesting.
 */
final class Demand {
    /** How often a held thread re-checks {@code stop}. */
    static final long RECHECK_MS = 20;

    private final FluxSink<?> sink;
    private final BooleanSupplier stop;
    private final Object lock = new Object();
    private volatile boolean released;

    Demand(FluxSink<?> sink, BooleanSupplier stop) {
        this.sink = sink;
        this.stop = stop;
        sink.onRequest(n -> {
            synchronized (lock) {
                lock.notifyAll();
            }
        });
    }

    /**
     * Returns once the subscriber has demand left, or {@code stop} holds. An interrupt ends the
     * wait and stays set (the binding then cancels the call).
     */
    void await() {
        synchronized (lock) {
            while (!released && sink.requestedFromDownstream() <= 0 && !sink.isCancelled() && !stop.getAsBoolean()) {
                try {
                    lock.wait(RECHECK_MS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return;
                }
            }
        }
    }

    /** Ends the holding: the request is done, what it still emits (its last response) is buffered. */
    void release() {
        released = true;
    }
}
