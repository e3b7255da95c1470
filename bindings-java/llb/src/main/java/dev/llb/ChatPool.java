package dev.llb;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.foreign.MemorySegment;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.HashSet;
import java.util.Objects;
import java.util.Set;

/**
 * Many conversations at once on one model: an llb pool ({@code llb_pool_*}), one batched
 * llama.cpp context whose sequences the requests share. Its calls ({@code infer}, {@code stream})
 * are {@link Chat}'s, as a {@link ChatEngine}'s are.
 *
 * <p>Every running request's next token goes into one batched decode; prompts are evaluated in
 * chunks between the others' steps; a prompt prefix any sequence already holds (the same system
 * prompt and tools, or a conversation's previous turn) is copied instead of evaluated and shows
 * as {@code usage.prompt_tokens_details.cached_tokens}. Idle conversations stay in the KV cache
 * until space is needed (least recently used first).
 *
 * <h2>Threads</h2>
 * Any number of threads may call {@link #infer} and {@link #stream} at once; each call blocks its
 * thread until its own completion, and its chunk consumer runs on that thread. Up to
 * {@code parallel} requests decode at once, up to {@code maxQueue} more wait for a turn; past
 * that a call fails at once with {@link QueueFullException} (code {@code "queue_full"}): on the
 * calling thread when llb's counts already show the pool full ({@link #throwIfFull()}), else from
 * llb, which checks and takes a place in one step, so the bound holds however many threads call
 * at once. Cancelling one request never disturbs the others. {@link #close()} may be called from
 * any thread: it cancels the running calls, waits for them, then frees the pool.
 *
 * <p>Virtual threads never pin a carrier here: from a virtual thread the native call runs on one
 * of the binding's platform threads while the caller waits unmounted, its chunks relayed to its
 * consumer on its own thread; interrupting it cancels its request. So N virtual threads run N
 * requests at once, however few the carriers. A call refused because the pool is full never
 * leaves its thread: under a burst, the refusals cost no platform thread.
 *
 * <h2>Callbacks</h2>
 * As for {@link ChatEngine}: whatever a chunk consumer throws cancels its own request and is
 * rethrown from that call once llb has returned.
 */
public final class ChatPool extends Chat {
    private static final Cleaner CLEANER = Cleaner.create();

    private final MemorySegment handle;
    private final Cleaner.Cleanable resources;
    /** Guards the fields below. */
    private final Object lock = new Object();
    private final Set<EventDispatcher> running = new HashSet<>();
    /** Calls of this pool on the current thread (a chunk consumer may call the pool again). */
    private final ThreadLocal<int[]> depth = ThreadLocal.withInitial(() -> new int[1]);
    /** Native calls in progress, stats included. */
    private int active;
    private boolean closed;

    private ChatPool(MemorySegment handle) {
        this.handle = handle;
        this.resources = CLEANER.register(this, new Resources(handle));
    }

    /** Frees the native pool. Holds no reference to the pool object. */
    private record Resources(MemorySegment handle) implements Runnable {
        @Override
        public void run() {
            Native.poolDestroy(handle);
        }
    }

    /**
     * Opens a pool of {@code parallel} concurrent requests with llb's default queue
     * ({@code 16 × parallel}). {@code config}'s context size is the KV budget all requests share
     * (llb's default: 4096 tokens per parallel request).
     *
     * @param config the model and engine settings
     * @param parallel requests that decode at once ({@code n_parallel}, 1 to 128)
     * @return the open pool
     * @throws ToolsUnsupportedException when llb refuses the model (no tool calling)
     * @throws LlbException for any other failure ({@code invalid_argument}, {@code file_not_found}, ...)
     */
    public static ChatPool open(ChatConfig config, int parallel) {
        return open(config, parallel, null);
    }

