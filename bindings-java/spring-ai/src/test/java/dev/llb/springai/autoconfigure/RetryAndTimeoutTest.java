package dev.llb.springai.autoconfigure;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.CancellationToken;
import dev.llb.Deadline;
import dev.llb.QueueFullException;
import dev.llb.springai.LlbChatModel;
import dev.llb.springai.LlbChatOptions;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.retry.TransientAiException;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;
import org.springframework.core.retry.RetryPolicy;
import org.springframework.core.retry.RetryTemplate;

/**
 * Retries and timeouts in Boot: the application's {@link RetryTemplate} bean retries llb's
 * {@code queue_full} (a {@link TransientAiException}); {@code llb.chat.timeout} cancels a long
 * generation in the pool.
 */
class RetryAndTimeoutTest {
    @TempDir
    static Path dir;
    static Path model;

    @BeforeAll
    static void fixture() {
        model = dev.llb.springai.FixturesAccess.toolModel(dir);
    }

    ApplicationContextRunner runner(RetryTemplate template) {
        ApplicationContextRunner r = new ApplicationContextRunner()
                .withConfiguration(AutoConfigurations.of(LlbChatAutoConfiguration.class))
                .withPropertyValues("llb.chat.model-path=" + model, "llb.chat.threads=1", "llb.chat.context-size=2048",
                        "llb.chat.parallel=1", "llb.chat.max-queue=0", "llb.chat.options.max-tokens=48");
        return template == null ? r : r.withBean(RetryTemplate.class, () -> template);
    }

    /** Spring Framework's template as Spring AI's retry auto-configuration builds it: TransientAiException only. */
    static RetryTemplate retrying() {
        return new RetryTemplate(RetryPolicy.builder().maxRetries(200).includes(TransientAiException.class)
                .delay(Duration.ofMillis(20)).build());
    }

    @Test
    void eightConcurrentCallsAllSucceedThroughTheRetryTemplate() {
        runner(retrying()).run(context -> {
            List<Object> outcomes = eightCalls(context.getBean(LlbChatModel.class));
            outcomes.forEach(o -> assertInstanceOf(ChatResponse.class, o, String.valueOf(o)));
        });
    }

    @Test
    void withANoRetryTemplateSevenOfEightFailAsTransient() {
        RetryTemplate none = new RetryTemplate(RetryPolicy.withMaxRetries(0));
        runner(none).run(context -> {
            List<Object> outcomes = eightCalls(context.getBean(LlbChatModel.class));
            assertInstanceOf(ChatResponse.class, outcomes.get(0));
            for (Object o : outcomes.subList(1, 8)) {
                TransientAiException e = assertInstanceOf(TransientAiException.class, o, String.valueOf(o));
                assertInstanceOf(QueueFullException.class, e.getCause());
            }
        });
    }

    @Test
    void aNonTransientErrorIsNotRetried() {
        int[] attempts = {0};
        RetryTemplate counting = retrying();
        counting.setRetryListener(new org.springframework.core.retry.RetryListener() {
            @Override
            public void beforeRetry(RetryPolicy policy, org.springframework.core.retry.Retryable<?> retryable) {
                attempts[0]++;
            }
        });
        runner(counting).run(context -> {
            LlbChatModel llb = context.getBean(LlbChatModel.class);
            // llb refuses a temperature below 0 (invalid_argument): not transient.
            assertThrows(NonTransientAiException.class,
                    () -> llb.call(new Prompt("hi", LlbChatOptions.builder().temperature(-1.0).build())));
            assertEquals(0, attempts[0]);
        });
    }

    /**
     * Call 0 starts and holds the pool's one place (a long reply); once llb counts it running,
     * calls 1 to 7 start at once. The outcomes in order: a response or the exception thrown.
     */
    static List<Object> eightCalls(LlbChatModel llb) throws Exception {
        ExecutorService threads = Executors.newFixedThreadPool(8);
        try {
            List<Future<Object>> futures = new ArrayList<>();
            LlbChatOptions longReply = LlbChatOptions.builder().maxTokens(400).build();
            futures.add(threads.submit(() -> outcome(llb, longReply)));
            for (int i = 0; i < 3000 && running(llb) == 0; i++) {
                Thread.sleep(1);
            }
            assertEquals(1, running(llb), llb.pool().stats());
            CountDownLatch go = new CountDownLatch(1);
            for (int i = 1; i < 8; i++) {
                futures.add(threads.submit(() -> {
                    go.await();
                    return outcome(llb, LlbChatOptions.builder().maxTokens(8).build());
                }));
            }
            go.countDown();
            List<Object> outcomes = new ArrayList<>();
            for (Future<Object> f : futures) {
                outcomes.add(f.get(120, TimeUnit.SECONDS));
            }
            return outcomes;
        } finally {
            threads.shutdownNow();
        }
    }

