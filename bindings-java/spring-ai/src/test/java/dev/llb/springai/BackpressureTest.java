package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.llb.ChatPool;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.reactivestreams.Subscription;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import reactor.core.publisher.BaseSubscriber;

/** A streamed call honours the subscriber's demand: no demand pauses the request, nothing piles up. */
class BackpressureTest {
    private static final long TIMEOUT_S = 120;
    private static final LlbChatOptions LONG = LlbChatOptions.builder().temperature(1.0).seed(7L).maxTokens(400).build();

    @TempDir
    static Path dir;

    @Test
    void aSubscriberWithoutDemandPausesItsRequestAndGetsEveryDeltaOnceItRequests() throws Exception {
        Prompt prompt = new Prompt("Tell me a long story.", LONG);
        String expected;
        try (LlbChatModel reference = model(ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 2))) {
            expected = reference.call(prompt).getResult().getOutput().getText();
        }
        try (ChatPool pool = ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 2); LlbChatModel llb = model(pool)) {
            Slow subscriber = new Slow(2);
            llb.stream(prompt).subscribe(subscriber);
            assertTrue(subscriber.first.await(TIMEOUT_S, TimeUnit.SECONDS), "no response arrived");
            // Flux.create's buffer would let the request run on to its 400 tokens meanwhile.
            Thread.sleep(1000);
            // The pool's other requests go on.
            assertFalse(llb.call(new Prompt("hi", LlbChatOptions.builder().maxTokens(16).build())).getResults().isEmpty());
            int held = tokensHeld(pool);
            Thread.sleep(500);
            assertEquals(held, tokensHeld(pool), "the request without demand decoded on");
            assertEquals(1, json(pool.stats()).path("running").asInt(), "it keeps its place, unfinished");
            assertEquals(2, subscriber.received.size(), "no more than requested");

            subscriber.request(Long.MAX_VALUE);
            assertTrue(subscriber.done.await(TIMEOUT_S, TimeUnit.SECONDS), "the stream did not complete");
            assertEquals(null, subscriber.error);
            StringBuilder text = new StringBuilder();
            subscriber.received.forEach(r -> text.append(r.getResult().getOutput().getText()));
            assertEquals(expected, text.toString(), "every delta arrived, in order, once requested");
            assertEquals(0, json(pool.stats()).path("running").asInt());
        }
    }

    @Test
    void closingThePoolEndsARequestWhoseSubscriberStoppedRequesting() throws Exception {
        ChatPool pool = ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 2);
        try (LlbChatModel llb = model(pool)) {
            Slow subscriber = new Slow(1);
            llb.stream(new Prompt("Tell me a long story.", LONG)).subscribe(subscriber);
            assertTrue(subscriber.first.await(TIMEOUT_S, TimeUnit.SECONDS), "no response arrived");
            assertTimeoutPreemptively(Duration.ofSeconds(30), pool::close, "close waited for a subscriber without demand");
        }
    }

    private static LlbChatModel model(ChatPool pool) {
        return LlbChatModel.builder().pool(pool).build();
    }

    private static JsonNode json(String s) {
        try {
            return new ObjectMapper().readTree(s);
        } catch (Exception e) {
            throw new AssertionError(s, e);
        }
    }

    /** The KV tokens the pool's sequences hold: grows with every token a running request decodes. */
    private static int tokensHeld(ChatPool pool) {
        int sum = 0;
        for (JsonNode n : json(pool.stats()).path("tokens_held")) {
            sum += n.asInt();
        }
        return sum;
    }

    /** Requests {@code initial} responses, then only what the test requests. */
    private static final class Slow extends BaseSubscriber<ChatResponse> {
        final List<ChatResponse> received = Collections.synchronizedList(new ArrayList<>());
        final CountDownLatch first = new CountDownLatch(1);
        final CountDownLatch done = new CountDownLatch(1);
        private final long initial;
        volatile Throwable error;

        Slow(long initial) {
            this.initial = initial;
        }

        @Override
        protected void hookOnSubscribe(Subscription subscription) {
            request(initial);
        }

        @Override
        protected void hookOnNext(ChatResponse value) {
            received.add(value);
            first.countDown();
        }

        @Override
        protected void hookOnError(Throwable throwable) {
            error = throwable;
        }

        @Override
        protected void hookFinally(reactor.core.publisher.SignalType type) {
            done.countDown();
        }
    }
}
