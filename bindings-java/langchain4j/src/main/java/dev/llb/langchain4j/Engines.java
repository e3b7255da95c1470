package dev.llb.langchain4j;

import dev.llb.Chat;
import dev.llb.ChatConfig;
import dev.llb.ChatEngine;
import dev.llb.ChatPool;
import dev.llb.LlbException;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * What a model runs on: a pool opened from a {@link ChatConfig} (then owned and closed by the
 * model), or an engine or pool given by the caller (who closes it). Calls on a pool run at once,
 * up to its {@code parallel} and {@code maxQueue}; past them llb answers {@code queue_full}, a
 * {@code RetriableException} (which the model's {@code maxRetries} retry). Calls on a given engine
 * take turns: it runs one request at a time, so a second thread waits instead of getting llb's
 * {@code busy}.
 */
final class Engines implements AutoCloseable {
    private final Chat chat;
    private final boolean owned;
    final String modelName;
    /** Orders the calls on an engine; null on a pool. */
    private final ReentrantLock lock;

    private Engines(Chat chat, boolean owned, String modelName) {
        this.chat = chat;
        this.owned = owned;
        this.modelName = modelName;
        this.lock = chat instanceof ChatEngine ? new ReentrantLock(true) : null;
    }

    static Engines of(ChatConfig config, ChatEngine engine, ChatPool pool, String modelName, int parallel,
            Integer maxQueue) {
        int given = (config == null ? 0 : 1) + (engine == null ? 0 : 1) + (pool == null ? 0 : 1);
        if (given != 1) {
            throw new IllegalArgumentException("set exactly one of config(ChatConfig), engine(ChatEngine) and pool(ChatPool)");
        }
        if (engine != null || pool != null) {
            return new Engines(engine != null ? engine : pool, false, Objects.requireNonNullElse(modelName, "llb"));
        }
        String name = modelName != null ? modelName : String.valueOf(config.modelPath().getFileName());
        try {
            return new Engines(ChatPool.open(config, parallel, maxQueue), true, name);
        } catch (LlbException e) {
            throw Mapping.error(e);
        }
    }

    /**
     * Runs {@code call} on the engine once the calls before it have returned (on a pool, at once);
     * llb's errors come out as LangChain4j's ({@link Mapping#error}).
     */
    <T> T call(Function<Chat, T> call) {
        if (lock != null) {
            lock.lock();
        }
        try {
            return call.apply(chat);
        } catch (LlbException e) {
            throw Mapping.error(e);
        } finally {
            if (lock != null) {
                lock.unlock();
            }
        }
    }

    @Override
    public void close() {
        if (owned) {
            chat.close();
        }
    }
}
