package dev.llb;

import static dev.llb.Completions.assemble;
import static dev.llb.Completions.assertOneValidToolCall;
import static dev.llb.Completions.json;
import static dev.llb.Completions.message;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** A pool from many threads: concurrent requests, one cancelled, queue_full (on the calling thread), close while running. */
class ChatPoolTest {
    private static final long TIMEOUT_S = 120;

    @TempDir
    static Path dir;
    static Path tools;
    ExecutorService threads;

    @BeforeAll
    static void fixture() {
        tools = Fixtures.toolModel(dir);
    }

    @BeforeEach
    void start() {
        threads = Executors.newCachedThreadPool();
    }

    @AfterEach
    void stop() throws InterruptedException {
        threads.shutdownNow();
        assertTrue(threads.awaitTermination(TIMEOUT_S, TimeUnit.SECONDS));
    }

    private static ChatConfig config() {
        return ChatConfig.of(tools).withThreads(1).withContextSize(4096);
    }

    @Test
    void eightThreadsGetTheSameCallsAsOneEngineAndShareThePrefix() throws Exception {
        String expected;
        try (ChatEngine engine = ChatEngine.open(Fixtures.config(tools))) {
            expected = message(engine.infer(Requests.toolNamed())).toolCalls().get(0).arguments();
        }
        try (ChatPool pool = ChatPool.open(config(), 4)) {
            List<Future<String>> results = new ArrayList<>();
            List<List<String>> streams = new ArrayList<>();
            for (int i = 0; i < 8; i++) {
                List<String> chunks = Collections.synchronizedList(new ArrayList<>());
                streams.add(chunks);
                boolean stream = i % 2 == 0;
                results.add(threads.submit(() -> stream ? pool.stream(Requests.toolNamed(), chunks::add)
                        : pool.infer(Requests.toolNamed())));
            }
            int cached = 0;
            for (int i = 0; i < 8; i++) {
                String completion = results.get(i).get(TIMEOUT_S, TimeUnit.SECONDS);
                Completions.Message m = message(completion);
                assertEquals(expected, assertOneValidToolCall(m).arguments(), "request " + i);
                if (i % 2 == 0) {
                    assertEquals(m, assemble(streams.get(i)), "stream " + i + " rebuilds its message");
                }
                cached += json(completion).path("usage").path("prompt_tokens_details").path("cached_tokens").asInt();
            }
            // Eight identical prompts: all but the first evaluation are copies.
            assertTrue(cached > 0, "no prompt prefix was shared across the 8 requests");
            assertEquals("pool_stats", json(pool.stats()).path("type").asText());
        }
    }

    @Test
    void cancellingOneLeavesTheOthersComplete() throws Exception {
        try (ChatPool pool = ChatPool.open(config(), 4)) {
            CancellationToken cancel = new CancellationToken();
            CountDownLatch started = new CountDownLatch(1);
            Future<String> cancelled = threads.submit(() -> pool.stream(Requests.text(400), c -> started.countDown(), cancel));
            List<Future<String>> others = new ArrayList<>();
            for (int i = 0; i < 3; i++) {
                others.add(threads.submit(() -> pool.infer(Requests.toolRequired())));
            }
            assertTrue(started.await(TIMEOUT_S, TimeUnit.SECONDS));
            cancel.cancel();
            assertEquals("cancelled", json(cancelled.get(TIMEOUT_S, TimeUnit.SECONDS))
                    .path("choices").path(0).path("finish_reason").asText());
            for (Future<String> f : others) {
                assertOneValidToolCall(message(f.get(TIMEOUT_S, TimeUnit.SECONDS)));
            }
        }
    }

    @Test
    void pastItsQueueAPoolAnswersQueueFull() throws Exception {
        try (ChatPool pool = ChatPool.open(config(), 1, 0)) {
            pool.throwIfFull(); // empty: room for one
            CountDownLatch streaming = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            Future<String> first = threads.submit(() -> pool.stream(Requests.text(8), c -> {
                streaming.countDown();
                await(release);
            }));
            try {
                assertTrue(streaming.await(TIMEOUT_S, TimeUnit.SECONDS));
                long refusedIn = System.nanoTime();
                QueueFullException e = assertThrows(QueueFullException.class, () -> pool.infer(Requests.toolRequired()));
                refusedIn = System.nanoTime() - refusedIn;
                assertEquals("queue_full", e.code());
                assertTrue(e.isTransient(), "queue_full is worth a retry");
                assertTrue(refusedIn < 1_000_000_000L, "refused at once, not queued: " + refusedIn / 1e6 + " ms");
                // llb's counts showed the pool full: the binding refused before llb_pool_infer (no llb JSON),
                // in llb's words.
                assertNull(e.json(), e.toString());
                assertTrue(e.getMessage().startsWith("1 requests are running and 0 are waiting (n_parallel 1, max_queue 0)"),
                        e.getMessage());
                assertThrows(QueueFullException.class, () -> pool.stream(Requests.toolRequired(), c -> { }));
                QueueFullException early = assertThrows(QueueFullException.class, pool::throwIfFull);
                assertEquals(e.getMessage(), early.getMessage());
                // From a virtual thread too, and without the hop to a platform thread (NativeThreads)
                // that a call which reaches llb takes: the refusal is made on the calling thread.
                Throwable[] fromVirtual = new Throwable[1];
                Thread.ofVirtual().start(() -> {
                    try {
                        pool.stream(Requests.toolRequired(), c -> { });
                    } catch (Throwable t) {
                        fromVirtual[0] = t;
                    }
                }).join();
                assertTrue(fromVirtual[0] instanceof QueueFullException, String.valueOf(fromVirtual[0]));
                assertFalse(Arrays.stream(fromVirtual[0].getStackTrace())
                        .anyMatch(f -> f.getClassName().startsWith(NativeThreads.class.getName())),
                        () -> "refused on a platform thread: " + Arrays.toString(fromVirtual[0].getStackTrace()));
            } finally {
                release.countDown(); // a failed check must not leave close() waiting for the first
            }
            first.get(TIMEOUT_S, TimeUnit.SECONDS);
            pool.throwIfFull(); // the first left: room again
            assertOneValidToolCall(message(pool.infer(Requests.toolRequired())));
        }
    }

