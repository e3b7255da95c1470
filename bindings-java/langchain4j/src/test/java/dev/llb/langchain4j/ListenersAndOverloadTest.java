package dev.llb.langchain4j;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.langchain4j.data.message.UserMessage;
import dev.langchain4j.exception.InvalidRequestException;
import dev.langchain4j.exception.RetriableException;
import dev.langchain4j.model.chat.listener.ChatModelErrorContext;
import dev.langchain4j.model.chat.listener.ChatModelListener;
import dev.langchain4j.model.chat.listener.ChatModelRequestContext;
import dev.langchain4j.model.chat.listener.ChatModelResponseContext;
import dev.langchain4j.model.chat.request.ChatRequest;
import dev.langchain4j.model.chat.response.ChatResponse;
import dev.langchain4j.model.chat.response.StreamingChatResponseHandler;
import dev.langchain4j.model.output.FinishReason;
import dev.llb.ChatPool;
import dev.llb.QueueFullException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * LangChain4j's listeners around both models (request; response with usage and finish reason;
 * error), and a pool at its bound: llb's {@code queue_full} is a {@link RetriableException}.
 */
class ListenersAndOverloadTest {
    @TempDir
    static Path dir;

    /** One request at a time, none waiting: a second one at once is queue_full. */
    static ChatPool pool;

    @BeforeAll
    static void open() {
        pool = ChatPool.open(Fixtures.config(Fixtures.toolModel(dir)), 1, 0);
    }

    @AfterAll
    static void close() {
        pool.close();
    }

    static final class Recorder implements ChatModelListener {
        final List<Object> events = Collections.synchronizedList(new ArrayList<>());

        @Override
        public void onRequest(ChatModelRequestContext context) {
            events.add(context.chatRequest());
        }

        @Override
        public void onResponse(ChatModelResponseContext context) {
            events.add(context.chatResponse());
        }

        @Override
        public void onError(ChatModelErrorContext context) {
            events.add(context.error());
        }
    }

    static ChatRequest hi(int maxTokens) {
        return ChatRequest.builder().messages(UserMessage.from("Hi")).maxOutputTokens(maxTokens).build();
    }

    static void checkResponse(Recorder r, ChatRequest sent) {
        assertEquals(2, r.events.size(), r.events.toString());
        assertEquals(sent.messages(), assertInstanceOf(ChatRequest.class, r.events.get(0)).messages());
        ChatResponse response = assertInstanceOf(ChatResponse.class, r.events.get(1));
        assertEquals(FinishReason.LENGTH, response.finishReason());
        assertEquals(5, response.tokenUsage().outputTokenCount());
        assertTrue(response.tokenUsage().inputTokenCount() > 0, response.tokenUsage().toString());
        assertInstanceOf(LlbTokenUsage.class, response.tokenUsage());
    }

    @Test
    void listenersSeeEachRequestItsResponseWithUsageAndFinishReasonAndErrors() throws Exception {
        Recorder recorder = new Recorder();
        try (LlbChatModel model = LlbChatModel.builder().pool(pool).listeners(List.of(recorder)).build();
                LlbStreamingChatModel streaming = LlbStreamingChatModel.builder().pool(pool).listeners(List.of(recorder)).build()) {
            ChatRequest request = hi(5);
            model.chat(request);
            checkResponse(recorder, request);

            recorder.events.clear();
            CompletableFuture<ChatResponse> done = new CompletableFuture<>();
            streaming.chat(request, handler(done));
            done.get(60, TimeUnit.SECONDS);
            for (int i = 0; i < 100 && recorder.events.size() < 2; i++) {
                Thread.sleep(10);
            }
            checkResponse(recorder, request);

            // An error llb reports: the listener's onError gets the LangChain4j exception.
            recorder.events.clear();
            ChatRequest bad = ChatRequest.builder().messages(UserMessage.from("Hi")).maxOutputTokens(0).build();
            assertThrows(InvalidRequestException.class, () -> model.chat(bad));
            assertEquals(2, recorder.events.size(), recorder.events.toString());
            assertInstanceOf(InvalidRequestException.class, recorder.events.get(1));
        }
    }

    @Test
    void aPoolAtItsBoundIsARetriableExceptionForBothModels() throws Exception {
        CountDownLatch running = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        Thread holder = Thread.ofPlatform().start(() -> pool.stream(
                "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story.\"}],\"max_tokens\":64}", chunk -> {
                    running.countDown();
                    try {
                        release.await();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }));
        // maxRetries(0): the refusal itself (RetriesAndTimeoutTest retries it).
        try (LlbChatModel model = LlbChatModel.builder().pool(pool).maxRetries(0).build();
                LlbStreamingChatModel streaming = LlbStreamingChatModel.builder().pool(pool).maxRetries(0).build()) {
            assertTrue(running.await(60, TimeUnit.SECONDS));
            RetriableException e = assertThrows(RetriableException.class, () -> model.chat(hi(5)));
            assertInstanceOf(QueueFullException.class, e.getCause());
            assertTrue(e.getMessage().startsWith("llb queue_full"), e.getMessage());

            CompletableFuture<ChatResponse> done = new CompletableFuture<>();
            streaming.chat(hi(5), handler(done));
            Throwable streamed = assertThrows(java.util.concurrent.ExecutionException.class,
                    () -> done.get(60, TimeUnit.SECONDS)).getCause();
            assertInstanceOf(RetriableException.class, streamed);

            release.countDown();
            holder.join(60_000);
            assertNotNull(model.chat(hi(5)), "once the pool has room, the same call succeeds");
        } finally {
            release.countDown();
        }
    }

    static StreamingChatResponseHandler handler(CompletableFuture<ChatResponse> done) {
        return new StreamingChatResponseHandler() {
            @Override
            public void onPartialResponse(String partialResponse) {}

            @Override
            public void onCompleteResponse(ChatResponse completeResponse) {
                done.complete(completeResponse);
            }

            @Override
            public void onError(Throwable error) {
                done.completeExceptionally(error);
            }
        };
    }
}
