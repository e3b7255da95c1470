package dev.llb.langchain4j;

import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import dev.llb.LlbException;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * The engine behind a model: opened from a {@link ChatConfig} (and then owned and closed by the
 * model) or given by the caller (who closes it). Calls take turns on it: an engine runs one
 * request at a time, so a second thread waits instead of getting llb's {@code busy}.
 */
final class Engines implements AutoCloseable {
    private final ChatEngine engine;
    private final boolean owned;
    final String modelName;
    private final ReentrantLock lock = new ReentrantLock(true);

    private Engines(ChatEngine engine, boolean owned, String modelName) {
        this.engine = engine;
        this.owned = owned;
        this.modelName = modelName;
    }

    static Engines of(ChatConfig config, ChatEngine engine, String modelName) {
        if ((config == null) == (engine == null)) {
            throw new IllegalArgumentException("set exactly one of config(ChatConfig) and engine(ChatEngine)");
        }
        if (engine != null) {
            return new Engines(engine, false, Objects.requireNonNullElse(modelName, "llb"));
        }
        String name = modelName != null ? modelName : String.valueOf(config.modelPath().getFileName());
        try {
            return new Engines(ChatEngine.open(config), true, name);
        } catch (LlbException e) {
            throw Mapping.error(e);
        }
    }

    /**
     * Runs {@code call} on the engine once the calls before it have returned; llb's errors come out
     * as LangChain4j's ({@link Mapping#error}).
     */
    <T> T call(Function<ChatEngine, T> call) {
        lock.lock();
        try {
            return call.apply(engine);
        } catch (LlbException e) {
            throw Mapping.error(e);
        } finally {
            lock.unlock();
        }
    }

    @Override
    public void close() {
        if (owned) {
            engine.close();
        }
    }
}