    /**
     * A request waiting for the pool's one place gets llb's {@code {"type":"progress","stage":"queued"}}
     * events (every 50 ms): its {@link Deadline} cancels it there, so it ends within ~50 ms of its
     * time and leaves the queue at once, while the holder runs on. From a platform thread (the
     * dispatcher's own token) and from a virtual thread (the token NativeThreads relays).
     */
    @Test
    void aDeadlineCancelsARequestStillInTheQueue() throws Exception {
        try (ChatPool pool = ChatPool.open(config(), 1, 1)) {
            CancellationToken stopHolder = new CancellationToken();
            AtomicInteger chunks = new AtomicInteger();
            // The safety net: without llb's queued events the queued call would return only when
            // the holder ends, here after 5 s (the assertions below then fail, they do not hang).
            Deadline safety = Deadline.after(Duration.ofSeconds(5), stopHolder);
            try {
                Future<String> holder = threads.submit(() -> pool.stream(Requests.text(100_000),
                        c -> chunks.incrementAndGet(), stopHolder));
                for (int i = 0; i < 60_000 && chunks.get() == 0; i++) {
                    Thread.sleep(1);
                }
                assertTrue(chunks.get() > 0, "the holder streams: " + pool.stats());
                for (boolean virtual : new boolean[] {false, true}) {
                    String[] completion = new String[1];
                    long[] ms = new long[1];
                    boolean[] expired = new boolean[1];
                    Runnable queued = () -> {
                        CancellationToken cancel = new CancellationToken();
                        try (Deadline deadline = Deadline.after(Duration.ofMillis(200), cancel)) {
                            long start = System.nanoTime();
                            completion[0] = pool.infer(Requests.text(8), cancel);
                            ms[0] = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                            expired[0] = deadline.expired();
                        }
                    };
                    (virtual ? Thread.ofVirtual() : Thread.ofPlatform()).start(queued).join();
                    String from = virtual ? "virtual thread" : "platform thread";
                    System.out.println("Deadline 200 ms on a queued request (" + from + "): returned after " + ms[0] + " ms");
                    assertEquals("cancelled", json(completion[0]).path("choices").path(0).path("finish_reason").asText(),
                            completion[0]);
                    assertTrue(expired[0], from);
                    assertTrue(ms[0] >= 200 && ms[0] < 500, from + ": returned after " + ms[0] + " ms");
                    String stats = pool.stats();
                    assertEquals(0, json(stats).path("queued").asInt(), "its place is free at once: " + stats);
                    assertEquals(1, json(stats).path("running").asInt(), "the holder runs on: " + stats);
                }
                int seen = chunks.get();
                for (int i = 0; i < 5_000 && chunks.get() == seen; i++) {
                    Thread.sleep(1);
                }
                assertTrue(chunks.get() > seen, "the holder still generates");
                stopHolder.cancel();
                assertEquals("cancelled", json(holder.get(TIMEOUT_S, TimeUnit.SECONDS))
                        .path("choices").path(0).path("finish_reason").asText());
            } finally {
                safety.close();
                stopHolder.cancel();
            }
        }
    }

    @Test
    void closeCancelsRunningCallsAndWaitsForThem() throws Exception {
        ChatPool pool = ChatPool.open(config(), 2);
        List<CountDownLatch> started = List.of(new CountDownLatch(1), new CountDownLatch(1));
        List<Future<String>> running = new ArrayList<>();
        for (CountDownLatch first : started) {
            // One latch per call: two chunks of one stream must not stand for both having started.
            running.add(threads.submit(() -> pool.stream(Requests.text(2000), c -> first.countDown())));
        }
        for (CountDownLatch first : started) {
            assertTrue(first.await(TIMEOUT_S, TimeUnit.SECONDS));
        }
        pool.close();
        for (Future<String> f : running) {
            assertEquals("cancelled", json(f.get(TIMEOUT_S, TimeUnit.SECONDS))
                    .path("choices").path(0).path("finish_reason").asText());
        }
        assertThrows(IllegalStateException.class, () -> pool.infer(Requests.toolRequired()));
        assertThrows(IllegalStateException.class, pool::throwIfFull);
        pool.close(); // idempotent
    }

    @Test
    void badPoolConfigsAreLlbErrors() {
        LlbException e = assertThrows(LlbException.class, () -> ChatPool.open(config(), 0));
        assertEquals("invalid_argument", e.code());
        assertFalse(e.isTransient(), "a bad config needs a change, not a retry");
        assertTrue(e.getMessage().contains("n_parallel"), e.getMessage());
        assertThrows(ToolsUnsupportedException.class, () -> ChatPool.open(ChatConfig.of(Fixtures.plainModel(dir)), 2));
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
