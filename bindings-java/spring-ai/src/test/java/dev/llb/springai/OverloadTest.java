package dev.llb.springai;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.llb.QueueFullException;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.TransientAiException;
import reactor.core.Disposable;

/** A model whose pool is at its bound: llb's {@code queue_full} is Spring AI's {@link TransientAiException}. */
class OverloadTest {
    @TempDir
    static Path dir;

    @Test
    void aPoolAtItsBoundIsATransientAiExceptionForCallStreamAndChatClient() throws Exception {
        try (LlbChatModel llb = LlbChatModel.builder().config(Fixtures.config(Fixtures.toolModel(dir))).parallel(1).maxQueue(0)
                .defaultOptions(LlbChatOptions.builder().maxTokens(64).build()).build()) {
            CountDownLatch running = new CountDownLatch(1);
            CountDownLatch release = new CountDownLatch(1);
            // One stream holds the only slot: its consumer waits (on the stream's own thread).
            Disposable holder = llb.stream(new Prompt("Tell a story.")).doOnNext(r -> {
                running.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }).subscribe();
            try {
                assertTrue(running.await(60, TimeUnit.SECONDS));
                TransientAiException called = assertThrows(TransientAiException.class, () -> llb.call(new Prompt("hi")));
                assertInstanceOf(QueueFullException.class, called.getCause());
                assertTrue(called.getMessage().startsWith("llb queue_full"), called.getMessage());
                Throwable streamed = assertThrows(TransientAiException.class, () -> llb.stream(new Prompt("hi")).blockLast());
                assertInstanceOf(QueueFullException.class, streamed.getCause());
                assertThrows(TransientAiException.class, () -> ChatClient.create(llb).prompt().user("hi").call().content());
            } finally {
                release.countDown();
            }
            for (int i = 0; i < 600 && !holder.isDisposed(); i++) {
                Thread.sleep(10);
            }
            assertNotNull(llb.call(new Prompt("hi")), "once the pool has room, the same call succeeds");
        }
    }
}
