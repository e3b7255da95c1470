package dev.llb;

import static dev.llb.Completions.assemble;
import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.json;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Calls from virtual threads: a virtual thread blocked in a downcall would pin its carrier, and a
 * JVM has as many carriers as cores, so without the binding's relay ({@link NativeThreads}) at most
 * "cores" requests would ever be inside llb at once, whatever the pool's size.
 */
class VirtualThreadsTest {
    private static final long TIMEOUT_S = 180;
    /** Four times the carriers (the default virtual-thread scheduler has one per core). */
    private static final int N = 4 * Runtime.getRuntime().availableProcessors();

    @TempDir
    static Path dir;
    static ChatPool pool;

    @BeforeAll
    static void open() {
        // 512 tokens of KV per request; a long text request is cancelled long before it fills them.
        pool = ChatPool.open(ChatConfig.of(Fixtures.toolModel(dir)).withThreads(1).withContextSize(N * 512), N);
    }

    @AfterAll
    static void close() {
        if (pool != null) {
            pool.close();
        }
    }

    private static int running() {
        return json(pool.stats()).path("running").asInt();
    }

    /** Plain text that runs until cancelled (random weights almost never emit the end token). */
    private static String longText(int seed) {
        return longText(seed, 400);
    }

    private static String longText(int seed, int maxTokens) {
        return """
                {"messages":[{"role":"user","content":"Tell me a long story."}],
                 "tool_choice":"none","max_tokens":%d,"temperature":1.0,"seed":%d}""".formatted(maxTokens, seed);
    }

