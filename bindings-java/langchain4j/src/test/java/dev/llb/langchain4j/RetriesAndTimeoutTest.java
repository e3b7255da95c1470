package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.exception.RetriableException;
import dev.langchain4j.exception.TimeoutException;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.llb.CancellationToken;
import dev.llb.ChatPool;
import dev.llb.Deadline;
import dev.llb.QueueFullException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code maxRetries} and {@code timeout}, as LangChain4j's own builders have them: a refused call
 * ({@code queue_full}) is retried; a timeout cancels the request in the pool and frees its place.
 */
class RetriesAndTimeoutTest {
    @TempDir
    static Path dir;
    static ChatPool pool;

    @BeforeAll
    static void open() {
        pool = ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 1, 0);
    }

    @AfterAll
    static void close() {
        pool.close();
    }

    static ChatRequest story(int maxTokens) {
        return ChatRequest.builder().messages(UserMessage.from("Tell a long story.")).maxOutputTokens(maxTokens).build();
    }

    static int busy() {
        JsonNode stats = Mapping.parse(pool.stats());
        return stats.path("running").asInt() + stats.path("queued").asInt();
    }

    /** Holds the pool's one place with a stream whose consumer waits for {@code release}. */
    static Thread hold(CountDownLatch running, CountDownLatch release) {
        return Thread.ofPlatform().start(() -> pool.stream(
                "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story.\"}],\"max_tokens\":8}", chunk -> {
                    running.countDown();
                    try {
                        release.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }));
    }

    @Test
    void aRefusedCallIsRetriedUntilThePoolHasRoom() throws Exception {
        CountDownLatch running = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        Thread holder = hold(running, release);
        try (LlbChatModel retrying = LlbChatModel.builder().pool(pool).maxRetries(3).build();
                LlbChatModel once = LlbChatModel.builder().pool(pool).maxRetries(0).build()) {
            assertTrue(running.await(60, TimeUnit.SECONDS));
            RetriableException refused = assertThrows(RetriableException.class, () -> once.chat(story(4)));
            assertInstanceOf(QueueFullException.class, refused.getCause());
            CompletableFuture<ChatResponse> retried = CompletableFuture.supplyAsync(() -> retrying.chat(story(4)));
            Thread.sleep(200); // the first try is refused; LangChain4j's backoff waits 500 ms before the next
            release.countDown();
            assertNotNull(retried.get(60, TimeUnit.SECONDS).aiMessage());
        } finally {
            release.countDown();
            holder.join(60_000);
        }
    }

    @Test
    void aTimeoutEndsALongGenerationAndFreesItsPlace() throws Exception {
        try (LlbChatModel chat = LlbChatModel.builder().pool(pool).timeout(Duration.ofMillis(200)).build();
                LlbStreamingChatModel streaming = LlbStreamingChatModel.builder().pool(pool).timeout(Duration.ofMillis(200)).build()) {
            chat.chat(story(1)); // warm
            long start = System.nanoTime();
            TimeoutException e = assertThrows(TimeoutException.class, () -> chat.chat(story(100_000)));
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(ms >= 200 && ms < 300, "chat ended after " + ms + " ms: " + e.getMessage());
            System.out.println("timeout(200 ms): the chat ended after " + ms + " ms");
            assertEquals(0, busy(), "the pool is idle at once: " + pool.stats());

            CompletableFuture<ChatResponse> done = new CompletableFuture<>();
            start = System.nanoTime();
            streaming.chat(story(100_000), ListenersAndOverloadTest.handler(done));
            Throwable streamed = assertThrows(ExecutionException.class, () -> done.get(60, TimeUnit.SECONDS)).getCause();
            ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertInstanceOf(TimeoutException.class, streamed);
            assertTrue(ms >= 200 && ms < 300, "stream ended after " + ms + " ms");
            System.out.println("timeout(200 ms): the stream ended after " + ms + " ms");
            assertEquals(0, busy(), "the pool is idle at once: " + pool.stats());
        }
    }

    /**
     * A call still waiting for the pool's one place when its 200 ms pass: llb's {@code queued}
     * progress events (every 50 ms) let its timeout cancel it there, so the chat and the stream
     * fail with {@code TimeoutException} within 300 ms and leave the queue at once, while the
     * request holding the place runs on. (Before llb sent them, the call ended only when the
     * holder let go: here after the holder's 5 s safety limit.)
     */
    @Test
    void aTimeoutEndsACallStillQueuedAndFreesItsQueuePlace() throws Exception {
        try (ChatPool queueing = ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 1, 1);
                LlbChatModel chat = LlbChatModel.builder().pool(queueing).maxRetries(0)
                        .timeout(Duration.ofMillis(200)).build();
                LlbStreamingChatModel streaming = LlbStreamingChatModel.builder().pool(queueing).maxRetries(0)
                        .timeout(Duration.ofMillis(200)).build()) {
            chat.chat(story(1)); // warm both paths
            CompletableFuture<ChatResponse> warm = new CompletableFuture<>();
            streaming.chat(story(1), ListenersAndOverloadTest.handler(warm));
            warm.get(60, TimeUnit.SECONDS);

            CancellationToken stopHolder = new CancellationToken();
            Deadline safety = Deadline.after(Duration.ofSeconds(5), stopHolder);
            AtomicInteger chunks = new AtomicInteger();
            CompletableFuture<String> holder = new CompletableFuture<>();
            Thread.ofPlatform().start(() -> {
                try {
                    holder.complete(queueing.stream(
                            "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a long story.\"}],\"max_tokens\":100000}",
                            c -> chunks.incrementAndGet(), stopHolder));
                } catch (Throwable t) {
                    holder.completeExceptionally(t);
                }
            });
            try {
                for (int i = 0; i < 60_000 && chunks.get() == 0; i++) {
                    Thread.sleep(1);
                }
                assertTrue(chunks.get() > 0, "the holder streams: " + queueing.stats());

                long start = System.nanoTime();
                TimeoutException e = assertThrows(TimeoutException.class, () -> chat.chat(story(8)));
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                System.out.println("timeout(200 ms), queued: the chat ended after " + ms + " ms");
                assertTrue(ms >= 200 && ms < 500, "queued chat ended after " + ms + " ms: " + e.getMessage());
                checkQueueFreedHolderRunning(queueing);

                CompletableFuture<ChatResponse> done = new CompletableFuture<>();
                start = System.nanoTime();
                streaming.chat(story(8), ListenersAndOverloadTest.handler(done));
                Throwable streamed = assertThrows(ExecutionException.class, () -> done.get(60, TimeUnit.SECONDS)).getCause();
                ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                System.out.println("timeout(200 ms), queued: the stream ended after " + ms + " ms");
                assertInstanceOf(TimeoutException.class, streamed);
                assertTrue(ms >= 200 && ms < 500, "queued stream ended after " + ms + " ms");
                checkQueueFreedHolderRunning(queueing);

                int seen = chunks.get();
                for (int i = 0; i < 5_000 && chunks.get() == seen; i++) {
                    Thread.sleep(1);
                }
                assertTrue(chunks.get() > seen, "the holder still generates");
            } finally {
                stopHolder.cancel();
                safety.close();
            }
            assertEquals("cancelled", Mapping.parse(holder.get(60, TimeUnit.SECONDS))
                    .path("choices").path(0).path("finish_reason").asText());
        }
    }

    private static void checkQueueFreedHolderRunning(ChatPool queueing) {
        String stats = queueing.stats();
        JsonNode counts = Mapping.parse(stats);
        assertEquals(0, counts.path("queued").asInt(), "the timed-out call left the queue at once: " + stats);
        assertEquals(1, counts.path("running").asInt(), "the holder runs on: " + stats);
    }
}
