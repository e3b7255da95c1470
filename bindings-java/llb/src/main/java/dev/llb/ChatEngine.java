package dev.llb;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.file.Path;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One conversation's llb engine: a llama.cpp context (KV cache) over a model whose weights are
 * shared by every engine open on the same file. Its calls ({@code infer}, {@code stream}) are
 * {@link Chat}'s, as a {@link ChatPool}'s are.
 *
 * <h2>Threads</h2>
 * An engine runs one request at a time. A call made while another thread's call is running on
 * the same engine fails at once with {@link LlbException} code {@code "busy"}, exactly as llb
 * itself answers; it never waits and never enters native code. Use one engine per concurrent
 * conversation (different engines run in parallel). {@link #close()} may be called from any
 * thread, even while a call is running: it cancels that call, waits for it to return, then frees
 * the engine.
 *
 * <h2>Callbacks</h2>
 * Chunk consumers run on the calling thread: inside the native call on a platform thread; on a
 * virtual thread, the native call runs on one of the binding's platform threads (a virtual thread
 * in native code would pin its carrier) and the chunks are relayed to the caller. Whatever they
 * throw cancels the generation and is rethrown by {@link #stream} once llb has returned; the
 * engine stays usable. Interrupting a waiting virtual thread cancels its call.
 *
 * <h2>Lifetime</h2>
 * The native engine, its callback stub and the arena that holds the stub live exactly as long as
 * this object: {@link #close()} frees them (idempotent); a {@link Cleaner} frees them if an
 * engine is dropped unclosed, as a safety net only. Any call after close throws
 * {@link IllegalStateException}.
 */
public final class ChatEngine extends Chat {
    private static final Cleaner CLEANER = Cleaner.create();

    private final MemorySegment handle;
    private final EventDispatcher events;
    private final Cleaner.Cleanable resources;
    private final ReentrantLock callLock = new ReentrantLock();
    private volatile boolean closed;

    private ChatEngine(MemorySegment handle, Arena arena, EventDispatcher events) {
        this.handle = handle;
        this.events = events;
        this.resources = CLEANER.register(this, new Resources(handle, arena));
    }

    /** Frees the native engine, then the callback stub it calls. Holds no reference to the engine. */
    private record Resources(MemorySegment handle, Arena arena) implements Runnable {
        @Override
        public void run() {
            try {
                Native.chatDestroy(handle);
            } finally {
                arena.close();
            }
        }
    }

    /**
     * Opens an engine.
     *
     * @param config the model and engine settings
     * @return the open engine
     * @throws ToolsUnsupportedException when llb refuses the model because its chat template
     *     cannot do tool calling (checked before any weights are loaded)
     * @throws LlbException for any other failure, with llb's code ({@code file_not_found},
     *     {@code not_a_gguf}, {@code invalid_argument}, {@code model_load_failed}, ...)
     */
    public static ChatEngine open(ChatConfig config) {
        Objects.requireNonNull(config, "config");
        return NativeThreads.call(() -> create(config)); // loading weights: off a virtual thread's carrier
    }

    private static ChatEngine create(ChatConfig config) {
        EventDispatcher events = new EventDispatcher();
        Arena arena = Arena.ofShared();
        boolean opened = false;
        try {
            MemorySegment handle = Native.chatCreate(config.toJson(), Native.eventStub(events, arena));
            if (handle.equals(MemorySegment.NULL)) {
                throw events.takeCreateFailure();
            }
            ChatEngine engine = new ChatEngine(handle, arena, events);
            opened = true;
            return engine;
        } finally {
            if (!opened) {
                arena.close();
            }
        }
    }

    /**
     * {@code open(ChatConfig.of(model))}.
     *
     * @param model the GGUF file
     * @return the open engine
     */
    public static ChatEngine open(Path model) {
        return open(ChatConfig.of(model));
    }

    @Override
    String run(ChatCall call) {
        ensureOpen();
        // Held for the whole native call. Re-entry from a callback of this engine is "busy" too.
        if (callLock.isHeldByCurrentThread() || !callLock.tryLock()) {
            throw new LlbException("busy", "this engine is running another request (use one engine per concurrent conversation)");
        }
        try {
            ensureOpen();
            return call.run(events, json -> Native.chatInfer(handle, json));
        } finally {
            if (closed) {
                resources.clean(); // close() was called during this call (maybe from a callback)
            }
            callLock.unlock();
            Reference.reachabilityFence(this);
        }
    }

    @Override
    public void close() {
        closed = true;
        events.abort();
        if (callLock.isHeldByCurrentThread()) {
            return; // inside a callback of this engine: run() frees it on its way out
        }
        callLock.lock();
        try {
            resources.clean();
        } finally {
            callLock.unlock();
        }
    }

    /** The native handle, for the overhead benchmark's bare downcalls (same package, no lock). */
    MemorySegment nativeHandle() {
        return handle;
    }

    @Override
    public boolean isClosed() {
        return closed;
    }

    private void ensureOpen() {
        if (closed) {
            throw new IllegalStateException("this ChatEngine is closed");
        }
    }
}