    /**
     * {@link #open(ChatConfig, int)} with at most {@code maxQueue} requests waiting for a turn.
     *
     * @param config the model and engine settings
     * @param parallel requests that decode at once ({@code n_parallel})
     * @param maxQueue requests that may wait for a turn ({@code max_queue}); null: llb's default
     * @return the open pool
     */
    public static ChatPool open(ChatConfig config, int parallel, Integer maxQueue) {
        Objects.requireNonNull(config, "config");
        ObjectNode json = (ObjectNode) Json.parse(config.toJson());
        json.put("n_parallel", parallel);
        if (maxQueue != null) {
            json.put("max_queue", maxQueue);
        }
        EventDispatcher events = new EventDispatcher();
        events.begin(null, null);
        MemorySegment handle = NativeThreads.call(() -> Native.poolCreate(json.toString(), events));
        if (handle.equals(MemorySegment.NULL)) {
            throw events.takeCreateFailure();
        }
        return new ChatPool(handle);
    }

    /**
     * The pool's state as llb reports it: {@code {"type":"pool_stats","n_slots","n_parallel",
     * "n_ctx","running","queued","tokens_held":[...],"lost":null}}; {@code lost} is the message of the error that made the pool unusable (an RPC server lost mid-request).
     *
     * @return the {@code pool_stats} JSON
     */
    public String stats() {
        enter(null);
        try {
            return Json.orThrow(Native.poolStats(handle));
        } finally {
            leave(null);
        }
    }

    /**
     * Refuses at once when the pool is already full: throws {@link QueueFullException} when llb's
     * own counts ({@code llb_pool_stats}) show {@code running + queued} at {@code parallel +
     * maxQueue}. A cheap check on the calling thread: one short native call, no request parsed,
     * no thread switched. It takes no place, so it is only an early answer: a call made after it
     * returns may still be refused by llb, which checks and takes a place in one step.
     * {@link #infer} and {@link #stream} run it first; a server calls it to refuse a request before
     * reading it (the example server does).
     *
     * @throws QueueFullException when every place of the pool is taken
     * @throws IllegalStateException after {@link #close()}
     */
    public void throwIfFull() {
        enter(null);
        try {
            refuseIfFull();
        } finally {
            leave(null);
        }
    }

    @Override
    String run(ChatCall call) {
        EventDispatcher events = new EventDispatcher();
        enter(events);
        try {
            // Before the native call: from a virtual thread, the call below runs on a platform
            // thread of NativeThreads; a refusal the counts already show needs none.
            refuseIfFull();
            return call.run(events, json -> Native.poolInfer(handle, json, events));
        } finally {
            leave(events);
        }
    }

    /** {@link #throwIfFull()} inside {@link #enter}/{@link #leave}. */
    private void refuseIfFull() {
        String json = Native.poolStats(handle);
        if (Json.isError(json)) {
            return; // not a live pool's counts: llb_pool_infer reports what is wrong
        }
        JsonNode stats = Json.parse(json);
        int running = stats.path("running").asInt();
        int queued = stats.path("queued").asInt();
        int parallel = stats.path("n_parallel").asInt();
        int maxQueue = stats.path("max_queue").asInt();
        if (running + queued >= parallel + maxQueue) {
            // llb's own words for queue_full (Scheduler::reserve); no llb JSON: the binding refused.
            throw new QueueFullException(running + " requests are running and " + queued + " are waiting (n_parallel "
                    + parallel + ", max_queue " + maxQueue + "): retry later", null);
        }
    }

    private void enter(EventDispatcher events) {
        synchronized (lock) {
            if (closed) {
                throw new IllegalStateException("this ChatPool is closed");
            }
            if (events != null) {
                running.add(events);
            }
            active++;
            depth.get()[0]++;
        }
    }

    private void leave(EventDispatcher events) {
        synchronized (lock) {
            if (events != null) {
                running.remove(events);
            }
            active--;
            depth.get()[0]--;
            if (closed && active == 0) {
                resources.clean(); // close() was called during a call (maybe from a callback)
            }
            lock.notifyAll();
        }
        Reference.reachabilityFence(this);
    }

    @Override
    public void close() {
        synchronized (lock) {
            closed = true;
            running.forEach(EventDispatcher::abort);
            if (depth.get()[0] > 0) {
                return;
            }
            boolean interrupted = false;
            while (active > 0) {
                try {
                    lock.wait();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            resources.clean();
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    @Override
    public boolean isClosed() {
        synchronized (lock) {
            return closed;
        }
    }
}
