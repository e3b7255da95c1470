package dev.llb.examples;

import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Engines for concurrent requests: an llb engine runs one request at a time, so each request
 * borrows one (they share the model's weights) and waits while all are busy.
 */
final class EnginePool implements AutoCloseable {
    private final List<ChatEngine> all = new ArrayList<>();
    private final BlockingQueue<ChatEngine> idle;

    EnginePool(ChatConfig config, int size) {
        idle = new ArrayBlockingQueue<>(size);
        try {
            for (int i = 0; i < size; i++) {
                ChatEngine engine = ChatEngine.open(config);
                all.add(engine);
                idle.add(engine);
            }
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    ChatEngine acquire(long timeout, TimeUnit unit) throws InterruptedException {
        ChatEngine engine = idle.poll(timeout, unit);
        if (engine == null) {
            throw new ApiError(503, "server_error", "busy", null,
                    "all " + all.size() + " engines stayed busy for " + timeout + " " + unit.toString().toLowerCase());
        }
        return engine;
    }

    void release(ChatEngine engine) {
        idle.add(engine);
    }

    int size() {
        return all.size();
    }

    /** Closes every engine; a request still running is cancelled and waited for. */
    @Override
    public void close() {
        all.forEach(ChatEngine::close);
    }
}
