package dev.llb;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BiFunction;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * Keeps virtual threads off native code: a virtual thread blocked in a downcall pins its carrier
 * (the JDK cannot unmount a thread with a native frame on its stack), and there are only as many
 * carriers as cores, so N virtual threads calling llb would run at most "cores" requests at once.
 *
 * <p>From a virtual thread, a blocking llb call runs on a platform thread of the binding's own
 * cached daemon pool ({@code llb-native-N}), while the caller waits on a queue, which unmounts it.
 * The call's events (stream chunks, pull progress) travel through that queue and are handed to the
 * caller's consumer <em>on the caller's thread</em>, as on the direct path. What the consumer
 * throws cancels the native call and is rethrown once it has returned; what the native side throws
 * is rethrown with its type. Interrupting the waiting caller cancels the native call (as its
 * {@link CancellationToken} would), waits for it to return, and leaves the interrupt status set.
 *
 * <p>The relay is bounded ({@link #RELAY_CHUNKS} events waiting): when the caller's consumer does
 * not keep up (a server writing to a client that does not read), the platform thread blocks in the
 * event callback, so llb pauses that request's decoding (it keeps its place; a pool's other
 * requests go on) instead of buffering without limit. The wait re-checks the call's token every
 * {@link #RECHECK_MS} ms, so a cancellation (the caller's token, an interrupt, a consumer that
 * threw) ends it even while the consumer stays stuck; once cancelled, the relay no longer waits
 * and queues the few events llb still sends (the final delta), delivered when the consumer takes
 * them. (Closing the engine or pool still waits for the calls, stuck consumers included.)
 *
 * <p>Platform threads take the direct path: the call runs on the calling thread, as before.
 */
final class NativeThreads {
    private static final AtomicInteger COUNT = new AtomicInteger();
    private static final ThreadFactory FACTORY = task -> {
        Thread t = new Thread(task, "llb-native-" + COUNT.incrementAndGet());
        t.setDaemon(true);
        return t;
    };
    /** Idle threads end after 60 s (the cached pool's keep-alive). */
    private static final ExecutorService POOL = Executors.newCachedThreadPool(FACTORY);
    /** Marks the end of a relayed call's events. */
    private static final Object DONE = new Object();
    /** Events a relayed call may have waiting for its caller before the native thread blocks. */
    static final int RELAY_CHUNKS = 8;
    /** How often a native thread blocked on a full relay re-checks its call's token. */
    static final long RECHECK_MS = 20;

    private NativeThreads() {}

    /**
     * Runs a blocking, non-cancellable native call ({@code llb_chat_create}, {@code llb_pool_create}:
     * loading weights) off the caller's carrier when the caller is virtual. An interrupt while
     * waiting is kept for after the call.
     */
    static <T> T call(Supplier<T> nativeCall) {
        return call(null, null, (consumer, token) -> nativeCall.get());
    }

    /**
     * Runs {@code nativeSide} with the consumer and token it must use: the caller's own on a
     * platform thread; on a virtual thread, a relay consumer (null when {@code consumer} is null)
     * and a token that is cancelled with {@code cancel}, by an interrupt, or by the consumer
     * throwing, while {@code nativeSide} runs on a platform thread.
     *
     * @param consumer the caller's event consumer, or null
     * @param cancel the caller's token, or null
     * @param nativeSide the call; its consumer argument never throws on the relayed path
     * @return what {@code nativeSide} returned
     */
    static <T> T call(Consumer<String> consumer, CancellationToken cancel,
            BiFunction<Consumer<String>, CancellationToken, T> nativeSide) {
        if (!Thread.currentThread().isVirtual()) {
            return nativeSide.apply(consumer, cancel);
        }
        // Unbounded list, bounded by the permits: DONE, and the events after a cancellation, need none.
        LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();
        Semaphore room = new Semaphore(RELAY_CHUNKS);
        CancellationToken token = new CancellationToken(cancel);
        Consumer<String> relay = consumer == null ? null : event -> {
            // False once cancelled: llb sends only its last events then, and the caller drains until DONE.
            awaitRoom(room, token);
            queue.add(event);
        };
        Outcome<T> outcome = new Outcome<>();
        POOL.execute(() -> {
            try {
                outcome.value = nativeSide.apply(relay, token);
            } catch (Throwable t) {
                outcome.failure = t;
            } finally {
                queue.add(DONE); // publishes outcome to the caller
            }
        });
        Throwable fromConsumer = null;
        boolean interrupted = false;
        while (true) {
            Object item;
            try {
                item = queue.take();
            } catch (InterruptedException e) {
                interrupted = true;
                token.cancel();
                continue;
            }
            if (item == DONE) {
                break;
            }
            room.release(); // after a cancellation too: the permits no longer matter then
            if (fromConsumer == null) {
                try {
                    consumer.accept((String) item);
                } catch (Throwable t) {
                    fromConsumer = t;
                    token.cancel();
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (fromConsumer != null) {
            if (outcome.failure != null) {
                fromConsumer.addSuppressed(outcome.failure);
            }
            throw rethrow(fromConsumer);
        }
        if (outcome.failure != null) {
            throw rethrow(outcome.failure);
        }
        return outcome.value;
    }

    /**
     * Waits (on the native thread) for room in a relay; false, at once, when the call is cancelled.
     * An interrupt of the native thread is kept, and the wait goes on: only the token ends it.
     */
    private static boolean awaitRoom(Semaphore room, CancellationToken token) {
        boolean interrupted = false;
        try {
            while (!token.isCancelled()) {
                try {
                    if (room.tryAcquire(RECHECK_MS, TimeUnit.MILLISECONDS)) {
                        return true;
                    }
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            return false;
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** What the platform thread's call produced; written before DONE is queued, read after it is taken. */
    private static final class Outcome<T> {
        T value;
        Throwable failure;
    }

    private static RuntimeException rethrow(Throwable t) {
        Native.throwIfUnchecked(t);
        throw new IllegalStateException("a consumer threw a checked exception", t);
    }
}