    private static Object outcome(LlbChatModel llb, LlbChatOptions options) {
        try {
            return llb.call(new Prompt("Tell a long story.", options));
        } catch (RuntimeException e) {
            return e;
        }
    }

    static int running(LlbChatModel llb) throws Exception {
        JsonNode stats = new ObjectMapper().readTree(llb.pool().stats());
        return stats.path("running").asInt() + stats.path("queued").asInt();
    }

    @Test
    void aTimeoutEndsALongGenerationAndFreesItsPlace() {
        runner(null).withPropertyValues("llb.chat.timeout=200ms").run(context -> {
            LlbChatModel llb = context.getBean(LlbChatModel.class);
            // Warm both paths: the first stream of a JVM loads Reactor's classes and starts its scheduler.
            llb.call(new Prompt("warm up", LlbChatOptions.builder().maxTokens(1).build()));
            llb.stream(new Prompt("warm up", LlbChatOptions.builder().maxTokens(1).build())).blockLast();
            for (boolean stream : new boolean[] {false, true}) {
                Prompt prompt = new Prompt("Tell a long story.", LlbChatOptions.builder().maxTokens(100_000).build());
                long start = System.nanoTime();
                NonTransientAiException e = assertThrows(NonTransientAiException.class,
                        () -> {
                            if (stream) {
                                llb.stream(prompt).blockLast();
                            } else {
                                llb.call(prompt);
                            }
                        });
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                assertTrue(e.getMessage().contains("timeout"), e.getMessage());
                System.out.println("llb.chat.timeout=200ms: the " + (stream ? "stream" : "call") + " ended after " + ms + " ms");
                assertTrue(ms >= 200 && ms < 300, (stream ? "stream" : "call") + " ended after " + ms + " ms");
                assertEquals(0, running(llb), "the pool is idle at once: " + llb.pool().stats());
            }
        });
    }

    /**
     * A call and a stream still waiting for the pool's one place ({@code max-queue=1}) when
     * their 200 ms pass: llb's {@code queued} progress events (every 50 ms) let the timeout cancel
     * them there, so each fails within 300 ms and leaves the queue at once, while the request
     * holding the place runs on. (Before llb sent them, they ended only when the holder let go:
     * here after the holder's 5 s safety limit.)
     */
    @Test
    void aTimeoutEndsACallStillQueuedAndFreesItsQueuePlace() {
        runner(null).withPropertyValues("llb.chat.max-queue=1", "llb.chat.timeout=200ms").run(context -> {
            LlbChatModel llb = context.getBean(LlbChatModel.class);
            llb.call(new Prompt("warm up", LlbChatOptions.builder().maxTokens(1).build()));
            llb.stream(new Prompt("warm up", LlbChatOptions.builder().maxTokens(1).build())).blockLast();

            CancellationToken stopHolder = new CancellationToken();
            Deadline safety = Deadline.after(Duration.ofSeconds(5), stopHolder);
            AtomicInteger chunks = new AtomicInteger();
            CompletableFuture<String> holder = new CompletableFuture<>();
            Thread.ofPlatform().start(() -> {
                try {
                    holder.complete(llb.pool().stream(
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
                assertTrue(chunks.get() > 0, "the holder streams: " + llb.pool().stats());
                for (boolean stream : new boolean[] {false, true}) {
                    Prompt prompt = new Prompt("Hi", LlbChatOptions.builder().maxTokens(8).build());
                    long start = System.nanoTime();
                    NonTransientAiException e = assertThrows(NonTransientAiException.class, () -> {
                        if (stream) {
                            llb.stream(prompt).blockLast();
                        } else {
                            llb.call(prompt);
                        }
                    });
                    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                    String what = stream ? "stream" : "call";
                    System.out.println("llb.chat.timeout=200ms, queued: the " + what + " ended after " + ms + " ms");
                    assertTrue(e.getMessage().contains("timeout"), e.getMessage());
                    assertTrue(ms >= 200 && ms < 500, "queued " + what + " ended after " + ms + " ms");
                    JsonNode stats = new ObjectMapper().readTree(llb.pool().stats());
                    assertEquals(0, stats.path("queued").asInt(), "the " + what + " left the queue at once: " + stats);
                    assertEquals(1, stats.path("running").asInt(), "the holder runs on: " + stats);
                }
                int seen = chunks.get();
                for (int i = 0; i < 5_000 && chunks.get() == seen; i++) {
                    Thread.sleep(1);
                }
                assertTrue(chunks.get() > seen, "the holder still generates");
            } finally {
                stopHolder.cancel();
                safety.close();
            }
            assertEquals("cancelled", new ObjectMapper().readTree(holder.get(60, TimeUnit.SECONDS))
                    .path("choices").path(0).path("finish_reason").asText());
        });
    }
}
