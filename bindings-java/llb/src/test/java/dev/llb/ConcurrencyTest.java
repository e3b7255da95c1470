package dev.llb;

import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Engines and threads: parallel engines, a busy engine, cancelling and closing from another thread. */
class ConcurrencyTest {
    private static final long TIMEOUT_S = 60;

    @TempDir
    static Path dir;
    static Path tools;
    ExecutorService pool;

    @BeforeAll
    static void fixture() {
        tools = Fixtures.toolModel(dir);
    }

    @BeforeEach
    void startPool() {
        pool = Executors.newCachedThreadPool();
    }

    @AfterEach
    void stopPool() throws InterruptedException {
        pool.shutdownNow();
        assertTrue(pool.awaitTermination(TIMEOUT_S, TimeUnit.SECONDS));
    }

    @Test
    void twoEnginesRunAtOnceOnTwoThreads() throws Exception {
        try (ChatEngine a = ChatEngine.open(Fixtures.config(tools)); ChatEngine b = ChatEngine.open(Fixtures.config(tools))) {
            // Each stream waits at its first chunk for the other: this passes only if both run at once.
            CyclicBarrier bothStreaming = new CyclicBarrier(2);
            Future<String> fa = pool.submit(() -> a.stream(Requests.toolRequired(), firstChunk(() -> await(bothStreaming))));
            Future<String> fb = pool.submit(() -> b.stream(Requests.toolNamed(), firstChunk(() -> await(bothStreaming))));
            assertOneValidToolCall(message(fa.get(TIMEOUT_S, TimeUnit.SECONDS)));
            assertEquals("get_weather", assertOneValidToolCall(message(fb.get(TIMEOUT_S, TimeUnit.SECONDS))).name());
        }
    }

    @Test
    void aCallOnAnEngineRunningAnotherIsBusyAtOnceAndTheRunningCallIsUnaffected() throws Exception {
        try (ChatEngine engine = ChatEngine.open(Fixtures.config(tools))) {
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            AtomicReference<LlbException> reentrant = new AtomicReference<>();
            List<String> chunks = new ArrayList<>();
            Future<String> running = pool.submit(() -> engine.stream(Requests.toolRequired(), chunk -> {
                if (chunks.isEmpty()) {
                    reentrant.set(assertThrows(LlbException.class, () -> engine.infer(Requests.toolRequired())));
                    inside.countDown();
                    await(release);
                }
                chunks.add(chunk);
            }));
            assertTrue(inside.await(TIMEOUT_S, TimeUnit.SECONDS));

            assertEquals("busy", assertThrows(LlbException.class, () -> engine.infer(Requests.toolRequired())).code());
            assertEquals("busy", assertThrows(LlbException.class, () -> engine.stream(Requests.toolRequired(), c -> { })).code());
            assertEquals("busy", reentrant.get().code(), "a call from the engine's own callback is busy too");
            release.countDown();

            Completions.Message done = message(running.get(TIMEOUT_S, TimeUnit.SECONDS));
            assertOneValidToolCall(done);
            assertEquals(done, Completions.assemble(chunks));
            assertOneValidToolCall(message(engine.infer(Requests.toolRequired())));
        }
    }

    @Test
    void aTokenCancelsACallRunningOnAnotherThread() throws Exception {
        try (ChatEngine engine = ChatEngine.open(Fixtures.config(tools))) {
            CancellationToken token = new CancellationToken();
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch cancelled = new CountDownLatch(1);
            Future<String> running = pool.submit(() -> engine.stream(Requests.toolRequired(), chunk -> {
                inside.countDown();
                await(cancelled);
            }, token));
            assertTrue(inside.await(TIMEOUT_S, TimeUnit.SECONDS));
            token.cancel();
            cancelled.countDown();
            assertEquals("cancelled", message(running.get(TIMEOUT_S, TimeUnit.SECONDS)).finishReason());
        }
    }

    @Test
    void closeFromAnotherThreadCancelsTheRunningCallWaitsForItThenFrees() throws Exception {
        ChatEngine engine = ChatEngine.open(Fixtures.config(tools));
        CountDownLatch inside = new CountDownLatch(1);
        AtomicInteger chunksAfterClose = new AtomicInteger();
        Future<String> running = pool.submit(() -> engine.stream(Requests.toolRequired(), chunk -> {
            if (inside.getCount() > 0) {
                inside.countDown();
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
                while (!engine.isClosed() && System.nanoTime() < deadline) {
                    Thread.onSpinWait();
                }
            } else {
                chunksAfterClose.incrementAndGet();
            }
        }));
        assertTrue(inside.await(TIMEOUT_S, TimeUnit.SECONDS));
        engine.close();
        // close() waited for the native call: its last chunk (finish_reason "cancelled") came before.
        int delivered = chunksAfterClose.get();
        assertTrue(delivered >= 1, "close() returned before the running call ended");
        assertEquals("cancelled", message(running.get(TIMEOUT_S, TimeUnit.SECONDS)).finishReason());
        assertEquals(delivered, chunksAfterClose.get());
        assertThrows(IllegalStateException.class, () -> engine.infer(Requests.toolRequired()));
    }

    /** A chunk consumer that runs {@code action} at the first chunk only. */
    private static Consumer<String> firstChunk(Runnable action) {
        AtomicBoolean first = new AtomicBoolean(true);
        return chunk -> {
            if (first.getAndSet(false)) {
                action.run();
            }
        };
    }

    private static void await(CyclicBarrier barrier) {
        try {
            barrier.await(TIMEOUT_S, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError("the other engine never streamed", e);
        }
    }

    private static void await(CountDownLatch latch) {
        try {
            assertTrue(latch.await(TIMEOUT_S, TimeUnit.SECONDS));
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }
}