    @Test
    void fourTimesAsManyVirtualThreadsAsCarriersRunInThePoolAtOnce() throws Exception {
        CancellationToken stop = new CancellationToken();
        List<Future<String>> calls = new ArrayList<>();
        int most = 0;
        try (ExecutorService virtual = Executors.newVirtualThreadPerTaskExecutor()) {
            for (int i = 0; i < N; i++) {
                int seed = i;
                calls.add(virtual.submit(() -> pool.infer(longText(seed), stop)));
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(TIMEOUT_S);
            while (most < N && System.nanoTime() < deadline && !calls.stream().allMatch(Future::isDone)) {
                most = Math.max(most, running());
                Thread.sleep(2);
            }
            stop.cancel();
            for (Future<String> call : calls) {
                String finish = message(call.get(TIMEOUT_S, TimeUnit.SECONDS)).finishReason();
                assertTrue(Set.of("cancelled", "length", "stop").contains(finish), finish);
            }
        }
        assertEquals(N, most, N + " virtual threads called a pool of " + N + " on "
                + Runtime.getRuntime().availableProcessors() + " carriers; the pool never ran more than " + most + " at once");
        assertEquals(0, running());
    }

    @Test
    void streamChunksReachTheConsumerOnTheCallingVirtualThread() throws Exception {
        List<Thread> consumers = new ArrayList<>();
        List<String> chunks = new ArrayList<>();
        Thread[] caller = new Thread[1];
        String response = inVirtualThread(() -> {
            caller[0] = Thread.currentThread();
            return pool.stream(Requests.toolRequired(), chunk -> {
                consumers.add(Thread.currentThread());
                chunks.add(chunk);
            });
        });
        assertTrue(caller[0].isVirtual());
        assertTrue(chunks.size() > 2, chunks.toString());
        assertTrue(consumers.stream().allMatch(t -> t == caller[0]), "every chunk on the caller's thread: " + Set.copyOf(consumers));
        assertEquals(message(response), assemble(chunks));
        assertOneValidToolCall(message(response));
    }

    @Test
    void exceptionsKeepTheirTypesAndThePoolStaysUsable() throws Exception {
        IllegalStateException boom = new IllegalStateException("boom");
        List<String> seen = new ArrayList<>();
        Throwable thrown = failureInVirtualThread(() -> pool.stream(Requests.toolRequired(), chunk -> {
            seen.add(chunk);
            if (seen.size() == 2) {
                throw boom;
            }
        }));
        assertSame(boom, thrown);
        assertEquals(2, seen.size(), "no chunk is delivered after the consumer failed");

        LlbException invalid = (LlbException) failureInVirtualThread(() -> pool.infer("{nope"));
        assertEquals("invalid_json", invalid.code());
        LlbException badField = (LlbException) failureInVirtualThread(() -> pool.infer("{\"messages\":[],\"max_tokens\":-1}"));
        assertEquals("invalid_argument", badField.code());

        assertOneValidToolCall(message(inVirtualThread(() -> pool.infer(Requests.toolRequired()))));
        assertEquals(0, running());
    }

    @Test
    void interruptingTheWaitingVirtualThreadCancelsTheNativeCall() throws Exception {
        CountDownLatch streaming = new CountDownLatch(1);
        AtomicBoolean stillInterrupted = new AtomicBoolean();
        CompletableFuture<String> done = new CompletableFuture<>();
        Thread caller = Thread.ofVirtual().start(() -> {
            try {
                String r = pool.stream(longText(3, 1500), chunk -> streaming.countDown());
                stillInterrupted.set(Thread.currentThread().isInterrupted());
                done.complete(r);
            } catch (Throwable t) {
                done.completeExceptionally(t);
            }
        });
        assertTrue(streaming.await(TIMEOUT_S, TimeUnit.SECONDS), "no chunk arrived");
        caller.interrupt();
        String response = done.get(TIMEOUT_S, TimeUnit.SECONDS);
        String usage = json(response).path("usage").toString();
        assertEquals("cancelled", message(response).finishReason(), usage);
        assertTrue(json(response).path("usage").path("completion_tokens").asInt() < 1500, usage);
        assertTrue(stillInterrupted.get(), "the caller's interrupt status is kept");
        assertEquals(0, running(), "nothing left running in the pool");
    }

    @Test
    void aTokenCancelsARelayedCallAndEnginesAndOpensWorkFromVirtualThreads() throws Exception {
        CancellationToken token = new CancellationToken();
        String response = inVirtualThread(() -> pool.stream(longText(5, 1500), chunk -> token.cancel(), token));
        assertEquals("cancelled", message(response).finishReason(), json(response).path("usage").toString());

        String engineAnswer = inVirtualThread(() -> {
            try (ChatEngine engine = ChatEngine.open(Fixtures.config(Fixtures.toolModel(dir)))) {
                return engine.infer(Requests.toolNamed());
            }
        });
        assertEquals("get_weather", assertOneValidToolCall(message(engineAnswer)).name());
        // A refused model fails the open with llb's typed exception, from a virtual thread too.
        Throwable refused = failureInVirtualThread(() -> ChatPool.open(Fixtures.config(Fixtures.plainModel(dir)), 2));
        assertTrue(refused instanceof ToolsUnsupportedException, refused.toString());
    }

    /** The KV tokens all sequences hold: grows with every decoded token of a running request. */
    private static int tokensHeld() {
        int sum = 0;
        for (com.fasterxml.jackson.databind.JsonNode n : json(pool.stats()).path("tokens_held")) {
            sum += n.asInt();
        }
        return sum;
    }

    /**
     * A request streamed on a virtual thread whose consumer stops reading at its
     * {@code stallAt}-th chunk (a client that stops reading) until {@link #release} opens, then
     * throws {@code thenThrow} when one is given (a client gone). Closing it releases the
     * consumer: a test that fails while it is stalled must not leave a call the pool's close
     * would wait for.
     */
    private static final class StalledStream implements AutoCloseable {
        final List<String> chunks = java.util.Collections.synchronizedList(new ArrayList<>());
        final CountDownLatch stalled = new CountDownLatch(1);
        final CountDownLatch release = new CountDownLatch(1);
        final CompletableFuture<String> done = new CompletableFuture<>();

        StalledStream(String request, int stallAt, CancellationToken token, RuntimeException thenThrow) {
            Thread.ofVirtual().start(() -> {
                try {
                    done.complete(pool.stream(request, chunk -> {
                        chunks.add(chunk);
                        if (chunks.size() == stallAt) {
                            stalled.countDown();
                            try {
                                release.await();
                            } catch (InterruptedException e) {
                                throw new IllegalStateException(e);
                            }
                            if (thenThrow != null) {
                                throw thenThrow;
                            }
                        }
                    }, token));
                } catch (Throwable t) {
                    done.completeExceptionally(t);
                }
            });
        }

        void awaitStall() throws InterruptedException {
            assertTrue(stalled.await(TIMEOUT_S, TimeUnit.SECONDS), "no chunk arrived");
        }

        @Override
        public void close() {
            release.countDown();
        }
    }

    @Test
    void aConsumerThatStopsReadingPausesItsRequestUntilItReadsAgain() throws Exception {
        try (StalledStream s = new StalledStream(longText(7, 400), 3, new CancellationToken(), null)) {
            List<String> chunks = s.chunks;
            CompletableFuture<String> done = s.done;
            s.awaitStall();
            // An unbounded relay would let the request run on to its 400 tokens meanwhile.
            Thread.sleep(1000);
            // The other requests go on: one runs to its end while this one is paused.
            String other = inVirtualThread(() -> pool.infer(longText(8, 40)));
            assertTrue(Set.of("length", "stop").contains(message(other).finishReason()), other);
            int held = tokensHeld();
            Thread.sleep(500);
            int heldNow = tokensHeld();
            assertEquals(1, running(), "the stalled request keeps its place, unfinished");
            assertEquals(held, heldNow, "the stalled request decoded on: tokens held " + held + " -> " + heldNow);
            assertEquals(3, chunks.size(), "the consumer took nothing while stalled");
            assertFalse(done.isDone());

            s.release.countDown();
            String response = done.get(TIMEOUT_S, TimeUnit.SECONDS);
            assertTrue(Set.of("length", "stop").contains(message(response).finishReason()), response);
            assertTrue(chunks.size() > NativeThreads.RELAY_CHUNKS + 3, chunks.size() + " chunks");
            assertEquals(message(response), assemble(chunks), "every chunk arrived, in order, once resumed");
        }
        assertEquals(0, running());
    }

    @Test
    void aStalledConsumerStillCancelsAtOnceByTokenOrByGoingAway() throws Exception {
        // By token: the native call ends while the consumer is still stuck; the last chunks wait for it.
        CancellationToken token = new CancellationToken();
        try (StalledStream s = new StalledStream(longText(9, 1500), 1, token, null)) {
            s.awaitStall();
            Thread.sleep(500); // the relay fills; the native thread blocks in the callback
            assertEquals(1, running());
            token.cancel();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (running() > 0 && System.nanoTime() < deadline) {
                Thread.sleep(5);
            }
            assertEquals(0, running(), "a cancelled request must not wait for its stalled consumer");
            s.release.countDown();
            String response = s.done.get(TIMEOUT_S, TimeUnit.SECONDS);
            assertEquals("cancelled", message(response).finishReason(), json(response).path("usage").toString());
            assertEquals(message(response), assemble(s.chunks), "the chunks after the cancellation are delivered too");
        }

        // Going away: a stalled consumer whose write then fails (a client that disconnected).
        // What the example server's consumer throws when the client is gone.
        java.io.UncheckedIOException gone = new java.io.UncheckedIOException(new java.io.IOException("Broken pipe"));
        try (StalledStream lost = new StalledStream(longText(10, 1500), 1, new CancellationToken(), gone)) {
            lost.awaitStall();
            Thread.sleep(500);
            assertEquals(1, running(), "paused, not finished, while its consumer is stalled");
            long start = System.nanoTime();
            lost.release.countDown();
            ExecutionException failed =
                    assertThrows(ExecutionException.class, () -> lost.done.get(TIMEOUT_S, TimeUnit.SECONDS));
            assertSame(gone, failed.getCause());
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertEquals(1, lost.chunks.size(), "no chunk is delivered after the consumer failed");
            assertEquals(0, running());
            assertTrue(ms < 2000, "the call ended " + ms + " ms after its consumer failed");
        }
    }

    private interface Call<T> {
        T run() throws Exception;
    }

    private static <T> T inVirtualThread(Call<T> call) throws Exception {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread.ofVirtual().start(() -> {
            try {
                result.complete(call.run());
            } catch (Throwable t) {
                result.completeExceptionally(t);
            }
        });
        return result.get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    private static Throwable failureInVirtualThread(Call<?> call) throws Exception {
        java.util.concurrent.ExecutionException e = assertThrows(java.util.concurrent.ExecutionException.class,
                () -> inVirtualThread(call));
        return e.getCause();
    }
}
